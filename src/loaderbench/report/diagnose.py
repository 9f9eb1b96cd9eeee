"""Where the time goes: stall attribution, a bottleneck label per cell, and recommendations from the numbers.

Attribution after DS-Analyzer, per configuration: compute = the `synthetic` cell's step; prep stall = the loader's
step from RAM minus compute; fetch stall = this tier's step minus RAM's (else minus the fastest other tier's, a lower
bound); data wait as measured. Labels, in order: implausible (AU above 1 beyond its interval: the loader delivered
more than the ceiling, so nothing is explained from it), GPU-bound (AU >= 0.9), I/O-bound (from the fetch stall, or,
with no reference tier, a waiting cell that reads at half the rate the tier probe got or more; seek-bound where a file
loader takes its images at under half the tier's sequential rate: the device positions, it does not stream),
transfer-bound, CPU-prep-bound, GPU-prep-bound, each with its evidence; a CPU cell whose batches were ready yet whose
step is slower than compute is CPU-prep-bound only for a loader with workers or threads beside the training, else
unexplained. Details: docs/internals.md, "report.diagnose".

Every comparison stays within one model (a cell's compute is its own model's synthetic cell); the loader alone (model
`none`) trains nothing, so it has no bottleneck here and carries no recommendation.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.comparable import divisible
from loaderbench.core.registry import loader_record, loaders_where
from loaderbench.core.uncertainty import DEFAULT_BETWEEN_NOISE, Ratio, quotient, widened
from loaderbench.core.util import atomic_write_text
from loaderbench.data.cache import COLD_SHARE

from . import columns
from .aggregate import au_implausible, au_implausible_text, au_interval
from .columns import DEFAULT_MODEL, on_gpu, trains, with_model

BASE_KEYS = ["gpus", "batch_size", "precision", "parallel"]  # the baseline's configuration, of any model
CONFIG_KEYS = ["model", *BASE_KEYS]  # one configuration: its synthetic cell is its compute
GPU_BOUND_AU = 0.9  # within 10% of the synthetic ceiling
STALL_SHARE = 0.1  # a stall under 10% of the step is not the bottleneck
WAIT_SHARE = 0.1  # data wait under 10% of the step: batches were ready
SEEK_SHARE = 0.5  # an I/O-bound cell taking its images at under half the tier's sequential rate is seek-bound
DEVICE_SHARE = 0.5  # a waiting cell that takes half of what its tier's probe read is limited by the tier
COMPUTE_LABELS = ("GPU-bound", "compute-bound")


def step_ms(t: pd.DataFrame) -> pd.Series:
    """Median time per training step (ms) of each row of the cells table."""
    return 1000.0 * t["time_s"] / t["steps"]


def attribute(t: pd.DataFrame) -> pd.DataFrame:
    """Stall attribution columns for every row of the cells table (median over repeats)."""
    t = with_model(t).copy()
    t["step_ms"] = step_ms(t)
    kind = t["tier_kind"] if "tier_kind" in t else pd.Series("path", index=t.index)
    synth = t[t["loader"] == "synthetic"].groupby(CONFIG_KEYS)["step_ms"].min().to_dict()
    loaders = t[t["loader"] != "synthetic"].assign(is_ram=kind == "ram")
    compute, prep, fetch, ram_ms, ref_tier = [], [], [], [], []
    for _, r in t.iterrows():
        key = tuple(r[k] for k in CONFIG_KEYS)
        c = synth.get(key, np.nan)
        rm, ref = _read_reference(loaders, r)
        s = r["step_ms"]
        compute.append(c)
        ram_ms.append(rm)
        ref_tier.append(ref)
        if r["loader"] == "synthetic":
            prep.append(0.0)
            fetch.append(0.0)
        elif np.isfinite(rm):
            prep.append(max(rm - c, 0.0) if np.isfinite(c) else np.nan)
            fetch.append(max(s - rm, 0.0))
        else:  # no RAM tier: prep and fetch together, reported as prep (flagged in the evidence)
            prep.append(max(s - c, 0.0) if np.isfinite(c) else np.nan)
            fetch.append(np.nan)
    t["compute_only_ms"] = compute
    t["ram_step_ms"] = ram_ms
    t["fetch_reference"] = ref_tier
    t["prep_stall_ms"] = prep
    t["fetch_stall_ms"] = fetch
    t["au_interval"] = au_interval(t)  # for `label`; not a column of the diagnosis
    return t


def _read_reference(loaders: pd.DataFrame, r: pd.Series) -> tuple[float, str]:
    """(step ms, "RAM" or a tier) that row `r`'s fetch stall is taken against: the same loader and configuration from
    RAM, else from the fastest other tier; (nan, "") when neither was measured (failed and skipped cells have no step),
    or `r` is the fastest itself."""
    same = loaders[
        (loaders["loader"] == r["loader"])
        & np.logical_and.reduce([loaders[k] == r[k] for k in CONFIG_KEYS])
        & np.isfinite(loaders["step_ms"])
    ]
    ram = same[same["is_ram"]]
    if len(ram):
        return float(ram["step_ms"].min()), "RAM"
    other = same[same["tier"] != r["tier"]]
    if not len(other) or other["step_ms"].min() >= r["step_ms"]:
        return np.nan, ""
    return float(other["step_ms"].min()), str(other.loc[other["step_ms"].idxmin(), "tier"])


def _fmt(x: float, unit: str = "", digits: int = 1) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}{unit}"


def label(r: pd.Series) -> tuple[str, str]:
    """(bottleneck, evidence) of one attributed row."""
    s, c = r["step_ms"], r["compute_only_ms"]
    prep, fetch = r["prep_stall_ms"], r["fetch_stall_ms"]
    wait = r.get("data_wait_ms", np.nan)
    au = r.get("au", np.nan)
    on_cpu = not on_gpu(r.get("device"))
    compute_label = "compute-bound" if on_cpu else "GPU-bound"
    facts = _facts(r)
    if r["loader"] == "synthetic":
        return compute_label, f"the compute ceiling: no data loading ({facts})"
    if not np.isfinite(s):
        return "unknown", f"no result ({r.get('status', '')})"
    if not np.isfinite(c):
        return "unknown", "no synthetic cell at these GPUs/batch/precision/parallel: add `synthetic` to loaders"
    q = r.get("au_interval")
    q = q if isinstance(q, Ratio) else None
    if au_implausible(au, q):
        model = r.get("model", DEFAULT_MODEL)
        ceiling = f"synthetic/g{r['gpus']}/b{r['batch_size']}/{r['precision']}/{r['parallel']}" + (
            "" if model == DEFAULT_MODEL else f"/model={model}"
        )
        return "implausible", (
            f"{au_implausible_text(au, q)} ({ceiling}: is it the same work?); no bottleneck is named from it; {facts}"
        )
    if np.isfinite(au) and au >= GPU_BOUND_AU:
        return compute_label, f"within {100 * (1 - GPU_BOUND_AU):.0f}% of the ceiling: {facts}"
    no_ram = not np.isfinite(fetch)
    stall_note = " (no RAM tier to separate fetch from prep)" if no_ram else ""
    ready = np.isfinite(wait) and wait < WAIT_SHARE * s  # batches were there when the step asked: not I/O
    fetched = not no_ram and fetch >= prep and fetch > STALL_SHARE * s  # the larger stall is reading the tier
    at_device = None if ready else _at_device(r)
    if (fetched and not ready) or at_device:
        return _io_label(r, fetched, at_device, facts)
    if ready and (s - c) > STALL_SHARE * s and on_cpu:
        return _host_label(r, facts)
    if ready and (s - c) > STALL_SHARE * s:
        pcie = r.get("pcie_rx_mb_s", np.nan)
        bus = f", PCIe to GPU {pcie:.0f} MB/s" if np.isfinite(pcie) else ""
        return "transfer-bound", (
            f"batches were ready (data wait {wait:.1f} ms/step) yet the step takes "
            f"{s - c:.1f} ms more than compute{bus}; {facts}"
        )
    # without a GPU every loader decodes on the CPU
    where = "GPU" if loader_record(r["loader"]).decodes == "gpu" and not on_cpu else "CPU"
    return f"{where}-prep-bound", (
        f"prep stall {_fmt(prep, ' ms')}/step{stall_note}, data wait {_fmt(wait, ' ms')}/step; {facts}"
    )


def _facts(r: pd.Series) -> str:
    """The row's step against compute-only, its AU, and the GPU's and CPU's busy shares where measured, in words."""
    cpu = r.get("cpu_pct", np.nan)
    gpu_util = r.get("gpu_util_pct", np.nan)
    s, c, au = r["step_ms"], r["compute_only_ms"], r.get("au", np.nan)
    facts = f"step {_fmt(s, ' ms')} vs compute-only {_fmt(c, ' ms')} (AU {_fmt(au, '', 2)})"
    if np.isfinite(gpu_util):
        facts += f", GPU busy {gpu_util:.0f}%"
    if np.isfinite(cpu):
        facts += f", CPU {cpu:.0f}% of all cores"
    return facts


def _io_label(r: pd.Series, fetched: bool, at_device: str | None, facts: str) -> tuple[str, str]:
    """I/O-bound, or seek-bound where the images come in far under the rate the tier streams, with the evidence."""
    s, fetch = r["step_ms"], r["fetch_stall_ms"]
    read = r.get("disk_read_mb_s", np.nan)
    io = f", device read {read:.0f} MB/s" if np.isfinite(read) else ""
    if fetched:
        ref = r.get("fetch_reference") or "RAM"
        ref = ref if ref == "RAM" else f"{ref} (no RAM cell: a lower bound)"
        stall = f"fetch stall {fetch:.1f} ms/step: {s:.1f} ms here vs {r['ram_step_ms']:.1f} ms from {ref}{io}"
    else:
        stall = f"data wait {r.get('data_wait_ms', np.nan):.1f} ms/step{io}"
    stall += (f"; {at_device}" if at_device else "") + f"; {facts}"
    took, seq = r.get("image_mb_s", np.nan), r.get("tier_sequential_mb_s", np.nan)
    # seek-bound: at the rate the tier serves random whole files, far under the rate it streams (a shard loader
    # reads its shards front to back: slow as it may be, it does not position per image)
    if (
        loader_record(r["loader"]).reads != "shards"
        and at_device
        and pd.notna(took)
        and pd.notna(seq)
        and seq > 0
        and took < SEEK_SHARE * seq
    ):
        return "seek-bound", (
            f"the images come in at {took:.1f} MB/s, {100 * took / seq:.0f}% of the "
            f"{seq:.0f} MB/s the tier streams to one reader: the device positions for each "
            f"image instead of streaming; {stall}"
        )
    return "I/O-bound", stall


def _host_label(r: pd.Series, facts: str) -> tuple[str, str]:
    """A CPU-device cell whose batches were ready yet whose step is slower than compute: CPU-prep-bound when the
    loader has workers or threads beside the training, else unexplained."""
    # no bus to cross on a CPU device: the loader's workers or threads take cores from the training itself
    wait, extra = r.get("data_wait_ms", np.nan), r["step_ms"] - r["compute_only_ms"]
    beside = _beside(r)
    ready_yet = f"batches were ready (data wait {wait:.1f} ms/step) yet the step takes {extra:.1f} ms more than compute"
    if beside:
        return "CPU-prep-bound", f"{ready_yet}: the loader's {beside} share the CPU with the training; {facts}"
    # a loader with nothing beside the training makes its batches inside the wait: not what slowed the step
    return "unexplained", (
        f"{ready_yet}, and the loader has no workers or threads beside the training to take the "
        "CPU from it: its batches may cost the step more than the ceiling's (their dtype and "
        f"layout: the records' `input`), or other work shared the host; {facts}"
    )


def _number(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if np.isfinite(v) else None


def _beside(r: pd.Series) -> str | None:
    """What of the loader runs on the host beside the training, in words: its DataLoader worker processes or its
    threads as its records say (`workers`, `loader_threads`), else as its kind has them (its registry record's `backlog`:
    a table from before those columns); None for a loader recorded with neither, or a plugin that says none."""
    workers, threads = _number(r.get("workers")), _number(r.get("loader_threads"))
    if workers:
        return f"{workers:.0f} worker processes"
    if threads:
        return f"{threads:.0f} threads"
    if workers is not None or threads is not None:  # recorded, as 0
        return None
    return {"workers": "worker processes", "dali": "DALI threads"}.get(loader_record(r["loader"]).backlog)


def _at_device(r: pd.Series) -> str | None:
    """Why a cell reads as fast as its tier lets it, from the tier probe (a fact with no reference tier needed), or
    None: a file loader takes at least DEVICE_SHARE of the whole files a second the probe read at random, a shard
    loader at least that share of the tier's sequential MB/s. Never for RAM (nothing to wait for there)."""
    if r.get("tier_kind") == "ram":
        return None
    if loader_record(r["loader"]).reads == "shards":
        got, limit, what = r.get("image_mb_s", np.nan), r.get("tier_sequential_mb_s", np.nan), "MB/s it streams"
    else:
        got, limit, what = r.get("samples_per_s", np.nan), r.get("tier_files_s", np.nan), "files/s it reads at random"
    if pd.notna(got) and pd.notna(limit) and limit > 0 and got >= DEVICE_SHARE * limit:
        return f"{got:.0f} is {100 * got / limit:.0f}% of the {limit:.0f} {what} (tier probe)"
    return None


def diagnose(t: pd.DataFrame) -> pd.DataFrame:
    """The diagnosis table: every training cell of the cells table `t` (not the loader alone) with its stall
    attribution, bottleneck and evidence."""
    t = with_model(t)
    a = attribute(t[trains(t)])
    labels = [label(r) for _, r in a.iterrows()]
    a["bottleneck"] = [x[0] for x in labels]
    a["evidence"] = [x[1] for x in labels]
    cols = [
        "loader",
        "model",
        "tier",
        *BASE_KEYS,
        "device",
        "tier_kind",
        "samples_per_s",
        "au",
        "step_ms",
        "compute_only_ms",
        "ram_step_ms",
        "fetch_reference",
        "prep_stall_ms",
        "fetch_stall_ms",
        "data_wait_ms",
        "cpu_pct",
        "gpu_util_pct",
        "bottleneck",
        "evidence",
        "halfwidth",
        "halfwidth_basis",
        "repeats_ok",
        "contended",
        "converged",
        "cache",
        "device_read_share",
        "image_mb_s",
        "tier_sequential_mb_s",
        "tier_files_s",
    ]
    return a[[c for c in cols if c in a]]


def cell_name(r) -> str:
    """The row's configuration as reports name it: loader/tier/gGPUs/bBATCH/precision/parallel, then model=NAME where
    the model is not MobileNetV2 (as `claims.parse_cell` reads it)."""
    name = f"{r['loader']}/{r['tier']}/g{r['gpus']}/b{r['batch_size']}/{r['precision']}/{r['parallel']}"
    model = r.get("model", DEFAULT_MODEL)
    return name if model == DEFAULT_MODEL else f"{name}/model={model}"


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
                f"{cell_name(r)} delivered more than its compute ceiling (AU {_fmt(r.get('au', np.nan), '', 2)}, "
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


def read_flag(value) -> bool | None:
    """A table's yes/no cell as True, False or None (not recorded; a fixed window has no convergence)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, str):
        return {"true": True, "false": False}.get(value.strip().lower())
    return bool(value)


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
    d = with_model(d)
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
    base_loader = baseline.get("loader")
    base_cfg = (
        baseline.get("gpus"),
        baseline.get("batch_size"),
        baseline.get("precision"),
        baseline.get("parallel", "dp"),
    )
    at_base = ok[[tuple(r[k] for k in BASE_KEYS) == base_cfg for _, r in ok.iterrows()]]
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
            & ok["loader"].isin(loaders_where(reads="shards"))
            & np.logical_and.reduce([ok[k] == r[k] for k in CONFIG_KEYS])
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
    if loader_record(r["loader"]).reads == "shards":
        return _number(r.get("tier_sequential_mb_s")), "MB/s streamed"
    return _number(r.get("tier_files_s")), "files/s at random"


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
                f"on {slow['tier']} {loader} is {slow['bottleneck']} (AU {_fmt(slow.get('au', np.nan), '', 2)}): "
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
                elif row["bottleneck"] in ("GPU-bound", "compute-bound"):
                    note = f" - little gain on this device although fp32 was {row['bottleneck']}"
                else:
                    note = f" - the loader, not the arithmetic, limits it ({row['bottleneck']} at fp32)"
                return f"{loader} on {tier}, {int(g_)} GPU x {int(b)}: AMP gives {_x(q)} over fp32{note}."

            _rec(out, "precision", [am, row], *compare(am, row), amp_text)


def render_markdown(d: pd.DataFrame, recs: list[dict]) -> str:
    lines = ["# Diagnosis", "", "| Cell | Samples/s | AU | Bottleneck | Evidence |", "|---|---:|---:|---|---|"]
    for _, r in d.iterrows():
        lines.append(
            f"| {cell_name(r)} | {_fmt(r['samples_per_s'])} | {_fmt(r.get('au', np.nan), '', 2)} | "
            f"{r['bottleneck']} | {r['evidence']} |"
        )
    lines += ["", "# Recommendations", ""]
    if not recs:
        lines.append("No recommendation: the grid has no two cells that differ in one setting.")
    for rec in recs:
        lines.append(f"- **{rec['topic']}**: {rec['text']} (cells: {', '.join(rec['cells'])})")
    lines += [
        "",
        (
            "Intervals are 95%: from a cell's repeats, else its window's, widened by the run's noise between "
            "processes (tables/cells.csv, 'Interval from')."
        ),
    ]
    return "\n".join(lines) + "\n"


def run(table_csv: Path, baseline: dict, out_dir: Path) -> pd.DataFrame:
    """The diagnosis of the cells table: diagnosis.csv, recommendations.json and diagnosis.md in `out_dir`."""
    d = diagnose(columns.read_table(table_csv))
    recs = recommendations(d, baseline)
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "diagnosis.csv", columns.table_csv(d, "diagnosis", float_format="%.4g"))
    atomic_write_text(out_dir / "recommendations.json", json.dumps(recs, indent=2) + "\n")
    atomic_write_text(out_dir / "diagnosis.md", render_markdown(d, recs))
    return d
