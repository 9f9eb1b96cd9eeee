"""A measurement outlives a record that cannot be written and a forced rerun that fails: a record the results disk
cannot take is kept under logs/kept/ (or the next place that takes it) and restored by the next run of its cell, and
`loaderbench run -- --forcerun <record>` puts the previous record back when the new measurement fails.

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
from loaderbench.core.records import validate_record
from tests.conftest import REPO, cell_record, snakemake, staged_disk, tiny_config, write_config
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


@pytest.mark.slow
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
    from loaderbench.core.records import find_kept

    assert not kept.exists() and find_kept(out, tmp_path) is None
    # the job's other outputs exist, empty, as for a timeline that could not be written
    assert (tmp_path / f"telemetry/{CELL}.csv").stat().st_size == 0
    assert (tmp_path / f"traces/{CELL}.trace.json").stat().st_size == 0


def test_a_record_is_kept_in_the_user_cache_when_logs_is_full_too(tmp_path, small_filesystem, monkeypatch):
    from loaderbench.core.records import find_kept, keep_record

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


def test_the_cells_a_forced_rerun_names_are_found_in_every_form(tmp_path):
    from loaderbench.cli.forcerun import forced_cells

    cells = tmp_path / "results/cells"
    cells.mkdir(parents=True)
    for c in ("a", "b", "c"):
        (cells / f"{c}.json").write_text("{}")
    assert forced_cells(tmp_path, ["--forcerun", "results/cells/a.json"]) == ["a"]
    assert forced_cells(tmp_path, [f"--forcerun={cells / 'b.json'}", "-j", "2"]) == ["b"]
    assert forced_cells(tmp_path, ["-R", "results/traces/c.trace.json", "results/telemetry/a.csv"]) == ["a", "c"]
    assert forced_cells(tmp_path, ["--forcerun", "results/cells/missing.json", "--until", "aggregate"]) == []
    assert forced_cells(tmp_path, ["--forcerun", "cell"]) == ["a", "b", "c"] == forced_cells(tmp_path, ["-F"])
    assert forced_cells(tmp_path, ["cell", "results/tables/cells.csv"]) == []  # a rule as a target forces nothing


def test_a_forced_cell_left_without_a_record_gets_its_previous_one_back(tmp_path):
    """Snakemake deletes a forced job's outputs before it runs: a job that then fails (or a run interrupted) leaves
    none. The record set aside comes back, and a cell whose new record stands keeps it."""
    from loaderbench.cli.forcerun import put_back, set_aside

    cells = tmp_path / "results/cells"
    cells.mkdir(parents=True)
    for c in ("a", "b"):
        (cells / f"{c}.json").write_text(json.dumps({"cell_id": c, "status": "ok", "old": True}))
    said = set_aside(tmp_path, ["--forcerun", "results/cells/a.json", "results/cells/b.json"])
    aside = tmp_path / "results/before-rerun"
    assert said == [
        f"forced rerun: the previous record of 2 cell(s) set aside in {aside} until the new measurement stands"
    ]
    (cells / "a.json").unlink()  # as Snakemake does; the job then fails
    (cells / "b.json").unlink()
    (cells / "b.json").write_text(json.dumps({"cell_id": "b", "status": "ok"}))
    assert put_back(tmp_path) == [
        f"a: the new measurement left no record; its previous record is back in {cells / 'a.json'}"
    ]
    assert json.loads((cells / "a.json").read_text())["old"] and "old" not in json.loads((cells / "b.json").read_text())
    assert not (tmp_path / "results/before-rerun").exists()


def loaderbench_run(work: Path, config: Path, *more: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "loaderbench", "run", "--config", str(config), "--directory", str(work)]
    cmd += ["--cores", "2", "--snakefile", str(REPO / "Snakefile"), *more]
    return subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=900, env=own_places(work))


@pytest.mark.slow
@pytest.mark.e2e
def test_a_forced_rerun_whose_cell_fails_puts_the_previous_record_back(tmp_path):
    """A real pipeline of one cell, then `loaderbench run -- --forcerun <its record>` (what `make rerun` runs) with a
    cell timeout no cell can meet (it re-measures nothing by itself): Snakemake deleted the record, the new
    measurement failed, and the measured record comes back, said in one line."""
    cfg = tiny_config(tmp_path, loaders=["torchvision"], precisions=["fp32"])
    cfg["storage"] = {"disk-a": cfg["storage"]["disk-a"]}
    first = loaderbench_run(tmp_path, write_config(tmp_path, cfg))
    cell = "torchvision_disk-a_g1_b4_fp32_dp_r0"
    assert first.returncode == 0, first.stdout + first.stderr
    before = cell_record(tmp_path, cell)
    assert before["status"] == "ok"

    record = f"results/cells/{cell}.json"
    proc = loaderbench_run(tmp_path, write_config(tmp_path, {**cfg, "cell_timeout_s": 0.5}), "--", "--forcerun", record)
    now = json.loads((tmp_path / record).read_text()) if (tmp_path / record).is_file() else {"status": "no record"}
    assert now == before, f"{now['status']}: {now.get('reason')}"
    out = proc.stdout.splitlines()
    assert "forced rerun: the previous record of 1 cell(s) set aside in " in proc.stdout, proc.stdout
    back = next((line for line in out if line.startswith(f"{cell}: the new measurement failed (")), None)
    assert back is not None, proc.stdout + proc.stderr
    assert "timed out" in back and back.endswith(f"; its previous record is back in {tmp_path / record}"), back
    assert not (tmp_path / "results/before-rerun").exists()
    # the tables, written from the failed record, are refreshed from the one put back, which is not measured again
    plan = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "config.yaml")).stdout
    assert re.search(r"^aggregate\s+1$", plan, re.MULTILINE) and not re.search(r"^cell\s+\d+$", plan, re.MULTILINE), (
        plan
    )
