"""Cells: a cell's spec (`CellSpec`), its id (`<loader>_<tier>_g<gpus>_b<batch>_<precision>_<parallel>[_<model>]
[_beside|_ranks<n>]_r<repeat>`, the model left out for MobileNetV2; `_beside` and `_ranks<n>` mark the part cells of the
what-if, `part_kind`), the grid of a validated config and its parts, and the configuration a repeat belongs to."""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .layout import staged_root, tier_read_path
from .pluginsource import plugin_identity
from .registry import DEFAULT_MODEL, NO_MODEL, tierless

CELL_ID_RE = re.compile(
    r"^(?P<loader>[a-z0-9-]+)_(?P<tier>[a-z][a-z0-9-]*)_g(?P<gpus>[1-9]\d*)_b(?P<batch_size>[1-9]\d*)"
    r"_(?P<precision>fp32|amp)_(?P<parallel>dp|ddp)(?:_(?P<model>[a-z0-9](?:[a-z0-9_-]*?[a-z0-9])?))??"
    r"(?P<beside>_beside)?(?:_ranks(?P<ranks>[2-9]|[1-9]\d+))?_r(?P<repeat>\d+)$"
)
# The model's name is matched as short as the id allows (lazy), so that a part's token after it (`_beside`,
# `_ranks2`) is read as that token, never as the end of the model's name; an id without those tokens reads as before.


# Snakemake wildcard constraint for a cell id: the same grammar, unanchored, without named groups.
CELL_ID_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", CELL_ID_RE.pattern.strip("^$"))


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


def _fixed(**default):
    """A CellSpec field of the cell's identity or of where its tier lies: a sweep variant may not change it."""
    return field(metadata={"fixed": True}, **default)


def _from_config(key: str, *, since_records: bool = False, loaders: tuple[str, ...] = (), **default):
    """A CellSpec field that config key `key` (dotted: `window.steps`) sets for every cell of the grid.

    since_records: a field added after records were made; `to_dict` (the record's spec, its hash, Snakemake's spec
    param) leaves it out while it holds its default, so those records stay the measurements of their cells.
    loaders: a setting of these loaders only; every other loader's cell keeps its default (`loader_settings`), so
    setting it neither changes nor re-measures their cells."""
    return field(metadata={"config_key": key, "since_records": since_records, "loaders": loaders}, **default)


@dataclass(frozen=True)
class CellSpec:
    """Everything one cell job needs; its hash decides whether a stored result is still valid.

    Each field says where cell_spec takes it from: a `_fixed` one from the cell id or its tier (a sweep variant may not
    change it), a `_from_config` one from that config key; the unmarked ones (parallel, seed, cache) cell_spec fills
    in itself, and a sweep may vary them. A new setting is one line here."""

    loader: str = _fixed()
    tier: str = _fixed()
    tier_path: str = _fixed()
    dataset: str = _fixed()
    gpus: int = _fixed()
    batch_size: int = _fixed()
    precision: str = _fixed()
    parallel: str  # dp: one process, nn.DataParallel; ddp: one process per GPU, DistributedDataParallel
    repeat: int = _fixed()
    seed: int  # the config's seed + repeat
    window_steps: int | None = _from_config("window.steps")  # a fixed window of steps, or
    window_s: float | None = _from_config("window.seconds")  # a fixed window of seconds, or
    window_max_s: float | None = _from_config("window.max_seconds")  # an adaptive one: stops when the rate is known
    window_min_s: float = _from_config("window.min_seconds")  # to +-window_precision, or at window_max_s
    window_precision: float = _from_config("window.precision")
    warmup_steps: int = _from_config("warmup_steps")
    crop_size: int = _from_config("crop_size")
    workers: int | str = _from_config("workers")
    prefetch_factor: int = _from_config("prefetch_factor")
    channels_last: bool = _from_config("channels_last")
    input_dtype: str = _from_config("input_dtype")
    compile: bool | str = _from_config("compile")  # false, true (torch.compile) or reduce-overhead (a captured step)
    dali_threads: int | str = _from_config("dali.threads")
    dali_prefetch: int = _from_config("dali.prefetch_queue_depth")
    dali_hw_decoder_load: float = _from_config("dali.hw_decoder_load")
    amp_dtype: str = _from_config("amp_dtype")
    lr: float = _from_config("optimizer.lr")
    momentum: float = _from_config("optimizer.momentum")
    weight_decay: float = _from_config("optimizer.weight_decay")
    cudnn_benchmark: bool = _from_config("cudnn_benchmark")
    placement: str = _from_config("placement")  # auto, pin or off (loaderbench.engine.placement)
    tier_kind: str = _fixed(default="path")  # path, ram or emulated (config key storage.<tier>.kind)
    cache: str = "cold"  # cold: the staged files are evicted from the page cache before the cell
    # where the cell reads the tier (an emulated tier's FUSE mount); None: tier_path
    read_path: str | None = _fixed(default=None)
    device_model: dict | None = _fixed(default=None)  # an emulated tier's device model
    telemetry_hz: float = _from_config("telemetry_hz", default=10.0)  # resource sampling through the cell; 0: off
    cudnn_benchmark_limit: int | None = _from_config("cudnn_benchmark_limit", default=None)  # None: torch's default
    cold_step: str | bool = _from_config("cold_step", default="auto")  # a step on a random batch in setup (train)
    # what the torchvision loader's workers hand over: float32 (ToTensor + Normalize in the workers, the seed's
    # recipe) or uint8 (the same crop and flip; normalised on the device, as opencv does)
    torchvision_transport: str = _from_config(
        "torchvision.transport", since_records=True, loaders=("torchvision", "wds"), default="float32"
    )
    # steps profiled after the window (torch.profiler; stepprofile): a record's metrics.profile; 0: none
    profile_steps: int = _from_config("profile_steps", since_records=True, default=0)
    # SGD's fused implementation: under amp, GradScaler's overflow check stays on the device (no host sync a step)
    optimizer_fused: bool = _from_config("optimizer.fused", since_records=True, default=False)
    # the shard loaders: workers of wds reading at once (0: all), bytes a worker reads in one go, and the samples a
    # loader shuffles among while reading
    shard_readers: int = _from_config("shards.readers", since_records=True, loaders=("wds",), default=1)
    shard_read_mb: float = _from_config("shards.read_mb", since_records=True, loaders=("wds",), default=16)
    shuffle_buffer: int = _from_config(
        "shards.shuffle_buffer", since_records=True, loaders=("wds", "dali-wds"), default=1000
    )
    # a plugin loader's factory, 'module:factory' (docs/plugins.md); None for a built-in loader
    loader_ref: str | None = field(default=None, metadata={"since_records": True})
    # the plugin's code as the spec was made (pluginsource.plugin_identity: its distribution's version and a hash of its
    # source), so that an edited or upgraded plugin re-measures its cells; None for a built-in loader, or a plugin
    # whose module cannot be found (its cells fail, and are measured again once it is found)
    loader_identity: dict | None = field(default=None, metadata={"since_records": True, "fixed": True})
    # the model the cell trains (config key `models`): a torchvision classification builder's name, `none` (the loader
    # alone) or a plugin model's name; records from before models were an axis trained MobileNetV2
    model: str = field(default=DEFAULT_MODEL, metadata={"since_records": True, "fixed": True})
    # a plugin model's factory, 'module:factory', and its code's identity (as loader_ref, loader_identity); None for
    # torchvision's models and `none`
    model_ref: str | None = field(default=None, metadata={"since_records": True})
    model_identity: dict | None = field(default=None, metadata={"since_records": True, "fixed": True})
    # the CUDA stream the training step runs on: default (the device's current stream, beside the loader's copies) or
    # high (a stream of the highest priority, so that a loader's own GPU work - DALI's decoding and resizing - yields
    # to the step)
    step_stream_priority: str = _from_config("step_stream_priority", since_records=True, default="default")
    # a part of the what-if (`part_kind`). beside: the loader's batches fetched as in training and discarded, the model
    # stepped on one device-resident synthetic batch of their form; ranks: the loader alone (`none`, 1 GPU) at n ranks
    # - n processes under ddp, n GPUs' worth of batches in one process under dp - delivered to the one device
    beside: bool = field(default=False, metadata={"since_records": True, "fixed": True})
    ranks: int = field(default=1, metadata={"since_records": True, "fixed": True})

    def cold_step_on(self, kind: str) -> bool:
        """`cold_step`: true, false, or auto - on a GPU (`kind` "cuda": its first step pays lazy kernel loading and
        library handles), not on the CPU (nothing to hide there: the step would only add time)."""
        return self.cold_step is True or (self.cold_step == "auto" and kind == "cuda")

    @property
    def data_root(self) -> Path:
        return staged_root(self.read_path or self.tier_path, self.dataset)

    @property
    def cell_id(self) -> str:
        return cell_id(
            self.loader,
            self.tier,
            self.gpus,
            self.batch_size,
            self.precision,
            self.parallel,
            self.repeat,
            self.model,
            beside=self.beside,
            ranks=self.ranks,
        )

    @property
    def processes(self) -> int:
        """The cell's measuring processes: under ddp one per GPU (a ranks part: one per rank, all on its one device);
        under dp one."""
        return self.gpus * self.ranks if self.parallel == "ddp" else 1

    @property
    def launchers(self) -> int:
        """The threads that launch its device work, a core each where it is pinned (engine.placement): each ddp
        process's main thread; dp's main thread and one replica thread per further GPU."""
        return max(self.processes, self.gpus)

    def to_dict(self) -> dict:
        d = asdict(self)
        for f in fields(self):
            if f.metadata.get("since_records") and d[f.name] == f.default:
                del d[f.name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CellSpec:
        return cls(**d)


# Which config key sets which CellSpec field for every cell, read off the fields (`_from_config`).
CONFIG_KEY_OF = {f.name: f.metadata["config_key"] for f in fields(CellSpec) if "config_key" in f.metadata}


# Settings of some loaders only (`_from_config(loaders=...)`): field -> (its loaders, its default)
_LOADER_SCOPED = {f.name: (f.metadata["loaders"], f.default) for f in fields(CellSpec) if f.metadata.get("loaders")}


# The settings of the training step: a loader's cell and the `synthetic` ceiling of its configuration share them, so
# that AU is the loader's share of the same step.
STEP_SETTINGS = ("compile", "step_stream_priority")


# `compile`'s value that captures the step: torch.compile's mode that replays the model's forward and backward as CUDA
# graphs (fewer kernel launches a step)
CAPTURED = "reduce-overhead"


def loader_settings(settings: dict, loader: str) -> dict:
    """A part's settings as a cell of `loader` takes them: another loader's setting at its default."""
    return {
        k: (v if k not in _LOADER_SCOPED or loader in _LOADER_SCOPED[k][0] else _LOADER_SCOPED[k][1])
        for k, v in settings.items()
    }


def cell_id(
    loader: str,
    tier: str,
    gpus: int,
    batch_size: int,
    precision: str,
    parallel: str,
    repeat: int,
    model: str = DEFAULT_MODEL,
    *,
    beside: bool = False,
    ranks: int = 1,
) -> str:
    """The id of a cell; the model part is left out for the default model (MobileNetV2), as ids were before; a part
    of the what-if ends in `_beside` or `_ranks<n>` before its repeat (ConfigError where it is no such part:
    `part_problem`)."""
    problem = part_problem(gpus, model, beside, ranks)
    if problem:
        raise ConfigError(f"no cell id for {loader} on {tier}: {problem}")
    trained = "" if model == DEFAULT_MODEL else f"_{model}"
    part = "_beside" if beside else (f"_ranks{ranks}" if ranks > 1 else "")
    return f"{loader}_{tier}_g{gpus}_b{batch_size}_{precision}_{parallel}{trained}{part}_r{repeat}"


def part_problem(gpus: int, model: str, beside: bool, ranks: int) -> str | None:
    """Why these fields make no part of the what-if (None: they make one, or a plain cell): a `beside` part trains a
    model; a `ranks` part is the loader alone (`none`) on one GPU, at 2 ranks or more."""
    if ranks < 1:
        return f"ranks {ranks}: at least 1"
    if beside and model == NO_MODEL:
        return f"a beside part steps a model on a synthetic batch beside the loader; model {NO_MODEL} has none"
    if ranks > 1 and (model != NO_MODEL or gpus != 1):
        return f"a ranks part is the loader alone on one GPU (model {NO_MODEL}, g1), not model {model} on {gpus} GPU(s)"
    return None


def parse_cell_id(cid: str) -> dict:
    """A cell id's fields, "model" always (the default model where the id leaves it out), "beside" and "ranks" always
    (False and 1 for a cell of the matrix)."""
    m = CELL_ID_RE.match(cid)
    if not m:
        raise ConfigError(
            f"'{cid}' is not a cell id (expected loader_tier_gN_bN_fp32|amp_dp|ddp[_model][_beside|_ranksN]_rN)"
        )
    d = m.groupdict()
    if d["model"] == DEFAULT_MODEL:
        raise ConfigError(f"'{cid}' is not a cell id: the default model {DEFAULT_MODEL} is left out of its cells' ids")
    out = {
        **d,
        "gpus": int(d["gpus"]),
        "batch_size": int(d["batch_size"]),
        "repeat": int(d["repeat"]),
        "model": d["model"] or DEFAULT_MODEL,
        "beside": d["beside"] is not None,
        "ranks": int(d["ranks"] or 1),
    }
    problem = part_problem(out["gpus"], out["model"], out["beside"], out["ranks"])
    if problem:
        raise ConfigError(f"'{cid}' is not a cell id: {problem}")
    return out


def part_kind(cell) -> str | None:
    """Which part of the what-if a cell is - "beside", "ranks" - or None for a cell of the matrix; `cell` is its id, a
    CellSpec or a record's spec (a dict; one without the fields is a cell of the matrix)."""
    d = parse_cell_id(cell) if isinstance(cell, str) else cell if isinstance(cell, dict) else asdict(cell)
    return "beside" if d.get("beside") else "ranks" if (d.get("ranks") or 1) > 1 else None


def _on_tier(part: dict, loader: str, tier: str) -> bool:
    """A loader that reads no file (`registry.tierless`) is measured on its part's first tier only."""
    return not tierless(loader) or tier == part["tiers"][0]


def is_cell(loader: str, model: str) -> bool:
    """`synthetic` x `none` measures nothing (no loader and no model): not a cell of any grid."""
    return not (tierless(loader) and model == NO_MODEL)


def part_models(part: dict) -> list[str]:
    """A part's models (a part resolved before models were an axis trains the default)."""
    return part.get("models") or [DEFAULT_MODEL]


def _part_fields(part: dict) -> tuple[bool, int]:
    """The part fields (beside, ranks) of a grid part's cells: those of a part the config key `whatif` adds, (False, 1)
    for any other."""
    return bool(part.get("beside", False)), int(part.get("ranks", 1))


def config_models(cfg: dict) -> list[str]:
    """The models a config's grid trains, in the order its parts name them (each once)."""
    return list(dict.fromkeys(m for part in cfg["parts"] for m in part_models(part)))


def part_cells(part: dict) -> list[str]:
    """A part's cells in a stable order: repeats outermost, then the parallel mode, the GPUs and the model, so that the
    dp cells follow one another and a kept process (host.reuse_processes) serves all but the first of them (a ddp cell
    in between would end it), those of one GPU count and one model, and so of the same shapes, together."""
    beside, ranks = _part_fields(part)
    return [
        cell_id(lo, t, g, b, p, par, r, m, beside=beside, ranks=ranks)
        for r, par, g, m, lo, t, b, p in itertools.product(
            range(part["repeats"]),
            part["parallel"],
            part["gpus"],
            part_models(part),
            part["loaders"],
            part["tiers"],
            part["batch_sizes"],
            part["precisions"],
        )
        if _on_tier(part, lo, t) and is_cell(lo, m)
    ]


def cell_part(cfg: dict, cid: str) -> dict | None:
    """The part that owns cell `cid` - the first that has it, as in `cell_parts` - without listing the grid (a cell
    job asks for its own spec); None when no part has it."""
    d = parse_cell_id(cid)
    for part in cfg["parts"]:
        if (
            d["loader"] in part["loaders"]
            and d["tier"] in part["tiers"]
            and d["gpus"] in part["gpus"]
            and d["batch_size"] in part["batch_sizes"]
            and d["precision"] in part["precisions"]
            and d["parallel"] in part["parallel"]
            and d["repeat"] < part["repeats"]
            and d["model"] in part_models(part)
            and (d["beside"], d["ranks"]) == _part_fields(part)
            and _on_tier(part, d["loader"], d["tier"])
            and is_cell(d["loader"], d["model"])
        ):
            return part
    return None


def cell_parts(cfg: dict) -> dict[str, dict]:
    """Every cell of the grid -> the first part that has it, in a stable order: repeats outermost (then the parts in
    their order), so that the repeats of one configuration are measured apart (interleaved with the other
    configurations), not back to back - drift then shows as spread."""
    out: dict[str, dict] = {}
    for r in range(max(part["repeats"] for part in cfg["parts"])):
        for part in cfg["parts"]:
            for cid in part_cells(part):
                if cid.endswith(f"_r{r}"):
                    out.setdefault(cid, part)
    return out


def cell_ids(cfg: dict) -> list[str]:
    """Every cell of the grid (of all its parts), in the order of `cell_parts`."""
    return list(cell_parts(cfg))


def cell_spec(cfg: dict, cid: str, in_grid: bool = True) -> CellSpec:
    """The spec of cell `cid` under `cfg`, with its part's settings (in_grid=False: any cell of the config's top-level
    settings, for benchmarks)."""
    d = parse_cell_id(cid)
    part = cell_part(cfg, cid) if in_grid else None
    if in_grid and part is None:
        raise ConfigError(f"cell '{cid}' is not in this configuration's grid (see `loaderbench cells`)")
    tier = cfg["storage"][d["tier"]]
    settings = part["settings"] if part else {name: config_value(cfg, key) for name, key in CONFIG_KEY_OF.items()}
    ref = cfg.get("plugins", {}).get(d["loader"])
    model_ref = (cfg.get("model_plugins") or {}).get(d["model"])
    return CellSpec(
        **d,
        **loader_settings(settings, d["loader"]),
        tier_path=tier["path"],
        dataset=cfg["dataset"]["name"],
        seed=cfg["seed"] + d["repeat"],
        tier_kind=tier["kind"],
        cache=tier["cache"],
        read_path=tier_read_path(tier),
        device_model=tier["model"],
        loader_ref=ref,
        loader_identity=plugin_identity(ref) if ref else None,
        model_ref=model_ref,
        model_identity=plugin_identity(model_ref) if model_ref else None,
    )


def config_value(cfg: dict, key: str):
    """The value of dotted config key `key` (`window.steps`: cfg["window"]["steps"])."""
    for part in key.split("."):
        cfg = cfg[part]
    return cfg


REPEAT = re.compile(r"_r\d+$")


def configuration(cell_id: str) -> str:
    """The cell id without its repeat: the unit the table's median is taken over."""
    return REPEAT.sub("", cell_id)
