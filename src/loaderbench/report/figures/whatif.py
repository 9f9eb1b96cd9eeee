"""The what-if's matrix as a figure: every loader x model predicted from its parts, the checked pairs with their
measured rate and error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.patches import Rectangle
from matplotlib.ticker import NullFormatter, ScalarFormatter

from .common import not_drawn, save

NAME = "whatif_matrix"
PANEL = ["tier", "gpus", "batch_size", "precision", "parallel"]  # one panel per configuration
# what the figure reads of the matrix table (whatif.matrix): a row per loader x model x configuration
NEEDS = [*PANEL, "loader", "model", "status", "predicted", "predicted_lo", "predicted_hi", "measured", "error", "class"]
MEASURED, UNCHECKED = "measured", "predicted, unchecked"


def whatif_matrix(whatif: pd.DataFrame, out_dir: Path) -> str | None:
    """A heatmap of loaders x models per configuration (tier, GPUs, batch, precision, parallel mode), coloured by the
    predicted samples/s (log), each cell giving it with its interval and the part that binds; a checked pair framed,
    with its measured rate and error; a GPU count this host never measured hatched as predicted, unchecked. Drawn
    only where the matrix has rows."""
    if whatif.empty:
        return not_drawn(
            out_dir,
            NAME,
            "no loader x model has both its parts measured (the loader alone, model none, and the "
            "model's ceiling, synthetic, at one configuration)",
        )
    if missing := [c for c in NEEDS if c not in whatif]:
        return not_drawn(out_dir, NAME, f"the matrix table lacks the columns {', '.join(missing)}")
    t = whatif.copy()
    for col in ("predicted", "predicted_lo", "predicted_hi", "measured", "error"):
        t[col] = pd.to_numeric(t[col], errors="coerce")
    panels = list(t.groupby(PANEL, sort=False))
    loaders, models = list(dict.fromkeys(t["loader"])), list(dict.fromkeys(t["model"]))
    rates = t["predicted"][t["predicted"] > 0]
    norm = LogNorm(rates.min(), max(rates.max(), rates.min() * 1.01)) if len(rates) else None
    width, height = 2.0 * len(models) + 3.0, 0.95 * len(loaders) + 1.2
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(width, height * len(panels) + 0.6), squeeze=False, layout="constrained"
    )
    image = None
    for ax, (key, rows) in zip(axes[:, 0], panels, strict=True):
        image = _panel(ax, rows, loaders, models, norm)
        tier, gpus, batch, precision, parallel = key
        # the matrix names GPU counts, not devices: g1 is the one device of a CPU host too, as in a cell's id
        ax.set_title(f"{tier}, g{gpus}, batch {batch}, {precision}, {parallel}", fontsize=9)
    if image is not None and norm is not None:
        bar = fig.colorbar(image, ax=axes[:, 0].tolist(), label="predicted samples/s (log)", shrink=0.8)
        bar.ax.yaxis.set_major_formatter(ScalarFormatter())
        bar.ax.yaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks of a log axis overlap
    checked = t[t["status"] == MEASURED]
    said = [
        f"{len(checked)} checked pair(s) framed: measured samples/s and its error against the prediction"
        if len(checked)
        else "No pair checked (whatif.checks measures some)"
    ]
    if (t["status"] == UNCHECKED).any():
        said.append("hatched: predicted, unchecked (no such GPU count measured on this host)")
    title = (
        f"What if: every loader x model predicted from its parts [interval] and the part that binds. {'; '.join(said)}"
    )
    fig.suptitle(textwrap.fill(title, int(width * 15)), fontsize=9)
    save(fig, out_dir, NAME)
    return None


def _panel(ax, rows: pd.DataFrame, loaders: list[str], models: list[str], norm):
    """One configuration's loaders x models on `ax`; the image (for the colour bar)."""
    grid = np.full((len(loaders), len(models)), np.nan)
    cells = rows.to_dict("records")  # not itertuples: `class` is no attribute name
    for r in cells:
        grid[loaders.index(r["loader"]), models.index(r["model"])] = r["predicted"] if r["predicted"] > 0 else np.nan
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", norm=norm, aspect="auto")
    for r in cells:
        i, j = loaders.index(r["loader"]), models.index(r["model"])
        dark = norm is not None and r["predicted"] > 0 and norm(r["predicted"]) < 0.6
        ax.text(j, i, _text(r), ha="center", va="center", fontsize=7, color="white" if dark else "black")
        if r["status"] == MEASURED:
            ax.add_patch(Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, lw=2.2, ec="#d62728"))
        elif r["status"] == UNCHECKED:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", lw=0, ec="#bbbbbb"))
    ax.set_xticks(range(len(models)), models, rotation=15, fontsize=8)
    ax.set_yticks(range(len(loaders)), loaders, fontsize=8)
    ax.grid(False)
    return image


def _text(r: dict) -> str:
    """A cell's lines: the prediction [interval], the part that binds, and a checked pair's measured rate (error) or
    an unchecked GPU count's mark."""
    lines = [
        f"{_rate(r['predicted'])} [{_rate(r['predicted_lo'])}, {_rate(r['predicted_hi'])}]",
        r["class"] if isinstance(r["class"], str) else "-",
    ]
    if r["status"] == MEASURED and pd.notna(r["measured"]):
        err = f" ({100 * r['error']:+.0f}%)" if pd.notna(r["error"]) else ""
        lines.append(f"measured {_rate(r['measured'])}{err}")
    elif r["status"] == UNCHECKED:
        lines.append("predicted, unchecked")
    return "\n".join(lines)


def _rate(v) -> str:
    """A rate in samples/s: whole numbers from 100, three significant digits below."""
    if pd.isna(v):
        return "-"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
