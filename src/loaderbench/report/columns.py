"""The tables' columns, each defined once (`COLUMNS`): its name inside the program, its label where tables are
written and figures drawn, how a cell record gives it (repeats.csv: a row a record) and how a configuration's repeats
give it (cells.csv: a row a configuration). Adding a column is adding its entry; one derived from the table itself
(Speed, the diagnosis, ...) names its label here and is computed where it is derived. Labels cross at the CSVs only:
`table_csv` writes them, `read_table` reads them back."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.comparable import group_of, one_group
from loaderbench.core.records import facts_of, warning_lines, warnings_of
from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL
from loaderbench.core.uncertainty import repeats_halfwidth

LOADER_ALONE = NO_MODEL  # the model of a cell that runs the loader alone: a measurement of the loader, not of training

KEYS = ["loader", "model", "tier", "gpus", "batch_size", "precision", "parallel"]  # one configuration (repeats aside)
SETUP = ["gpus", "batch_size", "precision", "parallel"]  # the baseline's setup, of any loader, tier and model
CEILING_BY = ["model", *SETUP]  # a configuration's compute ceiling: its model's synthetic cell (AU, compute-only)
ONE_GPU_BY = [k for k in KEYS if k != "gpus"]  # a GPU Efficiency group: its 1-GPU cell divides the others
# the seed's table: its columns in its order (../shared/seed/README.md), labelled as it labels them
SEED_COLUMNS = ["loader", "tier", "gpus", "batch_size", "time_s", "steps", "samples_per_s", "speed", "gpu_efficiency"]


@dataclass(frozen=True)
class Repeats:
    """A configuration's repeats as `Column.combine` reads them: every row, those that finished ok, and the spread
    above which the repeats are flagged."""

    rows: pd.DataFrame
    ok: pd.DataFrame
    spread_warn: float

    @property
    def counted(self) -> pd.DataFrame:
        """The rows a configuration is said to come from: its ok repeats, or all where none finished ok."""
        return self.ok if len(self.ok) else self.rows


@dataclass(frozen=True)
class Column:
    """One column of the tables; one derived from the table itself (no `read`, no `combine`) is named for its label."""

    name: str
    label: str | None = None  # where people read it (None: its name)
    read: Callable[[dict], object] | None = None  # its value in a record's row (repeats.csv); None: no record's
    combine: Callable[[Repeats, str], object] | None = None  # its value from a configuration's repeats (cells.csv)


# --- how a record gives a value --------------------------------------------------------------------------------


def _metrics(r: dict) -> dict:
    return r.get("metrics") or {}


def _telemetry(r: dict) -> dict:
    return r.get("telemetry") or {}


def _mean(stats: dict | None) -> float | None:
    return (stats or {}).get("mean")


def _avg(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def spec(key: str) -> Callable[[dict], object]:
    return lambda r: r["spec"][key]


def metric(key: str) -> Callable[[dict], object]:
    return lambda r: _metrics(r).get(key)


def metric_mean(key: str) -> Callable[[dict], object]:
    return lambda r: _mean(_metrics(r).get(key))


def window(key: str) -> Callable[[dict], object]:
    return lambda r: (_metrics(r).get("window") or {}).get(key)


def telemetry_mean(key: str) -> Callable[[dict], object]:
    return lambda r: _mean(_telemetry(r).get(key))


def gpus_mean(key: str) -> Callable[[dict], object]:
    """The mean over the record's GPUs of each GPU's mean `key`."""
    return lambda r: _avg([_mean(g.get(key)) for g in _telemetry(r).get("gpus") or []])


def tier(key: str, spec_key: str) -> Callable[[dict], object]:
    """The tier's `key` as the cell found it, else as its spec names it (`spec_key`: a record without its tier)."""
    return lambda r: (r.get("tier") or {}).get(key) or r["spec"].get(spec_key)


def _peaks(r: dict) -> list:
    return _metrics(r).get("peak_gpu_mem_mb") or []


def run_of(record: dict) -> str:
    """The run a record belongs to (`provenance.run_id`). A record made before runs were named counts as one run
    per host name and boot (what it can say), so such records of several runs on one host cannot be told apart."""
    prov = record.get("provenance") or {}
    if prov.get("run_id"):
        return prov["run_id"]
    host = prov.get("host") or {}
    boot = f", boot {host['boot_id']}" if host.get("boot_id") else ""
    return f"unnamed ({host.get('hostname') or 'unknown host'}{boot})"


def host_of(record: dict) -> str | None:
    """The machine a record was measured on, in words: its name, its GPU models (else its CPU) and its usable CPUs."""
    host = (record.get("provenance") or {}).get("host") or {}
    if not host:
        return None
    chips = ", ".join(sorted(set(host.get("gpu_models") or []))) or host.get("cpu_model") or "unknown chips"
    cpus = f", {host['cpus_usable']} CPUs" if host.get("cpus_usable") else ""
    return f"{host.get('hostname') or 'unknown host'} ({chips}{cpus})"


def _facts_text(record: dict) -> str | None:
    """A plugin cell's declared facts as its record keeps them (JSON), for the rows that read them (`row_facts`)."""
    facts = facts_of(record)
    return json.dumps(facts, sort_keys=True, separators=(",", ":")) if facts is not None else None


# --- how a configuration's repeats give a value --------------------------------------------------------------------


def _numbers(rows: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(rows[col], errors="coerce") if col in rows else pd.Series(dtype=float)


def median(g: Repeats, col: str) -> float:
    vals = _numbers(g.ok, col)
    return float(vals.median()) if vals.notna().any() else np.nan


def minimum(g: Repeats, col: str) -> float:
    vals = _numbers(g.ok, col)
    return float(vals.min()) if vals.notna().any() else np.nan


def maximum(g: Repeats, col: str) -> float:
    vals = _numbers(g.ok, col)
    return float(vals.max()) if vals.notna().any() else np.nan


def first(g: Repeats, col: str):
    return g.rows[col].iloc[0] if col in g.rows else None


def first_text(g: Repeats, col: str) -> str | None:
    return next((x for x in g.rows.get(col, []) if isinstance(x, str) and x), None)


def _reason(g: Repeats, col: str) -> str:
    """The first reason a repeat that did not finish ok gives ("" where none does)."""
    return next((x for x in g.rows.loc[g.rows["status"] != "ok", col] if isinstance(x, str)), "")


def spread(g: Repeats, col: str = "spread") -> float:
    """(max - min) / median of the ok repeats' Samples/s: 0 for one, NaN for none."""
    sps = g.ok["samples_per_s"].astype(float)
    med = float(sps.median()) if len(sps) else np.nan
    if len(sps) > 1 and med > 0:
        return float((sps.max() - sps.min()) / med)
    return 0.0 if len(sps) == 1 else np.nan


def status(g: Repeats, col: str) -> str:
    """ok where every repeat is, partial where some are, else failed where one failed, else skipped."""
    statuses = set(g.rows["status"])
    if statuses == {"ok"}:
        return "ok"
    return "partial" if len(g.ok) else ("failed" if "failed" in statuses else "skipped")


def halfwidth(g: Repeats, col: str) -> float:
    """The relative 95% half-width of the rate: from the ok repeats where two or more, else the one window's (widened
    in `aggregate.cells_table`)."""
    sps = [float(x) for x in g.ok["samples_per_s"]]
    if len(sps) > 1:
        return repeats_halfwidth(sps)
    hw = _numbers(g.ok, "window_halfwidth")
    return float(hw.iloc[0]) if len(hw) and pd.notna(hw.iloc[0]) else np.nan


def _converged(g: Repeats, col: str) -> bool | None:
    conv = [c for c in g.ok.get("converged", pd.Series(dtype=object)) if isinstance(c, (bool, np.bool_))]
    return all(conv) if conv else None


def _joined(rows: Callable[[Repeats], pd.DataFrame], sep: str, none=None) -> Callable[[Repeats, str], str | None]:
    """The distinct texts of a column over `rows`, sorted and joined with `sep` (`none` where there is none)."""
    return lambda g, col: sep.join(sorted({x for x in rows(g).get(col, []) if isinstance(x, str) and x})) or none


COLUMNS = (
    Column("cell_id", read=lambda r: r["cell_id"]),
    Column("loader", "Dataloader", spec("loader")),
    Column("model", "Model", spec("model")),
    Column("tier", "Disk", spec("tier")),
    Column("gpus", "GPU", spec("gpus")),
    Column("batch_size", "Batch size", spec("batch_size")),
    Column("precision", "Precision", spec("precision")),
    Column("parallel", "Parallel", spec("parallel")),
    Column("repeat", read=spec("repeat")),
    Column("time_s", "Time(s)", metric("time_s"), median),
    Column("steps", "Steps", metric("steps"), median),
    Column("samples_per_s", "Samples/s", metric("samples_per_s"), median),
    Column("samples_per_s_min", "Samples/s min", combine=lambda g, col: minimum(g, "samples_per_s")),
    Column("samples_per_s_max", "Samples/s max", combine=lambda g, col: maximum(g, "samples_per_s")),
    Column("spread", "Spread", combine=spread),
    Column("spread_flag", "Spread flag", combine=lambda g, col: bool(len(g.ok) > 1 and spread(g) > g.spread_warn)),
    Column("repeats", "Repeats", combine=lambda g, col: len(g.rows)),
    Column("repeats_ok", "Repeats ok", combine=lambda g, col: len(g.ok)),
    # the invocations its repeats come from (what compares: compare_group)
    Column("run", "Run", run_of, _joined(lambda g: g.counted, ", ")),
    Column("compare_group", "Compare group", group_of, lambda g, col: one_group(g.counted[col])),
    Column("host", "Host", host_of, _joined(lambda g: g.rows, "; ")),
    Column("status", "Status", lambda r: r["status"], status),
    Column("reason", "Reason", lambda r: r.get("reason"), _reason),
    Column("data_wait_ms", "Data wait (ms/step)", metric_mean("data_wait_ms"), median),
    Column("compute_ms", "Compute (ms/step)", metric_mean("compute_ms"), median),
    Column("data_wait_fraction", "Data wait fraction", metric("data_wait_fraction"), median),
    Column("half_ratio", read=metric("half_ratio")),
    Column("peak_gpu_mem_mb", "Peak GPU mem (MB)", lambda r: max(_peaks(r), default=None), maximum),
    # GPU 0: DataParallel gathers and scatters there
    Column("peak_gpu_mem_main_mb", "Peak GPU mem main card (MB)", lambda r: next(iter(_peaks(r)), None), maximum),
    Column(
        "peak_gpu_mem_others_mb", "Peak GPU mem other cards (MB)", lambda r: max(_peaks(r)[1:], default=None), maximum
    ),
    Column("input_dtype", read=lambda r: (_metrics(r).get("input") or {}).get("dtype")),
    Column("compiled", read=lambda r: r["spec"].get("compile", False)),
    Column(
        "device", "Device", lambda r: (_metrics(r).get("device") or {}).get("type"), _joined(lambda g: g.ok, ",", "")
    ),
    Column("workers", "Workers", metric("workers"), maximum),  # DataLoader workers (None: the loader has none)
    # DALI's threads, or a plugin's as its ctx.info says
    Column(
        "loader_threads", "Loader threads", lambda r: (_metrics(r).get("loader_info") or {}).get("threads"), maximum
    ),
    Column("loader_facts", "Loader facts", _facts_text, first_text),  # a plugin's, as declared (`rows.row_facts`)
    Column("tier_kind", "Tier kind", tier("kind", "tier_kind"), first),
    Column("cache", "Cache", tier("cache", "cache"), first),
    Column("device_read_share", "Device reads", lambda r: (r.get("tier") or {}).get("device_read_share"), minimum),
    Column("cpu_pct", "CPU %", telemetry_mean("cpu_mean_pct"), median),
    Column("gpu_util_pct", "GPU util %", gpus_mean("util_pct"), median),
    Column("pcie_rx_mb_s", "PCIe RX MB/s", gpus_mean("pcie_rx_mb_s"), median),
    Column("disk_read_mb_s", "Disk read MB/s", telemetry_mean("disk_read_mb_s"), median),
    Column("proc_read_mb_s", "Read MB/s", telemetry_mean("proc_read_mb_s"), median),
    Column("warnings", "Warnings", lambda r: "; ".join(warning_lines(_metrics(r))), _joined(lambda g: g.ok, "; ", "")),
    Column("window_halfwidth", read=window("ci95_rel_halfwidth")),
    Column(
        "contended",
        "Contended",
        lambda r: any(w["code"] == "contended" for w in warnings_of(_metrics(r))),
        lambda g, col: bool(g.ok[col].any()) if col in g.ok else False,
    ),
    Column("converged", "Converged", window("converged"), _converged),
    Column("halfwidth", "Rel. interval (95%)", combine=halfwidth),
    Column(
        "halfwidth_basis", "Interval from", combine=lambda g, col: f"{len(g.ok)} repeats" if len(g.ok) > 1 else "window"
    ),
    Column("timeline", read=lambda r: _telemetry(r).get("timeline")),
    Column(
        "rss_mb",
        read=lambda r: (_telemetry(r).get("rss_mb") or {}).get("max") or _metrics(r).get("process_tree_rss_mb"),
    ),
    # derived from the cells table (aggregate: Speed, GPU Efficiency, AU with their 95% intervals, `<name>_low/_high`)
    Column("speed", "Speed"),
    Column("gpu_efficiency", "GPU Efficiency"),
    Column("au", "AU"),
    Column("au_low", "AU low"),
    Column("au_high", "AU high"),
    Column("speed_low", "Speed low"),
    Column("speed_high", "Speed high"),
    Column("gpu_efficiency_low", "GPU Efficiency low"),
    Column("gpu_efficiency_high", "GPU Efficiency high"),
    Column("not_divided", "Not divided because"),
    Column("flags", "Flags"),  # the seed table's: what the diagnosis holds against the row (aggregate._flags)
    Column("spread_before_rerun", "Spread before rerun"),
    Column("image_mb_s", "Image MB/s"),  # the images the cell consumed: Samples/s x the tier's mean image size
    Column("tier_sequential_mb_s", "Tier sequential MB/s"),  # the tier probe: one reader streaming
    Column("tier_files_s", "Tier files/s"),  # the tier probe: random whole-file reads, the most any reader count got
    # the rate the sharing model predicts for the cell (whatif.predictions)
    Column("predicted", "Predicted samples/s"),
    Column("prediction_error", "Prediction error"),  # measured / predicted - 1
    Column("prediction_role", "Prediction role"),  # check: the cell tests the model (nothing is fitted now)
    Column("limited_by", "Predicted limit"),
    # the diagnosis (stall attribution after DS-Analyzer)
    Column("step_ms", "Step (ms)"),
    Column("compute_only_ms", "Compute (ms)"),
    Column("ram_step_ms", "Reference step (ms)"),
    Column("fetch_reference", "Fetch stall against"),
    Column("prep_stall_ms", "Prep stall (ms)"),
    Column("fetch_stall_ms", "Fetch stall (ms)"),
    Column("bottleneck", "Bottleneck"),
    Column("evidence", "Evidence"),
)
BY_NAME = {c.name: c for c in COLUMNS}
RECORD_COLUMNS = [c for c in COLUMNS if c.read is not None]  # repeats.csv, in this order
COMBINED = [c for c in COLUMNS if c.combine is not None]  # cells.csv after the configuration's keys, in this order

# cells.csv and diagnosis.csv: every column labelled; repeats.csv: the configuration and the seed's measures, the
# per-repeat details keep their names
CELLS = {c.name: c.label for c in COLUMNS if c.label}
REPEATS = {k: CELLS[k] for k in (*SEED_COLUMNS, *KEYS)}
TABLES = {"cells": CELLS, "diagnosis": CELLS, "repeats": REPEATS}


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


def table_csv(df: pd.DataFrame, table: str = "cells", **to_csv) -> str:
    """The CSV text of a table as written, with its labels."""
    return to_labels(df, table).to_csv(index=False, **to_csv)


def baseline_cell(baseline: dict) -> dict:
    """The config's `baseline` by the tables' keys: its loader, tier and setup (dp where it names no parallel mode)."""
    return {k: baseline.get(k, "dp" if k == "parallel" else None) for k in ("loader", "tier", *SETUP)}


def with_model(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its `model` column: as it is where it has one, else every row DEFAULT_MODEL, right after the loader
    (a copy): a table written before models were an axis, as `read_table` reads it."""
    if "model" in df:
        return df
    out = df.copy()
    out.insert(list(out.columns).index("loader") + 1 if "loader" in out else len(out.columns), "model", DEFAULT_MODEL)
    return out
