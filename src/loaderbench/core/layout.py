"""Where every file of a run lives: the one owner of the results layout. Snakemake's rules, the CLI's defaults,
the aggregation (the respread ledger) and the Makefile (`loaderbench where`) read it from here.

Paths are relative to the run's working directory (Snakemake's --directory). A method given a wildcard such as
"{tier}" returns the rule's pattern: `RESULTS.manifest("{tier}")` is "results/staging/{tier}.json". The staged copy on
a tier lies in a folder of the run's own (`staged_root`), found again through the tier's manifest (`read_root`)."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

DATASETS = "resources/datasets"  # generated datasets, one folder per dataset name
LOGS = "logs"


# name -> path under the results folder; "{}" is the argument of those that take one (a tier, a cell id, a file)
PATHS = {
    # the dataset check and staging
    "check": "dataset/check.json",
    "check_report": "dataset/check.txt",  # written beside the check by `check_dataset`
    "quarantine": "dataset/quarantine",
    "manifest": "staging/{}.json",
    "probe": "probe/{}.json",
    "config": "config.json",  # the resolved config of the run
    # cells
    "cells": "cells",
    "cell": "cells/{}.json",
    "superseded": "cells/superseded",  # records of configurations requeued by `respread`
    "before_rerun": "before-rerun",  # a forced rerun's cells' outputs until they are measured again (cli.forcerun)
    "respread_ledger": "respread.json",
    "telemetry": "telemetry",
    "timeline": "telemetry/{}.csv",
    "traces": "traces",
    "trace": "traces/{}.trace.json",  # a cell's steps and telemetry for Perfetto / chrome://tracing (engine.runner.trace)
    # tables, figures, bundle, Snakemake's report
    "tables": "tables",
    "table": "tables/{}",  # cells.csv, repeats.csv, tier_probe.csv, diagnosis.csv, ...
    "figures": "figures",
    "bundle": "bundle",
    "bundle_zip": "bundle.zip",
    "report": "report.html",
    # side measurements outside the grid
    "ceiling": "ceiling",
    "sweep": "sweep",
    "crosscheck": "crosscheck",  # cells against bare loops of the same loader (crosscheck.json and their records)
}


@dataclass(frozen=True)
class Layout:
    """`Layout(root).cells` is a path; `Layout(root).cell(cell_id)` one that takes an argument."""

    root: str = "results"

    def __getattr__(self, name: str):
        pattern = PATHS.get(name)
        if pattern is None:
            raise AttributeError(f"no path {name!r} in the results layout; one of: {', '.join(PATHS)}")
        if "{}" in pattern:
            return lambda arg: str(Path(self.root, pattern.format(arg)))
        return str(Path(self.root, pattern))

    def figure(self, name: str, ext: str = "png") -> str:
        return str(Path(self.root, "figures", f"{name}.{ext}"))


RESULTS = Layout()


CELL_PATHS = ("cell", "timeline", "trace")  # the paths whose argument is a cell id


def where(name: str, arg: str | None = None, root: str = "results") -> str:
    """The path `name` (a key of PATHS; `arg` for those that take one) names: `loaderbench where cell ID`."""
    if name not in PATHS:
        raise ValueError(f"unknown path {name!r}; one of: {', '.join(PATHS)}")
    value = getattr(Layout(root), name)
    if callable(value):
        if arg is None:
            raise ValueError(f"path {name!r} needs an argument (loaderbench where {name} ARG)")
        return value(arg)
    return value


def tier_read_path(tier: dict) -> str:
    """Where cells read a tier: the FUSE mount for an emulated tier, else the staging path itself."""
    return tier["mount"] if tier["kind"] == "emulated" else tier["path"]


def project_key(project_dir: str | Path | None = None) -> str:
    """The folder a project (a run's working directory, by default this process's) stages into on every tier: its
    name and a short hash of its resolved path, so that two clones on one host never share a staged copy."""
    path = Path(os.path.realpath(project_dir or "."))
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name)[:32].strip("._") or "project"
    return f"{name}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"


def staged_root(tier_path: str | Path, dataset: str, project_dir: str | Path | None = None) -> Path:
    """ImageFolder root of the staged copy: staging owns only `<tier>/loaderbench/`, and in it each project its own
    `<project_key>/` (a tier such as /dev/shm is shared by every project on the host). An emulated tier's mount
    shows its backing path's tree, so the same call on the mount gives the path the cells read."""
    return Path(tier_path) / "loaderbench" / project_key(project_dir) / dataset / "train"


def read_root(manifest: dict, read_path: str | Path | None = None) -> Path:
    """Where the staged tree a tier manifest describes is read: its root, or the same place under `read_path` (an
    emulated tier's mount, which shows the backing tier path's tree)."""
    root = Path(manifest["root"])
    if read_path is None:
        return root
    return Path(read_path) / root.relative_to(manifest["tier_path"])
