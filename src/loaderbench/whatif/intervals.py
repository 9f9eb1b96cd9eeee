"""Each prediction's interval: its parts' intervals (every part's rate at its low and its high end), widened by the
model's measured relative error on the checks - leave-one-out, so that a check's own measured rate never sets its own
interval - and how well the intervals do: coverage and width."""

from __future__ import annotations

import numpy as np
import pandas as pd

MEASURED = "measured"  # a row whose training cell the records hold: its error checks the prediction
WIDEN_PERCENTILE = 80  # the widening: this percentile of the other checks' |error|


def widen(df: pd.DataFrame) -> None:
    """predicted_lo/hi = parts_lo / (1 + w), parts_hi x (1 + w), in place: w is the WIDEN_PERCENTILE-th percentile of
    |error| over the checks of the row's GPU count other than the row itself (over every other check where its GPU
    count has none); `widened_by` says which."""
    checks = df[(df["status"] == MEASURED) & df["error"].notna()]
    los, his, ws, bases = [], [], [], []
    for i, row in df.iterrows():
        others = checks.drop(index=i, errors="ignore")
        pool, where = others[others["gpus"] == row["gpus"]], f"{row['gpus']}-GPU checks"
        if pool.empty:
            pool, where = others, "checks of every GPU count (none at its own)"
        if pool.empty:
            w, basis = 0.0, "not widened: no other check"
        else:
            w = float(np.percentile(pool["error"].abs(), WIDEN_PERCENTILE))
            mine = " (its own left out)" if i in checks.index else ""
            basis = f"the {WIDEN_PERCENTILE}th percentile of |error| over the {where}{mine}"
        los.append(row["parts_lo"] / (1 + w))
        his.append(row["parts_hi"] * (1 + w))
        ws.append(w)
        bases.append(basis)
    df["predicted_lo"], df["predicted_hi"], df["widening"], df["widened_by"] = los, his, ws, bases


def coverage(df: pd.DataFrame) -> dict:
    """The share of checks whose measured rate lies inside their interval, and the median relative width
    (hi - lo) / predicted over the checks and over every predicted row."""
    has = df[df["predicted"].notna()]
    checks = has[(has["status"] == MEASURED) & has["measured"].notna()]
    inside = ((checks["predicted_lo"] <= checks["measured"]) & (checks["measured"] <= checks["predicted_hi"])).sum()
    width = (has["predicted_hi"] - has["predicted_lo"]) / has["predicted"]
    return {
        "checks": len(checks),
        "inside": int(inside),
        "coverage": float(inside / len(checks)) if len(checks) else float("nan"),
        "width_checks": float(width[checks.index].median()) if len(checks) else float("nan"),
        "width_all": float(width.median()) if len(has) else float("nan"),
    }
