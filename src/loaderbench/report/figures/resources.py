"""The figures of what a cell used: GPU memory, its resources over time, and its tier's read rate."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .common import config_label, no_cell_ok, not_drawn, save, suptitle

MAX_TIMELINES = 6


def memory(table: pd.DataFrame, repeats: pd.DataFrame, out_dir: Path) -> str | None:
    """Peak GPU memory of the main card and the other cards per loader (the seed's 3.2.4); on a machine without
    a GPU, the peak host memory (RSS) of the cell's process tree instead, which is then what a loader costs."""
    t = table.copy()
    t["config"] = config_label(t)
    long = []
    if t["peak_gpu_mem_main_mb"].notna().any():
        for _, r in t.iterrows():
            for col, card in (("peak_gpu_mem_main_mb", "card 0"), ("peak_gpu_mem_others_mb", "other cards")):
                if pd.notna(r[col]):
                    long.append(
                        {"loader": r["loader"], "tier": r["tier"], "config": r["config"], "card": card, "MB": r[col]}
                    )
        title, hue = "Peak GPU memory per card (allocator peak)", "card"
    else:
        ok = repeats[repeats["status"] == "ok"]
        for _, r in ok.iterrows():
            if pd.notna(r.get("rss_mb")):
                long.append({"loader": r["loader"], "tier": r["tier"], "config": "", "card": "host", "MB": r["rss_mb"]})
        title, hue = "No GPU in this run: peak host memory (RSS) of each cell's processes", "tier"
    fig_df = pd.DataFrame(long)
    if fig_df.empty:
        return not_drawn(out_dir, "memory", "no cell finished ok with its peak memory recorded")
    g = sns.catplot(
        data=fig_df,
        kind="bar",
        x="loader",
        y="MB",
        hue=hue,
        col="config",
        col_wrap=2,
        height=3.2,
        aspect=1.5,
        estimator=np.max,
        errorbar=None,
    )
    g.set_titles("{col_name}")
    for ax in g.axes.flat:
        ax.tick_params(axis="x", labelrotation=30)
    suptitle(g.figure, title)
    save(g.figure, out_dir, "memory")
    return None


def pick_timeline_cells(repeats: pd.DataFrame, wanted: list[str] | None = None) -> list[str]:
    """The cells whose resource timelines are drawn: `wanted` (config key figures.timeline_cells), else per
    loader its first ok cell on the slowest tier of the grid's first configuration, at most MAX_TIMELINES."""
    ok = repeats[(repeats["status"] == "ok") & repeats["timeline"].notna()]
    if wanted:
        return [c for c in wanted if c in set(ok["cell_id"])]
    if ok.empty:
        return []
    first = ok.iloc[0]
    same = ok[
        (ok["gpus"] == first["gpus"])
        & (ok["batch_size"] == first["batch_size"])
        & (ok["precision"] == first["precision"])
        & (ok["parallel"] == first["parallel"])
    ]
    picked = []
    for _, g in same.groupby("loader", sort=False):
        picked.append(g.loc[g["samples_per_s"].idxmin(), "cell_id"])
    return picked[:MAX_TIMELINES]


def timelines(
    repeats: pd.DataFrame, timelines: dict[str, Path], timeline_cells: list[str] | None, out_dir: Path
) -> str | None:
    """Resource timeline of selected cells: GPU utilisation per GPU, CPU (mean of cores), and read MB/s (the tier's
    device, or the cell's processes when the tier has no block device), the timed window shaded."""
    cells = [c for c in pick_timeline_cells(repeats, timeline_cells) if c in timelines]
    if not cells:
        why = "telemetry_hz is 0" if (repeats["status"] == "ok").any() else no_cell_ok(repeats)
        return not_drawn(out_dir, "timelines", f"no telemetry timeline: {why}")
    fig, axes = plt.subplots(len(cells), 1, figsize=(11, 2.4 * len(cells)), squeeze=False)
    for ax, cell in zip(axes[:, 0], cells, strict=True):
        tl = pd.read_csv(timelines[cell])
        win = tl[tl["phase"] == "window"]
        if len(win):
            ax.axvspan(win["s"].min(), win["s"].max(), color="#eeeeee", label="timed window")
        for col in [c for c in tl.columns if c.endswith("_util") and c.startswith("gpu")]:
            ax.plot(tl["s"], tl[col], lw=1, label=col.replace("_util", " util %"))
        ax.plot(tl["s"], tl["cpu_mean"], lw=1, color="k", label="CPU % (mean of cores)")
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax2 = ax.twinx()
        read = "disk_read_mb_s" if "disk_read_mb_s" in tl and tl["disk_read_mb_s"].fillna(0).any() else "proc_read_mb_s"
        if read in tl:
            ax2.plot(
                tl["s"],
                tl[read],
                lw=1,
                color="#c44e52",
                ls="--",
                label="device read MB/s" if read == "disk_read_mb_s" else "read() MB/s (cell processes)",
            )
            ax2.set_ylabel("MB/s")
        ax.set_title(cell, fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower right", ncol=3)
    axes[-1][0].set_xlabel("seconds since the cell's processes started")
    fig.suptitle("Resource timelines (sampled about 10 Hz; shaded: the timed window)")
    fig.tight_layout()
    save(fig, out_dir, "timelines")
    return None


def tier_probe(probe: pd.DataFrame, out_dir: Path) -> str | None:
    """Each tier's measured read rate (files/s, cold) with 1 and N readers; for an emulated tier the device model's
    prediction as a black tick."""
    failed = probe[probe["Error"].notna()] if "Error" in probe else probe.iloc[:0]
    probe = probe[probe["Files/s"].notna()] if "Files/s" in probe else probe
    if probe.empty:
        errors = "; ".join(f"{r['Tier']}: {r['Error']}" for _, r in failed.iterrows())
        return not_drawn(out_dir, "tier_probe", "no tier probe result" + (f" ({errors})" if errors else ""))
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * probe["Tier"].nunique() + 3), 3.4))
    if len(failed):
        ax.text(0, -0.25, "not probed: " + ", ".join(failed["Tier"]), transform=ax.transAxes, fontsize=8)
    p = probe.copy()
    p["readers"] = p["Readers"].astype(str) + " reader" + np.where(p["Readers"] > 1, "s", "")
    p["tier"] = p["Tier"] + " (" + p["Kind"] + ")"
    sns.barplot(data=p, x="tier", y="Files/s", hue="readers", ax=ax)
    hues = list(dict.fromkeys(p["readers"]))
    tiers = list(dict.fromkeys(p["tier"]))
    width = 0.8 / len(hues)
    for _, r in p[p["Predicted files/s"].notna()].iterrows():
        x = tiers.index(r["tier"]) - 0.4 + width * (hues.index(r["readers"]) + 0.5)
        ax.plot([x - width / 2, x + width / 2], [r["Predicted files/s"]] * 2, color="k", lw=2)
    ax.set_yscale("log")
    ax.set_xlabel("")
    ax.set_title("Tier read rate, cold (whole files; black: the device model's prediction)")
    save(fig, out_dir, "tier_probe")
    return None
