"""Figures from the tables (seaborn; PNG and SVG): throughput, Speed heatmap, the seed's table as an image."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .aggregate import SEED_COLUMNS  # noqa: E402
from .util import atomic_write_text  # noqa: E402

FIGURES = ("throughput", "speed_heatmap", "seed_table")


def _save(fig, out_dir: Path, name: str) -> None:
    for ext in ("png", "svg"):
        tmp = out_dir / f".{name}.tmp.{ext}"
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=ext)
        tmp.replace(out_dir / f"{name}.{ext}")
    plt.close(fig)


def throughput(repeats: pd.DataFrame, out_dir: Path) -> None:
    """Samples/s per loader (x) and tier (hue), one panel per batch size and precision; bars = median, whiskers = min-max."""
    ok = repeats[repeats["status"] == "ok"].copy()
    if ok.empty:
        raise ValueError("no cell finished ok: nothing to plot (see results/tables/cells.csv for the reasons)")
    ok["Batch / GPUs"] = "batch " + ok["Batch size"].astype(str) + ", " + ok["GPU"].astype(str) + " GPU"
    loaders = ok["Dataloader"].nunique()
    g = sns.catplot(
        data=ok, kind="bar", x="Dataloader", y="Samples/s", hue="Disk", col="Batch / GPUs", row="Precision",
        estimator=np.median, errorbar=("pi", 100), capsize=0.15, height=3.2, aspect=max(1.2, 0.4 * loaders),
        sharey=False, margin_titles=True,
    )  # fmt: skip
    g.set_titles(row_template="{row_name}", col_template="{col_name}")
    g.tick_params(axis="x", labelrotation=30)
    g.figure.suptitle("Training throughput (MobileNetV2): median of repeats, whiskers min-max", y=1.02)
    _save(g.figure, out_dir, "throughput")


def speed_heatmap(table: pd.DataFrame, out_dir: Path) -> None:
    """Speed relative to the baseline cell, loader x tier rows against GPUs x batch x precision columns."""
    t = table.copy()
    t["row"] = t["Dataloader"] + " / " + t["Disk"]
    t["col"] = t["GPU"].astype(str) + " GPU, b" + t["Batch size"].astype(str) + ", " + t["Precision"]
    pivot = t.pivot_table(index="row", columns="col", values="Speed", aggfunc="first")
    fig, ax = plt.subplots(figsize=(1.3 + 1.1 * pivot.shape[1], 0.9 + 0.45 * pivot.shape[0]))
    if pivot.notna().to_numpy().any():
        sns.heatmap(pivot, annot=True, fmt=".2f", cmap="viridis", ax=ax, cbar_kws={"label": "Speed"})
        ax.set_title("Speed = Samples/s / baseline cell's Samples/s")
    else:
        ax.text(0.5, 0.5, "no Speed: the baseline cell has no result\n(config key 'baseline')", ha="center", va="center")
        ax.set_axis_off()
    ax.set_xlabel("")
    ax.set_ylabel("")
    _save(fig, out_dir, "speed_heatmap")


def seed_table_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The seed's columns (plus precision and status) with readable number formats."""
    t = table[SEED_COLUMNS[:4] + ["Precision"] + SEED_COLUMNS[4:] + ["Status", "Repeats ok", "Spread"]].copy()
    fmt = {"Time(s)": "{:.1f}", "Steps": "{:.0f}", "Samples/s": "{:.1f}", "Speed": "{:.2f}", "GPU Efficiency": "{:.2f}"}
    for col, f in fmt.items():
        t[col] = [f.format(v) if pd.notna(v) else "-" for v in t[col]]
    t["Spread"] = [f"{100 * v:.1f}%" if pd.notna(v) else "-" for v in t["Spread"]]
    return t


def seed_table(table: pd.DataFrame, out_dir: Path) -> None:
    t = seed_table_frame(table)
    atomic_write_text(out_dir / "seed_table.html", t.to_html(index=False, classes="seed-table", border=0))
    fig, ax = plt.subplots(figsize=(14, 0.6 + 0.3 * len(t)))
    ax.set_axis_off()
    tab = ax.table(cellText=t.values, colLabels=list(t.columns), loc="center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(8)
    tab.scale(1, 1.3)
    _save(fig, out_dir, "seed_table")


def make_figures(table_csv: Path, repeats_csv: Path, out_dir: Path) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="notebook")
    table = pd.read_csv(table_csv)
    repeats = pd.read_csv(repeats_csv)
    throughput(repeats, out_dir)
    speed_heatmap(table, out_dir)
    seed_table(table, out_dir)
