"""`opencv`: custom Dataset with cv2 decode and numpy crop/flip/resize; uint8 goes to the device, normalised there."""

from __future__ import annotations

import functools

import cv2
import numpy as np
import torch
import torchvision.transforms as T

from .common import CROP_RATIO, CROP_SCALE, LoaderContext, SampleDataset, forever, uint8_to_device

_NO_SIZE = torch.empty(1, 1, 1)


def crop_params(height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, h, w) drawn exactly as torchvision's RandomResizedCrop draws them (same torch RNG)."""
    return T.RandomResizedCrop.get_params(_NO_SIZE.expand(1, height, width), CROP_SCALE, CROP_RATIO)


def augment(bgr: np.ndarray, crop_size: int, fixed_crop: tuple[int, int, int, int, bool] | None = None) -> np.ndarray:
    """RandomResizedCrop + horizontal flip of a BGR image; returns an RGB uint8 HWC array.

    fixed_crop=(top, left, height, width, flip) replaces the random draw (deterministic mode, for the parity test).
    """
    top, left, h, w = crop_params(*bgr.shape[:2]) if fixed_crop is None else fixed_crop[:4]
    crop = bgr[top : top + h, left : left + w]
    # INTER_AREA when shrinking approximates PIL's antialiased bilinear; INTER_LINEAR when enlarging.
    interp = cv2.INTER_AREA if (h > crop_size or w > crop_size) else cv2.INTER_LINEAR
    out = cv2.resize(crop, (crop_size, crop_size), interpolation=interp)
    if (torch.rand(1) < 0.5) if fixed_crop is None else fixed_crop[4]:
        out = cv2.flip(out, 1)
    return cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


def load(path: str, crop_size: int) -> torch.Tensor:
    """One training image: cv2 decode, then `augment` (uint8 HWC RGB)."""
    cv2.setNumThreads(1)  # parallelism comes from the DataLoader workers
    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    if bgr is None:
        raise OSError(f"OpenCV could not decode {path}")
    return torch.from_numpy(augment(bgr, crop_size))


def dataset(samples: list[tuple[str, int]], crop_size: int) -> SampleDataset:
    return SampleDataset(samples, functools.partial(load, crop_size=crop_size))


def build(ctx: LoaderContext):
    samples, _ = ctx.samples()
    loader = ctx.dataloader(dataset(samples, ctx.crop_size))
    return forever(loader, uint8_to_device(ctx))
