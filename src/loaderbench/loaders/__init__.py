"""Loader registry: name -> module. Each module defines `build(ctx) -> Iterator[(images, labels)]`.

Adding a loader is adding one module and one line here. Modules are imported lazily so that config
validation does not import torch.
"""

from __future__ import annotations

import importlib

LOADERS: dict[str, str] = {
    "torchvision": "loaderbench.loaders.torchvision_loader",
    "opencv": "loaderbench.loaders.opencv_loader",
    "dali-sc": "loaderbench.loaders.dali_sc",
    "dali-mc": "loaderbench.loaders.dali_mc",
    "dali-cpu": "loaderbench.loaders.dali_cpu",
    "nvjpeg": "loaderbench.loaders.nvjpeg",
    "synthetic": "loaderbench.loaders.synthetic",
}

# What a loader prepares ahead of the step (its start-up backlog, which the warm-up drains; loaderbench.plan predicts
# the warm-up from it without importing the loader): "workers" = DataLoader workers x prefetch_factor batches (and the
# workers deliver in bursts of one batch each), "dali" = the pipeline's prefetch queue depth, None = nothing.
BACKLOG: dict[str, str | None] = {
    "torchvision": "workers",
    "opencv": "workers",
    "dali-sc": "dali",
    "dali-mc": "dali",
    "dali-cpu": "dali",
    "nvjpeg": "workers",
    "synthetic": None,
}


def get_loader(name: str):
    """The loader module registered under `name`."""
    try:
        return importlib.import_module(LOADERS[name])
    except KeyError:
        raise KeyError(f"unknown loader '{name}'; known: {', '.join(LOADERS)}") from None
