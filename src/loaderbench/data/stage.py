"""Stage the checked dataset onto one storage tier and write that tier's manifest.

Staging writes only inside `<tier>/loaderbench/`, a folder it creates and marks as its own, and there only into the
project's folder (`layout.staged_root`: two projects staging onto one tier keep apart); it deletes only files its own
previous manifest lists, and copies only files whose checksum changed.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from loaderbench.core.layout import staged_root
from loaderbench.core.provenance import filesystem_of
from loaderbench.core.util import atomic_write_json, progress, sha256_file, stable_hash

from .manifest import class_names, foreign_files, printable, safe_path
from .shards import remove_shards, shard_folder, stage_shards

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


def stage(
    check_json: Path,
    tier: str,
    tier_path: Path,
    dataset: str,
    out: Path,
    project_dir: Path = Path("."),
    verify: bool = False,
    shards: dict | None = None,
) -> dict:
    """Copy what changed onto the tier; verify: also checksum every kept file against the manifest and restage
    those that differ (a file corrupted in place keeps its size, so size alone never notices). shards: {size_mb,
    min_shards, seed, files} to write the dataset as WebDataset shards too (`data.shards`; files false: instead of
    the file tree, whose staged files are removed), None to have none. project_dir: the run's folder, whose own
    folder on the tier the copy goes into."""
    check = json.loads(Path(check_json).read_text())
    source = Path(check["source"])
    tier_path = check_tier_path(tier, tier_path, source, project_dir)
    root = staged_root(tier_path, dataset, project_dir)
    tier_manifest = root.parent / "manifest.json"
    previous, previous_shards = {}, None
    if tier_manifest.is_file():
        old = json.loads(tier_manifest.read_text())
        previous, previous_shards = {f["path"]: f for f in old["files"]}, old.get("shards")
    # a name that is not valid UTF-8 is staged under a safe one (the manifest keeps the original as source_name)
    wanted = [
        {**f, "source": f["path"], "path": safe_path(f["path"])} for f in check["files"] if f["status"] in ("ok", "odd")
    ]
    with_files = not shards or shards.get("files", True)  # the file tree, or only the shards made from the source
    to_stage = wanted if with_files else []
    todo, kept, repaired = _changed(tier, root, to_stage, previous, verify)
    _check_free_space(tier, tier_path, root, todo)
    for f in progress(todo, total=len(todo), label=f"stage {tier}"):
        _copy(tier, source / f["source"], root / f["path"])
    removed = _remove_unwanted(root, previous, {f["path"] for f in wanted} if with_files else set())
    done = {"copied": len(todo), "kept": kept, "removed": removed, "repaired": len(repaired)}
    manifest = _manifest(tier, tier_path, root, dataset, source, check, wanted, with_files, done)
    folder = shard_folder(tier_path, dataset, project_dir)
    if shards:
        free = shutil.disk_usage(tier_path).free
        if free < manifest["counts"]["bytes"] - (previous_shards or {}).get("bytes", 0):
            raise StagingError(
                f"config key 'storage.{tier}': {tier_path} has {free / 1e6:.1f} MB free but the shards "
                f"need about {manifest['counts']['bytes'] / 1e6:.1f} MB; free space there or set "
                "'shards.stage: false'"
            )
        sources = None if with_files else {f["path"]: source / f["source"] for f in wanted}
        manifest["shards"] = stage_shards(
            root,
            folder,
            manifest["files"],
            shards["size_mb"],
            shards["min_shards"],
            shards["seed"],
            previous_shards,
            sources,
        )
    else:
        remove_shards(folder, previous_shards)
    if verify:
        manifest["verified"] = {"files": len(wanted), "repaired": repaired[:100]}
    atomic_write_json(tier_manifest, manifest)
    atomic_write_json(out, manifest)
    return manifest


def _changed(
    tier: str, root: Path, to_stage: list[dict], previous: dict, verify: bool
) -> tuple[list[dict], int, list[str]]:
    """(files to copy, how many are kept as staged, paths restaged because their checksum differed under verify)."""
    todo, kept, repaired = [], 0, []
    for f in progress(to_stage, total=len(to_stage), label=f"verify {tier}") if verify else to_stage:
        dst = root / f["path"]
        old = previous.get(f["path"])
        if old and old["sha256"] == f["sha256"] and dst.is_file() and dst.stat().st_size == f["size"]:
            if not verify or sha256_file(dst) == f["sha256"]:
                kept += 1
                continue
            repaired.append(f["path"])
        todo.append(f)
    return todo, kept, repaired


def _remove_unwanted(root: Path, previous: dict, wanted_paths: set[str]) -> int:
    """Remove the files the previous manifest listed that are no longer wanted (and folders left empty); how many."""
    removed = 0
    for rel in previous:
        if rel not in wanted_paths and (root / rel).is_file():
            (root / rel).unlink()
            removed += 1
            _prune_empty(root / rel, stop=root)
    return removed


def _manifest(
    tier: str,
    tier_path: Path,
    root: Path,
    dataset: str,
    source: Path,
    check: dict,
    wanted: list[dict],
    with_files: bool,
    done: dict,
) -> dict:
    """The tier's manifest: where the dataset was staged, its files and counts (`done`: what staging did)."""
    files = [
        {
            "path": f["path"],
            "size": f["size"],
            "sha256": f["sha256"],
            **({"source_name": printable(f["source"])} if f["source"] != f["path"] else {}),
        }
        for f in wanted
    ]
    # files in the tier that staging did not put there (kept, by design): every reader ignores them
    foreign = foreign_files(root, [f["path"] for f in files])
    return {
        "tier": tier,
        "tier_path": str(tier_path),
        "root": str(root),
        "dataset": dataset,
        "filesystem": filesystem_of(tier_path),
        "source": str(source),
        "counts": {
            "files": len(files),
            "bytes": sum(f["size"] for f in files),
            **done,
            "renamed": sum(f["source"] != f["path"] for f in wanted),
            "odd": sum(f["status"] == "odd" for f in wanted),
            "quarantined": check["counts"]["bad"],
            "foreign": len(foreign),
        },
        "classes": class_names(f["path"] for f in files),
        "foreign_files": foreign[:20],
        "sha256": stable_hash([(f["path"], f["sha256"]) for f in files]),
        "files": files,
        "files_staged": with_files,  # false: the files are listed (labels, sizes) but only the shards are on the tier
    }


def _check_free_space(tier: str, tier_path: Path, root: Path, todo: list[dict]) -> None:
    """Refuse before copying anything when the files to copy do not fit in the tier's free space."""
    needed = 0
    for f in todo:
        dst = root / f["path"]
        needed += f["size"] - (dst.stat().st_size if dst.is_file() else 0)  # a replaced file frees its old size
    free = shutil.disk_usage(tier_path).free
    if needed > free:
        raise StagingError(
            f"config key 'storage.{tier}': {tier_path} has {free / 1e6:.1f} MB free but staging needs "
            f"{needed / 1e6:.1f} MB more ({len(todo)} files); free space there or point the tier at a larger device"
        )


def _copy(tier: str, src: Path, dst: Path) -> None:
    """Copy through a temporary file renamed into place; on any failure the temporary file is removed."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.staging")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise StagingError(
                f"config key 'storage.{tier}': copying {src} to {dst} failed ({e.strerror or e}); "
                "the partial file was removed: fix the cause (free space, permissions) and stage again"
            ) from e
        raise


def _prune_empty(path: Path, stop: Path) -> None:
    d = path.parent
    while d != stop and stop in d.parents:
        try:
            d.rmdir()
        except OSError:
            return
        d = d.parent


def unstage(tier_path: Path, project_dir: Path = Path(".")) -> tuple[Path, int] | None:
    """Remove this project's staged copies from a tier (its own folder, `<tier>/loaderbench/<project_key>`: every
    dataset and shard set staging put there, no other project's); the folder and the bytes it held, None where it
    had none."""
    folder = staged_root(tier_path, "-", project_dir).parents[1]
    if not folder.is_dir():
        return None
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
    shutil.rmtree(folder)
    return folder, size
