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


def get_loader(name: str):
    """The loader module registered under `name`."""
    try:
        return importlib.import_module(LOADERS[name])
    except KeyError:
        raise KeyError(f"unknown loader '{name}'; known: {', '.join(LOADERS)}") from None
