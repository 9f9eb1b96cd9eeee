"""Rerun, once, the configurations whose repeats disagree (spread = (max - min) / median of Samples/s > spread_warn)
or that have a contended cell (other processes used the host during its window: record["contention"]).

`loaderbench respread` moves the records of such a configuration (every repeat) to `<cells>/superseded/` and
notes it in the ledger `results/respread.json`; the next Snakemake run measures those cells again (their records
are missing). A configuration in the ledger is never requeued, so each is rerun at most once; the table then shows
the spread before the rerun next to the new one. `make respread` runs all three steps.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

from loaderbench.core.cells import configuration
from loaderbench.core.util import atomic_write_json


def spreads(records: list[dict]) -> dict[str, dict]:
    """Per configuration with at least two ok repeats: its spread and the repeats' Samples/s."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(configuration(r["cell_id"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        sps = [r["metrics"]["samples_per_s"] for r in rs if r["status"] == "ok"]
        if len(sps) >= 2:
            med = statistics.median(sps)
            out[key] = {
                "spread": (max(sps) - min(sps)) / med if med > 0 else 0.0,
                "samples_per_s": sps,
                "cells": sorted(r["cell_id"] for r in rs),
            }
    return out


def load_ledger(path: Path) -> dict:
    return json.loads(Path(path).read_text()) if Path(path).is_file() else {}


def contended(records: list[dict]) -> dict[str, list[str]]:
    """Per configuration: its cells whose window was contended (record["contention"]["contended"])."""
    out: dict[str, list[str]] = {}
    for r in records:
        if (r.get("contention") or {}).get("contended"):
            out.setdefault(configuration(r["cell_id"]), []).append(r["cell_id"])
    return out


def respread(cells_dir: Path, spread_warn: float, ledger_path: Path) -> list[str]:
    """Requeue every configuration over `spread_warn` or with a contended cell that was not rerun before; returns
    their names (`requeue()` also says why)."""
    return list(requeue(cells_dir, spread_warn, ledger_path))


def requeue(cells_dir: Path, spread_warn: float, ledger_path: Path) -> dict[str, str]:
    """`respread()`, returning {configuration: why it was requeued}."""
    cells_dir = Path(cells_dir)
    records = [json.loads(p.read_text()) for p in sorted(cells_dir.glob("*.json"))]
    ledger = load_ledger(ledger_path)
    requeued: dict[str, str] = {}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    spread = spreads(records)
    busy = contended(records)
    for key in sorted(set(spread) | set(busy)):
        if key in ledger:
            continue
        s = spread.get(key) or {"spread": None, "samples_per_s": None}
        why = []
        if s["spread"] is not None and s["spread"] > spread_warn:
            why.append(f"repeats spread {100 * s['spread']:.1f}% (over spread_warn {100 * spread_warn:.0f}%)")
        if key in busy:
            why.append(f"contended window in {', '.join(busy[key])} (other processes used the host while it measured)")
        if not why:
            continue
        cells = sorted(r["cell_id"] for r in records if configuration(r["cell_id"]) == key)
        superseded = cells_dir / "superseded"
        superseded.mkdir(exist_ok=True)
        for cid in cells:
            shutil.move(str(cells_dir / f"{cid}.json"), superseded / f"{cid}.{stamp}.json")
        ledger[key] = {**s, "cells": cells, "spread_warn": spread_warn, "requeued_at": stamp, "why": "; ".join(why)}
        requeued[key] = "; ".join(why)
    if requeued:
        atomic_write_json(ledger_path, ledger)
    return requeued
