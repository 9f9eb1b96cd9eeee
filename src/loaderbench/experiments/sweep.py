"""Setting sweeps: the same cells under variants of one or more settings (DALI's decoder load, queue depth, threads,
the input dtype, torch.compile, ...), each cell a real cell job (`runcell`) in a fresh process forked by the sweep's own
warm-start server (`warmclient.serving`), repeats interleaved across variants so machine drift hits them alike. A
tuning experiment, outside the grid: its records go to their own folder.

A variant is `name:field=value,field=value` over CellSpec fields (`name:` alone keeps the config's settings).
Every cell trains each of the sweep's models (the config's, or one named: `loaderbench sweep --model`).
AU is taken against the `synthetic` cell of the same variant and model when the sweep has one, else of the first
variant (variants that change only loader settings reuse the first variant's synthetic cell); `none` (the loader
alone) has no synthetic cell, and no AU.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import yaml

from loaderbench.core.cells import CellSpec, cell_id, cell_spec, config_models, is_cell, loader_settings
from loaderbench.core.config import ConfigError
from loaderbench.engine.runner import warmclient

FIELDS = {f.name for f in dataclasses.fields(CellSpec)}
TYPES = {f.name: f.type for f in dataclasses.fields(CellSpec)}
# Settings that only change how files are read and prepared: the `synthetic` cell (no file) is the same under them,
# so a variant touching only these reuses the first variant's synthetic cell instead of measuring it again.
LOADER_ONLY = {
    "dali_threads",
    "dali_prefetch",
    "dali_hw_decoder_load",
    "workers",
    "prefetch_factor",
    "torchvision_transport",
}
# CellSpec's `_fixed` fields: the cell's identity, and where its tier lies (`cache` stays settable: cold vs warm is an
# experiment of its own)
FIXED = {f.name for f in dataclasses.fields(CellSpec) if f.metadata.get("fixed")}


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, body = text.partition(":")
    if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(f"variant '{text}': expected name:field=value,... with a name of letters, digits, -_.")
    overrides = {}
    for item in filter(None, body.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in FIELDS or key in FIXED:
            settable = ", ".join(sorted(FIELDS - FIXED))
            raise ConfigError(f"variant '{name}': '{item}' is not field=value over a settable field ({settable})")
        # a text field keeps its text: YAML would read placement=off as false
        overrides[key] = value if TYPES[key] == "str" else yaml.safe_load(value)
    return name, overrides


def sweep(
    cfg: dict,
    variants: list[str],
    loaders: list[str],
    tier: str,
    batch_size: int,
    precision: str,
    repeats: int,
    manifest: Path,
    out_dir: Path,
    host=None,
    models: list[str] | None = None,
) -> list[dict]:
    """Run every (repeat, variant, model, loader) cell, training each of `models` (None: the config's); returns one
    summary row per (variant, model, loader)."""
    from loaderbench.engine.runner.runcell import run_cell

    parsed = [parse_variant(v) for v in variants]
    if len({n for n, _ in parsed}) != len(parsed):
        raise ConfigError("variant names must differ")
    models = models or config_models(cfg)
    records: dict[tuple[str, str, str], list[dict]] = {}
    with warmclient.serving():  # fresh processes forked warm: the repeats still ask what differs between processes
        for r in range(repeats):
            for name, overrides in parsed:
                for model in models:
                    for lo in loaders:
                        if lo == "synthetic" and name != parsed[0][0] and set(overrides) <= LOADER_ONLY:
                            continue
                        if not is_cell(lo, model):  # synthetic x none: no loader and no model
                            continue
                        cid = cell_id(lo, tier, 1, batch_size, precision, "dp", r, model)
                        spec = dataclasses.replace(cell_spec(cfg, cid, in_grid=False), **loader_settings(overrides, lo))
                        rec = run_cell(spec, manifest, Path(out_dir) / name / f"{spec.cell_id}.json", host=host)
                        records.setdefault((name, model, lo), []).append(rec)
    rows = []
    for (name, model, lo), recs in records.items():
        ok = [x["metrics"] for x in recs if x["status"] == "ok"]
        rows.append(
            {
                "variant": name,
                "model": model,
                "loader": lo,
                "overrides": dict(parsed)[name],
                "status": "ok" if len(ok) == len(recs) else ",".join(x["status"] for x in recs),
                "reason": next((x.get("reason") for x in recs if x["status"] != "ok"), None),
                "samples_per_s": [m["samples_per_s"] for m in ok],
                "median": statistics.median(m["samples_per_s"] for m in ok) if ok else None,
                "compute_ms": statistics.median(m["compute_ms"]["mean"] for m in ok) if ok else None,
                "data_wait_ms": statistics.median(m["data_wait_ms"]["mean"] for m in ok) if ok else None,
                "setup_s": statistics.median(m["setup_s"] for m in ok) if ok else None,
                "steps": [m["steps"] for m in ok],
            }
        )
    first = parsed[0][0]
    ceilings = {
        (row["variant"], row["model"]): row["median"] for row in rows if row["loader"] == "synthetic" and row["median"]
    }
    for row in rows:
        own, firsts = (row["variant"], row["model"]), (first, row["model"])
        ceiling = ceilings.get(own, ceilings.get(firsts))
        row["au"] = row["median"] / ceiling if ceiling and row["median"] else None
        row["au_against"] = (row["variant"] if own in ceilings else first) if ceiling else None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "sweep.json").write_text(json.dumps(rows, indent=2))
    return rows


def render(rows: list[dict]) -> str:
    lines = [
        (
            f"{'variant':14s} {'model':14s} {'loader':12s} {'Samples/s':>10s} {'AU':>6s} {'device ms':>9s} "
            f"{'wait ms':>8s} {'setup s':>7s}  runs"
        )
    ]
    for r in rows:
        head = f"{r['variant']:14s} {r['model']:14s} {r['loader']:12s}"
        if r["median"] is None:
            lines.append(f"{head} {r['status']}: {r['reason']}")
            continue
        au = f"{r['au']:.3f}" if r["au"] else "-"
        runs = ", ".join(f"{x:.0f}" for x in r["samples_per_s"])
        lines.append(
            f"{head} {r['median']:10.1f} {au:>6s} {r['compute_ms']:9.1f} "
            f"{r['data_wait_ms']:8.1f} {r['setup_s']:7.1f}  {runs}"
        )
    return "\n".join(lines)
