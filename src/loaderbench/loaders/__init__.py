"""The loaders: one module each, defining `build(ctx) -> Iterator[(images, labels)]`; `get_loader` imports one by
name, lazily, so that config validation does not import torch. Plugin loaders come through `loaders.plugin`."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

from loaderbench.core.registry import LOADERS

__all__ = ["LOADERS", "get_loader"]


def get_loader(name: str, reference: str | None = None):
    """The loader registered under `name`: a built-in module, or with `reference` ('module:factory') a plugin's
    factory held to the contract; either has `build(ctx)`."""
    if reference:
        from loaderbench.loaders import plugin

        return SimpleNamespace(build=lambda ctx: plugin.build(ctx, reference))
    try:
        return importlib.import_module(LOADERS[name].module)
    except KeyError:
        raise KeyError(f"unknown loader '{name}'; known: {', '.join(LOADERS)}") from None
