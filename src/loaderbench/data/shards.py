"""WebDataset tar shards of a staged dataset: written at staging beside the file tree, read by the shard loaders.

A shard holds whole samples in a shuffled order (seeded), each as `<key>.jpg` (the staged file's bytes), `<key>.cls`
(the label as text, WebDataset's convention) and `<key>.label` (the label as a little-endian int32, for DALI's
`readers.webdataset`, which reads components as raw bytes); each shard has a DALI index file beside it. Labels are the
manifest's (ImageFolder order), so every loader labels an image alike. `shards.json` in the shard folder lists them
for the loaders; the tier manifest records the same list under "shards" (staging owns both).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import tarfile
from pathlib import Path

from loaderbench.core.layout import staged_root
from loaderbench.core.util import atomic_write_json, stable_hash

from .manifest import samples

FOLDER = "shards"
INDEX = "shards.json"
FORMAT = 1  # bump when the layout inside a shard changes: staged shards are rewritten
HEADER = 512  # a ustar header; names here are short, so every member has exactly one


def shard_folder(tier_path: str | Path, dataset: str, project_dir: str | Path | None = None) -> Path:
    """Where a tier's shards lie: beside the ImageFolder root (`<tier>/loaderbench/<project>/<dataset>/shards`)."""
    return staged_root(tier_path, dataset, project_dir).parent / FOLDER


def shard_count(total_bytes: int, files: int, size_mb: float, min_shards: int) -> int:
    """Shards of about `size_mb`, at least `min_shards` (so that every reader has one), at most one per file."""
    return max(1, min(files, max(math.ceil(total_bytes / (size_mb * 1e6)), min_shards)))


def _member(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o444, 0, 0
    return info, io.BytesIO(data)


def _write_shard(path: Path, index_path: Path, items: list[tuple[int, str, int]]) -> dict:
    """One tar of `items` (key, image path, label) and its DALI index (v1.2: per sample, per component: extension,
    data offset, size, name), each written under a temporary name and renamed into place."""
    tmp, tmp_index = path.with_name(f".{path.name}.staging"), index_path.with_name(f".{index_path.name}.staging")
    lines = []
    try:
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar:
            for key, image, label in items:
                parts = [
                    ("jpg", Path(image).read_bytes()),
                    ("cls", str(label).encode()),
                    ("label", int(label).to_bytes(4, "little", signed=True)),
                ]
                line = []
                for ext, data in parts:
                    name = f"{key:08d}.{ext}"
                    line += [ext, str(tar.offset + HEADER), str(len(data)), name]
                    tar.addfile(*_member(name, data))
                lines.append(" ".join(line))
        tmp_index.write_text(f"v1.2 {len(items)}\n" + "\n".join(lines) + "\n")
        digest = hashlib.sha256()
        with open(tmp, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        os.replace(tmp_index, index_path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        tmp_index.unlink(missing_ok=True)
        raise
    return {
        "path": path.name,
        "index": index_path.name,
        "size": path.stat().st_size,
        "samples": len(items),
        "sha256": digest.hexdigest(),
    }


def _intact(folder: Path, listed: dict) -> bool:
    return all(
        (folder / f["path"]).is_file()
        and (folder / f["path"]).stat().st_size == f["size"]
        and (folder / f["index"]).is_file()
        for f in listed["files"]
    )


def stage_shards(
    root: Path,
    folder: Path,
    files: list[dict],
    size_mb: float,
    min_shards: int,
    seed: int,
    previous: dict | None = None,
    sources: dict[str, Path] | None = None,
) -> dict:
    """Write the shards of `files` (manifest entries under the staged `root`; read from `sources`, path -> file,
    when the tier holds no copy of them) into `folder`, unless `previous` (the last manifest's "shards") has the same
    content and settings and its files are intact; remove shard files the new set does not list. Returns what the
    manifest records."""
    pairs, classes = samples(root, [f["path"] for f in files])
    if sources is not None:
        pairs = [(str(sources[os.path.relpath(p, root)]), label) for p, label in pairs]
    key = stable_hash([FORMAT, size_mb, min_shards, seed, sorted((f["path"], f["sha256"]) for f in files)])
    if previous and previous.get("key") == key and _intact(folder, previous):
        return {**previous, "kept": True}
    folder.mkdir(parents=True, exist_ok=True)
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    total = sum(f["size"] for f in files)
    n = shard_count(total, len(files), size_mb, min_shards)
    written = []
    for k in range(n):
        part = order[k * len(order) // n : (k + 1) * len(order) // n]
        items = [(i, pairs[i][0], pairs[i][1]) for i in part]
        written.append(_write_shard(folder / f"shard-{k:06d}.tar", folder / f"shard-{k:06d}.idx", items))
    keep = {f["path"] for f in written} | {f["index"] for f in written} | {INDEX}
    for stale in (previous or {}).get("files", []):
        for name in (stale["path"], stale["index"]):
            if name not in keep:
                (folder / name).unlink(missing_ok=True)
    listed = {
        "folder": FOLDER,
        "key": key,
        "format": FORMAT,
        "size_mb": size_mb,
        "min_shards": min_shards,
        "seed": seed,
        "count": n,
        "samples": len(pairs),
        "classes": classes,
        "bytes": sum(f["size"] for f in written),
        "files": written,
    }
    atomic_write_json(folder / INDEX, listed)
    return {**listed, "kept": False}


def remove_shards(folder: Path, previous: dict | None) -> None:
    """Remove the shards a previous manifest listed (a config that no longer stages shards)."""
    for f in (previous or {}).get("files", []):
        (folder / f["path"]).unlink(missing_ok=True)
        (folder / f["index"]).unlink(missing_ok=True)
    (folder / INDEX).unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass


class ShardsMissing(RuntimeError):
    """A shard loader's tier has no shards; the message says how to stage them."""


def read_index(folder: Path) -> dict:
    """The shard list staging wrote beside the shards (read through the tier, as the loader reads its shards)."""
    path = Path(folder) / INDEX
    if not path.is_file():
        raise ShardsMissing(
            f"no shards at {folder} (missing {INDEX}): the tier was staged without them; set "
            "config key 'shards.stage' to true or auto with a shard loader in 'loaders', and stage "
            "again"
        )
    return json.loads(path.read_text())
