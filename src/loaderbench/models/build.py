"""Building a cell's model: a torchvision classification builder by name (untrained weights), a plugin's factory
('module:factory', called as factory(num_classes=...), returning an nn.Module that takes (N, 3, H, W) images), or
none for `none`. A model that cannot be built fails its cell with a reason that names it (`ModelError`)."""

from __future__ import annotations

import importlib

from loaderbench.core.cells import CellSpec
from loaderbench.core.registry import NO_MODEL, TORCHVISION_MODELS, torchvision_input_size

# builders whose training-mode output is a tuple with auxiliary logits unless told otherwise: one output to a loss
NO_AUX_LOGITS = ("googlenet", "inception_v3")


class ModelError(RuntimeError):
    """A model could not be built or broke its contract; the message names it, and the cell records it as its reason."""


def model_label(name: str, ref: str | None = None) -> str:
    """How errors name a model: its plugin reference, else its name."""
    return f"model {ref or name!r}"


def build_model(spec_or_name: CellSpec | str, ref: str | None = None, num_classes: int = 1000, input_size=None):
    """The model of a cell (`spec_or_name` a CellSpec: its model, model_ref and crop_size unless given) or of a name,
    with `num_classes` outputs for `input_size` x `input_size` images; None for `none` (the loader alone). Raises
    ModelError naming the model when it cannot be built for that input."""
    if isinstance(spec_or_name, CellSpec):
        name = spec_or_name.model
        ref = ref if ref is not None else spec_or_name.model_ref
        input_size = input_size if input_size is not None else spec_or_name.crop_size
    else:
        name = spec_or_name
    if name == NO_MODEL and not ref:
        return None
    if ref:
        return _plugin_model(ref, num_classes, input_size)
    return _torchvision_model(name, num_classes, input_size)


def _torchvision_model(name: str, num_classes: int, input_size: int | None):
    import torchvision

    fixed = torchvision_input_size(name)
    if fixed is not None and input_size is not None and input_size != fixed:
        raise ModelError(f"model {name!r} takes {fixed} x {fixed} images only; the cell's crop_size is {input_size}")
    if name not in TORCHVISION_MODELS and name not in torchvision.models.list_models(module=torchvision.models):
        raise ModelError(f"model {name!r} is not a classification model of torchvision {torchvision.__version__}")
    kwargs = {"aux_logits": False, "init_weights": True} if name in NO_AUX_LOGITS else {}
    try:
        return torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    except Exception as e:
        raise ModelError(f"model {name!r} raised {type(e).__name__}: {e}") from e


def _plugin_model(ref: str, num_classes: int, input_size: int | None):
    import torch

    where = model_label("", ref)
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ModelError(f"{where}: cannot import {module_name!r}: {type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ModelError(f"{where}: module {module_name!r} has no callable {attr!r}")
    declared = getattr(factory, "input_size", None)
    if declared is not None and input_size is not None and declared != input_size:
        raise ModelError(
            f"{where} takes {declared} x {declared} images (its factory's input_size); the cell's crop_size is "
            f"{input_size}"
        )
    try:
        model = factory(num_classes=num_classes)
    except Exception as e:
        raise ModelError(f"{where} raised {type(e).__name__}: {e}") from e
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"{where}: the factory returned {type(model).__name__}; expected a torch.nn.Module")
    return model
