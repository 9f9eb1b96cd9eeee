"""A cell's record from its processes' outcome and what the runner measured around them; its one-line summary."""

from __future__ import annotations

import sys
import time

from loaderbench.core.provenance import collect
from loaderbench.core.records import make_record, warning_lines
from loaderbench.core.registry import tierless

from ..contract import Outcome
from . import contention, telemetry, tier_run
from .job import Around, CellJob, Scratch


def build_record(job: CellJob, manifest_data: dict, result: Outcome, around: Around) -> dict:
    """The cell's record from what its processes reported and what the runner measured around them: rereads and the
    device's share of the reads, telemetry (and where its timeline goes), contention, stacks of a stalled rank,
    provenance."""
    spec, tier = job.spec, around.tier
    metrics = result.metrics or {}
    if not tierless(spec.loader):
        tier_run.check_rereads(manifest_data, tier, metrics)
    marks = metrics.get("marks")
    samples = around.samples
    telemetry_summary = telemetry.summarize(samples, marks) if samples is not None else {"off": "telemetry_hz is 0"}
    if result.metrics is not None and not tierless(spec.loader):
        tier_run.device_read_share(spec, manifest_data, tier, metrics, telemetry_summary)
    parts = {}
    if around.contention is not None:  # foreign CPU and GPU use during the window (contention.py)
        parts["contention"] = contention.summarize(
            around.contention, marks, job.host.contention_cpu_cores, job.host.contention_gpu_processes
        )
        if (warn := contention.warning(parts["contention"])) and result.metrics is not None:
            metrics.setdefault("warnings", []).append(warn)
    if job.timeline is not None:  # written after the record (`write_outputs`)
        telemetry_summary["timeline"] = str(job.timeline)
    if job.trace is not None:  # written after the record too
        telemetry_summary["trace"] = str(job.trace)
    if around.stacks:
        parts["stacks"] = around.stacks
        for rank, text in around.stacks.items():
            print(f"--- Python stacks of rank {rank} ---\n{text}", file=sys.stderr, flush=True)
    ended = time.time()
    return make_record(
        spec,
        result.status,
        metrics=result.metrics,
        reason=result.reason,
        detail=result.detail,
        started_at=around.started,
        wall_s=ended - around.started,
        manifest_sha256=manifest_data.get("sha256"),
        tier=tier,
        telemetry=telemetry_summary,
        provenance=collect(spec.tier_path, result.runtime),
        phases_s=phases(around.started, around.spawned, marks, around.exited, ended),
        process_start=around.process_start,
        **parts,
    )


def read_outcome(scratch: Scratch, culprit: int | None, why: str | None, absent: bool) -> Outcome:
    """What the measuring processes reported (entry.outcome), or, where they could not (killed, stalled, timed out,
    host busy, tier not prepared), the runner's own failed or skipped outcome with its reason."""
    rank0 = Outcome.read(scratch.outcome)
    if culprit:
        # another rank failed first; what rank 0 then reported (a broken collective) is a consequence, not the cause
        own = Outcome.read(scratch.rank_outcome(culprit))
        if own is not None:
            return own
        consequence = rank0.reason if rank0 else None
        return Outcome("failed", why, detail=f"rank 0 then: {consequence}" if consequence else None)
    if rank0 and (why is None or rank0.status != "ok"):
        return rank0
    if absent:
        return Outcome("skipped", why)
    return Outcome("failed", why or "measurement process wrote no record")


def phases(started: float, spawned: float | None, marks: dict | None, exited: float | None, ended: float) -> dict:
    """Where the cell's wall time went (seconds), from the runner's clock and the measuring process's marks: before
    the process (lock, eviction, mount), its start-up (interpreter, imports), setup, warm-up, the window, its teardown
    (workers stopped, record written, exit), and the runner's own close (telemetry, record)."""
    out = {"wall": ended - started}
    if spawned is None:
        return out
    out["before_process"] = spawned - started
    m = marks or {}
    points = [
        ("startup", m.get("setup_start")),
        ("setup", m.get("warmup_start")),
        ("warmup", m.get("window_start")),
        ("window", m.get("window_end")),
        ("teardown", exited),
        ("close", ended),
    ]
    last = spawned
    for name, t in points:
        if t is not None:
            out[name] = t - last
            last = t
    out["overhead"] = out["wall"] - out.get("window", 0.0)
    return out


def summary_line(record: dict) -> str:
    m = record.get("metrics") or {}
    if record["status"] == "ok":
        warn = "".join(f"\n  warning: {w}" for w in warning_lines(m))
        tel = record.get("telemetry") or {}
        res = ""
        if (tel.get("cpu_mean_pct") or {}).get("mean") is not None:
            res += f", CPU {tel['cpu_mean_pct']['mean']:.0f}%"
        gpu_util = [g["util_pct"]["mean"] for g in tel.get("gpus", []) if g.get("util_pct")]
        if gpu_util:
            res += ", GPU " + "/".join(f"{u:.0f}" for u in gpu_util) + "%"
        return (
            f"cell {record['cell_id']}: ok  {m['samples_per_s']:.1f} samples/s  ({m['steps']} steps in "
            f"{m['time_s']:.1f} s, data wait {100 * m['data_wait_fraction']:.0f}% of the window{res}){warn}"
        )
    return f"cell {record['cell_id']}: {record['status']}  {record['reason']}"
