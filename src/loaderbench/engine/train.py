"""One cell: build the loader and the model, place the threads, then warm up and time a window (`window`), and
summarise it (`metrics`).

Run as `python -m loaderbench.engine.train` by the cell runner (`loaderbench.engine.runcell`) in a fresh process (one per rank under
ddp), which watches its heartbeat (`watchdog`) and writes the final record.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import threading
import time
import traceback
from pathlib import Path

from loaderbench.core.config import CellSpec
from loaderbench.core.provenance import gpu_memory_used_mb
from loaderbench.core.util import atomic_write_json
from loaderbench.data.manifest import Staged, class_names

from . import metrics as summary
from . import parallel, placement, stepprofile
from .parallel import env_rank
from .watchdog import Heartbeat, heartbeat_path, stacks_path
from .window import StopRule, batch_durations, hold_collection, timed_window, trace, warm_up


def available_devices() -> tuple[str, int]:
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count()
    return "cpu", 1


def resolve_workers(spec: CellSpec, place: placement.Placement | None = None, ranks: int = 1,
                    usable: int | None = None) -> int:  # fmt: skip
    """`auto`: the CPUs left once the launching threads have theirs (every usable CPU but one when unpinned), shared
    among a ddp cell's `ranks`. `usable`: the usable CPUs (default this process's; `loaderbench plan` gives a host's)."""
    if spec.workers != "auto":
        return int(spec.workers)
    free = len(place.others) if place else max(1, (len(os.sched_getaffinity(0)) if usable is None else usable) - 1)
    return max(1, free // ranks) if free else 0


TORCH_BENCHMARK_LIMIT = 10  # torch.backends.cudnn.benchmark_limit's default


def configure_cudnn(spec: CellSpec) -> None:
    """cuDNN as the cell asks: autotuning on or off, and how many algorithms it tries (the cell and the bare loop)."""
    import torch

    torch.backends.cudnn.benchmark = spec.cudnn_benchmark
    # set every time (None: torch's default), so a process kept from another cell does not keep that cell's limit
    torch.backends.cudnn.benchmark_limit = TORCH_BENCHMARK_LIMIT if spec.cudnn_benchmark_limit is None \
        else spec.cudnn_benchmark_limit  # fmt: skip


def dtypes(spec: CellSpec, kind: str):
    """(autocast dtype, dtype the loaders deliver) for this cell on device type `kind`."""
    import torch

    amp_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(
        spec.amp_dtype, torch.float16 if kind == "cuda" else torch.bfloat16
    )
    return amp_dtype, amp_dtype if spec.precision == "amp" and spec.input_dtype == "auto" else torch.float32


def training_step(spec: CellSpec, classes: int, device, wrap=None):
    """The cell's model (MobileNetV2, channels_last, wrapped by `wrap`, compiled if asked), loss, SGD and AMP
    (autocast + GradScaler for float16). Returns (model, step); step(images, labels) runs one training step."""
    import torch
    import torchvision

    kind = device.type
    amp = spec.precision == "amp"
    amp_dtype, _ = dtypes(spec, kind)
    model = torchvision.models.mobilenet_v2(num_classes=max(classes, 2)).to(device)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if wrap is not None:
        model = wrap(model)
    model.train()
    criterion = torch.nn.CrossEntropyLoss()
    # fused: one kernel set for the update, and GradScaler passes it the overflow flag on the device instead of
    # reading it on the host mid-step (GradScaler.step's .item(): a synchronisation after which the GPU idles until
    # the host launches again: config/README.md, `optimizer.fused`)
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay,
                                fused=spec.optimizer_fused or None)  # fmt: skip
    if spec.compile:  # compiled by the first step (the cell's warm-up), outside the window
        model = torch.compile(model)
    scaler = torch.amp.GradScaler(kind, enabled=amp and amp_dtype == torch.float16)

    def step(images, labels):
        with torch.autocast(kind, dtype=amp_dtype, enabled=amp):
            loss = criterion(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    step.optimizer = optimizer  # for the record (fused or not)
    return model, step


def cold_batch(ctx, classes: int):
    """A batch as the loader built from `ctx` delivers it - shape, dtype, memory format, devices - of random numbers,
    for the cold step: the global batch on the first GPU (dp), a rank's batch on its GPU (ddp), or, from a loader that
    hands DataParallel its batch pre-scattered (dali-mc under dp), one part per GPU on that GPU with the labels
    together on the first. Labels are int64 class indices."""
    import torch

    gen = torch.Generator().manual_seed(ctx.seed)  # not the global generator the model and the augmentations draw from

    def images(n, device):
        x = torch.randn(n, 3, ctx.crop_size, ctx.crop_size, generator=gen)
        return x.to(device, ctx.dtype, memory_format=ctx.memory_format)

    parts = ctx.gpus if ctx.info.get("prescattered") else 1
    n = ctx.batch_size // parts
    labels = torch.randint(0, max(classes, 1), (n * parts,), generator=gen).to(ctx.device)
    if parts > 1:
        return [images(n, torch.device(ctx.device.type, i)) for i in range(parts)], labels
    return images(n, ctx.device), labels


def loader_context(spec: CellSpec, data_root: Path, allowed: frozenset[str], device, place: placement.Placement | None,
                   rank: int = 0, world: int = 1):  # fmt: skip
    """The LoaderContext a cell builds its loader from (the cell and the crosscheck's bare loop alike). dp: one process
    takes the global batch (DataParallel splits it); ddp (`world` > 1): each rank loads its own share."""
    from loaderbench.loaders.common import LoaderContext

    _, input_dtype = dtypes(spec, device.type)
    return LoaderContext(
        data_root=data_root,
        allowed=allowed,
        batch_size=spec.batch_size if world > 1 else spec.batch_size * spec.gpus,
        crop_size=spec.crop_size,
        workers=resolve_workers(spec, place, ranks=world),
        prefetch_factor=spec.prefetch_factor,
        seed=spec.seed,
        device=device,
        channels_last=spec.channels_last,
        gpus=spec.gpus,
        dtype=input_dtype,
        rank=rank,
        world=world,
        options={
            "threads": spec.dali_threads,
            "prefetch_queue_depth": spec.dali_prefetch,
            "hw_decoder_load": spec.dali_hw_decoder_load,
            "dont_use_mmap": spec.tier_kind == "emulated",
            "cpus": place.others if place else None,
            "transport": spec.torchvision_transport,
        },
    )


def measure(spec: CellSpec, data_root: Path, allowed: frozenset[str], heartbeat: Heartbeat | None = None,
            timeout_s: float = 600.0) -> dict | None:  # fmt: skip
    """Run the cell; returns the metrics dict (None on ddp ranks other than 0). Raises on failure."""
    t_start = time.perf_counter()
    marks = {"setup_start": time.time()}  # epoch seconds, for the telemetry timeline's phases
    since_process_start = _seconds_since_process_start()
    heartbeat = heartbeat or Heartbeat(None)
    heartbeat.phase("setup")
    kind, count = available_devices()
    dist = parallel.start(spec.parallel, spec.gpus, timeout_s)
    try:
        return _measure(spec, data_root, allowed, dist, kind, count, t_start, since_process_start, marks, heartbeat)
    finally:
        parallel.stop(dist)


def _measure(spec, data_root, allowed, dist, kind, count, t_start, since_process_start, marks, heartbeat) -> dict | None:
    import torch

    from loaderbench.loaders import get_loader

    device = dist.device
    amp_dtype, _ = dtypes(spec, kind)
    torch.manual_seed(spec.seed)
    if kind == "cuda":
        configure_cudnn(spec)
    place = placement.for_cell(spec.placement, spec.gpus, kind)
    ddp = spec.parallel == "ddp"
    # the GPUs this process drives - dp: 0..n-1, ddp: its rank's own
    gpu_ids = ([device.index] if ddp else list(range(spec.gpus))) if kind == "cuda" else []
    ctx = loader_context(spec, data_root, allowed, device, place, dist.rank, dist.world if ddp else 1)
    batches = get_loader(spec.loader).build(ctx)
    global_batch = spec.batch_size * spec.gpus
    classes = len(class_names(allowed))  # from the manifest, as the loaders' labels

    prescattered = bool(ctx.info.get("prescattered"))
    model, step = training_step(spec, classes, device, wrap=lambda m: parallel.wrap(m, dist, spec.gpus, prescattered))

    def sync():
        if kind == "cuda":
            torch.cuda.synchronize(device)

    placed = {}

    def pin():
        """Launching threads on their own cores, every other thread of this process and its workers on the rest."""
        if place is None:
            return
        keep = {threading.get_native_id(): place.launch[dist.rank if ddp else 0]}
        for i, tid in enumerate(parallel.launch_threads(model), start=1):  # dp's replica threads
            keep[tid] = place.launch[i % len(place.launch)]
        placed["threads"] = placement.pin_process_tree(os.getpid(), place.others, keep)
        placed["launch"] = {str(t): c for t, c in keep.items()}

    cold_step_s = None
    if spec.cold_step_on(kind):
        # the loader's workers and threads exist once it is built: the launching thread gets its core now, not after
        # the first step - the cold step's host work (kernel loading, cuDNN's plans) otherwise shares every core
        # with the loader's start-up
        pin()
        # The device's cold start (lazy kernel loading, cuDNN/cuBLAS handles; torch.compile's compilation) on a batch
        # of random numbers while the loader, built and started, fills its backlog - instead of after its first
        # batch, serially. Part of setup: not in the warm-up's steps, not in the window. Every rank of a ddp cell
        # runs it (the setting and the device type are the same on every rank), so their steps still pair up.
        marks["cold_step_start"] = time.time()
        t = time.perf_counter()
        with torch.random.fork_rng(devices=gpu_ids):  # its dropout leaves the random streams as it found them
            step(*cold_batch(ctx, classes))
        sync()
        cold_step_s = time.perf_counter() - t

    backlog = ctx.info["prefetch_batches"]
    # every rank runs the same number of steps (DDP's gradient all-reduce pairs them up)
    warmup = parallel.agree_max(dist, max(spec.warmup_steps, backlog + 2))
    t_setup = time.perf_counter()
    marks["warmup_start"] = time.time()
    heartbeat.phase("warmup")
    first = {}

    def after_first_step():
        first["s"] = time.perf_counter() - t_setup
        pin()  # workers, DALI and replica threads exist now

    warm_waits = []
    hold_collection()
    warm, drained_at = warm_up(step, batches, warmup, sync, heartbeat, on_first_step=after_first_step,
                               min_steps=spec.warmup_steps,
                               agree_drained=lambda done: not parallel.agree_max(dist, int(not done)), waits=warm_waits)
    pin()  # again: threads started during the warm-up (a new epoch's pin-memory thread) go where they belong
    t_warm = time.perf_counter()

    rule = StopRule(steps=spec.window_steps, seconds=spec.window_s, max_seconds=spec.window_max_s,
                    min_seconds=spec.window_min_s, precision=spec.window_precision,
                    burst=int(ctx.info.get("workers") or 1))  # DataLoader workers deliver a batch each  # fmt: skip
    heartbeat.phase("window")
    marks["window_start"] = time.time()
    win = timed_window(
        step, batches, rule, sync, heartbeat,
        agree_max=lambda value: parallel.agree_max(dist, value),
        cuda_timer=(lambda: torch.cuda.Event(enable_timing=True)) if kind == "cuda" else None,
        label=spec.cell_id, samples_per_step=global_batch, show_progress=dist.is_main, lead_wait=warm_waits[-1],
    )  # fmt: skip
    marks["window_end"] = time.time()
    heartbeat.phase("teardown")
    final_loss = float(win.loss.detach().float().item())

    peak_gpu = [torch.cuda.max_memory_allocated(i) / 2**20 for i in gpu_ids]
    profile = None
    if spec.profile_steps:  # outside the window; every rank profiles as many steps (ddp's all-reduce pairs them)
        profile = stepprofile.run(step, batches, spec.profile_steps, sync, kind, heartbeat.beat)
    rank_summary = {
        "rank": dist.rank,
        "device": str(device),
        "time_s": win.elapsed_s,
        "waits": win.waits,
        "computes": win.computes,
        "peak_gpu_mem_mb": peak_gpu,
        "process_rss_mb": _peak_rss_mb(),
        "loader_info": ctx.info,
        "profile": profile,
    }
    ranks = parallel.gather(dist, rank_summary)
    rss = _process_tree_rss_mb()
    # the workers are not shut down one by one (seconds of joins): the process ends with os._exit once its record is
    # written, and its workers are killed with it (`main`)
    _KEEP.append(batches)
    if not dist.is_main:
        return None

    elapsed = max(r["time_s"] for r in ranks)  # the cell is as slow as its slowest rank
    steps = win.steps
    images = win.last_batch[0]
    first_input = images[0] if isinstance(images, list) else images  # a pre-scattered batch: one part per GPU
    all_waits = [w for r in ranks for w in r["waits"]]
    all_computes = [c for r in ranks for c in r["computes"]]
    ratio = summary.half_ratio(win.step_end, win.elapsed_s)
    warnings = summary.warnings_for(
        final_loss=final_loss, backlog=backlog, steps=steps, ratio=ratio, rule=rule, converged=win.converged,
        halfwidth=win.halfwidth, warmup_durations=warm, window_step_end=win.step_end,
    )  # fmt: skip
    return {
        "time_s": elapsed,
        "steps": steps,
        "global_batch": global_batch,
        "samples": steps * global_batch,
        "samples_per_s": steps * global_batch / elapsed,
        "step_ms": 1000.0 * elapsed / steps,
        "data_wait_ms": summary.summarize_ms(all_waits),
        "compute_ms": summary.summarize_ms(all_computes),
        "data_wait_fraction": float(sum(ranks[0]["waits"]) / ranks[0]["time_s"]),
        "window": {"mode": rule.mode, "min_s": rule.min_seconds if rule.mode == "adaptive" else None,
                   "max_s": rule.max_seconds, "precision": rule.precision if rule.mode == "adaptive" else None,
                   "ci95_rel_halfwidth": win.halfwidth, "converged": win.converged,
                   "burst": rule.burst, "whole_bursts": win.extra.get("whole_bursts"),
                   "batch_s": batch_durations(win.step_end, burst=win.extra["batch_unit"], bounds=win.extra.get("bounds")),
                   "trace": trace(win.step_end)},  # fmt: skip
        "warmup_steps": len(warm),
        "warmup_steps_max": warmup,  # the backlog bound; fewer ran when the loader's backlog was found used up
        "warmup_drained_at": drained_at,
        "warmup_step_ms": summary.summarize_ms(warm[1:]),
        "warmup_steps_s": [round(d, 5) for d in warm],
        "startup_s": since_process_start,  # process start to here: interpreter, imports (torch), spec and manifest
        "setup_s": t_setup - t_start,  # CUDA context, process group, loader and model built
        "first_step_s": first.get("s"),  # autotuning, lazy CUDA module loading, worker start-up, first batch
        "cold_step_s": cold_step_s,  # the cold step on a random batch in setup (None: not run); setup_s holds it
        "warmup_s": t_warm - t_setup,
        "input": {"dtype": str(first_input.dtype).replace("torch.", ""),
                  "channels_last": first_input.is_contiguous(memory_format=torch.channels_last)},  # fmt: skip
        "compiled": spec.compile,
        "optimizer": {"name": type(step.optimizer).__name__, "fused": bool(step.optimizer.defaults.get("fused"))},
        "cudnn_benchmark": spec.cudnn_benchmark if kind == "cuda" else None,
        "cudnn_benchmark_limit": torch.backends.cudnn.benchmark_limit if kind == "cuda" else None,
        "placement": {**place.to_dict(), **placed} if place else {"off": f"placement {spec.placement} on {kind}"},
        "marks": marks,
        "parallel": {
            "mode": spec.parallel,
            "processes": dist.world,
            "backend": ("nccl" if kind == "cuda" else "gloo") if ddp else None,
            "wrapper": type(model).__name__ if not spec.compile else f"compiled {type(model._orig_mod).__name__}",
            "per_rank": [
                {"rank": r["rank"], "device": r["device"], "time_s": r["time_s"],
                 "data_wait_ms": summary.summarize_ms(r["waits"])["mean"],
                 "compute_ms": summary.summarize_ms(r["computes"])["mean"],
                 "peak_gpu_mem_mb": r["peak_gpu_mem_mb"], "process_rss_mb": r["process_rss_mb"]}
                for r in ranks
            ],  # fmt: skip
        },
        "prefetch_backlog_batches": backlog,
        "window_over_backlog": steps / backlog if backlog else None,
        "half_ratio": ratio,
        "final_loss": final_loss if math.isfinite(final_loss) else str(final_loss),
        "warnings": warnings,
        "workers": ctx.info.get("workers"),
        "loader_info": ctx.info,
        "profile": [r["profile"] for r in ranks] if spec.profile_steps else None,  # one per rank (stepprofile)
        "device": {"type": kind, "count": count, "used": spec.gpus if kind == "cuda" else 0},
        "amp_dtype": str(amp_dtype).replace("torch.", "") if spec.precision == "amp" else None,
        "peak_gpu_mem_mb": [m for r in ranks for m in r["peak_gpu_mem_mb"]],
        "gpu_mem_nvml_mb": gpu_memory_used_mb(spec.gpus) if kind == "cuda" else None,
        "main_peak_rss_mb": _peak_rss_mb(),
        "process_tree_rss_mb": rss,
    }


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


def _process_tree_rss_mb() -> float | None:
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


def outcome(status: str, reason: str | None = None, metrics: dict | None = None, detail: str | None = None) -> dict:
    """What the measuring process hands its runner (`runcell`, which builds the record from it with
    `records.make_record`): the status, its reason, the metrics, and CUDA/cuDNN as this process loaded them."""
    out = {"status": status, "reason": reason, "metrics": metrics, "detail": detail}
    try:
        from loaderbench.core.provenance import runtime

        out["runtime"] = runtime()
    except Exception:  # a broken torch still gets its failure outcome
        pass
    return out


def run(spec: CellSpec, manifest_path: Path, out: Path, heartbeat: Heartbeat | None = None,
        timeout_s: float = 600.0) -> dict:  # fmt: skip
    """Measure the cell and write its outcome (ok, skipped or failed) to `out`; a failed ddp rank other than 0
    writes `<out>.rank<N>`, a finished one writes nothing."""
    manifest = json.loads(manifest_path.read_text())
    allowed = Staged.from_manifest(manifest).allowed
    rank = env_rank()
    try:
        kind, count = available_devices()
        have = count if kind == "cuda" else 0
        # Without a GPU a ddp cell runs its ranks as gloo processes on the CPU; dp over several devices needs GPUs.
        if spec.gpus > 1 and spec.gpus > have and not (kind == "cpu" and spec.parallel == "ddp"):
            result = outcome(
                "skipped", f"cell needs {spec.gpus} GPUs; this host has {have}" + (" (CPU only)" if kind == "cpu" else "")
            )
        else:
            metrics = measure(spec, spec.data_root, allowed, heartbeat, timeout_s)
            if rank != 0:  # a ddp rank other than 0 that finished: rank 0 reports the cell
                return {"status": "ok"}
            result = outcome("ok", metrics=metrics)
    except BaseException as e:  # OOM, crashed workers, decode errors: a record, not a hole
        if isinstance(e, KeyboardInterrupt):
            raise
        reason = f"{type(e).__name__}: {e}".strip()
        if "out of memory" in reason.lower():
            reason = "out of memory: " + reason
        result = outcome("failed", reason if rank == 0 else f"rank {rank}: {reason}",
                         detail=traceback.format_exc(limit=8))  # fmt: skip
    atomic_write_json(out if rank == 0 else out.with_name(f"{out.name}.rank{rank}"), result)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loaderbench.engine.train")
    p.add_argument("--spec", required=True, help="cell spec as JSON")
    p.add_argument("--manifest", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--timeout-s", type=float, default=600.0, help="the cell's time limit (process group timeout)")
    a = p.parse_args(argv)
    spec = CellSpec.from_dict(json.loads(a.spec))
    rank = env_rank()
    heartbeat = Heartbeat(heartbeat_path(a.out, rank), stacks_path(a.out, rank))
    record = run(spec, a.manifest, a.out, heartbeat, a.timeout_s)
    LAST_STATUS[0] = record["status"]
    print(json.dumps({"cell": spec.cell_id, "rank": rank, "status": record["status"]}), file=sys.stderr)
    # a failed ddp rank exits non-zero so the cell runner stops the ranks still waiting for it
    return 1 if rank != 0 and record["status"] == "failed" else 0


_KEEP: list = []  # loaders kept alive until the process ends (see `_exit_now`)
LAST_STATUS: list = [None]  # the status of the cell `main` ran last (warmstart keeps only a process whose cell was ok)


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM, which `reset_for_next_cell` resets), else getrusage's."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
        _KEEP.clear()
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


def _exit_now(code: int) -> None:
    """End at once: the record is written, so nothing is left to do but stop. Loader workers are killed instead of
    joined and the interpreter is not torn down module by module - seconds per cell, paid hundreds of times."""
    sys.stdout.flush()
    sys.stderr.flush()
    _kill_children()
    os._exit(code)


def _kill_children() -> None:
    """SIGKILL to every descendant of this process (its loader workers)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass


if __name__ == "__main__":
    _exit_now(main())
