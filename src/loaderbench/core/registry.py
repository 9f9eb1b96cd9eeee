"""The loaders by name: the built-in modules, what each prepares ahead of the step, and plugin loaders.

Adding a built-in loader is adding one module under `loaderbench.loaders` and one line in each table here. A plugin
loader is a factory elsewhere, named in the config as `module:factory`, under `plugins:`, or by an installed
package's entry point (group `loaderbench.loaders`): docs/plugins.md. Nothing here imports torch, so config
validation and the planner read it cheaply.
"""

from __future__ import annotations

import re

LOADERS: dict[str, str] = {
    "torchvision": "loaderbench.loaders.torchvision_loader",
    "opencv": "loaderbench.loaders.opencv_loader",
    "dali-sc": "loaderbench.loaders.dali_sc",
    "dali-mc": "loaderbench.loaders.dali_mc",
    "dali-cpu": "loaderbench.loaders.dali_cpu",
    "nvjpeg": "loaderbench.loaders.nvjpeg",
    "wds": "loaderbench.loaders.wds_loader",
    "dali-wds": "loaderbench.loaders.dali_wds",
    "synthetic": "loaderbench.loaders.synthetic",
}

# Loaders that read the tier's WebDataset shards (staged when one of them is measured: config key shards.stage)
# instead of its file tree.
SHARD_LOADERS = ("wds", "dali-wds")

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
    "wds": "workers",
    "dali-wds": "dali",
    "synthetic": None,
}

ENTRY_POINT_GROUP = "loaderbench.loaders"
# a plugin's name is a cell id's first field: lowercase letters, digits and '-'
PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def reference_name(reference: str) -> str:
    """The name a `module:factory` reference takes in cell ids and tables: its module's last part and, unless it is
    `build`, the factory, in lowercase with '-' for '_' (`mypkg.fast_io:build` -> `fast-io`)."""
    module, factory = reference.split(":")
    words = [module.rsplit(".", 1)[-1]] + ([factory] if factory != "build" else [])
    return re.sub(r"[^a-z0-9]+", "-", "-".join(words).lower()).strip("-")


def installed_plugins() -> dict[str, str]:
    """name -> `module:factory` of the loaders installed packages declare (entry-point group `loaderbench.loaders`)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
