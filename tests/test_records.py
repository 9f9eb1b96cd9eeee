"""An unreadable cell record is named, moved to results/cells/corrupt/ by a run (not by a dry run or lint), and its
cell is measured again; a record of an older schema version is brought up to date where it is read; a record is
valid against the schema when it is made."""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest
import yaml

from loaderbench.cli import main as cli
from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.records import (
    SCHEMA_VERSION,
    STATUSES,
    UPGRADES,
    WARNINGS,
    InvalidRecord,
    is_record,
    make_record,
    read_record,
    spec_hash,
    upgrade,
    validate_record,
    warning_lines,
)
from loaderbench.report.aggregate import aggregate
from tests.conftest import REPO, ok_metrics, record_parts, snakemake, tiny_config, write_config

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


RESULTS = REPO / "docs/results"


def test_every_kept_record_reads_as_a_valid_record_of_the_current_schema():
    """Each record under docs/results, whatever schema version it was written at, is brought up to date where it is
    read and then holds to schemas/cell.schema.yaml."""
    paths = [p for p in sorted(RESULTS.rglob("*.json")) if is_record(json.loads(p.read_text()))]
    assert len(paths) > 300
    versions, kinds = set(), set()
    for path in paths:
        versions.add(json.loads(path.read_text()).get("schema_version"))
        record = read_record(path)
        validate_record(record)
        kinds.add(record["kind"])
        assert record["schema_version"] == SCHEMA_VERSION and record["spec"]["model"]
    assert kinds == {"cell", "watch"}  # the cells' records, and a watched script's (docs/results/*/watch)
    # the records made before the what-if study are old ones, each upgraded; the study's are written at this version
    assert 1 in versions and versions <= {1, SCHEMA_VERSION}


def test_a_record_of_version_1_is_upgraded_step_by_step_and_a_current_one_kept_as_it_is():
    old = {
        "cell_id": "torchvision_ram_g1_b256_amp_r0",
        "status": "ok",
        "spec": {"loader": "torchvision", "tier": "ram", "tier_path": "/dev/shm", "gpus": 1},
        "metrics": {
            "samples_per_s": 10.0,
            "warnings": [
                "unsteady: the second half of the window ran at 0.75x the first half's rate",
                "window of 65 steps is under 10x the prefetch depth (30 batches): lengthen it",
                {"code": "contended", "text": "other processes"},
            ],
        },
    }
    new = upgrade(old)
    assert new is not old and "model" not in old["spec"]  # a copy: what was read stays as it was
    assert new["schema_version"] == SCHEMA_VERSION and new["kind"] == "cell"
    assert (new["spec"]["model"], new["spec"]["parallel"], new["spec"]["tier_kind"]) == ("mobilenet_v2", "dp", "ram")
    assert new["metrics"]["parallel"]["mode"] == "dp" and new["metrics"]["parallel"]["per_rank"] == []
    assert [w["code"] for w in new["metrics"]["warnings"]] == ["unsteady", "short_window", "contended"]
    assert new["metrics"]["warnings"][0]["text"] == "the second half of the window ran at 0.75x the first half's rate"
    assert warning_lines(new["metrics"])[1].startswith("short window: window of 65 steps")
    assert upgrade(new) is new
    assert list(UPGRADES) == list(range(1, SCHEMA_VERSION))


def test_make_record_refuses_a_record_the_schema_does_not_hold_naming_the_field():
    cfg = validate_config({"loaders": ["torchvision"], "batch_sizes": [4]})
    cid = f"torchvision_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0"
    spec = cell_spec(cfg, cid)
    ok = make_record(spec, "ok", metrics=ok_metrics(), **record_parts())
    validate_record(ok)
    assert ok["spec"]["model"] == "mobilenet_v2" and ok["spec_hash"] == spec_hash(spec)
    with pytest.raises(InvalidRecord, match=rf"'{cid}' is not valid at metrics/steps"):
        make_record(spec, "ok", metrics=ok_metrics(steps=0), **record_parts())


def test_the_schema_names_the_statuses_and_warning_codes_the_code_owns():
    schema = yaml.safe_load((REPO / "src/loaderbench/schemas/cell.schema.yaml").read_text())
    assert tuple(schema["properties"]["status"]["enum"]) == STATUSES
    warnings = schema["properties"]["metrics"]["oneOf"][1]["properties"]["warnings"]["items"]
    assert warnings["properties"]["code"]["enum"] == list(WARNINGS)
    assert schema["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
