"""The one result format: a cell record (ok, skipped or failed) with metrics and provenance."""

from __future__ import annotations

import time
from pathlib import Path

from .cells import CellSpec
from .pluginsource import plugin_source
from .util import stable_hash

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed")


def make_record(
    spec: CellSpec,
    status: str,
    metrics: dict | None = None,
    reason: str | None = None,
    detail: str | None = None,
    **parts,
) -> dict:
    """The cell record, built here only (the cell runner calls it once, with everything it collected: `parts` are
    started_at, wall_s, tier, telemetry, contention, provenance, phases_s, process_start, stacks, manifest_sha256).

    A plugin cell's provenance gains `plugin`: the plugin's code as the cell ended (pluginsource.plugin_source: where it
    lies, whether installed editable, its identity), beside the identity its spec was made with."""
    assert status in STATUSES
    if spec.loader_ref and isinstance(parts.get("provenance"), dict):
        parts["provenance"] = {**parts["provenance"], "plugin": _plugin(spec.loader_ref)}
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": spec.cell_id,
        "status": status,
        "reason": reason,
        **({"detail": detail} if detail is not None else {}),
        "spec": spec.to_dict(),
        "spec_hash": spec_hash(spec),
        "metrics": metrics,
        "finished_at": time.time(),
        **parts,
    }


def _plugin(reference: str) -> dict:
    """A plugin cell's provenance.plugin; what kept it from being read, rather than no record at all."""
    try:
        return {"reference": reference, **(plugin_source(reference) or {})}
    except Exception as e:  # noqa: BLE001 - the record must still be written
        return {"reference": reference, "error": f"{type(e).__name__}: {e}"}


def spec_hash(spec: CellSpec) -> str:
    """The hash a record keeps of its cell's spec: a record whose spec_hash is the current spec's measured this cell
    as it is configured now (Snakemake's spec param decides the same)."""
    return stable_hash(spec.to_dict())


# Every warning a record can carry: a stable code (what reports and the bundle match on) -> the label its text
# starts with in tables and logs ("unsteady: the second half ...").
WARNINGS = {
    "diverged": "diverged",
    "short_window": "short window",
    "unsteady": "unsteady",
    "not_converged": "not converged",
    "implausible": "implausible",
    "contended": "contended",
    "cold_tier_reread": "cold tier reread",
    "warm_reads": "warm reads",
}


def warning(code: str, text: str) -> dict:
    """One warning of a record's metrics["warnings"]: {"code": ..., "text": ...}."""
    if code not in WARNINGS:
        raise ValueError(f"unknown warning code {code!r}")
    return {"code": code, "text": text}


def warnings_of(metrics: dict | None) -> list[dict]:
    """The warnings of a record's metrics as {"code", "text"}; a record written before warnings had codes (a string
    "label: text") is read by its label."""
    labels = {label: code for code, label in WARNINGS.items()}
    out = []
    for w in (metrics or {}).get("warnings") or []:
        if isinstance(w, str):
            label, _, text = w.partition(": ")
            w = {"code": labels.get(label, label), "text": text}
        out.append(w)
    return out


def warning_lines(metrics: dict | None) -> list[str]:
    """Each warning as its line in tables and logs: "<label>: <text>"."""
    return [f"{WARNINGS.get(w['code'], w['code'])}: {w['text']}" for w in warnings_of(metrics)]


def validate_record(record: dict) -> None:
    """Raise jsonschema.ValidationError when `record` is not a valid cell record."""
    from importlib import resources

    import jsonschema
    import yaml

    schema = yaml.safe_load(resources.files("loaderbench").joinpath("schemas/cell.schema.yaml").read_text())
    jsonschema.validate(record, schema)


class CorruptRecord(ValueError):
    """A cell record that cannot be read (truncated, not JSON, not a record); the message names the file."""


CORRUPT_DIR = "corrupt"


def read_record(path: Path) -> dict:
    """The cell record at `path`; CorruptRecord (naming the file) when it is not a readable record."""
    import json

    try:
        record = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptRecord(f"cell record {path} is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(record, dict) or not {"cell_id", "status", "spec"} <= record.keys():
        raise CorruptRecord(f"cell record {path} is not a cell record (no cell_id, status and spec)")
    return record


def set_aside(path: Path) -> Path:
    """Move an unreadable record to `<its folder>/corrupt/` (never overwriting an earlier one); returns where."""
    import os

    path = Path(path)
    dest = path.parent / CORRUPT_DIR / path.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while dest.exists():
        dest = path.parent / CORRUPT_DIR / f"{path.stem}.{n}{path.suffix}"
        n += 1
    os.replace(path, dest)
    return dest


def load_records(paths) -> tuple[list[dict], list[tuple[Path, Path]]]:
    """The readable records of `paths`, and (path, where it went) for each unreadable one, moved aside and named on
    stderr; a moved record's cell is missing, so the next `snakemake` run measures it again."""
    import sys

    records, moved = [], []
    for p in paths:
        try:
            records.append(read_record(p))
        except CorruptRecord as e:
            dest = set_aside(p)
            moved.append((Path(p), dest))
            print(f"loaderbench: {e}; moved to {dest}: its cell is measured again on the next run", file=sys.stderr)
    return records, moved


# A measured record that could not be written where it belongs (a full results disk) is kept in the first of these
# that takes it, under its path relative to the run's directory, and restored from there by the next run of its cell
# (`engine.runner.runcell`). logs/ first: it is often on another disk than results/; then the user's cache and /tmp.
KEPT = "kept"


def keep_dirs(root: Path | None = None) -> list[Path]:
    """Where a record that cannot be written is kept, in the order tried: logs/kept/ of the run's directory `root`
    (default: this process's), then the user's cache and the temporary folder, each in a folder of the project's own."""
    import os
    import tempfile

    from .layout import LOGS, project_key

    root = Path(root or Path.cwd()).absolute()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return [
        root / LOGS / KEPT,
        cache / "loaderbench" / KEPT / project_key(root),
        Path(tempfile.gettempdir()) / "loaderbench-kept" / project_key(root),
    ]


def kept_path(folder: Path, out: Path, root: Path | None = None) -> Path:
    """Where in `folder` the record meant for `out` is kept: `out`'s path relative to the run's directory `root`, or
    its absolute path under `abs/` for a record outside it."""
    import os

    out = Path(os.path.abspath(out))
    try:
        return folder / out.relative_to(Path(root or Path.cwd()).absolute())
    except ValueError:
        return folder / "abs" / out.relative_to(out.anchor)


def keep_record(record: dict, out: Path) -> tuple[Path | None, list[str]]:
    """Write `record`, which could not be written to `out`, to the first of `keep_dirs` that takes it: (where it is
    kept, None when nowhere, and why each place tried before it failed)."""
    from .util import WriteError, atomic_write_json

    failed = []
    for folder in keep_dirs():
        path = kept_path(folder, out)
        try:
            atomic_write_json(path, record)
        except WriteError as e:
            failed.append(str(e))
            continue
        return path, failed
    return None, failed


def find_kept(out: Path, root: Path | None = None) -> Path | None:
    """The record kept for `out` by `keep_record` (run in the directory `root`), where first found; else None."""
    return next((p for p in (kept_path(d, out, root) for d in keep_dirs(root)) if p.is_file()), None)
