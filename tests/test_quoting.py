"""Values from the config or the file system reach shell commands quoted: spaces, `;`, `$( )`, quotes, non-ASCII."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from loaderbench.core.config import ConfigError, validate_config
from tests.conftest import REPO, tiny_config, write_config

# Every character class that broke or was run: a space, ';', a command substitution, both quotes, non-ASCII.
HOSTILE = "d ;$(touch PWNED) 'q' \"dq\" é"


@pytest.mark.e2e
def test_hostile_dataset_path_and_checkout_path_run_end_to_end_without_running_anything(tmp_path, small_dataset):
    checkout = tmp_path / f"checkout {HOSTILE}"
    checkout.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "config"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, checkout / name)
    source = tmp_path / f"data {HOSTILE}" / "train"
    shutil.copytree(small_dataset, source)
    work = tmp_path / "work"
    work.mkdir()
    cell = "torchvision_disk-a_g1_b4_fp32_dp_r0"
    cfg = tiny_config(
        work,
        loaders=["torchvision"],
        precisions=["fp32"],
        storage={"disk-a": str(work / f"tier {HOSTILE}")},
        dataset={"source": "path", "path": str(source)},
        timeline_cells=[cell],
        probe={"readers": [1], "max_seconds": 0.5},
    )
    cfg_path = write_config(work, cfg)
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(checkout / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--configfile",
        str(cfg_path),
    ]
    proc = subprocess.run(
        cmd,
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p for p in tmp_path.rglob("PWNED")] == []  # no command substitution ran anywhere
    name = "data_d_touch_PWNED_q_dq_e-train"  # derived from the path, safe as a folder name
    assert [p.name for p in (work / f"tier {HOSTILE}/loaderbench").glob(f"*/{name}/train/class_0000")] == ["class_0000"]
    assert (work / f"results/cells/{cell}.json").is_file() and (work / "results/bundle/index.html").is_file()
    assert (work / "results/figures/timelines.png").is_file()


def test_timeline_cells_must_be_cell_ids(tmp_path):
    with pytest.raises(ConfigError) as err:
        validate_config(
            {"storage": {"a": str(tmp_path)}, "timeline_cells": ["torchvision_a_g1_b128_fp32_dp_r0", "$(touch X)"]}
        )
    assert str(err.value).startswith("config key 'timeline_cells[1]': '$(touch X)' is not a cell id")
