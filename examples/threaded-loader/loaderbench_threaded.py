"""A loaderbench plugin loader: PIL decoding and torchvision's augmentation in a pool of threads of the training
process, instead of DataLoader worker processes (the design Meta's SPDL argues for).

Installed (`pip install -e examples/threaded-loader`), it is the loader `threaded-pil`; without installing it, name
it `loaderbench_threaded:build` with this folder on PYTHONPATH. The same augmentation as the built-in loaders:
RandomResizedCrop(crop, scale 0.08-1, ratio 3/4-4/3), horizontal flip, ImageNet normalisation (on the device).
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image

from loaderbench.loaders.common import CROP_RATIO, CROP_SCALE, LoaderContext, PassSampler, normalize_uint8_nhwc


def build(ctx: LoaderContext):
    """Endless (images, labels) batches on `ctx.device`: `ctx.workers` threads (at least 1), 2 batches in flight."""
    samples, _ = ctx.samples()
    threads = max(1, ctx.workers if isinstance(ctx.workers, int) else os.cpu_count() or 1)
    depth = 2
    ctx.info.update(threads=threads, prefetch_batches=depth, decoder="PIL in threads")
    return ThreadedBatches(samples, ctx, threads, depth)


build.loaderbench_knobs = ("workers",)  # what `loaderbench tune` may search: the thread count comes from ctx.workers


class ThreadedBatches:
    """Batches of the samples in endless shuffled passes (`PassSampler`), each image decoded and augmented by a pool
    thread, `depth` batches in flight."""

    def __init__(self, samples: list[tuple[str, int]], ctx: LoaderContext, threads: int, depth: int):
        self.samples, self.ctx, self.depth = samples, ctx, depth
        self.augment = T.Compose(
            [T.RandomResizedCrop(ctx.crop_size, scale=CROP_SCALE, ratio=CROP_RATIO), T.RandomHorizontalFlip()]
        )
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="threaded-pil")
        self.order = iter(PassSampler(len(samples), ctx.seed, ctx.rank, ctx.world))

    def _image(self, path: str) -> np.ndarray:
        with Image.open(path) as img:  # Pillow releases the GIL while it decodes: the threads decode in parallel
            return np.asarray(self.augment(img.convert("RGB")), dtype=np.uint8)

    def _submit(self):
        idx = [next(self.order) for _ in range(self.ctx.batch_size)]
        images = [self.pool.submit(self._image, self.samples[i][0]) for i in idx]
        return images, torch.tensor([self.samples[i][1] for i in idx], dtype=torch.int64)

    def __iter__(self):
        flight = deque(self._submit() for _ in range(self.depth))
        pin = self.ctx.device.type == "cuda"
        while True:
            futures, labels = flight.popleft()
            flight.append(self._submit())
            batch = torch.from_numpy(np.stack([f.result() for f in futures]))
            if pin:
                batch = batch.pin_memory()
            images = batch.to(self.ctx.device, non_blocking=True)
            yield (
                normalize_uint8_nhwc(images, self.ctx.channels_last, self.ctx.dtype),
                labels.to(self.ctx.device, non_blocking=True),
            )
