"""The bundle's index.html: the run's summary, verdict, tables, diagnosis, recommendations, figures, tiers, provenance
and cells as HTML."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

import pandas as pd

from loaderbench.core.records import warning_lines, warnings_of
from loaderbench.core.registry import DEFAULT_MODEL

from .aggregate import seed_table_frame
from .columns import to_labels, with_model


def index_html(
    config: dict,
    table: pd.DataFrame,
    check: dict,
    tiers: list,
    provenance: dict,
    records: list,
    captions: dict,
    diagnosis: pd.DataFrame,
    recs: list[dict],
    timelines: set[str],
    crosscheck: str = "",
    verdict: str = "",
    figures: dict | None = None,
    traces: str = "",
    whatif: str = "",
) -> str:
    """The bundle's index.html: summary, verdict, tables, diagnosis, recommendations, figures, tiers, provenance."""
    e = html.escape
    status = Counter(r["status"] for r in records)
    drawn = (figures or {}).get("drawn", [])
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>loaderbench: {e(config['name'])}</title>",
        (
            "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
            "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
            "img{max-width:100%}figure{margin:1.5em 0}figcaption{color:#444}</style></head><body>"
        ),
        f"<h1>loaderbench results: {e(config['name'])}</h1>",
        f"<p>{len(records)} cells: " + ", ".join(f"{v} {k}" for k, v in sorted(status.items())) + _held(records) + ". "
        f"Generated {e(provenance['generated_at'])}.</p>",
        *_reread_note(records, e),
        verdict,
        "<h2>Table (the seed's columns)</h2>",
        seed_table_frame(table).to_html(index=False, border=0),
        (
            "<p>Downloads: <a href='tables/cells.csv'>cells.csv</a> (median over repeats, all columns), "
            "<a href='tables/repeats.csv'>repeats.csv</a> (every repeat), "
            + ("<a href='tables/seed_table.html'>seed_table.html</a>, " if "seed_table" in drawn else "")
            + "<a href='config.json'>config.json</a>, "
            "<a href='provenance.json'>provenance.json</a>, <a href='dataset_check.txt'>dataset_check.txt</a>.</p>"
        ),
        "<h2>Diagnosis: the bottleneck of each cell</h2>",
        _diagnosis_html(diagnosis),
        "<h2>Recommendations (computed from the cells above)</h2><ul>",
        *(
            f"<li><b>{e(r['topic'])}</b>: {e(r['text'])} <small>(cells: {e(', '.join(r['cells']))})</small></li>"
            for r in recs
        ),
        "</ul>" if recs else "<li>none: no two cells of this grid differ in one setting</li></ul>",
        (
            "<p>Also as <a href='tables/diagnosis.md'>diagnosis.md</a>, <a href='tables/diagnosis.csv'>diagnosis.csv</a> "
            "(with the stall attribution) and <a href='tables/recommendations.json'>recommendations.json</a>.</p>"
        ),
        crosscheck,
        whatif,
        "<h2>Figures</h2>",
        *_figure_parts(captions, figures or {"drawn": [], "not_drawn": {}}),
        "<h2>Dataset and storage tiers</h2>",
        *_tier_parts(check, tiers, provenance),
        "<h2>Provenance</h2><table><tr><th>field</th><th>values (cells)</th></tr>",
        *_provenance_rows(provenance),
        "</table><h2>Cells</h2><ul>",
        *_cell_items(records, timelines),
        "</ul>",
        traces,
        "</body></html>",
    ]
    return "\n".join(parts)


def _reread_note(records: list, e) -> list[str]:
    """A warning at the top when cold-tier cells reread files (after the first pass from the page cache)."""
    rereads = [
        r["cell_id"] for r in records if any(w["code"] == "cold_tier_reread" for w in warnings_of(r.get("metrics")))
    ]
    if not rereads:
        return []
    return [
        (
            f"<p><b>Warning:</b> {len(rereads)} cold-tier cell(s) read more images than the dataset holds, so part of "
            "their reads came from the page cache, not the device (the dataset fits in RAM): "
            f"{e(', '.join(rereads))}. Use a larger dataset, a shorter window or an emulated tier.</p>"
        )
    ]


def crosscheck_html(summaries: list[dict]) -> str:
    """The crosscheck's cell/bare per loader (`loaderbench crosscheck`): how much the harness costs what it measures."""
    if not summaries:
        return ""
    e = html.escape
    rows = []

    def model(row: dict) -> str:
        return row.get("model") or DEFAULT_MODEL  # a crosscheck from before rows named their model trained the default

    for s in summaries:
        for r in s["rows"]:
            q = r.get("cell_over_bare")
            if q is None:
                rows.append(
                    f"<tr><td>{e(model(r))}</td><td>{e(r['loader'])}</td><td>{e(r['precision'])}</td>"
                    f"<td colspan='4'>failed: {e('; '.join(r['reasons']))}</td></tr>"
                )
                continue
            verdict = (
                "the harness costs the loader"
                if q["high"] < 1
                else "no measurable difference"
                if q["low"] <= 1
                else "cell faster than the bare loop"
            )
            rates = lambda xs: ", ".join(f"{x:.0f}" for x in xs)
            rows.append(
                f"<tr><td>{e(model(r))}</td><td>{e(r['loader'])}</td><td>{e(r['precision'])}</td>"
                f"<td>{rates(r['cell_samples_per_s'])}</td><td>{rates(r['bare_samples_per_s'])}</td>"
                f"<td>{q['value']:.3f} [{q['low']:.3f}, {q['high']:.3f}]</td><td>{verdict}</td></tr>"
            )
    head = summaries[0]
    return (
        "<h2>Does the harness slow the loader? (crosscheck)</h2>"
        f"<p>Each cell against a bare training loop of the same loader object in a fresh process (tier "
        f"{e(str(head.get('tier')))}, batch {head.get('batch_size')}, {head.get('rounds')} alternating round(s)); "
        "cell/bare with its 95% interval. Also as <a href='tables/crosscheck.json'>crosscheck.json</a>.</p>"
        "<table><tr><th>Model</th><th>Dataloader</th><th>precision</th><th>cell Samples/s</th><th>bare Samples/s</th>"
        "<th>cell/bare [95%]</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
    )


_DIAGNOSIS_COLUMNS = (
    "loader",
    "model",
    "tier",
    "gpus",
    "batch_size",
    "precision",
    "parallel",
    "samples_per_s",
    "au",
    "device_read_share",
    "bottleneck",
    "evidence",
)


def _diagnosis_html(diagnosis: pd.DataFrame) -> str:
    """The diagnosis table (those of its columns the page shows, labelled; the model where it holds more than one)
    as HTML."""
    diagnosis = with_model(diagnosis)
    cols = [c for c in _DIAGNOSIS_COLUMNS if c != "model" or diagnosis["model"].nunique() > 1]
    shown = diagnosis[[c for c in cols if c in diagnosis]]
    return to_labels(shown).to_html(index=False, border=0, float_format=lambda v: f"{v:.3g}", na_rep="-")


def _figure_parts(captions: dict, figures: dict) -> list[str]:
    """Each figure drawn (the figures index's "drawn", in the registry's order), its PNG linking to its SVG; then those
    with nothing to draw, each with its reason."""
    e = html.escape
    parts = [
        f"<figure><a href='figures/{name}.svg'><img src='figures/{name}.png' alt='{name}'></a>"
        f"<figcaption>{e(captions[name])} (<a href='figures/{name}.svg'>SVG</a>)</figcaption></figure>"
        for name in figures["drawn"]
    ]
    if figures["not_drawn"]:
        parts.append("<p>Not drawn, having nothing to draw:</p><ul class='not-drawn'>")
        parts += [
            f"<li><b>{e(name.replace('_', ' '))}</b>: {e(why)}</li>" for name, why in figures["not_drawn"].items()
        ]
        parts.append("</ul>")
    return parts


def _tier_parts(check: dict, tiers: list, provenance: dict) -> list[str]:
    """The dataset check's counts, each tier's place and manifest, and each tier's measured read rate."""
    e = html.escape
    c = check["counts"]
    parts = [
        f"<p>Source {e(check['source'])}: {c['files']} files, {c['ok']} ok, {c['odd']} odd but decodable (kept), "
        f"{c['bad']} undecodable (quarantined). Issues: {e(json.dumps(check['issues']))}."
        + "".join(
            f" Class folders left out ({why}): {e(', '.join(check[key]))}."
            for key, why in (("empty_classes", "no files"), ("all_bad_classes", "every file undecodable"))
            if check.get(key)
        )
        + "</p><ul>"
    ]
    for t in tiers:
        fs = t["filesystem"]
        parts.append(
            f"<li><b>{e(t['tier'])}</b>: {e(t['root'])} on {e(str(fs.get('device')))} ({e(str(fs.get('fstype')))}, "
            f"mounted at {e(str(fs.get('mount_point')))}); {t['counts']['files']} files, "
            f"{t['counts']['bytes'] / 1e6:.1f} MB; manifest {e(t['sha256'])}</li>"
        )
    parts.append("</ul><h3>Measured read rate of each tier (cold)</h3>")
    parts.append(
        pd.DataFrame(provenance["tier_probe"]).to_html(
            index=False, border=0, float_format=lambda v: f"{v:.3g}", na_rep="-"
        )
    )
    return parts


def _provenance_rows(provenance: dict) -> list[str]:
    """The provenance table's rows: each field with the values the cells gave it and how many cells gave each."""
    e = html.escape
    return [
        f"<tr><td>{e(k)}</td><td>{e('; '.join(f'{v} ({n})' for v, n in vals.items()))}</td></tr>"
        for k, vals in provenance["cells"].items()
    ]


def _cell_items(records: list, timelines: set[str]) -> list[str]:
    """One list item per cell, by id: its record's link, status, reason, timeline link and warnings."""
    e = html.escape
    parts = []
    for r in sorted(records, key=lambda r: r["cell_id"]):
        why = f": {e(r['reason'])}" if r.get("reason") else ""
        tl = Path(str((r.get("telemetry") or {}).get("timeline") or ""))
        tl_link = f" (<a href='telemetry/{e(tl.name)}'>timeline</a>)" if tl.name in timelines else ""
        warns = "".join(f"<br><small>warning: {e(w)}</small>" for w in warning_lines(r.get("metrics")))
        parts.append(
            f"<li><a href='cells/{e(r['cell_id'])}.json'>{e(r['cell_id'])}</a> {e(r['status'])}{why}{tl_link}"
            f"{warns}</li>"
        )
    return parts


def _held(records: list) -> str:
    """What the ok cells' own records hold against them, counted: contended windows, windows that did not reach their
    precision (" (of the ok: 3 contended, 2 not converged)"); "" where none."""
    ok = [r for r in records if r.get("status") == "ok"]
    contended = sum(any(w["code"] == "contended" for w in warnings_of(r.get("metrics") or {})) for r in ok)
    loose = sum(((r.get("metrics") or {}).get("window") or {}).get("converged") is False for r in ok)
    told = [f"{contended} contended" if contended else "", f"{loose} not converged" if loose else ""]
    return f" (of the ok: {', '.join(t for t in told if t)})" if any(told) else ""
