"""Exclusive measurement: the host lock, cells that die with the run that started them, contention in the window.

Real processes throughout (cell runners, Snakemake, a busy-loop hog); only NVML's process list is a stand-in, in
the one unit test of the GPU part (this host has no GPU)."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.provenance import RUN_ID_ENV
from loaderbench.core.records import validate_record
from loaderbench.engine.contract import ENTRY_MODULE
from tests.conftest import REPO, staged_disk, tiny_config, write_config

pytestmark = [pytest.mark.slow, pytest.mark.own_processes]

PY = sys.executable


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "excl", window={"seconds": 4})


def run_cell_cli(
    staged, out: Path, *options: str, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = cell_cli_command(staged, out, *options)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def cell_cli_command(staged, out: Path, *options: str) -> list[str]:
    """`loaderbench run-cell` of the staged torchvision cell, its record to `out`."""
    tmp, cfg = staged
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0")
    return [
        PY,
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
        str(out.with_suffix(".csv")),
        *options,
    ]


def hold_lock(lock_dir: Path, seconds: float, release: Path | None = None) -> subprocess.Popen:
    """Another measurement: a process that holds the host lock for `seconds` (or until `release` exists), then prints
    when it let go."""
    code = textwrap.dedent(f"""
        import os, sys, time
        from loaderbench.engine.runner.hostlock import exclusive
        release = {str(release) if release else ""!r}
        with exclusive("test holder", [], {str(lock_dir)!r}, 5):
            print("held", flush=True)
            end = time.time() + {seconds}
            while time.time() < end and not (release and os.path.exists(release)):
                time.sleep(0.1)
        print("released", time.time(), flush=True)
    """)
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_is_exclusive_reentrant_and_not_inherited(tmp_path):
    from loaderbench.engine.runner.hostlock import exclusive, read_holder

    probe = [
        PY,
        "-c",
        (
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\nexcept BlockingIOError: print('taken')"
        ),
    ]
    lock = str(tmp_path / "cpus.lock")
    with exclusive("cell x", [], tmp_path, 1) as paths:
        assert paths == [lock]
        assert subprocess.run([*probe, lock], capture_output=True, text=True, check=False).stdout.strip() == "taken"
        holder = read_holder(Path(lock))
        assert holder["pid"] == os.getpid() and holder["holder"] == "cell x" and holder["started_at"] <= time.time()
        with exclusive("nested", [], tmp_path, 0.5):  # the same process again: no wait, no HostBusy
            pass
        assert subprocess.run([*probe, lock], capture_output=True, text=True, check=False).stdout.strip() == "taken"
        child = subprocess.Popen(["sleep", "30"])  # started while the lock is held
    try:
        # released on leaving, although the child (which would hold an inherited descriptor) still runs
        assert child.poll() is None
        assert subprocess.run([*probe, lock], capture_output=True, text=True, check=False).stdout.strip() == "free"
    finally:
        child.kill()
        child.wait()


def test_a_held_lock_makes_the_cell_wait_naming_the_holder_then_fail(staged, tmp_path):
    locks = tmp_path / "locks"
    holder = hold_lock(locks, 60)
    try:
        t0 = time.time()
        proc = run_cell_cli(staged, tmp_path / "c.json", "--lock-dir", str(locks), "--lock-wait-s", "7")
        waited = time.time() - t0
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    assert f"waiting for the host (cpus.lock held by pid {holder.pid} (test holder, for " in proc.stderr
    rec = json.loads((tmp_path / "c.json").read_text())
    validate_record(rec)
    assert rec["status"] == "failed" and rec["reason"].startswith("host busy: waited 7 s (host.lock_wait_s = 7)")
    assert f"held by pid {holder.pid} (test holder" in rec["reason"]
    assert 7 <= waited < 60 and rec["metrics"] is None
    assert (tmp_path / "c.csv").is_file()  # Snakemake's declared timeline output exists for a busy cell too


def test_a_cell_waits_for_the_holder_and_measures_after_it_let_go(staged, tmp_path):
    """The holder lets go once the waiting cell has said whom it waits for (its 5-s progress line), however long the
    cell took to start: a host busy with other work delays the cell, not the assertion."""
    locks, release, err = tmp_path / "locks", tmp_path / "release", tmp_path / "cell.err"
    holder = hold_lock(locks, 240, release)
    with err.open("w") as stderr:
        cmd = cell_cli_command(staged, tmp_path / "c.json", "--lock-dir", str(locks), "--lock-wait-s", "300")
        cell = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        deadline = time.time() + 200
        while time.time() < deadline and f"held by pid {holder.pid} (test holder" not in err.read_text():
            time.sleep(0.2)
        release.touch()
        released = float(holder.stdout.readline().split()[1])
        holder.wait()
        assert cell.wait(timeout=300) == 0, err.read_text()
    assert f"held by pid {holder.pid} (test holder" in err.read_text()  # the 5-s progress line named it
    rec = json.loads((tmp_path / "c.json").read_text())
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["marks"]["setup_start"] >= released  # nothing of the cell ran while the other held the host


def test_cpu_hog_in_the_window_marks_the_cell_contended(staged, tmp_path):
    """A busy loop (not a descendant of the runner) during the window: its CPU counts as foreign, the record is
    contended and warned about. The quiet run beside it only checks the subtraction: the cell's own CPU (training
    and loader worker) is counted as the cell's; whether foreign CPU is low there depends on other users of
    this shared machine, so it is not asserted."""
    quiet = run_cell_cli(staged, tmp_path / "quiet.json")
    assert quiet.returncode == 0, quiet.stderr
    q = json.loads((tmp_path / "quiet.json").read_text())["contention"]
    assert q["cell_cpu_cores"] >= 0.25 and q["samples"] >= 2 and q["gpu"].startswith("no NVML")
    assert q["host_cpu_cores"] >= q["cell_cpu_cores"] - 0.15  # the host's busy time includes the cell's

    foreign = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}  # started by another user's shell
    hog = subprocess.Popen([PY, "-c", "while True: pass"], env=foreign)
    try:
        time.sleep(0.5)
        hot = run_cell_cli(staged, tmp_path / "hot.json", "--contention-cpu-cores", "0.4")
        t = psutil.Process(hog.pid).cpu_times()
        hog_cores = (t.user + t.system) / (time.time() - psutil.Process(hog.pid).create_time())
    finally:
        hog.kill()
        hog.wait()
    assert hot.returncode == 0, hot.stderr
    rec = json.loads((tmp_path / "hot.json").read_text())
    assert rec["status"] == "ok", rec["reason"]
    c = rec["contention"]
    assert hog_cores > 0.3, f"the hog itself got only {hog_cores:.2f} cores on this machine"
    assert c["foreign_cpu_cores"] >= 0.7 * hog_cores, (c, hog_cores)
    assert c["contended"] is True and c["thresholds"]["cpu_cores"] == 0.4
    warn = [w["text"] for w in rec["metrics"]["warnings"] if w["code"] == "contended"]
    assert len(warn) == 1 and "CPU cores during the window" in warn[0]
    assert "contended:" in hot.stderr  # the summary line shows it
    # the breakdown names the hog among the processes that used the most, with about the share it got
    b = c["foreign_breakdown"]
    hog_row = [p for p in b["processes"] if p["pid"] == hog.pid]
    assert hog_row and hog_row[0]["cores"] >= 0.7 * hog_cores, (b, hog_cores)
    assert b["irq"] >= 0 and b["steal"] >= 0 and f"(pid {hog.pid})" in warn[0]


def test_the_runs_own_work_beside_a_cell_is_recorded_apart_and_does_not_make_it_contended(staged, tmp_path):
    """A busy loop started with the cell's run id (as the pipeline's own processes are: Snakemake's jobs, the
    warm-start server, a FUSE server) is the run's own work: recorded as `own_cpu_cores`, named among
    `own_processes`, not counted as foreign."""
    env = {**os.environ, RUN_ID_ENV: "run-of-this-test"}
    hog = subprocess.Popen([PY, "-c", "while True: pass"], env=env)
    try:
        time.sleep(0.5)
        proc = run_cell_cli(staged, tmp_path / "own.json", "--contention-cpu-cores", "0.4", env=env)
    finally:
        hog.kill()
        hog.wait()
    assert proc.returncode == 0, proc.stderr
    c = json.loads((tmp_path / "own.json").read_text())["contention"]
    assert c["own_cpu_cores"] >= 0.3, c
    assert hog.pid in [p["pid"] for p in c["foreign_breakdown"]["own_processes"]], c
    assert hog.pid not in [p["pid"] for p in c["foreign_breakdown"]["processes"]], c


def test_foreign_gpu_processes_are_those_outside_the_cell_tree():
    """NVML stand-in (this host has no GPU) for the process lists only; the filtering and the summary are real."""
    from types import SimpleNamespace as P

    from loaderbench.engine.runner.contention import foreign_gpu_processes, summarize, warning

    class StandInNvml:
        @staticmethod
        def nvmlDeviceGetComputeRunningProcesses(handle):
            return {
                "h0": [P(pid=os.getpid(), usedGpuMemory=100 * 2**20), P(pid=4242, usedGpuMemory=512 * 2**20)],
                "h1": [P(pid=4343, usedGpuMemory=None)],
            }[handle]

        @staticmethod
        def nvmlDeviceGetGraphicsRunningProcesses(handle):
            return [P(pid=4242, usedGpuMemory=512 * 2**20)] if handle == "h0" else []

    found = foreign_gpu_processes(StandInNvml, ["h0", "h1"], [2, 3], {os.getpid()})
    assert [(p["pid"], p["gpu"], p["used_mb"]) for p in found] == [(4242, 2, 512.0), (4343, 3, None)]
    rows = [
        {"t": 10.0, "host_busy_s": 0.0, "tree_cpu_s": 0.0},
        {"t": 11.0, "host_busy_s": 1.0, "tree_cpu_s": 1.0, "gpu_foreign": found},
        {"t": 13.0, "host_busy_s": 3.0, "tree_cpu_s": 3.0},
    ]
    c = summarize({"rows": rows, "gpu": "NVML"}, {"window_start": 10.5, "window_end": 12.5}, 0.5)
    assert c["foreign_cpu_cores"] == 0 and c["contended"] and len(c["foreign_gpu_processes"]) == 2
    assert warning(c)["code"] == "contended" and warning(c)["text"].startswith("foreign GPU processes: pid 4242")
    c = summarize({"rows": rows[:1] + rows[2:], "gpu": "NVML"}, {"window_start": 10.5, "window_end": 12.5}, 0.5)
    assert not c["contended"] and warning(c) is None


def test_the_cells_own_processes_exiting_after_the_window_are_not_foreign_cpu():
    """1 Hz samples of a 2.5-s window: the cell keeps 2 cores busy, a foreign process 0.5 in its second second; the
    cell's processes exit at 2.9 s, before the sample at 3.0 s, which has lost their CPU since the one at 2.0 s.
    Interpolated across that exit, the lost CPU reads as 0.56 foreign cores (contended); counted over the intervals
    in which the cell kept its processes it does not, and the foreign process still does (0.25 cores)."""
    from loaderbench.engine.runner.contention import summarize

    cell = [1, 2, 3]
    rows = [
        {"t": 0.0, "host_busy_s": 0.0, "tree_cpu_s": 0.0, "own_cpu_s": 0.0, "tree_pids": cell},
        {"t": 1.0, "host_busy_s": 2.0, "tree_cpu_s": 2.0, "own_cpu_s": 0.0, "tree_pids": cell},
        {"t": 2.0, "host_busy_s": 4.5, "tree_cpu_s": 4.0, "own_cpu_s": 0.0, "tree_pids": cell},
        {"t": 3.0, "host_busy_s": 6.3, "tree_cpu_s": 4.0, "own_cpu_s": 0.0, "tree_pids": [1]},
    ]
    marks = {"window_start": 0.0, "window_end": 2.5}
    c = summarize({"rows": rows, "gpu": None}, marks, 0.5)
    assert c["host_cpu_cores"] == pytest.approx(2.25) and c["cell_cpu_cores"] == pytest.approx(2.0)
    assert c["foreign_cpu_cores"] == pytest.approx(0.25) and "2.0 s of the 2.5-s window" in c["basis"]
    assert not c["contended"]
    unsteady = [dict(r, tree_pids=[1, int(r["t"])]) for r in rows]  # a process came or went in every interval
    c = summarize({"rows": unsteady, "gpu": None}, marks, 0.5)
    assert c["basis"] == "the counters interpolated to the window's edges"
    assert c["foreign_cpu_cores"] == pytest.approx(0.56) and c["contended"]


# --- Snakemake runs ---------------------------------------------------------------------------------------------


def cell_processes(workdir: Path) -> list[psutil.Process]:
    """Live cell runners and training processes of the run in `workdir` (other runs on this machine excluded)."""
    out = []
    for p in psutil.process_iter(["cmdline", "cwd", "status"]):
        cmd = p.info["cmdline"] or []
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.info["cwd"] != str(workdir):
            continue
        if "run-cell" in cmd or ENTRY_MODULE in cmd:
            out.append(p)
    return out


def start_run(workdir: Path, cfg: dict, *targets: str) -> subprocess.Popen:
    cfg_path = write_config(workdir, cfg)
    cmd = [
        PY,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        *targets,
        "--configfile",
        str(cfg_path),
    ]  # --configfile last: it takes every argument after it
    log = open(workdir / "snakemake.out", "w")  # noqa: SIM115 - the Popen writes to it until the test ends
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_in_window(workdir: Path, proc: subprocess.Popen, timeout: float = 300) -> str:
    """Wait until a cell prints its in-window progress line (5 s into the window); returns the cell id."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        for log in (workdir / "logs/cells").glob("*.log"):
            if " steps in " in log.read_text():
                return log.stem
        time.sleep(0.2)
    raise AssertionError(f"no cell reached its window:\n{(workdir / 'snakemake.out').read_text()}")


ONE_CELL = {"loaders": ["torchvision"], "precisions": ["fp32"], "window": {"seconds": 40}}  # outlives the 10 s checked


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "SIGTERM"])
def test_a_signal_to_the_snakemake_pid_alone_stops_the_cell(tmp_path, how):
    """SIGKILL: Snakemake dies, its job shell lives on; the runner sees its ancestor gone and stops. SIGINT and
    SIGTERM: Snakemake 9 would wait for the running job; the workflow's handler stops the cell first."""
    cfg = tiny_config(tmp_path, storage={"disk-a": str(tmp_path / "tier-a")}, **ONE_CELL)
    proc = start_run(tmp_path, cfg)
    cell = wait_in_window(tmp_path, proc)
    assert cell_processes(tmp_path), "no cell process found by its working directory"
    t0 = time.time()
    os.kill(proc.pid, getattr(signal, how))
    if how != "SIGKILL":
        proc.wait(timeout=30)  # the run ends
        assert time.time() - t0 < 15
    deadline = t0 + 10
    while cell_processes(tmp_path) and time.time() < deadline:
        time.sleep(0.2)
    assert cell_processes(tmp_path) == [], [p.info["cmdline"][:4] for p in cell_processes(tmp_path)]
    assert not (tmp_path / f"results/cells/{cell}.json").exists()  # interrupted: no record
    proc.wait(timeout=30)
    log = (tmp_path / f"logs/cells/{cell}.log").read_text()
    if how == "SIGKILL":
        assert f"ancestor pid {proc.pid} (" in log and "stopping this measurement" in log
    else:
        assert "loaderbench: " + how + ": stopping 1 measuring job(s)" in (tmp_path / "snakemake.out").read_text()


def test_a_cell_outlives_the_shell_that_started_a_detached_run(tmp_path):
    """`setsid nohup snakemake ... &` from a shell that then ends (a login shell, a remote call) is a run that goes
    on: the runner watches its ancestors up to Snakemake, not the shell above it."""
    cfg = tiny_config(tmp_path, storage={"disk-a": str(tmp_path / "tier-a")}, **{**ONE_CELL, "window": {"seconds": 12}})
    cfg_path = write_config(tmp_path, cfg)
    release = tmp_path / "shell-may-end"
    cmd = shlex.join(
        [
            PY,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--cores",
            "2",
            "--configfile",
            str(cfg_path),
        ]
    )
    shell = subprocess.Popen(
        [
            "bash",
            "-c",
            (
                f"setsid nohup {cmd} > {shlex.quote(str(tmp_path / 'snakemake.out'))} "
                f"2>&1 & echo $! > {shlex.quote(str(tmp_path / 'pid'))}; "
                f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.2; done"
            ),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.time() + 300
    while (
        not list((tmp_path / "logs/cells").glob("*.log"))
        or " steps in " not in next((tmp_path / "logs/cells").glob("*.log")).read_text()
    ):
        assert time.time() < deadline and shell.poll() is None, (tmp_path / "snakemake.out").read_text()
        time.sleep(0.2)
    release.touch()  # the shell ends while the cell is in its window
    shell.wait(timeout=30)
    snake = psutil.Process(int((tmp_path / "pid").read_text()))
    snake.wait(timeout=300)
    cid = next((tmp_path / "logs/cells").glob("*.log")).stem
    rec = json.loads((tmp_path / f"results/cells/{cid}.json").read_text())
    assert rec["status"] == "ok", rec["reason"]
    assert "is gone" not in (tmp_path / f"logs/cells/{cid}.log").read_text()


def test_two_pipelines_at_once_never_overlap_their_windows(tmp_path, own_lock_dir):
    runs = [tmp_path / "a", tmp_path / "b"]
    procs = []
    for w in runs:
        w.mkdir()
        cfg = tiny_config(w, storage={"disk-a": str(w / "tier-a")}, loaders=["torchvision"], window={"seconds": 3})
        procs.append(
            start_run(w, cfg, *(f"results/cells/torchvision_disk-a_g1_b4_{p}_dp_r0.json" for p in ("fp32", "amp")))
        )
    for w, p in zip(runs, procs, strict=True):
        assert p.wait(timeout=600) == 0, (w / "snakemake.out").read_text()
    windows = []
    for w in runs:
        for f in sorted((w / "results/cells").glob("*.json")):
            rec = json.loads(f.read_text())
            assert rec["status"] == "ok", rec["reason"]
            m = rec["metrics"]["marks"]
            windows.append((m["window_start"], m["window_end"], f"{w.name}/{f.stem}"))
    assert len(windows) == 4
    windows.sort()
    for (s0, e0, a), (s1, e1, b) in itertools.pairwise(windows):
        assert e0 <= s1, f"{a} [{s0:.2f}, {e0:.2f}] overlaps {b} [{s1:.2f}, {e1:.2f}]"
    assert not list(own_lock_dir.glob("*.lock")) or all(not p.read_text() for p in own_lock_dir.glob("*.lock"))
