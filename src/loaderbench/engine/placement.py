"""Where a cell's threads run: each thread that launches GPU work on a core of its own, everything else off them.

A training step of a small model on a fast GPU is bound by the one host thread that launches its kernels: a loader
worker, a DALI thread, the telemetry sampler or the kernel's scheduler moving that thread between cores shows up as a
slower, noisier step.
So a cell reserves one *launch core* per launching thread - per GPU: the main thread of each rank, and under `dp` the
main thread plus one thread per extra replica - and puts every other thread and process of the cell on the rest.

The plan is a pure function of the usable CPUs and the number of launch cores, so the cell runner (which keeps its
own sampler threads off the launch cores) and the measuring processes agree on it without talking.

How many intra-op threads the training step runs is decided here too (`set_intra_op_threads`): torch's own default for
a plain script on this host, whatever OMP_NUM_THREADS the job was given (Snakemake gives a rule without `threads:` 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch reads for its default intra-op thread count


@dataclass(frozen=True)
class Placement:
    launch: tuple[int, ...]  # one core per launching thread (ddp: index = rank; dp: index = replica)
    others: tuple[int, ...]  # loader workers, DALI threads, pin-memory thread, sampler, runner

    def to_dict(self) -> dict:
        return {"launch_cores": list(self.launch), "other_cores": list(self.others)}


def plan(cpus: set[int] | frozenset[int], launchers: int) -> Placement | None:
    """Launch cores are the highest-numbered usable CPUs (CPU 0 tends to take the interrupts); None when fewer than
    two CPUs would be left for the rest (then pinning would starve the loader: everything stays free)."""
    ordered = sorted(cpus)
    if launchers < 1 or len(ordered) - launchers < 2:
        return None
    return Placement(tuple(reversed(ordered[-launchers:])), tuple(ordered[:-launchers]))


def for_cell(mode: str, gpus: int, device_type: str, cpus: set[int] | frozenset[int] | None = None) -> Placement | None:
    """A cell's placement, the one plan its runner, its measuring processes and the ceiling's bare loop all use: one
    launch core per GPU (each ddp rank's main thread; dp's main thread and replica threads), when `mode` asks for
    pinning on this device type; None otherwise."""
    if not wanted(mode, device_type):
        return None
    return plan(usable_cpus() if cpus is None else cpus, gpus)


def usable_cpus() -> frozenset[int]:
    return frozenset(os.sched_getaffinity(0))


def wanted(mode: str, device_type: str) -> bool:
    """`auto` pins on a GPU only: on a CPU device the model's own intra-op threads need every core."""
    return mode == "pin" or (mode == "auto" and device_type == "cuda")


def threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def set_thread_cpus(tid: int, cpus) -> bool:
    try:
        os.sched_setaffinity(tid, cpus)
        return True
    except OSError:  # the thread ended meanwhile
        return False


def pin_process_tree(pid: int, cpus, keep: dict[int, int] | None = None) -> int:
    """Every thread of `pid` and of its descendants onto `cpus`, except the threads in `keep` (tid -> core).
    Returns how many threads were placed."""
    import psutil

    keep = keep or {}
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0
    n = 0
    for proc in procs:
        for tid in threads_of(proc.pid):
            if tid in keep:
                n += set_thread_cpus(tid, {keep[tid]})
            else:
                n += set_thread_cpus(tid, cpus)
    return n


def thread_cpus(pid: int | None = None) -> dict[int, list[int]]:
    """tid -> the CPUs it may run on (for records and tests)."""
    pid = pid or os.getpid()
    out = {}
    for tid in threads_of(pid):
        try:
            out[tid] = sorted(os.sched_getaffinity(tid))
        except OSError:
            pass
    return out


def thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------- intra-op threads


_DEFAULT_THREADS: dict[frozenset[int], int] = {}  # usable CPUs -> torch's default intra-op threads there


def remember_default_threads() -> None:
    """Note torch's default intra-op threads for this process's CPUs where torch picked it itself: to be called
    before anything sets torch's threads, in a process whose environment set none of THREAD_ENV when torch loaded."""
    if not any(name in os.environ for name in THREAD_ENV):
        import torch

        _DEFAULT_THREADS.setdefault(usable_cpus(), torch.get_num_threads())


def default_threads() -> int:
    """torch's default intra-op threads for a process on this one's CPUs, as a plain script started without
    OMP_NUM_THREADS gets them: as noted by `remember_default_threads`, else asked of a fresh interpreter (once)."""
    cpus = usable_cpus()
    if cpus not in _DEFAULT_THREADS:
        env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
        cmd = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
        if out.returncode != 0 or not out.stdout.strip().isdigit():
            raise RuntimeError(
                f"torch's default thread count: `{' '.join(cmd)}` failed ({out.returncode}): "
                f"{out.stderr.strip()[-500:]}"
            )
        _DEFAULT_THREADS[cpus] = int(out.stdout.strip())
    return _DEFAULT_THREADS[cpus]


def intra_op_threads(parallel: str, world: int) -> int:
    """The intra-op threads of a cell's training step: torch's default on this host, and for each of a ddp cell's
    `world` ranks an equal share of the usable CPUs (as torchrun's ranks on one host split them)."""
    if parallel == "ddp":
        return max(1, len(usable_cpus()) // max(1, world))
    return default_threads()


def set_intra_op_threads(parallel: str, world: int) -> int:
    """Give torch the cell's intra-op threads (`intra_op_threads`), never OMP_NUM_THREADS's; returns how many."""
    import torch

    threads = intra_op_threads(parallel, world)
    torch.set_num_threads(threads)
    return threads
