"""A cell on a tier that cannot be prepared still leaves a record that says why and how to fix it: skipped when FUSE is
simply absent, failed when a mount is refused."""

from __future__ import annotations

import json

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.engine.runner.runcell import run_cell


def test_emulated_tier_without_fuse_gives_a_skipped_record_naming_the_fix(tmp_path, monkeypatch):
    cfg = validate_config(
        {
            "storage": {"hdd": {"kind": "emulated", "path": str(tmp_path / "backing"), "mount": str(tmp_path / "mnt")}},
            "loaders": ["torchvision"],
            "batch_sizes": [4],
            "window": {"steps": 2},
        },
        base_dir=tmp_path,
    )
    spec = cell_spec(cfg, "torchvision_hdd_g1_b4_fp32_dp_r0")
    manifest = tmp_path / "hdd.json"
    manifest.write_text(json.dumps({"tier": "hdd", "files": [], "sha256": "0"}))
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no fusermount3 / fusermount on PATH: FUSE is unusable
    out = tmp_path / "cells/torchvision_hdd_g1_b4_fp32_dp_r0.json"
    record = run_cell(spec, manifest, out, timeline=tmp_path / "telemetry/x.csv")
    saved = json.loads(out.read_text())
    assert saved["status"] == record["status"] == "skipped"
    assert "could not be prepared" in saved["reason"] and "fuse3" in saved["reason"], saved["reason"]
    assert "real mount point" in saved["reason"]
    assert saved["tier"]["kind"] == "emulated" and (tmp_path / "telemetry/x.csv").is_file()


@pytest.mark.slow
def test_a_refused_mount_stays_a_failed_record(tmp_path):
    from loaderbench.data.emulated import fuse_available

    if fuse_available():
        pytest.skip(f"FUSE is not usable here: {fuse_available()}")
    (tmp_path / "mnt").write_text("a file where the mount point should be")
    (tmp_path / "backing").mkdir()
    cfg = validate_config(
        {
            "storage": {"hdd": {"kind": "emulated", "path": str(tmp_path / "backing"), "mount": str(tmp_path / "mnt")}},
            "loaders": ["torchvision"],
            "batch_sizes": [4],
            "window": {"steps": 2},
        },
        base_dir=tmp_path,
    )
    manifest = tmp_path / "hdd.json"
    manifest.write_text(json.dumps({"tier": "hdd", "files": [], "sha256": "0"}))
    out = tmp_path / "cells/x.json"
    record = run_cell(cell_spec(cfg, "torchvision_hdd_g1_b4_fp32_dp_r0"), manifest, out, timeline=tmp_path / "t.csv")
    assert record["status"] == "failed" and "exists and is not a directory" in record["reason"], record["reason"]


def _share(proc_mb_s, steps, disk_mb_s=200.0, batch=8, time_s=10.0):
    """device_read_share of a cold path cell whose 8 files average 125 KB, on constructed telemetry."""
    from types import SimpleNamespace

    from loaderbench.engine.runner.tier_run import device_read_share

    spec = SimpleNamespace(cache="cold", tier_kind="path")
    manifest = {"files": [{}] * 8, "counts": {"bytes": 8 * 125_000}}
    tele = {"disk_read_mb_s": {"mean": disk_mb_s}, "proc_read_mb_s": {"mean": proc_mb_s} if proc_mb_s else None}
    tier, metrics = {}, {"steps": steps, "global_batch": batch, "time_s": time_s}
    device_read_share(spec, manifest, tier, metrics, tele)
    return tier, metrics


def test_device_share_is_taken_against_what_the_cell_read_in_the_same_samples():
    """A worker-fed loader that read everything from the device is cold, even when its steps took more bytes than it
    read in the window (images its workers had read ahead): 200 MB/s read and from the disk, 230 MB/s taken."""
    tier, metrics = _share(proc_mb_s=200.0, steps=2300)  # 2300 x 8 images of 125 KB in 10 s: 230 MB/s
    assert tier["device_read_share"] == 1.0 and tier["device_read_basis"] == "read"
    assert not metrics.get("warnings")


def test_page_cache_hits_read_through_read_make_the_cell_warm():
    tier, metrics = _share(proc_mb_s=400.0, steps=4000)  # the disk delivered half of what was read
    assert tier["device_read_share"] == 0.5
    assert [w["code"] for w in metrics["warnings"]] == ["warm_reads"]


def test_reads_that_are_not_the_datasets_do_not_make_a_cold_cell_warm():
    """Pipes and /proc add to a process's read() bytes: 250 MB/s read, 200 from the disk, 200 taken by the steps."""
    tier, metrics = _share(proc_mb_s=250.0, steps=2000)
    assert tier["device_read_share"] == 1.0 and tier["device_read_basis"] == "consumed"
    assert not metrics.get("warnings")


def test_a_loader_that_maps_its_files_is_judged_against_the_bytes_its_steps_took():
    """DALI maps its files: no read() bytes, so the basis is the window's images (100 MB/s from the disk of 200)."""
    tier, _ = _share(proc_mb_s=None, steps=2000, disk_mb_s=100.0)
    assert tier["device_read_basis"] == "consumed" and tier["device_read_share"] == 0.5
