"""What the figures share: saving a figure under its labels, its title, the reason it is not drawn, and the
parts of a panel's or an axis's name."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.util import writing

from ..columns import SETUP, label
from ..figure_list import FORMATS
from ..rows import device_texts, trains


def relabel(fig) -> None:
    """The figures draw from the program's column names; what the reader sees are their labels (columns.label):
    axis labels, legend titles and the colour bar's label."""
    for ax in fig.axes:
        ax.set_xlabel(label(ax.get_xlabel()))
        ax.set_ylabel(label(ax.get_ylabel()))
        if ax.get_legend() is not None:
            ax.get_legend().set_title(label(ax.get_legend().get_title().get_text()))
    for legend in fig.legends:  # seaborn's figure-level legends
        legend.set_title(label(legend.get_title().get_text()))


def suptitle(fig, text: str) -> None:
    """The figure's title, wrapped to the figure's width (a grid of one panel is narrower than its title)."""
    fig.suptitle(textwrap.fill(text, max(40, int(fig.get_size_inches()[0] * 9))), y=1.0, va="bottom")


def save(fig, out_dir: Path, name: str) -> None:
    """The figure as `<name>.<ext>` per format, each through a temporary file that a failed write removes (WriteError
    names the figure)."""
    relabel(fig)
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


def model_part(t: pd.DataFrame, sep: str = ", ") -> pd.Series:
    """Each row's model followed by `sep` where the rows hold more than one model, else nothing: a panel or a row of a
    figure names its model only where there is a choice."""
    return t["model"].astype(str) + sep if t["model"].nunique() > 1 else pd.Series("", index=t.index)


def models_text(t: pd.DataFrame) -> str:
    """The models of the rows, in words (MobileNetV2 where it is the only one)."""
    models = list(dict.fromkeys(t["model"]))
    return "MobileNetV2" if models == [DEFAULT_MODEL] else ", ".join(map(str, models))


def config_label(t: pd.DataFrame) -> pd.Series:
    return (
        model_part(t)
        + device_texts(t)
        + " x b"
        + t["batch_size"].astype(str)
        + ", "
        + t["precision"]
        + ", "
        + t["parallel"]
    )


def interval(t: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's median Samples/s and the low and high ends of its 95% interval (`halfwidth`: value / (1 + hw) to
    value x (1 + hw)); no interval known: both ends the median."""
    v = pd.to_numeric(t["samples_per_s"], errors="coerce").to_numpy(dtype=float)
    hw = pd.to_numeric(t.get("halfwidth", pd.Series(np.nan, index=t.index)), errors="coerce").fillna(0).to_numpy()
    return v, v / (1 + hw), v * (1 + hw)


def with_ends(t: pd.DataFrame, col: str) -> pd.DataFrame:
    """Each row three times, `col` at its interval's low end, its value and its high end (`<col>_low`, `<col>_high`;
    the value where unknown): a bar drawn with `estimator=np.median, errorbar=("pi", 100)` then stands at the value
    with whiskers at the interval's ends."""
    ends = [t.assign(**{col: t.get(f"{col}_{end}", t[col]).fillna(t[col])}) for end in ("low", "high")]
    return pd.concat([t, *ends], ignore_index=True)


def of_config(t: pd.DataFrame, key: tuple) -> pd.DataFrame:
    """The rows of `t` at the GPUs, batch, precision and parallel mode `key` (SETUP's order)."""
    return t[np.logical_and.reduce([t[k] == v for k, v in zip(SETUP, key, strict=True)])]


def not_drawn(out_dir: Path, name: str, reason: str) -> str:
    """No figure `name` in `out_dir` (one left by an earlier grid removed): its inputs do not hold what it shows, for
    `reason` (returned)."""
    for ext in FORMATS:
        (out_dir / f"{name}.{ext}").unlink(missing_ok=True)
    return reason


def counts(t: pd.DataFrame) -> str:
    """How many of the rows failed and were skipped, in words, with where their reasons are ("" where `t` has no
    status: the diagnosis)."""
    if "status" not in t:
        return ""
    status = t["status"].value_counts()
    said = ", ".join(f"{status[s]} {s}" for s in ("failed", "skipped", "partial") if status.get(s, 0))
    return f" ({said}; each cell's reason under Cells)" if said else ""


def no_cell_ok(t: pd.DataFrame) -> str:
    """Why a figure of measured rates has nothing to draw: no cell of `t` finished ok."""
    return f"no cell finished ok{counts(t)}"


def no_training(t: pd.DataFrame) -> str:
    """Why a figure of training has nothing to draw: the cells of `t` ran the loader alone, or none that trained
    finished ok."""
    training = t[trains(t)]
    if training.empty:
        return "nothing trained: every cell ran the loader alone (model none)"
    return f"no training cell finished ok{counts(training)}"
