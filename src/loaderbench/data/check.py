"""Check every source image once: decodable by every decoder the loaders use, and what is odd about it.

Odd but decodable files (grayscale, CMYK, content that does not match the extension, other colour modes)
are kept and counted. Undecodable ones (truncated, corrupt, not an image) are quarantined: copied to the
quarantine folder, listed in the report, and never staged. `strict` turns any of them into an error.
Results are cached per (path, size, mtime) so a re-check only reads new or changed files.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from loaderbench.core.util import atomic_write_json, atomic_write_text, progress, sha256_bytes, stable_hash

from .manifest import is_utf8, printable

# Magic numbers of the formats an ImageFolder may hold.
MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
)
EXTENSIONS = {
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".png": "png",
    ".gif": "gif",
    ".bmp": "bmp",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".webp": "webp",
    ".ppm": "ppm",
    ".pgm": "ppm",
}


class DatasetError(ValueError):
    """The dataset source cannot be used; the message names the path and what to do."""


def sniff(data: bytes) -> str | None:
    for magic, kind in MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def check_bytes(data: bytes, name: str) -> dict:
    """Classify one file's content: status ok / odd / bad with the issues found."""
    import io

    import cv2
    import numpy as np
    from PIL import Image

    kind = sniff(data)
    ext_kind = EXTENSIONS.get(Path(name).suffix.lower())
    info: dict = {"kind": kind, "mode": None, "width": None, "height": None, "issues": []}
    buf = io.BytesIO(data)
    try:
        with Image.open(buf) as im:
            im.load()  # full decode: raises on truncated or corrupt data
            info.update(mode=im.mode, width=im.width, height=im.height)
            kind = kind or (im.format or "").lower() or None
            info["kind"] = kind
    except Exception as e:
        info["issues"].append("not_an_image" if kind is None else "undecodable")
        # PIL names the buffer by its repr (an address): name the file, so the report is the same on every run
        info["error"] = f"PIL: {type(e).__name__}: {str(e).replace(repr(buf), repr(name))}"
        info["status"] = "bad"
        return info
    if cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is None:
        info["issues"].append("undecodable")
        info["error"] = "OpenCV could not decode it"
        info["status"] = "bad"
        return info
    if info["mode"] in ("L", "LA", "1", "I", "I;16", "F"):
        info["issues"].append("grayscale")
    elif info["mode"] == "CMYK":
        info["issues"].append("cmyk")
    elif info["mode"] not in ("RGB",):
        info["issues"].append(f"mode_{info['mode']}")
    if ext_kind != kind:
        info["issues"].append("extension_mismatch")
    info["status"] = "odd" if info["issues"] else "ok"
    return info


def _check_file(args: tuple[str, str]) -> dict:
    root, rel = args
    data = (Path(root) / rel).read_bytes()
    info = check_bytes(data, rel)
    if not is_utf8(rel):  # kept, staged under a safe name (stage.py): DALI and JSON readers take only valid text
        info["issues"].append("non_utf8_name")
        info["status"] = "odd" if info["status"] == "ok" else info["status"]
        info["error"] = info.get("error") or "name is not valid UTF-8: staged under a safe name"
    return {"sha256": sha256_bytes(data), **info}


def list_source(source: Path) -> tuple[list[str], list[str], list[str]]:
    """(files inside class folders, files outside them, class folders without a file) relative to `source`;
    validates the layout."""
    if not source.exists():
        raise DatasetError(f"dataset path {source} does not exist (config key dataset.path)")
    if not source.is_dir():
        raise DatasetError(f"dataset path {source} is not a directory (config key dataset.path)")
    classes = sorted(e.name for e in os.scandir(source) if e.is_dir() and not e.name.startswith("."))
    stray = sorted(e.name for e in os.scandir(source) if e.is_file())
    if not classes:
        what = "is empty" if not stray else "has files but no class folders"
        raise DatasetError(
            f"dataset path {source} {what}: expected ImageFolder layout <root>/<class>/<image> "
            "(e.g. ImageNet's train/ folder; config key dataset.path)"
        )
    files, empty = [], []
    for c in classes:
        before = len(files)
        for dirpath, dirnames, filenames in os.walk(source / c):
            dirnames.sort()
            for f in sorted(filenames):
                files.append(os.path.relpath(os.path.join(dirpath, f), source))
        if len(files) == before:
            empty.append(c)
    if not files:
        raise DatasetError(f"dataset path {source} has class folders but no files in them (config key dataset.path)")
    return files, stray, empty


def check_dataset(source: Path, out: Path, quarantine: Path, strict: bool = False, jobs: int | None = None) -> dict:
    """Check every file of `source`; write the check result to `out` and bad files to `quarantine`."""
    source = Path(source).resolve()
    files, stray, empty = list_source(source)
    previous = {}
    if Path(out).is_file():
        try:
            old = json.loads(Path(out).read_text())
            if old.get("source") == str(source):
                previous = {f["path"]: f for f in old["files"]}
        except (json.JSONDecodeError, KeyError):
            previous = {}
    entries, todo = {}, []
    for rel in files:
        st = (source / rel).stat()
        old = previous.get(rel)
        if old and old["size"] == st.st_size and old["mtime_ns"] == st.st_mtime_ns:
            entries[rel] = old
        else:
            entries[rel] = {"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
            todo.append(rel)
    jobs = jobs or len(os.sched_getaffinity(0))
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(_check_file, [(str(source), r) for r in todo], chunksize=32)
        for rel, res in progress(zip(todo, results, strict=True), total=len(todo), label="check images"):
            entries[rel].update(res)
    ordered = [entries[r] for r in files]
    counts = {
        "files": len(ordered),
        "ok": 0,
        "odd": 0,
        "bad": 0,
        "rechecked": len(todo),
        "stray": len(stray),
        "empty_classes": len(empty),
    }
    issues: dict[str, int] = {}
    for e in ordered:
        counts[e["status"]] += 1
        for i in e["issues"]:
            issues[i] = issues.get(i, 0) + 1
    result = {
        "source": str(source),
        "counts": counts,
        "issues": issues,
        "stray_files": stray,
        # class folders left out of every staged copy: a class is a folder with a file to stage, so the loaders'
        # labels (and the model's class count) are the classes that have one
        "empty_classes": [printable(c) for c in empty],
        "all_bad_classes": _all_bad_classes(ordered),
        "files": ordered,
        "fingerprint": stable_hash([(e["path"], e["sha256"]) for e in ordered]),
    }
    bad = [e for e in ordered if e["status"] == "bad"]
    if quarantine:
        quarantine = Path(quarantine)
        if quarantine.exists():
            shutil.rmtree(quarantine)
        for e in bad:
            dst = quarantine / e["path"]
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / e["path"], dst)
    report = render_report(result)
    atomic_write_text(Path(out).with_suffix(".txt"), report)
    if strict and (counts["odd"] or counts["bad"] or stray):
        raise DatasetError(
            "strict: true and the dataset has odd or undecodable files (set strict: false to keep odd files "
            f"and quarantine bad ones):\n{report}"
        )
    atomic_write_json(out, result)
    return result


def _all_bad_classes(files: list[dict]) -> list[str]:
    """Class folders whose every file is undecodable (quarantined): like an empty one, left out."""
    status: dict[str, set[str]] = {}
    for e in files:
        status.setdefault(e["path"].split("/", 1)[0], set()).add(e["status"])
    return sorted(printable(c) for c, seen in status.items() if seen == {"bad"})


def render_report(result: dict) -> str:
    c = result["counts"]
    lines = [
        f"dataset check of {result['source']}",
        f"{c['files']} files: {c['ok']} ok, {c['odd']} odd but decodable (kept), {c['bad']} undecodable (quarantined)",
    ]
    if result["issues"]:
        lines.append("issues: " + ", ".join(f"{k}={v}" for k, v in sorted(result["issues"].items())))
    if result["stray_files"]:
        lines.append(f"ignored (outside class folders): {', '.join(map(printable, result['stray_files'][:20]))}")
    for key, why in (("empty_classes", "no files"), ("all_bad_classes", "every file undecodable")):
        if names := result.get(key):
            more = f" and {len(names) - 20} more" if len(names) > 20 else ""
            lines.append(
                f"class folders left out ({why}; not classes of the staged dataset): {', '.join(names[:20])}{more}"
            )
    for e in result["files"]:
        if e["status"] != "ok":
            detail = f" ({e['error']})" if e.get("error") else ""
            lines.append(f"  {e['status']:4s} {printable(e['path'])}: {', '.join(e['issues'])}{detail}")
    return "\n".join(lines) + "\n"
