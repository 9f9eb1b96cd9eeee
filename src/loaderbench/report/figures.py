"""Figures from the tables (seaborn; PNG and SVG): one function per figure of `figure_list.REGISTRY`, named as
the figure and called with the inputs the registry gives it."""

from __future__ import annotations

import json
import multiprocessing
import os
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from loaderbench.core.util import atomic_write_text, writing

from .aggregate import seed_table_frame
from .columns import DEFAULT_MODEL, LOADER_ALONE, device_text, device_texts, label, read_table, trains, with_model
from .figure_list import FORMATS, INDEX, REGISTRY

MAX_TIMELINES = 6


def _relabel(fig) -> None:
    """The figures draw from the program's column names; what the reader sees are their labels (columns.label):
    axis labels, legend titles and the colour bar's label."""
    for ax in fig.axes:
        ax.set_xlabel(label(ax.get_xlabel()))
        ax.set_ylabel(label(ax.get_ylabel()))
        if ax.get_legend() is not None:
            ax.get_legend().set_title(label(ax.get_legend().get_title().get_text()))
    for legend in fig.legends:  # seaborn's figure-level legends
        legend.set_title(label(legend.get_title().get_text()))


def _suptitle(fig, text: str) -> None:
    """The figure's title, wrapped to the figure's width (a grid of one panel is narrower than its title)."""
    fig.suptitle(textwrap.fill(text, max(40, int(fig.get_size_inches()[0] * 9))), y=1.0, va="bottom")


def _save(fig, out_dir: Path, name: str) -> None:
    """The figure as `<name>.<ext>` per format, each through a temporary file that a failed write removes (WriteError
    names the figure)."""
    _relabel(fig)
    for ext in FORMATS:
        tmp, path = out_dir / f".{name}.tmp.{ext}", out_dir / f"{name}.{ext}"
        with writing(path):
            try:
                fig.savefig(tmp, dpi=120, bbox_inches="tight", format=ext)
                tmp.replace(path)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    plt.close(fig)


def throughput(repeats: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s per loader (x) and tier (hue), one panel per batch size and precision; bars = median, whiskers = min-max."""
    repeats = with_model(repeats)
    ok = repeats[(repeats["status"] == "ok") & trains(repeats)].copy()
    if ok.empty:
        return _not_drawn(out_dir, "throughput", _no_training(repeats))
    ok["Batch / GPUs"] = _model_part(ok) + "batch " + ok["batch_size"].astype(str) + ", " + device_texts(ok)
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
    _suptitle(g.figure, f"Training throughput ({_models_text(ok)}): median of repeats, whiskers min-max")
    _save(g.figure, out_dir, "throughput")
    return None


def speed_heatmap(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Speed relative to the baseline cell, loader x tier rows against GPUs x batch x precision columns."""
    t = with_model(table)
    t = t[trains(t)].copy()  # the loader alone has no Speed
    if not pd.to_numeric(t["samples_per_s"], errors="coerce").notna().any():
        return _not_drawn(out_dir, "speed_heatmap", f"no Speed: {_no_training(table)}")
    if not pd.to_numeric(t["speed"], errors="coerce").notna().any():
        return _not_drawn(out_dir, "speed_heatmap", "no Speed: the baseline cell (config key 'baseline') has no result")
    t["row"] = _model_part(t, " / ") + t["loader"] + " / " + t["tier"]
    t["col"] = device_texts(t) + ", b" + t["batch_size"].astype(str) + ", " + t["precision"]
    t["text"] = [
        "" if pd.isna(v) else f"{v:.2f}" + (f"\n[{lo:.2f}, {hi:.2f}]" if pd.notna(lo) and pd.notna(hi) else "")
        for v, lo, hi in zip(
            t["speed"], t.get("speed_low", t["speed"] * np.nan), t.get("speed_high", t["speed"] * np.nan)
        )
    ]
    pivot = t.pivot_table(index="row", columns="col", values="speed", aggfunc="first")
    text = t.pivot_table(index="row", columns="col", values="text", aggfunc="first").reindex_like(pivot).fillna("")
    fig, ax = plt.subplots(figsize=(1.3 + 1.5 * pivot.shape[1], 0.9 + 0.6 * pivot.shape[0]))
    sns.heatmap(pivot, annot=text, fmt="", cmap="viridis", ax=ax, cbar_kws={"label": "speed"}, annot_kws={"size": 7})
    ax.set_title("Speed = Samples/s / baseline cell's Samples/s [95% interval]")
    ax.set_xlabel("")
    ax.set_ylabel("")
    _save(fig, out_dir, "speed_heatmap")
    return None


def seed_table(table: pd.DataFrame, out_dir: Path) -> str | None:
    """The seed's table of every cell, ok or not (as HTML too)."""
    if table.empty:
        (out_dir / "seed_table.html").unlink(missing_ok=True)
        return _not_drawn(out_dir, "seed_table", "no cell in the table")
    t = seed_table_frame(table)
    atomic_write_text(out_dir / "seed_table.html", t.to_html(index=False, classes="seed-table", border=0))
    fig, ax = plt.subplots(figsize=(14, 0.6 + 0.3 * len(t)))
    ax.set_axis_off()
    tab = ax.table(cellText=t.values, colLabels=list(t.columns), loc="center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(8)
    tab.scale(1, 1.3)
    _save(fig, out_dir, "seed_table")
    return None


def _model_part(t: pd.DataFrame, sep: str = ", ") -> pd.Series:
    """Each row's model followed by `sep` where the rows hold more than one model, else nothing: a panel or a row of a
    figure names its model only where there is a choice."""
    t = with_model(t)
    return t["model"].astype(str) + sep if t["model"].nunique() > 1 else pd.Series("", index=t.index)


def _models_text(t: pd.DataFrame) -> str:
    """The models of the rows, in words (MobileNetV2 where it is the only one)."""
    models = list(dict.fromkeys(with_model(t)["model"]))
    return "MobileNetV2" if models == [DEFAULT_MODEL] else ", ".join(map(str, models))


def _label(t: pd.DataFrame) -> pd.Series:
    return (
        _model_part(t)
        + device_texts(t)
        + " x b"
        + t["batch_size"].astype(str)
        + ", "
        + t["precision"]
        + ", "
        + t["parallel"]
    )


def stall_bars(diagnosis: pd.DataFrame, out_dir: Path) -> str | None:
    """Stacked ms/step per loader x tier: compute (synthetic), prep stall (RAM tier - compute), fetch stall
    (tier - RAM tier); one panel per GPUs/batch/precision/parallel."""
    d = diagnosis[
        (diagnosis["loader"] != "synthetic") & pd.to_numeric(diagnosis["step_ms"], errors="coerce").notna()
    ].copy()
    if d.empty:
        trained = pd.to_numeric(diagnosis["samples_per_s"], errors="coerce").notna() & trains(diagnosis)
        why = "no loader cell with a measured step" if trained.any() else _no_training(diagnosis)
        return _not_drawn(out_dir, "stall_bars", f"{why}: nothing to attribute")
    d["config"] = _label(d)
    configs = list(dict.fromkeys(d["config"]))
    fig, axes = plt.subplots(
        len(configs), 1, figsize=(max(6, 0.7 * d.groupby("config").size().max() + 2), 3.2 * len(configs)), squeeze=False
    )
    colors = {"compute_only_ms": "#4c72b0", "prep_stall_ms": "#dd8452", "fetch_stall_ms": "#c44e52"}
    for ax, cfg in zip(axes[:, 0], configs):
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
        for i, (lab, top) in enumerate(zip(g["bottleneck"], np.fmax(bottom, np.nan_to_num(step)))):
            ax.text(i, top * 1.02, lab, ha="center", va="bottom", fontsize=7, rotation=90 if crowded else 0)
        ax.set_ylim(0, (1.45 if crowded else 1.2) * np.nanmax(np.fmax(bottom, np.nan_to_num(step))) or 1)
        ax.set_ylabel("ms per step")
        ax.set_title(cfg)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Where a training step's time goes (stall attribution after DS-Analyzer)")
    fig.tight_layout()
    _save(fig, out_dir, "stall_bars")
    return None


def au_bars(table: pd.DataFrame, out_dir: Path) -> str | None:
    """AU (Samples/s over the synthetic ceiling) per loader and tier, one panel per configuration."""
    table = with_model(table)
    t = table[(table["loader"] != "synthetic") & trains(table)].copy()
    if t.empty or not t["au"].notna().any():
        why = (
            _no_training(table)
            if not (pd.to_numeric(table["samples_per_s"], errors="coerce").notna() & trains(table)).any()
            else "no measured synthetic cell (the ceiling) at the loaders' GPUs, batch and precision (add `synthetic` "
            "to loaders)"
        )
        return _not_drawn(out_dir, "au_bars", f"no AU: {why}")
    t["config"] = _label(t)
    g = sns.catplot(
        data=_with_ends(t, "au"),
        kind="bar",
        x="loader",
        y="au",
        hue="tier",
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
    for ax in g.axes.flat:
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.axhline(0.9, color="grey", lw=0.6, ls=":")
        ax.tick_params(axis="x", labelrotation=30)
    _suptitle(
        g.figure,
        "AU: share of the compute ceiling each loader delivers, whiskers its 95% interval (dotted: 0.9; above it "
        "the model's compute is the limit)",
    )
    _save(g.figure, out_dir, "au_bars")
    return None


def memory(table: pd.DataFrame, repeats: pd.DataFrame, out_dir: Path) -> str | None:
    """Peak GPU memory of the main card and the other cards per loader (the seed's 3.2.4); on a machine without
    a GPU, the peak host memory (RSS) of the cell's process tree instead, which is then what a loader costs."""
    t = table.copy()
    t["config"] = _label(t)
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
        return _not_drawn(out_dir, "memory", "no cell finished ok with its peak memory recorded")
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
    _suptitle(g.figure, title)
    _save(g.figure, out_dir, "memory")
    return None


def batch_effect(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s against the per-GPU batch size per loader, one panel per tier and precision (the seed's 3.2.3)."""
    t = table[table["samples_per_s"].notna()].copy()
    if t.empty:
        return _not_drawn(out_dir, "batch_effect", _no_cell_ok(table))
    t["panel"] = _model_part(t) + t["tier"] + ", " + t["precision"] + ", " + device_texts(t)
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
    _suptitle(g.figure, f"Batch-size effect per loader{note}")
    _save(g.figure, out_dir, "batch_effect")
    return None


def scaling(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Samples/s against GPU count per loader with the ideal (linear from 1 GPU) line; one panel per tier,
    batch, precision and parallel mode."""
    t = table[table["samples_per_s"].notna()].copy()
    if t.empty:
        return _not_drawn(out_dir, "scaling", _no_cell_ok(table))
    t["panel"] = (
        _model_part(t) + t["tier"] + ", b" + t["batch_size"].astype(str) + ", " + t["precision"] + ", " + t["parallel"]
    )
    loaders = sorted(t["loader"].unique())
    palette = dict(zip(loaders, sns.color_palette(n_colors=len(loaders))))
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
            v, lo, hi = _interval(cells)
            ax.errorbar(cells["gpus"], v, yerr=[v - lo, hi - v], fmt="none", ecolor=palette[loader], capsize=3, lw=1)
        p = t[(t["panel"] == panel) & (t["gpus"] == 1)]
        counts = sorted(t["gpus"].unique())
        for _, r in p.iterrows():
            ax.plot(counts, [r["samples_per_s"] * n for n in counts], ls=":", lw=0.8, color="grey")
        ax.set_xticks(counts)
    note = "" if t["gpus"].nunique() > 1 else " (this grid has one GPU count: add more under gpus)"
    _suptitle(g.figure, f"Scaling with GPUs, whiskers 95% intervals; dotted: ideal (n x the 1-GPU cell){note}")
    _save(g.figure, out_dir, "scaling")
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
        why = "telemetry_hz is 0" if (repeats["status"] == "ok").any() else _no_cell_ok(repeats)
        return _not_drawn(out_dir, "timelines", f"no telemetry timeline: {why}")
    fig, axes = plt.subplots(len(cells), 1, figsize=(11, 2.4 * len(cells)), squeeze=False)
    for ax, cell in zip(axes[:, 0], cells):
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
    _save(fig, out_dir, "timelines")
    return None


def tier_probe(probe: pd.DataFrame, out_dir: Path) -> str | None:
    """Each tier's measured read rate (files/s, cold) with 1 and N readers; for an emulated tier the device model's
    prediction as a black tick."""
    failed = probe[probe["Error"].notna()] if "Error" in probe else probe.iloc[:0]
    probe = probe[probe["Files/s"].notna()] if "Files/s" in probe else probe
    if probe.empty:
        errors = "; ".join(f"{r['Tier']}: {r['Error']}" for _, r in failed.iterrows())
        return _not_drawn(out_dir, "tier_probe", "no tier probe result" + (f" ({errors})" if errors else ""))
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
    _save(fig, out_dir, "tier_probe")
    return None


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")  # one per model (then again)
CONFIG = ["gpus", "batch_size", "precision", "parallel"]


def _interval(t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's median Samples/s and the low and high ends of its 95% interval (`halfwidth`: value / (1 + hw) to
    value x (1 + hw)); no interval known: both ends the median."""
    v = pd.to_numeric(t["samples_per_s"], errors="coerce").to_numpy(dtype=float)
    hw = pd.to_numeric(t.get("halfwidth", pd.Series(np.nan, index=t.index)), errors="coerce").fillna(0).to_numpy()
    return v, v / (1 + hw), v * (1 + hw)


def _with_ends(t: pd.DataFrame, col: str) -> pd.DataFrame:
    """Each row three times, `col` at its interval's low end, its value and its high end (`<col>_low`, `<col>_high`;
    the value where unknown): a bar drawn with `estimator=np.median, errorbar=("pi", 100)` then stands at the value
    with whiskers at the interval's ends."""
    ends = [t.assign(**{col: t.get(f"{col}_{end}", t[col]).fillna(t[col])}) for end in ("low", "high")]
    return pd.concat([t, *ends], ignore_index=True)


def _of_config(t: pd.DataFrame, key: tuple) -> pd.DataFrame:
    """The rows of `t` at the GPUs, batch, precision and parallel mode `key` (CONFIG's order)."""
    return t[np.logical_and.reduce([t[k] == v for k, v in zip(CONFIG, key)])]


def _not_drawn(out_dir: Path, name: str, reason: str) -> str:
    """No figure `name` in `out_dir` (one left by an earlier grid removed): its inputs do not hold what it shows, for
    `reason` (returned)."""
    for ext in FORMATS:
        (out_dir / f"{name}.{ext}").unlink(missing_ok=True)
    return reason


def _counts(t: pd.DataFrame) -> str:
    """How many of the rows failed and were skipped, in words, with where their reasons are ("" where `t` has no
    status: the diagnosis)."""
    if "status" not in t:
        return ""
    status = t["status"].value_counts()
    said = ", ".join(f"{status[s]} {s}" for s in ("failed", "skipped", "partial") if status.get(s, 0))
    return f" ({said}; each cell's reason under Cells)" if said else ""


def _no_cell_ok(t: pd.DataFrame) -> str:
    """Why a figure of measured rates has nothing to draw: no cell of `t` finished ok."""
    return f"no cell finished ok{_counts(t)}"


def _no_training(t: pd.DataFrame) -> str:
    """Why a figure of training has nothing to draw: the cells of `t` ran the loader alone, or none that trained
    finished ok."""
    t = with_model(t)
    training = t[trains(t)]
    if training.empty:
        return "nothing trained: every cell ran the loader alone (model none)"
    return f"no training cell finished ok{_counts(training)}"


def _spread_labels(ys: list[float], low: float, high: float, gap: float = 0.05) -> list[float]:
    """Positions (log10) for labels wanted at `ys` (log10, ascending) at least `gap` of the range [low, high] apart,
    each as near its own as the others let it be."""
    step = gap * max(high - low, 1e-9)
    out = []
    for y in ys:
        out.append(max(y, out[-1] + step) if out else y)
    over = out[-1] - high if out else 0
    if over > 0:  # pushed above the top: the whole stack moves down, never below the wanted spacing
        out = [y - over for y in out]
        for i in range(len(out) - 2, -1, -1):
            out[i] = min(out[i], out[i + 1] - step)
    return out


def loader_alone(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Which loader feeds which model on this host: every loader's rate alone (model `none`: median, 95% interval as
    whiskers) as bars, against every model's compute ceiling (its synthetic cell, with its interval as a band) as a
    line named by the model; one panel per GPUs, batch, precision and parallel mode holding both. A bar under a
    model's line starves that model. Drawn only where the table holds both."""
    t = with_model(table)
    t = t[pd.to_numeric(t["samples_per_s"], errors="coerce") > 0]
    alone = t[(t["model"] == LOADER_ALONE) & (t["loader"] != "synthetic")]
    ceilings = t[(t["loader"] == "synthetic") & trains(t)]
    configs = [key for key, _ in alone.groupby(CONFIG, sort=False) if key in set(ceilings.groupby(CONFIG).groups)]
    if not configs:
        why = (
            "no loader alone (model none) measured"
            if alone.empty
            else "no model's compute ceiling (a synthetic cell that trains) measured at the loaders' GPUs, batch, "
            "precision and parallel mode"
        )
        return _not_drawn(out_dir, "loader_alone", why)
    models = list(dict.fromkeys(ceilings["model"]))
    model_colors = dict(zip(models, sns.color_palette("dark", len(models))))
    n_bars = max(len(_of_config(alone, c)) for c in configs)
    fig, axes = plt.subplots(len(configs), 1, figsize=(max(7.5, 0.7 * n_bars + 4.5), 4.6 * len(configs)), squeeze=False)
    for ax, key in zip(axes[:, 0], configs):
        bars, lines = _of_config(alone, key), _of_config(ceilings, key)
        tiers = list(dict.fromkeys(bars["tier"]))
        loaders = list(dict.fromkeys(bars["loader"]))
        width = 0.8 / len(tiers)
        tier_colors = dict(zip(tiers, sns.color_palette("pastel", len(tiers))))
        for j, tier in enumerate(tiers):
            b = bars[bars["tier"] == tier]
            v, lo, hi = _interval(b)
            x = np.array([loaders.index(x) for x in b["loader"]]) - 0.4 + width * (j + 0.5)
            ax.bar(x, v, width=width * 0.95, color=tier_colors[tier], edgecolor="#555555", lw=0.6, label=tier)
            ax.errorbar(x, v, yerr=[v - lo, hi - v], fmt="none", ecolor="k", capsize=3, lw=1)
        # each model's ceiling: the fastest synthetic cell of the configuration, its interval as a band
        lines = lines.loc[lines.groupby("model")["samples_per_s"].idxmax()]
        lines = lines.sort_values("samples_per_s")
        v, lo, hi = _interval(lines)
        for model, y, y_lo, y_hi in zip(lines["model"], v, lo, hi):
            ax.axhspan(y_lo, y_hi, color=model_colors[model], alpha=0.12, lw=0)
            ax.axhline(y, color=model_colors[model], lw=1.4, ls="--")
        ax.set_yscale("log")
        every = np.concatenate([_interval(bars)[1], _interval(bars)[2], lo, hi])
        ax.set_ylim(every.min() / 1.6, every.max() * 1.6)
        ax.set_xlim(-0.6, len(loaders) - 0.4)
        ax.set_xticks(range(len(loaders)), loaders, rotation=20 if len(loaders) > 4 else 0)
        low, high = np.log10(ax.get_ylim())
        for model, y, at in zip(lines["model"], v, _spread_labels(list(np.log10(v)), low, high)):
            ax.annotate(
                f"{model} ({y:.0f}/s)",
                xy=(1.0, y),
                xycoords=ax.get_yaxis_transform(),
                xytext=(1.02, 10**at),
                textcoords=ax.get_yaxis_transform(),
                va="center",
                fontsize=8,
                color=model_colors[model],
                arrowprops={"arrowstyle": "-", "color": model_colors[model], "lw": 0.6},
            )
        hosts = sorted({h for h in pd.concat([bars, lines]).get("host", pd.Series(dtype=object)) if isinstance(h, str)})
        gpus, batch, precision, parallel = key
        devices = pd.concat([bars, lines]).get("device", pd.Series(dtype=object))
        on = device_text(gpus, ",".join(d for d in devices if isinstance(d, str)))
        ax.set_title(
            f"{'; '.join(hosts) or 'host not recorded'}: {on}, batch {batch}, {precision}, {parallel}",
            fontsize=9,
        )
        ax.set_ylabel("samples/s (log)")
        ax.set_xlabel("")
        ax.legend(title="loader alone, tier", fontsize=7, title_fontsize=7, loc="upper left")
    fig.suptitle(
        "Which loader feeds which model on this host\nbars: each loader alone (95% interval); dashed: each model's "
        "compute ceiling (band: its interval)\na bar under a model's line starves that model",
        fontsize=10,
    )
    fig.tight_layout()
    _save(fig, out_dir, "loader_alone")
    return None


def predicted(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Each cell's measured Samples/s (with its 95% interval) against the rate the sharing model predicts for it, log-
    log: colour the loader, marker the model, hollow the cells the model was fitted on, filled those that check it;
    the line y = x and a band of +-10%; the median |error| of the check cells in the title. Drawn only where a
    measured cell has a prediction."""
    t = with_model(table)
    why = "no measured cell has a predicted rate (it needs each loader alone and each model's ceiling measured)"
    if "predicted" not in t:
        return _not_drawn(out_dir, "predicted", why)
    pred = pd.to_numeric(t["predicted"], errors="coerce")
    t = t[(pred > 0) & (pd.to_numeric(t["samples_per_s"], errors="coerce") > 0)].copy()
    if t.empty:
        return _not_drawn(out_dir, "predicted", why)
    t["predicted"] = pd.to_numeric(t["predicted"], errors="coerce")
    role = t.get("prediction_role", pd.Series("check", index=t.index)).fillna("check").astype(str)
    loaders = list(dict.fromkeys(t["loader"]))
    models = list(dict.fromkeys(t["model"]))
    colors = dict(zip(loaders, sns.color_palette("tab10", len(loaders))))
    markers = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)}
    fig, ax = plt.subplots(figsize=(7.5, 6))
    _, lo, hi = _interval(t)
    every = np.concatenate([t["predicted"].to_numpy(dtype=float), lo, hi])
    span = np.array([every.min() / 1.3, every.max() * 1.3])
    ax.fill_between(span, span * 0.9, span * 1.1, color="#dddddd", lw=0, label="+-10%")
    ax.plot(span, span, color="k", lw=0.8, label="measured = predicted")
    for (loader, model, fit), g in t.groupby([t["loader"], t["model"], role == "fit"], sort=False):
        gv, glo, ghi = _interval(g)
        c = colors[loader]
        ax.errorbar(g["predicted"], gv, yerr=[gv - glo, ghi - gv], fmt="none", ecolor=c, lw=0.8, alpha=0.7)
        ax.scatter(
            g["predicted"], gv, marker=markers[model], s=46, edgecolors=c, facecolors="none" if fit else c, lw=1.3
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*span)
    ax.set_ylim(*span)
    ax.set_xlabel("predicted samples/s")
    ax.set_ylabel("measured samples/s (median, 95% interval)")
    check = t[role == "check"]
    err = pd.to_numeric(check.get("prediction_error", pd.Series(dtype=float)), errors="coerce").abs().dropna()
    told = (
        f"median |error| of the {len(err)} check cells {100 * err.median():.1f}%"
        if len(err)
        else "no check cell: every predicted cell was used to fit the model"
    )
    ax.set_title(f"Measured against predicted samples/s: {told}", fontsize=10)
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], ls="", marker="o", color=colors[x]) for x in loaders]
    labels += [f"loader: {x}" for x in loaders]
    handles += [Line2D([], [], ls="", marker=markers[m], color="#444444", mfc="none") for m in models]
    labels += [f"model: {m}" for m in models]
    handles += [
        Line2D([], [], ls="", marker="o", color="#444444", mfc="none"),
        Line2D([], [], ls="", marker="o", color="#444444"),
    ]
    labels += ["fitted on (hollow)", "checked (filled)"]
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    _save(fig, out_dir, "predicted")
    return None


def make_figures(
    table_csv: Path,
    repeats_csv: Path,
    out_dir: Path,
    diagnosis_csv: Path | None = None,
    probe_csv: Path | None = None,
    timeline_csvs: list[Path] = (),
    timeline_cells: list[str] | None = None,
) -> dict:
    """Every figure of the registry the tables can draw, in its order, into `out_dir`, and its index (`INDEX`: those
    drawn and why each other one was not; returned). Without `diagnosis_csv` the diagnosis is computed from the table;
    without `probe_csv` there is no tier-probe figure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="notebook")
    table = read_table(table_csv)
    if diagnosis_csv:
        diagnosis = read_table(diagnosis_csv, "diagnosis")
    else:
        from .diagnose import diagnose

        diagnosis = diagnose(table)
    inputs = {
        "table": table,
        "repeats": read_table(repeats_csv, "repeats"),
        "diagnosis": diagnosis,
        "probe": pd.read_csv(probe_csv) if probe_csv else pd.DataFrame(),
        "timelines": {Path(p).stem: Path(p) for p in timeline_csvs},
        "timeline_cells": timeline_cells,
    }
    jobs = [(fig.name, {k: inputs[k] for k in fig.inputs}, out_dir) for fig in REGISTRY]
    workers = min(len(jobs), len(os.sched_getaffinity(0)))
    if workers < 2:
        reasons = [_draw(*job) for job in jobs]
    else:
        # Drawing is CPU-bound and the figures are independent: one process per CPU (forked: matplotlib and the
        # theme are set up already) nearly halves the job on 2 cores. Failures surface in the registry's order.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            reasons = [future.result() for future in [pool.submit(_draw, *job) for job in jobs]]
    index = {
        "drawn": [fig.name for fig, why in zip(REGISTRY, reasons) if why is None],
        "not_drawn": {fig.name: why for fig, why in zip(REGISTRY, reasons) if why is not None},
    }
    atomic_write_text(out_dir / INDEX, json.dumps(index, indent=2) + "\n")
    return index


def _draw(name: str, kwargs: dict, out_dir: Path) -> str | None:
    return globals()[name](**kwargs, out_dir=out_dir)
