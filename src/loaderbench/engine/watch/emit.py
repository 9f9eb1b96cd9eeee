"""A grid config from what the watch saw (`--emit-config`): the script's dataset, batch, workers, precision, model
and process count, on the RAM tier, with the loaders this host can run and the `synthetic` ceiling, so that a
`loaderbench run` of it answers what the watch cannot (the compute ceiling, and which loader is faster here).

Taken from the watch: the dataset (an ImageFolder-like dataset's `root`; without one, a generated dataset),
batch_sizes (the batch per process), precisions, models (where a torchvision model was recognised; else the
default), workers (the DataLoader's; else auto), gpus and parallel (the processes that iterated batches: ddp where
several). Left at their defaults: everything else.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from loaderbench.core.util import atomic_write_text

CPU_LOADERS = ["torchvision", "opencv", "dali-cpu", "synthetic"]
GPU_LOADERS = ["torchvision", "opencv", "dali-cpu", "dali-sc", "dali-mc", "nvjpeg", "synthetic"]
RAM = "/dev/shm"


def config_from(record: dict) -> dict:
    """The grid config of an ok watch record."""
    spec, m, w = record["spec"], record["metrics"], record["watch"]
    root = w.get("dataset_root")
    dataset = {"source": "path", "path": root} if root else {"source": "generated"}
    gpus, parallel = spec["gpus"], spec.get("parallel") or "dp"
    cfg = {
        "name": f"watch-{spec['loader'].removeprefix('script-')}",
        "dataset": dataset,
        "storage": {"ram": RAM},
        "loaders": GPU_LOADERS if m["device"]["type"] == "cuda" else CPU_LOADERS,
        "gpus": [gpus],
        "parallel": [parallel],
        "batch_sizes": [spec["batch_size"]],
        "precisions": [spec["precision"]],
        "workers": spec["workers"] if spec.get("workers") is not None else "auto",
        "baseline": {
            "loader": "torchvision",
            "tier": "ram",
            "gpus": gpus,
            "batch_size": spec["batch_size"],
            "precision": spec["precision"],
            "parallel": parallel,
        },
    }
    if spec.get("model"):
        cfg["models"] = [spec["model"]]
    return cfg


def write(path: Path, record: dict) -> dict:
    """Write the config of `record` to `path` as YAML, headed by where it came from; returns it."""
    cfg = config_from(record)
    head = (
        f"# made by `loaderbench watch --emit-config` from {record['cell_id']}: {' '.join(record['watch']['command'])}\n"
        "# the RAM tier only: add the disk the script read from under `storage` to measure it there too\n"
    )
    atomic_write_text(Path(path), head + yaml.safe_dump(cfg, sort_keys=False))
    return cfg
