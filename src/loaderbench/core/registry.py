"""The built-in loaders by name: the module that builds each and what it prepares ahead of the step.

Adding a loader is adding one module under `loaderbench.loaders` and one line in each table here. The tables import
nothing, so config validation and the planner read them without torch.
"""

from __future__ import annotations

LOADERS: dict[str, str] = {
    "torchvision": "loaderbench.loaders.torchvision_loader",
    "opencv": "loaderbench.loaders.opencv_loader",
    "dali-sc": "loaderbench.loaders.dali_sc",
    "dali-mc": "loaderbench.loaders.dali_mc",
    "dali-cpu": "loaderbench.loaders.dali_cpu",
    "nvjpeg": "loaderbench.loaders.nvjpeg",
    "synthetic": "loaderbench.loaders.synthetic",
}

# What a loader prepares ahead of the step (its start-up backlog, which the warm-up drains; loaderbench.plan.predict predicts
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
