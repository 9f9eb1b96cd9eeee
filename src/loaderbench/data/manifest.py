"""The staged dataset as its manifest lists it: files, class names and labels, for every reader alike.

Loaders, `bench`, `ceiling` and the cell take their files and labels from here, never from a scan of the tier:
staging keeps foreign files in a tier (by design), and one stray folder there would shift every label.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


def printable(path: str) -> str:
    """A path as text: bytes that are not UTF-8 (a Linux name may hold any) shown as \\xNN escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def safe_path(path: str) -> str:
    """`path` with every component that is not valid UTF-8 renamed: the bad bytes become '_' and a hash of the
    original bytes keeps names distinct (`b\\xffd.JPEG` -> `b_d-1a2b3c4d.JPEG`); valid names are returned as they are.
    DALI, JSON readers and browsers take only valid text."""
    parts = []
    for part in path.split("/"):
        if is_utf8(part):
            parts.append(part)
            continue
        raw = os.fsencode(part)
        readable = raw.decode("utf-8", "replace").replace("\ufffd", "_")
        stem, dot, ext = readable.rpartition(".") if "." in readable.lstrip(".") else (readable, "", "")
        parts.append(f"{stem}-{hashlib.sha256(raw).hexdigest()[:8]}{dot}{ext}")
    return "/".join(parts)


def class_of(path: str) -> str:
    """The class of a staged file: its first path component (ImageFolder layout `<class>/<image>`)."""
    return path.split("/", 1)[0]


def class_names(paths: Iterable[str]) -> list[str]:
    """Class names in label order (sorted, as torchvision's ImageFolder numbers them)."""
    return sorted({class_of(p) for p in paths})


def samples(root: str | Path, paths: Iterable[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """(absolute path, label) pairs of `paths` under `root`, in ImageFolder's order, and the class names."""
    paths = list(paths)
    classes = class_names(paths)
    index = {c: i for i, c in enumerate(classes)}
    keyed = sorted((index[class_of(p)], os.path.dirname(p), os.path.basename(p), p) for p in paths)
    return [(os.path.join(str(root), p), label) for label, _, _, p in keyed], classes


def foreign_files(root: str | Path, paths: Iterable[str]) -> list[str]:
    """Files under `root` (relative paths) that the manifest does not list: ignored by every reader."""
    root, known, out = str(root), set(paths), []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            if rel not in known and not f.startswith("."):
                out.append(rel)
    return out


@dataclass(frozen=True)
class Staged:
    """One tier's staged copy: its root and the files (relative to it) that staging put there."""

    root: Path
    files: tuple[str, ...]

    @classmethod
    def from_manifest(cls, manifest: dict | str | Path) -> Staged:
        if not isinstance(manifest, dict):
            manifest = json.loads(Path(manifest).read_text())
        return cls(Path(manifest["root"]), tuple(f["path"] for f in manifest["files"]))

    @property
    def allowed(self) -> frozenset[str]:
        return frozenset(self.files)

    @property
    def classes(self) -> list[str]:
        return class_names(self.files)

    def samples(self, root: str | Path | None = None) -> tuple[list[tuple[str, int]], list[str]]:
        """(path, label) pairs under `root` (default the staged root; an emulated tier's mount reads the same)."""
        return samples(root or self.root, self.files)
