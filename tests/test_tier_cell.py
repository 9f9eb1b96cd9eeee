"""A cell on a tier that cannot be prepared (FUSE missing) still leaves a record that says why and how to fix it."""

from __future__ import annotations

import json

from loaderbench.config import cell_spec, validate_config
from loaderbench.runcell import run_cell


def test_emulated_tier_without_fuse_gives_a_failed_record_naming_the_fix(tmp_path, monkeypatch):
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
    assert saved["status"] == record["status"] == "failed"
    assert "could not be prepared" in saved["reason"] and "fuse3" in saved["reason"], saved["reason"]
    assert "real mount point" in saved["reason"]
    assert saved["tier"]["kind"] == "emulated" and (tmp_path / "telemetry/x.csv").is_file()
