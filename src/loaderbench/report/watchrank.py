"""A watched script against what a loaderbench grid measured on the same host for its model, batch and precision:
each configuration's rate over the script's, with the interval of two independent measurements
(`uncertainty.quotient`).

A configuration's rate is its repeats' median, known to their 95% interval where it has two or more, else to its
window's widened by the noise between processes (`uncertainty.widened`, its default noise: a grid read alone does not
give the run's own); the script's window is widened the same way, being one process too. Same host: the records'
provenance names the watch's hostname and CPU model.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from loaderbench.core.cells import configuration
from loaderbench.core.records import KIND, CorruptRecord, read_record
from loaderbench.core.uncertainty import Ratio, quotient, repeats_halfwidth, widened

from .watchtext import PREFIX

Ranked = list[tuple[str, float, Ratio]]  # (configuration, samples/s, its rate over the script's), fastest first


def read_grid(folder: Path) -> tuple[list[dict], int]:
    """The cell records (kind cell) under `folder`, recursively (every `cells/*.json`: a run's tables, config and
    bundle pages are no records), and how many of those were not readable records (left where they are)."""
    records, unreadable = [], 0
    for path in sorted(Path(folder).rglob("*.json")):
        if path.name.endswith(".trace.json") or path.parent.name != "cells":
            continue
        try:
            record = read_record(path)
        except CorruptRecord:
            unreadable += 1
            continue
        if record.get("kind", KIND) == KIND:
            records.append(record)
    return records, unreadable


def same_host(record: dict, watched: dict) -> bool:
    """Whether `record` was measured on the watched run's host (its hostname and CPU model)."""
    a, b = (((r.get("provenance") or {}).get("host") or {}) for r in (record, watched))
    return bool(a) and a.get("hostname") == b.get("hostname") and a.get("cpu_model") == b.get("cpu_model")


def comparable(records: list[dict], watched: dict) -> list[dict]:
    """The ok cells of the watch's host, model, batch (per process) and precision; none where its model is unknown."""
    spec = watched["spec"]
    if not spec.get("model"):
        return []
    return [
        r
        for r in records
        if r["status"] == "ok"
        and same_host(r, watched)
        and r["spec"].get("model") == spec["model"]
        and r["spec"].get("batch_size") == spec["batch_size"]
        and r["spec"].get("precision") == spec["precision"]
    ]


def _rate(group: list[dict]) -> tuple[float, float]:
    """A configuration's median rate and its relative 95% half-width."""
    rates = [r["metrics"]["samples_per_s"] for r in group]
    if len(rates) > 1:
        return statistics.median(rates), repeats_halfwidth(rates)
    window = (group[0]["metrics"].get("window") or {}).get("ci95_rel_halfwidth") or 0.0
    return rates[0], widened(window, None)


def ranking(records: list[dict], watched: dict) -> Ranked:
    """(configuration, samples/s, its rate over the script's), fastest first."""
    groups: dict[str, list[dict]] = {}
    for r in comparable(records, watched):
        groups.setdefault(configuration(r["cell_id"]), []).append(r)
    m = watched["metrics"]
    script_hw = widened((m.get("window") or {}).get("ci95_rel_halfwidth") or 0.0, None)
    out = []
    for config, group in groups.items():
        rate, hw = _rate(group)
        out.append((config, rate, quotient(rate, hw, m["samples_per_s"], script_hw)))
    return sorted(out, key=lambda row: -row[1])


def lines(
    read: int, unreadable: int, watched: dict, folder: Path, rows: Ranked, guessed: Ranked, top: int = 10
) -> list[str]:
    """What the grid's records say against the script, for the watch's last screen: `rows` its measured cells
    (`ranking`), `guessed` the what-if's predictions (`predicted`), of `read` records."""
    spec = watched["spec"]
    what = f"{spec.get('model') or 'unknown model'} b{spec.get('batch_size')} {spec.get('precision')}"
    skipped = f" ({unreadable} unreadable JSON file(s) left out)" if unreadable else ""
    if watched["status"] != "ok":
        return [f"{PREFIX}grid records: nothing to compare, the script has no rate{skipped}"]
    if not spec.get("model"):
        return [f"{PREFIX}grid records: no torchvision model was recognised in the script, so none compares{skipped}"]
    if not rows:
        none = f"{PREFIX}grid records in {folder}: no ok cell of this host at {what} ({read} read){skipped}"
        return [none, *_predicted_lines(guessed, top)]
    out = [f"{PREFIX}grid records in {folder} at {what} on this host, fastest first, against the script's rate:"]
    for config, rate, ratio in rows[:top]:
        verdict = "" if ratio.differs_from(1.0) else ", no measurable difference"
        out.append(f"{PREFIX}  {config}: {rate:.1f} samples/s, {ratio.text(2)}x the script's{verdict}")
    if len(rows) > top:
        out.append(f"{PREFIX}  and {len(rows) - top} more{skipped}")
    elif skipped:
        out.append(f"{PREFIX} {skipped.strip()}")
    return out + _predicted_lines(guessed, top)


def predicted(records: list[dict], watched: dict) -> Ranked:
    """The what-if's predictions (`whatif.matrix`, 1 GPU) from this host's parts for the script's model, batch and
    precision where no training cell measured the pair: (configuration, samples/s, its rate over the script's, its
    interval from the prediction's), fastest first."""
    from loaderbench.whatif import matrix

    spec, m = watched["spec"], watched["metrics"]
    mine = [r for r in records if same_host(r, watched)]
    if not spec.get("model") or not mine:
        return []
    df = matrix(mine, gpus=(1,))
    if df.empty:
        return []
    rows = df[
        (df["status"] != "measured")
        & (df["model"] == spec["model"])
        & (df["batch_size"] == spec["batch_size"])
        & (df["precision"] == spec["precision"])
        & df["predicted"].notna()
    ]
    script_hw = widened((m.get("window") or {}).get("ci95_rel_halfwidth") or 0.0, None)
    out = []
    for _, r in rows.iterrows():
        hw = max(r["predicted_hi"] / r["predicted"] - 1, 1 - r["predicted_lo"] / r["predicted"], 0.0)
        out.append(
            (r["configuration"], float(r["predicted"]), quotient(r["predicted"], hw, m["samples_per_s"], script_hw))
        )
    return sorted(out, key=lambda row: -row[1])


def _predicted_lines(rows: Ranked, top: int) -> list[str]:
    if not rows:
        return []
    out = [f"{PREFIX}predicted from this host's parts, not measured (the what-if: loader alone and model ceiling):"]
    for config, rate, ratio in rows[:top]:
        out.append(f"{PREFIX}  {config}: {rate:.1f} samples/s predicted, {ratio.text(2)}x the script's")
    if len(rows) > top:
        out.append(f"{PREFIX}  and {len(rows) - top} more")
    return out
