"""`torchvision`: the staged files (ImageFolder order and labels) + PIL decode + torchvision transforms in DataLoader workers (the seed's baseline)."""

from __future__ import annotations

import torchvision.transforms as T
import torchvision.transforms.functional as F
from torchvision.datasets.folder import default_loader

from .common import CROP_RATIO, CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD, LoaderContext, SampleDataset, forever


def transform(crop_size: int) -> T.Compose:
    return T.Compose(
        [
            T.RandomResizedCrop(crop_size, scale=CROP_SCALE, ratio=CROP_RATIO, antialias=True),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


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


def build(ctx: LoaderContext):
    samples, _ = ctx.samples()
    dataset = SampleDataset(samples, load(transform(ctx.crop_size)))
    loader = ctx.dataloader(dataset)

    def to_device(batch):
        images, labels = batch
        # float32 from the workers (ToTensor + Normalize, as the seed); layout and dtype change in the same copy
        images = images.to(ctx.device, non_blocking=True).to(ctx.dtype, memory_format=ctx.memory_format)
        return images, labels.to(ctx.device, non_blocking=True)

    return forever(loader, to_device)
