"""What a DataLoader's epoch boundary costs a benchmark-sized dataset, and what `PassSampler` gives back.

Purpose: a cell's dataset is small (thousands of images), so a DataLoader epoch is a few dozen batches while
workers x prefetch_factor batches are in flight. At each epoch's end the workers sit idle until the last batches are
taken and the next epoch starts. This runs the same workers (each item sleeps `--item-ms`, a stand-in for decode)
over per-pass epochs and over loaderbench's endless `PassSampler`, and prints both rates and their ratio.

Command: `python benchmarks/epoch_drain.py` (defaults: the 1-GPU H200 cell's shape - 15 workers, prefetch 2, 32
batches a pass - with batches of 8 items of 3 ms).
Written up in docs/method.md ("Epoch boundaries").
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from loaderbench.loaders.common import PassSampler


class Sleepy(torch.utils.data.Dataset):
    def __init__(self, n: int, item_s: float):
        self.n, self.item_s = n, item_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.item_s)
        return torch.zeros(4), i


def rate(loader, batches: int, endless: bool) -> float:
    """Batches a second over `batches` after one warm-up pass."""

    def stream():
        while True:
            yield from loader
            if endless:
                return

    it = stream()
    for _ in range(len(loader.dataset) // loader.batch_size):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches-per-pass", type=int, default=32)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--item-ms", type=float, default=3.0)
    p.add_argument("--passes", type=int, default=4)
    a = p.parse_args()
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    data = Sleepy(a.batch * a.batches_per_pass, a.item_ms / 1000)
    common = {
        "batch_size": a.batch,
        "drop_last": True,
        "num_workers": a.workers,
        "persistent_workers": True,
        "prefetch_factor": a.prefetch,
    }
    n = a.batches_per_pass * a.passes
    epochs = rate(torch.utils.data.DataLoader(data, shuffle=True, **common), n, endless=False)
    passes = rate(torch.utils.data.DataLoader(data, sampler=PassSampler(len(data), 0), **common), n, endless=True)
    ideal = a.workers / (a.batch * a.item_ms / 1000)
    print(
        f"{a.workers} workers, batch {a.batch}, {a.batches_per_pass} batches a pass, prefetch {a.prefetch}: "
        f"epochs {epochs:.1f} batches/s, endless passes {passes:.1f} ({passes / epochs:.2f}x; workers' "
        f"limit {ideal:.1f})"
    )


if __name__ == "__main__":
    main()
