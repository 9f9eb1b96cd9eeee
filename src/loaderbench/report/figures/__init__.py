"""Figures from the tables (seaborn; PNG and SVG): one function per figure of `figure_list.REGISTRY`, named as
the figure and called with the inputs the registry gives it; one module per family of figures (rates, limits,
resources, models) and what they share (common)."""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before any module of the package imports pyplot

import pandas as pd
import seaborn as sns

from loaderbench.core.util import atomic_write_text

from ..columns import read_table
from ..figure_list import INDEX, REGISTRY
from .limits import au_bars, stall_bars
from .models import loader_alone, predicted
from .rates import batch_effect, scaling, seed_table, speed_heatmap, throughput
from .resources import memory, tier_probe, timelines
from .whatif import whatif_matrix

# each figure of the registry by its name: the function that draws it
DRAW = {
    f.__name__: f
    for f in (throughput, speed_heatmap, seed_table, stall_bars, au_bars, memory, batch_effect, scaling, timelines)
    + (tier_probe, loader_alone, predicted, whatif_matrix)
}


def make_figures(
    table_csv: Path,
    repeats_csv: Path,
    out_dir: Path,
    diagnosis_csv: Path | None = None,
    probe_csv: Path | None = None,
    timeline_csvs: list[Path] = (),
    timeline_cells: list[str] | None = None,
    whatif_csv: Path | None = None,
) -> dict:
    """Every figure of the registry the tables can draw, in its order, into `out_dir`, and its index (`INDEX`: those
    drawn and why each other one was not; returned). Without `diagnosis_csv` the diagnosis is computed from the table;
    without `probe_csv` there is no tier-probe figure, without `whatif_csv` (the what-if's matrix) no matrix."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="notebook")
    table = read_table(table_csv)
    if diagnosis_csv:
        diagnosis = read_table(diagnosis_csv, "diagnosis")
    else:
        from .diagnose import diagnose

        diagnosis = diagnose(table)
    inputs = {
        "table": table,
        "repeats": read_table(repeats_csv, "repeats"),
        "diagnosis": diagnosis,
        "probe": pd.read_csv(probe_csv) if probe_csv else pd.DataFrame(),
        "whatif": _read_matrix(whatif_csv),
        "timelines": {Path(p).stem: Path(p) for p in timeline_csvs},
        "timeline_cells": timeline_cells,
    }
    jobs = [(fig.name, {k: inputs[k] for k in fig.inputs}, out_dir) for fig in REGISTRY]
    workers = min(len(jobs), len(os.sched_getaffinity(0)))
    if workers < 2:
        reasons = [_draw(*job) for job in jobs]
    else:
        # Drawing is CPU-bound and the figures are independent: one process per CPU (forked: matplotlib and the
        # theme are set up already) nearly halves the job on 2 cores. Failures surface in the registry's order.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            reasons = [future.result() for future in [pool.submit(_draw, *job) for job in jobs]]
    index = {
        "drawn": [fig.name for fig, why in zip(REGISTRY, reasons, strict=True) if why is None],
        "not_drawn": {fig.name: why for fig, why in zip(REGISTRY, reasons, strict=True) if why is not None},
    }
    atomic_write_text(out_dir / INDEX, json.dumps(index, indent=2) + "\n")
    return index


def _read_matrix(path: Path | None) -> pd.DataFrame:
    """The what-if's matrix table; no rows where none was given or it holds none (a file of no columns)."""
    try:
        return pd.read_csv(path) if path else pd.DataFrame()
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _draw(name: str, kwargs: dict, out_dir: Path) -> str | None:
    return DRAW[name](**kwargs, out_dir=out_dir)
