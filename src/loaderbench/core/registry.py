"""The loaders and the models by name: the built-in loader modules, what each prepares ahead of the step, plugin
loaders, and the models a cell may train (torchvision's classification builders, `none`, plugin models).

Adding a built-in loader is adding one module under `loaderbench.loaders` and one line in each table here. A plugin
loader is a factory elsewhere, named in the config as `module:factory`, under `plugins:`, or by an installed
package's entry point (group `loaderbench.loaders`): docs/plugins.md. A plugin model likewise (`model_plugins:`,
group `loaderbench.models`). Nothing here imports torch, so config validation and the planner read it cheaply.
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


def installed_models() -> dict[str, str]:
    """name -> `module:factory` of the models installed packages declare (entry-point group `loaderbench.models`)."""
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=MODEL_ENTRY_POINT_GROUP)}


DEFAULT_MODEL = "mobilenet_v2"  # what every cell trained before models were an axis; its cell ids leave it out
NO_MODEL = "none"  # the loader alone: batches delivered to the device, no model run on them
MODEL_ENTRY_POINT_GROUP = "loaderbench.models"
# a model's name is a cell id's field before the repeat: lowercase letters, digits, '_' and '-'
MODEL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9_-]*[a-z0-9])?$")

# torchvision's classification builders, generated once from the installed torchvision (0.29) with
#   python -c "import torchvision.models as m; print(m.list_models(module=m))"
# so that validating a config imports no torch; a name not here is looked up in the installed torchvision then.
# fmt: off
TORCHVISION_MODELS = (
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny", "densenet121", "densenet161",
    "densenet169", "densenet201", "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3",
    "efficientnet_b4", "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_l",
    "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mnasnet0_75",
    "mnasnet1_0", "mnasnet1_3", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_16gf",
    "regnet_x_1_6gf", "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf", "regnet_y_400mf",
    "regnet_y_800mf", "regnet_y_8gf", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t",
    "swin_v2_b", "swin_v2_s", "swin_v2_t", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32", "wide_resnet101_2", "wide_resnet50_2",
)
# fmt: on


def torchvision_input_size(name: str) -> int | None:
    """The one image size a torchvision model takes (its builder's default `image_size`/`input_size`: its position
    embeddings or attention windows are sized for it), None for a model that takes any size."""
    return 224 if name.startswith("vit_") or name == "maxvit_t" else None
