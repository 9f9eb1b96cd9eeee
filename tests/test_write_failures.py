"""Writes on a full disk and under a umask: every failed write names its file and the free space there in one line,
a cell keeps its record, no temporary or scratch file stays, and written files get the mode a plain open() gives.

The full disks are real: a small tmpfs mounted for the test (as root) and filled up."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.records import validate_record
from loaderbench.core.util import WriteError, atomic_write_json, atomic_write_text
from tests.conftest import staged_disk

CELL = "torchvision_disk_g1_b4_fp32_dp_r0"
FREE = r"\(\d+(\.\d)? (B|KB) free on {}\)"  # the free space the message names, on the full filesystem


@pytest.fixture
def full_disk(small_filesystem):
    """make(size_kb): a real tmpfs of that size (`small_filesystem`), filled up to the last page by `filler.bin`."""

    def make(size_kb: int = 256) -> Path:
        disk = small_filesystem(size_kb)
        fill(disk)
        return disk

    return make


def fill(disk: Path) -> None:
    """`disk/filler.bin` grown until the filesystem has no page left."""
    fd = os.open(disk / "filler.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError as e:
        assert e.strerror == "No space left on device"
    finally:
        os.close(fd)


def left_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_atomic_writes_give_the_mode_a_plain_open_would_under_the_umask(tmp_path, small_dataset):
    """Records, tables and the dataset check were written 0600 (tempfile.mkstemp's mode) whatever the umask."""
    from loaderbench.data.check import check_dataset

    before = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "cells/x.json", {"a": 1})
        atomic_write_text(tmp_path / "tables/cells.csv", "a\n1\n")
        check_dataset(small_dataset, tmp_path / "dataset/check.json", tmp_path / "q", jobs=2)
        (tmp_path / "plain.txt").write_text("x")
        os.umask(0o027)
        atomic_write_text(tmp_path / "tables/group.csv", "a\n")
    finally:
        os.umask(before)
    modes = {
        p: stat.S_IMODE((tmp_path / p).stat().st_mode)
        for p in (
            "cells/x.json",
            "tables/cells.csv",
            "dataset/check.json",
            "dataset/check.txt",
            "plain.txt",
            "tables/group.csv",
        )
    }
    assert modes == {
        "cells/x.json": 0o644,
        "tables/cells.csv": 0o644,
        "dataset/check.json": 0o644,
        "dataset/check.txt": 0o644,
        "plain.txt": 0o644,
        "tables/group.csv": 0o640,
    }


def test_a_write_to_a_full_disk_names_the_file_and_the_free_space_and_leaves_the_old_file(full_disk):
    disk = full_disk()
    os.truncate(disk / "filler.bin", (disk / "filler.bin").stat().st_size - 8192)  # room for the first record only
    path = disk / "cells/x.json"
    atomic_write_json(path, {"old": True})
    fill(disk)  # and the disk fills up again
    with pytest.raises(WriteError) as err:
        atomic_write_json(path, {"new": "x" * 100_000})
    assert isinstance(err.value, OSError) and err.value.filename == str(path)
    assert re.fullmatch(
        f"cannot write {re.escape(str(path))}: No space left on device " + FREE.format(re.escape(str(disk))),
        str(err.value),
    ), str(err.value)
    assert json.loads(path.read_text()) == {"old": True}
    assert left_in(disk) == ["cells", "cells/x.json", "filler.bin"]  # no temporary file


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "full")


def run_cell_cli(staged, out: Path, timeline: Path, when_measuring=None) -> subprocess.CompletedProcess:
    """`loaderbench run-cell` of one small cell; `when_measuring()` is called once its measuring process beats."""
    tmp, cfg = staged
    spec = cell_spec(cfg, CELL)
    cmd = [
        sys.executable,
        "-m",
        "loaderbench",
        "run-cell",
        "--spec",
        json.dumps(spec.to_dict()),
        "--manifest",
        str(tmp / "disk.json"),
        "--out",
        str(out),
        "--timeline",
        str(timeline),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if when_measuring is not None:
        beat, deadline = out.parent / f".{out.name}.child.hb0", time.monotonic() + 120
        while not (beat.is_file() and beat.stat().st_size) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        when_measuring()
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.slow
def test_a_disk_that_fills_up_during_the_cell_keeps_its_record_and_says_so_in_one_line(staged, tmp_path, full_disk):
    """The cell was measured in full, then thrown away with a 40-line traceback when its timeline could not be
    written: the record comes first now, says it has no timeline, and the job succeeds (Snakemake would delete a
    failed job's record) with one line naming the timeline and the free space, an empty file in the timeline's place."""
    disk = full_disk(4096)
    (disk / "filler.bin").unlink()  # room enough when the cell starts; another writer fills it while it measures
    out, timeline = tmp_path / "cells" / f"{CELL}.json", disk / "telemetry" / f"{CELL}.csv"
    proc = run_cell_cli(staged, out, timeline, when_measuring=lambda: fill(disk))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        f"cell {CELL}: cannot write {re.escape(str(timeline))}: No space left on device "
        + FREE.format(re.escape(str(disk)))
        + f"; its record {re.escape(str(out))} was written, "
        r"without the timeline \(an empty file stands in for it\)",
        last,
    ), last
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "ok" and rec["metrics"]["steps"] == 3
    assert rec["telemetry"]["timeline"] is None and "No space left on device" in rec["telemetry"]["timeline_lost"]
    assert f"cell {CELL}: ok  {rec['metrics']['samples_per_s']:.1f} samples/s" in proc.stderr  # shown before it ended
    assert left_in(out.parent) == [out.name]  # no heartbeat, stacks or outcome of the measuring process
    assert left_in(disk) == ["filler.bin", "telemetry", f"telemetry/{CELL}.csv"]  # no temporary timeline
    assert timeline.stat().st_size == 0


@pytest.mark.slow
def test_a_cell_whose_record_cannot_be_kept_is_not_measured_and_ends_with_one_line(staged, tmp_path, full_disk):
    """A full results disk: the measuring process could not even start its heartbeat there (a traceback), and a
    measurement would be lost. The job ends before measuring, naming the record and the free space."""
    disk = full_disk()
    out, timeline = disk / "cells" / f"{CELL}.json", tmp_path / f"{CELL}.csv"
    proc = run_cell_cli(staged, out, timeline)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        f"cell {CELL}: cannot write {re.escape(str(out))}: only \\d+ B free on {re.escape(str(disk))} "
        "\\(a record and its timeline need about 1.0 MB\\); not measured",
        last,
    ), last
    assert left_in(disk) == ["cells", "filler.bin"] and not timeline.exists()


def test_the_bundle_zip_and_a_figure_on_a_full_disk_name_their_file_and_leave_no_temporary_file(tmp_path, full_disk):
    import matplotlib.pyplot as plt

    from loaderbench.report.bundle import _zip
    from loaderbench.report.figures.common import save

    disk = full_disk()
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "index.html").write_bytes(os.urandom(200_000))  # incompressible: the zip cannot fit
    with pytest.raises(WriteError) as err:
        _zip(folder, disk / "bundle.zip")
    assert re.fullmatch(
        f"cannot write {re.escape(str(disk / 'bundle.zip'))}: No space left on device "
        + FREE.format(re.escape(str(disk))),
        str(err.value),
    ), str(err.value)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    with pytest.raises(WriteError) as err:
        save(fig, disk, "throughput")
    assert str(err.value).startswith(f"cannot write {disk / 'throughput.png'}: No space left on device (")
    assert left_in(disk) == ["filler.bin"]  # neither .bundle.zip.tmp nor .throughput.tmp.png


def test_the_host_lock_is_taken_on_a_full_disk_and_only_names_no_holder(full_disk):
    """The holder's name could not be written into the lock file: the lock was held, its file descriptor leaked."""
    from loaderbench.engine.runner.hostlock import exclusive, read_holder

    disk = full_disk(64)
    probe = [
        sys.executable,
        "-c",
        (
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\nexcept BlockingIOError: print('taken')"
        ),
    ]
    with exclusive("full-disk test", [], disk, wait_s=5) as paths:
        assert subprocess.run([*probe, paths[0]], capture_output=True, text=True, check=False).stdout.strip() == "taken"
        assert read_holder(Path(paths[0])) == {}
    assert subprocess.run([*probe, paths[0]], capture_output=True, text=True, check=False).stdout.strip() == "free"
