"""Loader-only throughput (images/s, model: none): how fast each loader can feed, on the same staged files."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

from loaderbench.core.registry import NO_MODEL
from loaderbench.data.manifest import Staged


def loader_images_per_s(
    loader: str,
    data_root: Path,
    allowed: frozenset[str],
    batch_size: int,
    crop_size: int,
    workers: int,
    seconds: float,
    device,
    seed: int = 0,
) -> float:
    """Images/s that `loader` delivers to the training device (the GPU if there is one, else the CPU) over
    `seconds`, after a warm-up that drains the prefetch backlog; the device is synchronised before each clock."""
    import torch

    from loaderbench.loaders import get_loader
    from loaderbench.loaders.common import LoaderContext

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    ctx = LoaderContext(
        data_root=data_root,
        allowed=allowed,
        batch_size=batch_size,
        crop_size=crop_size,
        workers=workers,
        prefetch_factor=2,
        seed=seed,
        device=device,
        channels_last=True,
    )
    batches = get_loader(loader).build(ctx)
    for _ in range(ctx.info["prefetch_batches"] + 2):  # start-up and the prefetch backlog stay outside the window
        next(batches)
    sync()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        images, _ = next(batches)
        n += images.shape[0]
    sync()
    elapsed = time.perf_counter() - t0
    del batches
    return n / elapsed


def bench(
    manifest: Path,
    loaders: list[str],
    batch_size: int,
    crop_size: int,
    workers: int | None,
    seconds: float,
    rounds: int,
) -> dict:
    import torch

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    man = json.loads(Path(manifest).read_text())
    staged = Staged.from_manifest(man)
    allowed = staged.allowed
    workers = workers or len(os.sched_getaffinity(0))
    results: dict[str, list[float]] = {lo: [] for lo in loaders}
    for r in range(rounds):  # interleaved rounds, so drift in machine load hits every loader alike
        for lo in loaders:
            results[lo].append(
                loader_images_per_s(lo, staged.root, allowed, batch_size, crop_size, workers, seconds, device, seed=r)
            )
    return {
        "manifest": str(manifest),
        "tier": man["tier"],
        "model": NO_MODEL,  # no model trains: the loader's batches delivered to the device, nothing run on them
        "files": len(allowed),
        "batch_size": batch_size,
        "crop_size": crop_size,
        "workers": workers,
        "device": device.type,
        "seconds": seconds,
        "rounds": rounds,
        "images_per_s": {lo: statistics.median(v) for lo, v in results.items()},
        "images_per_s_all": results,
    }
