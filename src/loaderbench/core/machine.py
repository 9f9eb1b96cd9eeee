"""What a config names on this machine: its storage tiers (paths, kinds, mount points) and the dataset's images."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from .cells import ConfigError
from .provenance import filesystem_of
from .registry import tierless


def check_batches(cfg: dict, raw: dict, count_files: bool) -> None:
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


def check_paths(cfg: dict, project_dir: Path) -> None:
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


def check_distinct_tiers(storage: dict) -> None:
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


def resolve_tier(name: str, value: str | dict, base_dir: Path, models: dict) -> dict:
    """A storage entry in its full form: kind, path (absolute), cache policy, device model and mount point."""
    t = {"path": value} if isinstance(value, str) else dict(value)
    key = f"storage.{name}"
    t["path"] = str(resolve_path(t["path"], base_dir))
    if "kind" not in t:
        t["kind"] = "ram" if _on_ram(t["path"]) else "path"
    if t["kind"] == "emulated":
        from .devices import EmulatedTierError, resolve_model

        try:
            t["model"] = resolve_model(t.get("model") or "hdd-7200", models).to_dict()
        except EmulatedTierError as e:
            raise ConfigError(f"config key '{key}.model': {e}") from e
        t["mount"] = str(resolve_path(t.get("mount") or f"resources/mnt/{name}", base_dir))
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


def resolve_path(p: str, base_dir: Path) -> Path:
    """A config's path `p` with ~ and $VARS expanded, taken from `base_dir` unless absolute."""
    path = Path(os.path.expanduser(os.path.expandvars(p)))
    return path if path.is_absolute() else (base_dir / path)


def check_memory(cfg: dict, available: int | None = None) -> None:
    """Refuse a part whose batches in flight cannot fit this host's available memory: batch x 3 x crop^2 float32
    images, each worker `prefetch_factor` batches ahead plus two in the loop - what a DataLoader cell holds at once
    (a host without a memory limit would otherwise be OOM-killed mid-cell). `available`: bytes (default: MemAvailable)."""
    available = _mem_available() if available is None else available
    if available is None:
        return
    cpus = len(os.sched_getaffinity(0))
    for part in cfg["parts"]:
        s = part["settings"]
        workers = max(1, cpus - 1) if s["workers"] == "auto" else int(s["workers"])
        batch, crop = max(part["batch_sizes"]), s["crop_size"]
        need = batch * 3 * crop * crop * 4 * (workers * s["prefetch_factor"] + 2)
        if need > available:
            raise ConfigError(
                f"config key 'crop_size': {crop} at batch {batch} with {workers} workers x {s['prefetch_factor']} "
                f"batches ahead (+2 in the loop) holds ~{need / 1e9:.1f} GB of float32 images, more than the "
                f"{available / 1e9:.1f} GB this host has available (part {part['name']!r}); lower crop_size, "
                "batch_sizes, workers or prefetch_factor"
            )


def _mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
