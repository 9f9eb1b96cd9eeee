"""A cell's training step runs on the intra-op threads torch gives a plain script on this host, whatever
OMP_NUM_THREADS the job was started with (Snakemake sets 1 for a rule without `threads:`): started fresh, forked by
the warm-start server, as ddp ranks, and in the crosscheck's bare loop; the record says how many."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.engine import contract
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.experiments.crosscheck import _bare_process
from tests.conftest import staged_disk


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "threads")


def host_default_threads() -> int:
    """torch.get_num_threads() of a fresh interpreter started without OMP_NUM_THREADS: what a plain script gets."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


@pytest.fixture(scope="module")
def host_threads() -> int:
    threads = host_default_threads()
    if threads == 1:
        pytest.skip("torch picks 1 thread on this host: OMP_NUM_THREADS=1 changes nothing to tell apart")
    return threads


@pytest.fixture
def snakemake_threads(monkeypatch):
    """The environment of a Snakemake job of a rule without `threads:`, outside a warm-start server."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv(contract.ENV_SOCKET, raising=False)


@pytest.mark.slow
def test_a_fresh_cell_under_omp_num_threads_1_trains_on_the_hosts_default(
    staged, tmp_path, host_threads, snakemake_threads
):
    tmp, cfg = staged
    rec = run_cell(cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0"), tmp / "disk.json", tmp_path / "c.json")
    assert rec["status"] == "ok", rec["reason"]
    assert not rec["process_start"][0]["warm"]
    assert rec["metrics"]["intra_op_threads"] == host_threads
    assert rec["metrics"]["loader_info"]["workers"] == 1  # the loader's own settings are not the step's threads


@pytest.mark.slow
def test_a_warm_cell_under_omp_num_threads_1_trains_on_the_hosts_default(
    staged, tmp_path, host_threads, snakemake_threads, monkeypatch
):
    """The server itself started with OMP_NUM_THREADS=1 too (a driver's environment) and imported torch under it."""
    tmp, cfg = staged
    sock = tmp_path / "s.sock"
    server = subprocess.Popen(
        [sys.executable, "-m", "loaderbench.engine.process.warmstart", str(sock)], stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 120
        while not sock.exists() and server.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        monkeypatch.setenv(contract.ENV_SOCKET, str(sock))
        rec = run_cell(cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0"), tmp / "disk.json", tmp_path / "c.json")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["process_start"][0]["warm"], rec["process_start"]
    assert rec["metrics"]["intra_op_threads"] == host_threads


@pytest.mark.slow
def test_a_ddp_rank_gets_its_share_of_the_cpus_not_omp_num_threads(staged, tmp_path, host_threads, snakemake_threads):
    tmp, cfg = staged
    rec = run_cell(
        cell_spec(cfg, "torchvision_disk_g1_b4_fp32_ddp_r0", in_grid=False), tmp / "disk.json", tmp_path / "c.json"
    )
    assert rec["status"] == "ok", rec["reason"]
    assert rec["metrics"]["intra_op_threads"] == len(os.sched_getaffinity(0))  # one rank: every CPU


@pytest.mark.slow
def test_the_crosschecks_bare_loop_runs_the_cells_threads(staged, host_threads, snakemake_threads):
    tmp, cfg = staged
    spec = dataclasses.replace(cell_spec(cfg, "synthetic_disk_g1_b4_fp32_dp_r0", in_grid=False), window_steps=None)
    bare = _bare_process(spec, tmp / "disk.json", 1.0, cfg["cell_timeout_s"])
    assert bare["steps"] > 0 and bare["intra_op_threads"] == host_threads
