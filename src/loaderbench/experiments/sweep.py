"""Setting sweeps: the same cells under variants of one or more settings (DALI's decoder load, queue depth, threads,
the input dtype, torch.compile, ...), each cell a real cell job (`runcell`) in a fresh process forked by the sweep's own
warm-start server (`warmclient.serving`), repeats interleaved across variants so machine drift hits them alike. A
tuning experiment, outside the grid: its records go to their own folder.

A variant is `name:field=value,field=value` over CellSpec fields (`name:` alone keeps the config's settings).
AU is taken against the `synthetic` cell of the same variant when the sweep has one, else of the first variant
(variants that change only loader settings reuse the first variant's synthetic cell).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import yaml

from loaderbench.core.cells import CellSpec, cell_id, cell_spec, loader_settings
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
) -> list[dict]:
    """Run every (repeat, variant, loader) cell; returns one summary row per (variant, loader)."""
    from loaderbench.engine.runner.runcell import run_cell

    parsed = [parse_variant(v) for v in variants]
    if len({n for n, _ in parsed}) != len(parsed):
        raise ConfigError("variant names must differ")
    records: dict[tuple[str, str], list[dict]] = {}
    with warmclient.serving():  # fresh processes forked warm: the repeats still ask what differs between processes
        for r in range(repeats):
            for name, overrides in parsed:
                for lo in loaders:
                    if lo == "synthetic" and name != parsed[0][0] and set(overrides) <= LOADER_ONLY:
                        continue
                    base = cell_spec(cfg, cell_id(lo, tier, 1, batch_size, precision, "dp", r), in_grid=False)
                    spec = dataclasses.replace(base, **loader_settings(overrides, lo))
                    rec = run_cell(spec, manifest, Path(out_dir) / name / f"{spec.cell_id}.json", host=host)
                    records.setdefault((name, lo), []).append(rec)
    rows = []
    for (name, lo), recs in records.items():
        ok = [x["metrics"] for x in recs if x["status"] == "ok"]
        rows.append(
            {
                "variant": name,
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
    ceilings = {row["variant"]: row["median"] for row in rows if row["loader"] == "synthetic" and row["median"]}
    for row in rows:
        ceiling = ceilings.get(row["variant"], ceilings.get(first))
        row["au"] = row["median"] / ceiling if ceiling and row["median"] else None
        row["au_against"] = (row["variant"] if row["variant"] in ceilings else first) if ceiling else None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "sweep.json").write_text(json.dumps(rows, indent=2))
    return rows


def render(rows: list[dict]) -> str:
    lines = [
        (
            f"{'variant':14s} {'loader':12s} {'Samples/s':>10s} {'AU':>6s} {'device ms':>9s} {'wait ms':>8s} "
            f"{'setup s':>7s}  runs"
        )
    ]
    for r in rows:
        if r["median"] is None:
            lines.append(f"{r['variant']:14s} {r['loader']:12s} {r['status']}: {r['reason']}")
            continue
        au = f"{r['au']:.3f}" if r["au"] else "-"
        runs = ", ".join(f"{x:.0f}" for x in r["samples_per_s"])
        lines.append(
            f"{r['variant']:14s} {r['loader']:12s} {r['median']:10.1f} {au:>6s} {r['compute_ms']:9.1f} "
            f"{r['data_wait_ms']:8.1f} {r['setup_s']:7.1f}  {runs}"
        )
    return "\n".join(lines)
