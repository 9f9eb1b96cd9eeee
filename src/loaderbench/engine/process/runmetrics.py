"""The parts of a cell's metrics read off its run (`measure.CellRun`): rate, window, phases, settings, parallel mode
and memory."""

from __future__ import annotations

import resource
from pathlib import Path
from typing import TYPE_CHECKING

from . import metrics as summary
from .batchmeans import batch_durations, trace
from .window import StopRule

if TYPE_CHECKING:
    from .measure import CellRun


def rate_metrics(run: CellRun, ranks: list[dict], elapsed: float, steps: int) -> dict:
    """The seed's Time(s), Steps and Samples/s, the step's waits and compute, its host time and the main thread's
    CPU time a step (`host_metrics`)."""
    return {
        "time_s": elapsed,
        "steps": steps,
        "global_batch": run.global_batch,
        "samples": steps * run.global_batch,
        "samples_per_s": steps * run.global_batch / elapsed,
        "step_ms": 1000.0 * elapsed / steps,
        "data_wait_ms": summary.summarize_ms([w for r in ranks for w in r["waits"]]),
        "compute_ms": summary.summarize_ms([c for r in ranks for c in r["computes"]]),
        "data_wait_fraction": float(sum(ranks[0]["waits"]) / ranks[0]["time_s"]),
        **host_metrics(ranks),
    }


def host_metrics(ranks: list[dict]) -> dict:
    """host_step_ms: the step function's call on the host (from the batch in hand to its return, no synchronisation
    added; on the CPU, its compute), over every rank's steps; main_cpu_ms: the main thread's CPU time a step over the
    window (time.thread_time), the ranks' mean."""
    host = summary.summarize_ms([h for r in ranks for h in r["host_steps"]])
    cpu = [r["main_cpu_s"] for r in ranks if r["main_cpu_s"] is not None]
    return {
        "host_step_ms": {"mean": host["mean"], "p50": host["p50"]},
        "main_cpu_ms": 1000.0 * sum(cpu) / len(cpu) if cpu else None,
    }


def window_record(rule: StopRule, win) -> dict:
    """How the window stopped and how well it knew its rate."""
    adaptive = rule.mode == "adaptive"
    return {
        "mode": rule.mode,
        "min_s": rule.min_seconds if adaptive else None,
        "max_s": rule.max_seconds,
        "precision": rule.precision if adaptive else None,
        "ci95_rel_halfwidth": win.halfwidth,
        "converged": win.converged,
        "burst": rule.burst,
        "whole_bursts": win.extra.get("whole_bursts"),
        "batch_s": batch_durations(win.step_end, burst=win.extra["batch_unit"], bounds=win.extra.get("bounds")),
        "trace": trace(win.step_end),
    }


def phase_metrics(
    run: CellRun, warm: dict, t_start: float, since_process_start: float | None, cold_step_s: float | None
) -> dict:
    """Where the time before the window went."""
    durations = warm["durations"]
    return {
        "warmup_steps": len(durations),
        "warmup_steps_max": warm["bound"],  # the backlog bound; fewer ran when the loader's backlog was found used up
        "warmup_drained_at": warm["drained_at"],
        "warmup_step_ms": summary.summarize_ms(durations[1:]),
        "warmup_steps_s": [round(d, 5) for d in durations],
        "startup_s": since_process_start,  # process start to here: interpreter, imports (torch), spec and manifest
        "setup_s": warm["t_setup"] - t_start,  # CUDA context, process group, loader and model built
        "first_step_s": warm["first_step_s"],  # autotuning, lazy CUDA module loading, worker start-up, first batch
        "cold_step_s": cold_step_s,  # the cold step on a random batch in setup (None: not run); setup_s holds it
        "warmup_s": warm["t_warm"] - warm["t_setup"],
        "marks": run.marks,
    }


def settings_record(run: CellRun, images) -> dict:
    """What the step and the process ran with: input layout, compilation, optimizer, cuDNN, thread placement."""
    import torch

    spec, kind = run.spec, run.kind
    first_input = images[0] if isinstance(images, list) else images  # a pre-scattered batch: one part per GPU
    dtype = str(first_input.dtype).replace("torch.", "")
    return {
        "input": {
            "dtype": dtype,  # what the model took
            # what the loader delivered: a plugin's batches are cast to the cell's dtype; a built-in writes that dtype
            "delivered_dtype": run.ctx.info.get("delivered_dtype", dtype),
            "channels_last": first_input.is_contiguous(memory_format=torch.channels_last),
        },
        "compiled": spec.compile and run.model is not None,
        **run.step.applied,  # the step's stream priority and whether it is captured, as the step runs them
        "optimizer": {  # None for `none`: no model, no optimizer
            "name": type(run.step.optimizer).__name__,
            "fused": bool(run.step.optimizer.defaults.get("fused")),
        }
        if run.step.optimizer is not None
        else None,
        "cudnn_benchmark": spec.cudnn_benchmark if kind == "cuda" else None,
        "cudnn_benchmark_limit": torch.backends.cudnn.benchmark_limit if kind == "cuda" else None,
        "placement": {**run.place.to_dict(), **run.placed}
        if run.place
        else {"off": f"placement {spec.placement} on {kind}"},
        "amp_dtype": str(run.amp_dtype).replace("torch.", "") if spec.precision == "amp" else None,
    }


def parallel_record(run: CellRun, ranks: list[dict]) -> dict:
    """dp or ddp: the processes, the backend, the wrapper and each rank's own figures (its process, loader workers,
    intra-op threads and launch core: its share of the host); a ranks part adds the one device its batches went to
    and its loader pipelines."""
    spec = run.spec
    per_rank = []
    for r in ranks:
        own = {k: r[k] for k in ("rank", "device", "pid", "workers", "intra_op_threads", "launch_core", "time_s")}
        per_rank.append(
            {
                **own,
                "data_wait_ms": summary.summarize_ms(r["waits"])["mean"],
                "compute_ms": summary.summarize_ms(r["computes"])["mean"],
                **_host_of(host_metrics([r])),
                "peak_gpu_mem_mb": r["peak_gpu_mem_mb"],
                "process_rss_mb": r["process_rss_mb"],
            }
        )
    delivered = {}
    if spec.ranks > 1:
        pipelines = spec.ranks if run.ddp else run.ctx.info.get("pipelines", 1)
        delivered = {"delivered_to": str(run.device), "pipelines": pipelines}
    return {
        "mode": spec.parallel,
        "processes": run.dist.world,
        "backend": run.dist.backend,
        "wrapper": _wrapper(run.model, spec.compile),
        "per_rank": per_rank,
        **delivered,
    }


def _host_of(host: dict) -> dict:
    """A rank's host figures as its per_rank entry keeps them: the step's host time (its mean) and its main thread's
    CPU time a step."""
    return {"host_step_ms": host["host_step_ms"]["mean"], "main_cpu_ms": host["main_cpu_ms"]}


def _wrapper(model, compiled: bool) -> str | None:
    """What the step's model is wrapped in (DataParallel, DistributedDataParallel); None without a model (`none`)."""
    if model is None:
        return None
    return f"compiled {type(model._orig_mod).__name__}" if compiled else type(model).__name__


def process_tree_rss_mb() -> float | None:
    """The resident memory of this process and its children (loader workers) now; None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM, which `entry.reset_for_next_cell` resets), else getrusage's."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
