"""A plugin loader: a factory named 'module:factory', imported, checked and held to the contract (docs/plugins.md).

The factory takes the cell's LoaderContext and returns an iterable of (images, labels) batches on `ctx.device`:
images float NCHW (`ctx.batch_size`, 3, `ctx.crop_size`, `ctx.crop_size`), labels int64 (`ctx.batch_size`,).
A factory that cannot be imported, takes other arguments or yields other shapes fails its cell with that reason: its
first batch is held to the contract here, and every later one to the first's shape, dtype and device as the plugin
delivered it, before the cast to the cell's dtype (`common.SameForm`): a plugin cannot pass its first batch and time
smaller ones, nor switch to a cheaper dtype that the cast would hide. The record keeps the dtype it delivered
(`metrics.input.delivered_dtype`, `metrics.loader_info.delivered_dtype`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator

import torch

from loaderbench.core.records import FACTS_INFO, plugin_facts

from .common import LoaderContext, SameForm, forever


class PluginError(RuntimeError):
    """A plugin loader broke its contract; the message says how, and the cell records it as its reason."""


def factory(reference: str):
    """The callable `reference` ('module:factory') names, checked to take one argument, the LoaderContext."""
    module_name, _, attr = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise PluginError(f"plugin loader {reference!r}: cannot import {module_name!r}: {type(e).__name__}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise PluginError(f"plugin loader {reference!r}: module {module_name!r} has no callable {attr!r}")
    try:
        sig = inspect.signature(fn)
        sig.bind(None)
    except TypeError:
        raise PluginError(
            f"plugin loader {reference!r}: the factory takes {sig}; it must take one argument, the cell's LoaderContext"
        ) from None
    except ValueError:  # a builtin without a signature: let the call say
        pass
    return fn


def check_batch(batch, ctx: LoaderContext, reference: str) -> None:
    """Raise PluginError unless `batch` is (images, labels) as the contract asks."""
    want = (ctx.batch_size, 3, ctx.crop_size, ctx.crop_size)
    where = f"plugin loader {reference!r}"
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise PluginError(f"{where} yielded {type(batch).__name__}; expected a pair (images, labels)")
    images, labels = batch
    if not isinstance(images, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise PluginError(f"{where} yielded ({type(images).__name__}, {type(labels).__name__}); expected tensors")
    if tuple(images.shape) != want or not images.is_floating_point():
        raise PluginError(
            f"{where} yielded images of shape {tuple(images.shape)} and dtype {images.dtype}; expected "
            f"{want}, floating point, normalised"
        )
    if tuple(labels.shape) != (ctx.batch_size,) or labels.dtype != torch.int64:
        raise PluginError(
            f"{where} yielded labels of shape {tuple(labels.shape)} and dtype {labels.dtype}; expected "
            f"({ctx.batch_size},), int64"
        )
    for name, t in (("images", images), ("labels", labels)):
        if t.device.type != ctx.device.type or (ctx.device.index is not None and t.device.index != ctx.device.index):
            raise PluginError(f"{where} yielded {name} on {t.device}; expected them on {ctx.device}")


def build(ctx: LoaderContext, reference: str) -> Iterator:
    """The plugin's batches for one cell: its first batch checked against the contract and every later one against
    the first, both as delivered (`common.SameForm`), then cast to the cell's dtype and layout; a pass that ends started again (an endless stream is what a cell
    measures), `prefetch_batches` 0 unless the plugin says (its DataLoader says for it)."""
    build_batches = factory(reference)
    batches = build_batches(ctx)
    if isinstance(batches, Iterator):  # one pass only: it cannot be started again
        batches = _OnePass(batches, reference)
    elif not hasattr(batches, "__iter__"):
        raise PluginError(
            f"plugin loader {reference!r}: the factory returned {type(batches).__name__}; expected an "
            "iterable of (images, labels)"
        )
    ctx.info.setdefault("prefetch_batches", 0)
    ctx.info.update({"plugin": reference, FACTS_INFO: plugin_facts(build_batches)})  # the record keeps the facts
    # each batch as the plugin delivered it, before the cast to the cell's dtype: a cast batch would hide a change
    delivered = SameForm(None, f"plugin loader {reference!r}")

    def to_device(batch):
        if delivered.first is None:
            check_batch(batch, ctx, reference)
            ctx.info.update(delivered_dtype=str(batch[0].dtype).removeprefix("torch."))
        delivered.check(batch)
        images, labels = batch
        return images.to(ctx.dtype, memory_format=ctx.memory_format), labels

    return forever(batches, to_device)


class _OnePass:
    """An iterator a factory returned, as an iterable that fails clearly if a cell needs a second pass of it."""

    def __init__(self, it: Iterator, reference: str):
        self.it, self.reference, self.used = it, reference, False

    def __iter__(self):
        if self.used:
            raise PluginError(
                f"plugin loader {self.reference!r} returned an iterator and it ended; return an "
                "iterable that can be iterated again, or an endless iterator"
            )
        self.used = True
        return self.it
