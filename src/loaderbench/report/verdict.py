"""The answer first: per model, device (GPU count, or the CPU) and tier, what limits the training and the best measured fix, with how far to
trust it. The loader alone (model `none`) trains nothing and gets no verdict. A run with no verdict says why, from its
cells table: nothing trained (then the loader's rates alone), or no training cell finished ok (then how many failed or
were skipped, and their reasons).

For each (GPUs, tier) the reference is the baseline loader's cell there (at the baseline's batch, precision and
parallel mode where measured; without the baseline loader, the slowest cell): its bottleneck, AU and data wait say
what limits it. The best measured fix is the fastest cell of the same GPUs, tier and parallel mode (any loader, batch
or precision) that can carry a verdict (`diagnose.compare`: a contended or unconverged cell measured once cannot, nor
one that delivered more than its compute ceiling), against the reference with its 95% interval. A reference above its
ceiling is named implausible, with no limit made up for it.
How far to trust the group: its repeats, its cells' spread, its converged windows, its contended and its implausible
cells.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.cells import CONFIG_KEY_OF
from loaderbench.core.util import atomic_write_text

from .columns import baseline_cell, read_table
from .diagnose import WAIT_SHARE
from .recommend import compare, disturbed_once
from .rows import cell_name, device_text, number, on_gpu, read_flag, trains


def _describe(r: pd.Series) -> str:
    return f"{r['loader']} b{int(r['batch_size'])} {r['precision']}"


def verdicts(d: pd.DataFrame, baseline: dict) -> list[dict]:
    """One verdict per (model, GPUs, tier) of the diagnosis table `d` (`diagnose.diagnose`) with a measured real
    loader training the model."""
    ok = d[pd.to_numeric(d["samples_per_s"], errors="coerce").notna() & trains(d)]
    real = ok[ok["loader"] != "synthetic"]
    out = []
    for (model, gpus, tier), g in real.groupby(["model", "gpus", "tier"], sort=False):
        ref = _reference(g, baseline)
        others = g[(g["parallel"] == ref["parallel"]) & (g.index != ref.name)]
        faster = others[others["samples_per_s"].astype(float) > float(ref["samples_per_s"])]
        _, ref_why = compare(ref, ref)
        fix = _fix(ref, ref_why, faster)
        out.append(
            {
                "model": str(model),
                "gpus": int(gpus),
                "device": "gpu" if on_gpu(",".join(x for x in g.get("device", []) if isinstance(x, str))) else "cpu",
                "tier": str(tier),
                "reference": {
                    "cell": cell_name(ref),
                    "what": _describe(ref),
                    "samples_per_s": float(ref["samples_per_s"]),
                    "bottleneck": ref["bottleneck"],
                    "au": number(ref.get("au")),
                    "implausible": ref["bottleneck"] == "implausible",
                    "data_wait_ms": number(ref.get("data_wait_ms")),
                    "step_ms": number(ref.get("step_ms")),
                    "contended": read_flag(ref.get("contended")) is True,
                },
                "fix": fix,
                "rerun": _rerun(ref, ref_why, faster, fix),
                "trust": _trust(g),
            }
        )
    return out


def _reference(g: pd.DataFrame, baseline: dict) -> pd.Series:
    """The group's reference: the baseline loader's cell at the baseline's batch, precision and parallel mode where
    measured (else its first cell); without the baseline loader, the slowest cell."""
    base = baseline_cell(baseline)
    ref_rows = g[g["loader"] == base["loader"]]
    if len(ref_rows):
        at = ref_rows[(ref_rows["batch_size"] == base["batch_size"]) & (ref_rows["precision"] == base["precision"])]
        at = at if len(at) else ref_rows
        # the baseline's parallel mode where measured: the fix is sought in the reference's mode
        mode = at[at["parallel"] == base["parallel"]]
        ref = (mode if len(mode) else at).iloc[0]
    else:
        ref = g.loc[g["samples_per_s"].astype(float).idxmin()]
    return ref


def _fix(ref: pd.Series, ref_why: str | None, faster: pd.DataFrame) -> dict:
    """The best measured fix against the reference: the fastest of the `faster` cells that can carry a verdict (a
    contended or unconverged cell measured once cannot, nor an implausible one), not merely the fastest: that one is
    the likeliest to be a lucky window; or why there is none."""
    usable = [(r, q) for r, q in ((r, compare(r, ref)[0]) for _, r in faster.iterrows()) if q is not None]
    if ref_why is not None:
        return {"verdict": "left out", "text": f"left out: the reference {ref_why}"}
    if not len(faster):
        return {"verdict": "none faster", "text": "no faster cell measured"}
    if not usable:
        top = faster.loc[faster["samples_per_s"].astype(float).idxmax()]
        return {"verdict": "left out", "text": f"left out: {compare(top, ref)[1]} (and every other faster cell)"}
    best, q = max(usable, key=lambda rq: float(rq[0]["samples_per_s"]))
    measured = q.differs_from(1.0)
    return {
        "cell": cell_name(best),
        "what": _describe(best),
        "samples_per_s": float(best["samples_per_s"]),
        "verdict": "measured" if measured else "no measurable difference",
        "interval": q.to_dict(),
        "text": f"{_describe(best)}: {q.value:.2f}x [{q.low:.2f}, {q.high:.2f}]"
        + ("" if measured else ", no measurable difference"),
    }


def _rerun(ref: pd.Series, ref_why: str | None, faster: pd.DataFrame, fix: dict) -> list[str]:
    """The cells a second measurement may let carry the verdict: the reference, and the cells faster than the fix
    (every faster one where none could carry it), each measured once and contended or not converged."""
    beaten = float(fix["samples_per_s"]) if "samples_per_s" in fix else float(ref["samples_per_s"])
    blocked = [ref] if ref_why is not None else []
    blocked += [r for _, r in faster.iterrows() if float(r["samples_per_s"]) > beaten]
    return [cell_name(r) for r in blocked if disturbed_once(r) is not None]


def _trust(g: pd.DataFrame) -> dict:
    """How far to trust a group: its cells, repeats, median interval, converged windows, contended and implausible
    cells."""
    conv = [read_flag(x) for x in g.get("converged", [])]
    judged = [c for c in conv if c is not None]
    hw = [h for h in (number(x) for x in g.get("halfwidth", [])) if h is not None]
    reps = [int(x) for x in g.get("repeats_ok", []) if number(x) is not None]
    return {
        "cells": len(g),
        "repeats": [min(reps), max(reps)] if reps else None,
        "halfwidth_median": float(np.median(hw)) if hw else None,
        "converged": [sum(judged), len(judged)],
        "contended": int(sum(read_flag(x) is True for x in g.get("contended", []))),
        "implausible": int((g["bottleneck"] == "implausible").sum()),
    }


def write_verdict(d: pd.DataFrame, baseline: dict, out_dir: Path) -> None:
    """verdict.json in `out_dir`: the verdicts of the diagnosis table `d`."""
    atomic_write_text(Path(out_dir) / "verdict.json", json.dumps(verdicts(d, baseline), indent=2) + "\n")


def setting_text(loader: str, settings: dict) -> str:
    """A loader with settings other than its config's, named by their config keys as a fix names them:
    `dali-sc with step_stream_priority: high, dali.hw_decoder_load: 1.0`."""
    if not settings:
        return loader
    shown = [f"{CONFIG_KEY_OF.get(k, k)}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items()]
    return f"{loader} with {', '.join(shown)}"


def tuned_fix(loader: str, settings: dict, gain: dict | None) -> dict | None:
    """The fix a search of `loader`'s settings (`loaderbench tune`) found, as a verdict's fix: `settings` faster than
    the config's own by `gain` (a ratio's dict) beyond its 95% interval; None where it is not (no setting moved, or
    its gain is unknown or inside the interval)."""
    if not settings or not gain or gain["low"] <= 1.0:
        return None
    what = setting_text(loader, settings)
    return {
        "what": what,
        "verdict": "measured",
        "interval": gain,
        "text": f"{what}: {gain['value']:.2f}x [{gain['low']:.2f}, {gain['high']:.2f}] the config's settings",
    }


def _trust_text(t: dict) -> str:
    reps = t["repeats"]
    rep = (
        "no repeats" if not reps else (f"{reps[0]} repeat(s)" if reps[0] == reps[1] else f"{reps[0]}-{reps[1]} repeats")
    )
    parts = [f"{t['cells']} cells, {rep}"]
    if t["halfwidth_median"] is not None:
        parts.append(f"median interval +-{100 * t['halfwidth_median']:.0f}%")
    c, n = t["converged"]
    if n:
        parts.append(f"{c}/{n} windows converged")
    if t["contended"]:
        parts.append(f"{t['contended']} contended")
    if t.get("implausible"):
        parts.append(f"{t['implausible']} implausible (above the compute ceiling)")
    return ", ".join(parts)


def _limit_text(ref: dict) -> str:
    au = f"AU {ref['au']:.2f}" if ref["au"] is not None else "AU -"
    if ref.get("implausible"):
        return f"{ref['what']} is implausible ({au}: above the compute ceiling; check its batches and the ceiling cell)"
    wait, share = "", None
    if ref["data_wait_ms"] is not None and ref["step_ms"]:
        share = ref["data_wait_ms"] / ref["step_ms"]
        wait = f", waits for data {100 * share:.0f}% of a step"
    return f"{ref['what']} is {ref['bottleneck']} ({au}{wait}){_ready_yet(ref['bottleneck'], share)}"


# a bound named though the batches were ready: where the step lost its time instead, said on the same line
READY_YET = {
    "CPU-prep-bound": "the loader's workers or threads take the CPU from the training step",
    "transfer-bound": "the step loses its time copying them to the GPU",
    "GPU-prep-bound": "the loader's decoding takes the GPU from the training step",
}


def _ready_yet(bottleneck: str, share: float | None) -> str:
    """Why a data bound stands beside a small data wait: the batches were ready, and where the step's time went."""
    if share is None or share >= WAIT_SHARE or bottleneck not in READY_YET:
        return ""
    return f": its batches were ready, but {READY_YET[bottleneck]}"


def why_none(table: pd.DataFrame | None) -> tuple[str, list[str]]:
    """Why a run has no verdict, from its cells table (`aggregate`'s cells.csv, read by `columns.read_table`): a
    headline and its detail lines (each group of cells that did not finish ok, by status and reason, uncut; the
    loader's rates alone)."""
    if table is None or table.empty:
        return "no real loader measured (only the synthetic ceiling or failed cells)", []
    measured = pd.to_numeric(table["samples_per_s"], errors="coerce").notna()
    training = trains(table)
    not_ok = table[~table["status"].isin(["ok", "partial"])]
    counts = not_ok["status"].value_counts()
    said = ", ".join(f"{counts[k]} {k}" for k in ("failed", "skipped") if counts.get(k, 0))
    if not training.any():
        head = "the loader alone was measured (model none): no training to judge"
        if not measured.any():
            head = f"nothing trained (every cell ran the loader alone, model none) and no cell finished ok: {said}"
    elif not (measured & training).any():
        head = f"no training cell finished ok: {said} (of {int(training.sum())})"
    else:
        head = "no real loader trained: only the synthetic ceiling finished ok"
    lines = []
    for (status, reason), g in not_ok.groupby(["status", not_ok["reason"].fillna("no reason given")], sort=False):
        lines.append(f"{len(g)} {status}: {' '.join(str(reason).split())}")
    alone = table[measured & ~training & (table["loader"] != "synthetic")]
    if len(alone):
        if training.any():
            lines.append("the loader alone, its rates (95% intervals):")
        else:
            head += "; its rates (95% intervals):"
        for _, r in alone.iterrows():
            hw = number(r.get("halfwidth"))
            lines.append(
                ("  " if training.any() else "")
                + f"{r['loader']}, {device_text(r['gpus'], r.get('device'))}, {r['tier']}, b{int(r['batch_size'])} "
                f"{r['precision']}: {float(r['samples_per_s']):.0f} samples/s"
                + (f" (+-{100 * hw:.0f}%)" if hw is not None else " (no interval)")
            )
    return head, lines


def render_text(vs: list[dict], limit: int = 12, table: pd.DataFrame | None = None) -> list[str]:
    """The verdict in at most `limit` lines: two a group, the header first; with no group, why (`why_none` of the
    cells `table`)."""
    if not vs:
        head, lines = why_none(table)
        if len(lines) > limit - 1:  # else one line says what is left out
            lines = [*lines[: limit - 2], f"  ... {len(lines) - (limit - 2)} more lines in the bundle"]
        return [f"verdict: {head}", *(f"  {line}" for line in lines)]
    lines = ["verdict (95% intervals; fix = the fastest cell that can carry a verdict, against the reference):"]
    fits = (limit - 1) // 2
    # else one line says what is left out; one group at the least (its two lines, the header and that line: 4)
    shown = vs if len(vs) <= fits else vs[: max(1, (limit - 2) // 2)]
    several = _several_models(vs)
    for v in shown:
        head = f"{v['model']}, " * several + f"{_device(v)}, {v['tier']}"
        held = " (CONTENDED)" if v["reference"].get("contended") else ""
        lines.append(f"  {head}: {_limit_text(v['reference'])}; {v['reference']['samples_per_s']:.0f} samples/s{held}")
        lines.append(f"  {' ' * len(head)}  fix: {v['fix']['text']}. Trust: {_trust_text(v['trust'])}")
    if len(shown) < len(vs):
        lines.append(f"  ... {len(vs) - len(shown)} more ({'model, ' * several}device, tier) in the bundle")
    return lines


def run_text(tables: Path, limit: int = 12) -> list[str]:
    """The verdict of a run's tables folder as `render_text` gives it (verdict.json; where it holds no group, its
    cells.csv says why)."""
    vs = json.loads((Path(tables) / "verdict.json").read_text())
    cells = Path(tables) / "cells.csv"
    return render_text(vs, limit, read_table(cells) if not vs and cells.is_file() else None)


def _device(v: dict) -> str:
    """The verdict's device in words: "1 GPU", or "CPU" where the cells trained on no GPU."""
    return device_text(v["gpus"], "cpu" if v.get("device") == "cpu" else "cuda")


def _several_models(vs: list[dict]) -> bool:
    """Whether the verdicts are of more than one model (then each names its own)."""
    return len({v.get("model") for v in vs}) > 1


def render_html(vs: list[dict], table: pd.DataFrame | None = None) -> str:
    """The bundle's first section: the verdict as a table; with no group, why (`why_none` of the cells `table`)."""
    import html

    e = html.escape
    if not vs:
        head, lines = why_none(table)
        items = "".join(f"<li>{e(line.strip())}</li>" for line in lines)
        return f"<h2>Verdict</h2><p>{e(head[0].upper() + head[1:])}.</p>" + (f"<ul>{items}</ul>" if items else "")
    rows = []
    several = _several_models(vs)
    for v in vs:
        ref, fix = v["reference"], v["fix"]
        au = f"{ref['au']:.2f}" if ref["au"] is not None else "-"
        wait = (
            f"{100 * ref['data_wait_ms'] / ref['step_ms']:.0f}%"
            if ref["data_wait_ms"] is not None and ref["step_ms"]
            else "-"
        )
        rows.append(
            "<tr>"
            + (f"<td>{e(str(v.get('model')))}</td>" if several else "")
            + f"<td>{e(_device(v))}</td><td>{e(v['tier'])}</td><td>{e(ref['what'])}: "
            f"<b>{e(ref['bottleneck'])}</b>, {ref['samples_per_s']:.0f} samples/s"
            + (" <b>(contended)</b>" if ref.get("contended") else "")
            + f"</td><td>{au}</td>"
            f"<td>{wait}</td><td>{e(fix['text'])}</td><td>{e(_trust_text(v['trust']))}</td></tr>"
        )
    return (
        "<h2>Verdict: what limits training, and what fixes it</h2>"
        f"<p>Per {'model, ' * several}device (GPU count, or the CPU) and tier: the reference cell (the baseline loader) and its bottleneck; the fastest cell "
        "there that can carry a verdict (a contended or unconverged cell measured once cannot), against the "
        "reference with its 95% interval; how far to trust the group. Details: the diagnosis and recommendations "
        "below.</p>"
        "<table><tr>"
        + ("<th>Model</th>" if several else "")
        + "<th>Device</th><th>Disk</th><th>Limited by</th><th>AU</th><th>Data wait</th>"
        "<th>Best measured fix [95%]</th><th>Trust</th></tr>" + "".join(rows) + "</table>"
    )
