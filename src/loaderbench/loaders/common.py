"""What every loader shares: the context it is built from, the sample list, the epoch loop, and the check that every
batch keeps the first one's form."""

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


class PassSampler(torch.utils.data.Sampler):
    """Indices of the dataset without end: pass after pass, each a fresh shuffle (the same on every rank; a ddp rank
    takes every `world`-th index of it, so the ranks' shards are disjoint and equal).

    One endless stream, not one DataLoader epoch per pass: at an epoch's end a DataLoader's workers sit idle until its
    last batches are taken and the next epoch starts. With a benchmark-sized dataset (8192 images at batch 256: 32
    batches, 30 of them in flight with 15 workers) that drain recurs every few seconds and costs the workers about a
    third of their time, which a training job on a full-sized dataset never pays (docs/method.md)."""

    def __init__(self, size: int, seed: int, rank: int = 0, world: int = 1):
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} of {world}")
        self.size, self.seed, self.rank, self.world = size, seed, rank, world
        self.per_rank = size // world

    def describe(self) -> str:
        shard = f", rank {self.rank} of {self.world}" if self.world > 1 else ""
        return f"endless passes of {self.size} images, each shuffled{shard}"

    def __iter__(self) -> Iterator[int]:
        if self.per_rank == 0:
            return
        gen = torch.Generator()
        p = 0
        while True:
            gen.manual_seed(self.seed * 1_000_003 + p)
            order = torch.randperm(self.size, generator=gen)[self.rank : self.per_rank * self.world : self.world]
            yield from order.tolist()
            p += 1


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
        from loaderbench.data.manifest import samples

        return samples(self.data_root, self.allowed)

    def shards(self) -> tuple[list[tuple[Path, Path]], int]:
        """The tier's WebDataset shards as (tar, DALI index) paths where the cell reads the tier, and their samples
        (staged beside the file tree: loaderbench.data.shards)."""
        from loaderbench.data.shards import FOLDER, read_index

        folder = self.data_root.parent / FOLDER
        listed = read_index(folder)
        return [(folder / f["path"], folder / f["index"]) for f in listed["files"]], listed["samples"]

    def dataloader(self, dataset, collate_fn=None) -> torch.utils.data.DataLoader:
        """The DataLoader settings every worker-based loader uses: an endless shuffled stream (`PassSampler`, or the
        endless IterableDataset given), whole batches, pinning, prefetch."""
        self.info.update(workers=self.workers, prefetch_batches=self.workers * self.prefetch_factor)
        sampler = None
        if not isinstance(dataset, torch.utils.data.IterableDataset):
            sampler = PassSampler(len(dataset), self.seed, self.rank, self.world)
            if sampler.per_rank < self.batch_size:  # an endless stream would fill the batch with repeats instead
                raise RuntimeError(
                    f"the loader produced no batch: the dataset has fewer images than one batch "
                    f"({sampler.per_rank} a rank, batch {self.batch_size})"
                )
            self.info.update(sampler=sampler.describe())
        gen = torch.Generator()
        gen.manual_seed(self.seed)  # the workers' random augmentations are seeded from it
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=self.batch_size,
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
    """Loop over epochs of `batches` without end (a DataLoader's `PassSampler` is one endless epoch already; a DALI
    iterator ends each pass), moving each batch with `to_device`.

    The first epoch's iterator is made here, at once, not at the first `next()`: a DataLoader forks its workers
    and they start filling their prefetch queue while the cell builds its model and runs its cold step."""

    def loop(it: Iterator) -> Iterator:
        while True:
            n = 0
            for batch in it:
                n += 1
                yield to_device(batch)
            if n == 0:
                raise RuntimeError("the loader produced no batch: the dataset has fewer images than one batch")
            it = iter(batches)

    return loop(iter(batches))


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


class BatchChanged(RuntimeError):
    """A loader delivered a batch whose form differs from its first; the message names the batch and the change."""


def batch_form(batch) -> tuple:
    """Each tensor of an (images, labels) batch as (name, shape, dtype, device), a pre-scattered batch's parts each
    named by its index: attributes only, so it neither synchronises a GPU nor reads the data."""
    out = []
    parts = batch if isinstance(batch, (tuple, list)) else (batch,)
    for i, part in enumerate(parts):
        name = ("images", "labels")[i] if len(parts) == 2 else f"part {i}"
        for j, t in enumerate(part) if isinstance(part, (tuple, list)) else ((None, part),):
            where = name if j is None else f"{name}[{j}]"
            is_tensor = isinstance(t, torch.Tensor)
            out.append((where, t.shape, t.dtype, t.device) if is_tensor else (where, type(t).__name__))
    return tuple(out)


def _changes(first: tuple, now: tuple) -> str:
    """What differs between two `batch_form`s, in words."""
    if [f[0] for f in first] != [n[0] for n in now]:
        return f"its parts are {[n[0] for n in now]}, were {[f[0] for f in first]}"
    kind = lambda form: form[1] if len(form) == 2 else "a tensor"
    out = []
    for f, n in zip(first, now, strict=True):
        if f == n:
            continue
        if len(f) == 2 or len(n) == 2:  # not a tensor on one side
            out.append(f"{n[0]} is {kind(n)}, was {kind(f)}")
            continue
        for what, was, is_ in zip(("shape", "dtype", "device"), f[1:], n[1:], strict=True):
            if was != is_:
                show = tuple if what == "shape" else str
                out.append(f"{n[0]} {what} {show(is_)}, was {show(was)}")
    return "; ".join(out)


class SameForm:
    """A cell's batches, each checked against the first's form (`batch_form`: shape, dtype and device of images and
    labels); a batch that differs raises BatchChanged with its number (1 = the first the cell took) and the change.

    A loader whose later batches shrink would otherwise be timed on less work than the one it was checked on."""

    def __init__(self, batches: Iterator | None, who: str):
        self.batches, self.who = batches, who
        self.first: tuple | None = None
        self.taken = 0

    def __iter__(self) -> SameForm:
        return self

    def __next__(self):
        return self.check(next(self.batches))

    def check(self, batch):
        """`batch`, the next one, held to the first's form (BatchChanged naming its number and the change)."""
        self.taken += 1
        form = batch_form(batch)
        if self.first is None:
            self.first = form
        elif form != self.first:
            raise BatchChanged(
                f"{self.who}: batch {self.taken} differs from batch 1: {_changes(self.first, form)}; "
                "every batch of a cell must keep the first one's shape, dtype and device"
            )
        return batch
