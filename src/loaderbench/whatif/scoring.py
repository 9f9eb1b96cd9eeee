"""How well the predictions do on the checks (rows whose training cell was measured): per class the count, the
median |error|, the naive min(L, C)'s median |error| on the same cells and the worst cell; and the spread over models
of the per-model median |error| (nothing is fitted on any model, so it is the leave-one-model-out spread)."""

from __future__ import annotations

import math

import pandas as pd

from .intervals import MEASURED
from .terms import CLASSES

ALL = "all"
SCORE_COLUMNS = ["class", "checks", "median_abs_error", "naive_median_abs_error", "worst_cell", "worst_error"]


def checks(df: pd.DataFrame) -> pd.DataFrame:
    """The rows measured and predicted: those the scores are over."""
    return df[(df["status"] == MEASURED) & df["error"].notna()]


def scores(df: pd.DataFrame) -> pd.DataFrame:
    """The per-class table, each class of CLASSES in turn and then every check together (`ALL`); a class with no
    check is left out."""
    rows = []
    measured = checks(df)
    for klass in (*CLASSES, ALL):
        mine = measured if klass == ALL else measured[measured["class"] == klass]
        if mine.empty:
            continue
        worst = mine.loc[mine["error"].abs().idxmax()]
        rows.append(
            {
                "class": klass,
                "checks": len(mine),
                "median_abs_error": float(mine["error"].abs().median()),
                "naive_median_abs_error": float(mine["naive_error"].abs().median()),
                "worst_cell": worst["configuration"],
                "worst_error": float(worst["error"]),
            }
        )
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def model_spread(df: pd.DataFrame) -> dict[str, float]:
    """Each model's median |error| over its checks, the smallest first."""
    by_model = checks(df).groupby("model")["error"].apply(lambda e: float(e.abs().median()))
    return dict(sorted(by_model.items(), key=lambda kv: (kv[1], kv[0])))


def spread_of(per_model: dict[str, float]) -> float:
    """The spread over models: the largest per-model median |error| less the smallest (nan under two models)."""
    return max(per_model.values()) - min(per_model.values()) if len(per_model) > 1 else math.nan
