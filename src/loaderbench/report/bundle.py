"""The results bundle: index.html linking every figure and table with the run's provenance (`bundlepage`), the files
it links copied beside it, and a zip of it."""

from __future__ import annotations

import html
import json
import shutil
import time
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd

from loaderbench.core.records import read_record
from loaderbench.core.registry import NO_MODEL
from loaderbench.core.util import writing

from .bundlepage import crosscheck_html, index_html
from .columns import read_table
from .figure_list import EXTRA_FILES, FORMATS, INDEX, load_captions, read_index, run_captions
from .verdict import render_html
from .whatiftables import MATRIX, SCORES, whatif_html


def _summarize_provenance(records: list[dict]) -> dict:
    """The distinct values each provenance field took across the cells (normally one each)."""
    seen: dict[str, Counter] = {}
    for r in records:
        p = r.get("provenance") or {}
        flat = {f"versions.{k}": v for k, v in (p.get("versions") or {}).items()}
        flat.update({f"host.{k}": v for k, v in (p.get("host") or {}).items()})
        flat.update({f"git.{k}": v for k, v in (p.get("git") or {}).items()})
        flat.update({f"container.{k}": v for k, v in (p.get("container") or {}).items()})
        for k, v in flat.items():
            seen.setdefault(k, Counter())[json.dumps(v) if not isinstance(v, str) else v] += 1
    return {k: dict(c) for k, c in seen.items()}


TABLES = (
    "cells.csv",
    "repeats.csv",
    "diagnosis.csv",
    "diagnosis.md",
    "recommendations.json",
    "verdict.json",
    "tier_probe.csv",
)
WHATIF_TABLES = (MATRIX, SCORES)  # copied and shown where given (the workflow's rule whatif writes them)


def _by_name(files: list[Path], wanted: tuple[str, ...], what: str) -> dict[str, Path]:
    """The given files by file name; every `wanted` name must be among them."""
    found = {Path(f).name: Path(f) for f in files}
    missing = [n for n in wanted if n not in found]
    if missing:
        raise FileNotFoundError(f"bundle: {what} missing from the inputs: {', '.join(missing)}")
    return found


def make_bundle(
    config_json: Path,
    table_files: list[Path],
    figures_dir: Path,
    check_json: Path,
    check_report: Path,
    manifests: list[Path],
    cell_files: list[Path],
    captions_dir: Path,
    out_dir: Path,
    zip_path: Path,
    timeline_files: list[Path] = (),
    crosscheck_files: list[Path] = (),
) -> Path:
    """index.html in `out_dir` with the tables, the figures drawn in `figures_dir` (in the registry's order; each one
    not drawn named with its reason), cell records, timelines and provenance copied beside it; the folder zipped to
    `zip_path`."""
    out_dir, zip_path = Path(out_dir), Path(zip_path)
    tables = _by_name(table_files, TABLES, "tables")
    whatif = {n: f for n, f in _by_name(table_files, (), "tables").items() if n in WHATIF_TABLES}
    figures = read_index(figures_dir)
    _copy_tables_and_figures(out_dir, tables, Path(figures_dir), timeline_files, tuple(figures["drawn"]))
    records = []
    for f in cell_files:
        _copy(f, out_dir / "cells" / Path(f).name)
        records.append(read_record(f))
    config = json.loads(Path(config_json).read_text())
    check = json.loads(Path(check_json).read_text())
    _copy(check_report, out_dir / "dataset_check.txt")
    tiers = [_tier_summary(json.loads(Path(m).read_text())) for m in manifests]
    _write_text(out_dir / "config.json", json.dumps(config, indent=2))
    probe = pd.read_csv(tables["tier_probe.csv"])
    provenance = {
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "tiers": tiers,
        "tier_probe": json.loads(probe.to_json(orient="records")),
        "cells": _summarize_provenance(records),
    }
    _write_text(out_dir / "provenance.json", json.dumps(provenance, indent=2))
    table = read_table(tables["cells.csv"])
    models = [m for m in dict.fromkeys(table["model"]) if isinstance(m, str) and m != NO_MODEL]
    captions = run_captions(load_captions(captions_dir), config, models)
    diagnosis = read_table(tables["diagnosis.csv"], "diagnosis")
    recs = json.loads(tables["recommendations.json"].read_text())
    verdict = render_html(json.loads(tables["verdict.json"].read_text()), table)
    crosscheck = [json.loads(Path(f).read_text()) for f in crosscheck_files]
    for i, f in enumerate(crosscheck_files):
        _copy(f, out_dir / "tables" / (f"crosscheck{i or ''}.json"))
    for name, f in whatif.items():
        _copy(f, out_dir / "tables" / name)
    _write_text(
        out_dir / "index.html",
        index_html(
            config,
            table,
            check,
            tiers,
            provenance,
            records,
            captions,
            diagnosis,
            recs,
            {Path(f).name for f in timeline_files},
            crosscheck_html(crosscheck),
            verdict,
            figures,
            traces=_traces(records, out_dir),
            whatif=whatif_html(whatif.get(MATRIX), whatif.get(SCORES)),
        ),
    )
    _zip(out_dir, zip_path)
    return out_dir / "index.html"


def _copy_tables_and_figures(
    out_dir: Path, tables: dict[str, Path], figures_dir: Path, timeline_files: list[Path], drawn: tuple[str, ...]
) -> None:
    """`out_dir` made afresh with its figures/, tables/ and cells/ folders, the figures `drawn` (and the index of the
    figures), the tables and timelines in it."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for sub in ("figures", "tables", "cells"):
        with writing(out_dir / sub):
            (out_dir / sub).mkdir(parents=True)
    for name in (*(f"{n}.{ext}" for n in drawn for ext in FORMATS), INDEX):
        _copy(figures_dir / name, out_dir / "figures" / name)
    for name in EXTRA_FILES:  # the seed's table as HTML sits with the tables, where it was drawn
        if (figures_dir / name).is_file():
            _copy(figures_dir / name, out_dir / "tables" / name)
    for name in TABLES:
        _copy(tables[name], out_dir / "tables" / name)
    if timeline_files:
        with writing(out_dir / "telemetry"):
            (out_dir / "telemetry").mkdir()
        for f in timeline_files:
            _copy(f, out_dir / "telemetry" / Path(f).name)


def _tier_summary(manifest: dict) -> dict:
    """What the bundle keeps of a tier's staging manifest: where and what it staged, not the file list."""
    return {k: manifest[k] for k in ("tier", "tier_path", "root", "filesystem", "counts", "sha256")}


def _copy(src: Path, dst: Path) -> None:
    """`src` copied to `dst`; a failed write names `dst` (WriteError), a missing source names the source."""
    data = Path(src).read_bytes()
    with writing(dst):
        Path(dst).write_bytes(data)


def _write_text(path: Path, text: str) -> None:
    with writing(path):
        path.write_text(text)


def _zip(folder: Path, zip_path: Path) -> None:
    """`folder` zipped (as bundle/...) into `zip_path` through a temporary file, removed when the zip cannot be
    finished (WriteError names the zip)."""
    tmp = zip_path.with_name(f".{zip_path.name}.tmp")
    with writing(zip_path):
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
                for f in sorted(folder.rglob("*")):
                    if f.is_file():
                        z.write(f, Path("bundle") / f.relative_to(folder))
            tmp.replace(zip_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _traces(records: list, out_dir: Path) -> str:
    """Each cell's trace (where its record says it is) copied to `out_dir`/traces, and a section linking them that
    says how to open one; "" where no cell has one."""
    e = html.escape
    links = []
    for r in sorted(records, key=lambda r: r["cell_id"]):
        src = Path(str((r.get("telemetry") or {}).get("trace") or ""))
        if not src.name or not src.is_file() or not src.stat().st_size:  # none, or lost to a full disk (runcell)
            continue
        with writing(out_dir / "traces"):
            (out_dir / "traces").mkdir(exist_ok=True)
        _copy(src, out_dir / "traces" / src.name)
        links.append(f"<a href='traces/{e(src.name)}'>{e(r['cell_id'])}</a>")
    if not links:
        return ""
    return (
        "<h2>Traces</h2><p>Each cell's steps (the wait for the batch, the step, on a GPU the device's side) and its "
        "telemetry on one clock, in the Chrome trace-event format: save one and open it at ui.perfetto.dev "
        "(&ldquo;Open trace file&rdquo;) or in Chrome at chrome://tracing (&ldquo;Load&rdquo;).</p><p>"
        + " &middot; ".join(links)
        + "</p>"
    )
