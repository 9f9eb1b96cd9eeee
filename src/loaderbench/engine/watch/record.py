"""A watched run as a record of kind `watch` (through `core.records.make_record`, validated as every cell record) and
a trace in the cells' format (`runner.trace`), one track of steps per process that iterated batches.

Its id follows the cell-id grammar: `script-<name>_watch_g<processes>_b<batch>_<fp32|amp>_<dp|ddp>[_<model>]_r0`, with
<name> the first `.py` argument's stem (else the module after `-m`, else the program's name), lowercased and any
character outside [a-z0-9-] made `-`; `watch` stands for the tier; the model is the torchvision classification builder
the script called first (left out for MobileNetV2, as in every id), else `unknown`; `amp` where the probe saw an
enabled autocast entered, else `fp32` (a model cast to half by hand reads fp32); `ddp` where more than one process
iterated batches; `g1` and `b1` where no process delivered a batch (the record then says why).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import fields
from pathlib import Path

from loaderbench.core import provenance
from loaderbench.core.cells import CellSpec, cell_id
from loaderbench.core.records import WATCH, make_record, warning

from ..runner import contention
from ..runner import trace as cell_trace
from .launch import Run
from .sample import add_disk_rates, cores_busy
from .window import WARMUP_RULE, Process, Window, read_probes, steps_trace, window

CONTENDED_CORES = 0.5  # foreign CPU cores over the window that make it contended: host.contention_cpu_cores' default
UNKNOWN_MODEL = "unknown"
TIER = "watch"
KNOWN = ("loader", "gpus", "batch_size", "precision", "parallel", "workers", "warmup_steps")


def script_name(command: list[str]) -> str:
    """The loader's name in the id: `script-<stem>` by the rule of this module's docstring."""
    stem = next((Path(a).stem for a in command if a.endswith(".py")), None)
    if stem is None and "-m" in command[:-1]:
        stem = command[command.index("-m") + 1]
    stem = stem or Path(command[0]).name
    name = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:40] or "command"
    return f"script-{name}"


def summarise(windows: list[Window]) -> dict:
    """The ranks together: samples/s summed (each rank trains its own batches), the slowest rank named."""
    slowest = min(windows, key=lambda w: w.samples_per_s)
    rate = sum(w.samples_per_s for w in windows)
    halfwidths = [w.rate_halfwidth for w in windows]
    return {
        "slowest": slowest,
        "samples_per_s": rate,
        "halfwidth": None if None in halfwidths else max(halfwidths),
        "data_wait_fraction": statistics.fmean(w.data_wait_fraction for w in windows),
        "wait_halfwidth": None if None in (hw := [w.wait_halfwidth for w in windows]) else max(hw),
    }


def _ms(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "mean": 1000 * statistics.fmean(values),
        "p50": 1000 * statistics.median(values),
        "p95": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


def per_rank(w: Window, pids: dict) -> dict:
    """One process's own figures: its window, its wait, the CPU cores it and its main thread kept busy."""
    series = pids.get(w.proc.pid) or []
    return {
        "rank": w.proc.rank,
        "pid": w.proc.pid,
        "time_s": w.time_s,
        "steps": w.steps,
        "samples_per_s": w.samples_per_s,
        "ci95_rel_halfwidth": w.rate_halfwidth,
        "data_wait_fraction": w.data_wait_fraction,
        "data_wait_fraction_ci95": w.wait_halfwidth,
        "data_wait_ms": _ms(w.waits)["mean"],
        "step_ms": 1000 * w.time_s / w.steps,
        "cpu_cores_busy": cores_busy(series, w.start_epoch, w.end_epoch, 1),
        "main_thread_busy": cores_busy(series, w.start_epoch, w.end_epoch, 2),
        "probe_share": w.probe_share,
        "probe_us_per_batch": 1e6 * w.proc.probe_s / w.proc.probe_batches if w.proc.probe_batches else None,
        "workers": (w.proc.iterators[-1] if w.proc.iterators else {}).get("workers"),
        "iterator": (w.proc.iterators[-1] if w.proc.iterators else {}).get("kind"),
    }


def _tree_busy(timeline: dict, lo: float, hi: float) -> float | None:
    """Cores busy of the whole process tree between lo and hi (each process's CPU seconds over the span)."""
    busy = [cores_busy(s, lo, hi, 1) for s in (timeline.get("pids") or {}).values()]
    known = [b for b in busy if b is not None]
    return sum(known) if known else None


def metrics(windows: list[Window], run: Run, ranks: list[dict]) -> dict:
    """The record's metrics, in a cell's fields where the watch knows them; null where it does not."""
    s = summarise(windows)
    w = s["slowest"]
    lo, hi = min(x.start_epoch for x in windows), max(x.end_epoch for x in windows)
    first = min(x.proc.starts[0] + x.proc.offset for x in windows)
    compute = [p - q for p, q in zip(w.periods, w.waits, strict=True)]
    half = w.steps // 2
    gpus = run.timeline.get("meta", {}).get("gpus") or []
    return {
        "time_s": w.time_s,
        "steps": w.steps,
        "global_batch": sum(statistics.mode(x.proc.sizes) for x in windows),
        "samples": sum(x.samples for x in windows),
        "samples_per_s": s["samples_per_s"],
        "step_ms": 1000 * w.time_s / w.steps,
        "data_wait_ms": _ms(w.waits),
        "compute_ms": _ms(compute),
        "data_wait_fraction": s["data_wait_fraction"],
        "data_wait_fraction_ci95": s["wait_halfwidth"],
        "window": {
            "mode": "watch",
            "ci95_rel_halfwidth": s["halfwidth"],
            "warmup_rule": WARMUP_RULE,
            "other_batches": sum(x.other_batches for x in windows),
        },
        "warmup_steps": w.warmup,
        "prefetch_backlog_batches": None,
        "half_ratio": (sum(w.periods[:half]) / sum(w.periods[half:])) if half else None,
        "final_loss": None,
        "warnings": [] if s["halfwidth"] is not None else [warning("short_window", "fewer than 5 batches of steps")],
        "workers": ranks[0]["workers"],
        "device": {"type": "cuda" if gpus else "cpu", "count": len(gpus), "used": None},
        "peak_gpu_mem_mb": None,
        "main_peak_rss_mb": None,
        "parallel": {
            "mode": "ddp" if len(windows) > 1 else "dp",
            "processes": len(windows),
            "backend": None,
            "wrapper": None,
            "per_rank": ranks,
            "slowest_rank": w.proc.rank,
            "slowest_pid": w.proc.pid,
        },
        "input": None,
        "setup_s": first - run.started_at,
        "warmup_s": lo - first,
        "cpu_cores_busy": _tree_busy(run.timeline, lo, hi),
        "marks": {"setup_start": run.started_at, "warmup_start": first, "window_start": lo, "window_end": hi},
    }


def spec_of(run: Run, procs: list[Process], windows: list[Window]) -> CellSpec:
    """The spec as far as the watch knows it: every other field None."""
    amp = any(p.autocast for p in procs)
    sizes = [s for w in windows for s in w.proc.sizes]
    iterators = [i for w in windows for i in w.proc.iterators]
    known = {
        "loader": script_name(run.command),
        "gpus": max(len(windows), 1),
        "batch_size": statistics.mode(sizes) if sizes else None,
        "precision": "amp" if amp else "fp32",
        "parallel": "ddp" if len(windows) > 1 else None,
        "workers": iterators[-1].get("workers") if iterators else None,
        "warmup_steps": windows[0].warmup if windows else None,
        "model": next((p.model for p in procs if p.model), None),
    }
    unknown = {f.name: None for f in fields(CellSpec)}
    return CellSpec(**{**unknown, **known, "beside": False, "ranks": 1})


def watch_id(spec: CellSpec) -> str:
    """The record's id, by the rule of this module's docstring."""
    parallel = spec.parallel or "dp"
    model = spec.model or UNKNOWN_MODEL
    return cell_id(spec.loader, TIER, spec.gpus, spec.batch_size or 1, spec.precision or "fp32", parallel, 0, model)


def build(run: Run) -> tuple[dict, dict]:
    """The record and the trace of a watched run."""
    procs = read_probes(run.probe_dir)
    pairs = [(p, window(p)) for p in procs if p.ends]
    windows = [w for _, w in pairs if w is not None]
    root = next((i.get("root") for p in procs for i in p.iterators if i.get("root")), None)
    disk, disk_note = add_disk_rates(run.timeline, root)
    spec = spec_of(run, procs, windows)
    cid = watch_id(spec)
    watch = {
        "command": run.command,
        "exit_status": run.returncode,
        "stopped_by_watch": run.stopped,
        "error": run.error,
        "warmup_rule": WARMUP_RULE,
        "processes_seen": [{"pid": p.pid, "rank": p.rank, "batches": len(p.ends), "argv": p.argv} for p in procs],
        "iterators": [i for p in procs for i in p.iterators],
        "dataset_root": root,
        "autocast": next((p.autocast for p in procs if p.autocast), None),
        "disk": disk,
        "disk_note": disk_note,
        "gpu_reason": run.timeline.get("meta", {}).get("gpu_reason"),
    }
    parts = {
        "started_at": run.started_at,
        "wall_s": run.ended_at - run.started_at,
        "provenance": provenance.collect(root),
        "manifest_sha256": None,
        "telemetry": telemetry_summary(run.timeline, windows),
        "watch": watch,
    }
    if windows:
        ranks = [per_rank(w, run.timeline.get("pids") or {}) for w in windows]
        m = metrics(windows, run, ranks)
        if run.contention is not None:
            parts["contention"] = contention.summarize(run.contention, m["marks"], CONTENDED_CORES)
            m["warnings"] += [_contended(w) for w in [contention.warning(parts["contention"])] if w]
        record = make_record(spec, "ok", m, kind=WATCH, cell_id=cid, **parts)
    elif run.error:
        why = f"the command could not be started: {run.error}"
        record = make_record(spec, "failed", None, why, kind=WATCH, cell_id=cid, **parts)
    else:
        why = no_window_reason(procs)
        record = make_record(spec, "skipped", None, why, kind=WATCH, cell_id=cid, **parts)
    marks = (record["metrics"] or {}).get("marks") or {"setup_start": run.started_at}
    return record, trace_of(cid, record["status"], run, pairs, marks)


def _contended(w: dict) -> dict:
    """A cell's contended warning as a watched script's: the same measurement, its advice the watch's."""
    found = w["text"].split("; the throughput is not the cell's alone")[0]
    return warning("contended", f"{found}; the rate is not the script's alone: watch it again on a quieter host")


def no_window_reason(procs: list[Process]) -> str:
    """Why a run has no window: no batch at all, or too few."""
    if not any(p.ends for p in procs):
        return (
            "no torch DataLoader or DALI iterator delivered a batch in any Python process of the command: "
            "nothing to time"
        )
    return "too few batches to leave a window after the warm-up (" + WARMUP_RULE + ")"


def telemetry_summary(timeline: dict, windows: list[Window]) -> dict:
    """The samples over the window (the whole run without one): CPU, memory, the dataset's disk, GPUs."""
    rows = timeline.get("rows") or []
    if windows:
        lo, hi = min(w.start_epoch for w in windows), max(w.end_epoch for w in windows)
        rows = [r for r in rows if lo <= r["t"] <= hi] or rows

    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float) and r[key] == r[key]]
        return statistics.fmean(vals) if vals else None

    gpus = timeline.get("meta", {}).get("gpus") or []
    return {
        "samples": len(rows),
        "hz_target": timeline.get("meta", {}).get("hz_target"),
        "cpu_mean_pct": mean("cpu_mean"),
        "rss_mb": mean("rss_mb"),
        "disk_read_mb_s": mean("disk_read_mb_s"),
        "gpu_reason": timeline.get("meta", {}).get("gpu_reason"),
        "gpus": [
            {"index": i, "util_pct": mean(f"gpu{k}_util"), "mem_mb": mean(f"gpu{k}_mem_mb")} for k, i in enumerate(gpus)
        ],
    }


def trace_of(cid: str, status: str, run: Run, pairs: list[tuple[Process, Window | None]], marks: dict) -> dict:
    """The cells' trace of the slowest process (or the first), with a track of steps for each other process."""
    if not pairs:
        return cell_trace.build(cid, status, run.started_at, None, run.timeline, marks)
    slowest = min(pairs, key=lambda pw: pw[1].samples_per_s if pw[1] else float("inf"))
    out = cell_trace.build(cid, status, run.started_at, steps_trace(*slowest), run.timeline, marks)
    us = lambda t: round((t - run.started_at) * 1e6, 1)
    for k, (proc, w) in enumerate(p for p in pairs if p is not slowest):
        pid = cell_trace.TELEMETRY_PID + 1 + k
        events = cell_trace.host_steps(steps_trace(proc, w), us)
        out["traceEvents"] += [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {proc.rank} (pid {proc.pid})"}},
            *({**e, "pid": pid} for e in events),
        ]
    for e in out["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == cell_trace.CELL_PID:
            e["args"] = {"name": f"{cid}: rank {slowest[0].rank} (pid {slowest[0].pid}), the slowest"}
    out["otherData"]["steps"] = (
        f"the slowest process's (rank {slowest[0].rank}, pid {slowest[0].pid}) steps: each from its call of the "
        "iterator's __next__ to the next call, its wait the time blocked in it; other processes' steps below"
    )
    return out
