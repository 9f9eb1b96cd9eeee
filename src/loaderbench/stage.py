"""Stage the checked dataset onto one storage tier and write that tier's manifest.

Staging writes only inside `<tier>/loaderbench/`, a folder it creates and marks as its own; it deletes only
files its own previous manifest lists, and copies only files whose checksum changed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .config import staged_root
from .provenance import filesystem_of
from .staged import class_names, foreign_files
from .util import atomic_write_json, progress, stable_hash

OWNED = "loaderbench"
MARKER = ".loaderbench-owned"


class StagingError(ValueError):
    """A tier cannot be staged onto; the message names the tier, the path and the fix."""


def check_tier_path(tier: str, tier_path: Path, source: Path, project_dir: Path) -> Path:
    """Refuse dangerous or unusable tier paths; create it only when it lies inside the project."""
    tier_path = Path(tier_path).resolve()
    source = Path(source).resolve()
    key = f"storage.{tier}"
    if tier_path == Path("/") or tier_path == Path.home().resolve():
        raise StagingError(f"config key '{key}': refusing to stage into {tier_path} (the root or home directory)")
    if tier_path == source or source in tier_path.parents or tier_path / OWNED in (source, *source.parents):
        raise StagingError(f"config key '{key}': {tier_path} overlaps the dataset source {source}")
    if not tier_path.exists():
        if Path(project_dir).resolve() in tier_path.parents:
            tier_path.mkdir(parents=True)
        else:
            raise StagingError(
                f"config key '{key}': {tier_path} does not exist; mount the {tier} device there "
                "or point the key at an existing directory"
            )
    if not tier_path.is_dir():
        raise StagingError(f"config key '{key}': {tier_path} is not a directory")
    owned = tier_path / OWNED
    if owned.exists() and not (owned / MARKER).exists():
        raise StagingError(
            f"config key '{key}': {owned} exists but was not created by loaderbench; move it away or pick another path"
        )
    try:  # a real write, not os.access: root passes access() on read-only or special filesystems
        owned.mkdir(exist_ok=True)
        (owned / MARKER).touch()
    except OSError as e:
        raise StagingError(f"config key '{key}': {tier_path} is not writable ({e.strerror})") from e
    return tier_path


def stage(check_json: Path, tier: str, tier_path: Path, dataset: str, out: Path, project_dir: Path = Path(".")) -> dict:
    check = json.loads(Path(check_json).read_text())
    source = Path(check["source"])
    tier_path = check_tier_path(tier, tier_path, source, project_dir)
    root = staged_root(tier_path, dataset)
    tier_manifest = root.parent / "manifest.json"
    previous = {}
    if tier_manifest.is_file():
        previous = {f["path"]: f for f in json.loads(tier_manifest.read_text())["files"]}
    wanted = [f for f in check["files"] if f["status"] in ("ok", "odd")]
    copied = kept = 0
    for f in progress(wanted, total=len(wanted), label=f"stage {tier}"):
        dst = root / f["path"]
        old = previous.get(f["path"])
        if old and old["sha256"] == f["sha256"] and dst.is_file() and dst.stat().st_size == f["size"]:
            kept += 1
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.staging")
        shutil.copyfile(source / f["path"], tmp)
        os.replace(tmp, dst)
        copied += 1
    wanted_paths = {f["path"] for f in wanted}
    removed = 0
    for rel in previous:
        if rel not in wanted_paths and (root / rel).is_file():
            (root / rel).unlink()
            removed += 1
            _prune_empty(root / rel, stop=root)
    files = [{"path": f["path"], "size": f["size"], "sha256": f["sha256"]} for f in wanted]
    # files in the tier that staging did not put there (kept, by design): every reader ignores them
    foreign = foreign_files(root, [f["path"] for f in files])
    manifest = {
        "tier": tier,
        "tier_path": str(tier_path),
        "root": str(root),
        "dataset": dataset,
        "filesystem": filesystem_of(tier_path),
        "source": str(source),
        "counts": {
            "files": len(files),
            "bytes": sum(f["size"] for f in files),
            "copied": copied,
            "kept": kept,
            "removed": removed,
            "odd": sum(f["status"] == "odd" for f in wanted),
            "quarantined": check["counts"]["bad"],
            "foreign": len(foreign),
        },
        "classes": class_names(f["path"] for f in files),
        "foreign_files": foreign[:20],
        "sha256": stable_hash([(f["path"], f["sha256"]) for f in files]),
        "files": files,
    }
    atomic_write_json(tier_manifest, manifest)
    atomic_write_json(out, manifest)
    return manifest


def _prune_empty(path: Path, stop: Path) -> None:
    d = path.parent
    while d != stop and stop in d.parents:
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent
