"""The loaders and the models by name: one record per built-in loader (its module and the facts about it that the
planner, the measuring side, tune and the report need), plugin loaders, and the models a cell may train
(torchvision's classification builders, `none`, plugin models).

Adding a built-in loader is adding one module under `loaderbench.loaders` and one record in `LOADERS` here. A plugin
loader is a factory elsewhere, named in the config as `module:factory`, under `plugins:`, or by an installed
package's entry point (group `loaderbench.loaders`); it declares the same facts as attributes of its factory
(`loaderbench_decodes`, ...: `PLUGIN_ATTRIBUTES`, docs/plugins.md). A plugin model likewise (`model_plugins:`, group
`loaderbench.models`). Nothing here imports torch, so config validation and the planner read it cheaply.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

READS = ("files", "shards", "nothing")
WHERE = ("cpu", "gpu", None)
DP_PIPELINES = ("one", "per_gpu")
DDP_PIPELINES = ("per_rank", "rank0")
BACKLOGS = ("workers", "dali", None)


@dataclass(frozen=True)
class LoaderRecord:
    """What is known about a loader without importing it. The defaults are what a plugin that declares nothing is
    taken for."""

    module: str = ""  # the built-in loader's module (a plugin: none, its factory is named in the config)
    # what it reads: the tier's files, the tier's WebDataset shards (staged when such a loader is measured: config key
    # shards.stage), or nothing (measured once per configuration, on the grid's first tier)
    reads: str = "files"
    # where it decodes the JPEGs and where it crops, flips and normalises them, on a GPU host ("cpu", "gpu"; None:
    # it does neither); without a GPU every loader does both on the CPU
    decodes: str | None = "cpu"
    augments: str | None = "cpu"
    dp: str = "one"  # its pipelines under dp, one process feeding every GPU: one, or one per GPU
    ddp: str = "per_rank"  # its pipelines under ddp: each rank its own, or one on rank 0 for every rank
    one_gpu_baseline: str | None = None  # with no 1-GPU mode of its own, the loader whose 1-GPU cell it is divided by
    # what it prepares ahead of the step (its start-up backlog, which the warm-up drains; loaderbench.plan predicts the
    # warm-up from it without importing the loader): "workers" = DataLoader workers x prefetch_factor batches (the
    # workers deliver in bursts of one batch each), "dali" = the pipeline's prefetch queue depth, None = nothing
    backlog: str | None = None
    # settings tune searches beyond those its backlog and device work bring (experiments.tuneknobs.knobs); a plugin's
    # are all that tune searches for it
    knobs: tuple[str, ...] = ()

    def __post_init__(self):
        for name, allowed in (
            ("reads", READS),
            ("decodes", WHERE),
            ("augments", WHERE),
            ("dp", DP_PIPELINES),
            ("ddp", DDP_PIPELINES),
            ("backlog", BACKLOGS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} {getattr(self, name)!r}: one of {', '.join(map(repr, allowed))}")
        object.__setattr__(self, "knobs", tuple(self.knobs))

    @property
    def device_work(self) -> bool:
        """Whether it decodes or augments on the GPU: device work of its own beside the step."""
        return "gpu" in (self.decodes, self.augments)


def _builtin(name: str, **facts) -> LoaderRecord:
    return LoaderRecord(module=f"loaderbench.loaders.{name}", **facts)


LOADERS: dict[str, LoaderRecord] = {
    "torchvision": _builtin("torchvision_loader", backlog="workers", knobs=("torchvision_transport",)),
    "opencv": _builtin("opencv_loader", backlog="workers"),
    "dali-sc": _builtin("dali_sc", decodes="gpu", augments="gpu", ddp="rank0", backlog="dali"),
    "dali-mc": _builtin(
        "dali_mc", decodes="gpu", augments="gpu", dp="per_gpu", one_gpu_baseline="dali-sc", backlog="dali"
    ),
    "dali-cpu": _builtin("dali_cpu", augments="gpu", dp="per_gpu", backlog="dali"),
    "nvjpeg": _builtin("nvjpeg", decodes="gpu", augments="gpu", backlog="workers"),
    "wds": _builtin("wds_loader", reads="shards", backlog="workers", knobs=("torchvision_transport", "shard_readers")),
    "dali-wds": _builtin("dali_wds", reads="shards", decodes="gpu", augments="gpu", dp="per_gpu", backlog="dali"),
    "synthetic": _builtin("synthetic", reads="nothing", decodes=None, augments=None),
}

PLUGIN = LoaderRecord()  # what a plugin is taken for where its factory is not imported (the report, the planner)
# a plugin factory's attribute for each fact, e.g. `build.loaderbench_decodes = "gpu"`
PLUGIN_ATTRIBUTES = {f.name: f"loaderbench_{f.name}" for f in dataclasses.fields(LoaderRecord) if f.name != "module"}


def loader_record(name: str | None) -> LoaderRecord:
    """The record of the built-in loader `name`; for any other name, a plugin's, what a plugin that declares nothing
    is taken for (`PLUGIN`)."""
    return LOADERS.get(name, PLUGIN)


def loaders_where(**facts) -> tuple[str, ...]:
    """The built-in loaders whose records hold `facts` (`loaders_where(reads="shards")`), in the table's order."""
    return tuple(name for name, r in LOADERS.items() if all(getattr(r, k) == v for k, v in facts.items()))


def tierless(name: str | None) -> bool:
    """Whether the loader reads no file: measured once per configuration, on its part's first tier."""
    return loader_record(name).reads == "nothing"


def plugin_record(factory) -> LoaderRecord:
    """The facts a plugin factory declares as its attributes (`PLUGIN_ATTRIBUTES`), the defaults where it does not;
    ValueError naming the attribute where one is not a fact's value."""
    declared = {k: getattr(factory, a) for k, a in PLUGIN_ATTRIBUTES.items() if hasattr(factory, a)}
    try:
        return LoaderRecord(**declared)
    except ValueError as e:
        raise ValueError(f"loaderbench_{e}") from None


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
