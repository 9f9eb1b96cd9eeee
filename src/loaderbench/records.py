"""The one result format: a cell record (ok, skipped or failed) with metrics and provenance."""

from __future__ import annotations

import time

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
