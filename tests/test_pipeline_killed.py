"""A run killed mid-cell (SIGTERM as `kill` and a batch system's cancel send it, SIGKILL to the whole process group
as a lost node would), or killed while the emulated tier is mounted: what it leaves, and the next run finishing."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from loaderbench.data.emulated import mount_entry
from loaderbench.engine.contract import ENTRY_MODULE
from tests.conftest import cell_record, cells_table, needs_fuse, snakemake, start_snakemake, tiny_config, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.own_processes]


def measuring_children(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in root.children(recursive=True) if ENTRY_MODULE in " ".join(p.cmdline())]
    except psutil.Error:
        return []


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a killed child waits as a zombie until something reaps it; in a
    container whose init does not reap promptly, that can take a while)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(condition, timeout_s: float) -> None:
    """Poll `condition` until it holds or `timeout_s` has passed (the caller asserts what it needs)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and not condition():
        time.sleep(0.2)


GRID_CELLS = 2  # the killed run's grid: torchvision and opencv on one tier, fp32


@dataclass
class Killed:
    work: Path
    done_before: int  # cell records when the killed run had ended
    measuring_after: list  # cell trainings still running a second later


@pytest.fixture(scope="module", params=["SIGTERM", "SIGKILL"])
def killed_then_rerun(request, tmp_path_factory) -> Killed:
    """A tiny grid run killed mid-cell, then run again to the end."""
    how = request.param
    work = tmp_path_factory.mktemp(f"killed-{how}")
    cells = work / "results/cells"
    # two cells: one done and one killed mid-window, then measured by the rerun
    cfg = tiny_config(work, precisions=["fp32"], window={"seconds": 4}, storage={"disk-a": str(work / "tier-a")})
    args = ["--configfile", str(write_config(work, cfg))]
    proc = start_snakemake(work, *args)
    root = psutil.Process(proc.pid)
    # wait until one cell is done and the next one is measuring
    wait_until(lambda: measuring_children(root) and list(cells.glob("*.json")), 300)
    assert measuring_children(root), "no cell started"
    time.sleep(2)  # mid-cell
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)  # what `kill` and a batch system's cancel send
    else:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole process group at once, as a lost node would
    proc.wait(timeout=120)
    done_before = len(list(cells.glob("*.json")))
    time.sleep(1)
    measuring_after = measuring_children(root) if root.is_running() else []
    if how == "SIGKILL":  # a SIGKILLed Snakemake cannot release its lock; unlock is the documented recovery
        snakemake(work, *args, "--unlock")
    snakemake(work, *args)
    return Killed(work, done_before, measuring_after)


def test_a_run_killed_mid_cell_leaves_some_but_not_all_cells_done(killed_then_rerun):
    assert 1 <= killed_then_rerun.done_before < GRID_CELLS


def test_no_cell_keeps_measuring_after_its_run_is_killed(killed_then_rerun):
    assert not killed_then_rerun.measuring_after


def test_the_run_after_a_kill_finishes_every_cell_ok_with_no_record_truncated(killed_then_rerun):
    cells = sorted((killed_then_rerun.work / "results/cells").glob("*.json"))
    assert len(cells) == GRID_CELLS
    assert all(json.loads(p.read_text())["status"] == "ok" for p in cells)  # every file parses: none truncated


def test_the_run_after_a_kill_leaves_no_hidden_partial_record(killed_then_rerun):
    assert not list((killed_then_rerun.work / "results/cells").glob(".*"))


def test_the_run_after_a_kill_tables_every_cell_ok(killed_then_rerun):
    table = cells_table(killed_then_rerun.work)
    assert len(table) == GRID_CELLS and set(table["Status"]) == {"ok"}


@dataclass
class KilledMounted:
    work: Path
    owner: dict  # the mount's owner file as the killed run left it
    stale_mount: bool  # the mount was still there once its owner was gone
    owner_gone: bool


@pytest.fixture(scope="module")
def killed_while_mounted_then_rerun(tmp_path_factory) -> KilledMounted:
    """A run of one emulated-tier cell SIGKILLed with its process group while the tier is mounted, then run again."""
    work = tmp_path_factory.mktemp("killed-mounted")
    mnt = work / "mnt-hdd"
    cfg = tiny_config(
        work,
        loaders=["torchvision"],
        precisions=["fp32"],
        window={"seconds": 4},
        storage={"hdd": {"kind": "emulated", "path": str(work / "hdd"), "mount": str(mnt)}},
    )
    args = ["--configfile", str(write_config(work, cfg))]
    proc = start_snakemake(work, *args)
    root = psutil.Process(proc.pid)
    wait_until(lambda: mount_entry(mnt) and measuring_children(root), 300)
    assert mount_entry(mnt), "the cell never mounted the emulated tier"
    owner = json.loads((work / "mnt-hdd.owner.json").read_text())
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake, the cell runner and the training, at once
    proc.wait(timeout=60)
    wait_until(lambda: not alive(owner["owner_pid"]), 30)
    stale_mount, owner_gone = mount_entry(mnt) is not None, not alive(owner["owner_pid"])
    snakemake(work, *args, "--unlock")
    snakemake(work, *args)
    return KilledMounted(work, owner, stale_mount, owner_gone)


@needs_fuse
def test_a_run_killed_while_mounted_leaves_a_stale_mount_whose_owner_is_gone(killed_while_mounted_then_rerun):
    # the FUSE server runs in its own session and outlives its owner: a stale mount, as after a lost run
    assert killed_while_mounted_then_rerun.stale_mount and killed_while_mounted_then_rerun.owner_gone


@needs_fuse
def test_the_next_run_leaves_no_mount_and_no_owner_file(killed_while_mounted_then_rerun):
    work = killed_while_mounted_then_rerun.work
    assert mount_entry(work / "mnt-hdd") is None and not (work / "mnt-hdd.owner.json").exists()


@needs_fuse
def test_the_next_run_ends_the_stale_mounts_fuse_server(killed_while_mounted_then_rerun):
    assert not alive(killed_while_mounted_then_rerun.owner["server_pid"])


@needs_fuse
def test_the_next_run_measures_the_emulated_cell_through_the_mount(killed_while_mounted_then_rerun):
    rec = cell_record(killed_while_mounted_then_rerun.work, "torchvision_hdd_g1_b4_fp32_dp_r0")
    assert rec["status"] == "ok" and rec["tier"]["emulated"]["seeks"] > 0
