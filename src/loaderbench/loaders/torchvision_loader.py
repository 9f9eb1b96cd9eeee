"""`torchvision`: the staged files (ImageFolder order and labels) + PIL decode + torchvision transforms in DataLoader workers (the seed's baseline).

Transport (`torchvision.transport`): `float32` hands over ToTensor + Normalize's output, as the seed; `uint8` stops
after the crop and flip and hands over the image's bytes (HWC), normalised on the device in one kernel - the same
values, a quarter of the bytes for the training process to take in (under DataParallel one process takes in the
global batch).
"""

from __future__ import annotations

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.datasets.folder import default_loader

from .common import (
    CROP_RATIO,
    CROP_SCALE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    LoaderContext,
    SampleDataset,
    forever,
    uint8_to_device,
)

TRANSPORTS = ("float32", "uint8")


def _hwc_uint8(img) -> torch.Tensor:
    """A PIL RGB image as its uint8 HWC bytes (a copy the tensor owns)."""
    return torch.from_numpy(np.array(img, dtype=np.uint8, copy=True))


def transform(crop_size: int, transport: str = "float32") -> T.Compose:
    if transport not in TRANSPORTS:
        raise ValueError(f"torchvision transport {transport!r}: expected one of {', '.join(TRANSPORTS)}")
    crop_flip = [
        T.RandomResizedCrop(crop_size, scale=CROP_SCALE, ratio=CROP_RATIO, antialias=True),
        T.RandomHorizontalFlip(),
    ]
    if transport == "uint8":
        return T.Compose([*crop_flip, _hwc_uint8])
    return T.Compose([*crop_flip, T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def fixed_transform(crop_size: int, top: int, left: int, height: int, width: int, flip: bool):
    """The same pipeline with the crop and flip given (deterministic mode, the parity reference)."""

    def apply(img):
        img = F.resized_crop(img, top, left, height, width, [crop_size, crop_size], antialias=True)
        img = F.hflip(img) if flip else img
        return F.normalize(F.to_tensor(img), IMAGENET_MEAN, IMAGENET_STD)

    return apply


def load(transform):
    """ImageFolder's loading (PIL, RGB) and then `transform`, for one path."""
    return lambda path: transform(default_loader(path))


def batch_to_device(ctx: LoaderContext, transport: str):
    """`forever`'s to_device for batches of `transform(..., transport)`'s images."""
    if transport == "uint8":
        return uint8_to_device(ctx)

    def to_device(batch):
        images, labels = batch
        # float32 from the workers (ToTensor + Normalize, as the seed); layout and dtype change in the same copy
        images = images.to(ctx.device, non_blocking=True).to(ctx.dtype, memory_format=ctx.memory_format)
        return images, labels.to(ctx.device, non_blocking=True)

    return to_device


def build(ctx: LoaderContext):
    transport = ctx.options.get("transport", "float32")
    samples, _ = ctx.samples()
    dataset = SampleDataset(samples, load(transform(ctx.crop_size, transport)))
    loader = ctx.dataloader(dataset)
    ctx.info.update(transport=transport)
    return forever(loader, batch_to_device(ctx, transport))
