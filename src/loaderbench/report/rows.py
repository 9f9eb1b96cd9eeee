"""A row of the tables as the report reads it: where it trained, whether it trains, how it is named and what its
loader is (its facts)."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pandas as pd

from loaderbench.core.records import loader_facts
from loaderbench.core.registry import DEFAULT_MODEL, LoaderRecord

from .columns import LOADER_ALONE


def read_flag(value) -> bool | None:
    """A table's yes/no cell as True, False or None (not recorded; a fixed window has no convergence)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


def implausible(row) -> bool:
    """Whether a cells-table row's AU is above its ceiling beyond its interval: the warning `ratios.divide` gave it."""
    warnings = row.get("warnings")
    return isinstance(warnings, str) and "implausible" in warnings


def on_gpu(device) -> bool:
    """Whether a cell's `device` (the records' device type: "cuda", "cpu"; several joined by commas) is a GPU;
    unknown (a table without the column) counts as one, as the seed's tables were."""
    return not isinstance(device, str) or not device or "cuda" in device


def device_text(gpus, device) -> str:
    """The device a cell trained on as people read it: "1 GPU", "2 GPU", or "CPU" where there was none."""
    return f"{int(gpus)} GPU" if on_gpu(device) else "CPU"


def device_texts(t: pd.DataFrame) -> pd.Series:
    """`device_text` of each row of `t`."""
    device = t["device"] if "device" in t else pd.Series(None, index=t.index, dtype=object)
    return pd.Series([device_text(g, d) for g, d in zip(t["gpus"], device, strict=True)], index=t.index, dtype=object)


def trains(df: pd.DataFrame) -> pd.Series:
    """Which rows are training jobs: every model but LOADER_ALONE (the loader alone trains nothing)."""
    return df["model"] != LOADER_ALONE


def cell_name(r) -> str:
    """The row's configuration as reports name it: loader/tier/gGPUs/bBATCH/precision/parallel, then model=NAME where
    the model is not MobileNetV2 (as `claims.parse_cell` reads it)."""
    name = f"{r['loader']}/{r['tier']}/g{r['gpus']}/b{r['batch_size']}/{r['precision']}/{r['parallel']}"
    return name if r["model"] == DEFAULT_MODEL else f"{name}/model={r['model']}"


@cache
def _parsed(text: str) -> dict:
    return json.loads(text)


def row_facts(r) -> LoaderRecord:
    """The facts of the row's loader: a plugin's as its records keep them (`loader_facts`), else its registry
    record's."""
    text = r.get("loader_facts")
    return loader_facts(r["loader"], _parsed(text) if isinstance(text, str) and text else None)


def number(x) -> float | None:
    """A table's cell as a finite number, else None (blank, NaN, not a number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def fmt(x: float | None, unit: str = "", digits: int = 1) -> str:
    """A number as text with its unit, "n/a" where it is unknown."""
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}{unit}"
