"""Configuration: schema validation with defaults, semantic checks, and the grid of cells."""

from __future__ import annotations

import copy
import difflib
import itertools
import os
import re
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .cells import (
    CAPTURED,
    CELL_ID_RE,
    CONFIG_KEY_OF,
    STEP_SETTINGS,
    ConfigError,
    config_models,
    config_value,
    configuration,
    loader_settings,
    parse_cell_id,
    part_cells,
    part_models,
)
from .pluginsource import find_module
from .provenance import filesystem_of
from .registry import (
    DEFAULT_MODEL,
    LOADERS,
    MODEL_NAME,
    NO_MODEL,
    PLUGIN_NAME,
    REFERENCE,
    TORCHVISION_MODELS,
    installed_models,
    installed_plugins,
    loader_record,
    loaders_where,
    reference_name,
    tierless,
    torchvision_input_size,
)
from .util import stable_hash


def load_schema() -> dict:
    text = resources.files("loaderbench").joinpath("schemas/config.schema.yaml").read_text()
    return yaml.safe_load(text)


def _with_defaults(validator_cls):
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft7Validator)


def _key(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def validate_config(
    raw: dict | None, base_dir: Path | None = None, check_paths: bool = False, find_plugins: bool | None = None
) -> dict:
    """Validate against the schema, fill defaults, check cross-key rules; return a new dict.

    check_paths: also check what lies on this machine - the dataset and tier paths (see _check_paths), the number of
    images of a path source (_check_batches) and, unless find_plugins says otherwise, that the plugin loaders'
    modules can be found (what the workflow does when it loads)."""
    cfg = copy.deepcopy(raw) if raw else {}
    if not isinstance(cfg, dict):
        raise ConfigError("config must be a mapping of keys to values")
    errors = sorted(_Validator(load_schema()).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors:
            if e.validator == "additionalProperties" and not e.absolute_path:
                lines.append(f"unknown key: {e.message}")
            else:
                lines.append(f"config key '{_key(e.absolute_path)}': {e.message}")
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))

    find_plugins = check_paths if find_plugins is None else find_plugins
    _resolve_loaders(cfg, find=find_plugins)
    _resolve_models(cfg, find=find_plugins)
    if cfg["tiers"] is None:
        cfg["tiers"] = list(cfg["storage"])
    missing = [t for t in cfg["tiers"] if t not in cfg["storage"]]
    if missing:
        raise ConfigError(
            f"config key 'tiers': {', '.join(map(repr, missing))} not defined under 'storage' "
            f"(defined: {', '.join(cfg['storage'])})"
        )
    win = cfg["window"]
    given = [k for k in ("steps", "seconds", "max_seconds") if (raw or {}).get("window", {}).get(k) is not None]
    if len(given) > 1:
        raise ConfigError(
            f"config key 'window': give one of 'steps', 'seconds' (fixed) or 'max_seconds' (adaptive), "
            f"not {' and '.join(given)}"
        )
    if given and given[0] != "max_seconds":
        win["max_seconds"] = None  # a fixed window: no adaptive stop
    if win["max_seconds"] is not None and win["min_seconds"] > win["max_seconds"]:
        raise ConfigError(
            f"config key 'window.min_seconds': {win['min_seconds']} exceeds window.max_seconds {win['max_seconds']}"
        )
    if cfg["cell_timeout_s"] == "auto":
        cfg["cell_timeout_s"] = auto_timeout(win, cfg["compile"])
    ds = cfg["dataset"]
    if ds["source"] == "path" and not ds["path"]:
        raise ConfigError("config key 'dataset.path': required when dataset.source is 'path'")
    if ds["source"] == "generated" and ds["classes"] > ds["images"]:
        raise ConfigError(f"config key 'dataset.classes': {ds['classes']} classes exceed dataset.images {ds['images']}")
    base_dir = Path(base_dir or os.getcwd())
    cfg["storage"] = {k: _tier(k, v, base_dir, cfg["device_models"]) for k, v in cfg["storage"].items()}
    _check_distinct_tiers(cfg["storage"])
    if ds["path"]:
        ds["path"] = str(_resolve(ds["path"], base_dir))
    if ds["name"] is None:
        ds["name"] = dataset_name(cfg)
    bad = [(i, c) for i, c in enumerate(cfg["timeline_cells"]) if not CELL_ID_RE.match(c)]
    if bad:
        i, c = bad[0]
        raise ConfigError(
            f"config key 'timeline_cells[{i}]': {c!r} is not a cell id (see `loaderbench cells --config ...`)"
        )
    _resolve_parts(raw or {}, cfg, base_dir, find_plugins)
    _check_input_sizes(cfg, raw or {})
    _check_captured_step(cfg, raw or {})
    _check_ceiling_steps(cfg)
    _resolve_shards(cfg)
    if check_paths:
        _check_paths(cfg, base_dir)
    _check_batches(cfg, raw or {}, count_files=check_paths)
    return cfg


def _check_batches(cfg: dict, raw: dict, count_files: bool) -> None:
    """A step takes batch x GPUs distinct images (dp: one process takes the global batch; ddp: each of the GPUs'
    ranks reads its own equal share of the images and takes a batch of it), so a dataset with fewer would fail every
    cell of that batch. Checked where the count is known here: a generated dataset's `dataset.images`, and with
    count_files a path source's files in its class folders (counted only up to the number needed, so ImageNet costs
    no full scan); the dataset check may still quarantine some, and a cell left with too few fails naming its batch
    and the images it has."""
    steps = []  # (part index, part, batch, gpus) of each part's largest step of a loader that reads the files
    for i, part in enumerate(cfg["parts"]):
        if any(not tierless(lo) for lo in part["loaders"]):
            b, g = max(itertools.product(part["batch_sizes"], part["gpus"]), key=lambda bg: (bg[0] * bg[1], bg[0]))
            steps.append((i, part, b, g))
    ds = cfg["dataset"]
    if not steps or (ds["source"] == "path" and not count_files):
        return
    if ds["source"] == "generated":
        have, what = ds["images"], f"dataset.images is {ds['images']}"
    else:
        have = _count_images(Path(ds["path"]), max(b * g for _, _, b, g in steps))
        what = f"dataset.path {ds['path']} holds {have} image files in its class folders"
    for i, part, b, g in steps:
        if b * g <= have:
            continue
        where = f"config key 'parts[{i}]' ({part['name']}): " if raw.get("parts") else ""
        fits = sorted(x for x in part["batch_sizes"] if x * g <= have)
        step = f"batch {b} on {g} GPUs takes {b * g} images a step" if g > 1 else f"batch {b} takes {b} images a step"
        raise ConfigError(
            f"{where}config key 'batch_sizes': {step}, but {what}; "
            + (f"use batch sizes up to {fits[-1]}" if fits else "lower the batch size")
            + (" or use fewer GPUs (config key 'gpus')" if g > 1 else "")
            + ", or give the dataset more images"
        )


def _count_images(source: Path, enough: int) -> int:
    """The files in `source`'s class folders (as the dataset check lists them), counted up to `enough`."""
    n = 0
    try:
        classes = [e.path for e in os.scandir(source) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return 0
    for folder in classes:
        for _, _, filenames in os.walk(folder):
            n += len(filenames)
            if n >= enough:
                return n
    return n


def _resolve_shards(cfg: dict) -> None:
    """shards.stage as true or false: `auto` stages shards when a part measures a shard loader; with shards.files
    false (shards instead of the file tree) no part may measure a loader that reads files."""
    loaders = {name for part in cfg["parts"] for name in part["loaders"]}
    readers = sorted(loaders & set(loaders_where(reads="shards")))
    sh = cfg["shards"]
    if sh["stage"] == "auto":
        sh["stage"] = bool(readers) or not sh["files"]
    elif readers and not sh["stage"]:
        raise ConfigError(
            f"config key 'shards.stage': false, but {', '.join(readers)} read(s) shards; set it to "
            "true or auto, or drop those loaders"
        )
    if not sh["files"]:
        if not sh["stage"]:
            raise ConfigError(
                "config key 'shards.files': false stages the shards instead of the files, but "
                "shards.stage is false: nothing would be staged"
            )
        if file_readers := sorted(lo for lo in loaders if loader_record(lo).reads == "files"):
            raise ConfigError(
                f"config key 'shards.files': false stages only shards, but {', '.join(file_readers)} "
                f"read(s) the files; set it to true or measure only {' and '.join(loaders_where(reads='shards'))}"
            )


# Keys a part may set: the grid's axes and the settings that reach a cell's spec (window, workers, ...).
AXES = ("loaders", "models", "tiers", "gpus", "batch_sizes", "precisions", "parallel", "repeats")
STUDY_KEYS = ("parts", "budget_minutes", "trim")


def resolve_loaders(cfg: dict, entries: list[str], key: str) -> list[str]:
    """The names cells carry for `entries` (as in `loaders`; errors name `key`, a command's option), the plugins
    among them added to cfg["plugins"]."""
    probe = {"loaders": list(entries), "plugins": dict(cfg.get("plugins") or {})}
    _resolve_loaders(probe, key)
    cfg["plugins"] = probe["plugins"]
    return probe["loaders"]


def measured_models(cfg: dict, model: str | None, key: str = "--model") -> list[str]:
    """The models a measurement outside the grid (tune, sweep, ceiling, crosscheck) trains: the config's (`models`,
    over its parts), or `model` alone when given - a model of the config, or any model a config may name (a
    torchvision classification builder, `none`, a plugin: `_resolve_models`), its plugin added to
    cfg["model_plugins"]. Errors name `key` (a command's option) and the value."""
    if model is None:
        return config_models(cfg)
    if model in config_models(cfg):
        return [model]
    probe = {"models": [model], "model_plugins": dict(cfg.get("model_plugins") or {})}
    _resolve_models(probe, key)
    name = probe["models"][0]
    size = torchvision_input_size(name) if name not in probe["model_plugins"] else None
    if size is not None and cfg["crop_size"] != size:
        raise ConfigError(
            f"{key} {model!r}: {name} takes {size} x {size} images only, but config key 'crop_size' is "
            f"{cfg['crop_size']}; set crop_size to {size} to measure it"
        )
    cfg["model_plugins"] = probe["model_plugins"]
    return [name]


def _resolve_loaders(cfg: dict, key: str = "config key 'loaders'", find: bool = False) -> None:
    """cfg["loaders"] as the names cells carry, and cfg["plugins"] (name -> `module:factory`) for the plugin loaders:
    a `loaders` entry is a built-in name, a name under `plugins`, a `module:factory` reference (named by
    `reference_name`) or an installed package's plugin (entry-point group `loaderbench.loaders`).

    find: refuse a plugin whose module cannot be found here, without importing it (pluginsource.find_module), naming
    where the config names it; otherwise its cells would each fail on the import."""
    declared = dict(cfg.get("plugins") or {})
    for name, ref in declared.items():
        if not PLUGIN_NAME.match(name) or name in LOADERS:
            raise ConfigError(
                f"config key 'plugins.{name}': a plugin's name is lowercase letters, digits and '-', "
                f"and not a built-in loader's ({', '.join(LOADERS)})"
            )
        if not REFERENCE.match(ref):
            raise ConfigError(f"config key 'plugins.{name}': {ref!r} is not a 'module:factory' reference")
    names, plugins, installed = [], {}, None
    for entry in cfg["loaders"]:
        if entry in LOADERS:
            names.append(entry)
            continue
        if entry in declared:
            name, ref, where = entry, declared[entry], f"config key 'plugins.{entry}'"
        elif REFERENCE.match(entry):
            name, ref, where = reference_name(entry), entry, f"{key}: plugin {entry!r}"
        else:
            installed = installed_plugins() if installed is None else installed
            if entry not in installed:
                known = ", ".join([*LOADERS, *declared, *installed])
                raise ConfigError(
                    f"{key}: unknown loader {entry!r}; known: {known}; or name a plugin's "
                    "factory as 'module:factory' (docs/plugins.md)"
                )
            name, ref = entry, installed[entry]
            where = f"{key}: plugin {entry!r} (an installed package's entry point, {ref!r})"
        if find:
            _require_module(ref, where)
        if name in LOADERS or not PLUGIN_NAME.match(name):
            raise ConfigError(
                f"{key}: plugin {entry!r} would be named {name!r}, which is a built-in "
                "loader's or not a name; name it under 'plugins'"
            )
        if plugins.setdefault(name, ref) != ref:
            raise ConfigError(
                f"{key}: {plugins[name]!r} and {ref!r} would both be named {name!r}; name them under 'plugins'"
            )
        names.append(name)
    if len(set(names)) < len(names):
        raise ConfigError(f"{key}: a loader is named twice ({', '.join(names)})")
    cfg["loaders"], cfg["plugins"] = names, {**declared, **plugins}


def _require_module(ref: str, where: str) -> None:
    """Refuse plugin `ref` ('module:factory', named in the config at `where`) whose module cannot be found here,
    without importing it (pluginsource.find_module): otherwise each of its cells would fail on the import."""
    if find_module(module := ref.partition(":")[0]) is None:
        raise ConfigError(
            f"{where}: module {module!r} cannot be found here (not installed, not on PYTHONPATH, "
            "or a package above it fails to import); install its package, or put the folder that "
            "holds it on PYTHONPATH before starting snakemake (docs/plugins.md)"
        )


def _resolve_models(cfg: dict, key: str = "config key 'models'", find: bool = False) -> None:
    """cfg["models"] as the names cells carry, and cfg["model_plugins"] (name -> `module:factory`) for the plugin
    models: a `models` entry is a torchvision classification builder's name, `none` (the loader alone), a name under
    `model_plugins`, a `module:factory` reference (named by `reference_name`) or an installed package's model
    (entry-point group `loaderbench.models`). torchvision is imported only for a name none of these know (a builder
    newer than TORCHVISION_MODELS). find: as in `_resolve_loaders`."""
    declared = dict(cfg.get("model_plugins") or {})
    for name, ref in declared.items():
        if not MODEL_NAME.match(name) or name == NO_MODEL or name in TORCHVISION_MODELS:
            raise ConfigError(
                f"config key 'model_plugins.{name}': a model's name is lowercase letters, digits, '_' and '-', and "
                "not `none` or a torchvision model's"
            )
        if not REFERENCE.match(ref):
            raise ConfigError(f"config key 'model_plugins.{name}': {ref!r} is not a 'module:factory' reference")
    names, plugins, installed = [], {}, None
    for entry in cfg.get("models") or [DEFAULT_MODEL]:
        if entry == NO_MODEL or entry in TORCHVISION_MODELS:
            names.append(entry)
            continue
        if entry in declared:
            name, ref, where = entry, declared[entry], f"config key 'model_plugins.{entry}'"
        elif REFERENCE.match(entry):
            name, ref, where = reference_name(entry), entry, f"{key}: plugin {entry!r}"
        else:
            installed = installed_models() if installed is None else installed
            if entry in installed:
                name, ref = entry, installed[entry]
                where = f"{key}: model {entry!r} (an installed package's entry point, {ref!r})"
            elif MODEL_NAME.match(entry) and entry in _newer_torchvision_models():
                names.append(entry)
                continue
            else:
                known = [NO_MODEL, *TORCHVISION_MODELS, *declared, *installed]
                close = difflib.get_close_matches(entry, known, n=4, cutoff=0.5)
                raise ConfigError(
                    f"{key}: unknown model {entry!r}"
                    + (f"; closest: {', '.join(close)}" if close else "")
                    + "; name a classification model of torchvision.models (e.g. resnet50), `none`, a model under "
                    "'model_plugins', or a plugin's factory as 'module:factory' (docs/plugins.md)"
                )
        if find:
            _require_module(ref, where)
        if name == NO_MODEL or name in TORCHVISION_MODELS or not MODEL_NAME.match(name):
            raise ConfigError(
                f"{key}: plugin {entry!r} would be named {name!r}, which is `none`, a torchvision model's or not "
                "a name; name it under 'model_plugins'"
            )
        if plugins.setdefault(name, ref) != ref:
            raise ConfigError(
                f"{key}: {plugins[name]!r} and {ref!r} would both be named {name!r}; name them under 'model_plugins'"
            )
        names.append(name)
    if len(set(names)) < len(names):
        raise ConfigError(f"{key}: a model is named twice ({', '.join(names)})")
    cfg["models"], cfg["model_plugins"] = names, {**declared, **plugins}


def _newer_torchvision_models() -> list[str]:
    """The classification builders of the installed torchvision (imported only here: a name TORCHVISION_MODELS lacks
    may be one a newer torchvision added); none when torchvision is not installed."""
    try:
        import torchvision
    except ImportError:
        return []
    return torchvision.models.list_models(module=torchvision.models)


def _check_input_sizes(cfg: dict, raw: dict) -> None:
    """A torchvision model that takes one image size only (a vision transformer's position embeddings) needs that
    crop_size in every part that trains it; otherwise each of its cells would fail on its first step."""
    for i, part in enumerate(cfg["parts"]):
        crop = part["settings"]["crop_size"]
        for model in part_models(part):
            size = torchvision_input_size(model) if model not in cfg.get("model_plugins", {}) else None
            if size is not None and crop != size:
                where = f"config key 'parts[{i}]' ({part['name']}): " if raw.get("parts") else ""
                raise ConfigError(
                    f"{where}config key 'models': {model} takes {size} x {size} images only, but config key "
                    f"'crop_size' is {crop}; set crop_size to {size} for it (a part of its own can), or drop {model}"
                )


def _check_captured_step(cfg: dict, raw: dict) -> None:
    """A captured step (`compile: reduce-overhead`) replays one device's graphs: DataParallel over several GPUs
    replicates the model onto the others every step (and dali-mc hands it batches already scattered over them), which
    no captured graph holds; every such cell would fail on its first step."""
    for i, part in enumerate(cfg["parts"]):
        several = sorted(g for g in part["gpus"] if g > 1)
        if part["settings"]["compile"] != CAPTURED or "dp" not in part["parallel"] or not several:
            continue
        where = f"config key 'parts[{i}]' ({part['name']}): " if raw.get("parts") else ""
        mc = (
            " (and dali-mc's batches come to it already scattered over the GPUs)"
            if "dali-mc" in part["loaders"]
            else ""
        )
        raise ConfigError(
            f"{where}config key 'compile': {CAPTURED} captures the step on one device, but parallel dp on "
            f"{', '.join(map(str, several))} GPUs runs DataParallel, which replicates the model onto every GPU each "
            f"step{mc}; use parallel ddp or gpus [1] for the captured step (a part of its own can), or compile true"
        )


def _check_ceiling_steps(cfg: dict) -> None:
    """A cell trains with the step settings (STEP_SETTINGS) of the `synthetic` ceiling of its configuration: AU is a
    loader's share of the same step. Parts may set them differently only where no loader's cell would be held against
    a ceiling of another step."""
    ceilings: dict[str, tuple[str, dict]] = {}  # configuration without the loader -> (part name, step settings)

    def step_of(part: dict) -> dict:
        return {k: part["settings"][k] for k in STEP_SETTINGS}

    for part in cfg["parts"]:
        for cid in part_cells(part):
            d = parse_cell_id(cid)
            if tierless(d["loader"]):
                ceilings.setdefault(_step_configuration(cid), (part["name"], step_of(part)))
    for i, part in enumerate(cfg["parts"]):
        for cid in part_cells(part):
            owner, theirs = ceilings.get(_step_configuration(cid), (None, None))
            if theirs is None or theirs == (mine := step_of(part)):
                continue
            differ = ", ".join(f"{k} {mine[k]!r} (the ceiling: {theirs[k]!r})" for k in mine if mine[k] != theirs[k])
            raise ConfigError(
                f"config key 'parts[{i}]' ({part['name']}): cell {cid} trains with {differ}, but the synthetic "
                f"ceiling of its configuration is measured in part {owner!r}; AU holds a loader against the ceiling "
                "of the same training step: set these keys alike in both parts"
            )


def _step_configuration(cid: str) -> str:
    """What a cell is held against its ceiling by: its gpus, batch, precision, parallel mode and model."""
    return configuration(cid).split("_", 2)[2]


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _resolve_parts(raw: dict, cfg: dict, base_dir: Path, find_plugins: bool = False) -> None:
    """cfg["parts"]: the study's sub-grids, each with its axes and the settings of its cells' specs. A config without
    `parts` is one part, `grid`. A part takes what it does not set from the top level; the top-level `tiers` become
    the parts' tiers (those staged and probed) and an auto cell_timeout_s the longest the parts need."""
    given = raw.get("parts")
    if given and all("settings" in p for p in given):  # already resolved: a validated config validated again
        return
    if not given:
        cfg["parts"] = [_part("grid", cfg, "")]
        return
    settable = set(AXES) | {key.split(".")[0] for key in CONFIG_KEY_OF.values()} | {"name", "note"}
    base = {k: v for k, v in raw.items() if k not in STUDY_KEYS}
    parts, owner = [], {}
    for i, p in enumerate(given):
        where = f"config key 'parts[{i}]' ({p['name']})"
        if p["name"] in (q["name"] for q in parts):
            raise ConfigError(f"{where}: the name is used by an earlier part")
        bad = sorted(set(p) - settable)
        if bad:
            raise ConfigError(
                f"{where}: {', '.join(map(repr, bad))} cannot differ between parts; a part sets "
                f"{', '.join(sorted(settable - {'name', 'note'}))}"
            )
        try:
            pc = validate_config(
                _merge(base, {k: v for k, v in p.items() if k not in ("name", "note")}),
                base_dir,
                find_plugins=find_plugins,
            )
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        cfg["plugins"].update(pc["plugins"])
        cfg["model_plugins"].update(pc["model_plugins"])
        part = _part(p["name"], pc, p.get("note", ""))
        part["cell_timeout_s"] = pc["cell_timeout_s"]
        for cid in part_cells(part):
            other = owner.setdefault(cid, part)
            loader = parse_cell_id(cid)["loader"]
            mine, theirs = loader_settings(part["settings"], loader), loader_settings(other["settings"], loader)
            if other is not part and mine != theirs:
                differ = sorted(k for k in mine if mine[k] != theirs[k])
                raise ConfigError(
                    f"{where}: cell {cid} is also in part {other['name']!r} with other settings "
                    f"({', '.join(differ)}); a cell has one spec"
                )
        parts.append(part)
    cfg["parts"] = parts
    cfg["tiers"] = list(dict.fromkeys(t for part in parts for t in part["tiers"]))
    if raw.get("cell_timeout_s", "auto") == "auto":
        cfg["cell_timeout_s"] = max(part["cell_timeout_s"] for part in parts)


def _part(name: str, cfg: dict, note: str) -> dict:
    return {
        "name": name,
        "note": note,
        **{k: cfg[k] for k in AXES},
        "settings": {f: config_value(cfg, key) for f, key in CONFIG_KEY_OF.items()},
    }


# what a compiled model's first step may take beyond an eager one's (torch.compile's inductor on a slow CPU: minutes)
COMPILE_ALLOWANCE_S = 600.0


def auto_timeout(window: dict, compile_: bool) -> float:
    """A cell's time limit from its window: start-up, build and warm-up allowance plus the longest window, x4."""
    longest = window["seconds"] or window["max_seconds"]
    return (300.0 + 4 * longest if longest else 900.0) + (COMPILE_ALLOWANCE_S if compile_ else 0.0)


def _check_paths(cfg: dict, project_dir: Path) -> None:
    """What would otherwise fail only when jobs run. dataset.path (source: path) must be an existing directory. A tier
    path that exists must be a directory; one that does not exist is fine inside the project directory (staging
    creates it, as the quickstart's resources/tiers/...) and an error outside it (a device should be mounted there,
    and staging never creates directories outside the project). An emulated tier's mount point, if it exists, must
    be a directory (it is created when mounted)."""
    ds = cfg["dataset"]
    if ds["source"] == "path":
        path = Path(ds["path"])
        if not path.exists():
            raise ConfigError(
                f"config key 'dataset.path': {path} does not exist; point it at an ImageFolder root "
                "(<root>/<class>/<image>, e.g. ImageNet's train/)"
            )
        if not path.is_dir():
            raise ConfigError(f"config key 'dataset.path': {path} is not a directory; point it at an ImageFolder root")
    project = Path(os.path.realpath(project_dir))
    for name, t in cfg["storage"].items():
        if name not in cfg["tiers"]:
            continue
        path = Path(t["path"])
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"config key 'storage.{name}': {path} is a file, not a directory; point the tier at "
                "a directory (staging writes into <dir>/loaderbench/)"
            )
        if not path.exists() and project not in Path(os.path.realpath(path)).parents:
            raise ConfigError(
                f"config key 'storage.{name}': {path} does not exist; mount the {name} device there, "
                "create the directory, or point the key at an existing one (only directories inside "
                f"the project {project} are created by staging)"
            )
        if t["mount"] and Path(t["mount"]).exists() and not Path(t["mount"]).is_dir():
            raise ConfigError(
                f"config key 'storage.{name}.mount': {t['mount']} is a file, not a directory; pick another mount point"
            )


RAM_FILESYSTEMS = ("tmpfs", "ramfs")


def _check_distinct_tiers(storage: dict) -> None:
    """Two tiers on the same or nested paths (or mount points) would stage into each other's files."""
    places = [
        (f"storage.{name}.{k}", Path(os.path.realpath(t[k])))
        for name, t in storage.items()
        for k in ("path", "mount")
        if t[k]
    ]
    for i, (key_a, a) in enumerate(places):
        for key_b, b in places[i + 1 :]:
            if key_a.rsplit(".", 1)[0] == key_b.rsplit(".", 1)[0]:
                continue  # a tier's own path and mount point are checked with the tier
            if a == b or a in b.parents or b in a.parents:
                how = "is the same directory as" if a == b else ("contains" if a in b.parents else "lies inside")
                raise ConfigError(
                    f"config key '{key_a}': {a} {how} {b} (config key '{key_b}'); every tier needs its own "
                    "directory, neither inside the other"
                )


def _tier(name: str, value: str | dict, base_dir: Path, models: dict) -> dict:
    """A storage entry in its full form: kind, path (absolute), cache policy, device model and mount point."""
    t = {"path": value} if isinstance(value, str) else dict(value)
    key = f"storage.{name}"
    t["path"] = str(_resolve(t["path"], base_dir))
    if "kind" not in t:
        t["kind"] = "ram" if _on_ram(t["path"]) else "path"
    if t["kind"] == "emulated":
        from .devices import EmulatedTierError, resolve_model

        try:
            t["model"] = resolve_model(t.get("model") or "hdd-7200", models).to_dict()
        except EmulatedTierError as e:
            raise ConfigError(f"config key '{key}.model': {e}") from e
        t["mount"] = str(_resolve(t.get("mount") or f"resources/mnt/{name}", base_dir))
        if Path(t["mount"]) == Path(t["path"]) or Path(t["path"]) in Path(t["mount"]).parents:
            raise ConfigError(
                f"config key '{key}.mount': the mount point must lie outside the backing path {t['path']}"
            )
    else:
        for k in ("model", "mount"):
            if t.get(k) is not None:
                raise ConfigError(f"config key '{key}.{k}': only an emulated tier (kind: emulated) has a {k}")
        t["model"] = t["mount"] = None
    if t["kind"] == "ram" and t.get("cache") == "cold":
        raise ConfigError(f"config key '{key}.cache': a RAM tier cannot be cold (its files live in the page cache)")
    t.setdefault("cache", "warm" if t["kind"] == "ram" else "cold")
    return {k: t[k] for k in ("kind", "path", "cache", "model", "mount")}


def _on_ram(path: str) -> bool:
    """True for /dev/shm and any path on a tmpfs/ramfs mount (longest matching mount point wins)."""
    real = os.path.realpath(path)
    if real == "/dev/shm" or real.startswith("/dev/shm/"):
        return True
    return filesystem_of(real)["fstype"] in RAM_FILESYSTEMS


def _resolve(p: str, base_dir: Path) -> Path:
    path = Path(os.path.expanduser(os.path.expandvars(p)))
    return path if path.is_absolute() else (base_dir / path)


def load_config(path: str | Path, base_dir: Path | None = None, check_paths: bool = False) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
        raise ConfigError(f"config file {path}{where}: not valid YAML: {what}") from e
    if raw is None:  # Snakemake refuses an empty --configfile too ("keys at top level")
        raise ConfigError(
            f"config file {path} is empty: give the keys to set (config/README.md), or leave out "
            "--configfile for the embedded default config/quickstart.yaml"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping of keys to values")
    return validate_config(raw, base_dir, check_paths=check_paths)


def dataset_name(cfg: dict) -> str:
    ds = cfg["dataset"]
    if ds["source"] == "path":
        path = Path(ds["path"])
        # ImageNet-style sources end in train/: keep the parent's name too ("imagenet-train")
        name = "-".join(p for p in (path.parent.name, path.name) if p)
        return _safe_name(name) or "dataset"
    key = {k: ds[k] for k in ("images", "classes", "seed", "quality")}
    return f"generated-{ds['images']}x{ds['classes']}-{stable_hash(key)[:8]}"


def _safe_name(text: str) -> str:
    """`text` as a folder name of the schema's dataset.name pattern: accents dropped, anything else but letters,
    digits, '.', '_' and '-' replaced by '_' (a source path may hold spaces, quotes or shell syntax)."""
    import unicodedata

    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_text).lstrip("._-")


def dataset_source_dir(cfg: dict) -> Path:
    """The ImageFolder root (class folders) the staging step reads."""
    ds = cfg["dataset"]
    if ds["source"] == "path":
        return Path(ds["path"])
    return Path("resources/datasets") / ds["name"] / "train"
