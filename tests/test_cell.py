"""The cell runner on the CPU: real MobileNetV2 training steps, and a record for every outcome."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from loaderbench.check import check_dataset
from loaderbench.config import cell_spec, validate_config
from loaderbench.records import validate_record
from loaderbench.runcell import run_cell
from loaderbench.stage import stage


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    tmp = tmp_path_factory.mktemp("cell")
    check_dataset(small_dataset, tmp / "check.json", tmp / "q", jobs=2)
    (tmp / "tier").mkdir()
    stage(tmp / "check.json", "disk", tmp / "tier", "ds", tmp / "disk.json")
    cfg = validate_config({
        "dataset": {"name": "ds"}, "storage": {"disk": str(tmp / "tier")}, "gpus": [1, 2], "batch_sizes": [4, 32],
        "precisions": ["fp32", "amp"], "window": {"steps": 3}, "warmup_steps": 1, "crop_size": 32, "workers": 1,
        "prefetch_factor": 1,
    })  # fmt: skip
    return tmp, cfg


@pytest.mark.parametrize("loader", ["torchvision", "opencv"])
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_ok_cell_trains_and_records_metrics_and_provenance(staged, tmp_path, loader, precision):
    tmp, cfg = staged
    spec = cell_spec(cfg, f"{loader}_disk_g1_b4_{precision}_r0")
    out = tmp_path / "cells" / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["reason"] is None and rec["cell_id"] == spec.cell_id
    assert m["steps"] == 3 and m["global_batch"] == 4 and m["samples"] == 12
    assert m["samples_per_s"] == pytest.approx(12 / m["time_s"])
    # warm-up covers the prefetch backlog (1 worker x prefetch 1) even though 1 step was asked for
    assert m["prefetch_backlog_batches"] == 1 and m["warmup_steps"] == 3
    assert m["data_wait_ms"]["mean"] >= 0 and m["compute_ms"]["mean"] > 0 and m["final_loss"] > 0
    assert m["device"]["type"] == "cpu" and m["amp_dtype"] == ("bfloat16" if precision == "amp" else None)
    p = rec["provenance"]
    assert p["versions"]["torch"] and p["versions"]["torchvision"] and p["versions"]["opencv"] and p["versions"]["pillow"]
    assert p["host"]["cpu_model"] and p["tier"]["path"] == str(tmp / "tier") and p["tier"]["fstype"]
    assert rec["manifest_sha256"] == json.loads((tmp / "disk.json").read_text())["sha256"]
    assert rec["spec"]["loader"] == loader and len(rec["spec_hash"]) == 16
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temp file left behind


def test_more_gpus_than_the_host_has_is_a_skip_record(staged, tmp_path):
    tmp, cfg = staged
    out = tmp_path / "c.json"
    run_cell(cell_spec(cfg, "opencv_disk_g2_b4_fp32_r0"), tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "skipped" and "cell needs 2 GPUs; this host has 0 (CPU only)" == rec["reason"]
    assert rec["metrics"] is None


def test_an_exception_in_the_cell_is_a_failed_record(staged, tmp_path):
    tmp, cfg = staged
    out = tmp_path / "c.json"
    run_cell(cell_spec(cfg, "torchvision_disk_g1_b32_fp32_r0"), tmp / "disk.json", out)  # 24 images < one batch
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "failed" and "fewer images than one batch" in rec["reason"]
    assert "Traceback" in rec["detail"]


def test_a_timeout_is_a_failed_record(staged, tmp_path):
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "opencv_disk_g1_b4_fp32_r0"), timeout_s=0.5)
    out = tmp_path / "c.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    assert rec["status"] == "failed" and rec["reason"] == "timed out after 0.5 s (cell_timeout_s)"


def test_a_measurement_process_killed_by_a_signal_is_a_failed_record(staged, tmp_path):
    """As the kernel's OOM killer would: SIGKILL to the measuring process."""
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "opencv_disk_g1_b4_fp32_r0"), window_steps=None, window_s=120.0)
    out = tmp_path / "c.json"
    worker = threading.Thread(target=run_cell, args=(spec, tmp / "disk.json", out))
    worker.start()
    deadline = time.time() + 60
    child = None
    while time.time() < deadline and child is None:
        kids = [p for p in psutil.Process().children() if "loaderbench.train" in " ".join(p.cmdline())]
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
