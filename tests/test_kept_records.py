"""A measurement outlives a record that cannot be written: a record the results disk cannot take is kept under
logs/kept/ (or the next place that takes it) and restored by the next run of its cell.

The full disks are real: a small tmpfs mounted for the test (as root) and filled up."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.records import find_kept, keep_record, validate_record
from tests.conftest import staged_disk
from tests.test_write_failures import FREE, fill

CELL = "torchvision_disk_g1_b4_fp32_dp_r0"


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "kept")


def own_places(work: Path) -> dict:
    """An environment whose fallback places (the user's cache, the temporary folder) are inside `work`."""
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "TMPDIR": str(work / "tmp")}
    (work / "tmp").mkdir(exist_ok=True)
    env.pop("LOADERBENCH_WARM_SOCKET", None)
    return env


def run_cell_in(work: Path, staged, out: Path, fill_disk: Path | None = None) -> subprocess.CompletedProcess:
    """`loaderbench run-cell` of one small cell run in the directory `work`, as Snakemake runs it there; `fill_disk`
    is filled up once the measuring process has written its outcome (the measurement is done, its record not yet
    written)."""
    tmp, cfg = staged
    cmd = [sys.executable, "-m", "loaderbench", "run-cell", "--spec", json.dumps(cell_spec(cfg, CELL).to_dict())]
    cmd += ["--manifest", str(tmp / "disk.json"), "--out", str(out)]
    cmd += ["--timeline", str(work / f"telemetry/{CELL}.csv"), "--trace", str(work / f"traces/{CELL}.trace.json")]
    proc = subprocess.Popen(
        cmd, cwd=work, env=own_places(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if fill_disk is not None:
        outcome, deadline = out.parent / f".{out.name}.child", time.monotonic() + 120
        while not outcome.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        fill(fill_disk)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def test_a_record_the_full_disk_cannot_take_is_kept_under_logs_and_restored_by_the_next_run(
    staged, tmp_path, small_filesystem
):
    """The results disk fills while the cell measures: the measurement was lost ("no record written") though logs/,
    on another disk, had room. It is kept in logs/kept/ now, the failure line names it, and once there is room the
    next run of the cell puts it in place of measuring again."""
    disk = small_filesystem(2048)  # the results disk: room when the cell starts, filled by another writer meanwhile
    out = disk / "cells" / f"{CELL}.json"
    proc = run_cell_in(tmp_path, staged, out, fill_disk=disk)
    kept = tmp_path / "logs/kept" / out.relative_to(tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        f"cell {CELL}: cannot write {re.escape(str(out))}: No space left on device "
        + FREE.format(re.escape(str(disk)))
        + f"; the measurement is kept at {re.escape(str(kept))}: the next run of this cell restores it to "
        f"{re.escape(str(out))} instead of measuring again",
        last,
    ), last
    measured = json.loads(kept.read_text())
    validate_record(measured)
    assert measured["status"] == "ok" and measured["metrics"]["steps"] == 3 and not out.exists()

    (disk / "filler.bin").unlink()  # room again
    proc = run_cell_in(tmp_path, staged, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    restored_line = f"cell {CELL}: its record was restored from {kept}, where it was kept when it could not be written"
    assert f"{restored_line}; not measured again" in proc.stderr, proc.stderr[-3000:]
    assert "starting (" not in proc.stderr  # no measuring process
    restored = json.loads(out.read_text())
    validate_record(restored)
    assert restored["started_at"] == measured["started_at"] and restored["metrics"] == measured["metrics"]
    assert restored["telemetry"]["timeline"] is None and str(kept) in restored["telemetry"]["timeline_lost"]
    assert not kept.exists() and find_kept(out, tmp_path) is None
    # the job's other outputs exist, empty, as for a timeline that could not be written
    assert (tmp_path / f"telemetry/{CELL}.csv").stat().st_size == 0
    assert (tmp_path / f"traces/{CELL}.trace.json").stat().st_size == 0


def test_a_record_is_kept_in_the_user_cache_when_logs_is_full_too(tmp_path, small_filesystem, monkeypatch):
    full = small_filesystem(64)
    fill(full)
    (tmp_path / "logs").symlink_to(full)  # logs/ on the full disk as well
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "results/cells/x.json"
    kept, failed = keep_record({"cell_id": "x", "status": "ok", "spec": {}}, out)
    assert kept is not None and kept.parent.parent.parent.parent == tmp_path / "cache/loaderbench/kept"
    assert kept.relative_to(tmp_path / "cache/loaderbench/kept").parts[1:] == ("results", "cells", "x.json")
    assert len(failed) == 1 and failed[0].startswith(
        f"cannot write {tmp_path / 'logs/kept/results/cells/x.json'}: No space left on device"
    ), failed
    assert find_kept(out) == kept
