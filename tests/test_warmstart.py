"""Warm starts (`loaderbench.engine.process.warmstart`): measuring processes forked by a server that has imported torch - the same
record as a plain start, a fallback that says why, and no process left behind when its runner is killed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from loaderbench.core.cells import cell_ids, cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.records import validate_record
from loaderbench.engine import contract
from loaderbench.engine.runner import warmclient
from loaderbench.engine.runner.runcell import run_cell
from tests.conftest import cell_record, snakemake, staged_disk, tiny_config, write_config
from tests.test_threads import host_default_threads

pytestmark = [pytest.mark.slow, pytest.mark.own_processes]


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "warm", gpus=[1, 2])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real server, started as the workflow's `onstart` starts it (here a child of the test process)."""
    yield from _served(tmp_path_factory)


def _served(tmp_path_factory, *flags: str):
    """(socket, process) of a server started with `flags`, stopped when the fixture ends."""
    sock = tmp_path_factory.mktemp("sock") / "s.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderbench.engine.process.warmstart", str(sock), *flags], stdin=subprocess.DEVNULL
    )
    # listening before the first test asks it (a runner does not wait for a server that is not there yet)
    deadline = time.time() + 120
    while not sock.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert sock.exists(), f"the warm-start server did not open {sock} (exit status {proc.poll()})"
    yield sock, proc
    proc.terminate()
    proc.wait(timeout=30)


def _named(proc: psutil.Process, cell_id: str) -> bool:
    """Whether a forked process's command line names the measuring module and `cell_id`."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return contract.ENTRY_MODULE in line and cell_id in line


def forked_by(server_proc) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(server_proc.pid).children() if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def test_a_warm_started_cell_gives_the_same_record_and_says_how_it_started(staged, tmp_path, server, monkeypatch):
    tmp, cfg = staged
    sock, proc = server
    monkeypatch.setenv(contract.ENV_SOCKET, str(sock))
    spec = cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0")
    warm = run_cell(spec, tmp / "disk.json", tmp_path / "warm.json")
    monkeypatch.delenv(contract.ENV_SOCKET)
    plain = run_cell(spec, tmp / "disk.json", tmp_path / "plain.json")
    for rec in (warm, plain):
        validate_record(rec)
        assert rec["status"] == "ok" and rec["metrics"]["steps"] == 3 and rec["metrics"]["final_loss"] > 0
    assert warm["process_start"][0]["warm"] and "forked by the warm-start server" in warm["process_start"][0]["how"]
    assert not plain["process_start"][0]["warm"] and "unset" in plain["process_start"][0]["how"]
    assert warm["spec_hash"] == plain["spec_hash"] and warm["metrics"]["input"] == plain["metrics"]["input"]
    # the measured process was a fresh child of the server, not of this process
    assert warm["process_start"][0]["pid"] not in (os.getpid(), proc.pid)
    assert proc.poll() is None, "the server must outlive a cell"


def test_ddp_ranks_are_forked_with_their_own_environment(staged, tmp_path, server, monkeypatch):
    tmp, cfg = staged
    monkeypatch.setenv(contract.ENV_SOCKET, str(server[0]))
    spec = cell_spec(cfg, "opencv_disk_g2_b4_fp32_ddp_r0", in_grid=False)
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "ddp.json")
    assert rec["status"] == "ok", rec["reason"]
    assert [s["warm"] for s in rec["process_start"]] == [True, True]
    ranks = rec["metrics"]["parallel"]["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]  # each rank read its RANK from the environment it was given


def test_a_server_for_other_code_or_none_at_all_is_not_used_and_the_record_says_why(
    staged, tmp_path, server, monkeypatch
):
    tmp, cfg = staged
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0")
    monkeypatch.setenv(contract.ENV_SOCKET, str(server[0]))
    # an import path the server was not started with: a forked process would not run what a started one would
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", "") + os.pathsep + str(tmp_path / "elsewhere"))
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "a.json")
    assert rec["status"] == "ok" and not rec["process_start"][0]["warm"]
    assert "differs from the runner's" in rec["process_start"][0]["how"]
    monkeypatch.setenv(contract.ENV_SOCKET, str(tmp_path / "gone.sock"))
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "b.json")
    assert rec["status"] == "ok" and "not usable" in rec["process_start"][0]["how"]


def test_a_warm_process_dies_with_its_runner_killed_by_sigkill(staged, tmp_path, server):
    """The runner (a `loaderbench run-cell` job) SIGKILLed mid-window: nothing of its cell may keep measuring."""
    tmp, cfg = staged
    sock, proc = server
    spec = replace(cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0"), window_steps=None, window_s=300.0)
    script = (
        "import json, sys; from pathlib import Path; from loaderbench.core.cells import CellSpec; "
        "from loaderbench.engine.runner.runcell import run_cell; "
        "run_cell(CellSpec.from_dict(json.loads(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3]))"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(spec.to_dict()), str(tmp / "disk.json"), str(tmp_path / "c.json")],
        env={**os.environ, contract.ENV_SOCKET: str(sock)},
    )
    deadline = time.time() + 120
    children = forked_by(proc)
    while time.time() < deadline and not (children and _named(children[0], spec.cell_id)):
        time.sleep(0.2)  # forked first, then it writes its own command line
        children = forked_by(proc)
    assert children, "the server forked no measuring process"
    assert _named(children[0], spec.cell_id), children[0].cmdline()
    family = [*children, *children[0].children(recursive=True)]
    time.sleep(3)
    runner.kill()
    runner.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family):
        time.sleep(0.2)
    assert not [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert proc.poll() is None and not (tmp_path / "c.json").exists()


def test_the_workflow_reuses_a_named_server_of_this_code_and_starts_its_own_otherwise(server, monkeypatch, tmp_path):
    """`start_server` (the workflow's onstart): a driver that runs Snakemake a part at a time names one server for
    all the runs; one that would fork other code is not used."""
    sock, _ = server
    monkeypatch.setenv(contract.ENV_SOCKET, str(sock))
    before = {c.pid for c in psutil.Process().children()}
    assert warmclient.start_server(tmp_path) == sock
    assert {c.pid for c in psutil.Process().children()} == before, "a second server was started"
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", "") + os.pathsep + str(tmp_path / "elsewhere"))
    path = warmclient.start_server(tmp_path)
    new = [c for c in psutil.Process().children() if c.pid not in before]
    try:
        assert path != sock and os.environ[contract.ENV_SOCKET] == str(path)
        assert len(new) == 1 and "loaderbench.engine.process.warmstart" in " ".join(new[0].cmdline())
        assert warmclient.serves_this_code(path)  # the new one serves the code as it is now
    finally:
        for c in new:
            c.kill()


PARENT = """
import sys, time
from loaderbench.engine.runner import warmclient
path = warmclient.start_server(sys.argv[1])
assert warmclient.serves_this_code(path), path
print(path, flush=True)
time.sleep(600)
"""


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_server_whose_parent_dies_removes_its_socket(tmp_path, monkeypatch):
    """The workflow's server dies with its Snakemake - here a parent SIGKILLed - and takes its socket with it."""
    monkeypatch.delenv(contract.ENV_SOCKET, raising=False)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        sock = tmp_path / parent.stdout.readline().strip().rsplit("/", 1)[-1]
        assert sock.name == f"{parent.pid}.sock" and sock.exists()
        (server,) = psutil.Process(parent.pid).children()
    finally:
        parent.kill()
        parent.wait()
    deadline = time.time() + 15
    while time.time() < deadline and (sock.exists() or not _gone(server)):
        time.sleep(0.1)
    assert _gone(server), "the server outlived its parent"
    assert not sock.exists(), f"{sock} left behind"
    assert list(tmp_path.iterdir()) == []


def _dead_socket(path) -> None:
    """A socket file nothing listens on, as a server killed by SIGKILL leaves it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.close()


def test_a_stopped_server_removes_its_socket_and_one_killed_is_removed_by_the_next_start(tmp_path, monkeypatch):
    monkeypatch.setenv(contract.ENV_SOCKET, "")  # none named; the one started here is unset again afterwards
    gone = subprocess.Popen(["true"])
    gone.wait()
    killed = tmp_path / f"{gone.pid}.sock"  # a real server SIGKILLed, its starter gone
    server = subprocess.Popen([sys.executable, "-m", "loaderbench.engine.process.warmstart", str(killed)])
    while not killed.exists() and server.poll() is None:
        time.sleep(0.05)
    server.kill()
    server.wait()
    assert killed.exists()
    _dead_socket(old := tmp_path / "old.sock")  # refused for a minute already
    os.utime(old, (time.time() - 60, time.time() - 60))
    _dead_socket(starting := tmp_path / f"{os.getppid()}.sock")  # refused, but new and its starter lives: binding
    listening = tmp_path / "listening.sock"  # another server's: a connection reaches it
    other = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    other.bind(str(listening))
    other.listen(1)
    before = {c.pid for c in psutil.Process().children()}
    try:
        path = warmclient.start_server(tmp_path)
        assert path == tmp_path / f"{os.getpid()}.sock" and warmclient.serves_this_code(path)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, starting.name, listening.name])
        (new,) = [c for c in psutil.Process().children() if c.pid not in before]
        new.terminate()  # as `serving` stops it
        new.wait(timeout=30)
        assert not path.exists(), "a stopped server removes its socket"
    finally:
        other.close()
        for c in psutil.Process().children():
            if c.pid not in before:
                c.kill()


@pytest.fixture(scope="module")
def reuse_server(tmp_path_factory):
    """A server that keeps dp processes (host.reuse_processes), as the workflow's `onstart` starts it."""
    for sock, proc in _served(tmp_path_factory, "--reuse"):
        assert warmclient.serves_this_code(sock, reuse=True), "the server answers, and keeps dp processes"
        yield sock, proc


def test_a_kept_process_measures_the_next_dp_cell_but_never_a_repeat_of_its_own(
    staged, tmp_path, reuse_server, monkeypatch
):
    tmp, cfg = staged
    sock, server = reuse_server
    monkeypatch.setenv(contract.ENV_SOCKET, str(sock))
    first = run_cell(cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0"), tmp / "disk.json", tmp_path / "a.json")
    start = first["process_start"][0]
    assert start["warm"] and start["reused"] == 0 and "forked by" in start["how"], start
    pid = start["pid"]
    kept = psutil.Process(pid)
    assert kept.is_running() and kept.status() != psutil.STATUS_ZOMBIE, "an ok dp cell's process is kept"
    assert kept.children() == [], "its loader workers are gone between cells"
    assert os.readlink(f"/proc/{pid}/fd/1") == os.devnull, "it let go of the finished job's streams"
    second = run_cell(cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0"), tmp / "disk.json", tmp_path / "b.json")
    for rec in (first, second):
        validate_record(rec)
        assert rec["status"] == "ok" and rec["metrics"]["steps"] == 3 and rec["metrics"]["final_loss"] > 0
    start = second["process_start"][0]
    assert start["pid"] == pid and start["reused"] == 1 and "kept by the warm-start server" in start["how"]
    assert second["metrics"]["loader_info"]["workers"] >= 1 and second["metrics"]["main_peak_rss_mb"] > 0
    # its start-up is counted from when it was given the cell, not from when the process started
    assert second["metrics"]["startup_s"] < second["phases_s"]["startup"] + second["phases_s"]["setup"] + 1
    # a repeat of a configuration the kept process measured: a new process, and the kept one is gone first
    again = run_cell(
        cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r1", in_grid=False), tmp / "disk.json", tmp_path / "c.json"
    )
    assert again["status"] == "ok" and again["process_start"][0]["pid"] != pid
    assert again["process_start"][0]["reused"] == 0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # a ddp cell is never handed to a kept process, and the idle one goes before its ranks start
    idle = again["process_start"][0]["pid"]
    ddp = run_cell(
        cell_spec(cfg, "opencv_disk_g2_b4_fp32_ddp_r0", in_grid=False), tmp / "disk.json", tmp_path / "d.json"
    )
    assert ddp["status"] == "ok", ddp["reason"]
    assert idle not in [s["pid"] for s in ddp["process_start"]] and not psutil.pid_exists(idle)
    assert server.poll() is None


@pytest.mark.e2e
def test_snakemake_hands_dp_cells_of_other_configurations_to_a_kept_process(workdir):
    """host.reuse_processes through the real workflow: its jobs reach the kept process with the same environment,
    so cells of other configurations are measured by it, while a configuration's repeats never share one."""
    cfg = tiny_config(
        workdir,
        loaders=["torchvision", "opencv", "synthetic"],
        precisions=["fp32"],
        repeats=2,
        storage={"disk-a": str(workdir / "tier-a")},
        host={"reuse_processes": True},
    )
    path = write_config(workdir, cfg)
    cells = cell_ids(validate_config(cfg))
    assert len(cells) == 6
    snakemake(workdir, *[f"results/cells/{c}.json" for c in cells], "--configfile", str(path))
    starts = {c: cell_record(workdir, c)["process_start"][0] for c in cells}
    for c in cells:
        assert cell_record(workdir, c)["status"] == "ok"
    assert all(s["warm"] for s in starts.values())
    assert sum(s["reused"] > 0 for s in starts.values()) >= 2, starts
    # Snakemake gives each job OMP_NUM_THREADS=1; the steps ran on the threads a plain script gets
    assert {cell_record(workdir, c)["metrics"]["intra_op_threads"] for c in cells} == {host_default_threads()}
    for c in cells:  # a configuration's two repeats: two processes
        if c.endswith("_r0"):
            assert starts[c]["pid"] != starts[c[:-1] + "1"]["pid"], (c, starts)
