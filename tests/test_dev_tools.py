"""The offline-GPU-host tooling under dev/ runs for real on a tiny config. Not the product: marked `dev`, outside
`make test` (`make test-dev` runs these)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

from loaderbench.engine.contract import ENTRY_MODULE

pytestmark = pytest.mark.dev


def _with_python3(tmp_path) -> dict:
    """This environment with the venv's Python first on PATH as `python3` (the GPU-host scripts call python3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python3").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _checkout(tmp_path, script: str, linked: tuple[str, ...]):
    """A checkout of `dev/<script>` (copied, so that it finds its repository above it) and the `linked` parts."""
    checkout = tmp_path / "checkout"
    (checkout / "dev").mkdir(parents=True)
    shutil.copy(REPO / "dev" / script, checkout / "dev")
    for name in linked:
        (checkout / name).symlink_to(REPO / name)
    return checkout


def test_gpu_host_prep_stages_into_each_tiers_path(tmp_path):
    checkout = _checkout(tmp_path, "gpu-host-prep.sh", ("src",))
    ram, disk = tmp_path / "shm tier", tmp_path / "disk"
    ram.mkdir()
    disk.mkdir()
    cfg = {
        "dataset": {"images": 6, "classes": 2},
        "storage": {"ram": {"kind": "ram", "path": str(ram)}, "disk": str(disk)},
        "batch_sizes": [4],
        "baseline": {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 4, "precision": "fp32"},
    }
    (checkout / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = _with_python3(tmp_path)
    proc = subprocess.run(
        ["bash", "dev/gpu-host-prep.sh", "c.yaml"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for tier, path in (("ram", ram), ("disk", disk)):
        manifest = json.loads((checkout / f"results/staging/{tier}.json").read_text())
        assert manifest["tier_path"] == str(path) and manifest["counts"]["files"] == 6
        assert len(list((path / "loaderbench").glob("*/*/train/*/*.JPEG"))) == 6  # <project>/<dataset>/train
    assert not [p for p in checkout.iterdir() if p.name.startswith("{")], sorted(os.listdir(checkout))


def test_reuse_check_measures_cells_fresh_and_kept_and_compares_them(tmp_path_factory, small_dataset, tmp_path):
    """dev/reuse-check.sh on two dp cells: 4 rounds (fresh, kept, fresh, kept), every record ok, the kept rounds'
    second cell measured by the process of their first, and a table of both."""
    from tests.conftest import staged_disk

    staged, _ = staged_disk(tmp_path_factory, small_dataset, "reuse-check")
    raw = {
        "dataset": {"name": "ds"},
        "storage": {"disk": str(staged / "tier")},
        "loaders": ["torchvision", "opencv"],
        "gpus": [1],
        "batch_sizes": [4],
        "precisions": ["fp32"],
        "window": {"steps": 3},
        "warmup_steps": 1,
        "crop_size": 32,
        "workers": 1,
        "prefetch_factor": 1,
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "results/staging").mkdir(parents=True)
    shutil.copy(staged / "disk.json", tmp_path / "results/staging/disk.json")
    cells = ["torchvision_disk_g1_b4_fp32_dp_r0", "opencv_disk_g1_b4_fp32_dp_r0"]
    proc = subprocess.run(
        ["bash", str(REPO / "dev/reuse-check.sh"), "c.yaml", "check", *cells],
        cwd=tmp_path,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for n, mode in enumerate(["fresh", "kept", "fresh", "kept"], start=1):
        recs = [json.loads((tmp_path / f"check/{n}-{mode}/{c}.json").read_text()) for c in cells]
        assert [r["status"] for r in recs] == ["ok", "ok"]
        starts = [r["process_start"][0] for r in recs]
        assert [s["reused"] for s in starts] == ([0, 1] if mode == "kept" else [0, 0]), starts
        assert (starts[0]["pid"] == starts[1]["pid"]) == (mode == "kept")
    lines = proc.stdout.splitlines()
    assert any(line.startswith("torchvision_disk_g1_b4_fp32_dp_r0") for line in lines)
    assert "kept / fresh, median over 2 cells:" in lines[-1]


def test_gpu_study_stop_ends_the_whole_run_and_releases_the_lock(tmp_path):
    """dev/gpu-study.sh start, then stop while a cell measures: the driver's session (Snakemake, the warm-start
    server, the cell) is gone within 10 s, Snakemake's lock is released, and a new start is not refused. (A run
    lost calls to `pkill -f` patterns that matched the caller, and a run to the lock a SIGKILLed Snakemake left.)"""
    import time

    import psutil

    checkout = _checkout(tmp_path, "gpu-study.sh", ("Snakefile", "workflow", "profiles", "src"))
    cfg = {
        "dataset": {"images": 24, "classes": 2},
        "storage": {"disk": str(tmp_path / "tier")},
        "loaders": ["torchvision"],
        "batch_sizes": [4],
        "precisions": ["fp32"],
        "crop_size": 32,
        "workers": 1,
        "warmup_steps": 1,
        "window": {"seconds": 60},
    }
    (checkout / "c.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "tier").mkdir()
    env = {**_with_python3(tmp_path), "CONFIG": "c.yaml"}

    def study(*args):
        return subprocess.run(
            ["bash", "dev/gpu-study.sh", *args],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def in_checkout():
        out = []
        for p in psutil.process_iter(["cwd", "cmdline"]):
            if p.info["cwd"] and p.info["cwd"].startswith(str(checkout)):
                out.append(p.pid)
        return out

    assert study("start", "run", "5").returncode == 0
    deadline = time.time() + 240
    while (
        time.time() < deadline
        and not (checkout / "run/DONE").exists()
        and not any(
            ENTRY_MODULE in " ".join(p.info["cmdline"] or [])
            for p in psutil.process_iter(["cmdline"])
            if p.pid in in_checkout()
        )
    ):
        time.sleep(1)
    assert list((checkout / ".snakemake/locks").iterdir()), "a measuring Snakemake holds its lock"
    t0 = time.time()
    proc = study("stop", "run")
    assert proc.returncode == 0 and "stopped the run" in proc.stdout, proc.stdout + proc.stderr
    while in_checkout() and time.time() - t0 < 10:
        time.sleep(0.5)
    assert not in_checkout(), [psutil.Process(p).cmdline() for p in in_checkout()]
    locks = checkout / ".snakemake/locks"
    assert not locks.exists() or not list(locks.iterdir()), proc.stdout  # Snakemake removes the folder on SIGTERM
    assert not list((checkout / "results").glob("cells/*.json"))  # the interrupted cell wrote no record
    # a lock left behind (as by a SIGKILLed Snakemake) is released by the next start, which then runs
    locks.mkdir(exist_ok=True)
    (locks / "0.input.lock").write_text("stale")
    proc = study("start", "run2", "0")
    assert proc.returncode == 0 and "released a stale Snakemake lock" in (checkout / "run2/steps.log").read_text()
    study("stop", "run2")


def test_gpu_study_start_measures_a_spreading_configuration_once_more(tmp_path):
    """Configurations whose repeats spread over spread_warn are rerun once, and flagged if they still do.
    `gpu-study.sh start` requeues them (`loaderbench respread`) after the parts and measures them again in the same
    run. spread_warn 0 makes any two real repeats spread over it; the ledger keeps the configuration from a second
    rerun, the first records stay in superseded/, and the table is built over the new ones."""
    import time

    checkout = _checkout(tmp_path, "gpu-study.sh", ("Snakefile", "workflow", "profiles", "src"))
    cfg = {
        "dataset": {"images": 24, "classes": 2},
        "storage": {"disk": str(tmp_path / "tier")},
        "loaders": ["synthetic"],
        "batch_sizes": [4],
        "precisions": ["fp32"],
        "crop_size": 32,
        "workers": 1,
        "warmup_steps": 1,
        "window": {"steps": 3},
        "repeats": 2,
        "spread_warn": 0.0,
        "baseline": {"loader": "synthetic", "tier": "disk", "gpus": 1, "batch_size": 4, "precision": "fp32"},
    }
    (checkout / "c.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "tier").mkdir()
    env = {**_with_python3(tmp_path), "CONFIG": "c.yaml"}
    proc = subprocess.run(
        ["bash", "dev/gpu-study.sh", "start", "run", "5"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    deadline = time.time() + 400
    while time.time() < deadline and not (checkout / "run/DONE").exists():
        time.sleep(2)
    steps = (checkout / "run/steps.log").read_text()
    assert (checkout / "run/DONE").exists(), steps
    assert "requeued synthetic_disk_g1_b4_fp32_dp" in steps, steps
    ledger = json.loads((checkout / "results/respread.json").read_text())
    assert list(ledger) == ["synthetic_disk_g1_b4_fp32_dp"]
    first = sorted((checkout / "results/cells/superseded").glob("*.json"))
    assert len(first) == 2  # both repeats' first records, kept
    for r in (0, 1):
        new = json.loads((checkout / f"results/cells/synthetic_disk_g1_b4_fp32_dp_r{r}.json").read_text())
        old = json.loads(next(p for p in first if p.name.startswith(f"synthetic_disk_g1_b4_fp32_dp_r{r}.")).read_text())
        assert new["status"] == "ok" and new["started_at"] > old["finished_at"]  # measured again, after
    assert "kept the first record" not in steps  # nothing was left unmeasured
    assert (checkout / "results/tables/repeats.csv").exists()
