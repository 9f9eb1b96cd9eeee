"""Cell job: run the measurement in a fresh child process and always leave a complete record.

The child (`python -m loaderbench.engine.process.entry --order FILE`, `contract.Order`) reports ok/skipped/failed
with its metrics (`contract.Outcome`); this parent covers what the child cannot (death by a signal, a stall, a hang past the cell timeout), adds what it measured around the child
(tier, telemetry, contention, provenance, phases) and builds the record, once (`records.make_record`).
The record reaches `out` only by an atomic rename, so an interrupted run never leaves a truncated file, and before the
telemetry timeline and the trace (`trace`), so a disk that fills up costs those, not the measurement: the job then
succeeds, saying so in one line and in the record. A record that cannot be written is kept elsewhere
(`records.keep_record`: logs/kept/ first) and the job ends with one line naming the file, the free space there and
where the measurement is kept (SystemExit); the next run of the cell restores it from there instead of measuring
again. No scratch file (heartbeats, stacks) stays.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from loaderbench.core.cells import CellSpec, configuration
from loaderbench.core.config import COMPILE_ALLOWANCE_S, auto_timeout
from loaderbench.core.layout import read_root
from loaderbench.core.provenance import collect
from loaderbench.core.records import (
    CorruptRecord,
    find_kept,
    keep_record,
    make_record,
    read_record,
    spec_hash,
    warning_lines,
)
from loaderbench.core.registry import tierless
from loaderbench.core.util import (
    WriteError,
    atomic_write_json,
    die_with_parent,
    free_space,
    human_bytes,
    kill_tree,
    writing,
)

from .. import placement
from ..contract import ENTRY_MODULE, Order, Outcome
from ..watchdog import Beat, StallRule, describe, heartbeat_path, read, request_stacks, stacks_path
from . import contention as _contention
from . import hostlock, telemetry, tier_run, warmclient
from . import trace as cell_trace


@dataclass(frozen=True)
class _Job:
    """One cell job's inputs, fixed before it starts."""

    spec: CellSpec
    manifest: Path
    out: Path
    timeline: Path | None
    label: str  # "[3/26] " before the progress lines, or ""
    host: hostlock.HostSettings
    timeout_s: float
    stall: StallRule
    trace: Path | None = None


@dataclass(frozen=True)
class _Scratch:
    """The measuring processes' files beside the record: the order, the outcome (rank 0's; `<outcome>.rank<N>` for a
    failed rank N), heartbeats, stacks, and ddp's rendezvous."""

    order: Path
    outcome: Path
    beats: list[Path]
    stacks: list[Path]
    rendezvous: Path

    @classmethod
    def beside(cls, out: Path, ranks: int) -> _Scratch:
        """The scratch files of a cell whose record is `out`, left over ones removed."""
        partial = out.parent / f".{out.name}.child"
        # ddp's ranks meet through a file (torch's FileStore), not a TCP port picked here and bound later by rank 0:
        # between the two, another process on the host could take the port
        scratch = cls(
            partial.with_name(f"{partial.name}.order"),
            partial,
            [heartbeat_path(partial, r) for r in range(ranks)],
            [stacks_path(partial, r) for r in range(ranks)],
            partial.with_name(f"{partial.name}.rendezvous").resolve(),
        )
        scratch.remove()
        return scratch

    def rank_outcome(self, rank: int) -> Path:
        return self.outcome if rank == 0 else self.outcome.with_name(f"{self.outcome.name}.rank{rank}")

    def remove(self) -> None:
        ranks = range(len(self.beats))
        for p in (self.order, *map(self.rank_outcome, ranks), *self.beats, *self.stacks, self.rendezvous):
            p.unlink(missing_ok=True)


@dataclass
class _Around:
    """What the runner saw and measured around the measuring processes."""

    started: float
    tier: dict
    process_start: list = field(default_factory=list)  # per rank: pid, warm or not, how
    samples: dict | None = None  # telemetry
    contention: dict | None = None  # contention's samples
    stacks: dict = field(default_factory=dict)  # a stalled rank's Python stacks
    spawned: float | None = None
    exited: float | None = None


def run_cell(
    spec: CellSpec,
    manifest: Path,
    out: Path,
    timeline: Path | None = None,
    position: str = "",
    host: hostlock.HostSettings | None = None,
    timeout_s: float | None = None,
    stall: StallRule | None = None,
    trace: Path | None = None,
) -> dict:
    """Measure the cell in child processes and write its record to `out` (its telemetry to `timeline`, its trace to
    `trace`).

    Around the measurement: an emulated tier is mounted (and always unmounted), a cold tier's files are evicted
    from the page cache, the resource sampler runs, and the stall watchdog reads the ranks' heartbeats.
    `position` ("3/26") prefixes the progress lines; `timeout_s` (default: from the window) bounds the cell.

    The whole of it holds the host lock (`hostlock`: one measurement at a time per host; `host` gives its
    directory, wait limit and the contention thresholds); a host still busy after the wait limit gives a failed
    record naming the holder. The runner stops, as on SIGTERM, when one of its ancestors dies."""
    host = host or hostlock.HostSettings()
    label = f"[{position}] " if position else ""
    job = _Job(
        spec,
        Path(manifest),
        Path(out),
        timeline,
        label,
        host,
        timeout_s or spec_timeout(spec),
        _stall_rule(stall or StallRule(), spec),
        Path(trace) if trace is not None else None,
    )
    restored = _restore_kept(job)
    if restored is not None:
        return restored
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_exit) if in_main else None  # SIGTERM -> cleanup in _run_cell
    try:
        with hostlock.watch_ancestors():
            try:
                with hostlock.exclusive(
                    f"cell {spec.cell_id}", hostlock.gpu_indices(spec.gpus), host.directory, host.lock_wait_s
                ):
                    return _run_cell(job, busy=None)
            except hostlock.HostBusy as e:
                return _run_cell(job, busy=str(e))
    except WriteError as e:  # the host lock's file (a full /tmp)
        raise SystemExit(f"cell {spec.cell_id}: {e}; not measured") from None
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _run_cell(job: _Job, busy: str | None) -> dict:
    spec = job.spec
    try:
        with writing(job.out.parent):
            job.out.parent.mkdir(parents=True, exist_ok=True)
    except WriteError as e:
        raise SystemExit(f"cell {spec.cell_id}: {e}; not measured") from None
    _check_room(spec, job.out, job.timeline, job.trace)
    scratch = _Scratch.beside(job.out, spec.gpus if spec.parallel == "ddp" else 1)
    try:
        return _measure(job, busy, scratch)
    finally:
        scratch.remove()  # the order, the outcomes, heartbeats, stacks: gone whatever happened


def _measure(job: _Job, busy: str | None, scratch: _Scratch) -> dict:
    """The cell measured and its record (then its timeline) written."""
    spec = job.spec
    print(
        f"{job.label}cell {spec.cell_id}: starting ({spec.loader} on {spec.tier} ({spec.tier_kind}, {spec.cache}), "
        f"{spec.gpus} GPU x batch {spec.batch_size}, {spec.precision}, {spec.parallel})",
        file=sys.stderr,
        flush=True,
    )
    manifest_data = json.loads(job.manifest.read_text())
    # where the cell reads: the spec's tier (or its mount), in the folder the tier's staging made for this project
    data_root = (
        read_root(manifest_data, spec.read_path or spec.tier_path) if "root" in manifest_data else spec.data_root
    )  # a manifest that names no root: where this project's staging would put it
    tier = {
        "name": spec.tier,
        "kind": spec.tier_kind,
        "cache": spec.cache,
        "path": spec.tier_path,
        "read_path": str(data_root),
        "model": spec.device_model,
    }
    around = _Around(time.time(), tier)
    procs: list = []  # filled as the ranks start: an interruption kills those already started
    rc, why, culprit, absent = _run_processes(job, busy, scratch, manifest_data, data_root, around, procs)
    if any(getattr(p, "server_gone", False) for p in procs):
        # the warm-start server died, and the measuring process with it: it dies with Snakemake, so the run is
        # ending - let the ancestor watch say so (it checks twice a second), else stop as interrupted all the same
        time.sleep(2)
        raise SystemExit(f"cell {spec.cell_id}: interrupted (the warm-start server is gone); no record written")
    if rc in (-signal.SIGTERM, -signal.SIGINT):
        # Interrupted with the run (Snakemake, Ctrl-C, scancel), not a property of the cell: leave no record,
        # so the next run measures this cell again.
        raise SystemExit(f"cell {spec.cell_id}: interrupted ({signal.Signals(-rc).name}); no record written")
    result = _outcome(scratch, culprit, why, absent)
    record = _record(job, manifest_data, result, around)
    _write(job, record, around.samples, result)
    return record


def _run_processes(
    job: _Job, busy: str | None, scratch: _Scratch, manifest_data: dict, data_root: Path, around: _Around, procs: list
) -> tuple[int | None, str | None, int | None, bool]:
    """Prepare the tier, start the ranks and wait for them, with the samplers running; the tier, samplers and the
    runner's threads put back whatever happens. Returns (exit status, reason, failed rank, FUSE absent)."""
    spec = job.spec
    mount = sampler = keep_cold = None
    placed_runner: dict[int, set[int]] = {}
    rc, why, culprit, absent = None, busy, None, False
    contention = None if busy else _contention.Sampler(spec.gpus).start()
    try:
        if why is None and not tierless(spec.loader):
            try:
                mount = tier_run.prepare(spec, manifest_data, around.tier)
            except (OSError, RuntimeError) as e:  # no FUSE, a refused mount: the cell's record says so
                why = f"tier {spec.tier} ({spec.tier_kind}) could not be prepared: {e}"
                # FUSE simply absent here: skipped (the reason names the fix); a refused mount stays failed
                absent = spec.tier_kind == "emulated" and tier_run.fuse_missing()
        if why is None:
            around.spawned = time.time()
            order = Order(spec, job.manifest, scratch.outcome, job.timeout_s).write(scratch.order)
            _spawn_ranks(spec, order, scratch.rendezvous, contention, procs, around.process_start)
        if spec.telemetry_hz > 0 and procs:
            sampler = telemetry.Sampler(spec.telemetry_hz, [p.pid for p in procs], data_root, spec.gpus).start()
        if procs:
            keep_cold = tier_run.keep_cold(spec, manifest_data)
        placed_runner = _keep_off_launch_cores(spec, mount)
        if procs:
            rc, why, culprit, around.stacks = _wait_all(procs, job.timeout_s, scratch.beats, scratch.stacks, job.stall)
            around.exited = time.time()
    except BaseException:
        for proc in procs:
            _kill_tree(proc)  # interrupted: take the ranks and their loader workers down with us
        raise
    finally:
        # the runner's threads back where they were: a process that runs cell after cell (a sweep, the ceiling, a
        # bench) otherwise loses a core to each cell's launch cores
        for tid, cpus in placed_runner.items():
            placement.set_thread_cpus(tid, cpus)
        if sampler:
            around.samples = sampler.stop()
        if keep_cold:
            around.tier["keep_cold"] = keep_cold.stop()
        if mount:
            mount.unmount()
            around.tier["emulated"] = mount.final_stats
        around.contention = contention.stop() if contention else None
    return rc, why, culprit, absent


def _write(job: _Job, record: dict, samples, result: Outcome) -> None:
    """The record, then the timeline and the trace: the record is the measurement, the others only its telemetry and
    its steps drawn. A record that cannot be written is kept elsewhere (`records.keep_record`, restored by the next
    run: `_restore_kept`) and ends the job with one line naming the file (WriteError) and where it is kept; a
    timeline or a trace that cannot be written costs only itself (`_keep_without_timeline`)."""
    spec, out, marks = job.spec, job.out, (result.metrics or {}).get("marks")
    try:
        atomic_write_json(out, record)
    except WriteError as e:
        kept, failed = keep_record(record, out)
        if kept is None:
            raise SystemExit(
                f"cell {spec.cell_id}: {e}; the measurement is lost: it could not be kept either ({'; '.join(failed)})"
            ) from None
        raise SystemExit(
            f"cell {spec.cell_id}: {e}; the measurement is kept at {kept}: the next run of this cell restores it to "
            f"{out} instead of measuring again"
        ) from None
    print(job.label + summary_line(record), file=sys.stderr, flush=True)
    if job.timeline is not None:
        try:
            telemetry.write_timeline(Path(job.timeline), samples or {"meta": {}, "rows": []}, marks)
        except WriteError as e:
            _keep_without_timeline(spec, record, out, Path(job.timeline), e)
    if job.trace is not None:
        trace = cell_trace.build(spec.cell_id, record["status"], record["started_at"], result.steps, samples, marks)
        try:
            cell_trace.write(job.trace, trace)
        except WriteError as e:
            _keep_without_timeline(spec, record, out, job.trace, e, "trace")


def _restore_kept(job: _Job) -> dict | None:
    """The record a run kept elsewhere when it could not write it to `job.out` (`_write`), written to `job.out` now,
    with empty files for the timeline and the trace it has not (as `_keep_without_timeline`); None when no record of
    this cell's spec is kept. A kept record that still cannot be written stays where it is and ends the job."""
    spec, out = job.spec, job.out
    kept = find_kept(out)
    if kept is None:
        return None
    try:
        record = read_record(kept)
    except CorruptRecord as e:
        print(f"{job.label}cell {spec.cell_id}: {e}; measured again", file=sys.stderr, flush=True)
        return None
    if record["cell_id"] != spec.cell_id or record.get("spec_hash") != spec_hash(spec):
        print(
            f"{job.label}cell {spec.cell_id}: the record kept at {kept} measured another spec of this cell; "
            "measured again",
            file=sys.stderr,
            flush=True,
        )
        return None
    lost = f"not kept: the record could not be written to {out} and was kept at {kept}, then restored"
    missing = {what: path for what, path in (("timeline", job.timeline), ("trace", job.trace)) if path is not None}
    telemetry_part = record.get("telemetry") or {}
    for what in missing:
        telemetry_part = {**telemetry_part, what: None, f"{what}_lost": lost}
    record["telemetry"] = telemetry_part
    try:
        atomic_write_json(out, record)
        for path in missing.values():
            with writing(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    except WriteError as e:
        raise SystemExit(
            f"cell {spec.cell_id}: {e}; its measurement stays kept at {kept}: the next run restores it once there "
            "is room"
        ) from None
    kept.unlink(missing_ok=True)
    print(
        f"{job.label}cell {spec.cell_id}: its record was restored from {kept}, where it was kept when it could not "
        "be written; not measured again",
        file=sys.stderr,
        flush=True,
    )
    print(job.label + summary_line(record), file=sys.stderr, flush=True)
    return record


def _keep_without_timeline(
    spec: CellSpec, record: dict, out: Path, timeline: Path, error: WriteError, what: str = "timeline"
) -> None:
    """Keep a measured cell whose timeline (or trace: `what`) could not be written: Snakemake deletes a failed job's
    outputs, the record with them, so the job succeeds with an empty file where the timeline goes (a file without data
    takes no space) and the record saying why it has none; where even that cannot be made, the job fails, its record
    written."""
    message = f"cell {spec.cell_id}: {error}; its record {out} was written, without the {what}"
    try:
        timeline.parent.mkdir(parents=True, exist_ok=True)
        timeline.touch()
    except OSError:
        raise SystemExit(message) from None
    record["telemetry"] = {**(record.get("telemetry") or {}), what: None, f"{what}_lost": str(error)}
    try:
        atomic_write_json(out, record)
    except WriteError:
        pass  # the record as first written stands: it points at the empty timeline
    print(f"{message} (an empty file stands in for it)", file=sys.stderr, flush=True)


ROOM_BYTES = 1_000_000  # a record, its timeline and the measuring process's scratch files, with room to spare


def _check_room(spec: CellSpec, out: Path, timeline: Path | None, trace: Path | None = None) -> None:
    """End the job before measuring when the record's, the timeline's or the trace's disk is all but full: the
    measurement could not be kept (and the measuring process could not even start its heartbeat)."""
    for path in (p for p in (out, timeline, trace) if p is not None):
        free, mount = free_space(path)
        if free < ROOM_BYTES:
            raise SystemExit(
                f"cell {spec.cell_id}: cannot write {path}: only {human_bytes(free)} free on {mount} "
                f"(a record and its timeline need about {human_bytes(ROOM_BYTES)}); not measured"
            )


def _spawn_ranks(
    spec: CellSpec, args: list[str], rendezvous: Path, contention, procs: list, process_start: list
) -> None:
    """Start the cell's measuring processes - ddp: one per GPU (rank), as torchrun would - forked warm where the
    server can, else plainly; each appended to `procs` as it starts."""
    ranks = spec.gpus if spec.parallel == "ddp" else 1
    for rank in range(ranks):
        env = dict(os.environ)
        if spec.parallel == "ddp":
            env.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(ranks),
                LOCAL_WORLD_SIZE=str(ranks),
                LOADERBENCH_RENDEZVOUS=str(rendezvous),
            )
            # the ranks share the CPUs: split torch's intra-op threads among them as torchrun does (without it,
            # ranks on few cores spin against each other)
            env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // ranks)))
        # a dp cell (one process) may be measured by a process the server kept from a cell of another
        # configuration (host.reuse_processes; warmstart): the cell id but for its repeat
        config = configuration(spec.cell_id) if spec.parallel == "dp" else None
        proc, how, reused = warmclient.spawn(
            args, env, spec.cell_id + (f" --rank {rank}" if spec.parallel == "ddp" else ""), reuse_config=config
        )
        if proc is not None and contention is not None:
            contention.roots.append(proc.pid)  # not the runner's child, but measured as its own
        procs.append(
            proc
            or subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, *args],
                preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
                env=env,
            )
        )
        process_start.append(
            {"rank": rank, "pid": procs[-1].pid, "warm": proc is not None, "how": how, "reused": reused}
        )


def _record(job: _Job, manifest_data: dict, result: Outcome, around: _Around) -> dict:
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
        parts["contention"] = _contention.summarize(
            around.contention, marks, job.host.contention_cpu_cores, job.host.contention_gpu_processes
        )
        if (warn := _contention.warning(parts["contention"])) and result.metrics is not None:
            metrics.setdefault("warnings", []).append(warn)
    if job.timeline is not None:  # written after the record (`_write`)
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


def _outcome(scratch: _Scratch, culprit: int | None, why: str | None, absent: bool) -> Outcome:
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


def _wait_all(
    procs: list[subprocess.Popen],
    timeout_s: float,
    beats: list[Path],
    stacks: list[Path],
    stall: StallRule,
    grace_s: float = 60.0,
) -> tuple[int | None, str | None, int | None, dict]:
    """Wait for every rank. The first rank to fail, a stall (no heartbeat for the stall rule's limit) or a hang past
    the timeout stops them all: ranks block in collectives for their peers, so one failure would otherwise hang the
    rest until the timeout. When one rank finishes, the others get `grace_s` to finish too. A stall or a timeout
    first collects every rank's Python stacks. Returns (exit status, reason, rank, stacks) of the first process
    that exited non-zero or by a signal (rank None when none did)."""
    start = time.monotonic()
    deadline = start + timeout_s
    first_done = None
    next_beat_check = start + 0.5
    who = (lambda r: f"rank {r} ") if len(procs) > 1 else (lambda r: "")

    def stop(reason: str, rank: int | None, with_stacks: bool):
        dump = request_stacks([p.pid for p in procs if p.poll() is None], stacks) if with_stacks else {}
        for p in procs:
            _kill_tree(p)
        return None, reason, rank, dump

    while True:
        codes = [p.poll() for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            rank, code = bad[0]
            for p in procs:
                _kill_tree(p)
            return code, who(rank) + _exit_reason(code), rank, {}
        if all(c == 0 for c in codes):
            return 0, None, None, {}
        now = time.monotonic()
        if first_done is None and any(c == 0 for c in codes):
            first_done = now
        if now > deadline:
            return stop(f"timed out after {timeout_s:g} s (cell_timeout_s)", None, True)
        if first_done is not None and now - first_done > grace_s:
            return stop(
                f"ranks still running {grace_s:g} s after another finished (a collective without its peers)", None, True
            )
        if now >= next_beat_check:
            next_beat_check = now + 0.5
            for rank, path in enumerate(beats):
                if codes[rank] is not None:
                    continue
                # before its first beat a process is starting up (interpreter, imports) since the runner started it
                beat = read(path) or Beat(0, "startup", start, None)
                idle = stall.stalled(beat, now)
                if idle is not None:
                    return stop(describe(beat, idle, rank if len(procs) > 1 else None), rank, True)
        time.sleep(0.1)


def _stall_rule(rule: StallRule, spec: CellSpec) -> StallRule:
    """A compiled model's first step waits for its compilation: the rule allows it as the cell's timeout does."""
    return replace(rule, compile_s=COMPILE_ALLOWANCE_S) if spec.compile else rule


def spec_timeout(spec: CellSpec) -> float:
    return auto_timeout({"seconds": spec.window_s, "max_seconds": spec.window_max_s}, spec.compile)


def _keep_off_launch_cores(spec: CellSpec, mount) -> dict[int, set[int]]:
    """The runner's own threads (the sampler, this wait loop) and an emulated tier's server off the cores the
    measuring processes launch from (they place their own threads). Returns the runner's threads' CPUs before."""
    place = placement.for_cell(spec.placement, spec.gpus, "cuda" if _has_gpu() else "cpu")
    if place is None:
        return {}
    before = {}
    for tid in placement.threads_of(os.getpid()):
        try:
            before[tid] = os.sched_getaffinity(tid)
        except OSError:  # the thread ended meanwhile
            continue
        placement.set_thread_cpus(tid, place.others)
    server = getattr(mount, "proc", None)
    if server is not None:
        placement.pin_process_tree(server.pid, place.others)
    return before


def _has_gpu() -> bool:
    return Path("/dev/nvidiactl").exists()


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


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (SIGKILL: often the kernel's OOM killer)" if -rc == signal.SIGKILL else ""
        return f"measurement process killed by {name}{hint}"
    return f"measurement process exited with status {rc}"


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _kill_tree(proc) -> None:
    kill_tree(proc.pid)
    proc.wait()
