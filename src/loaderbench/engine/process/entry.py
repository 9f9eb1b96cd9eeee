"""The measuring process of a cell: measure it (`measure`), write its outcome, and end at once; a process kept for
the next cell (warmstart) is reset here.

Run as `python -m loaderbench.engine.process.entry --order FILE` by the cell runner (`engine.runner.runcell`) in a
fresh process (one per rank under ddp), which watches its heartbeat (`watchdog`) and writes the final record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.layout import read_root
from loaderbench.core.util import WriteError
from loaderbench.data.manifest import Staged

from .. import placement
from ..contract import ENTRY_MODULE, Order, Outcome
from ..step import available_devices
from ..watchdog import Heartbeat, heartbeat_path, stacks_path
from . import parallel
from .measure import KEEP, CellRun, measure_in
from .parallel import env_rank


def measure(
    spec: CellSpec,
    data_root: Path,
    allowed: frozenset[str],
    heartbeat: Heartbeat | None = None,
    timeout_s: float = 600.0,
    step_times: dict | None = None,
    marks: dict | None = None,
) -> dict | None:
    """Run the cell; returns the metrics dict (None on ddp ranks other than 0). Raises on failure. `step_times`, a
    dict, gets the times of the steps this process ran, for the cell's trace (`measure.step_times`); `marks`, a dict,
    the epoch seconds each phase started, as far as the cell got."""
    t_start = time.perf_counter()
    marks = {} if marks is None else marks
    marks["setup_start"] = time.time()  # epoch seconds, for the telemetry timeline's phases
    since_process_start = _seconds_since_process_start()
    heartbeat = heartbeat or Heartbeat(None)
    heartbeat.phase("setup")
    kind, count = available_devices()
    dist = parallel.start(spec.parallel, spec.processes, timeout_s, one_device=spec.ranks > 1)
    try:
        # the step's threads as a plain script on this host gets them, not the job's OMP_NUM_THREADS
        placement.set_intra_op_threads(spec.parallel, dist.world)
        run = CellRun(spec, data_root, allowed, dist, kind, heartbeat, marks)
        metrics = measure_in(run, t_start, since_process_start, count)
        if step_times is not None:
            step_times.update(run.step_times)
        if metrics is not None:
            import torch

            metrics["intra_op_threads"] = torch.get_num_threads()  # read in the thread that ran the steps
        return metrics
    finally:
        parallel.stop(dist)


CELL_START: list = [None]  # epoch seconds this process was given its cell, when it was kept from another (warmstart)


def _seconds_since_process_start() -> float | None:
    """Since this process started - or, for a process kept from an earlier cell, since it was given this one."""
    if CELL_START[0] is not None:
        return time.time() - CELL_START[0]
    try:
        import psutil
    except ImportError:
        return None
    return time.time() - psutil.Process().create_time()


def outcome(
    status: str,
    reason: str | None = None,
    metrics: dict | None = None,
    detail: str | None = None,
    steps: dict | None = None,
    marks: dict | None = None,
) -> Outcome:
    """What the measuring process hands its runner (`runcell`, which builds the record from it with
    `records.make_record`, and the trace): the status, its reason, the metrics, CUDA/cuDNN as this process loaded
    them, and the times of its steps."""
    runtime = None
    try:
        from loaderbench.core.provenance import runtime as loaded

        runtime = loaded()
    except Exception:  # a broken torch still gets its failure outcome
        pass
    return Outcome(status, reason, metrics, detail, runtime, steps, marks)


def run(order: Order, heartbeat: Heartbeat | None = None) -> Outcome:
    """Measure the ordered cell and write its outcome (ok, skipped or failed) to the order's `out`; a failed ddp rank
    other than 0 writes `<out>.rank<N>`, a finished one writes nothing."""
    spec = order.spec
    manifest = json.loads(order.manifest.read_text())
    allowed = Staged.from_manifest(manifest).allowed
    _own_mp_tempdir()
    rank = env_rank()
    heartbeat = heartbeat or Heartbeat(None)
    steps: dict = {}
    marks: dict = {}
    try:
        kind, count = available_devices()
        have = count if kind == "cuda" else 0
        # Without a GPU a ddp cell runs its ranks as gloo processes on the CPU; dp over several devices needs GPUs.
        if spec.gpus > 1 and spec.gpus > have and not (kind == "cpu" and spec.parallel == "ddp"):
            result = outcome(
                "skipped",
                f"cell needs {spec.gpus} GPUs; this host has {have}" + (" (CPU only)" if kind == "cpu" else ""),
            )
        else:
            # where this project's staging put the tier's copy (its manifest), read through the spec's tier or mount
            data_root = read_root(manifest, spec.read_path or spec.tier_path)
            metrics = measure(spec, data_root, allowed, heartbeat, order.timeout_s, steps, marks)
            if rank != 0:  # a ddp rank other than 0 that finished: rank 0 reports the cell
                return Outcome("ok")
            result = outcome("ok", metrics=metrics, steps=steps or None)
    except BaseException as e:  # OOM, crashed workers, decode errors: a record, not a hole
        if isinstance(e, KeyboardInterrupt):
            raise
        reason = f"{type(e).__name__}: {e}".strip()
        if "out of memory" in reason.lower():
            reason = "out of memory: " + reason
        reason += f" ({failed_where(heartbeat, e)})"
        marks["failed_at"] = time.time()
        result = outcome(
            "failed", reason if rank == 0 else f"rank {rank}: {reason}", detail=traceback.format_exc(), marks=marks
        )
    try:
        result.write(order.out if rank == 0 else order.out.with_name(f"{order.out.name}.rank{rank}"))
    except WriteError as e:  # a full disk: one line; the runner's record says this process wrote none
        print(f"cell {spec.cell_id}: {e}", file=sys.stderr, flush=True)
    return result


def failed_where(heartbeat: Heartbeat, error: BaseException) -> str:
    """Where a cell failed, for its reason: the phase and step, and the innermost frame of the code outside this
    package, the standard library and the installed packages (a plugin's, a model's: the user's line). The cell's id
    names its model and loader; the reason leaves them out, so one failure of a model reads alike in each of its
    cells (the run's summary groups cells by reason)."""
    frame = _own_frame(error)
    return heartbeat.where() + (f"; raised at {frame}" if frame else "")


def _own_frame(error: BaseException) -> str | None:
    """The innermost traceback frame outside this package, the standard library and the installed packages."""
    import sysconfig

    paths = sysconfig.get_paths()
    skip = [
        str(Path(p).resolve()) for p in (paths["stdlib"], paths["purelib"], paths["platlib"], Path(__file__).parents[2])
    ]
    own = None
    for frame in traceback.extract_tb(error.__traceback__):
        path = str(Path(frame.filename).resolve())
        if not any(path.startswith(s) for s in skip) and not frame.filename.startswith("<"):
            own = f"{frame.filename}:{frame.lineno} in {frame.name}"
    return own


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {ENTRY_MODULE}")
    p.add_argument("--order", required=True, type=Path, help="the runner's order (engine.contract.Order) as JSON")
    order = Order.read(p.parse_args(argv).order)
    rank = env_rank()
    heartbeat = Heartbeat(heartbeat_path(order.out, rank), stacks_path(order.out, rank))
    result = run(order, heartbeat)
    LAST_STATUS[0] = result.status
    print(json.dumps({"cell": order.spec.cell_id, "rank": rank, "status": result.status}), file=sys.stderr)
    # a failed ddp rank exits non-zero so the cell runner stops the ranks still waiting for it
    return 1 if rank != 0 and result.status == "failed" else 0


LAST_STATUS: list = [None]  # the status of the cell `main` ran last (warmstart keeps only a process whose cell was ok)


def reset_for_next_cell(cpus: set[int]) -> None:
    """Make a process that measured a cell fit to measure another (warmstart's kept processes): its loaders' workers
    killed and their objects freed, the device memory and pinned host memory it cached given back, DALI's pools
    emptied, the allocator's peaks and the peak RSS reset, and every thread allowed on `cpus` again (the cell pinned
    them). cuDNN's settings are the next cell's `configure_cudnn`'s. What stays is what the reuse is for: the CUDA
    context, cuDNN's plans, the imported modules."""
    import gc
    import signal

    # torch's DataLoader handles SIGCHLD by raising in the main thread for a worker that died: these are killed here
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        _kill_children()
        KEEP.clear()
        gc.collect()  # the loaders' iterators join their (dead) workers and leave torch's worker registry
    finally:
        signal.signal(signal.SIGCHLD, handler)
    if "nvidia.dali.backend" in sys.modules:  # DALI keeps its own pools: the next cell's memory would carry them
        sys.modules["nvidia.dali.backend"].ReleaseUnusedMemory()
    for tid in placement.threads_of(os.getpid()):
        placement.set_thread_cpus(tid, cpus)
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        # pinned host buffers the last cell's batches went through (torch keeps them cached): they would count in the
        # next cell's RSS. torch has no public call for it (torch.cuda.graphs uses this one); without it, they stay
        host_empty = getattr(torch._C, "_host_emptyCache", None)
        if host_empty is not None:
            host_empty()
        for i in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(i)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the current RSS
    except OSError:
        pass


def exit_now(code: int) -> None:
    """End at once: the record is written, so nothing is left to do but stop. Loader workers are killed instead of
    joined and the interpreter is not torn down module by module - seconds per cell, paid hundreds of times."""
    sys.stdout.flush()
    sys.stderr.flush()
    _kill_children()
    _remove_own_mp_tempdir()
    os._exit(code)


def forget_inherited_mp_tempdir() -> None:
    """In a process forked from the warm-start server: the server's multiprocessing temporary directory is not this
    process's to remove; it makes its own."""
    import multiprocessing.process

    multiprocessing.process.current_process()._config.pop("tempdir", None)  # where multiprocessing.util keeps it


def _own_mp_tempdir() -> None:
    """multiprocessing's temporary directory (`pymp-*`), made now where it is not yet: a loader's workers, forked after,
    share it instead of each making one that its SIGKILL leaves behind (a worker sending a tensor's file descriptor
    opens a listener there)."""
    import multiprocessing.util

    multiprocessing.util.get_temp_dir()


def _remove_own_mp_tempdir() -> None:
    """That directory, which multiprocessing's finalizer would remove at a normal exit (os._exit skips it)."""
    import multiprocessing.process
    import shutil

    tempdir = multiprocessing.process.current_process()._config.get("tempdir")
    if tempdir:
        shutil.rmtree(tempdir, ignore_errors=True)


def _kill_children() -> None:
    """SIGKILL to every descendant of this process (its loader workers)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    placement.remember_default_threads()  # a fresh process: torch's own count, unless the environment set one
    exit_now(main())
