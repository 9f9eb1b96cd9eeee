"""The predictions as text: the 1-GPU table with its fit and check errors, the n-GPU table the run measured."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .onegpu import fit_error, score


def render_predict(df: pd.DataFrame) -> str:
    """The 1-GPU table (every configuration with both parts) and its median |error| over fit and check cells."""
    if df.empty:
        return (
            "predicted vs measured: no configuration has both its parts (a loader-alone `none` cell and its "
            "model's `synthetic` ceiling, in one run)"
        )
    k = df.attrs["k"]
    lines = [
        (
            f"predicted vs measured (k = {_k(k)}, fitted on {df.attrs['fit_model']}'s "
            f"{int((df['role'] == 'fit').sum())} cells; checked on {int((df['role'] == 'check').sum())} cells of "
            "other models)"
        ),
        _table(
            df,
            [
                "configuration",
                "role",
                "measured",
                "loader_alone",
                "ceiling",
                "predicted",
                "error",
                "limited_by",
            ],
        ),
        f"median |error|: fit {_pct(fit_error(df))} (how well k fits, not a check)",
    ]
    try:
        lines[-1] += f"; check {_pct(score(df))}"
    except ValueError as e:
        lines[-1] += f"; check: none ({e})"
    # in full, below the table: a column would cut them
    lines += [f"  {r.configuration} ({r.role}): {r.missed}" for r in df.itertuples() if r.missed]
    return "\n".join(lines)


def render_scale(df: pd.DataFrame, csv: str | None = None) -> str:
    """The n-GPU predictions the run measured (with their errors and median |error|); `csv`: where the predicted rows
    were written, if they were."""
    measured = df[df["measured"].notna()] if not df.empty else df
    head = f"n-GPU predicted from the 1-GPU cells (k = {_k(df.attrs.get('k'))}: {df.attrs.get('k_basis', '')})"
    if measured.empty:
        if df.empty:
            return head + "\n  no 1-GPU training cell on a GPU to predict from"
        where = f"in {csv}" if csv else "not shown: --out writes them"
        return head + f"\n  no n-GPU cell measured to compare with ({len(df)} predicted rows {where})"
    lines = [
        head,
        _table(
            measured,
            [
                "configuration",
                "loader_1gpu",
                "ceiling_1gpu",
                "loader_side",
                "gpu_side",
                "predicted",
                "measured",
                "error",
                "ceiling_measured",
                "limited_by",
            ],
        ),
        (
            f"median |error| over the {int(measured['error'].notna().sum())} measured n-GPU cells: "
            f"{_pct(measured['error'].abs().median())}"
        ),
    ]
    for r in measured.itertuples():
        extra = "; ".join(x for x in (r.missed, r.note, f"lacks {r.lacks}" if r.lacks else "") if x)
        if extra:
            lines.append(f"  {r.configuration}: {extra}")
    return "\n".join(lines)


def _k(k) -> str:
    return "-" if k is None else ("inf" if math.isinf(k) else f"{k:.3g}")


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _rate(v: float) -> str:
    """A rate in samples/s: whole numbers from 100, three significant digits below (a CPU host's 1.37, not 1)."""
    if pd.isna(v):
        return "-"
    if np.isinf(v):
        return "inf"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    t = df[cols].copy()
    for c in cols:
        if c == "error":
            t[c] = [f"{100 * v:+.1f}%" if pd.notna(v) else "-" for v in t[c]]
        elif pd.api.types.is_float_dtype(t[c]):
            t[c] = [_rate(v) for v in t[c]]
    return t.to_string(index=False)
