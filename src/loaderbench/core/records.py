"""The one result format: a cell record (ok, skipped or failed) with metrics and provenance, and the one way a record
is read: brought up to date from the schema version it was written at (`upgrade`)."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

from .cells import CellSpec
from .pluginsource import plugin_source
from .registry import DEFAULT_MODEL, LoaderRecord, loader_record, plugin_record
from .util import stable_hash

SCHEMA_VERSION = 2  # the record's format as `make_record` writes it; older records are read through `upgrade`
STATUSES = ("ok", "skipped", "failed")
KIND = "cell"  # what made a record (schemas/cell.schema.yaml: `kind`)


def make_record(
    spec: CellSpec,
    status: str,
    metrics: dict | None = None,
    reason: str | None = None,
    detail: str | None = None,
    **parts,
) -> dict:
    """The cell record, built here only and valid against schemas/cell.schema.yaml (InvalidRecord where not: a fault
    of the code that built it); the cell runner calls it once, with everything it collected: `parts` are started_at,
    wall_s, tier, telemetry, contention, provenance, phases_s, process_start, stacks, manifest_sha256.

    The spec names its model always (`record_spec`). A plugin cell's provenance gains `plugin`: the plugin's code as
    the cell ended (pluginsource.plugin_source: where it lies, whether installed editable, its identity), beside the
    identity its spec was made with, and the facts its factory declares (`facts`: `plugin_facts`, read by the
    measuring process that imported it and handed over in its loader_info)."""
    assert status in STATUSES
    if spec.loader_ref and isinstance(parts.get("provenance"), dict):
        metrics, facts = _without_facts(metrics)
        plugin = {**_plugin(spec.loader_ref), **({"facts": facts} if facts is not None else {})}
        parts["provenance"] = {**parts["provenance"], "plugin": plugin}
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "cell_id": spec.cell_id,
        "status": status,
        "reason": reason,
        **({"detail": detail} if detail is not None else {}),
        "spec": record_spec(spec),
        "spec_hash": spec_hash(spec),
        "metrics": metrics,
        "finished_at": time.time(),
        **parts,
    }
    validate_record(record)
    return record


def _plugin(reference: str) -> dict:
    """A plugin cell's provenance.plugin; what kept it from being read, rather than no record at all."""
    try:
        return {"reference": reference, **(plugin_source(reference) or {})}
    except Exception as e:  # noqa: BLE001 - the record must still be written
        return {"reference": reference, "error": f"{type(e).__name__}: {e}"}


FACTS_INFO = "plugin_facts"  # the key of metrics.loader_info under which the measuring process hands the facts over


def plugin_facts(factory) -> dict:
    """The facts a plugin factory declares (`registry.plugin_record`), as a record keeps them; `error` instead where
    an attribute holds no fact's value (the report then takes the plugin for `registry.PLUGIN`)."""
    try:
        declared = plugin_record(factory)
    except ValueError as e:
        return {"error": str(e)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(declared).items() if k != "module"}


def _without_facts(metrics: dict | None) -> tuple[dict | None, dict | None]:
    """`metrics` without the facts its loader_info hands over, and those facts (None where it has none)."""
    info = (metrics or {}).get("loader_info")
    if not isinstance(info, dict) or FACTS_INFO not in info:
        return metrics, None
    rest = {k: v for k, v in info.items() if k != FACTS_INFO}
    return {**metrics, "loader_info": rest}, info[FACTS_INFO]


def facts_of(record: dict) -> dict | None:
    """The facts a plugin cell's record keeps of its loader (`provenance.plugin.facts`); None for any other."""
    return ((record.get("provenance") or {}).get("plugin") or {}).get("facts")


def loader_facts(loader: str, facts: dict | None) -> LoaderRecord:
    """The facts of a cell's loader: those its record keeps (a plugin's, `provenance.plugin.facts`) where it keeps
    valid ones, else its registry record (`registry.loader_record`: a plugin's defaults)."""
    if isinstance(facts, dict) and "error" not in facts:
        known = {f.name for f in dataclasses.fields(LoaderRecord)}
        try:
            return LoaderRecord(**{k: v for k, v in facts.items() if k in known})
        except ValueError:
            pass
    return loader_record(loader)


def record_spec(spec: CellSpec) -> dict:
    """The spec as a record keeps it: `CellSpec.to_dict` (what the hash is of), its model named always."""
    return {**spec.to_dict(), "model": spec.model}


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
    """The warnings of a record's metrics, each {"code", "text"} (a record read through `upgrade`)."""
    return list((metrics or {}).get("warnings") or [])


def warning_lines(metrics: dict | None) -> list[str]:
    """Each warning as its line in tables and logs: "<label>: <text>"."""
    return [f"{WARNINGS.get(w['code'], w['code'])}: {w['text']}" for w in warnings_of(metrics)]


class InvalidRecord(ValueError):
    """A record that does not hold to schemas/cell.schema.yaml; the message names the record and the field."""


@functools.cache
def _validator():
    """The record schema's validator, read once per process."""
    from importlib import resources

    import jsonschema
    import yaml

    schema = yaml.safe_load(resources.files("loaderbench").joinpath("schemas/cell.schema.yaml").read_text())
    return jsonschema.Draft7Validator(schema)


def validate_record(record: dict) -> None:
    """Raise InvalidRecord, naming the field, when `record` is not a valid record of the current schema."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(record))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "the record"
        raise InvalidRecord(f"cell record {record.get('cell_id')!r} is not valid at {where}: {error.message}")


# --- reading: each schema version brought up to the next by small named steps, in order ----------------------------


def _name_model_and_parallel(record: dict) -> None:
    """v1 left a MobileNetV2 cell's model out of its spec (so did every record made before models were an axis, which
    trained it), and records made before dp and ddp name no parallel mode: they ran dp, in one process."""
    spec = record["spec"] = {**record["spec"]}
    spec.setdefault("model", DEFAULT_MODEL)
    spec.setdefault("parallel", "dp")
    metrics = record.get("metrics")
    if isinstance(metrics, dict) and "parallel" not in metrics:
        # what a record from before the modes can say of its process: one, under dp; its rank's own figures not kept
        parallel = {"mode": "dp", "processes": 1, "backend": None, "wrapper": None, "per_rank": []}
        record["metrics"] = {**metrics, "parallel": parallel}


def _name_tier_kind(record: dict) -> None:
    """Records made before tiers had kinds: a tier under /dev/shm is RAM, any other a path."""
    spec = record["spec"] = {**record["spec"]}
    spec.setdefault("tier_kind", "ram" if str(spec.get("tier_path", "")).startswith("/dev/shm") else "path")


# warnings before they had codes: "<label>: <text>", or, earlier still, these sentences
_UNLABELLED = {"window of ": "short_window", "second half of the window ": "unsteady"}


def _code_warnings(record: dict) -> None:
    """Warnings written before they had codes (a string each) as {"code", "text"}: read by their label, or by the
    sentence a warning was before it had one."""
    metrics = record.get("metrics")
    if not isinstance(metrics, dict) or not any(isinstance(w, str) for w in metrics.get("warnings") or []):
        return
    codes = {label: code for code, label in WARNINGS.items()}
    coded = []
    for w in metrics["warnings"]:
        if isinstance(w, str):
            label, _, text = w.partition(": ")
            sentence = next((code for start, code in _UNLABELLED.items() if w.startswith(start)), None)
            if label in codes or not sentence:
                w = {"code": codes.get(label, label), "text": text}
            else:
                w = {"code": sentence, "text": w}
        coded.append(w)
    record["metrics"] = {**metrics, "warnings": coded}


def _name_kind(record: dict) -> None:
    """Every record before `kind` was made by a cell."""
    record.setdefault("kind", KIND)


# each version before SCHEMA_VERSION -> its steps to the next; a change to the record adds its steps here and bumps it
UPGRADES = {1: (_name_model_and_parallel, _name_tier_kind, _code_warnings, _name_kind)}


def upgrade(record: dict) -> dict:
    """`record` as the current schema has it (a copy where it changes): every step from the version it names (none:
    1) up to SCHEMA_VERSION, in order; a record already current is returned as it is."""
    version = record.get("schema_version") or 1
    if version >= SCHEMA_VERSION:
        return record
    record = {**record}
    for v in range(version, SCHEMA_VERSION):
        for step in UPGRADES[v]:
            step(record)
    record["schema_version"] = SCHEMA_VERSION
    return record


class CorruptRecord(ValueError):
    """A cell record that cannot be read (truncated, not JSON, not a record); the message names the file."""


CORRUPT_DIR = "corrupt"


def is_record(obj) -> bool:
    """Whether a JSON value is shaped as a cell record (its id, status and spec): other JSON beside records is not."""
    return isinstance(obj, dict) and {"cell_id", "status", "spec"} <= obj.keys()


def read_record(path: Path) -> dict:
    """The cell record at `path`, brought up to date (`upgrade`); CorruptRecord (naming the file) when it is not a
    readable record."""
    import json

    try:
        record = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptRecord(f"cell record {path} is unreadable ({type(e).__name__}: {e})") from None
    if not is_record(record):
        raise CorruptRecord(f"cell record {path} is not a cell record (no cell_id, status and spec)")
    return upgrade(record)


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
