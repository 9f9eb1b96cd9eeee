"""Configuration: schema validation with defaults, semantic checks, and the grid of cells."""

from __future__ import annotations

import copy
import itertools
import os
import re
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from .provenance import filesystem_of
from .registry import LOADERS
from .util import stable_hash

PRECISIONS = ("fp32", "amp")
PARALLEL = ("dp", "ddp")
CELL_ID_RE = re.compile(
    r"^(?P<loader>[a-z0-9-]+)_(?P<tier>[a-z][a-z0-9-]*)_g(?P<gpus>[1-9]\d*)_b(?P<batch_size>[1-9]\d*)"
    r"_(?P<precision>fp32|amp)_(?P<parallel>dp|ddp)_r(?P<repeat>\d+)$"
)
# Snakemake wildcard constraint for a cell id: the same grammar, unanchored, without named groups.
CELL_ID_PATTERN = re.sub(r"\(\?P<\w+>", "(?:", CELL_ID_RE.pattern.strip("^$"))


class ConfigError(ValueError):
    """A configuration problem; the message names the offending key."""


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


def validate_config(raw: dict | None, base_dir: Path | None = None, check_paths: bool = False) -> dict:
    """Validate against the schema, fill defaults, check cross-key rules; return a new dict.

    check_paths: also check the dataset and tier paths on this machine (when the workflow loads; see _check_paths)."""
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

    unknown = [name for name in cfg["loaders"] if name not in LOADERS]
    if unknown:
        raise ConfigError(
            f"config key 'loaders': unknown loader {', '.join(map(repr, unknown))}; known: {', '.join(LOADERS)}"
        )
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
        raise ConfigError(f"config key 'window': give one of 'steps', 'seconds' (fixed) or 'max_seconds' (adaptive), "
                          f"not {' and '.join(given)}")  # fmt: skip
    if given and given[0] != "max_seconds":
        win["max_seconds"] = None  # a fixed window: no adaptive stop
    if win["max_seconds"] is not None and win["min_seconds"] > win["max_seconds"]:
        raise ConfigError(f"config key 'window.min_seconds': {win['min_seconds']} exceeds window.max_seconds "
                          f"{win['max_seconds']}")  # fmt: skip
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
        raise ConfigError(f"config key 'timeline_cells[{i}]': {c!r} is not a cell id (see `loaderbench cells --config ...`)")
    _resolve_parts(raw or {}, cfg, base_dir)
    if check_paths:
        _check_paths(cfg, base_dir)
    return cfg


# Keys a part may set: the grid's axes and the settings that reach a cell's spec (window, workers, ...).
AXES = ("loaders", "tiers", "gpus", "batch_sizes", "precisions", "parallel", "repeats")
STUDY_KEYS = ("parts", "budget_minutes", "trim")


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _resolve_parts(raw: dict, cfg: dict, base_dir: Path) -> None:
    """cfg["parts"]: the study's sub-grids, each with its axes and the settings of its cells' specs. A config without
    `parts` is one part, `grid`. A part takes what it does not set from the top level; the top-level `tiers` become
    the parts' tiers (those staged and probed) and an auto cell_timeout_s the longest the parts need."""
    given = raw.get("parts")
    if given and all("settings" in p for p in given):  # already resolved: a validated config validated again
        return
    if not given:
        cfg["parts"] = [_part("grid", cfg, "")]
        return
    settable = set(AXES) | {key.split(".")[0] for key in CONFIG_KEYS.values()} | {"name", "note"}
    base = {k: v for k, v in raw.items() if k not in STUDY_KEYS}
    parts, owner = [], {}
    for i, p in enumerate(given):
        where = f"config key 'parts[{i}]' ({p['name']})"
        if p["name"] in (q["name"] for q in parts):
            raise ConfigError(f"{where}: the name is used by an earlier part")
        bad = sorted(set(p) - settable)
        if bad:
            raise ConfigError(f"{where}: {', '.join(map(repr, bad))} cannot differ between parts; a part sets "
                              f"{', '.join(sorted(settable - {'name', 'note'}))}")  # fmt: skip
        try:
            pc = validate_config(_merge(base, {k: v for k, v in p.items() if k not in ("name", "note")}), base_dir)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        part = _part(p["name"], pc, p.get("note", ""))
        part["cell_timeout_s"] = pc["cell_timeout_s"]
        for cid in _part_cells(part):
            other = owner.setdefault(cid, part)
            loader = parse_cell_id(cid)["loader"]
            mine, theirs = loader_settings(part["settings"], loader), loader_settings(other["settings"], loader)
            if other is not part and mine != theirs:
                differ = sorted(k for k in mine if mine[k] != theirs[k])
                raise ConfigError(f"{where}: cell {cid} is also in part {other['name']!r} with other settings "
                                  f"({', '.join(differ)}); a cell has one spec")  # fmt: skip
        parts.append(part)
    cfg["parts"] = parts
    cfg["tiers"] = list(dict.fromkeys(t for part in parts for t in part["tiers"]))
    if raw.get("cell_timeout_s", "auto") == "auto":
        cfg["cell_timeout_s"] = max(part["cell_timeout_s"] for part in parts)


def _part(name: str, cfg: dict, note: str) -> dict:
    return {"name": name, "note": note, **{k: cfg[k] for k in AXES},
            "settings": {f: _config_value(cfg, key) for f, key in CONFIG_KEYS.items()}}  # fmt: skip


def auto_timeout(window: dict, compile_: bool) -> float:
    """A cell's time limit from its window: start-up, build and warm-up allowance plus the longest window, x4."""
    longest = window["seconds"] or window["max_seconds"]
    return (300.0 + 4 * longest if longest else 900.0) + (600.0 if compile_ else 0.0)


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
            raise ConfigError(f"config key 'dataset.path': {path} does not exist; point it at an ImageFolder root "
                              "(<root>/<class>/<image>, e.g. ImageNet's train/)")  # fmt: skip
        if not path.is_dir():
            raise ConfigError(f"config key 'dataset.path': {path} is not a directory; point it at an ImageFolder root")
    project = Path(os.path.realpath(project_dir))
    for name, t in cfg["storage"].items():
        if name not in cfg["tiers"]:
            continue
        path = Path(t["path"])
        if path.exists() and not path.is_dir():
            raise ConfigError(f"config key 'storage.{name}': {path} is a file, not a directory; point the tier at "
                              "a directory (staging writes into <dir>/loaderbench/)")  # fmt: skip
        if not path.exists() and project not in Path(os.path.realpath(path)).parents:
            raise ConfigError(f"config key 'storage.{name}': {path} does not exist; mount the {name} device there, "
                              "create the directory, or point the key at an existing one (only directories inside "
                              f"the project {project} are created by staging)")  # fmt: skip
        if t["mount"] and Path(t["mount"]).exists() and not Path(t["mount"]).is_dir():
            raise ConfigError(f"config key 'storage.{name}.mount': {t['mount']} is a file, not a directory; "
                              "pick another mount point")  # fmt: skip


RAM_FILESYSTEMS = ("tmpfs", "ramfs")


def _check_distinct_tiers(storage: dict) -> None:
    """Two tiers on the same or nested paths (or mount points) would stage into each other's files."""
    places = [(f"storage.{name}.{k}", Path(os.path.realpath(t[k]))) for name, t in storage.items()
              for k in ("path", "mount") if t[k]]  # fmt: skip
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
            raise ConfigError(f"config key '{key}.mount': the mount point must lie outside the backing path {t['path']}")
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


def tier_read_path(tier: dict) -> str:
    """Where cells read a tier: the FUSE mount for an emulated tier, else the staging path itself."""
    return tier["mount"] if tier["kind"] == "emulated" else tier["path"]


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
        raise ConfigError(f"config file {path} is empty: give the keys to set (config/README.md), or leave out "
                          "--configfile for the embedded default config/quickstart.yaml")  # fmt: skip
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


def staged_root(tier_path: str | Path, dataset: str) -> Path:
    """ImageFolder root of the staged copy: staging owns only `<tier>/loaderbench/`."""
    return Path(tier_path) / "loaderbench" / dataset / "train"


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
    compile: bool = _from_config("compile")
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
    torchvision_transport: str = _from_config("torchvision.transport", since_records=True, loaders=("torchvision",),
                                              default="float32")  # fmt: skip
    # steps profiled after the window (torch.profiler; stepprofile): a record's metrics.profile; 0: none
    profile_steps: int = _from_config("profile_steps", since_records=True, default=0)
    # SGD's fused implementation: under amp, GradScaler's overflow check stays on the device (no host sync a step)
    optimizer_fused: bool = _from_config("optimizer.fused", since_records=True, default=False)

    def cold_step_on(self, kind: str) -> bool:
        """`cold_step`: true, false, or auto - on a GPU (`kind` "cuda": its first step pays lazy kernel loading and
        library handles), not on the CPU (nothing to hide there: the step would only add time)."""
        return self.cold_step is True or (self.cold_step == "auto" and kind == "cuda")

    @property
    def data_root(self) -> Path:
        return staged_root(self.read_path or self.tier_path, self.dataset)

    @property
    def cell_id(self) -> str:
        return cell_id(self.loader, self.tier, self.gpus, self.batch_size, self.precision, self.parallel, self.repeat)

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
CONFIG_KEYS = {f.name: f.metadata["config_key"] for f in fields(CellSpec) if "config_key" in f.metadata}
# Settings of some loaders only (`_from_config(loaders=...)`): field -> (its loaders, its default)
_LOADER_SCOPED = {f.name: (f.metadata["loaders"], f.default) for f in fields(CellSpec) if f.metadata.get("loaders")}


def loader_settings(settings: dict, loader: str) -> dict:
    """A part's settings as a cell of `loader` takes them: another loader's setting at its default."""
    return {k: (v if k not in _LOADER_SCOPED or loader in _LOADER_SCOPED[k][0] else _LOADER_SCOPED[k][1])
            for k, v in settings.items()}  # fmt: skip


def cell_id(loader: str, tier: str, gpus: int, batch_size: int, precision: str, parallel: str, repeat: int) -> str:
    return f"{loader}_{tier}_g{gpus}_b{batch_size}_{precision}_{parallel}_r{repeat}"


def parse_cell_id(cid: str) -> dict:
    m = CELL_ID_RE.match(cid)
    if not m:
        raise ConfigError(f"'{cid}' is not a cell id (expected loader_tier_gN_bN_fp32|amp_dp|ddp_rN)")
    d = m.groupdict()
    return {**d, "gpus": int(d["gpus"]), "batch_size": int(d["batch_size"]), "repeat": int(d["repeat"])}


# Loaders that read no file: measured once per (gpus, batch, precision), on the grid's first tier.
TIERLESS = ("synthetic",)


def _on_tier(part: dict, loader: str, tier: str) -> bool:
    """A tierless loader is measured on its part's first tier only."""
    return loader not in TIERLESS or tier == part["tiers"][0]


def _part_cells(part: dict) -> list[str]:
    """A part's cells in a stable order: repeats outermost, then the parallel mode and the GPUs, so that the dp cells
    follow one another and a kept process (host.reuse_processes) serves all but the first of them (a ddp cell in
    between would end it), those of one GPU count, and so of the same shapes, together."""
    return [
        cell_id(lo, t, g, b, p, par, r)
        for r, par, g, lo, t, b, p in itertools.product(
            range(part["repeats"]), part["parallel"], part["gpus"], part["loaders"], part["tiers"],
            part["batch_sizes"], part["precisions"],
        )
        if _on_tier(part, lo, t)
    ]


def cell_part(cfg: dict, cid: str) -> dict | None:
    """The part that owns cell `cid` - the first that has it, as in `cell_parts` - without listing the grid (a cell
    job asks for its own spec); None when no part has it."""
    d = parse_cell_id(cid)
    for part in cfg["parts"]:
        if (d["loader"] in part["loaders"] and d["tier"] in part["tiers"] and d["gpus"] in part["gpus"]
                and d["batch_size"] in part["batch_sizes"] and d["precision"] in part["precisions"]
                and d["parallel"] in part["parallel"] and d["repeat"] < part["repeats"]
                and _on_tier(part, d["loader"], d["tier"])):  # fmt: skip
            return part
    return None


def cell_parts(cfg: dict) -> dict[str, dict]:
    """Every cell of the grid -> the first part that has it, in a stable order: repeats outermost (then the parts in
    their order), so that the repeats of one configuration are measured apart (interleaved with the other
    configurations), not back to back - drift then shows as spread."""
    out: dict[str, dict] = {}
    for r in range(max(part["repeats"] for part in cfg["parts"])):
        for part in cfg["parts"]:
            for cid in _part_cells(part):
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
    settings = part["settings"] if part else {name: _config_value(cfg, key) for name, key in CONFIG_KEYS.items()}
    return CellSpec(**d, **loader_settings(settings, d["loader"]), tier_path=tier["path"],
                    dataset=cfg["dataset"]["name"], seed=cfg["seed"] + d["repeat"], tier_kind=tier["kind"], cache=tier["cache"],
                    read_path=tier_read_path(tier), device_model=tier["model"])  # fmt: skip


def _config_value(cfg: dict, key: str):
    """The value of dotted config key `key` (`window.steps`: cfg["window"]["steps"])."""
    for part in key.split("."):
        cfg = cfg[part]
    return cfg
