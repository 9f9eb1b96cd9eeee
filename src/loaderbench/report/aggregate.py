"""Cell records -> tables: every repeat, and the seed's table (median over repeats) with Speed and GPU Efficiency."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.comparable import divisible, group_of, one_group
from loaderbench.core.records import load_records, warning_lines, warnings_of
from loaderbench.core.registry import loader_record
from loaderbench.core.uncertainty import (
    DEFAULT_BETWEEN_NOISE,
    Ratio,
    between_noise,
    quotient,
    repeats_halfwidth,
    widened,
)
from loaderbench.core.util import atomic_write_text

from .columns import (
    DEFAULT_MODEL,
    KEYS,
    LOADER_ALONE,
    SEED_COLUMNS,
    on_gpu,
    run_of,
    table_csv,
    to_labels,
    trains,
    with_model,
)


def host_of(record: dict) -> str | None:
    """The machine a record was measured on, in words: its name, its GPU models (else its CPU) and its usable CPUs."""
    host = (record.get("provenance") or {}).get("host") or {}
    if not host:
        return None
    chips = ", ".join(sorted(set(host.get("gpu_models") or []))) or host.get("cpu_model") or "unknown chips"
    cpus = f", {host['cpus_usable']} CPUs" if host.get("cpus_usable") else ""
    return f"{host.get('hostname') or 'unknown host'} ({chips}{cpus})"


def repeats_table(records: list[dict]) -> pd.DataFrame:
    """One row per cell record (every repeat, every status)."""
    rows = []
    for r in records:
        s, m = r["spec"], r.get("metrics") or {}
        peak = m.get("peak_gpu_mem_mb") or []
        tel = r.get("telemetry") or {}
        gpus = tel.get("gpus") or []
        rows.append(
            {
                "cell_id": r["cell_id"],
                "loader": s["loader"],
                "model": s.get("model", DEFAULT_MODEL),
                "tier": s["tier"],
                "gpus": s["gpus"],
                "batch_size": s["batch_size"],
                "precision": s["precision"],
                "parallel": s.get("parallel", "dp"),
                "repeat": s["repeat"],
                "run": run_of(r),
                "compare_group": group_of(r),
                "host": host_of(r),
                "status": r["status"],
                "reason": r.get("reason"),
                "time_s": m.get("time_s"),
                "steps": m.get("steps"),
                "samples_per_s": m.get("samples_per_s"),
                "data_wait_ms": (m.get("data_wait_ms") or {}).get("mean"),
                "compute_ms": (m.get("compute_ms") or {}).get("mean"),
                "data_wait_fraction": m.get("data_wait_fraction"),
                "half_ratio": m.get("half_ratio"),
                "peak_gpu_mem_mb": max(peak) if peak else None,
                "peak_gpu_mem_main_mb": peak[0] if peak else None,  # GPU 0: DataParallel gathers and scatters there
                "peak_gpu_mem_others_mb": max(peak[1:]) if len(peak) > 1 else None,
                "input_dtype": (m.get("input") or {}).get("dtype"),
                "compiled": s.get("compile", False),
                "device": (m.get("device") or {}).get("type"),
                "workers": m.get("workers"),  # DataLoader workers (None: the loader has none)
                "loader_threads": (m.get("loader_info") or {}).get("threads"),  # DALI's, or a plugin's as it says
                "warnings": "; ".join(warning_lines(m)),
                "window_halfwidth": (m.get("window") or {}).get("ci95_rel_halfwidth"),
                "converged": (m.get("window") or {}).get("converged"),
                "contended": any(w["code"] == "contended" for w in warnings_of(m)),
                "tier_kind": (r.get("tier") or {}).get("kind") or s.get("tier_kind") or _kind_of(s),
                "cache": (r.get("tier") or {}).get("cache") or s.get("cache"),
                "device_read_share": (r.get("tier") or {}).get("device_read_share"),
                "cpu_pct": _mean(tel.get("cpu_mean_pct")),
                "gpu_util_pct": _avg([_mean(g.get("util_pct")) for g in gpus]),
                "pcie_rx_mb_s": _avg([_mean(g.get("pcie_rx_mb_s")) for g in gpus]),
                "disk_read_mb_s": _mean(tel.get("disk_read_mb_s")),
                "proc_read_mb_s": _mean(tel.get("proc_read_mb_s")),
                "timeline": tel.get("timeline"),
                "rss_mb": (tel.get("rss_mb") or {}).get("max") or m.get("process_tree_rss_mb"),
            }
        )
    return pd.DataFrame(rows)


def _kind_of(spec: dict) -> str:
    """Tier kind of a record written before tiers had kinds: tmpfs under /dev/shm is RAM."""
    return "ram" if str(spec.get("tier_path", "")).startswith("/dev/shm") else "path"


def _mean(stats: dict | None) -> float | None:
    return (stats or {}).get("mean")


def _avg(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def _median(rows: pd.DataFrame, col: str) -> float:
    vals = pd.to_numeric(rows[col], errors="coerce") if col in rows else pd.Series(dtype=float)
    return float(vals.median()) if vals.notna().any() else np.nan


def _group(g: pd.DataFrame, spread_warn: float) -> pd.Series:
    ok = g[g["status"] == "ok"]
    statuses = set(g["status"])
    status = "ok" if statuses == {"ok"} else ("failed" if "failed" in statuses else "skipped")
    if status != "ok" and not ok.empty:
        status = "partial"
    reasons = [x for x in g.loc[g["status"] != "ok", "reason"] if isinstance(x, str)]
    counted = ok if len(ok) else g
    runs = sorted({x for x in counted["run"] if isinstance(x, str)})
    sps = ok["samples_per_s"].astype(float)
    med = float(sps.median()) if len(sps) else np.nan
    spread = float((sps.max() - sps.min()) / med) if len(sps) > 1 and med > 0 else (0.0 if len(sps) == 1 else np.nan)
    return pd.Series(
        {
            "time_s": float(ok["time_s"].median()) if len(ok) else np.nan,
            "steps": float(ok["steps"].median()) if len(ok) else np.nan,
            "samples_per_s": med,
            "samples_per_s_min": float(sps.min()) if len(sps) else np.nan,
            "samples_per_s_max": float(sps.max()) if len(sps) else np.nan,
            "spread": spread,
            "spread_flag": bool(len(sps) > 1 and spread > spread_warn),
            "repeats": len(g),
            "repeats_ok": len(ok),
            "run": ", ".join(runs) or None,  # the invocations its repeats come from (what compares: compare_group)
            "compare_group": one_group(counted["compare_group"]) if "compare_group" in g else None,
            "host": "; ".join(sorted({h for h in g.get("host", []) if isinstance(h, str)})) or None,
            "status": status,
            "reason": reasons[0] if reasons else "",
            "data_wait_ms": float(ok["data_wait_ms"].median()) if len(ok) else np.nan,
            "compute_ms": float(ok["compute_ms"].median()) if len(ok) else np.nan,
            "data_wait_fraction": float(ok["data_wait_fraction"].median()) if len(ok) else np.nan,
            "peak_gpu_mem_mb": _max(ok, "peak_gpu_mem_mb"),
            "peak_gpu_mem_main_mb": _max(ok, "peak_gpu_mem_main_mb"),
            "peak_gpu_mem_others_mb": _max(ok, "peak_gpu_mem_others_mb"),
            "device": ",".join(sorted({d for d in ok["device"] if isinstance(d, str)})),
            "workers": _max_number(ok, "workers"),
            "loader_threads": _max_number(ok, "loader_threads"),
            "tier_kind": g["tier_kind"].iloc[0] if "tier_kind" in g else None,
            "cache": g["cache"].iloc[0] if "cache" in g else None,
            "device_read_share": _min(ok, "device_read_share"),
            "cpu_pct": _median(ok, "cpu_pct"),
            "gpu_util_pct": _median(ok, "gpu_util_pct"),
            "pcie_rx_mb_s": _median(ok, "pcie_rx_mb_s"),
            "disk_read_mb_s": _median(ok, "disk_read_mb_s"),
            "proc_read_mb_s": _median(ok, "proc_read_mb_s"),
            "warnings": "; ".join(sorted({w for w in ok["warnings"] if isinstance(w, str) and w})),
            **_interval(ok),
        }
    )


def _interval(ok: pd.DataFrame) -> dict:
    """How far the cell's rate is known (uncertainty.py): from its repeats, or from its one window (widened by the
    run's noise between processes in `cells_table`); whether a repeat was contended or did not converge."""
    sps = [float(x) for x in ok["samples_per_s"]]
    conv = [c for c in ok.get("converged", pd.Series(dtype=object)) if isinstance(c, (bool, np.bool_))]
    out = {
        "contended": bool(ok["contended"].any()) if "contended" in ok else False,
        "converged": all(conv) if conv else None,
    }
    if len(sps) > 1:
        return {**out, "halfwidth": repeats_halfwidth(sps), "halfwidth_basis": f"{len(sps)} repeats"}
    hw = pd.to_numeric(ok.get("window_halfwidth", pd.Series(dtype=float)), errors="coerce")
    return {
        **out,
        "halfwidth": float(hw.iloc[0]) if len(hw) and pd.notna(hw.iloc[0]) else np.nan,
        "halfwidth_basis": "window",
    }


def _min(rows: pd.DataFrame, col: str) -> float:
    vals = pd.to_numeric(rows[col], errors="coerce") if col in rows else pd.Series(dtype=float)
    return float(vals.min()) if vals.notna().any() else np.nan


def _max_number(rows: pd.DataFrame, col: str) -> float:
    vals = pd.to_numeric(rows[col], errors="coerce") if col in rows else pd.Series(dtype=float)
    return float(vals.max()) if vals.notna().any() else np.nan


def _max(rows: pd.DataFrame, col: str) -> float:
    return float(rows[col].max()) if col in rows and rows[col].notna().any() else np.nan


def cells_table(repeats: pd.DataFrame, baseline: dict, spread_warn: float = 0.05) -> pd.DataFrame:
    """The seed's table: median over repeats, min-max, Speed and GPU Efficiency (each model's cells against the
    baseline configuration of the same model; the loader alone, model `none`, against nothing)."""
    repeats = with_model(repeats)
    if "run" not in repeats:
        repeats = repeats.assign(run="unnamed")  # rows that say nothing of their run: one run
    if "compare_group" not in repeats:
        repeats = repeats.assign(compare_group=repeats["run"])  # a table made before groups: its runs
    rows = [
        {**dict(zip(KEYS, key)), **_group(g, spread_warn).to_dict()}
        for key, g in repeats.groupby(KEYS, sort=False, dropna=False)
    ]
    t = pd.DataFrame(rows)
    # a cell of one process: its window's interval widened by the noise between this run's repeated processes, or by
    # the default where the run repeated no cell (a window's own interval holds none of that noise)
    ok = repeats[repeats["status"] == "ok"]
    noise = between_noise([[float(x) for x in g["samples_per_s"]] for _, g in ok.groupby(KEYS, sort=False)])
    single = t["halfwidth_basis"] == "window"
    t.loc[single, "halfwidth"] = [widened(h, noise) if pd.notna(h) else h for h in t.loc[single, "halfwidth"]]
    t.loc[single, "halfwidth_basis"] = (
        f"window, widened by the run's noise between processes ({100 * noise:.1f}%)"
        if noise is not None
        else f"window, widened by the default noise between processes "
        f"({100 * DEFAULT_BETWEEN_NOISE:.1f}%: no cell of this run was repeated to "
        "measure it)"
    )
    base = t[
        (t["loader"] == baseline["loader"])
        & (t["tier"] == baseline["tier"])
        & (t["gpus"] == baseline["gpus"])
        & (t["batch_size"] == baseline["batch_size"])
        & (t["precision"] == baseline["precision"])
        & (t["parallel"] == baseline.get("parallel", "dp"))
        & trains(t)
    ].drop_duplicates("model")  # each model's baseline cell
    base_rate = t["model"].map(base.set_index("model")["samples_per_s"]).astype(float)
    t["speed"] = speed(t["samples_per_s"].astype(float), base_rate)
    t["gpu_efficiency"] = gpu_efficiency(t)
    t["au"] = accelerator_utilisation(t)
    _within_one_group(t, base.set_index("model")["compare_group"].to_dict())
    aus = au_interval(t)
    _bounds(t, "au", aus)
    _bounds(t, "speed", _divided_interval(t, t["model"].map(base.set_index("model")["halfwidth"]), base.index))
    one = t[(t["gpus"] == 1) & trains(t)].set_index(ONE_GPU_BY)["halfwidth"]
    one_gpu_hw = pd.Series([one.get(_one_gpu_key(r), np.nan) for _, r in t.iterrows()], index=t.index, dtype=float)
    own = (t["gpus"] == 1) & trains(t) & (t["loader"].map(_one_gpu_loader) == t["loader"])  # divided by themselves
    _bounds(t, "gpu_efficiency", _divided_interval(t, one_gpu_hw, t.index[own]))
    implausible = pd.Series([au_implausible(au, q) for au, q in zip(t["au"], aus)], index=t.index, dtype=bool)
    t.loc[implausible, "warnings"] = [
        "; ".join(filter(None, [str(w) if isinstance(w, str) else "", f"implausible: {au_implausible_text(au, q)}"]))
        for w, au, q in zip(t.loc[implausible, "warnings"], t.loc[implausible, "au"], aus[implausible])
    ]
    return t[SEED_COLUMNS + [c for c in t.columns if c not in SEED_COLUMNS]]


INTERVAL_OF = ("au", "speed", "gpu_efficiency")  # ratios the table gives with their 95% interval (`<name>_low/_high`)


def _divided_interval(t: pd.DataFrame, divisor_hw: pd.Series, divisors: pd.Index) -> pd.Series:
    """Each row's ratio (`value`, already divided) as a `Ratio` whose interval joins the row's half-width and its
    divisor's (`divisor_hw`); a row that is its own divisor (`divisors`: the baseline cells) is exactly 1; None where
    a half-width is unknown."""

    def one(i, hw, base_hw):
        if i in divisors:
            return Ratio(1.0, 0.0, 1)
        return quotient(1.0, float(hw), 1.0, float(base_hw)) if pd.notna(hw) and pd.notna(base_hw) else None

    return pd.Series([one(i, hw, b) for i, hw, b in zip(t.index, t["halfwidth"], divisor_hw)], index=t.index)


def _bounds(t: pd.DataFrame, col: str, intervals: pd.Series) -> None:
    """Columns `<col>_low` and `<col>_high`: `t[col]` within the relative half-width of `intervals` (a `Ratio` per
    row, or None: unknown)."""
    hw = pd.Series([q.halfwidth if q is not None else np.nan for q in intervals], index=t.index, dtype=float)
    value = pd.to_numeric(t[col], errors="coerce")
    t[f"{col}_low"], t[f"{col}_high"] = value / (1 + hw), value * (1 + hw)


# A loader faster than the synthetic ceiling of its configuration: the ceiling was measured low or the cell high, or
# the loader's batches were not the work the ceiling's were. With the AU's interval known, above 1 beyond it counts;
# without one, above this.
AU_IMPLAUSIBLE = 1.05
AU_BY = [
    "model",
    "gpus",
    "batch_size",
    "precision",
    "parallel",
]  # a ceiling's configuration: the model's synthetic cell


def au_interval(t: pd.DataFrame) -> pd.Series:
    """Each row's AU with its 95% interval (`uncertainty.quotient` of its rate and its ceiling's, each known to its
    `halfwidth`), the ceiling being the fastest synthetic row of its configuration; None where the AU or either
    interval is unknown."""
    if not {"samples_per_s", "halfwidth", "au"} <= set(t.columns):
        return pd.Series(None, index=t.index, dtype=object)
    t = with_model(t)
    rate = pd.to_numeric(t["samples_per_s"], errors="coerce")
    synth = t[(t["loader"] == "synthetic") & rate.notna()]
    ceiling_hw = {key: g.loc[rate[g.index].idxmax()].get("halfwidth") for key, g in synth.groupby(AU_BY)}
    out = []
    for _, r in t.iterrows():
        au, hw, hw_ceiling = r.get("au"), r.get("halfwidth"), ceiling_hw.get(tuple(r[k] for k in AU_BY))
        known = all(pd.notna(x) for x in (au, hw, hw_ceiling))
        out.append(quotient(float(au), float(hw), 1.0, float(hw_ceiling)) if known else None)
    return pd.Series(out, index=t.index, dtype=object)


def au_implausible(au, q: Ratio | None) -> bool:
    """Whether a cell delivers more than its compute ceiling: its AU's interval `q` lies above 1 (without one: the AU
    is above AU_IMPLAUSIBLE)."""
    if q is not None:
        return q.low > 1.0
    return bool(pd.notna(au) and au > AU_IMPLAUSIBLE)


def au_implausible_text(au, q: Ratio | None) -> str:
    if q is None:
        return f"AU {au:.2f} > {AU_IMPLAUSIBLE} (ceiling or cell disturbed)"
    return (
        f"AU {q.value:.2f} [{q.low:.2f}, {q.high:.2f}] lies above 1 beyond its interval: the loader delivers more "
        "than the compute ceiling; check its batches and the ceiling cell"
    )


def _within_one_group(t: pd.DataFrame, baseline_groups: dict) -> None:
    """Speed, GPU Efficiency and AU divide a cell by another of its model (the baseline, the 1-GPU cell, the synthetic
    ceiling; `baseline_groups`: each model's baseline cell's comparison group) only where the two compare
    (`core.comparable`: one boot, code, stack and dataset), else they are left out and `not_divided` says why. The
    loader alone (model `none`) is divided by nothing: it trains no model."""
    one = t[t["gpus"] == 1].set_index(ONE_GPU_BY)["compare_group"]
    ceiling = {}
    for key, g in t[t["loader"] == "synthetic"].groupby(AU_BY):
        ceiling[key] = g.loc[g["samples_per_s"].idxmax(), "compare_group"] if g["samples_per_s"].notna().any() else None
    notes = []
    for i, r in t.iterrows():
        if r["model"] == LOADER_ALONE:
            t.loc[i, ["speed", "gpu_efficiency", "au"]] = np.nan
            notes.append("the loader alone (model none) trains nothing: no training rate to divide")
            continue
        divisors = {
            "speed": ("Speed: the baseline cell", baseline_groups.get(r["model"])),
            "gpu_efficiency": ("GPU Efficiency: the 1-GPU cell", one.get(_one_gpu_key(r))),
            "au": ("AU: the synthetic ceiling", ceiling.get(tuple(r[k] for k in AU_BY))),
        }
        mixed = divisible(r["compare_group"], r["compare_group"])  # its own repeats span groups: it divides nothing
        why = []
        for col, (what, group) in divisors.items():
            reason = mixed or divisible(r["compare_group"], group)
            if pd.notna(r[col]) and reason:
                t.loc[i, col] = np.nan
                why.append(mixed or f"{what} is not comparable ({reason})")
        notes.append("; ".join(dict.fromkeys(why)))
    t["not_divided"] = notes


def speed(samples_per_s: pd.Series, baseline_samples_per_s: pd.Series) -> pd.Series:
    """Speed = Samples/s / the baseline cell's Samples/s, row by row (NaN where the baseline has no result)."""
    base = pd.to_numeric(baseline_samples_per_s, errors="coerce")
    return samples_per_s / base.where(np.isfinite(base) & (base > 0))


ONE_GPU_BY = ["loader", "model", "tier", "batch_size", "precision", "parallel"]  # a GPU Efficiency group


def _one_gpu_key(r: pd.Series) -> tuple:
    """The GPU Efficiency group of row `r`, its loader replaced by the one whose 1-GPU cell it is divided by."""
    return tuple(_one_gpu_loader(r["loader"]) if k == "loader" else r[k] for k in ONE_GPU_BY)


def _one_gpu_loader(loader: str) -> str:
    """The loader whose 1-GPU cell is `loader`'s GPU Efficiency baseline: its own, or, for a loader with no 1-GPU mode
    of its own, the one its registry record names."""
    return loader_record(loader).one_gpu_baseline or loader


def gpu_efficiency(t: pd.DataFrame) -> pd.Series:
    """Samples/s / (GPUs x the same group's 1-GPU Samples/s); dali-mc's group baseline is dali-sc. The group is
    loader, model, tier, per-GPU batch, precision and parallel mode (dp cells against the 1-GPU dp cell, ddp against
    ddp); the loader alone (model `none`) has none."""
    t = with_model(t)
    one = t[(t["gpus"] == 1) & trains(t)].set_index(ONE_GPU_BY)["samples_per_s"]
    out = []
    for _, r in t.iterrows():
        base = one.get(_one_gpu_key(r), np.nan)
        out.append(r["samples_per_s"] / (r["gpus"] * base) if base and np.isfinite(base) and base > 0 else np.nan)
    return pd.Series(out, index=t.index, dtype=float)


def accelerator_utilisation(t: pd.DataFrame) -> pd.Series:
    """AU (MLPerf Storage's accelerator utilisation): Samples/s / the `synthetic` loader's Samples/s of the same model
    at the same GPUs, batch, precision and parallel mode - the share of the model's compute ceiling a loader delivers.
    NaN without a synthetic cell, and for the loader alone (model `none`: no ceiling, no training)."""
    t = with_model(t)
    ceiling = t[(t["loader"] == "synthetic") & trains(t)].groupby(AU_BY)["samples_per_s"].max().to_dict()
    out = [
        r["samples_per_s"] / ceiling.get(tuple(r[k] for k in AU_BY), np.nan) if r["model"] != LOADER_ALONE else np.nan
        for _, r in t.iterrows()
    ]
    return pd.Series(out, index=t.index, dtype=float)


def aggregate(
    cell_files: list[Path],
    baseline: dict,
    spread_warn: float,
    out_dir: Path,
    probes: list[Path] = (),
    ledger: Path | None = None,
) -> pd.DataFrame:
    """cells.csv (median over repeats), repeats.csv (every record) and tier_probe.csv (each tier's read rate);
    `ledger`: respread's ledger (layout.Layout.respread_ledger), the spread of requeued configurations."""
    from loaderbench.data.tierprobe import PROBE_COLUMNS, probe_rows, tier_rates

    results = [json.loads(Path(p).read_text()) for p in probes]
    rows = probe_rows(results)
    probe = pd.DataFrame(rows, columns=PROBE_COLUMNS)
    atomic_write_text(Path(out_dir) / "tier_probe.csv", probe.to_csv(index=False, float_format="%.4g"))
    records, _ = load_records(cell_files)  # an unreadable record is moved aside, named, and measured next run
    from loaderbench.core.cells import configuration
    from loaderbench.plan.respread import load_ledger

    ledger = load_ledger(Path(ledger)) if ledger else {}
    repeats = repeats_table(records)
    table = cells_table(repeats, baseline, spread_warn)
    add_tier_rates(table, tier_rates(results))
    ids = repeats.groupby(KEYS, sort=False, dropna=False)["cell_id"].first().map(configuration)
    configurations = pd.Series([ids.get(tuple(r[k] for k in KEYS)) for _, r in table.iterrows()], index=table.index)
    add_predictions(table, configurations, predictions(records))
    if ledger:  # rerun once for their spread: the spread those repeats had before
        before = {key: entry["spread"] for key, entry in ledger.items()}
        table["spread_before_rerun"] = configurations.map(lambda c: before.get(c))
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "repeats.csv", table_csv(repeats, "repeats"))
    atomic_write_text(out_dir / "cells.csv", table_csv(table, "cells", float_format="%.4g"))
    return table


# the sharing model's columns (whatif.onegpu) -> the cells table's
PREDICTED = {
    "predicted": "predicted",
    "error": "prediction_error",
    "role": "prediction_role",
    "limited_by": "limited_by",
}


def predictions(records: list[dict]) -> pd.DataFrame:
    """The sharing model's prediction of each configuration of `records` that has its parts (`whatif.predict`)."""
    from loaderbench.whatif import predict

    return predict(records)


def add_predictions(table: pd.DataFrame, configurations: pd.Series, predicted: pd.DataFrame | None) -> None:
    """Each row's predicted Samples/s, its error (measured / predicted - 1), its role in the model (fit or check) and
    the limit the model names, in place, from `predicted` (`predictions`) by the row's configuration (cell id
    without its repeat, `configurations`); blank where the row has no prediction."""
    known = (
        predicted.drop_duplicates("configuration").set_index("configuration")
        if predicted is not None and len(predicted)
        else pd.DataFrame(columns=list(PREDICTED))
    )
    for src, col in PREDICTED.items():
        values = configurations.map(known[src]) if src in known else pd.Series(np.nan, index=table.index)
        table[col] = values.astype(float) if col in ("predicted", "prediction_error") else values.astype(object)


def add_tier_rates(table: pd.DataFrame, rates: dict[str, dict]) -> None:
    """The images a cell consumed as MB/s, and its tier's rates as the tier probe measured them, in place."""
    if table.empty:
        return

    def rate(key: str) -> pd.Series:
        return table["tier"].map(lambda t: (rates.get(t) or {}).get(key)).astype(float)

    table["image_mb_s"] = table["samples_per_s"].astype(float) * rate("mean_image_bytes") / 1e6
    table["tier_sequential_mb_s"] = rate("sequential_mb_s")
    table["tier_files_s"] = rate("files_s")
    table.loc[table["loader"] == "synthetic", ["image_mb_s", "tier_sequential_mb_s", "tier_files_s"]] = np.nan


def seed_table_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The seed's columns (plus precision and status; the model right after the loader where the table holds more than
    one; the predicted Samples/s and its error where any row has one) with readable number formats, labelled for
    display."""
    table = with_model(table)
    rerun = ["spread_before_rerun"] if "spread_before_rerun" in table else []
    divided = "not_divided" in table and any(isinstance(x, str) and x for x in table["not_divided"])
    # a fit cell's error says how well k was fitted, a check cell's how well the model predicts: the role goes beside it
    predicted = (
        ["predicted", "prediction_error"] + (["prediction_role"] if "prediction_role" in table else [])
        if "predicted" in table and table["predicted"].notna().any()
        else []
    )
    extra = rerun + (["not_divided"] if divided else [])
    model = ["model"] if table["model"].nunique() > 1 else []
    t = table[
        SEED_COLUMNS[:1]
        + model
        + SEED_COLUMNS[1:4]
        + ["precision"]
        + SEED_COLUMNS[4:]
        + predicted
        + ["status", "repeats_ok", "spread", *extra]
    ].copy()
    fmt = {
        "time_s": "{:.1f}",
        "steps": "{:.0f}",
        **({"predicted": "{:.1f}", "prediction_error": "{:+.1%}"} if predicted else {}),
    }
    for col, f in fmt.items():
        t[col] = [f.format(float(v)) if pd.notna(v) else "-" for v in t[col]]
    unknown = pd.Series(np.nan, index=table.index)
    if "device" in table:  # the seed's GPU column says where a cell trained on the CPU instead
        t["gpus"] = [f"{g} (CPU)" if not on_gpu(d) else g for g, d in zip(table["gpus"], table["device"])]
    t["samples_per_s"] = [
        _with_halfwidth(v, h) for v, h in zip(table["samples_per_s"], table.get("halfwidth", unknown))
    ]
    for col in ("speed", "gpu_efficiency"):
        ends = zip(table[col], table.get(f"{col}_low", unknown), table.get(f"{col}_high", unknown))
        t[col] = [_with_ends(v, lo, hi) for v, lo, hi in ends]
    for col in ["spread", *rerun]:
        t[col] = [f"{100 * v:.1f}%" if pd.notna(v) else "-" for v in t[col]]
    if "prediction_role" in predicted:
        t["prediction_role"] = [x if isinstance(x, str) and x else "-" for x in t["prediction_role"]]
    if divided:
        t["not_divided"] = [x if isinstance(x, str) else "" for x in t["not_divided"]]
    return to_labels(t)


def _with_halfwidth(value, halfwidth) -> str:
    """A rate as the seed's table shows it, with its 95% interval where known: `277.1 (+-5.2%)`."""
    if pd.isna(value):
        return "-"
    return f"{float(value):.1f}" + (f" (+-{100 * float(halfwidth):.1f}%)" if pd.notna(halfwidth) else "")


def _with_ends(value, low, high) -> str:
    """A ratio with its 95% interval where known: `1.30 [1.22, 1.38]`."""
    if pd.isna(value):
        return "-"
    ends = f" [{float(low):.2f}, {float(high):.2f}]" if pd.notna(low) and pd.notna(high) else ""
    return f"{float(value):.2f}" + ends
