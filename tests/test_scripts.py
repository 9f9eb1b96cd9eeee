"""The helper scripts under scripts/ run for real on a tiny config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import yaml

from conftest import REPO


def test_gpu_host_prep_stages_into_each_tiers_path(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts/gpu-host-prep.sh", checkout / "scripts")
    (checkout / "src").symlink_to(REPO / "src")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # the venv's Python as python3
    (bin_dir / "python3").chmod(0o755)
    ram, disk = tmp_path / "shm tier", tmp_path / "disk"
    ram.mkdir()
    disk.mkdir()
    cfg = {"dataset": {"images": 6, "classes": 2}, "storage": {"ram": {"kind": "ram", "path": str(ram)}, "disk": str(disk)},
           "baseline": {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 128, "precision": "fp32"}}  # fmt: skip
    (checkout / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "scripts/gpu-host-prep.sh", "c.yaml"], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for tier, path in (("ram", ram), ("disk", disk)):
        manifest = json.loads((checkout / f"results/staging/{tier}.json").read_text())
        assert manifest["tier_path"] == str(path) and manifest["counts"]["files"] == 6
        assert len(list((path / "loaderbench").glob("*/train/*/*.JPEG"))) == 6
    assert not [p for p in checkout.iterdir() if p.name.startswith("{")], sorted(os.listdir(checkout))
