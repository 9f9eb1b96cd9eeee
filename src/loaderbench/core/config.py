"""A config's schema and validation: defaults, cross-key rules, the parts of the grid; loading a config file."""

from __future__ import annotations

import copy
import os
import re
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from . import machine
from .cells import (
    CAPTURED,
    CELL_ID_RE,
    CONFIG_KEY_OF,
    STEP_SETTINGS,
    ConfigError,
    config_value,
    configuration,
    loader_settings,
    parse_cell_id,
    part_cells,
    part_models,
)
from .registry import loader_record, loaders_where, tierless, torchvision_input_size
from .resolve import resolve_plugins
from .util import stable_hash
from .whatifgrid import resolve_whatif


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

    check_paths: also check what lies on this machine - the dataset and tier paths (machine.check_paths), the number
    of images of a path source (machine.check_batches) and, unless find_plugins says otherwise, that the plugin loaders'
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
    resolve_plugins(cfg, find=find_plugins)
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
    cfg["storage"] = {k: machine.resolve_tier(k, v, base_dir, cfg["device_models"]) for k, v in cfg["storage"].items()}
    machine.check_distinct_tiers(cfg["storage"])
    if ds["path"]:
        ds["path"] = str(machine.resolve_path(ds["path"], base_dir))
    if ds["name"] is None:
        ds["name"] = dataset_name(cfg)
    bad = [(i, c) for i, c in enumerate(cfg["timeline_cells"]) if not CELL_ID_RE.match(c)]
    if bad:
        i, c = bad[0]
        raise ConfigError(
            f"config key 'timeline_cells[{i}]': {c!r} is not a cell id (see `loaderbench cells --config ...`)"
        )
    _resolve_parts(raw or {}, cfg, base_dir, find_plugins)
    resolve_whatif(cfg)
    _check_input_sizes(cfg, raw or {})
    _check_captured_step(cfg, raw or {})
    _check_ceiling_steps(cfg)
    _resolve_shards(cfg)
    _check_baseline(cfg, raw or {})  # last: what the grid itself gets wrong is said first
    if check_paths:
        machine.check_paths(cfg, base_dir)
        machine.check_memory(cfg)
    machine.check_batches(cfg, raw or {}, count_files=check_paths)
    return cfg


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
STUDY_KEYS = ("parts", "budget_minutes", "trim", "whatif")


BASELINE_AXES = {"loader": "loaders", "tier": "tiers", "gpus": "gpus", "batch_size": "batch_sizes"}
BASELINE_AXES |= {"precision": "precisions", "parallel": "parallel"}


def _check_baseline(cfg: dict, raw: dict) -> None:
    """Each baseline key the config sets names a value of the grid (some part's): a baseline outside it leaves every
    Speed without a divisor. A value equal to the key's default is not held to it: a validated config's keys carry
    every default, and validate again as they did."""
    if any("settings" in p for p in raw.get("parts") or []):  # a validated config validated again: it was checked
        return
    defaults = {k: v.get("default") for k, v in load_schema()["properties"]["baseline"]["properties"].items()}
    for key, value in (raw.get("baseline") or {}).items():
        axis = BASELINE_AXES.get(key) if value != defaults.get(key) else None
        grid = list(dict.fromkeys(v for part in cfg["parts"] for v in part[axis])) if axis else []
        if axis and value not in grid:
            raise ConfigError(
                f"config key 'baseline.{key}': {value!r} is not in the grid's {axis} ({', '.join(map(str, grid))}); "
                "Speed divides by the baseline's cell, so it must be measured"
            )


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
    base = {k: v for k, v in raw.items() if k not in (*STUDY_KEYS, "baseline")}  # the study's baseline: checked whole
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
