"""`synthetic`: one random batch made once on the device and reused every step - the compute ceiling.

No I/O, no decode, no transfer: what the model alone sustains. AU (accelerator utilisation) of any other loader is
its Samples/s over this loader's at the same GPUs, batch and precision.
"""

from __future__ import annotations

import itertools

import torch

from .common import LoaderContext


def build(ctx: LoaderContext):
    _, classes = ctx.samples()
    gen = torch.Generator().manual_seed(ctx.seed)
    images = torch.randn(ctx.batch_size, 3, ctx.crop_size, ctx.crop_size, generator=gen)
    images = images.to(ctx.device, ctx.dtype, memory_format=ctx.memory_format)
    labels = torch.randint(0, len(classes), (ctx.batch_size,), generator=gen).to(ctx.device)
    ctx.info.update(prefetch_batches=0, source="one device-resident batch reused every step")
    return itertools.repeat((images, labels))
