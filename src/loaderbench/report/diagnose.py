"""Where the time goes: stall attribution and a bottleneck label per cell (the recommendations from them:
`recommend`), and the `diagnose` step that writes both.

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
`none`) trains nothing, so it has no bottleneck here and carries no recommendation. A loader's facts (what it reads,
where it decodes, what it runs beside the training) are its row's (`rows.row_facts`: a plugin's as its records keep
them).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.uncertainty import Ratio
from loaderbench.core.util import atomic_write_text

from . import columns
from .columns import CEILING_BY, SETUP
from .ratios import au_implausible, au_implausible_text, interval_of
from .recommend import recommendations
from .rows import cell_name, fmt, number, on_gpu, row_facts, trains

GPU_BOUND_AU = 0.9  # within 10% of the synthetic ceiling
STALL_SHARE = 0.1  # a stall under 10% of the step is not the bottleneck
WAIT_SHARE = 0.1  # data wait under 10% of the step: batches were ready
SEEK_SHARE = 0.5  # an I/O-bound cell taking its images at under half the tier's sequential rate is seek-bound
DEVICE_SHARE = 0.5  # a waiting cell that takes half of what its tier's probe read is limited by the tier
# the diagnosis table: its columns in their order
DIAGNOSIS = [
    *("loader", "model", "tier", *SETUP, "device", "tier_kind", "loader_facts", "samples_per_s", "au"),
    *("step_ms", "compute_only_ms", "ram_step_ms", "fetch_reference", "prep_stall_ms", "fetch_stall_ms"),
    *("data_wait_ms", "cpu_pct", "gpu_util_pct", "bottleneck", "evidence", "halfwidth", "halfwidth_basis"),
    *("repeats_ok", "contended", "converged", "cache", "device_read_share", "image_mb_s", "tier_sequential_mb_s"),
    "tier_files_s",
]


def step_ms(t: pd.DataFrame) -> pd.Series:
    """Median time per training step (ms) of each row of the cells table."""
    return 1000.0 * t["time_s"] / t["steps"]


def attribute(t: pd.DataFrame) -> pd.DataFrame:
    """Stall attribution columns for every row of the cells table (median over repeats)."""
    t = t.copy()
    t["step_ms"] = step_ms(t)
    kind = t["tier_kind"] if "tier_kind" in t else pd.Series("path", index=t.index)
    synth = t[t["loader"] == "synthetic"].groupby(CEILING_BY)["step_ms"].min().to_dict()
    loaders = t[t["loader"] != "synthetic"].assign(is_ram=kind == "ram")
    compute, prep, fetch, ram_ms, ref_tier = [], [], [], [], []
    for _, r in t.iterrows():
        key = tuple(r[k] for k in CEILING_BY)
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
    t["au_interval"] = [interval_of(r, "au") for _, r in t.iterrows()]  # for `label`; not a column of the diagnosis
    return t


def _read_reference(loaders: pd.DataFrame, r: pd.Series) -> tuple[float, str]:
    """(step ms, "RAM" or a tier) that row `r`'s fetch stall is taken against: the same loader and configuration from
    RAM, else from the fastest other tier; (nan, "") when neither was measured (failed and skipped cells have no step),
    or `r` is the fastest itself."""
    same = loaders[
        (loaders["loader"] == r["loader"])
        & np.logical_and.reduce([loaders[k] == r[k] for k in CEILING_BY])
        & np.isfinite(loaders["step_ms"])
    ]
    ram = same[same["is_ram"]]
    if len(ram):
        return float(ram["step_ms"].min()), "RAM"
    other = same[same["tier"] != r["tier"]]
    if not len(other) or other["step_ms"].min() >= r["step_ms"]:
        return np.nan, ""
    return float(other["step_ms"].min()), str(other.loc[other["step_ms"].idxmin(), "tier"])


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
        ceiling = f"synthetic/g{r['gpus']}/b{r['batch_size']}/{r['precision']}/{r['parallel']}" + (
            "" if r["model"] == DEFAULT_MODEL else f"/model={r['model']}"
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
    where = "GPU" if row_facts(r).decodes == "gpu" and not on_cpu else "CPU"
    return f"{where}-prep-bound", (
        f"prep stall {fmt(prep, ' ms')}/step{stall_note}, data wait {fmt(wait, ' ms')}/step; {facts}"
    )


def _facts(r: pd.Series) -> str:
    """The row's step against compute-only, its AU, and the GPU's and CPU's busy shares where measured, in words."""
    cpu = r.get("cpu_pct", np.nan)
    gpu_util = r.get("gpu_util_pct", np.nan)
    s, c, au = r["step_ms"], r["compute_only_ms"], r.get("au", np.nan)
    facts = f"step {fmt(s, ' ms')} vs compute-only {fmt(c, ' ms')} (AU {fmt(au, '', 2)})"
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
        row_facts(r).reads != "shards"
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


def _beside(r: pd.Series) -> str | None:
    """What of the loader runs on the host beside the training, in words: its DataLoader worker processes or its
    threads as its records say (`workers`, `loader_threads`), else as its kind has them (its registry record's `backlog`:
    a table from before those columns); None for a loader recorded with neither, or a plugin that says none."""
    workers, threads = number(r.get("workers")), number(r.get("loader_threads"))
    if workers:
        return f"{workers:.0f} worker processes"
    if threads:
        return f"{threads:.0f} threads"
    if workers is not None or threads is not None:  # recorded, as 0
        return None
    return {"workers": "worker processes", "dali": "DALI threads"}.get(row_facts(r).backlog)


def _at_device(r: pd.Series) -> str | None:
    """Why a cell reads as fast as its tier lets it, from the tier probe (a fact with no reference tier needed), or
    None: a file loader takes at least DEVICE_SHARE of the whole files a second the probe read at random, a shard
    loader at least that share of the tier's sequential MB/s. Never for RAM (nothing to wait for there)."""
    if r.get("tier_kind") == "ram":
        return None
    if row_facts(r).reads == "shards":
        got, limit, what = r.get("image_mb_s", np.nan), r.get("tier_sequential_mb_s", np.nan), "MB/s it streams"
    else:
        got, limit, what = r.get("samples_per_s", np.nan), r.get("tier_files_s", np.nan), "files/s it reads at random"
    if pd.notna(got) and pd.notna(limit) and limit > 0 and got >= DEVICE_SHARE * limit:
        return f"{got:.0f} is {100 * got / limit:.0f}% of the {limit:.0f} {what} (tier probe)"
    return None


def diagnose(t: pd.DataFrame) -> pd.DataFrame:
    """The diagnosis table: every training cell of the cells table `t` (not the loader alone) with its stall
    attribution, bottleneck and evidence."""
    a = attribute(t[trains(t)])
    labels = [label(r) for _, r in a.iterrows()]
    a["bottleneck"] = [x[0] for x in labels]
    a["evidence"] = [x[1] for x in labels]
    return a[[c for c in DIAGNOSIS if c in a]]


def render_markdown(d: pd.DataFrame, recs: list[dict]) -> str:
    lines = ["# Diagnosis", "", "| Cell | Samples/s | AU | Bottleneck | Evidence |", "|---|---:|---:|---|---|"]
    for _, r in d.iterrows():
        lines.append(
            f"| {cell_name(r)} | {fmt(r['samples_per_s'])} | {fmt(r.get('au', np.nan), '', 2)} | "
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
