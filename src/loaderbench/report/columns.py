"""Column names of the tables: snake_case inside the program, the seed's labels (and ours in its style) where
tables are written and figures drawn. This is the one place a label is spelled; `to_labels` and `read_table` are
the two crossings."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.registry import NO_MODEL as LOADER_ALONE

# The seed's table, its exact labels in its order (../shared/seed/README.md).
SEED = {
    "loader": "Dataloader",
    "tier": "Disk",
    "gpus": "GPU",
    "batch_size": "Batch size",
    "time_s": "Time(s)",
    "steps": "Steps",
    "samples_per_s": "Samples/s",
    "speed": "Speed",
    "gpu_efficiency": "GPU Efficiency",
}
SEED_COLUMNS = list(SEED)
KEYS = ["loader", "model", "tier", "gpus", "batch_size", "precision", "parallel"]  # one configuration (repeats aside)

# cells.csv and diagnosis.csv: every column has a label
CELLS = {
    **SEED,
    "model": "Model",
    "precision": "Precision",
    "parallel": "Parallel",
    "samples_per_s_min": "Samples/s min",
    "samples_per_s_max": "Samples/s max",
    "spread": "Spread",
    "spread_flag": "Spread flag",
    "spread_before_rerun": "Spread before rerun",
    "repeats": "Repeats",
    "repeats_ok": "Repeats ok",
    "status": "Status",
    "reason": "Reason",
    "data_wait_ms": "Data wait (ms/step)",
    "compute_ms": "Compute (ms/step)",
    "data_wait_fraction": "Data wait fraction",
    "peak_gpu_mem_mb": "Peak GPU mem (MB)",
    "peak_gpu_mem_main_mb": "Peak GPU mem main card (MB)",
    "peak_gpu_mem_others_mb": "Peak GPU mem other cards (MB)",
    "device": "Device",
    "workers": "Workers",  # DataLoader worker processes, from the records
    "loader_threads": "Loader threads",  # DALI's threads, or a plugin's as its ctx.info says
    "tier_kind": "Tier kind",
    "cache": "Cache",
    "device_read_share": "Device reads",
    "cpu_pct": "CPU %",
    "gpu_util_pct": "GPU util %",
    "pcie_rx_mb_s": "PCIe RX MB/s",
    "disk_read_mb_s": "Disk read MB/s",
    "proc_read_mb_s": "Read MB/s",
    "image_mb_s": "Image MB/s",  # the images the cell consumed: Samples/s x the tier's mean image size
    "tier_sequential_mb_s": "Tier sequential MB/s",  # the tier probe: one reader streaming
    "tier_files_s": "Tier files/s",  # the tier probe: random whole-file reads, the most any reader count got
    "warnings": "Warnings",
    # the rate the sharing model predicts for the cell (whatif.onegpu)
    "predicted": "Predicted samples/s",
    "prediction_error": "Prediction error",  # measured / predicted - 1
    "prediction_role": "Prediction role",  # fit: the cell set the model's parameter; check: it tests the model
    "limited_by": "Predicted limit",
    "halfwidth": "Rel. interval (95%)",
    "halfwidth_basis": "Interval from",
    "contended": "Contended",
    "converged": "Converged",
    "au": "AU",
    # 95% interval ends of the ratios (report/aggregate.py INTERVAL_OF)
    "au_low": "AU low",
    "au_high": "AU high",
    "speed_low": "Speed low",
    "speed_high": "Speed high",
    "gpu_efficiency_low": "GPU Efficiency low",
    "gpu_efficiency_high": "GPU Efficiency high",
    "run": "Run",
    "compare_group": "Compare group",
    "host": "Host",
    "not_divided": "Not divided because",
    # the diagnosis (stall attribution after DS-Analyzer)
    "step_ms": "Step (ms)",
    "compute_only_ms": "Compute (ms)",
    "ram_step_ms": "Reference step (ms)",
    "fetch_reference": "Fetch stall against",
    "prep_stall_ms": "Prep stall (ms)",
    "fetch_stall_ms": "Fetch stall (ms)",
    "bottleneck": "Bottleneck",
    "evidence": "Evidence",
}
# repeats.csv: the configuration and the seed's measures are labelled, the per-repeat details keep their names
REPEATS = {k: CELLS[k] for k in (*SEED_COLUMNS, "model", "precision", "parallel")}
TABLES = {"cells": CELLS, "diagnosis": CELLS, "repeats": REPEATS}


def run_of(record: dict) -> str:
    """The run a record belongs to (`provenance.run_id`). A record made before runs were named counts as one run
    per host name and boot (what it can say), so such records of several runs on one host cannot be told apart."""
    prov = record.get("provenance") or {}
    if prov.get("run_id"):
        return prov["run_id"]
    host = prov.get("host") or {}
    boot = f", boot {host['boot_id']}" if host.get("boot_id") else ""
    return f"unnamed ({host.get('hostname') or 'unknown host'}{boot})"


def label(name: str) -> str:
    """What a column (or a figure's axis) is called where people read it."""
    return CELLS.get(name, name)


def to_labels(df: pd.DataFrame, table: str = "cells") -> pd.DataFrame:
    return df.rename(columns=TABLES[table])


def from_labels(df: pd.DataFrame, table: str = "cells") -> pd.DataFrame:
    return df.rename(columns={v: k for k, v in TABLES[table].items()})


def read_table(path: Path | str, table: str = "cells") -> pd.DataFrame:
    """A table written by aggregate or diagnose, with the program's names (and its model: MobileNetV2 in a table
    written before models were an axis)."""
    return with_model(from_labels(pd.read_csv(path), table))


def with_model(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its `model` column: as it is where it has one, else every row DEFAULT_MODEL, right after the loader
    (a copy)."""
    if "model" in df:
        return df
    out = df.copy()
    out.insert(list(out.columns).index("loader") + 1 if "loader" in out else len(out.columns), "model", DEFAULT_MODEL)
    return out


def on_gpu(device) -> bool:
    """Whether a cell's `device` (the records' device type: "cuda", "cpu"; several joined by commas) is a GPU;
    unknown (a table without the column) counts as one, as the seed's tables were."""
    return not isinstance(device, str) or not device or "cuda" in device


def device_text(gpus, device) -> str:
    """The device a cell trained on as people read it: "1 GPU", "2 GPU", or "CPU" where there was none."""
    return f"{int(gpus)} GPU" if on_gpu(device) else "CPU"


def device_texts(t: pd.DataFrame) -> pd.Series:
    """`device_text` of each row of `t`."""
    device = t["device"] if "device" in t else pd.Series(None, index=t.index, dtype=object)
    return pd.Series([device_text(g, d) for g, d in zip(t["gpus"], device)], index=t.index, dtype=object)


def trains(df: pd.DataFrame) -> pd.Series:
    """Which rows are training jobs: every model but LOADER_ALONE (the loader alone trains nothing)."""
    return with_model(df)["model"] != LOADER_ALONE


def table_csv(df: pd.DataFrame, table: str = "cells", **to_csv) -> str:
    """The CSV text of a table as written, with its labels."""
    return to_labels(df, table).to_csv(index=False, **to_csv)
