"""A cell on a tier that cannot be prepared still leaves a record that says why and how to fix it: skipped when FUSE is
simply absent, failed when a mount is refused."""

from __future__ import annotations

import json

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.engine.runcell import run_cell


def test_emulated_tier_without_fuse_gives_a_skipped_record_naming_the_fix(tmp_path, monkeypatch):
    cfg = validate_config({"storage": {"hdd": {"kind": "emulated", "path": str(tmp_path / "backing"),
                                               "mount": str(tmp_path / "mnt")}},
                           "loaders": ["torchvision"], "batch_sizes": [4], "window": {"steps": 2}},
                          base_dir=tmp_path)  # fmt: skip
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


def test_a_refused_mount_stays_a_failed_record(tmp_path):
    import pytest

    from loaderbench.data.emulated import fuse_available

    if fuse_available():
        pytest.skip(f"FUSE is not usable here: {fuse_available()}")
    (tmp_path / "mnt").write_text("a file where the mount point should be")
    (tmp_path / "backing").mkdir()
    cfg = validate_config({"storage": {"hdd": {"kind": "emulated", "path": str(tmp_path / "backing"),
                                               "mount": str(tmp_path / "mnt")}},
                           "loaders": ["torchvision"], "batch_sizes": [4], "window": {"steps": 2}},
                          base_dir=tmp_path)  # fmt: skip
    manifest = tmp_path / "hdd.json"
    manifest.write_text(json.dumps({"tier": "hdd", "files": [], "sha256": "0"}))
    out = tmp_path / "cells/x.json"
    record = run_cell(cell_spec(cfg, "torchvision_hdd_g1_b4_fp32_dp_r0"), manifest, out, timeline=tmp_path / "t.csv")
    assert record["status"] == "failed" and "exists and is not a directory" in record["reason"], record["reason"]
