"""One cell's measurement inside its process: build the loader and the model, place the threads, warm up, time a
window (`window`) and summarise it (`metrics`, `runmetrics`). `entry` runs it as the measuring process's entry point."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.provenance import gpu_memory_used_mb
from loaderbench.data.manifest import class_names

from .. import placement
from ..step import cold_batch, configure_cudnn, dtypes, loader_context, training_step
from ..watchdog import Heartbeat
from . import metrics as summary
from . import parallel, parts, stepprofile
from .runmetrics import (
    parallel_record,
    peak_rss_mb,
    phase_metrics,
    process_tree_rss_mb,
    rate_metrics,
    settings_record,
    window_record,
)
from .window import StopRule, hold_collection, timed_window, warm_up

KEEP: list = []  # loaders kept alive until the process ends (their workers are killed with it, not joined)


class CellRun:
    """A cell being measured in this process (one rank of a ddp cell): what was built, and what each phase found."""

    def __init__(
        self,
        spec: CellSpec,
        data_root: Path,
        allowed: frozenset[str],
        dist,
        kind: str,
        heartbeat: Heartbeat,
        marks: dict,
    ):
        import torch

        from loaderbench.loaders import get_loader
        from loaderbench.loaders.common import SameForm

        self.spec, self.dist, self.kind, self.heartbeat, self.marks = spec, dist, kind, heartbeat, marks
        self.device = dist.device
        self.amp_dtype, _ = dtypes(spec, kind)
        torch.manual_seed(spec.seed)
        if kind == "cuda":
            configure_cudnn(spec)
        self.place = placement.for_cell(spec.placement, spec.launchers, kind)
        self.ddp = spec.parallel == "ddp"
        # the GPUs this process drives - dp: 0..n-1, ddp: its rank's own
        self.gpu_ids = ([self.device.index] if self.ddp else list(range(spec.gpus))) if kind == "cuda" else []
        facts = parts.loader_facts(spec)
        parts.check_ranks(spec, facts)
        build = get_loader(spec.loader, spec.loader_ref).build

        def context(rank: int, world: int):
            return loader_context(spec, data_root, allowed, self.device, self.place, rank, world)

        if spec.ranks > 1 and not self.ddp:  # a ranks part under dp: n GPUs' worth of batches from this process
            self.ctx, batches = parts.dp_rank_batches(spec, facts, build, context)
        else:
            self.ctx = context(dist.rank, dist.world if self.ddp else 1)
            batches = build(self.ctx)
        who = f"plugin loader {spec.loader_ref!r}" if spec.loader_ref else f"loader {spec.loader!r}"
        # every batch the cell takes (warm-up, window, profile) keeps the first one's shape, dtype and device
        self.batches = SameForm(batches, who)
        self.global_batch = spec.batch_size * spec.gpus * spec.ranks
        self.classes = len(class_names(allowed))  # from the manifest, as the loaders' labels
        prescattered = bool(self.ctx.info.get("prescattered"))
        self.model, self.step = training_step(
            spec, self.classes, self.device, wrap=lambda m: parallel.wrap(m, dist, spec.gpus, prescattered)
        )
        if spec.beside:  # the model steps on a synthetic batch; the loader's are fetched and dropped
            self.step = parts.beside_step(self.step, self.ctx)
        self.backlog = self.ctx.info["prefetch_batches"]
        self.placed: dict = {}
        self.step_times: dict = {}  # the warm-up's and the window's steps, for the cell's trace (`step_times`)

    def sync(self) -> None:
        if self.kind == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def pin(self) -> None:
        """Launching threads on their own cores, every other thread of this process and its workers on the rest."""
        if self.place is None:
            return
        keep = {threading.get_native_id(): self.place.launch[self.dist.rank if self.ddp else 0]}
        for i, tid in enumerate(parallel.launch_threads(self.model), start=1):  # dp's replica threads
            keep[tid] = self.place.launch[i % len(self.place.launch)]
        self.placed["threads"] = placement.pin_process_tree(os.getpid(), self.place.others, keep)
        self.placed["launch"] = {str(t): c for t, c in keep.items()}

    def cold_step(self) -> float | None:
        """The device's cold start on a random batch while the loader fills its backlog; its seconds (None: not run).

        The loader's workers and threads exist once it is built, so the launching thread gets its core now: the cold
        step's host work (kernel loading, cuDNN's plans) would otherwise share every core with the loader's start-up.
        Part of setup, never in the warm-up's steps or the window; every rank of a ddp cell runs it, so their steps
        still pair up."""
        import torch

        if not self.spec.cold_step_on(self.kind):
            return None
        self.pin()
        self.marks["cold_step_start"] = time.time()
        t = time.perf_counter()
        with torch.random.fork_rng(devices=self.gpu_ids):  # its dropout leaves the random streams as it found them
            self.step(*cold_batch(self.ctx, self.classes))
        self.sync()
        return time.perf_counter() - t

    def warm_up(self) -> dict:
        """Untimed steps until the loader's start-up backlog is spent (`window.warm_up`), the threads placed after the
        first step and again after the last; what the warm-up found."""
        spec, dist = self.spec, self.dist
        # every rank runs the same number of steps (DDP's gradient all-reduce pairs them up)
        bound = parallel.agree_max(dist, max(spec.warmup_steps, self.backlog + 2))
        t_setup = time.perf_counter()
        self.marks["warmup_start"] = time.time()
        self.heartbeat.phase("warmup")
        first = {}

        def after_first_step():
            first["s"] = time.perf_counter() - t_setup
            self.pin()  # workers, DALI and replica threads exist now

        waits: list = []
        starts: list = []
        hold_collection()
        durations, drained_at = warm_up(
            self.step,
            self.batches,
            bound,
            self.sync,
            self.heartbeat,
            on_first_step=after_first_step,
            min_steps=spec.warmup_steps,
            agree_drained=lambda done: not parallel.agree_max(dist, int(not done)),
            waits=waits,
            starts=starts,
        )
        self.pin()  # again: threads started during the warm-up (a new epoch's pin-memory thread) go where they belong
        return {
            "durations": durations,
            "drained_at": drained_at,
            "bound": bound,
            "waits": waits,
            "starts": starts,
            "first_step_s": first.get("s"),
            "t_setup": t_setup,
            "t_warm": time.perf_counter(),
        }

    def window(self, lead_wait: float):
        """(stop rule, timed window): steps until the rate is known, on the device's clock on a GPU."""
        import torch

        spec = self.spec
        rule = StopRule(
            steps=spec.window_steps,
            seconds=spec.window_s,
            max_seconds=spec.window_max_s,
            min_seconds=spec.window_min_s,
            precision=spec.window_precision,
            burst=int(self.ctx.info.get("workers") or 1),
        )  # DataLoader workers deliver a batch each
        self.heartbeat.phase("window")
        self.marks["window_start"] = time.time()
        win = timed_window(
            self.step,
            self.batches,
            rule,
            self.sync,
            self.heartbeat,
            agree_max=lambda value: parallel.agree_max(self.dist, value),
            cuda_timer=(lambda: torch.cuda.Event(enable_timing=True)) if self.kind == "cuda" else None,
            label=spec.cell_id,
            samples_per_step=self.global_batch,
            show_progress=self.dist.is_main,
            lead_wait=lead_wait,
        )
        self.marks["window_end"] = time.time()
        self.heartbeat.phase("teardown")
        return rule, win

    def rank_summary(self, win) -> dict:
        """What this rank measured, for rank 0 to gather; `profile_steps` more steps profiled after the window (after
        the peak memory is read: the profiler's own allocations are not the cell's)."""
        import torch

        peak_gpu = [torch.cuda.max_memory_allocated(i) / 2**20 for i in self.gpu_ids]
        profile = None
        if (
            self.spec.profile_steps
        ):  # outside the window; every rank profiles as many steps (ddp's all-reduce pairs them)
            profile = stepprofile.run(
                self.step, self.batches, self.spec.profile_steps, self.sync, self.kind, self.heartbeat.beat
            )
        return {
            "rank": self.dist.rank,
            "device": str(self.device),
            "pid": os.getpid(),
            "workers": self.ctx.info.get("workers"),
            "intra_op_threads": torch.get_num_threads(),
            "launch_core": self.place.launch[self.dist.rank if self.ddp else 0] if self.place else None,
            "time_s": win.elapsed_s,
            "waits": win.waits,
            "computes": win.computes,
            "host_steps": win.host_steps,
            "main_cpu_s": win.main_cpu_s,
            "peak_gpu_mem_mb": peak_gpu,
            "process_rss_mb": peak_rss_mb(),
            "loader_info": self.ctx.info,
            "profile": profile,
        }


def measure_in(run: CellRun, t_start: float, since_process_start: float | None, count: int) -> dict | None:
    """Run the cell's phases; its metrics on rank 0 (None on the other ranks of a ddp cell)."""
    cold_step_s = run.cold_step()
    warm = run.warm_up()
    rule, win = run.window(warm["waits"][-1])
    run.step_times = step_times(warm, win.timings, run.kind)
    final_loss = float(win.loss.detach().float().item())
    ranks = parallel.gather(run.dist, run.rank_summary(win))
    rss = process_tree_rss_mb()
    # the workers are not shut down one by one (seconds of joins): the process ends with os._exit once its record is
    # written, and its workers are killed with it (`entry.main`)
    KEEP.append(run.batches)
    if not run.dist.is_main:
        return None
    elapsed = max(r["time_s"] for r in ranks)  # the cell is as slow as its slowest rank
    steps = win.steps
    ratio = summary.half_ratio(win.step_end, win.elapsed_s)
    warnings = summary.warnings_for(
        final_loss=final_loss,
        backlog=run.backlog,
        steps=steps,
        ratio=ratio,
        rule=rule,
        converged=win.converged,
        halfwidth=win.halfwidth,
        warmup_durations=warm["durations"],
        window_step_end=win.step_end,
    )
    return {
        **rate_metrics(run, ranks, elapsed, steps),
        "window": window_record(rule, win),
        **phase_metrics(run, warm, t_start, since_process_start, cold_step_s),
        **settings_record(run, win.last_batch[0]),
        "parallel": parallel_record(run, ranks),
        "prefetch_backlog_batches": run.backlog,
        "window_over_backlog": steps / run.backlog if run.backlog else None,
        "half_ratio": ratio,
        "final_loss": final_loss if math.isfinite(final_loss) else str(final_loss),
        "warnings": warnings,
        "workers": run.ctx.info.get("workers"),
        "loader_info": run.ctx.info,
        "profile": [r["profile"] for r in ranks] if run.spec.profile_steps else None,  # one per rank (stepprofile)
        "device": {"type": run.kind, "count": count, "used": run.spec.gpus if run.kind == "cuda" else 0},
        "peak_gpu_mem_mb": [m for r in ranks for m in r["peak_gpu_mem_mb"]],
        "gpu_mem_nvml_mb": gpu_memory_used_mb(run.spec.gpus) if run.kind == "cuda" else None,
        "main_peak_rss_mb": peak_rss_mb(),
        "process_tree_rss_mb": rss,
    }


def step_times(warm: dict, window: dict, kind: str) -> dict:
    """The steps this process ran, for the cell's trace (not the record): the warm-up's (start, wait for the batch,
    end: its steps are not split further) and the window's (`WindowResult.timings`), in seconds from the window's
    start on the host's clock, `t0_epoch` that start in epoch seconds."""
    t0 = window["t0"]
    r = lambda xs: [round(x, 7) for x in xs]
    start = [s - t0 for s in warm["starts"]]
    return {
        "t0_epoch": window["t0_epoch"],
        "device": kind,
        "warmup": {
            "start": r(start),
            "wait": r(warm["waits"]),
            "end": r([s + d for s, d in zip(start, warm["durations"], strict=True)]),
        },
        "window": {k: (v if k == "kept" else r(v)) for k, v in window.items() if k not in ("t0", "t0_epoch")},
    }
