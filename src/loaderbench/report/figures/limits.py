"""The figures of what limits a cell: where its step's time goes, and its share of the compute ceiling (AU)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..columns import label
from ..rows import implausible, read_flag, trains
from .common import config_label, no_training, not_drawn, save, suptitle, with_ends


def stall_bars(diagnosis: pd.DataFrame, out_dir: Path) -> str | None:
    """Stacked ms/step per loader x tier: compute (synthetic), prep stall (RAM tier - compute), fetch stall
    (tier - RAM tier); one panel per GPUs/batch/precision/parallel."""
    d = diagnosis[
        (diagnosis["loader"] != "synthetic") & pd.to_numeric(diagnosis["step_ms"], errors="coerce").notna()
    ].copy()
    if d.empty:
        trained = pd.to_numeric(diagnosis["samples_per_s"], errors="coerce").notna() & trains(diagnosis)
        why = "no loader cell with a measured step" if trained.any() else no_training(diagnosis)
        return not_drawn(out_dir, "stall_bars", f"{why}: nothing to attribute")
    d["config"] = config_label(d)
    configs = list(dict.fromkeys(d["config"]))
    fig, axes = plt.subplots(
        len(configs), 1, figsize=(max(6, 0.7 * d.groupby("config").size().max() + 2), 3.2 * len(configs)), squeeze=False
    )
    colors = {"compute_only_ms": "#4c72b0", "prep_stall_ms": "#dd8452", "fetch_stall_ms": "#c44e52"}
    for ax, cfg in zip(axes[:, 0], configs, strict=True):
        g = d[d["config"] == cfg]
        names = (g["loader"] + "\n" + g["tier"]).tolist()
        step = pd.to_numeric(g["step_ms"], errors="coerce").to_numpy()
        # compute is capped at the cell's own step: a loader cell faster than synthetic (noise) shows no stall
        parts = {col: pd.to_numeric(g[col], errors="coerce").fillna(0).to_numpy() for col in colors}
        parts["compute_only_ms"] = np.fmin(parts["compute_only_ms"], step)
        bottom = np.zeros(len(g))
        for col, color in colors.items():
            ax.bar(names, parts[col], bottom=bottom, color=color, label=label(col).replace(" (ms)", ""))
            bottom += parts[col]
        ax.scatter(names, step, marker="_", s=400, color="k", zorder=3, label="measured step")
        crowded = len(g) > 8  # upright labels would overlap: stand them on end
        for i, (lab, top) in enumerate(zip(g["bottleneck"], np.fmax(bottom, np.nan_to_num(step)), strict=True)):
            ax.text(i, top * 1.02, lab, ha="center", va="bottom", fontsize=7, rotation=90 if crowded else 0)
        ax.set_ylim(0, (1.45 if crowded else 1.2) * np.nanmax(np.fmax(bottom, np.nan_to_num(step))) or 1)
        ax.set_ylabel("ms per step")
        ax.set_title(cfg)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Where a training step's time goes (stall attribution after DS-Analyzer)")
    fig.tight_layout()
    save(fig, out_dir, "stall_bars")
    return None


def au_bars(table: pd.DataFrame, out_dir: Path) -> str | None:
    """AU (Samples/s over the synthetic ceiling) per loader and tier, one panel per configuration."""
    t = table[(table["loader"] != "synthetic") & trains(table)].copy()
    if t.empty or not t["au"].notna().any():
        why = (
            no_training(table)
            if not (pd.to_numeric(table["samples_per_s"], errors="coerce").notna() & trains(table)).any()
            else "no measured synthetic cell (the ceiling) at the loaders' GPUs, batch and precision (add `synthetic` "
            "to loaders)"
        )
        return not_drawn(out_dir, "au_bars", f"no AU: {why}")
    t["config"] = config_label(t)
    tiers = list(dict.fromkeys(t["tier"]))
    g = sns.catplot(
        data=with_ends(t, "au"),
        kind="bar",
        x="loader",
        y="au",
        hue="tier",
        hue_order=tiers,
        col="config",
        col_wrap=2,
        height=3.2,
        aspect=1.5,
        sharey=True,
        estimator=np.median,
        errorbar=("pi", 100),
        capsize=0.15,
    )
    g.set_titles("{col_name}")
    marked = 0
    for config, ax in g.axes_dict.items():
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.axhline(0.9, color="grey", lw=0.6, ls=":")
        ax.tick_params(axis="x", labelrotation=30)
        marked += mark_flagged(ax, flagged(t[t["config"] == config]), tiers)
    held = " Hatched in red: contended or implausible (above 1 beyond its interval), as the seed table's Flags say." * (
        marked > 0
    )
    suptitle(
        g.figure,
        "AU: share of the compute ceiling each loader delivers, whiskers its 95% interval (dotted: 0.9; above it "
        "the model's compute is the limit)." + held,
    )
    save(g.figure, out_dir, "au_bars")
    return None


def flagged(t: pd.DataFrame) -> set[tuple[str, str]]:
    """(loader, tier) of the rows whose numbers the diagnosis holds against: contended, or an implausible AU."""
    return {
        (str(r["loader"]), str(r["tier"]))
        for _, r in t.iterrows()
        if read_flag(r.get("contended")) is True or implausible(r)
    }


def mark_flagged(ax, flags: set[tuple[str, str]], tiers: list) -> int:
    """Hatch the bars of `flags` ((loader, tier): seaborn draws one container per tier of `tiers`, its hue order, and
    in it a bar per loader tick); the number hatched."""
    loaders = [t.get_text() for t in ax.get_xticklabels()]
    n = 0
    for tier, container in zip(map(str, tiers), ax.containers, strict=False):
        for loader, bar in zip(loaders, container.patches, strict=False):
            if (loader, tier) in flags:
                bar.set_hatch("///")
                bar.set_edgecolor("red")
                n += 1
    return n
