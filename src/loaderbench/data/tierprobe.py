"""The measured read rate of a storage tier: whole-file reads by 1..N concurrent readers, cold by default.

`probe()` reads the same deterministic subset of files once per reader count (evicting the page cache first
when cold) and reports files/s and MB/s; with a `DeviceModel` it adds what the model predicts and the ratio.
`probe_manifest()` does the same for a staging manifest (its "root" and "files"). `sequential()` reads one long
stream (a file of random bytes written for it; its shards too where it has them): the rate random image reads are
held against.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from loaderbench.core.devices import DeviceModel, EmulatedTierError, predict
from loaderbench.core.layout import read_root
from loaderbench.core.util import writing

from . import cache

CHUNK = 1 << 20
SEQUENTIAL_FILE = "sequential.bin"  # beside the staged tree: <tier>/loaderbench/<dataset>/sequential.bin


class ProbeError(ValueError):
    """A probe cannot run; the message names the path or manifest key and the fix."""


def _relative_paths(files: Iterable[str | os.PathLike | dict]) -> list[str]:
    """Relative paths from plain paths or manifest entries ({"path", "size", ...})."""
    out = []
    for i, f in enumerate(files):
        if isinstance(f, dict):
            if "path" not in f:
                raise ProbeError(f"files[{i}] has no 'path' key (got keys {sorted(f)})")
            f = f["path"]
        out.append(os.fspath(f))
    return out


def select(files: Sequence[str], max_files: int | None) -> list[str]:
    """At most `max_files` files, evenly spread over the list, in list order; the same for the same input."""
    if max_files is None or len(files) <= max_files:
        return list(files)
    if max_files < 1:
        raise ProbeError(f"max_files must be >= 1 or None, got {max_files}")
    return [files[i * len(files) // max_files] for i in range(max_files)]


def _read_whole(path: str, buf: mmap.mmap) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while got := f.readinto(buf):
            n += got
    return n


def read_files(paths: Sequence[str], readers: int, max_seconds: float) -> dict:
    """Read whole files with `readers` threads, issuing no new file after `max_seconds` (at least one file)."""
    lock = threading.Lock()
    state = {"next": 0, "files": 0, "bytes": 0}
    errors: list[BaseException] = []
    start = time.monotonic()
    deadline = start + max_seconds

    def worker() -> None:
        buf = mmap.mmap(-1, CHUNK)  # page-aligned: the kernel does not split a direct-I/O read at a page boundary
        while True:
            with lock:
                i = state["next"]
                if i >= len(paths) or (i > 0 and time.monotonic() >= deadline) or errors:
                    return
                state["next"] = i + 1
            try:
                n = _read_whole(paths[i], buf)
            except OSError as e:
                errors.append(e)
                return
            with lock:
                state["files"] += 1
                state["bytes"] += n

    threads = [threading.Thread(target=worker, name=f"probe-reader-{k}") for k in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    if errors:
        raise ProbeError(f"reading {getattr(errors[0], 'filename', '?')} failed: {errors[0]}")
    files, nbytes = state["files"], state["bytes"]
    return {
        "readers": readers,
        "files": files,
        "bytes": nbytes,
        "seconds": round(seconds, 6),
        "files_per_s": files / seconds if seconds > 0 else 0.0,
        "mb_per_s": nbytes / 1e6 / seconds if seconds > 0 else 0.0,
        "mean_file_bytes": nbytes / files if files else 0.0,
        "stopped_by_time": files < len(paths),
    }


def probe(
    root: str | os.PathLike,
    files: Iterable[str | os.PathLike | dict],
    readers: Iterable[int] = (1, 8),
    max_files: int | None = None,
    max_seconds: float = 10.0,
    cold: bool = True,
    model: DeviceModel | None = None,
) -> dict:
    """Measured whole-file read rate of `files` (relative to `root`) for each reader count."""
    root = Path(root)
    if not root.is_dir():
        raise ProbeError(f"probe root {root} is not a directory; stage the dataset onto the tier first")
    readers = [int(r) for r in readers]
    if not readers or min(readers) < 1:
        raise ProbeError(f"readers must be a non-empty list of counts >= 1, got {readers}")
    if max_seconds <= 0:
        raise ProbeError(f"max_seconds must be > 0, got {max_seconds}")
    rel = _relative_paths(files)
    if not rel:
        raise ProbeError(f"no files to probe under {root}")
    chosen = [str(root / p) for p in select(rel, max_files)]
    runs = []
    for r in readers:
        eviction = cache.evict(chosen) if cold else None
        run = read_files(chosen, r, max_seconds)
        run["eviction"] = eviction
        if model is not None and run["files"]:
            expected = predict(model, run["mean_file_bytes"], r)
            run["predicted"] = expected
            run["ratio"] = run["files_per_s"] / expected["files_per_s"]
        runs.append(run)
    return {
        "root": str(root),
        "files_available": len(rel),
        "files_selected": len(chosen),
        "max_seconds": max_seconds,
        "cold": cold,
        "model": model.to_dict() if model is not None else None,
        "runs": runs,
    }


def probe_manifest(
    manifest: dict,
    readers: Iterable[int] = (1, 8),
    max_files: int | None = None,
    max_seconds: float = 10.0,
    model: DeviceModel | None = None,
    cold: bool = True,
) -> dict:
    """`probe()` over a staging manifest ({"tier", "root", "files": [{"path", "size", "sha256"}]})."""
    tier = manifest.get("tier", "?") if isinstance(manifest, dict) else "?"
    for key in ("root", "files"):
        if not isinstance(manifest, dict) or key not in manifest:
            raise ProbeError(f"staging manifest of tier '{tier}' has no '{key}' key; re-run the stage step")
    result = probe(
        manifest["root"],
        manifest["files"],
        readers=readers,
        max_files=max_files,
        max_seconds=max_seconds,
        cold=cold,
        model=model,
    )
    return {"tier": manifest.get("tier"), **result}


def sequential_file(manifest: dict, read_path: str | Path, mb: float) -> Path:
    """Where the tier is read as one stream: a file of `mb` MB of random bytes (incompressible) beside the staged
    tree, written into the tier once and kept; returned as read (an emulated tier's mount)."""
    target, size = read_root(manifest).parent / SEQUENTIAL_FILE, int(mb * 1e6)
    if not (target.is_file() and target.stat().st_size == size):
        tmp = target.with_name(f".{SEQUENTIAL_FILE}.tmp")
        with writing(target):
            try:
                with open(tmp, "wb") as f:
                    f.writelines(os.urandom(min(CHUNK, size - start)) for start in range(0, size, CHUNK))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    return read_root(manifest, read_path).parent / SEQUENTIAL_FILE


def shard_paths(manifest: dict, read_path: str | Path, mb: float) -> list[Path]:
    """The tier's first shards, `mb` MB of them at least (all when fewer), as read; [] without shards."""
    shards = manifest.get("shards")
    if not shards:
        return []
    folder, paths, total = read_root(manifest, read_path).parent / shards["folder"], [], 0
    for f in shards["files"]:
        paths.append(folder / f["path"])
        total += f["size"]
        if total >= mb * 1e6:
            break
    return paths


def streams(manifest: dict, read_path: str | Path, mb: float, cold: bool) -> dict:
    """The tier read as streams by one reader: "sequential" (one long file: the device's streaming rate, what random
    image reads are held against) and, where it has shards, "shards" (its shards front to back, one after another)."""
    out = {"sequential": sequential("file", [sequential_file(manifest, read_path, mb)], cold)}
    if paths := shard_paths(manifest, read_path, mb):
        out["shards"] = sequential("shards", paths, cold)
    return out


def sequential(source: str, paths: Sequence[Path], cold: bool = True) -> dict:
    """One reader reading `paths` front to back in 1 MiB reads: the tier's streaming rate."""
    eviction = cache.evict([str(p) for p in paths]) if cold else None
    run = read_files([str(p) for p in paths], readers=1, max_seconds=float("inf"))
    return {
        "source": source,
        "files": run["files"],
        "bytes": run["bytes"],
        "seconds": run["seconds"],
        "mb_per_s": run["mb_per_s"],
        "eviction": eviction,
    }


def probe_tier(
    manifest: dict,
    tier: dict,
    readers: Iterable[int] = (1, 8),
    max_files: int | None = None,
    max_seconds: float = 10.0,
    sequential_mb: float | None = 64,
) -> dict:
    """The probe job: a configured tier (config's full storage entry) read as the cells read it - an emulated
    tier through its FUSE mount (mounted for the probe and always unmounted), cold unless the tier is RAM."""
    from .emulated import mount

    base = {
        "tier": manifest.get("tier"),
        "kind": tier["kind"],
        "cache": tier["cache"],
        "dataset_files": len(manifest["files"]),
        "dataset_bytes": manifest.get("counts", {}).get("bytes"),
    }
    cold = tier["kind"] != "ram"
    files = manifest.get("files_staged", True)  # false: only shards on the tier, no files to read at random
    no_files = {"root": manifest.get("root"), "cold": cold, "runs": [], "note": "only shards staged: no files"}
    if tier["kind"] != "emulated":
        result = probe_manifest(manifest, readers, max_files, max_seconds, cold=cold) if files else no_files
        if sequential_mb:
            result.update(streams(manifest, tier["path"], sequential_mb, cold))
        return {**base, **result}
    model = DeviceModel.from_dict(tier["model"])
    try:
        with mount(tier["path"], tier["mount"], model) as m:
            root = read_root(manifest, tier["mount"])
            result = (
                probe(root, manifest["files"], readers, max_files, max_seconds, cold=True, model=model)
                if files
                else {**no_files, "model": model.to_dict()}
            )
            if sequential_mb:
                result.update(streams(manifest, tier["mount"], sequential_mb, cold=True))
            result["emulated_stats"] = m.stats()
    except EmulatedTierError as e:  # no FUSE here: a result that says why (the tier's cells say it too)
        return {**base, "cold": True, "model": model.to_dict(), "runs": [], "error": str(e)}
    return {**base, **result}


PROBE_COLUMNS = [
    "Tier",
    "Kind",
    "Cold",
    "Readers",
    "Files",
    "Mean file KB",
    "Files/s",
    "MB/s",
    "Sequential MB/s",
    "Shards MB/s",
    "Model",
    "Predicted files/s",
    "Measured/predicted",
    "Eviction",
    "Error",
]


def probe_rows(results: list[dict]) -> list[dict]:
    """One table row per tier and reader count."""
    rows = []
    for res in results:
        seq, shards = res.get("sequential") or {}, res.get("shards") or {}
        if res.get("error"):
            rows.append(
                {
                    "Tier": res["tier"],
                    "Kind": res["kind"],
                    "Cold": res.get("cold"),
                    "Readers": None,
                    "Model": (res.get("model") or {}).get("name"),
                    "Error": res["error"],
                }
            )
        for run in res["runs"]:
            pred = run.get("predicted") or {}
            rows.append(
                {
                    "Tier": res["tier"],
                    "Kind": res["kind"],
                    "Cold": res["cold"],
                    "Readers": run["readers"],
                    "Files": run["files"],
                    "Mean file KB": run["mean_file_bytes"] / 1e3,
                    "Files/s": run["files_per_s"],
                    "MB/s": run["mb_per_s"],
                    "Sequential MB/s": seq.get("mb_per_s"),
                    "Shards MB/s": shards.get("mb_per_s"),
                    "Model": (res.get("model") or {}).get("name"),
                    "Predicted files/s": pred.get("files_per_s"),
                    "Measured/predicted": run.get("ratio"),
                    "Eviction": (run.get("eviction") or {}).get("method"),
                }
            )
    return rows


def tier_rates(results: list[dict]) -> dict[str, dict]:
    """tier -> its sequential MB/s, its random whole-file reads a second (the most any reader count got) and the mean
    image bytes, from probe results: what a cell's read rate is held against."""
    out = {}
    for res in results:
        files, size = res.get("dataset_files"), res.get("dataset_bytes")
        out[res["tier"]] = {
            "sequential_mb_s": (res.get("sequential") or {}).get("mb_per_s"),
            "files_s": max((run["files_per_s"] for run in res.get("runs", [])), default=None),
            "mean_image_bytes": size / files if files and size else None,
        }
    return out
