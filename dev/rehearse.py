"""Rehearse a GPU study on the CPU: the same grid (loaders, tiers, GPU counts, dp/ddp, precisions, parts), shrunk to
seconds a cell, run through the real workflow in a folder of its own.

    python dev/rehearse.py config/studies/h200x4-amp.yaml /tmp/rehearse-x4

What shrinks: the dataset (96 images), crops (32 px), batches (8 a GPU), windows (3 steps after 1 warm-up step),
workers (1), repeats (1), the probe (1 s); the budget is dropped. What stays: every cell id but the batch and repeat,
so the rehearsal runs each configuration's loader, tier kind, GPU count and parallel mode. On the CPU a dp cell of
more than 1 GPU is `skipped` (its record says so) and a ddp cell of N GPUs runs N gloo processes. Tiers move into the
folder (RAM stays /dev/shm; an emulated tier keeps its model).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SHRINK = {"crop_size": 32, "warmup_steps": 1, "workers": 1, "prefetch_factor": 1, "window": {"steps": 3}}


def shrink_part(part: dict) -> dict:
    out = {**part, **{k: v for k, v in SHRINK.items() if k in part}}
    if "batch_sizes" in out:
        out["batch_sizes"] = [8]
    if "repeats" in out:
        out["repeats"] = 1
    return out


def tiny(cfg: dict, work: Path) -> dict:
    """`cfg` with the same grid at a size a 2-core CPU runs in minutes."""
    cfg = {k: v for k, v in cfg.items() if k not in ("budget_minutes", "trim", "host")}
    cfg.update(SHRINK, batch_sizes=[8], repeats=1, name=f"rehearse-{cfg.get('name', 'study')}")
    cfg["dataset"] = {"source": "generated", "images": 96, "classes": 4, "seed": 0}
    cfg["probe"] = {"readers": [1], "max_seconds": 1, "sequential_mb": 4}
    storage = {}
    for name, tier in cfg.get("storage", {}).items():
        if isinstance(tier, str):
            storage[name] = tier if tier.startswith("/dev/shm") else str(work / "tiers" / name)
        else:
            storage[name] = {**tier, "path": str(work / "tiers" / name), "mount": str(work / "mnt" / name)}
    cfg["storage"] = storage
    cfg["baseline"] = {**cfg["baseline"], "batch_size": 8}
    if "parts" in cfg:
        cfg["parts"] = [shrink_part(p) for p in cfg["parts"]]
    return cfg


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    config, work = Path(argv[0]), Path(argv[1]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(tiny(yaml.safe_load(config.read_text()), work), sort_keys=False))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--configfile",
        str(path),
    ]
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
