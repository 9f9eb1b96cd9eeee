"""Cell records -> tables: every repeat (repeats.csv), and the seed's table (cells.csv: median over repeats) with
Speed, GPU Efficiency and AU (`ratios`). What each column is, how a record gives it and how repeats combine into it:
`columns.COLUMNS`. The what-if's part cells (`cells.part_kind`) are measurements of parts, not of training: they are
kept out of those tables (and so of every table, figure and verdict made from them) and go to parts.csv."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from loaderbench.core.records import load_records
from loaderbench.core.uncertainty import DEFAULT_BETWEEN_NOISE, between_noise, widened
from loaderbench.core.util import atomic_write_text

from .columns import COMBINED, KEYS, RECORD_COLUMNS, SEED_COLUMNS, Repeats, table_csv, to_labels
from .ratios import divide
from .rows import implausible, on_gpu, read_flag


def repeats_table(records: list[dict]) -> pd.DataFrame:
    """One row per cell record (every repeat, every status; records as `records.read_record` reads them)."""
    return pd.DataFrame([{c.name: c.read(r) for c in RECORD_COLUMNS} for r in records])


def cells_table(repeats: pd.DataFrame, baseline: dict, spread_warn: float = 0.05) -> pd.DataFrame:
    """The seed's table: median over repeats, min-max, Speed and GPU Efficiency (each model's cells against the
    baseline configuration of the same model; the loader alone, model `none`, against nothing)."""
    rows = []
    for key, g in repeats.groupby(KEYS, sort=False, dropna=False):
        reps = Repeats(g, g[g["status"] == "ok"], spread_warn)
        rows.append({**dict(zip(KEYS, key, strict=True)), **{c.name: c.combine(reps, c.name) for c in COMBINED}})
    t = pd.DataFrame(rows)
    widen_single_windows(t, repeats)
    divide(t, baseline)
    return t[SEED_COLUMNS + [c for c in t.columns if c not in SEED_COLUMNS]]


def widen_single_windows(t: pd.DataFrame, repeats: pd.DataFrame) -> None:
    """A cell of one process: its window's interval widened by the noise between this run's repeated processes, or by
    the default where the run repeated no cell (a window's own interval holds none of that noise); in place."""
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
    from loaderbench.core.cells import configuration, part_kind

    measured = records  # the sharing model reads the parts too
    records = [r for r in records if not part_kind(r["spec"])]
    from loaderbench.plan.respread import load_ledger

    ledger = load_ledger(Path(ledger)) if ledger else {}
    repeats = repeats_table(records)
    table = cells_table(repeats, baseline, spread_warn)
    add_tier_rates(table, tier_rates(results))
    ids = repeats.groupby(KEYS, sort=False, dropna=False)["cell_id"].first().map(configuration)
    configurations = pd.Series([ids.get(tuple(r[k] for k in KEYS)) for _, r in table.iterrows()], index=table.index)
    add_predictions(table, configurations, predictions(measured))
    if ledger:  # rerun once for their spread: the spread those repeats had before
        before = {key: entry["spread"] for key, entry in ledger.items()}
        table["spread_before_rerun"] = configurations.map(lambda c: before.get(c))
    out_dir = Path(out_dir)
    atomic_write_text(out_dir / "repeats.csv", table_csv(repeats, "repeats"))
    atomic_write_text(out_dir / "cells.csv", table_csv(table, "cells", float_format="%.4g"))
    parts = parts_table([r for r in measured if part_kind(r["spec"])], baseline, spread_warn)
    add_tier_rates(parts, tier_rates(results))
    add_predictions(parts, pd.Series(None, index=parts.index, dtype=object), None)  # a part is predicted by none
    atomic_write_text(out_dir / "parts.csv", table_csv(parts, "cells", float_format="%.4g"))
    return table


# the ratios a part has none of: it is measured against nothing
RATIOS = [f"{c}{end}" for c in ("speed", "gpu_efficiency", "au") for end in ("", "_low", "_high")]


def parts_table(records: list[dict], baseline: dict, spread_warn: float) -> pd.DataFrame:
    """parts.csv: a row per part configuration (the median over its repeats, as cells.csv's rows), `part` first
    ("beside", "ranks2", ...), its ratios blank."""
    from loaderbench.core.cells import part_kind

    def part(r: dict) -> str:
        kind = part_kind(r["spec"])
        return f"ranks{r['spec']['ranks']}" if kind == "ranks" else kind

    tables = []
    for name in dict.fromkeys(map(part, records)):
        t = cells_table(repeats_table([r for r in records if part(r) == name]), baseline, spread_warn)
        t.insert(0, "part", name)
        tables.append(t.assign(**{c: np.nan for c in RATIOS if c in t}))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=["part", *KEYS])


# the sharing model's columns (whatif.predictions) -> the cells table's
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
    t.insert(t.columns.get_loc("spread") + 1, "flags", [_flags(r) for _, r in table.iterrows()])
    fmt = {
        "time_s": "{:.1f}",
        "steps": "{:.0f}",
        **({"predicted": "{:.1f}", "prediction_error": "{:+.1%}"} if predicted else {}),
    }
    for col, f in fmt.items():
        t[col] = [f.format(float(v)) if pd.notna(v) else "-" for v in t[col]]
    unknown = pd.Series(np.nan, index=table.index)
    if "device" in table:  # the seed's GPU column says where a cell trained on the CPU instead
        t["gpus"] = [f"{g} (CPU)" if not on_gpu(d) else g for g, d in zip(table["gpus"], table["device"], strict=True)]
    t["samples_per_s"] = [
        _with_halfwidth(v, h, n)
        for v, h, n in zip(table["samples_per_s"], table.get("halfwidth", unknown), table["repeats_ok"], strict=True)
    ]
    for col in ("speed", "gpu_efficiency"):
        ends = zip(table[col], table.get(f"{col}_low", unknown), table.get(f"{col}_high", unknown), strict=True)
        t[col] = [_with_ends(v, lo, hi) for v, lo, hi in ends]
    # GPU Efficiency compares n GPUs with 1: at 1 GPU it says nothing (a cell divided by itself, or dali-mc by dali-sc)
    t.loc[(table["gpus"] == 1).to_numpy(), "gpu_efficiency"] = "- (1 GPU)"
    for col in ["spread", *rerun]:
        t[col] = [f"{100 * v:.1f}%" if pd.notna(v) else "-" for v in t[col]]
    t.loc[(table["repeats_ok"] <= 1).to_numpy(), "spread"] = "- (one repeat)"
    if "prediction_role" in predicted:
        t["prediction_role"] = [x if isinstance(x, str) and x else "-" for x in t["prediction_role"]]
    if divided:
        t["not_divided"] = [x if isinstance(x, str) else "" for x in t["not_divided"]]
    return to_labels(t)


def _with_halfwidth(value, halfwidth, repeats=None) -> str:
    """A rate as the seed's table shows it, with its 95% interval where known: `277.1 (+-5.2%)`; without one, why:
    `(one window)` for a single repeat whose window gave none, else `(no interval)`."""
    if pd.isna(value):
        return "-"
    if pd.notna(halfwidth):
        return f"{float(value):.1f} (+-{100 * float(halfwidth):.1f}%)"
    return f"{float(value):.1f} " + ("(one window)" if pd.notna(repeats) and repeats == 1 else "(no interval)")


def _with_ends(value, low, high) -> str:
    """A ratio with its 95% interval where known: `1.30 [1.22, 1.38]`; a row divided by itself (the reference) says
    so instead of a zero-width interval."""
    if pd.isna(value):
        return "-"
    if pd.notna(low) and pd.notna(high) and float(low) == float(high) == float(value) == 1.0:
        return "1.00 (reference)"
    ends = f" [{float(low):.2f}, {float(high):.2f}]" if pd.notna(low) and pd.notna(high) else ""
    return f"{float(value):.2f}" + ends


def _flags(row: pd.Series) -> str:
    """What the diagnosis holds against a row's numbers, said beside them: contended, an AU above the ceiling
    (implausible), a window that did not reach its precision; "" where nothing."""
    flags = []
    if read_flag(row.get("contended")) is True:
        flags.append("contended")
    if implausible(row):
        au = row.get("au")
        flags.append(f"implausible: AU {float(au):.2f} > 1" if pd.notna(au) else "implausible")
    if read_flag(row.get("converged")) is False:
        flags.append("window not converged")
    return "; ".join(flags)
