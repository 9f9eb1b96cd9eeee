"""The loaders: one module each, defining `build(ctx) -> Iterator[(images, labels)]`; `get_loader` imports one by
name, lazily, so that config validation does not import torch."""

from __future__ import annotations

import importlib

from loaderbench.core.registry import BACKLOG, LOADERS

__all__ = ["BACKLOG", "LOADERS", "get_loader"]


def get_loader(name: str):
    """The loader module registered under `name`."""
    try:
        return importlib.import_module(LOADERS[name])
    except KeyError:
        raise KeyError(f"unknown loader '{name}'; known: {', '.join(LOADERS)}") from None
