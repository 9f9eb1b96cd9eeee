"""The staged dataset as its manifest lists it: files, class names and labels, for every reader alike.

Loaders, `bench`, `ceiling` and the cell take their files and labels from here, never from a scan of the tier:
staging keeps foreign files in a tier (by design), and one stray folder there would shift every label.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


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
