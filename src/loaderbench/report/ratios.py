"""The cells table's ratios: Speed (against the baseline cell), GPU Efficiency (against the 1-GPU cell) and AU
(against the synthetic ceiling), each with its 95% interval (`<name>_low`, `<name>_high`), divided only within one
model and only where the two cells compare (`core.comparable`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loaderbench.core.comparable import divisible
from loaderbench.core.uncertainty import Ratio, quotient

from .columns import CEILING_BY, LOADER_ALONE, ONE_GPU_BY, baseline_cell
from .rows import row_facts, trains

# A loader faster than the synthetic ceiling of its configuration: the ceiling was measured low or the cell high, or
# the loader's batches were not the work the ceiling's were. With the AU's interval known, above 1 beyond it counts;
# without one, above this.
AU_IMPLAUSIBLE = 1.05


def divide(t: pd.DataFrame, baseline: dict) -> None:
    """Speed, GPU Efficiency and AU of every row of the cells table `t`, with their intervals, in place; a cell above
    its compute ceiling beyond its AU's interval is warned of as implausible."""
    base_of = baseline_cell(baseline)
    base = t[np.logical_and.reduce([t[k] == v for k, v in base_of.items()]) & trains(t)].drop_duplicates("model")
    base_rate = t["model"].map(base.set_index("model")["samples_per_s"]).astype(float)
    t["speed"] = speed(t["samples_per_s"].astype(float), base_rate)
    t["gpu_efficiency"] = gpu_efficiency(t)
    t["au"] = accelerator_utilisation(t)
    within_one_group(t, base.set_index("model")["compare_group"].to_dict())
    aus = au_interval(t)
    bounds(t, "au", aus)
    bounds(t, "speed", divided_interval(t, t["model"].map(base.set_index("model")["halfwidth"]), base.index))
    one = t[(t["gpus"] == 1) & trains(t)].set_index(ONE_GPU_BY)["halfwidth"]
    one_gpu_hw = pd.Series([one.get(one_gpu_key(r), np.nan) for _, r in t.iterrows()], index=t.index, dtype=float)
    by_itself = pd.Series([one_gpu_loader(r) == r["loader"] for _, r in t.iterrows()], index=t.index, dtype=bool)
    own = (t["gpus"] == 1) & trains(t) & by_itself  # the 1-GPU cells, divided by themselves
    bounds(t, "gpu_efficiency", divided_interval(t, one_gpu_hw, t.index[own]))
    implausible = pd.Series(
        [au_implausible(au, q) for au, q in zip(t["au"], aus, strict=True)], index=t.index, dtype=bool
    )
    t.loc[implausible, "warnings"] = [
        "; ".join(filter(None, [str(w) if isinstance(w, str) else "", f"implausible: {au_implausible_text(au, q)}"]))
        for w, au, q in zip(t.loc[implausible, "warnings"], t.loc[implausible, "au"], aus[implausible], strict=True)
    ]


def divided_interval(t: pd.DataFrame, divisor_hw: pd.Series, divisors: pd.Index) -> pd.Series:
    """Each row's ratio (`value`, already divided) as a `Ratio` whose interval joins the row's half-width and its
    divisor's (`divisor_hw`); a row that is its own divisor (`divisors`: the baseline cells) is exactly 1; None where
    a half-width is unknown."""

    def one(i, hw, base_hw):
        if i in divisors:
            return Ratio(1.0, 0.0, 1)
        return quotient(1.0, float(hw), 1.0, float(base_hw)) if pd.notna(hw) and pd.notna(base_hw) else None

    return pd.Series(
        [one(i, hw, b) for i, hw, b in zip(t.index, t["halfwidth"], divisor_hw, strict=True)], index=t.index
    )


def bounds(t: pd.DataFrame, col: str, intervals: pd.Series) -> None:
    """Columns `<col>_low` and `<col>_high`: `t[col]` within the relative half-width of `intervals` (a `Ratio` per
    row, or None: unknown)."""
    hw = pd.Series([q.halfwidth if q is not None else np.nan for q in intervals], index=t.index, dtype=float)
    value = pd.to_numeric(t[col], errors="coerce")
    t[f"{col}_low"], t[f"{col}_high"] = value / (1 + hw), value * (1 + hw)


def interval_of(r: pd.Series, col: str) -> Ratio | None:
    """The row's ratio `col` with the 95% interval the table gives it (`<col>_low`, `<col>_high`: `bounds`); None
    where the table gives none."""
    value, low, high = (pd.to_numeric(r.get(c), errors="coerce") for c in (col, f"{col}_low", f"{col}_high"))
    if not all(pd.notna(x) for x in (value, low, high)) or low <= 0:
        return None
    return Ratio(float(value), float(np.sqrt(high / low)) - 1.0, 1)


def au_interval(t: pd.DataFrame) -> pd.Series:
    """Each row's AU with its 95% interval (`uncertainty.quotient` of its rate and its ceiling's, each known to its
    `halfwidth`), the ceiling being the fastest synthetic row of its configuration; None where the AU or either
    interval is unknown."""
    if not {"samples_per_s", "halfwidth", "au"} <= set(t.columns):
        return pd.Series(None, index=t.index, dtype=object)
    rate = pd.to_numeric(t["samples_per_s"], errors="coerce")
    synth = t[(t["loader"] == "synthetic") & rate.notna()]
    ceiling_hw = {key: g.loc[rate[g.index].idxmax()].get("halfwidth") for key, g in synth.groupby(CEILING_BY)}
    out = []
    for _, r in t.iterrows():
        au, hw, hw_ceiling = r.get("au"), r.get("halfwidth"), ceiling_hw.get(tuple(r[k] for k in CEILING_BY))
        known = all(pd.notna(x) for x in (au, hw, hw_ceiling))
        out.append(quotient(float(au), float(hw), 1.0, float(hw_ceiling)) if known else None)
    return pd.Series(out, index=t.index, dtype=object)


def au_implausible(au, q: Ratio | None) -> bool:
    """Whether a cell delivers more than its compute ceiling: its AU's interval `q` lies above 1 (without one: the AU
    is above AU_IMPLAUSIBLE)."""
    if q is not None:
        return q.low > 1.0
    return bool(pd.notna(au) and au > AU_IMPLAUSIBLE)


def au_implausible_text(au, q: Ratio | None) -> str:
    if q is None:
        return f"AU {au:.2f} > {AU_IMPLAUSIBLE} (ceiling or cell disturbed)"
    return (
        f"AU {q.value:.2f} [{q.low:.2f}, {q.high:.2f}] lies above 1 beyond its interval: the loader delivers more "
        "than the compute ceiling; check its batches and the ceiling cell"
    )


def within_one_group(t: pd.DataFrame, baseline_groups: dict) -> None:
    """Speed, GPU Efficiency and AU divide a cell by another of its model (the baseline, the 1-GPU cell, the synthetic
    ceiling; `baseline_groups`: each model's baseline cell's comparison group) only where the two compare
    (`core.comparable`: one boot, code, stack and dataset), else they are left out and `not_divided` says why. The
    loader alone (model `none`) is divided by nothing: it trains no model."""
    one = t[t["gpus"] == 1].set_index(ONE_GPU_BY)["compare_group"]
    ceiling = {}
    for key, g in t[t["loader"] == "synthetic"].groupby(CEILING_BY):
        ceiling[key] = g.loc[g["samples_per_s"].idxmax(), "compare_group"] if g["samples_per_s"].notna().any() else None
    notes = []
    for i, r in t.iterrows():
        if r["model"] == LOADER_ALONE:
            t.loc[i, ["speed", "gpu_efficiency", "au"]] = np.nan
            notes.append("the loader alone (model none) trains nothing: no training rate to divide")
            continue
        divisors = {
            "speed": ("Speed: the baseline cell", baseline_groups.get(r["model"])),
            "gpu_efficiency": ("GPU Efficiency: the 1-GPU cell", one.get(one_gpu_key(r))),
            "au": ("AU: the synthetic ceiling", ceiling.get(tuple(r[k] for k in CEILING_BY))),
        }
        mixed = divisible(r["compare_group"], r["compare_group"])  # its own repeats span groups: it divides nothing
        why = []
        for col, (what, group) in divisors.items():
            reason = mixed or divisible(r["compare_group"], group)
            if pd.notna(r[col]) and reason:
                t.loc[i, col] = np.nan
                why.append(mixed or f"{what} is not comparable ({reason})")
        notes.append("; ".join(dict.fromkeys(why)))
    t["not_divided"] = notes


def speed(samples_per_s: pd.Series, baseline_samples_per_s: pd.Series) -> pd.Series:
    """Speed = Samples/s / the baseline cell's Samples/s, row by row (NaN where the baseline has no result)."""
    base = pd.to_numeric(baseline_samples_per_s, errors="coerce")
    return samples_per_s / base.where(np.isfinite(base) & (base > 0))


def one_gpu_key(r: pd.Series) -> tuple:
    """The GPU Efficiency group of row `r`, its loader replaced by the one whose 1-GPU cell it is divided by."""
    return tuple(one_gpu_loader(r) if k == "loader" else r[k] for k in ONE_GPU_BY)


def one_gpu_loader(r: pd.Series) -> str:
    """The loader whose 1-GPU cell is the row's GPU Efficiency baseline: its own, or, for a loader with no 1-GPU mode
    of its own, the one its facts name."""
    return row_facts(r).one_gpu_baseline or r["loader"]


def gpu_efficiency(t: pd.DataFrame) -> pd.Series:
    """Samples/s / (GPUs x the same group's 1-GPU Samples/s); dali-mc's group baseline is dali-sc. The group is
    loader, model, tier, per-GPU batch, precision and parallel mode (dp cells against the 1-GPU dp cell, ddp against
    ddp); the loader alone (model `none`) has none."""
    one = t[(t["gpus"] == 1) & trains(t)].set_index(ONE_GPU_BY)["samples_per_s"]
    out = []
    for _, r in t.iterrows():
        base = one.get(one_gpu_key(r), np.nan)
        out.append(r["samples_per_s"] / (r["gpus"] * base) if base and np.isfinite(base) and base > 0 else np.nan)
    return pd.Series(out, index=t.index, dtype=float)


def accelerator_utilisation(t: pd.DataFrame) -> pd.Series:
    """AU (MLPerf Storage's accelerator utilisation): Samples/s / the `synthetic` loader's Samples/s of the same model
    at the same GPUs, batch, precision and parallel mode - the share of the model's compute ceiling a loader delivers.
    NaN without a synthetic cell, and for the loader alone (model `none`: no ceiling, no training)."""
    ceiling = t[(t["loader"] == "synthetic") & trains(t)].groupby(CEILING_BY)["samples_per_s"].max().to_dict()
    out = [
        r["samples_per_s"] / ceiling.get(tuple(r[k] for k in CEILING_BY), np.nan)
        if r["model"] != LOADER_ALONE
        else np.nan
        for _, r in t.iterrows()
    ]
    return pd.Series(out, index=t.index, dtype=float)
