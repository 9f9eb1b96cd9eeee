"""What every loader shares: the context it is built from, the sample list, and the epoch loop."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)


class SampleDataset(torch.utils.data.Dataset):
    """The manifest's (path, label) pairs, each image made by `load(path)`: the loader's decode and augmentation."""

    def __init__(self, samples: list[tuple[str, int]], load: Callable):
        self.samples = samples
        self.load = load

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        return self.load(path), label


@dataclass(frozen=True)
class LoaderContext:
    """What a loader is built from; the loader returns batches already on `device`."""

    data_root: Path  # ImageFolder root: one folder per class
    allowed: frozenset[str]  # staged files (paths relative to data_root) that passed the staging check
    batch_size: int  # global batch: per-GPU batch x GPUs
    crop_size: int
    workers: int
    prefetch_factor: int
    seed: int
    device: torch.device
    channels_last: bool
    gpus: int = 1  # GPUs the cell trains on (a multi-card loader shards over them)
    dtype: torch.dtype = torch.float32  # dtype of the delivered images (the autocast dtype under amp, by default)
    rank: int = 0  # ddp: this process's rank and the number of ranks; each rank loads its own shard
    world: int = 1
    options: dict = field(default_factory=dict)  # loader-specific settings from the config (e.g. dali.*)
    # What the loader reports back into the cell record; `prefetch_batches` (how many batches it prepares ahead,
    # the start-up backlog the warm-up must drain) is required.
    info: dict = field(default_factory=dict)

    def is_valid_file(self, path: str) -> bool:
        return str(Path(path).relative_to(self.data_root)) in self.allowed

    def samples(self) -> tuple[list[tuple[str, int]], list[str]]:
        """(path, label) pairs and class names from the staged manifest's files (`allowed`), in ImageFolder's order;
        never from a scan of the tier, whose foreign files and folders are ignored."""
        from ..staged import samples

        return samples(self.data_root, self.allowed)

    def dataloader(self, dataset, collate_fn=None) -> torch.utils.data.DataLoader:
        """The DataLoader settings every worker-based loader uses (shuffle, drop_last, pinning, prefetch)."""
        self.info.update(workers=self.workers, prefetch_batches=self.workers * self.prefetch_factor)
        gen = torch.Generator()
        gen.manual_seed(self.seed)
        sampler = None
        if self.world > 1:  # ddp: this rank's shard of each epoch's shuffle (forever() advances the epoch)
            sampler = torch.utils.data.DistributedSampler(
                dataset, num_replicas=self.world, rank=self.rank, shuffle=True, seed=self.seed, drop_last=True
            )
            self.info.update(sampler=f"DistributedSampler(rank {self.rank} of {self.world})")
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            drop_last=True,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=self.workers > 0,
            prefetch_factor=self.prefetch_factor if self.workers > 0 else None,
            generator=gen,
            collate_fn=collate_fn,
        )

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format


def forever(batches: Iterable, to_device: Callable) -> Iterator:
    """Loop over epochs of `batches` without end, moving each batch with `to_device`.

    The first epoch's iterator is made here, at once, not at the first `next()`: a DataLoader forks its workers
    and they start filling their prefetch queue while the cell builds its model and runs its cold step."""
    sampler = getattr(batches, "sampler", None)

    def epoch(i: int) -> Iterator:
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(i)  # a new shuffle each epoch, the same on every rank
        return iter(batches)

    def loop(first: Iterator) -> Iterator:
        i, it = 0, first
        while True:
            n = 0
            for batch in it:
                n += 1
                yield to_device(batch)
            if n == 0:
                raise RuntimeError("the loader produced no batch: the dataset has fewer images than one batch")
            i += 1
            it = epoch(i)

    return loop(epoch(0))


@functools.cache
def _affine(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift) with (x - 255 mean) / (255 std) = x * scale + shift, shaped for NHWC."""
    std = torch.tensor(IMAGENET_STD, device=device) * 255
    mean = torch.tensor(IMAGENET_MEAN, device=device) * 255
    return (1 / std).view(1, 1, 1, 3), (-mean / std).view(1, 1, 1, 3)


def normalize_uint8_nhwc(x: torch.Tensor, channels_last: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """uint8 NHWC RGB on the device -> normalised NCHW of `dtype` in one fused multiply-add (one kernel: computed in
    float32, written in `dtype`).

    The NHWC result permuted to NCHW has channels_last strides already, so that layout costs no copy.
    """
    scale, shift = _affine(x.device)
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    x = torch.addcmul(shift, x, scale, out=out).permute(0, 3, 1, 2)
    return x if channels_last else x.contiguous()


def uint8_to_device(ctx: LoaderContext) -> Callable:
    """`forever`'s to_device for a DataLoader batch of uint8 NHWC images and labels: both to the device, the images
    normalised there (`normalize_uint8_nhwc`) into the layout and dtype the model takes."""

    def to_device(batch):
        images, labels = batch
        images = images.to(ctx.device, non_blocking=True)
        return normalize_uint8_nhwc(images, ctx.channels_last, ctx.dtype), labels.to(ctx.device, non_blocking=True)

    return to_device
