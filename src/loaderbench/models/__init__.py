"""The models a cell trains: `build_model` makes one by name (torchvision's classification builders, untrained) or
from a plugin's factory (docs/plugins.md); `none` is no model (the loader alone). `relative_cost` says how much one
model's step costs against MobileNetV2's, for the planner. Importing this package imports no torch."""

from __future__ import annotations

from .build import ModelError, build_model, model_label
from .cost import GFLOPS_224, relative_cost

__all__ = ["GFLOPS_224", "ModelError", "build_model", "model_label", "relative_cost"]
