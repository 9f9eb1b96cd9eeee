"""The figures across models: which loader feeds which model, and the sharing model's predictions."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..columns import LOADER_ALONE, SETUP
from ..rows import device_text, trains
from .common import interval, not_drawn, of_config, save

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")  # one per model (then again)


def spread_labels(ys: list[float], low: float, high: float, gap: float = 0.05) -> list[float]:
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
    t = table
    t = t[pd.to_numeric(t["samples_per_s"], errors="coerce") > 0]
    alone = t[(t["model"] == LOADER_ALONE) & (t["loader"] != "synthetic")]
    ceilings = t[(t["loader"] == "synthetic") & trains(t)]
    configs = [key for key, _ in alone.groupby(SETUP, sort=False) if key in set(ceilings.groupby(SETUP).groups)]
    if not configs:
        why = (
            "no loader alone (model none) measured"
            if alone.empty
            else "no model's compute ceiling (a synthetic cell that trains) measured at the loaders' GPUs, batch, "
            "precision and parallel mode"
        )
        return not_drawn(out_dir, "loader_alone", why)
    models = list(dict.fromkeys(ceilings["model"]))
    model_colors = dict(zip(models, sns.color_palette("dark", len(models)), strict=True))
    n_bars = max(len(of_config(alone, c)) for c in configs)
    fig, axes = plt.subplots(len(configs), 1, figsize=(max(7.5, 0.7 * n_bars + 4.5), 4.6 * len(configs)), squeeze=False)
    for ax, key in zip(axes[:, 0], configs, strict=True):
        bars, lines = of_config(alone, key), of_config(ceilings, key)
        tiers = list(dict.fromkeys(bars["tier"]))
        loaders = list(dict.fromkeys(bars["loader"]))
        width = 0.8 / len(tiers)
        tier_colors = dict(zip(tiers, sns.color_palette("pastel", len(tiers)), strict=True))
        for j, tier in enumerate(tiers):
            b = bars[bars["tier"] == tier]
            v, lo, hi = interval(b)
            x = np.array([loaders.index(x) for x in b["loader"]]) - 0.4 + width * (j + 0.5)
            ax.bar(x, v, width=width * 0.95, color=tier_colors[tier], edgecolor="#555555", lw=0.6, label=tier)
            ax.errorbar(x, v, yerr=[v - lo, hi - v], fmt="none", ecolor="k", capsize=3, lw=1)
        # each model's ceiling: the fastest synthetic cell of the configuration, its interval as a band
        lines = lines.loc[lines.groupby("model")["samples_per_s"].idxmax()]
        lines = lines.sort_values("samples_per_s")
        v, lo, hi = interval(lines)
        for model, y, y_lo, y_hi in zip(lines["model"], v, lo, hi, strict=True):
            ax.axhspan(y_lo, y_hi, color=model_colors[model], alpha=0.12, lw=0)
            ax.axhline(y, color=model_colors[model], lw=1.4, ls="--")
        ax.set_yscale("log")
        every = np.concatenate([interval(bars)[1], interval(bars)[2], lo, hi])
        ax.set_ylim(every.min() / 1.6, every.max() * 1.6)
        ax.set_xlim(-0.6, len(loaders) - 0.4)
        ax.set_xticks(range(len(loaders)), loaders, rotation=20 if len(loaders) > 4 else 0)
        low, high = np.log10(ax.get_ylim())
        for model, y, at in zip(lines["model"], v, spread_labels(list(np.log10(v)), low, high), strict=True):
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
    save(fig, out_dir, "loader_alone")
    return None


def predicted(table: pd.DataFrame, out_dir: Path) -> str | None:
    """Each cell's measured Samples/s (with its 95% interval) against the rate the sharing model predicts for it, log-
    log: colour the loader, marker the model, hollow the cells the model was fitted on, filled those that check it;
    the line y = x and a band of +-10%; the median |error| of the check cells in the title. Drawn only where a
    measured cell has a prediction."""
    t = table
    why = "no measured cell has a predicted rate (it needs each loader alone and each model's ceiling measured)"
    if "predicted" not in t:
        return not_drawn(out_dir, "predicted", why)
    pred = pd.to_numeric(t["predicted"], errors="coerce")
    t = t[(pred > 0) & (pd.to_numeric(t["samples_per_s"], errors="coerce") > 0)].copy()
    if t.empty:
        return not_drawn(out_dir, "predicted", why)
    t["predicted"] = pd.to_numeric(t["predicted"], errors="coerce")
    role = t.get("prediction_role", pd.Series("check", index=t.index)).fillna("check").astype(str)
    loaders = list(dict.fromkeys(t["loader"]))
    models = list(dict.fromkeys(t["model"]))
    colors = dict(zip(loaders, sns.color_palette("tab10", len(loaders)), strict=True))
    markers = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(models)}
    fig, ax = plt.subplots(figsize=(7.5, 6))
    _, lo, hi = interval(t)
    every = np.concatenate([t["predicted"].to_numpy(dtype=float), lo, hi])
    span = np.array([every.min() / 1.3, every.max() * 1.3])
    ax.fill_between(span, span * 0.9, span * 1.1, color="#dddddd", lw=0, label="+-10%")
    ax.plot(span, span, color="k", lw=0.8, label="measured = predicted")
    for (loader, model, fit), g in t.groupby([t["loader"], t["model"], role == "fit"], sort=False):
        gv, glo, ghi = interval(g)
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
    save(fig, out_dir, "predicted")
    return None
