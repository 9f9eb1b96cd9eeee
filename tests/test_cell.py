"""The cell runner on the CPU: real MobileNetV2 training steps, and a record for every outcome."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.provenance import code_sha256
from loaderbench.core.records import validate_record
from loaderbench.engine.contract import ENTRY_MODULE
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.engine.watchdog import StallRule
from tests.conftest import staged_disk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(
        tmp_path_factory, small_dataset, "cell", gpus=[1, 2], batch_sizes=[4, 32], precisions=["fp32", "amp"]
    )


@pytest.mark.usefixtures("warm_cells")
@pytest.mark.parametrize("loader", ["torchvision", "opencv"])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_ok_cell_trains_and_records_metrics_and_provenance(staged, tmp_path, loader, precision):
    tmp, cfg = staged
    spec = cell_spec(cfg, f"{loader}_disk_g1_b4_{precision}_dp_r0")
    out = tmp_path / "cells" / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["reason"] is None and rec["cell_id"] == spec.cell_id
    assert m["steps"] == 3 and m["global_batch"] == 4 and m["samples"] == 12
    assert m["samples_per_s"] == pytest.approx(12 / m["time_s"])
    # warm-up may cover the prefetch backlog (1 worker x prefetch 1) + 2 though 1 step was asked for; it ends
    # earlier only where a step waited for its batch (the backlog was used up)
    assert m["prefetch_backlog_batches"] == 1 and m["warmup_steps_max"] == 3
    assert m["warmup_steps"] == 3 or m["warmup_drained_at"] == m["warmup_steps"] >= 2
    assert m["data_wait_ms"]["mean"] >= 0 and m["compute_ms"]["mean"] > 0 and m["final_loss"] > 0
    assert m["device"]["type"] == "cpu" and m["amp_dtype"] == ("bfloat16" if precision == "amp" else None)
    assert m["optimizer"] == {"name": "SGD", "fused": True}  # optimizer.fused: true by default
    p = rec["provenance"]
    assert (
        p["versions"]["torch"] and p["versions"]["torchvision"] and p["versions"]["opencv"] and p["versions"]["pillow"]
    )
    assert p["host"]["cpu_model"] and p["tier"]["path"] == str(tmp / "tier") and p["tier"]["fstype"]
    assert rec["manifest_sha256"] == json.loads((tmp / "disk.json").read_text())["sha256"]
    assert p["code_sha256"] == code_sha256() and len(p["code_sha256"]) == 64  # the code that ran, by content
    assert rec["spec"]["loader"] == loader and len(rec["spec_hash"]) == 16
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temp file left behind


@pytest.mark.usefixtures("warm_cells")
def test_the_plain_optimizer_cell_trains_and_says_so_and_keeps_the_hash_of_records_before_the_setting(staged, tmp_path):
    """optimizer.fused (SGD's fused implementation, on by default: under amp on a GPU it keeps GradScaler's check on
    the device) set false: the seed's plain SGD, the cell every record made before the setting measured - its spec
    leaves the field out, so their hashes still match."""
    tmp, cfg = staged
    fused = cell_spec(cfg, "synthetic_disk_g1_b4_amp_dp_r0", in_grid=False)
    spec = replace(fused, optimizer_fused=False)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["metrics"]["optimizer"] == {"name": "SGD", "fused": False} and rec["metrics"]["final_loss"] > 0
    assert "optimizer_fused" not in rec["spec"] and fused.to_dict()["optimizer_fused"] is True


@pytest.mark.usefixtures("warm_cells")
def test_a_process_that_runs_cell_after_cell_keeps_its_cpus(staged, tmp_path, monkeypatch):
    """The runner moves its own threads off a cell's launch cores while the cell measures, and gives them their CPUs
    back after: a sweep (cell after cell in one process) on the H200 lost a core a cell, down to 4 for the 12th. This
    machine has too few cores for a placement, so the runner's plan is replaced by one (launch on CPU 1, the rest on
    CPU 0); the affinity is the real one."""
    from loaderbench.engine import placement

    tmp, cfg = staged
    monkeypatch.setattr(placement, "for_cell", lambda *a, **k: placement.Placement((1,), (0,)))
    before = os.sched_getaffinity(0)
    for r in range(2):
        spec = cell_spec(cfg, f"synthetic_disk_g1_b4_fp32_dp_r{r}", in_grid=False)
        run_cell(spec, tmp / "disk.json", tmp_path / f"{spec.cell_id}.json")
        assert json.loads((tmp_path / f"{spec.cell_id}.json").read_text())["status"] == "ok"
        assert os.sched_getaffinity(0) == before


@pytest.mark.own_processes  # a plain start: the process that ends is the cell's own
def test_a_cell_leaves_no_temporary_directory_behind(staged, tmp_path, monkeypatch):
    """A cell whose loader starts workers makes multiprocessing's temporary directory (`pymp-*`), which its finalizer
    removes at a normal exit; the measuring process ends with os._exit, so it removes it itself. A plain start (no
    warm-start server) with its own TMPDIR, to see what it leaves there (torch's compile cache may stay: a cache)."""
    tmp, cfg = staged
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setenv("TMPDIR", str(own))
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0")
    run_cell(spec, tmp / "disk.json", tmp_path / f"{spec.cell_id}.json")
    assert json.loads((tmp_path / f"{spec.cell_id}.json").read_text())["status"] == "ok"
    assert [p.name for p in own.iterdir() if p.name.startswith("pymp-")] == []


def test_more_gpus_than_the_host_has_is_a_skip_record(staged, tmp_path):
    tmp, cfg = staged
    out = tmp_path / "c.json"
    run_cell(cell_spec(cfg, "opencv_disk_g2_b4_fp32_dp_r0"), tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "skipped" and "cell needs 2 GPUs; this host has 0 (CPU only)" == rec["reason"]
    assert rec["metrics"] is None


@pytest.mark.usefixtures("warm_cells")
def test_an_exception_in_the_cell_is_a_failed_record(staged, tmp_path):
    tmp, cfg = staged
    out = tmp_path / "c.json"
    run_cell(cell_spec(cfg, "torchvision_disk_g1_b32_fp32_dp_r0"), tmp / "disk.json", out)  # 24 images < one batch
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "failed" and "fewer images than one batch" in rec["reason"]
    assert "Traceback" in rec["detail"]


def test_a_timeout_is_a_failed_record(staged, tmp_path):
    tmp, cfg = staged
    spec = cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0")
    out = tmp_path / "c.json"
    run_cell(spec, tmp / "disk.json", out, timeout_s=0.5)
    rec = json.loads(out.read_text())
    assert rec["status"] == "failed" and rec["reason"] == "timed out after 0.5 s (cell_timeout_s)"


@pytest.mark.own_processes  # looks for its measuring processes among this process's children
def test_a_measurement_process_killed_by_a_signal_is_a_failed_record(staged, tmp_path):
    """As the kernel's OOM killer would: SIGKILL to the measuring process."""
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "opencv_disk_g1_b4_fp32_dp_r0"), window_steps=None, window_s=120.0)
    out = tmp_path / "c.json"
    worker = threading.Thread(target=run_cell, args=(spec, tmp / "disk.json", out))
    worker.start()
    deadline = time.time() + 60
    child = None
    while time.time() < deadline and child is None:
        kids = [p for p in psutil.Process().children() if ENTRY_MODULE in " ".join(p.cmdline())]
        child = kids[0] if kids else None
        time.sleep(0.2)
    assert child is not None, "measurement process never started"
    time.sleep(2)
    child.kill()
    worker.join(timeout=60)
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "failed" and "killed by SIGKILL" in rec["reason"]
    assert not any(Path(tmp_path).glob(".*.child"))


@pytest.mark.usefixtures("warm_cells")
def test_a_compiled_cell_trains_under_torch_compile(staged, tmp_path):
    """compile: true wraps the model in torch.compile (inductor, compiled during the warm-up) and records it."""
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "synthetic_disk_g1_b4_amp_dp_r0", in_grid=False), compile=True)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    assert rec["status"] == "ok", rec.get("reason")
    m = rec["metrics"]
    assert m["compiled"] is True and rec["spec"]["compile"] is True and m["steps"] == 3
    assert m["input"]["dtype"] == "bfloat16" and m["input"]["channels_last"] is True
    assert m["input"]["delivered_dtype"] == "bfloat16"  # the synthetic batch is made in the autocast dtype
    assert m["warmup_s"] > 0 and m["setup_s"] > 0 and m["startup_s"] > 0


@pytest.mark.usefixtures("warm_cells")
def test_ceiling_pairs_the_synthetic_cell_with_a_bare_loop_of_as_many_steps(staged, tmp_path):
    from loaderbench.experiments.ceiling import ceiling

    tmp, cfg = staged
    spec = cell_spec(cfg, "synthetic_disk_g1_b4_amp_dp_r0", in_grid=False)
    r = ceiling(spec, tmp / "disk.json", rounds=2, variant_steps=2, out_dir=tmp_path)
    assert r["steps"] == [3, 3] and len(r["bare_samples_per_s"]) == 2
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [  # each synthetic round a real cell record
        "synthetic_disk_g1_b4_amp_dp_r0.json",
        "synthetic_disk_g1_b4_amp_dp_r1.json",
    ]
    assert r["placement"] == {"off": "placement off on cpu"}
    assert all(x > 0 for x in r["synthetic_samples_per_s"] + r["bare_samples_per_s"])
    ratios = sorted(s / b for s, b in zip(r["synthetic_samples_per_s"], r["bare_samples_per_s"], strict=True))
    assert r["synthetic_over_bare"] == pytest.approx(sum(ratios) / 2)
    assert set(r["input_variants_ms_per_step"]) == {
        "float32 NCHW-contiguous",
        "float32 channels_last",
        "bfloat16 channels_last",
        "bfloat16 NCHW-contiguous",
    }
    assert all(ms > 0 for ms in r["input_variants_ms_per_step"].values())


def test_sweep_runs_each_variant_as_real_cells_and_reuses_synthetic_for_loader_only_variants(staged, tmp_path):
    from loaderbench.core.config import ConfigError
    from loaderbench.engine import contract
    from loaderbench.experiments.sweep import parse_variant, render, sweep

    tmp, cfg = staged
    servers = lambda: {
        c.pid
        for c in psutil.Process().children(recursive=True)
        if "loaderbench.engine.process.warmstart" in " ".join(c.cmdline())
    }
    env_before, servers_before = os.environ.get(contract.ENV_SOCKET), servers()
    rows = sweep(
        cfg,
        ["base:", "q3:dali_prefetch=3", "w2:window_steps=4"],
        ["synthetic", "dali-cpu"],
        "disk",
        4,
        "fp32",
        1,
        tmp / "disk.json",
        tmp_path / "sweep",
    )
    got = {(r["variant"], r["loader"]): r for r in rows}
    # q3 changes only a loader setting: no second synthetic cell; w2 changes the window: its own synthetic cell
    assert set(got) == {
        ("base", "synthetic"),
        ("base", "dali-cpu"),
        ("q3", "dali-cpu"),
        ("w2", "synthetic"),
        ("w2", "dali-cpu"),
    }
    assert not (tmp_path / "sweep/q3/synthetic_disk_g1_b4_fp32_dp_r0.json").exists()
    q3 = json.loads((tmp_path / "sweep/q3/dali-cpu_disk_g1_b4_fp32_dp_r0.json").read_text())
    assert q3["status"] == "ok" and q3["metrics"]["loader_info"]["prefetch_queue_depth"] == 3
    w2 = json.loads((tmp_path / "sweep/w2/dali-cpu_disk_g1_b4_fp32_dp_r0.json").read_text())
    assert w2["metrics"]["steps"] == 4
    # each cell a fresh process forked by the sweep's own warm-start server, which is gone afterwards
    starts = [
        s["how"]
        for p in sorted((tmp_path / "sweep").rglob("*_r0.json"))
        for s in json.loads(p.read_text())["process_start"]
    ]
    assert len(starts) == 5 and all(how.startswith("forked by the warm-start server") for how in starts), starts
    assert os.environ.get(contract.ENV_SOCKET) == env_before and servers() == servers_before
    assert got[("q3", "dali-cpu")]["au_against"] == "base" and got[("w2", "dali-cpu")]["au_against"] == "w2"
    assert got[("q3", "dali-cpu")]["au"] == pytest.approx(
        got[("q3", "dali-cpu")]["median"] / got[("base", "synthetic")]["median"]
    )
    assert "q3" in render(rows) and json.loads((tmp_path / "sweep/sweep.json").read_text()) == rows
    with pytest.raises(ConfigError, match="not field=value"):
        parse_variant("x:batch_size=8")
    with pytest.raises(ConfigError, match="not field=value"):
        parse_variant("x:no_such_setting=1")


@pytest.mark.usefixtures("warm_cells")
@pytest.mark.parametrize(
    "loader, sharding",
    [("torchvision", None), ("opencv", None), ("dali-mc", "shard 0 of 2"), ("dali-sc", "scatter from rank 0")],
)
def test_ddp_cell_runs_one_gloo_process_per_rank_on_the_cpu(staged, tmp_path, loader, sharding):
    """ddp with gpus=2 on a CPU-only host: two real processes (gloo), each loading its own share of the batch."""
    tmp, cfg = staged
    spec = cell_spec(cfg, f"{loader}_disk_g2_b4_fp32_ddp_r0", in_grid=False)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "ok", rec.get("reason")
    m = rec["metrics"]
    par = m["parallel"]
    assert par["mode"] == "ddp" and par["processes"] == 2 and par["backend"] == "gloo"
    assert par["wrapper"] == "DistributedDataParallel" and [r["rank"] for r in par["per_rank"]] == [0, 1]
    assert all(r["time_s"] > 0 and r["compute_ms"] > 0 for r in par["per_rank"])
    assert m["global_batch"] == 8 and m["samples"] == m["steps"] * 8 == 24  # per-GPU batch 4 x 2 ranks
    assert m["time_s"] == pytest.approx(max(r["time_s"] for r in par["per_rank"]))
    info = m["loader_info"]
    if sharding:
        assert info["sharding"] == sharding
    else:
        assert info["sampler"].endswith(", rank 0 of 2")
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no rank or temp file left behind


@pytest.mark.usefixtures("warm_cells")
def test_dp_cell_goes_through_dataparallel_and_needs_gpus_for_more_than_one(staged, tmp_path):
    tmp, cfg = staged
    rec = run_cell(
        cell_spec(cfg, "dali-mc_disk_g1_b4_fp32_dp_r0", in_grid=False), tmp / "disk.json", tmp_path / "a.json"
    )
    assert rec["status"] == "ok" and rec["metrics"]["parallel"]["wrapper"] == "DataParallel"
    assert rec["metrics"]["parallel"]["processes"] == 1 and rec["metrics"]["loader_info"]["prescattered"] is False
    rec = run_cell(cell_spec(cfg, "opencv_disk_g2_b4_fp32_dp_r0"), tmp / "disk.json", tmp_path / "b.json")
    assert rec["status"] == "skipped" and "needs 2 GPUs" in rec["reason"]


@pytest.mark.own_processes  # looks for its measuring processes among this process's children
def test_a_killed_rank_fails_the_ddp_cell_and_stops_the_other_rank(staged, tmp_path):
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "opencv_disk_g2_b4_fp32_ddp_r0", in_grid=False), window_steps=None, window_s=120.0)
    out = tmp_path / "c.json"
    worker = threading.Thread(target=run_cell, args=(spec, tmp / "disk.json", out))
    worker.start()
    deadline = time.time() + 60
    ranks = []
    while time.time() < deadline and len(ranks) < 2:
        ranks = [p for p in psutil.Process().children() if ENTRY_MODULE in " ".join(p.cmdline())]
        time.sleep(0.2)
    assert len(ranks) == 2, "the two ranks never started"
    time.sleep(3)
    rank1 = next(p for p in ranks if p.environ().get("RANK") == "1")
    rank1.kill()
    worker.join(timeout=90)
    assert not worker.is_alive()
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "failed" and "rank 1" in rec["reason"] and "SIGKILL" in rec["reason"]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


@pytest.mark.own_processes  # looks for its measuring processes among this process's children
def test_a_hanging_loader_ends_failed_as_stalled_with_its_stacks_within_the_watchdog_time(staged, tmp_path):
    """A real hang: every staged file is a FIFO with no writer, so the loader's worker blocks in open() forever."""
    import os
    import shutil

    tmp, cfg = staged
    tier = tmp_path / "fifo-tier"
    shutil.copytree(tmp / "tier", tier)
    for f in (tier / "loaderbench").rglob("*.*"):
        f.unlink()
        os.mkfifo(f)
    manifest = json.loads((tmp / "disk.json").read_text())
    spec = replace(
        cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0"), tier_path=str(tier), read_path=None, cache="warm"
    )  # warm: nothing opens the files before the loader does
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    out = tmp_path / "c.json"
    t0 = time.time()
    run_cell(spec, tmp_path / "m.json", out, stall=StallRule(floor_s=3, first_step_factor=2))
    took = time.time() - t0
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("stalled in warmup after 0 steps (no step for ")
    assert took < 6 + 30  # the 6 s stall limit plus start-up, not the cell timeout
    stacks = rec["stacks"]["0"]
    assert "Thread" in stacks and "entry.py" in stacks  # the main thread, where it waited for the loader
    assert not [p for p in psutil.Process().children(recursive=True) if ENTRY_MODULE in " ".join(p.cmdline())]
