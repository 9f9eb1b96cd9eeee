"""The one result format: a cell record (ok, skipped or failed) with metrics and provenance."""

from __future__ import annotations

import time
from pathlib import Path

from .config import CellSpec
from .util import stable_hash

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "failed")


def make_record(spec: CellSpec, status: str, metrics: dict | None = None, reason: str | None = None, **extra) -> dict:
    """The record without provenance, which the cell runner adds (`provenance.collect`) for every outcome."""
    assert status in STATUSES
    return {
        "schema_version": SCHEMA_VERSION,
        "cell_id": spec.cell_id,
        "status": status,
        "reason": reason,
        "spec": spec.to_dict(),
        "spec_hash": stable_hash(spec.to_dict()),
        "metrics": metrics,
        "finished_at": time.time(),
        **extra,
    }


def validate_record(record: dict) -> None:
    """Raise jsonschema.ValidationError when `record` is not a valid cell record."""
    from importlib import resources

    import jsonschema
    import yaml

    schema = yaml.safe_load(resources.files("loaderbench").joinpath("schemas/cell.schema.yaml").read_text())
    jsonschema.validate(record, schema)


def skipped_record(spec: CellSpec, reason: str) -> dict:
    return make_record(spec, "skipped", reason=reason)


def failed_record(spec: CellSpec, reason: str, detail: str | None = None) -> dict:
    return make_record(spec, "failed", reason=reason, detail=detail)


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
