"""Cell records -> tables: every repeat, and the seed's table (median over repeats) with Speed and GPU Efficiency."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .records import load_records, warning_lines
from .util import atomic_write_text

# The seed's columns, exact names and order, then ours.
SEED_COLUMNS = ["Dataloader", "Disk", "GPU", "Batch size", "Time(s)", "Steps", "Samples/s", "Speed", "GPU Efficiency"]
KEYS = ["Dataloader", "Disk", "GPU", "Batch size", "Precision", "Parallel"]
# A loader with no 1-GPU mode of its own takes another loader's 1-GPU cell as its GPU Efficiency baseline.
ONE_GPU_BASELINE = {"dali-mc": "dali-sc"}


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
                "Dataloader": s["loader"],
                "Disk": s["tier"],
                "GPU": s["gpus"],
                "Batch size": s["batch_size"],
                "Precision": s["precision"],
                "Parallel": s.get("parallel", "dp"),
                "repeat": s["repeat"],
                "status": r["status"],
                "reason": r.get("reason"),
                "Time(s)": m.get("time_s"),
                "Steps": m.get("steps"),
                "Samples/s": m.get("samples_per_s"),
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
                "workers": m.get("workers"),
                "warnings": "; ".join(warning_lines(m)),
                "tier_kind": (r.get("tier") or {}).get("kind") or s.get("tier_kind") or _kind_of(s),
                "cache": (r.get("tier") or {}).get("cache") or s.get("cache"),
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
    sps = ok["Samples/s"].astype(float)
    med = float(sps.median()) if len(sps) else np.nan
    spread = float((sps.max() - sps.min()) / med) if len(sps) > 1 and med > 0 else (0.0 if len(sps) == 1 else np.nan)
    return pd.Series(
        {
            "Time(s)": float(ok["Time(s)"].median()) if len(ok) else np.nan,
            "Steps": float(ok["Steps"].median()) if len(ok) else np.nan,
            "Samples/s": med,
            "Samples/s min": float(sps.min()) if len(sps) else np.nan,
            "Samples/s max": float(sps.max()) if len(sps) else np.nan,
            "Spread": spread,
            "Spread flag": bool(len(sps) > 1 and spread > spread_warn),
            "Repeats": len(g),
            "Repeats ok": len(ok),
            "Status": status,
            "Reason": reasons[0] if reasons else "",
            "Data wait (ms/step)": float(ok["data_wait_ms"].median()) if len(ok) else np.nan,
            "Compute (ms/step)": float(ok["compute_ms"].median()) if len(ok) else np.nan,
            "Data wait fraction": float(ok["data_wait_fraction"].median()) if len(ok) else np.nan,
            "Peak GPU mem (MB)": _max(ok, "peak_gpu_mem_mb"),
            "Peak GPU mem main card (MB)": _max(ok, "peak_gpu_mem_main_mb"),
            "Peak GPU mem other cards (MB)": _max(ok, "peak_gpu_mem_others_mb"),
            "Device": ",".join(sorted({d for d in ok["device"] if isinstance(d, str)})),
            "Tier kind": g["tier_kind"].iloc[0] if "tier_kind" in g else None,
            "Cache": g["cache"].iloc[0] if "cache" in g else None,
            "CPU %": _median(ok, "cpu_pct"),
            "GPU util %": _median(ok, "gpu_util_pct"),
            "PCIe RX MB/s": _median(ok, "pcie_rx_mb_s"),
            "Disk read MB/s": _median(ok, "disk_read_mb_s"),
            "Read MB/s": _median(ok, "proc_read_mb_s"),
            "Warnings": "; ".join(sorted({w for w in ok["warnings"] if isinstance(w, str) and w})),
        }
    )


def _max(rows: pd.DataFrame, col: str) -> float:
    return float(rows[col].max()) if col in rows and rows[col].notna().any() else np.nan


def cells_table(repeats: pd.DataFrame, baseline: dict, spread_warn: float = 0.05) -> pd.DataFrame:
    """The seed's table: median over repeats, min-max, Speed and GPU Efficiency."""
    rows = [
        {**dict(zip(KEYS, key)), **_group(g, spread_warn).to_dict()}
        for key, g in repeats.groupby(KEYS, sort=False, dropna=False)
    ]
    t = pd.DataFrame(rows)
    base = t[
        (t["Dataloader"] == baseline["loader"])
        & (t["Disk"] == baseline["tier"])
        & (t["GPU"] == baseline["gpus"])
        & (t["Batch size"] == baseline["batch_size"])
        & (t["Precision"] == baseline["precision"])
        & (t["Parallel"] == baseline.get("parallel", "dp"))
    ]["Samples/s"]
    t["Speed"] = speed(t["Samples/s"], float(base.iloc[0]) if len(base) else np.nan)
    t["GPU Efficiency"] = gpu_efficiency(t)
    t["AU"] = accelerator_utilisation(t)
    implausible = t["AU"] > AU_IMPLAUSIBLE
    t.loc[implausible, "Warnings"] = [
        "; ".join(filter(None, [str(w) if isinstance(w, str) else "",
                                f"implausible: AU {au:.2f} > {AU_IMPLAUSIBLE} (ceiling or cell disturbed)"]))
        for w, au in zip(t.loc[implausible, "Warnings"], t.loc[implausible, "AU"])
    ]  # fmt: skip
    return t[SEED_COLUMNS + [c for c in t.columns if c not in SEED_COLUMNS]]


# A loader faster than the synthetic ceiling of its configuration: the ceiling was measured low or the cell high.
AU_IMPLAUSIBLE = 1.05


def speed(samples_per_s: pd.Series, baseline_samples_per_s: float) -> pd.Series:
    """Speed = Samples/s / the baseline cell's Samples/s (NaN when the baseline has no result)."""
    if not np.isfinite(baseline_samples_per_s) or baseline_samples_per_s <= 0:
        return pd.Series(np.nan, index=samples_per_s.index)
    return samples_per_s / baseline_samples_per_s


def gpu_efficiency(t: pd.DataFrame) -> pd.Series:
    """Samples/s / (GPUs x the same group's 1-GPU Samples/s); dali-mc's group baseline is dali-sc. The group is
    loader, tier, per-GPU batch, precision and parallel mode (dp cells against the 1-GPU dp cell, ddp against ddp)."""
    one = t[t["GPU"] == 1].set_index(["Dataloader", "Disk", "Batch size", "Precision", "Parallel"])["Samples/s"]
    out = []
    for _, r in t.iterrows():
        loader = ONE_GPU_BASELINE.get(r["Dataloader"], r["Dataloader"])
        base = one.get((loader, r["Disk"], r["Batch size"], r["Precision"], r["Parallel"]), np.nan)
        out.append(r["Samples/s"] / (r["GPU"] * base) if base and np.isfinite(base) and base > 0 else np.nan)
    return pd.Series(out, index=t.index, dtype=float)


def accelerator_utilisation(t: pd.DataFrame) -> pd.Series:
    """AU (MLPerf Storage's accelerator utilisation): Samples/s / the `synthetic` loader's Samples/s at the same GPUs,
    batch, precision and parallel mode - the share of the compute ceiling a loader delivers. NaN without a synthetic cell."""
    by = ["GPU", "Batch size", "Precision", "Parallel"]
    ceiling = t[t["Dataloader"] == "synthetic"].groupby(by)["Samples/s"].max().to_dict()
    out = [r["Samples/s"] / ceiling.get(tuple(r[k] for k in by), np.nan) for _, r in t.iterrows()]
    return pd.Series(out, index=t.index, dtype=float)


def aggregate(cell_files: list[Path], baseline: dict, spread_warn: float, out_dir: Path,
              probes: list[Path] = (), ledger: Path | None = None) -> pd.DataFrame:  # fmt: skip
    """cells.csv (median over repeats), repeats.csv (every record) and tier_probe.csv (each tier's read rate);
    `ledger`: respread's ledger (layout.Layout.respread_ledger), the spread of requeued configurations."""
    from .tierprobe import PROBE_COLUMNS, probe_rows

    rows = probe_rows([json.loads(Path(p).read_text()) for p in probes])
    probe = pd.DataFrame(rows, columns=PROBE_COLUMNS)
    atomic_write_text(Path(out_dir) / "tier_probe.csv", probe.to_csv(index=False, float_format="%.4g"))
    records, _ = load_records(cell_files)  # an unreadable record is moved aside, named, and measured next run
    from .respread import configuration, load_ledger

    ledger = load_ledger(Path(ledger)) if ledger else {}
    repeats = repeats_table(records)
    table = cells_table(repeats, baseline, spread_warn)
    if ledger:  # rerun once for their spread: the spread those repeats had before
        before = {key: entry["spread"] for key, entry in ledger.items()}
        ids = repeats.groupby(KEYS, sort=False, dropna=False)["cell_id"].first().map(configuration)
        table["Spread before rerun"] = [before.get(ids.get(tuple(r[k] for k in KEYS))) for _, r in table.iterrows()]
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "repeats.csv", repeats.to_csv(index=False))
    atomic_write_text(out_dir / "cells.csv", table.to_csv(index=False, float_format="%.4g"))
    return table


def seed_table_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The seed's columns (plus precision and status) with readable number formats."""
    extra = ["Spread before rerun"] if "Spread before rerun" in table else []
    t = table[SEED_COLUMNS[:4] + ["Precision"] + SEED_COLUMNS[4:] + ["Status", "Repeats ok", "Spread", *extra]].copy()
    fmt = {"Time(s)": "{:.1f}", "Steps": "{:.0f}", "Samples/s": "{:.1f}", "Speed": "{:.2f}", "GPU Efficiency": "{:.2f}"}
    for col, f in fmt.items():
        t[col] = [f.format(v) if pd.notna(v) else "-" for v in t[col]]
    for col in ["Spread", *extra]:
        t[col] = [f"{100 * v:.1f}%" if pd.notna(v) else "-" for v in t[col]]
    return t
