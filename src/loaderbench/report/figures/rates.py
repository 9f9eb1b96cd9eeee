"""The figures of measured rates: throughput, Speed, the seed's table, batch size and GPU count."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from loaderbench.core.util import atomic_write_text

from ..aggregate import seed_table_frame
from ..rows import device_texts, trains
from .common import interval, model_part, models_text, no_cell_ok, no_training, not_drawn, save, suptitle


def throughput(repeats: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s per loader (x) and tier (hue), one panel per batch size and precision; bars = median, whiskers = min-max."""
    ok = repeats[(repeats["status"] == "ok") & trains(repeats)].copy()
    if ok.empty:
        return not_drawn(out_dir, "throughput", no_training(repeats))
    ok["Batch / GPUs"] = model_part(ok) + "batch " + ok["batch_size"].astype(str) + ", " + device_texts(ok)
    loaders = ok["loader"].nunique()
    g = sns.catplot(
        data=ok,
        kind="bar",
        x="loader",
        y="samples_per_s",
        hue="tier",
        col="Batch / GPUs",
        row="precision",
        estimator=np.median,
        errorbar=("pi", 100),
        capsize=0.15,
        height=3.2,
        aspect=max(1.2, 0.4 * loaders),
        sharey=False,
        margin_titles=True,
    )
    g.set_titles(row_template="{row_name}", col_template="{col_name}")
    g.tick_params(axis="x", labelrotation=30)
    suptitle(g.figure, f"Training throughput ({models_text(ok)}): median of repeats, whiskers min-max")
    save(g.figure, out_dir, "throughput")
    return None


def speed_heatmap(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Speed relative to the baseline cell, loader x tier rows against GPUs x batch x precision columns."""
    t = table[trains(table)].copy()  # the loader alone has no Speed
    if not pd.to_numeric(t["samples_per_s"], errors="coerce").notna().any():
        return not_drawn(out_dir, "speed_heatmap", f"no Speed: {no_training(table)}")
    if not pd.to_numeric(t["speed"], errors="coerce").notna().any():
        return not_drawn(out_dir, "speed_heatmap", "no Speed: the baseline cell (config key 'baseline') has no result")
    t["row"] = model_part(t, " / ") + t["loader"] + " / " + t["tier"]
    t["col"] = device_texts(t) + ", b" + t["batch_size"].astype(str) + ", " + t["precision"]
    t["text"] = [
        "" if pd.isna(v) else f"{v:.2f}" + (f"\n[{lo:.2f}, {hi:.2f}]" if pd.notna(lo) and pd.notna(hi) else "")
        for v, lo, hi in zip(
            t["speed"], t.get("speed_low", t["speed"] * np.nan), t.get("speed_high", t["speed"] * np.nan), strict=True
        )
    ]
    pivot = t.pivot_table(index="row", columns="col", values="speed", aggfunc="first")
    text = t.pivot_table(index="row", columns="col", values="text", aggfunc="first").reindex_like(pivot).fillna("")
    fig, ax = plt.subplots(figsize=(1.3 + 1.5 * pivot.shape[1], 0.9 + 0.6 * pivot.shape[0]))
    sns.heatmap(pivot, annot=text, fmt="", cmap="viridis", ax=ax, cbar_kws={"label": "speed"}, annot_kws={"size": 7})
    ax.set_title("Speed = Samples/s / baseline cell's Samples/s [95% interval]")
    ax.set_xlabel("")
    ax.set_ylabel("")
    save(fig, out_dir, "speed_heatmap")
    return None


def seed_table(table: pd.DataFrame, out_dir: Path) -> str | None:
    """The seed's table of every cell, ok or not (as HTML too)."""
    if table.empty:
        (out_dir / "seed_table.html").unlink(missing_ok=True)
        return not_drawn(out_dir, "seed_table", "no cell in the table")
    t = seed_table_frame(table)
    atomic_write_text(out_dir / "seed_table.html", t.to_html(index=False, classes="seed-table", border=0))
    fig, ax = plt.subplots(figsize=(14, 0.6 + 0.3 * len(t)))
    ax.set_axis_off()
    tab = ax.table(cellText=t.values, colLabels=list(t.columns), loc="center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(8)
    tab.scale(1, 1.3)
    save(fig, out_dir, "seed_table")
    return None


def batch_effect(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s against the per-GPU batch size per loader, one panel per tier and precision (the seed's 3.2.3)."""
    t = table[table["samples_per_s"].notna()].copy()
    if t.empty:
        return not_drawn(out_dir, "batch_effect", no_cell_ok(table))
    t["panel"] = model_part(t) + t["tier"] + ", " + t["precision"] + ", " + device_texts(t)
    g = sns.relplot(
        data=t,
        kind="line",
        x="batch_size",
        y="samples_per_s",
        hue="loader",
        col="panel",
        col_wrap=3,
        marker="o",
        height=3,
        aspect=1.3,
        facet_kws={"sharey": False},
    )
    g.set_titles("{col_name}")
    sizes = sorted(t["batch_size"].unique())
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(int(b)) for b in sizes])
    note = "" if len(sizes) > 1 else " (this grid has one batch size: add more under batch_sizes)"
    suptitle(g.figure, f"Batch-size effect per loader{note}")
    save(g.figure, out_dir, "batch_effect")
    return None


def scaling(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s against GPU count per loader with the ideal (linear from 1 GPU) line; one panel per tier,
    batch, precision and parallel mode."""
    t = table[table["samples_per_s"].notna()].copy()
    if t.empty:
        return not_drawn(out_dir, "scaling", no_cell_ok(table))
    t["panel"] = (
        model_part(t) + t["tier"] + ", b" + t["batch_size"].astype(str) + ", " + t["precision"] + ", " + t["parallel"]
    )
    loaders = sorted(t["loader"].unique())
    palette = dict(zip(loaders, sns.color_palette(n_colors=len(loaders)), strict=True))
    g = sns.relplot(
        data=t,
        kind="line",
        x="gpus",
        y="samples_per_s",
        hue="loader",
        hue_order=loaders,
        palette=palette,
        col="panel",
        col_wrap=3,
        marker="o",
        height=3,
        aspect=1.3,
        facet_kws={"sharey": False},
    )
    g.set_titles("{col_name}")
    for panel, ax in g.axes_dict.items():
        for loader, cells in t[t["panel"] == panel].groupby("loader"):
            v, lo, hi = interval(cells)
            ax.errorbar(cells["gpus"], v, yerr=[v - lo, hi - v], fmt="none", ecolor=palette[loader], capsize=3, lw=1)
        p = t[(t["panel"] == panel) & (t["gpus"] == 1)]
        counts = sorted(t["gpus"].unique())
        for _, r in p.iterrows():
            ax.plot(counts, [r["samples_per_s"] * n for n in counts], ls=":", lw=0.8, color="grey")
        ax.set_xticks(counts)
    note = "" if t["gpus"].nunique() > 1 else " (this grid has one GPU count: add more under gpus)"
    suptitle(g.figure, f"Scaling with GPUs, whiskers 95% intervals; dotted: ideal (n x the 1-GPU cell){note}")
    save(g.figure, out_dir, "scaling")
    return None
