"""One cell: train MobileNetV2 from a loader for a fixed timed window and measure it.

Run as `python -m loaderbench.train` by the cell runner (`loaderbench.runcell`) in a fresh process.
Window: warm-up steps first (cudnn autotune, worker start-up, prefetch fill - at least the loader's prefetch depth,
workers x prefetch_factor batches for DataLoader loaders or DALI's queue depth, so the window does not drain a
start-up backlog), then the device is synchronised, the clock starts, `window_steps` steps or `window_s` seconds
run, the device is synchronised again and the clock stops. Samples/s = steps x global batch / Time(s).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from .config import CellSpec
from . import parallel
from .parallel import env_rank
from .records import failed_record, make_record, skipped_record
from .staged import Staged, class_names
from .util import atomic_write_json


PROGRESS_S = 5.0


def available_devices() -> tuple[str, int]:
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count()
    return "cpu", 1


def resolve_workers(spec: CellSpec) -> int:
    """`auto`: every usable CPU but one, which the training process needs to launch its GPU work.

    On the H200 host (16 CPUs, quickstart grid, batch 16) 15 instead of 16 workers left the step time where it
    was (about 20-30 ms, launch-bound at that batch size): the reserved core is a safeguard, not a measured win.
    """
    if spec.workers == "auto":
        return max(1, len(os.sched_getaffinity(0)) - 1)
    return int(spec.workers)


def summarize_ms(values_s: list[float]) -> dict:
    a = np.asarray(values_s) * 1000.0
    if a.size == 0:
        return {"mean": None, "p50": None, "p95": None}
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95))}


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
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
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

    return model, step


def measure(spec: CellSpec, data_root: Path, allowed: frozenset[str]) -> dict | None:
    """Run the cell; returns the metrics dict (None on ddp ranks other than 0). Raises on failure."""
    t_start = time.perf_counter()
    marks = {"setup_start": time.time()}  # epoch seconds, for the telemetry timeline's phases
    since_process_start = _seconds_since_process_start()
    kind, count = available_devices()
    dist = parallel.start(spec.parallel, spec.gpus, spec.timeout_s)
    try:
        return _measure(spec, data_root, allowed, dist, kind, count, t_start, since_process_start, marks)
    finally:
        parallel.stop(dist)


def _measure(spec, data_root, allowed, dist, kind, count, t_start, since_process_start, marks) -> dict | None:
    import torch

    from .loaders import get_loader
    from .loaders.common import LoaderContext

    device = dist.device
    amp_dtype, input_dtype = dtypes(spec, kind)
    torch.manual_seed(spec.seed)
    if kind == "cuda":
        torch.backends.cudnn.benchmark = True
    workers = resolve_workers(spec)
    ddp = spec.parallel == "ddp"
    if ddp and workers and spec.workers == "auto":
        workers = max(1, (workers + 1) // dist.world - 1)  # the CPUs are shared by the ranks
    # dp: one process gets the global batch (DataParallel splits it); ddp: each rank loads its own share
    global_batch = spec.batch_size * spec.gpus
    ctx = LoaderContext(
        data_root=data_root,
        allowed=allowed,
        batch_size=spec.batch_size if ddp else global_batch,
        crop_size=spec.crop_size,
        workers=workers,
        prefetch_factor=spec.prefetch_factor,
        seed=spec.seed,
        device=device,
        channels_last=spec.channels_last,
        gpus=spec.gpus,
        dtype=input_dtype,
        rank=dist.rank,
        world=dist.world,
        options={
            "threads": spec.dali_threads,
            "prefetch_queue_depth": spec.dali_prefetch,
            "hw_decoder_load": spec.dali_hw_decoder_load,
            "dont_use_mmap": spec.tier_kind == "emulated",
        },
    )
    batches = get_loader(spec.loader).build(ctx)
    classes = len(class_names(allowed))  # from the manifest, as the loaders' labels

    prescattered = bool(ctx.info.get("prescattered"))
    model, step = training_step(spec, classes, device, wrap=lambda m: parallel.wrap(m, dist, spec.gpus, prescattered))

    def sync():
        if kind == "cuda":
            torch.cuda.synchronize(device)

    backlog = ctx.info["prefetch_batches"]
    # every rank runs the same number of steps (DDP's gradient all-reduce pairs them up)
    warmup = parallel.agree_max(dist, max(spec.warmup_steps, backlog + 2))
    t_setup = time.perf_counter()
    marks["warmup_start"] = time.time()
    for _ in range(warmup):
        step(*next(batches))
    sync()
    t_warm = time.perf_counter()

    timer = (lambda: torch.cuda.Event(enable_timing=True)) if kind == "cuda" else None
    waits: list[float] = []
    computes: list = []
    step_end: list[float] = []
    steps = 0
    shown = 0.0  # progress line every PROGRESS_S seconds (rank 0; one clock read per step, already taken)
    marks["window_start"] = time.time()
    t0 = time.perf_counter()
    while True:
        tw = time.perf_counter()
        images, labels = next(batches)
        tc = time.perf_counter()
        waits.append(tc - tw)
        if timer:
            ev0, ev1 = timer(), timer()
            ev0.record()
            loss = step(images, labels)
            ev1.record()
            computes.append((ev0, ev1))
        else:
            loss = step(images, labels)
            computes.append(time.perf_counter() - tc)
        steps += 1
        step_end.append(time.perf_counter() - t0)
        if dist.is_main and step_end[-1] - shown >= PROGRESS_S:
            shown = step_end[-1]
            print(f"  {spec.cell_id}: {steps} steps in {shown:.0f} s, {steps * global_batch / shown:.1f} samples/s "
                  "(host clock, device not synchronised)", file=sys.stderr, flush=True)  # fmt: skip
        if spec.window_steps is not None and steps >= spec.window_steps:
            break
        if spec.window_s is not None:
            # ranks stop together: at the first step after which any rank's clock passed the window
            if parallel.agree_max(dist, int(step_end[-1] >= spec.window_s)):
                break
    sync()
    elapsed = time.perf_counter() - t0
    marks["window_end"] = time.time()
    final_loss = float(loss.detach().float().item())
    if timer:
        computes = [a.elapsed_time(b) / 1000.0 for a, b in computes]

    # Steady-state check: throughput of the second half of the window over the first half.
    half = steps // 2
    half_ratio = None
    if half >= 2:
        t_half = step_end[half - 1]
        first, second = half / t_half, (steps - half) / max(elapsed - t_half, 1e-9)
        half_ratio = second / first

    peak_gpu = []
    if kind == "cuda":
        # dp: this process used GPUs 0..n-1; ddp: each rank its own
        ids = [device.index] if ddp else list(range(spec.gpus))
        peak_gpu = [torch.cuda.max_memory_allocated(i) / 2**20 for i in ids]
    rank_summary = {
        "rank": dist.rank,
        "device": str(device),
        "time_s": elapsed,
        "waits": waits,
        "computes": computes,
        "peak_gpu_mem_mb": peak_gpu,
        "process_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loader_info": ctx.info,
    }
    ranks = parallel.gather(dist, rank_summary)
    rss = _process_tree_rss_mb()
    del batches  # stops the workers
    if not dist.is_main:
        return None

    elapsed = max(r["time_s"] for r in ranks)  # the cell is as slow as its slowest rank
    first = images[0] if isinstance(images, list) else images  # a pre-scattered batch: one part per GPU
    all_waits = [w for r in ranks for w in r["waits"]]
    all_computes = [c for r in ranks for c in r["computes"]]
    warnings = []
    if not math.isfinite(final_loss):
        warnings.append(f"loss is {final_loss} at the end of the window: training diverged (throughput still measured)")
    if backlog and steps < 10 * backlog:
        warnings.append(
            f"window of {steps} steps is under 10x the prefetch depth ({backlog} batches): "
            "lengthen it so start-up backlog cannot inflate the result"
        )
    if half_ratio is not None and not 0.8 <= half_ratio <= 1.25:
        warnings.append(f"second half of the window ran at {half_ratio:.2f}x the first half's rate: not steady")

    return {
        "time_s": elapsed,
        "steps": steps,
        "global_batch": global_batch,
        "samples": steps * global_batch,
        "samples_per_s": steps * global_batch / elapsed,
        "step_ms": 1000.0 * elapsed / steps,
        "data_wait_ms": summarize_ms(all_waits),
        "compute_ms": summarize_ms(all_computes),
        "data_wait_fraction": float(sum(ranks[0]["waits"]) / ranks[0]["time_s"]),
        "warmup_steps": warmup,
        "startup_s": since_process_start,  # process start to here: interpreter, imports (torch), spec and manifest
        "setup_s": t_setup - t_start,  # CUDA context, process group, loader and model built
        "warmup_s": t_warm - t_setup,
        "input": {"dtype": str(first.dtype).replace("torch.", ""),
                  "channels_last": first.is_contiguous(memory_format=torch.channels_last)},  # fmt: skip
        "compiled": spec.compile,
        "marks": marks,
        "parallel": {
            "mode": spec.parallel,
            "processes": dist.world,
            "backend": ("nccl" if kind == "cuda" else "gloo") if ddp else None,
            "wrapper": type(model).__name__ if not spec.compile else f"compiled {type(model._orig_mod).__name__}",
            "per_rank": [
                {"rank": r["rank"], "device": r["device"], "time_s": r["time_s"],
                 "data_wait_ms": summarize_ms(r["waits"])["mean"], "compute_ms": summarize_ms(r["computes"])["mean"],
                 "peak_gpu_mem_mb": r["peak_gpu_mem_mb"], "process_rss_mb": r["process_rss_mb"]}
                for r in ranks
            ],  # fmt: skip
        },
        "prefetch_backlog_batches": backlog,
        "window_over_backlog": steps / backlog if backlog else None,
        "half_ratio": half_ratio,
        "final_loss": final_loss if math.isfinite(final_loss) else str(final_loss),
        "warnings": warnings,
        "workers": ctx.info.get("workers"),
        "loader_info": ctx.info,
        "device": {"type": kind, "count": count, "used": spec.gpus if kind == "cuda" else 0},
        "amp_dtype": str(amp_dtype).replace("torch.", "") if spec.precision == "amp" else None,
        "peak_gpu_mem_mb": [m for r in ranks for m in r["peak_gpu_mem_mb"]],
        "gpu_mem_nvml_mb": _nvml_used_mb(spec.gpus) if kind == "cuda" else None,
        "main_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "process_tree_rss_mb": rss,
    }


def _nvml_used_mb(gpus: int) -> list[float] | None:
    """Memory in use on GPUs 0..gpus-1 as NVML reports it (all processes, the CUDA contexts included)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py or no driver: the allocator's figures still stand
        return None
    try:
        return [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used / 2**20 for i in range(gpus)]
    finally:
        pynvml.nvmlShutdown()


def _seconds_since_process_start() -> float | None:
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


def run(spec: CellSpec, manifest_path: Path, out: Path) -> dict:
    """Measure the cell and write its record (ok, skipped or failed) to `out`."""
    started = time.time()
    manifest = json.loads(manifest_path.read_text())
    allowed = Staged.from_manifest(manifest).allowed
    rank = env_rank()
    try:
        kind, count = available_devices()
        have = count if kind == "cuda" else 0
        # Without a GPU a ddp cell runs its ranks as gloo processes on the CPU; dp over several devices needs GPUs.
        if spec.gpus > 1 and spec.gpus > have and not (kind == "cpu" and spec.parallel == "ddp"):
            record = skipped_record(
                spec, f"cell needs {spec.gpus} GPUs; this host has {have}" + (" (CPU only)" if kind == "cpu" else "")
            )
        else:
            metrics = measure(spec, spec.data_root, allowed)
            record = make_record(spec, "ok", metrics=metrics) if rank == 0 else None
    except BaseException as e:  # OOM, crashed workers, decode errors: a record, not a hole
        if isinstance(e, KeyboardInterrupt):
            raise
        reason = f"{type(e).__name__}: {e}".strip()
        if "out of memory" in reason.lower():
            reason = "out of memory: " + reason
        record = failed_record(spec, reason if rank == 0 else f"rank {rank}: {reason}", traceback.format_exc(limit=8))
    if record is None:  # a ddp rank other than 0 that finished: rank 0 writes the record
        return {"status": "ok"}
    if rank != 0:  # a failed rank: its own file, which the cell runner reads when rank 0 has none
        out = out.with_name(f"{out.name}.rank{rank}")
    record["manifest_sha256"] = manifest.get("sha256")
    record["started_at"] = started
    record["wall_s"] = time.time() - started
    atomic_write_json(out, record)
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loaderbench.train")
    p.add_argument("--spec", required=True, help="cell spec as JSON")
    p.add_argument("--manifest", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args(argv)
    spec = CellSpec.from_dict(json.loads(a.spec))
    record = run(spec, a.manifest, a.out)
    print(json.dumps({"cell": spec.cell_id, "rank": env_rank(), "status": record["status"]}), file=sys.stderr)
    # a failed ddp rank exits non-zero so the cell runner stops the ranks still waiting for it
    return 1 if env_rank() != 0 and record["status"] == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
