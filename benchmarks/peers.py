"""Public peers on the cells' files: a dataset view they can read, and their steady-state rate from their logs.

Purpose: hold the cells against PyTorch's ImageNet example and DALI's ResNet-50 example, unmodified, on the same
staged files and host. `view` builds the ImageFolder tree they expect (each staged file `--copies` times as hard
links, so an epoch reaches a steady state); `rate` reads a peer's log: its rate over whole epochs and from batch 41.
Commands: python benchmarks/peers.py view --manifest results/staging/ram.json --out /dev/shm/peers --copies 5
          python benchmarks/peers.py rate --kind pytorch|dali --batch-size 256 LOG
Written up in docs/results/2026-12-02-h200/peers/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

STEADY_FROM = 41  # the first batch of an epoch counted as steady state (1-based)
# pytorch/examples: "Epoch: [0][ 41/160]\tTime  0.117 ( 0.130)\t..." - Time is that batch's own
PYTORCH = re.compile(r"Epoch: \[(\d+)\]\[\s*(\d+)/(\d+)\]\s+Time\s+([\d.]+)")
# DALI's example: "Epoch: [0][40/160]\tTime 0.104 (0.112)\t..." - Time is the mean of the print_freq batches before
DALI = re.compile(r"Epoch: \[(\d+)\]\[(\d+)/(\d+)\]\s+Time ([\d.]+)")


def view(manifest: Path, out: Path, copies: int) -> dict:
    """The ImageFolder tree of the staged files (hard links; a peer reads exactly the cells' bytes)."""
    man = json.loads(manifest.read_text())
    root = Path(man["root"]) if "root" in man else manifest.parent
    files = [f["path"] for f in man["files"]]
    first: dict[str, str] = {}
    for rel in files:
        cls = Path(rel).parts[-2]
        first.setdefault(cls, rel)
        for k in range(copies):
            dest = out / "train" / cls / f"{k}_{Path(rel).name}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                os.link(root / rel, dest)
    for cls, rel in first.items():
        dest = out / "val" / cls / Path(rel).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            os.link(root / rel, dest)
    return {"train_images": len(files) * copies, "val_images": len(first), "classes": len(first), "root": str(out)}


def rate(kind: str, log: str, batch_size: int) -> dict:
    """Samples/s per epoch - over the whole epoch (pytorch only: DALI's log holds no first-batch time) and over its
    steady state - and their medians."""
    pattern = PYTORCH if kind == "pytorch" else DALI
    epochs: dict[int, list[tuple[int, float]]] = {}
    for m in pattern.finditer(log):
        epoch, i, _, t = int(m[1]), int(m[2]), int(m[3]), float(m[4])
        epochs.setdefault(epoch, []).append((i, t))
    rows = []
    for epoch, points in sorted(epochs.items()):
        if kind == "pytorch":  # i is the batch (1-based), t its time
            steady = [t for i, t in points if i >= STEADY_FROM]
            whole = batch_size * len(points) / sum(t for _, t in points)
            steady_rate = batch_size * len(steady) / sum(steady) if steady else None
        else:  # i is 0-based; t at i is the mean batch time of batches i-p+1 .. i (p = the print interval)
            steady = [t for i, t in points if i >= STEADY_FROM + 9]
            whole = None
            steady_rate = batch_size / statistics.mean(steady) if steady else None
        rows.append({"epoch": epoch, "batches_seen": len(points), "whole_epoch": whole, "steady": steady_rate})
    full = [r["steady"] for r in rows if r["steady"]]
    return {
        "kind": kind,
        "batch_size": batch_size,
        "epochs": rows,
        "steady_median": statistics.median(full) if full else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("view")
    v.add_argument("--manifest", type=Path, required=True)
    v.add_argument("--out", type=Path, required=True)
    v.add_argument("--copies", type=int, default=5)
    r = sub.add_parser("rate")
    r.add_argument("--kind", choices=["pytorch", "dali"], required=True)
    r.add_argument("--batch-size", type=int, default=256)
    r.add_argument("log", type=Path)
    a = p.parse_args()
    if a.cmd == "view":
        print(json.dumps(view(a.manifest, a.out, a.copies)))
    else:
        out = rate(a.kind, a.log.read_text(errors="replace"), a.batch_size)
        if not out["epochs"]:
            print(f"no epoch lines in {a.log}", file=sys.stderr)
            return 1
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
