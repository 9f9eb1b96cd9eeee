"""Recommendations from the diagnosis: what would pay off and by how much (the loader, shards, the tier, the batch,
GPUs, precision), each a comparison of two measured cells with its 95% interval (`compare`, which the verdict uses
too) or why the pair carries none."""

from __future__ import annotations

import numpy as np
import pandas as pd

from loaderbench.core.comparable import divisible
from loaderbench.core.registry import loaders_where
from loaderbench.core.uncertainty import DEFAULT_BETWEEN_NOISE, Ratio, quotient, widened
from loaderbench.data.cache import COLD_SHARE

from .columns import CEILING_BY, SETUP, baseline_cell
from .rows import cell_name, fmt, number, read_flag, row_facts, trains

COMPUTE_LABELS = ("GPU-bound", "compute-bound")  # the labels of a cell its compute limits (diagnose.label)


def disturbed_once(r: pd.Series) -> str | None:
    """Why a cell measured once cannot carry a recommendation on its own (its window was contended, or did not
    converge), where it was; None for a cell with repeats or an undisturbed window. A second measurement may lift it."""
    if pd.notna(r.get("repeats_ok")) and r.get("repeats_ok") >= 2:
        return None
    if read_flag(r.get("contended")) is True:
        return f"{cell_name(r)} was contended (other processes used the host in its window); rerun it"
    if read_flag(r.get("converged")) is False:
        return f"{cell_name(r)}: its window did not converge and it has no repeats"
    return None


def compare(a: pd.Series, b: pd.Series) -> tuple[Ratio | None, str | None]:
    """a's rate over b's with its interval (`uncertainty`), or None and why the pair carries no recommendation: a
    cell measured once that was contended or did not converge never does on its own, nor a cold-tier cell whose
    reads were warm, nor a cell that delivered more than its compute ceiling, nor two cells that do not compare
    (`core.comparable`: another boot, code, stack or dataset)."""
    ga, gb = a.get("compare_group"), b.get("compare_group")
    if (isinstance(ga, str) or isinstance(gb, str)) and (why := divisible(ga, gb)):
        if cell_name(a) == cell_name(b):
            return None, f"{cell_name(a)}: {why}; rerun it"
        return None, f"{cell_name(a)} against {cell_name(b)}: {why}; rerun both"
    for r in (a, b):
        if r.get("bottleneck") == "implausible":
            return None, (
                f"{cell_name(r)} delivered more than its compute ceiling (AU {fmt(r.get('au', np.nan), '', 2)}, "
                "implausible): check its batches and the ceiling cell"
            )
        if why := disturbed_once(r):
            return None, why
        if not pd.notna(r.get("halfwidth")):
            return None, f"{cell_name(r)} has no interval"
        share = r.get("device_read_share")
        if r.get("cache") == "cold" and pd.notna(share) and share < COLD_SHARE:
            return None, (
                f"{cell_name(r)} read only {100 * share:.0f}% of its bytes from the device: a warm cell on a cold tier"
            )
    return quotient(a["samples_per_s"], _halfwidth(a), b["samples_per_s"], _halfwidth(b)), None


def _halfwidth(r: pd.Series) -> float:
    """The row's relative 95% half-width; a single window's that a table left unwidened ('window only': the run
    repeated no cell) is widened here by the default noise between processes, as `aggregate` does now."""
    basis = r.get("halfwidth_basis")
    if isinstance(basis, str) and basis.startswith("window only"):
        return widened(float(r["halfwidth"]), DEFAULT_BETWEEN_NOISE)
    return float(r["halfwidth"])


def _rec(out: list[dict], topic: str, cells: list, q: Ratio | None, why: str | None, text) -> None:
    """One recommendation: `text(q)` with its interval, "no measurable difference" inside it, or left out."""
    names = [cell_name(c) for c in cells]
    if q is None:
        out.append({"topic": topic, "verdict": "left out", "text": f"left out: {why}", "cells": names})
        return
    differs = q.differs_from(1.0)
    out.append(
        {
            "topic": topic,
            "verdict": "measured" if differs else "no measurable difference",
            "text": text(q, differs),
            "cells": names,
            "interval": q.to_dict(),
        }
    )


def _x(q: Ratio) -> str:
    return f"{q.value:.2f}x [{q.low:.2f}, {q.high:.2f}]"


def recommendations(d: pd.DataFrame, baseline: dict) -> list[dict]:
    """The seed's section 4, computed: what would pay off and by how much, each with its 95% interval and the cells
    behind it; a difference inside the interval is "no measurable difference". Each model's cells are compared among
    themselves only (its text names the model where the table holds several); the loader alone carries none."""
    ok = d[np.isfinite(d["samples_per_s"].astype(float)) & trains(d)]
    several = ok["model"].nunique() > 1
    out: list[dict] = []
    for model, m in ok.groupby("model", sort=False):
        recs = _model_recommendations(m, baseline)
        for rec in recs:
            rec["model"] = model
            if several:
                rec["text"] = f"{model}: {rec['text']}"
        out += recs
    return out


def _model_recommendations(ok: pd.DataFrame, baseline: dict) -> list[dict]:
    """The recommendations among the measured cells `ok` of one model."""
    out: list[dict] = []
    base = baseline_cell(baseline)
    base_loader, base_cfg = base["loader"], tuple(base[k] for k in SETUP)
    at_base = ok[[tuple(r[k] for k in SETUP) == base_cfg for _, r in ok.iterrows()]]
    real = at_base[at_base["loader"] != "synthetic"]

    _loader_recs(out, real, base_loader)
    _shard_recs(out, ok)
    _storage_recs(out, real)
    # batch size, per loader and tier, at the baseline's GPUs, precision and parallel mode
    _batch_recs(
        out, ok[(ok["gpus"] == base_cfg[0]) & (ok["precision"] == base_cfg[2]) & (ok["parallel"] == base_cfg[3])]
    )
    _gpu_recs(out, ok)
    _precision_recs(out, ok)
    return out


def _loader_recs(out: list[dict], real: pd.DataFrame, base_loader: str) -> None:
    """Per tier: the fastest loader against the baseline loader, at the baseline's configuration."""
    for tier, g in real.groupby("tier", sort=False):
        best = g.loc[g["samples_per_s"].idxmax()]
        ref = g[g["loader"] == base_loader]
        if len(ref) and best["loader"] != base_loader:
            ref = ref.iloc[0]
            _rec(
                out,
                "loader",
                [best, ref],
                *compare(best, ref),
                lambda q, differs: (
                    f"On {tier}, use {best['loader']}: {best['samples_per_s']:.0f} samples/s, {_x(q)} {base_loader} "
                    f"({ref['samples_per_s']:.0f}); its bottleneck there: {best['bottleneck']}."
                    if differs and q.low >= 1.1
                    else f"On {tier}, the loader hardly matters: the best, {best['loader']}, is {_x(q)} {base_loader}"
                    f"{'' if differs else ', no measurable difference'}; {base_loader} there is {ref['bottleneck']}."
                ),
            )


def _shard_recs(out: list[dict], ok: pd.DataFrame) -> None:
    """Per seek-bound cell: shards on its tier, with the measured gain of the fastest shard loader in the same
    configuration when the run has one, else what to add to measure it."""
    for _, r in ok[ok["bottleneck"] == "seek-bound"].iterrows():
        same = ok[
            (ok["tier"] == r["tier"])
            & np.array([row_facts(x).reads == "shards" for _, x in ok.iterrows()], dtype=bool)
            & np.logical_and.reduce([ok[k] == r[k] for k in CEILING_BY])
        ]
        took, seq = r["image_mb_s"], r["tier_sequential_mb_s"]
        why = (
            f"{r['loader']} on {r['tier']} is seek-bound: it takes {took:.1f} MB/s of images where the tier "
            f"streams {seq:.0f} MB/s"
        )
        if not len(same):
            out.append(
                {
                    "topic": "shards",
                    "verdict": "not measured",
                    "cells": [cell_name(r)],
                    "text": f"{why}; stored as shards it would stream. Measure the gain: add "
                    f"{' or '.join(loaders_where(reads='shards'))} to loaders (the shards are staged for them).",
                }
            )
            continue
        best = same.loc[same["samples_per_s"].idxmax()]

        def shard_text(q, differs, r=r, best=best, why=why):
            share = best["image_mb_s"] / best["tier_sequential_mb_s"]
            return (
                f"{why}. Stored as shards, {best['loader']} reads {best['samples_per_s']:.0f} samples/s, {_x(q)} "
                f"{r['loader']} ({r['samples_per_s']:.0f}), taking {100 * share:.0f}% of the sequential rate"
                f"{'' if differs else ': no measurable difference'}; there it is {best['bottleneck']}."
            )

        _rec(out, "shards", [best, r], *compare(best, r), shard_text)


def _tier_rate(r: pd.Series) -> tuple[float | None, str]:
    """The tier probe's rate of the row's tier for the way its loader reads (a shard loader streams, a file loader
    reads whole files at random; as `_at_device`), and its unit."""
    if row_facts(r).reads == "shards":
        return number(r.get("tier_sequential_mb_s")), "MB/s streamed"
    return number(r.get("tier_files_s")), "files/s at random"


def _storage_recs(out: list[dict], real: pd.DataFrame) -> None:
    """Per loader: its fastest tier against its slowest, at the baseline's configuration - never a move to a tier the
    tier probe reads slower, nor away from a tier on which the loader is compute-bound: the tier set neither pace."""
    for loader, g in real.groupby("loader", sort=False):
        if g["tier"].nunique() < 2:
            continue
        fast, slow = g.loc[g["samples_per_s"].idxmax()], g.loc[g["samples_per_s"].idxmin()]
        (fast_rate, unit), (slow_rate, _) = _tier_rate(fast), _tier_rate(slow)
        held = None
        if fast_rate is not None and slow_rate is not None and fast_rate < slow_rate:
            held = (
                f"{loader} ran faster on {fast['tier']} ({fast['samples_per_s']:.0f} samples/s) than on "
                f"{slow['tier']} ({slow['samples_per_s']:.0f}), though the tier probe reads {fast['tier']} slower "
                f"({fast_rate:.0f} against {slow_rate:.0f} {unit}): the tier does not set its pace, so no move to "
                f"{fast['tier']} is advised"
            )
        elif slow["bottleneck"] in COMPUTE_LABELS:
            held = (
                f"on {slow['tier']} {loader} is {slow['bottleneck']} (AU {fmt(slow.get('au', np.nan), '', 2)}): "
                "the tier does not limit it, so no other tier is advised"
            )
        if held:
            out.append(
                {
                    "topic": "storage",
                    "verdict": "left out",
                    "text": f"left out: {held}",
                    "cells": [cell_name(fast), cell_name(slow)],
                }
            )
            continue
        _rec(
            out,
            "storage",
            [fast, slow],
            *compare(fast, slow),
            lambda q, differs: (
                f"{loader}: {fast['tier']} instead of {slow['tier']} gives {_x(q)} ({slow['samples_per_s']:.0f} -> "
                f"{fast['samples_per_s']:.0f} samples/s), "
                + ("no measurable difference" if not differs else "worth it" if q.low >= 1.1 else "a measurable gain")
                + f"; on {slow['tier']} it is {slow['bottleneck']}."
            ),
        )


def _batch_recs(out: list[dict], same: pd.DataFrame) -> None:
    """Per loader and tier: its largest batch against its smallest."""
    for (loader, tier), g in same.groupby(["loader", "tier"], sort=False):
        if g["batch_size"].nunique() < 2:
            continue
        lo, hi = g.loc[g["batch_size"].idxmin()], g.loc[g["batch_size"].idxmax()]

        def batch_text(q, differs, lo=lo, hi=hi, loader=loader, tier=tier):
            if not differs:
                why = "no measurable difference"
                if "prep" in lo["bottleneck"] or "I/O" in lo["bottleneck"]:
                    why += f": the loader sets the pace ({lo['bottleneck']})"
            elif q.low >= 1.1:
                why = "worth it: the device does more per launch and the loader keeps up"
            elif q.high < 1:
                why = f"slower: at batch {int(hi['batch_size'])} the cell is {hi['bottleneck']}"
            else:
                why = "a measurable gain"
            return f"{loader} on {tier}: batch {int(hi['batch_size'])} vs {int(lo['batch_size'])} gives {_x(q)}, {why}."

        _rec(out, "batch size", [hi, lo], *compare(hi, lo), batch_text)


def _gpu_recs(out: list[dict], ok: pd.DataFrame) -> None:
    """Per multi-GPU cell: its rate against the same cell on one GPU, and whether it reaches 80% of ideal."""
    for _, r in ok[ok["gpus"] > 1].iterrows():
        one = ok[
            (ok["loader"] == r["loader"])
            & (ok["tier"] == r["tier"])
            & (ok["gpus"] == 1)
            & (ok["batch_size"] == r["batch_size"])
            & (ok["precision"] == r["precision"])
            & (ok["parallel"] == r["parallel"])
        ]
        if not len(one):
            continue
        n = int(r["gpus"])

        def gpu_text(q, differs, r=r, n=n):
            verdict = (
                "pays off"
                if q.low >= 0.8 * n
                else f"does not pay off: fix the {r['bottleneck']} limit first"
                if q.high < 0.8 * n
                else "cannot tell whether it reaches 80% of ideal"
            )
            return f"{r['loader']} on {r['tier']} ({r['parallel']}): {n} GPUs give {_x(q)} one GPU (ideal {n}x), {verdict}."

        _rec(out, "GPUs", [r, one.iloc[0]], *compare(r, one.iloc[0]), gpu_text)


def _precision_recs(out: list[dict], ok: pd.DataFrame) -> None:
    """Per loader, tier, GPUs, batch and parallel mode: amp against fp32."""
    for (loader, tier, g_, b), g in ok.groupby(["loader", "tier", "gpus", "batch_size"], sort=False):
        for par in g["parallel"].unique():
            fp32 = g[(g["precision"] == "fp32") & (g["parallel"] == par)]
            amp = g[(g["precision"] == "amp") & (g["parallel"] == par)]
            if not (len(fp32) and len(amp)):
                continue
            row, am = fp32.iloc[0], amp.iloc[0]

            def amp_text(q, differs, row=row, loader=loader, tier=tier, g_=g_, b=b):
                if differs and q.low >= 1.1:
                    note = ""
                elif not differs:
                    note = " - no measurable difference"
                elif row["bottleneck"] in COMPUTE_LABELS:
                    note = f" - little gain on this device although fp32 was {row['bottleneck']}"
                else:
                    note = f" - the loader, not the arithmetic, limits it ({row['bottleneck']} at fp32)"
                return f"{loader} on {tier}, {int(g_)} GPU x {int(b)}: AMP gives {_x(q)} over fp32{note}."

            _rec(out, "precision", [am, row], *compare(am, row), amp_text)
