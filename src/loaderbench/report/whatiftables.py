"""The what-if's tables from a run's cell records: every loader x model predicted from its parts (`whatif.matrix`:
whatif.csv, a row per loader x model x configuration x GPU count) and how the prediction scores on the checks
(`whatif.scores`, per class, with what the matrix's attrs say of all of them - the spread over models, the coverage
and width of the intervals: whatif_scores.json)."""

from __future__ import annotations

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


def summary(df: pd.DataFrame) -> str:
    """The matrix in one line: its rows by status."""
    if df.empty or "status" not in df:
        return "no loader x model has both its parts measured: no row"
    counts = df["status"].value_counts()
    return f"{len(df)} rows: " + ", ".join(f"{n} {s}" for s, n in counts.items())
