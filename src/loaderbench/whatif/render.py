"""The matrix as text: the scores per class first, then the model spread, the coverage and the width of the intervals,
then the measured rows and the predicted rows apart, and what their sides were taken from; and one GPU count's matrix
as a loader x model table (`grid`)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from .intervals import MEASURED
from .scoring import checks


def render_matrix(df: pd.DataFrame) -> str:
    """The per-class scores, coverage and width, then the rows (measured, then predicted) and their bases."""
    if df.empty:
        return (
            "predicted vs measured: no row has its parts (a loader-alone `none` cell, or a 1-GPU training cell for n "
            "GPUs, and the model's `synthetic` ceiling, in one run)"
        )
    lines = _scores(df) + [""] + _rows(df) + [""] + _bases(df)
    return "\n".join(lines)


def grid(df: pd.DataFrame, gpus: int = 1, parallel: str | None = None, value: str = "predicted") -> pd.DataFrame:
    """The matrix at `gpus` (and `parallel`, where given) as a table: a row per tier, batch, precision and loader, a
    column per model, each cell the row's `value` (predicted, predicted_lo, class, status, measured, error, ...)."""
    rows = df[(df["gpus"] == gpus) & ((df["parallel"] == parallel) if parallel else True)]
    keys = ["tier", "batch_size", "precision", "loader"]
    return rows.pivot_table(index=keys, columns="model", values=value, aggfunc="first", sort=False)


def _scores(df: pd.DataFrame) -> list[str]:
    scored = pd.DataFrame(df.attrs.get("scores") or [])
    n_checks = len(checks(df))
    head = (
        f"scores of the {n_checks} checks (measured rows) per class - error = measured / predicted - 1, naive = "
        "min(loader part, ceiling) on the same cells"
    )
    if scored.empty:
        lines = [head, "  no check: no row's training cell is in the records"]
    else:
        t = pd.DataFrame(
            {
                "class": scored["class"],
                "checks (cells)": scored["checks"],
                "median |error|": [_pct(v) for v in scored["median_abs_error"]],
                "naive median |error|": [_pct(v) for v in scored["naive_median_abs_error"]],
                "worst cell": scored["worst_cell"],
                "worst error": [_signed(v) for v in scored["worst_error"]],
            }
        )
        lines = [head, t.to_string(index=False)]
    unknown = df.attrs.get("consuming_unknown", 0)
    if unknown:
        lines.append(
            f"the consuming process's term is unknown in {unknown} of {len(df)} rows (no beside part, or no host times "
            "in the records): `consuming process` is never their class"
        )
    per_model = df.attrs.get("model_spread") or {}
    if per_model:
        each = ", ".join(f"{m} {_pct(v)}" for m, v in per_model.items())
        spread = df.attrs.get("spread")
        told = f"; spread over models {100 * spread:.1f} percentage points" if pd.notna(spread) else ""
        lines.append(f"median |error| per model (nothing fitted: leave-one-model-out): {each}{told}")
    cov = df.attrs.get("coverage") or {}
    if cov.get("checks"):
        lines.append(
            f"coverage: {cov['inside']} of {cov['checks']} checks ({_pct(cov['coverage'])}) measured inside their "
            f"interval; median relative width (hi - lo) / predicted: {_pct(cov['width_checks'])} over the checks, "
            f"{_pct(cov['width_all'])} over all {int(df['predicted'].notna().sum())} predicted rows"
        )
    else:
        lines.append(f"coverage: no check; median relative width {_pct(cov.get('width_all'))} over the predicted rows")
    return lines


def _rows(df: pd.DataFrame) -> list[str]:
    measured = df[df["status"] == MEASURED]
    predicted = df[df["status"] != MEASURED]
    lines = []
    if len(measured):
        lines += [f"measured rows ({len(measured)}): rates in samples/s", _table(measured, measured=True)]
    if len(predicted):
        lines += ["" if lines else None, f"predicted rows ({len(predicted)}): rates in samples/s"]
        lines += [_table(predicted, measured=False)]
    return [x for x in lines if x is not None]


def _table(df: pd.DataFrame, measured: bool) -> str:
    t = pd.DataFrame({"configuration": df["configuration"]})
    if not measured:
        t["status"] = df["status"]
    t["class"] = [c or "-" for c in df["class"]]
    if measured:
        t["measured"] = [_rate(v) for v in df["measured"]]
    t["predicted"] = [_rate(v) for v in df["predicted"]]
    t["interval"] = [
        f"[{_rate(lo)}, {_rate(hi)}]" for lo, hi in zip(df["predicted_lo"], df["predicted_hi"], strict=True)
    ]
    if measured:
        t["error"] = [_signed(v) for v in df["error"]]
    t["naive"] = [_rate(v) for v in df["naive"]]
    if measured:
        t["naive error"] = [_signed(v) for v in df["naive_error"]]
    for side in ("loader_side", "gpu_side", "consuming_side"):
        t[side.replace("_", " ")] = [_rate(v) for v in df[side]]
    return t.to_string(index=False)


def _bases(df: pd.DataFrame) -> list[str]:
    """What each side was taken from and what the records lack, each text once with the rows it holds for."""
    lines = ["what the rows' sides were taken from, and what their records lack (rows: how many hold it)"]
    for col, what in (
        ("loader_basis", "loader side"),
        ("step_basis", "GPU side"),
        ("consuming_basis", "consuming"),
        ("widened_by", "interval widened by"),
        ("lacks", "lacks"),
    ):
        parts = Counter(p for text in df[col] if isinstance(text, str) for p in _split(col, text))
        for text, n in sorted(parts.items(), key=lambda kv: -kv[1]):
            w = df.loc[df[col] == text, "widening"] if col == "widened_by" else pd.Series(dtype=float)
            told = f", w = {_pct(w.min())}" + (f" to {_pct(w.max())}" if w.max() > w.min() else "") if len(w) else ""
            lines.append(f"  {what}: {text} ({n} row{'s' if n > 1 else ''}{told})")
    return lines


def _split(col: str, text: str) -> list[str]:
    return [p for p in (text.split("; ") if col == "lacks" else [text]) if p]


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _signed(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:+.1f}%"


def _rate(v: float) -> str:
    """A rate in samples/s: whole numbers from 100, three significant digits below (a CPU host's 1.37, not 1)."""
    if pd.isna(v):
        return "-"
    if np.isinf(v):
        return "inf"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
