"""Each 1-GPU training configuration's rate predicted from its parts - its loader-alone cell and its model's
ceiling - with k fitted on one model's cells and checked on the others', and which part of the model missed where
it missed."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL

from .measured import CEILING, Configuration, Index, by_run, configurations
from .model import MISS, ceiling_eff, fit_k, loader_eff, softmin, which_limit

PREDICT_COLUMNS = [
    "configuration",
    "model",
    "loader",
    "tier",
    "gpus",
    "batch_size",
    "precision",
    "parallel",
    "measured",
    "measured_lo",
    "measured_hi",
    "loader_alone",
    "ceiling",
    "predicted",
    "error",
    "limited_by",
    "role",
    "missed",
    "loader_eff",
    "ceiling_eff",
    "loader_gpu_share",
    "cores_taken",
    "host_cores",
    "lacks",
    "run",
]


def predict(records: list[dict], fit_model: str | None = None) -> pd.DataFrame:
    """One row per training configuration (not synthetic, not the loader alone) whose run has both its parts - its
    loader-alone cell and its model's ceiling - with the measured and predicted rates; k is fitted on `fit_model`'s
    cells (default: the model with the most rows) and checked on the other models'. df.attrs: k, fit_model."""
    rows = []
    for mine in by_run(configurations(records)).values():
        index = Index(mine)
        for c in mine:
            if c.loader == CEILING or c.model == NO_MODEL:
                continue
            alone = index.find(
                of=c, model=NO_MODEL, **c.fields("loader", "tier", "gpus", "batch_size", "precision", "parallel")
            )
            ceil = index.find(of=c, loader=CEILING, **c.fields("model", "gpus", "batch_size", "precision", "parallel"))
            if alone is None or ceil is None:
                continue
            rows.append(_parts_row(c, alone, ceil))
    df = pd.DataFrame(rows, columns=PREDICT_COLUMNS)
    df.attrs.update(k=None, fit_model=None)
    if df.empty:
        return df
    models = Counter(df["model"])
    if fit_model is None:
        most = max(models.values())
        tied = sorted(m for m, n in models.items() if n == most)
        fit_model = DEFAULT_MODEL if DEFAULT_MODEL in tied else tied[0]
    elif fit_model not in models:
        raise ValueError(
            f"fit model {fit_model!r} has no cell with both its parts (models that have: {', '.join(sorted(models))})"
        )
    fit = df["model"] == fit_model
    k = fit_k([(r.measured, r.loader_eff, r.ceiling_eff) for r in df[fit].itertuples()])
    df["role"] = np.where(fit, "fit", "check")
    df["predicted"] = [softmin(le, ce, k) for le, ce in zip(df["loader_eff"], df["ceiling_eff"], strict=True)]
    df["error"] = df["measured"] / df["predicted"] - 1
    df["missed"] = [_missed_parts(r) for r in df.itertuples()]
    df.attrs.update(k=k, fit_model=fit_model)
    return df


def _parts_row(c: Configuration, alone: Configuration, ceil: Configuration) -> dict:
    lacks = []
    n = c.host_cores
    pool = (n - alone.launch) if n else None
    step_cores = max(0.0, ceil.cores_busy - ceil.launch) if ceil.cores_busy is not None else 0.0
    if ceil.cores_busy is None:
        lacks.append("the ceiling cell's cores busy (its host work taken as its launch cores only)")
    if alone.cores_busy is None or pool is None:
        lacks.append("the loader-alone cell's cores busy or the host's cores (the cores' share not checked)")
        l_eff = alone.rate
    else:
        l_eff = loader_eff(alone.rate, alone.cores_busy, pool, step_cores, ceil.rate)
    u = alone.gpu_share
    if u is None:
        lacks.append("the loader-alone cell's GPU telemetry (its GPU share taken as 0)")
        u = 0.0
    c_eff = ceiling_eff(ceil.rate, u, alone.rate)
    step_most = alone.cores_busy is not None and step_cores / ceil.rate > alone.cores_busy / alone.rate
    limited = which_limit(l_eff, c_eff, ceil.rate, u / alone.rate, l_eff < alone.rate * (1 - MISS), step_most)
    return {
        **c.describe(),
        "measured": c.rate,
        "measured_lo": c.lo,
        "measured_hi": c.hi,
        "loader_alone": alone.rate,
        "ceiling": ceil.rate,
        "predicted": math.nan,
        "error": math.nan,
        "limited_by": limited,
        "role": "",
        "missed": "",
        "loader_eff": l_eff,
        "ceiling_eff": c_eff,
        "loader_gpu_share": u,
        "cores_taken": 1 - l_eff / alone.rate,
        "host_cores": n,
        "lacks": "; ".join(lacks),
        "run": c.run,
    }


def _within(row) -> str:
    return (
        " (the prediction lies within the cell's interval)"
        if row.measured_lo <= row.predicted <= row.measured_hi
        else ""
    )


def _missed_parts(row) -> str:
    """Where a 1-GPU prediction misses by more than MISS, which part of the model missed."""
    if not abs(row.error) > MISS:
        return ""
    pct = f"{100 * abs(row.error):.0f}%"
    if row.error < 0:
        return (
            f"measured {pct} below, so below both parts: sharing stronger than modelled (the loader and the step "
            f"contend for what the model does not count - memory bandwidth, PCIe, the launch core - or the queue "
            f"hides less than k says){_within(row)}"
        )
    if row.measured > row.loader_alone:
        return f"measured {pct} above, above the loader-alone cell: the loader-alone cell understates the loader{_within(row)}"
    if row.measured > row.ceiling:
        return f"measured {pct} above, above the ceiling: the ceiling cell understates the model{_within(row)}"
    return (
        f"measured {pct} above, between the prediction and both parts: sharing weaker than modelled (the loader's "
        f"GPU share or the step's host cores cost less than taken) or the queue hides more than k says{_within(row)}"
    )


def score(df: pd.DataFrame, model: str | None = None) -> float:
    """The median |error| of the check cells (of `model`, default every model but the fit one); refused on the fit
    model's cells, whose error only says how well k was fitted."""
    fit_model = df.attrs.get("fit_model")
    if model is not None and model == fit_model:
        raise ValueError(
            f"k was fitted on {model}'s cells: their error says how well it was fitted, not how well the model "
            "predicts; score another model's cells"
        )
    rows = df[(df["role"] == "check") & ((df["model"] == model) if model is not None else True)]
    if rows.empty:
        raise ValueError(f"no check cells{f' of model {model}' if model else ''} to score (fitted on {fit_model})")
    return float(rows["error"].abs().median())


def fit_error(df: pd.DataFrame) -> float:
    """The median |error| of the cells k was fitted on: how well it fits, not a check."""
    rows = df[df["role"] == "fit"]
    return float(rows["error"].abs().median()) if len(rows) else math.nan
