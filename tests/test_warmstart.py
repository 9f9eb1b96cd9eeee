"""Warm starts (`loaderbench.warmstart`): measuring processes forked by a server that has imported torch - the same
record as a plain start, a fallback that says why, and no process left behind when its runner is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from loaderbench import warmstart
from loaderbench.config import cell_spec
from loaderbench.records import validate_record
from loaderbench.runcell import run_cell
from tests.conftest import staged_disk

@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "warm", gpus=[1, 2])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real server, started as the workflow's `onstart` starts it (here a child of the test process)."""
    sock = tmp_path_factory.mktemp("sock") / "s.sock"
    proc = subprocess.Popen([sys.executable, "-m", "loaderbench.warmstart", str(sock)],
                            stdin=subprocess.DEVNULL)  # fmt: skip
    yield sock, proc
    proc.terminate()
    proc.wait(timeout=30)


def forked_by(server_proc) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(server_proc.pid).children() if p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        return []


def test_a_warm_started_cell_gives_the_same_record_and_says_how_it_started(staged, tmp_path, server, monkeypatch):
    tmp, cfg = staged
    sock, proc = server
    monkeypatch.setenv(warmstart.ENV_SOCKET, str(sock))
    spec = cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0")
    warm = run_cell(spec, tmp / "disk.json", tmp_path / "warm.json")
    monkeypatch.delenv(warmstart.ENV_SOCKET)
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
    monkeypatch.setenv(warmstart.ENV_SOCKET, str(server[0]))
    spec = cell_spec(cfg, "opencv_disk_g2_b4_fp32_ddp_r0", in_grid=False)
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "ddp.json")
    assert rec["status"] == "ok", rec["reason"]
    assert [s["warm"] for s in rec["process_start"]] == [True, True]
    ranks = rec["metrics"]["parallel"]["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]  # each rank read its RANK from the environment it was given


def test_a_server_for_other_code_or_none_at_all_is_not_used_and_the_record_says_why(staged, tmp_path, server,
                                                                                    monkeypatch):  # fmt: skip
    tmp, cfg = staged
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0")
    monkeypatch.setenv(warmstart.ENV_SOCKET, str(server[0]))
    # an import path the server was not started with: a forked process would not run what a started one would
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", "") + os.pathsep + str(tmp_path / "elsewhere"))
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "a.json")
    assert rec["status"] == "ok" and not rec["process_start"][0]["warm"]
    assert "differs from the runner's" in rec["process_start"][0]["how"]
    monkeypatch.setenv(warmstart.ENV_SOCKET, str(tmp_path / "gone.sock"))
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "b.json")
    assert rec["status"] == "ok" and "not usable" in rec["process_start"][0]["how"]


def test_a_warm_process_dies_with_its_runner_killed_by_sigkill(staged, tmp_path, server):
    """The runner (a `loaderbench run-cell` job) SIGKILLed mid-window: nothing of its cell may keep measuring."""
    tmp, cfg = staged
    sock, proc = server
    spec = replace(cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0"), window_steps=None, window_s=300.0)
    script = ("import json, sys; from pathlib import Path; from loaderbench.config import CellSpec; "
              "from loaderbench.runcell import run_cell; "
              "run_cell(CellSpec.from_dict(json.loads(sys.argv[1])), Path(sys.argv[2]), Path(sys.argv[3]))")  # fmt: skip
    runner = subprocess.Popen([sys.executable, "-c", script, json.dumps(spec.to_dict()), str(tmp / "disk.json"),
                               str(tmp_path / "c.json")], env={**os.environ, warmstart.ENV_SOCKET: str(sock)})  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and not forked_by(proc):
        time.sleep(0.2)
    children = forked_by(proc)
    assert children, "the server forked no measuring process"
    assert "loaderbench.train" in " ".join(children[0].cmdline()) and spec.cell_id in " ".join(children[0].cmdline())
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
    monkeypatch.setenv(warmstart.ENV_SOCKET, str(sock))
    before = {c.pid for c in psutil.Process().children()}
    assert warmstart.start_server(tmp_path) == sock
    assert {c.pid for c in psutil.Process().children()} == before, "a second server was started"
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", "") + os.pathsep + str(tmp_path / "elsewhere"))
    path = warmstart.start_server(tmp_path)
    new = [c for c in psutil.Process().children() if c.pid not in before]
    try:
        assert path != sock and os.environ[warmstart.ENV_SOCKET] == str(path)
        assert len(new) == 1 and "loaderbench.warmstart" in " ".join(new[0].cmdline())
        assert warmstart.serves_this_code(path)  # the new one serves the code as it is now
    finally:
        for c in new:
            c.kill()
