"""An unreadable cell record is named, moved to results/cells/corrupt/ by a run (not by a dry run or lint), and its
cell is measured again."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from loaderbench.cli import main as cli
from loaderbench.report.aggregate import aggregate
from tests.conftest import snakemake, tiny_config, write_config

CELL = "torchvision_disk-a_g1_b4_fp32_dp_r0"


def one_cell_config(tmp_path):
    return tiny_config(
        tmp_path,
        loaders=["torchvision"],
        storage={"disk-a": str(tmp_path / "tier-a")},
        precisions=["fp32"],
        probe={"readers": [1], "max_seconds": 0.5},
    )


@pytest.mark.e2e
def test_truncated_cell_record_is_moved_aside_named_and_measured_again(tmp_path, capsys):
    cfg_path = write_config(tmp_path, one_cell_config(tmp_path))
    snakemake(tmp_path, "--configfile", str(cfg_path))
    record = tmp_path / f"results/cells/{CELL}.json"
    good = record.read_text()
    record.write_text(good[: len(good) // 2])  # truncated, as by a full disk or a copy cut short
    truncated = record.read_bytes()
    # a dry run names it and plans its cell again, and neither it nor lint moves or rewrites anything
    plan = snakemake(tmp_path, "--configfile", str(cfg_path), "-n")
    assert re.search(r"^cell\s+1$", plan.stdout, re.MULTILINE) and f"cell={CELL}" in plan.stdout, plan.stdout
    assert f"cell record results/cells/{CELL}.json is unreadable (JSONDecodeError" in plan.stderr, plan.stderr
    snakemake(tmp_path, "--configfile", str(cfg_path), "--lint")
    assert record.read_bytes() == truncated and not (tmp_path / "results/cells/corrupt").exists()
    proc = snakemake(tmp_path, "--configfile", str(cfg_path))
    out = proc.stdout + proc.stderr
    assert f"cell record results/cells/{CELL}.json is unreadable (JSONDecodeError" in out, out
    assert (tmp_path / f"results/cells/corrupt/{CELL}.json").read_text() == good[: len(good) // 2]
    again = json.loads(record.read_text())
    assert again["status"] == "ok" and again["finished_at"] > json.loads(good)["finished_at"]
    table = pd.read_csv(tmp_path / "results/tables/cells.csv")
    assert table["Status"].tolist() == ["ok"]
    # `loaderbench cells --status` names it too, and moves it aside instead of crashing
    record.write_text("{")
    os.chdir(tmp_path)
    assert cli(["cells", "--config", str(cfg_path), "--status"]) == 0
    captured = capsys.readouterr()
    assert f"{CELL}\tmissing (unreadable record moved to results/cells/corrupt/{CELL}.1.json)" in captured.out
    assert f"cell record results/cells/{CELL}.json is unreadable" in captured.err


def test_aggregate_skips_an_unreadable_record_and_names_it(tmp_path, capsys):
    cells = tmp_path / "results/cells"
    cells.mkdir(parents=True)
    spec = {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128, "precision": "fp32", "repeat": 0}
    ok = {"cell_id": "a", "status": "ok", "spec": spec, "metrics": {"samples_per_s": 10.0, "time_s": 1, "steps": 1}}
    (cells / "a.json").write_text(json.dumps(ok))
    (cells / "b.json").write_text('{"cell_id": "b", "stat')
    baseline = {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128, "precision": "fp32"}
    table = aggregate([cells / "a.json", cells / "b.json"], baseline, 0.05, tmp_path / "results/tables")
    assert table["samples_per_s"].tolist() == [10.0]
    assert not (cells / "b.json").exists() and (cells / "corrupt/b.json").is_file()
    assert f"cell record {cells / 'b.json'} is unreadable" in capsys.readouterr().err


def test_the_code_hash_changes_with_any_source_byte_and_not_with_the_folder_or_mtimes(tmp_path):
    """`provenance.tree_sha256` on copies of the real package: what names the code in records without a commit."""
    import shutil
    from pathlib import Path

    import loaderbench
    from loaderbench.core.provenance import code_sha256, tree_sha256

    src = Path(loaderbench.__file__).parent
    a = tmp_path / "a" / "loaderbench"
    shutil.copytree(src, a, ignore=shutil.ignore_patterns("__pycache__"))
    b = tmp_path / "b" / "loaderbench"
    shutil.copytree(a, b)  # a second copy elsewhere, new mtimes
    assert tree_sha256(a) == tree_sha256(b) == code_sha256()
    (b / "engine/process/window.py").write_text((b / "engine/process/window.py").read_text() + "\n# one more line\n")
    assert tree_sha256(b) != tree_sha256(a)
