"""The what-if's tables from a run's cell records: every loader x model predicted from its parts (`whatif.matrix`:
whatif.csv, a row per loader x model x configuration x GPU count) and how the prediction scores on the checks
(`whatif.scores`, per class, with what the matrix's attrs say of all of them - the spread over models, the coverage
and width of the intervals: whatif_scores.json)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.records import load_records
from loaderbench.core.util import atomic_write_text

MATRIX = "whatif.csv"
SCORES = "whatif_scores.json"


def write_whatif(cell_files: list[Path], gpus: list[int], out_dir: Path) -> pd.DataFrame:
    """MATRIX and SCORES in `out_dir` from the records `cell_files` (an unreadable one moved aside, as `aggregate`
    does), predicted at `gpus` GPUs; the matrix returned."""
    from loaderbench.whatif import matrix, scores

    records, _ = load_records(cell_files)
    df = matrix(records, gpus=list(gpus))
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / MATRIX, df.to_csv(index=False, float_format="%.4g"))
    scored = {"classes": scores(df), **{k: v for k, v in df.attrs.items() if k != "scores"}}
    atomic_write_text(out_dir / SCORES, json.dumps(_plain(scored), indent=2, allow_nan=False) + "\n")
    return df


def _plain(x):
    """`x` as JSON holds it: a table as its rows (and what its attrs say), numbers as numbers, NaN as null."""
    if isinstance(x, pd.DataFrame):
        return _plain(x.to_dict("records"))
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.integer, np.bool_)):
        return x.item()
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    return x


def whatif_html(matrix_csv: Path | None, scores_json: Path | None) -> str:
    """The bundle's what-if section: the matrix's rows by status, the checks' coverage and each class's scores, with
    links to both tables ("" where the run wrote no matrix)."""
    if matrix_csv is None:
        return ""
    try:
        df = pd.read_csv(matrix_csv)
    except pd.errors.EmptyDataError:
        df = pd.DataFrame()
    scored = json.loads(Path(scores_json).read_text()) if scores_json else {}
    cover = scored.get("coverage") or {}
    inside = (
        f" {cover['inside']} of the {cover['checks']} checks lie inside their interval."
        if cover.get("checks")
        else " No pair was checked (config key whatif.checks measures some)."
    )
    classes = pd.DataFrame(scored.get("classes") or [])
    links = f"<a href='tables/{MATRIX}'>{MATRIX}</a>" + (
        f", <a href='tables/{SCORES}'>{SCORES}</a>" if scores_json else ""
    )
    return (
        "<h2>What if: every loader x model predicted from its parts</h2>"
        f"<p>{html.escape(summary(df))}.{html.escape(inside)} Tables: {links}; the figure <i>whatif matrix</i> below.</p>"
        + (classes.to_html(index=False, border=0, float_format=lambda v: f"{v:.3g}") if len(classes) else "")
    )


def summary(df: pd.DataFrame) -> str:
    """The matrix in one line: its rows by status."""
    if df.empty or "status" not in df:
        return "no loader x model has both its parts measured: no row"
    counts = df["status"].value_counts()
    return f"{len(df)} rows: " + ", ".join(f"{n} {s}" for s, n in counts.items())
