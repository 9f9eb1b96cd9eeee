"""A cell job's outputs: room for them checked, the record then its timeline and trace written, a record that cannot
be written kept elsewhere and restored by the next run."""

from __future__ import annotations

import sys
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.records import CorruptRecord, find_kept, keep_record, read_record, spec_hash
from loaderbench.core.util import WriteError, atomic_write_json, free_space, human_bytes, writing

from ..contract import Outcome
from . import telemetry
from . import trace as cell_trace
from .job import CellJob
from .record import summary_line

ROOM_BYTES = 1_000_000  # a record, its timeline and the measuring process's scratch files, with room to spare


def check_room(spec: CellSpec, out: Path, timeline: Path | None, trace: Path | None = None) -> None:
    """End the job before measuring when the record's, the timeline's or the trace's disk is all but full: the
    measurement could not be kept (and the measuring process could not even start its heartbeat)."""
    for path in (p for p in (out, timeline, trace) if p is not None):
        free, mount = free_space(path)
        if free < ROOM_BYTES:
            raise SystemExit(
                f"cell {spec.cell_id}: cannot write {path}: only {human_bytes(free)} free on {mount} "
                f"(a record and its timeline need about {human_bytes(ROOM_BYTES)}); not measured"
            )


def write_outputs(job: CellJob, record: dict, samples, result: Outcome) -> None:
    """The record, then the timeline and the trace: the record is the measurement, the others only its telemetry and
    its steps drawn. A record that cannot be written is kept elsewhere (`records.keep_record`, restored by the next
    run: `restore_kept`) and ends the job with one line naming the file (WriteError) and where it is kept; a
    timeline or a trace that cannot be written costs only itself (`_keep_without_timeline`)."""
    spec, out, marks = job.spec, job.out, (result.metrics or {}).get("marks")
    try:
        atomic_write_json(out, record)
    except WriteError as e:
        kept, failed = keep_record(record, out)
        if kept is None:
            raise SystemExit(
                f"cell {spec.cell_id}: {e}; the measurement is lost: it could not be kept either ({'; '.join(failed)})"
            ) from None
        raise SystemExit(
            f"cell {spec.cell_id}: {e}; the measurement is kept at {kept}: the next run of this cell restores it to "
            f"{out} instead of measuring again"
        ) from None
    print(job.label + summary_line(record), file=sys.stderr, flush=True)
    if job.timeline is not None:
        try:
            telemetry.write_timeline(Path(job.timeline), samples or {"meta": {}, "rows": []}, marks)
        except WriteError as e:
            _keep_without_timeline(spec, record, out, Path(job.timeline), e)
    if job.trace is not None:
        trace = cell_trace.build(spec.cell_id, record["status"], record["started_at"], result.steps, samples, marks)
        try:
            cell_trace.write(job.trace, trace)
        except WriteError as e:
            _keep_without_timeline(spec, record, out, job.trace, e, "trace")


def restore_kept(job: CellJob) -> dict | None:
    """The record a run kept elsewhere when it could not write it to `job.out` (`write_outputs`), written to `job.out`
    now, with empty files for the timeline and the trace it has not (as `_keep_without_timeline`); None when no record
    of this cell's spec is kept. A kept record that still cannot be written stays where it is and ends the job."""
    spec, out = job.spec, job.out
    kept = find_kept(out)
    if kept is None:
        return None
    try:
        record = read_record(kept)
    except CorruptRecord as e:
        print(f"{job.label}cell {spec.cell_id}: {e}; measured again", file=sys.stderr, flush=True)
        return None
    if record["cell_id"] != spec.cell_id or record.get("spec_hash") != spec_hash(spec):
        print(
            f"{job.label}cell {spec.cell_id}: the record kept at {kept} measured another spec of this cell; "
            "measured again",
            file=sys.stderr,
            flush=True,
        )
        return None
    lost = f"not kept: the record could not be written to {out} and was kept at {kept}, then restored"
    missing = {what: path for what, path in (("timeline", job.timeline), ("trace", job.trace)) if path is not None}
    telemetry_part = record.get("telemetry") or {}
    for what in missing:
        telemetry_part = {**telemetry_part, what: None, f"{what}_lost": lost}
    record["telemetry"] = telemetry_part
    try:
        atomic_write_json(out, record)
        for path in missing.values():
            with writing(path):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    except WriteError as e:
        raise SystemExit(
            f"cell {spec.cell_id}: {e}; its measurement stays kept at {kept}: the next run restores it once there "
            "is room"
        ) from None
    kept.unlink(missing_ok=True)
    print(
        f"{job.label}cell {spec.cell_id}: its record was restored from {kept}, where it was kept when it could not "
        "be written; not measured again",
        file=sys.stderr,
        flush=True,
    )
    print(job.label + summary_line(record), file=sys.stderr, flush=True)
    return record


def _keep_without_timeline(
    spec: CellSpec, record: dict, out: Path, timeline: Path, error: WriteError, what: str = "timeline"
) -> None:
    """Keep a measured cell whose timeline (or trace: `what`) could not be written: Snakemake deletes a failed job's
    outputs, the record with them, so the job succeeds with an empty file where the timeline goes (a file without data
    takes no space) and the record saying why it has none; where even that cannot be made, the job fails, its record
    written."""
    message = f"cell {spec.cell_id}: {error}; its record {out} was written, without the {what}"
    try:
        timeline.parent.mkdir(parents=True, exist_ok=True)
        timeline.touch()
    except OSError:
        raise SystemExit(message) from None
    record["telemetry"] = {**(record.get("telemetry") or {}), what: None, f"{what}_lost": str(error)}
    try:
        atomic_write_json(out, record)
    except WriteError:
        pass  # the record as first written stands: it points at the empty timeline
    print(f"{message} (an empty file stands in for it)", file=sys.stderr, flush=True)
