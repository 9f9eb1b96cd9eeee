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

The job's parts: `job` (its inputs and scratch files), `ranks` (the processes started and watched), `record` (the
record built) and `output` (the files written, a record kept and restored).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.config import COMPILE_ALLOWANCE_S, auto_timeout
from loaderbench.core.layout import read_root
from loaderbench.core.registry import tierless
from loaderbench.core.util import WriteError, writing

from .. import placement
from ..contract import Order
from ..watchdog import StallRule
from . import contention as _contention
from . import hostlock, telemetry, tier_run
from .job import Around, CellJob, Scratch
from .output import check_room, restore_kept, write_outputs
from .ranks import kill_and_wait, spawn_ranks, wait_all
from .record import build_record, read_outcome


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
    job = CellJob(
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
    restored = restore_kept(job)
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


def _run_cell(job: CellJob, busy: str | None) -> dict:
    spec = job.spec
    try:
        with writing(job.out.parent):
            job.out.parent.mkdir(parents=True, exist_ok=True)
    except WriteError as e:
        raise SystemExit(f"cell {spec.cell_id}: {e}; not measured") from None
    check_room(spec, job.out, job.timeline, job.trace)
    scratch = Scratch.beside(job.out, spec.processes)
    try:
        return _measure(job, busy, scratch)
    finally:
        scratch.remove()  # the order, the outcomes, heartbeats, stacks: gone whatever happened


def _measure(job: CellJob, busy: str | None, scratch: Scratch) -> dict:
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
    around = Around(time.time(), tier)
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
    result = read_outcome(scratch, culprit, why, absent)
    record = build_record(job, manifest_data, result, around)
    write_outputs(job, record, around.samples, result)
    return record


def _run_processes(
    job: CellJob, busy: str | None, scratch: Scratch, manifest_data: dict, data_root: Path, around: Around, procs: list
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
            spawn_ranks(spec, order, scratch.rendezvous, contention, procs, around.process_start)
        if spec.telemetry_hz > 0 and procs:
            sampler = telemetry.Sampler(spec.telemetry_hz, [p.pid for p in procs], data_root, spec.gpus).start()
        if procs:
            keep_cold = tier_run.keep_cold(spec, manifest_data)
        placed_runner = _keep_off_launch_cores(spec, mount)
        if procs:
            rc, why, culprit, around.stacks = wait_all(procs, job.timeout_s, scratch.beats, scratch.stacks, job.stall)
            around.exited = time.time()
    except BaseException:
        for proc in procs:
            kill_and_wait(proc)  # interrupted: take the ranks and their loader workers down with us
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


def _stall_rule(rule: StallRule, spec: CellSpec) -> StallRule:
    """A compiled model's first step waits for its compilation: the rule allows it as the cell's timeout does."""
    return replace(rule, compile_s=COMPILE_ALLOWANCE_S) if spec.compile else rule


def spec_timeout(spec: CellSpec) -> float:
    return auto_timeout({"seconds": spec.window_s, "max_seconds": spec.window_max_s}, spec.compile)


def _keep_off_launch_cores(spec: CellSpec, mount) -> dict[int, set[int]]:
    """The runner's own threads (the sampler, this wait loop) and an emulated tier's server off the cores the
    measuring processes launch from (they place their own threads). Returns the runner's threads' CPUs before."""
    place = placement.for_cell(spec.placement, spec.launchers, "cuda" if _has_gpu() else "cpu")
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


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)
