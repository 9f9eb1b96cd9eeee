"""`wds`: the tier's WebDataset shards read with `webdataset` in DataLoader workers, each image decoded by PIL and
augmented by the torchvision loader's transform, shuffled in a buffer per worker (`shards.shuffle_buffer` shared
out among the workers).

Each worker streams whole shards, its share of every pass (the shard order reshuffled per pass, the same on every
rank; a ddp rank's workers take their own share). `shards.readers` workers read at a time, `shards.read_mb` at a go:
on a single-head disk the workers' shards, read all at once, would interleave their requests and pay a positioning
each; read in turn, each read is one positioning and then streams. The others decode meanwhile.
"""

from __future__ import annotations

import io
import multiprocessing
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from PIL import Image

from .common import LoaderContext, forever
from .torchvision_loader import batch_to_device, transform


class GatedFile(io.RawIOBase):
    """A file whose reads each hold `gate` (a semaphore shared by the workers; None: no gate)."""

    def __init__(self, path: Path, gate):
        self.f, self.gate = open(path, "rb", buffering=0), gate  # noqa: SIM115 - closed by close()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.gate is None:
            return self.f.readinto(b)
        with self.gate:
            return self.f.readinto(b)

    def close(self) -> None:
        self.f.close()
        super().close()


def decode_image(data: bytes) -> Image.Image:
    """A sample's image bytes as PIL RGB, as ImageFolder's loader opens a file."""
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


class ShardStream(torch.utils.data.IterableDataset):
    """Endless (image, label) samples of this worker's shards, shuffled in a buffer of `buffer` samples."""

    def __init__(
        self, shards: list[Path], seed: int, rank: int, world: int, make: Callable, buffer: int, gate, read_bytes: int
    ):
        self.shards, self.seed, self.rank, self.world = shards, seed, rank, world
        self.make, self.buffer, self.gate, self.read_bytes = make, buffer, gate, read_bytes

    def _files(self, me: int, readers: int) -> Iterator[dict]:
        """Every file of this reader's shards, pass after pass, each shard opened only while it is read."""
        from webdataset.tariterators import tar_file_expander

        p = 0
        while True:
            order = list(range(len(self.shards)))
            random.Random(self.seed * 1_000_003 + p).shuffle(order)
            for i in order[me::readers]:
                with io.BufferedReader(GatedFile(self.shards[i], self.gate), self.read_bytes) as stream:
                    yield from tar_file_expander([{"url": str(self.shards[i]), "stream": stream}])
            p += 1

    def __iter__(self):
        from webdataset.filters import shuffle
        from webdataset.tariterators import group_by_keys

        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        me, readers = self.rank * workers + worker, self.world * workers
        rng = random.Random(self.seed * 1_000_003 + me)
        samples = group_by_keys(self._files(me, readers))
        for sample in shuffle(self.buffer, min(self.buffer, 100), rng=rng)(samples):
            yield self.make(decode_image(sample["jpg"])), int(sample["cls"])


def build(ctx: LoaderContext):
    transport = ctx.options.get("transport", "float32")
    shards, total = ctx.shards()
    readers = ctx.world * max(ctx.workers, 1)
    if len(shards) < readers:
        raise RuntimeError(
            f"{len(shards)} shards for {readers} readers ({max(ctx.workers, 1)} workers x {ctx.world} "
            "rank(s)): a reader without a shard has nothing to read; stage more (shards.min_shards) or "
            "use fewer workers"
        )
    if total // ctx.world < ctx.batch_size:
        raise RuntimeError(
            f"the loader produced no batch: the shards hold fewer images than one batch "
            f"({total // ctx.world} a rank, batch {ctx.batch_size})"
        )
    at_once = int(ctx.options.get("shard_readers", 1))
    gate = multiprocessing.get_context().BoundedSemaphore(at_once) if at_once and at_once < ctx.workers else None
    read_bytes = int(float(ctx.options.get("shard_read_mb", 16)) * (1 << 20))
    # the buffer is the loader's, shared out among its readers: a worker fills its share before it yields at full
    # pace (two samples read per one yielded), so 15 workers with 1000 each would read 15000 images ahead - more than
    # a pass of a benchmark-sized dataset, and 2.5x what an H200 cell on an HDD consumed in its window
    buffer = max(1, int(ctx.options.get("shuffle_buffer", 1000)) // readers)
    dataset = ShardStream(
        [s for s, _ in shards],
        ctx.seed,
        ctx.rank,
        ctx.world,
        transform(ctx.crop_size, transport),
        buffer,
        gate,
        read_bytes,
    )
    loader = ctx.dataloader(dataset)
    ctx.info.update(
        transport=transport,
        shards=len(shards),
        readers_at_once=at_once if gate else ctx.workers,
        read_mb=read_bytes / (1 << 20),
        shuffle_buffer_per_reader=buffer,
    )
    return forever(loader, batch_to_device(ctx, transport))
