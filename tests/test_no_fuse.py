"""A fresh machine without FUSE (simulated: FUSE_LIBRARY_PATH points at no library): the run works, the emulated
tier's cells are `skipped` with the fix, the run says so before and after, and the tests that need FUSE skip, counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import REPO, snakemake, tiny_config, write_config

NO_FUSE = {**os.environ, "FUSE_LIBRARY_PATH": "/nonexistent/libfuse3.so.3", "LOADERBENCH_INSTALL": "0"}


def config_with_emulated_tier(tmp_path):
    return tiny_config(
        tmp_path,
        loaders=["torchvision"],
        precisions=["fp32"],
        storage={
            "disk-a": str(tmp_path / "tier-a"),
            "hdd": {"kind": "emulated", "path": str(tmp_path / "hdd"), "mount": str(tmp_path / "mnt")},
        },
        probe={"readers": [1], "max_seconds": 0.5},
    )


@pytest.mark.e2e
def test_without_fuse_the_run_succeeds_and_emulated_cells_are_skipped_with_the_fix(tmp_path):
    cfg_path = write_config(tmp_path, config_with_emulated_tier(tmp_path))
    snakemake(tmp_path, "--configfile", str(cfg_path), env=NO_FUSE)
    rec = json.loads((tmp_path / "results/cells/torchvision_hdd_g1_b4_fp32_dp_r0.json").read_text())
    assert rec["status"] == "skipped" and "apt install fuse3" in rec["reason"], rec["reason"]
    ok = json.loads((tmp_path / "results/cells/torchvision_disk-a_g1_b4_fp32_dp_r0.json").read_text())
    assert ok["status"] == "ok"
    table = pd.read_csv(tmp_path / "results/tables/cells.csv").set_index("Disk")
    assert table.loc["hdd", "Status"] == "skipped" and table.loc["disk-a", "Status"] == "ok"
    assert (tmp_path / "results/bundle/index.html").is_file()


def test_fuse_check_says_which_tiers_are_skipped_and_the_fix(tmp_path):
    cfg_path = write_config(tmp_path, config_with_emulated_tier(tmp_path))
    cmd = [sys.executable, "-m", "loaderbench", "fuse-check", "--config", str(cfg_path), "--install"]
    out = subprocess.run(cmd, env=NO_FUSE, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0
    assert "FUSE is not usable here" in out.stdout and "emulated tier(s) hdd are not measured" in out.stdout
    assert "'skipped'" in out.stdout and "apt install fuse3" in out.stdout and "installing" not in out.stdout
    plain = write_config(tmp_path, tiny_config(tmp_path))  # no emulated tier: nothing to say
    assert subprocess.run([*cmd[:5], str(plain)], env=NO_FUSE, capture_output=True, text=True, check=False).stdout == ""
    recipe = (REPO / "Makefile").read_text().split("\nquickstart:", 1)[1].split("\n\n", 1)[0].splitlines()
    run = next(i for i, line in enumerate(recipe) if line.strip() == "@$(RUN)")
    assert "fuse-check --config $(CONFIG) --install" in recipe[run - 1]  # before the run (installs when it can)
    # the run ends on the bundle path and the verdict; the FUSE note comes after it
    assert any("fuse-check --config $(CONFIG)" in line and "--install" not in line for line in recipe[run + 1 :])


def test_tests_that_need_fuse_skip_and_the_last_line_counts_them(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_emulated.py",
        "-k",
        "one_head_pays_every_access",
    ]
    out = subprocess.run(cmd, env=NO_FUSE, capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    last = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 0 and "1 skipped (no FUSE)" in last, out.stdout
    assert "1 skipped (no FUSE): FUSE is not usable here" in out.stdout
