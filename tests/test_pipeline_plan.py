"""What Snakemake plans on the finished run (the session's `finished_run`): nothing for the same config, exactly a
deleted cell, only the new cells of a grid edit, one cell forced by its record; and no job for a bad config."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from tests.conftest import REPO, cell_record, snakemake, tiny_config, write_config

pytestmark = pytest.mark.e2e
FORCED = "torchvision_disk-a_g1_b4_fp32_dp_r0"


def job_counts(dry_run_stdout: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run, as {rule: count}."""
    lines = dry_run_stdout.split("Job stats:", 1)[1].splitlines()
    counts = {}
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


def test_a_finished_run_has_nothing_to_be_done(finished_run):
    work, cfg_path = finished_run
    assert "nothing to be done" in snakemake(work, "--configfile", str(cfg_path), "-n").stdout.lower()


def test_deleting_one_cell_recomputes_exactly_that_cell(finished_run):
    work, cfg_path = finished_run
    cells = sorted((work / "results/cells").glob("*.json"))
    victim = work / "results/cells/opencv_disk-b_g1_b4_amp_dp_r0.json"
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in cells if p != victim}
    victim.unlink()
    plan = snakemake(work, "--configfile", str(cfg_path), "-n").stdout
    assert job_counts(plan) == {
        "cell": 1,
        "aggregate": 1,
        "diagnose": 1,
        "whatif": 1,
        "figures": 1,
        "bundle": 1,
        "all": 1,
    }
    assert "results/cells/opencv_disk-b_g1_b4_amp_dp_r0.json" in plan
    snakemake(work, "--configfile", str(cfg_path))
    assert cell_record(work, "opencv_disk-b_g1_b4_amp_dp_r0")["status"] == "ok"
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in before} == before


# Grid edits: adding a loader or a batch size plans only the new cells; removing one, or changing how cells are run
# (the time limit, the watchdog), plans no cell at all.


@pytest.fixture(scope="module")
def finished_config(finished_run) -> dict:
    _, cfg_path = finished_run
    return yaml.safe_load(cfg_path.read_text())


@pytest.fixture(scope="module")
def planned_cells(finished_run, finished_config):
    """A dry run of the finished run's config with an edit: the number of cell jobs it plans, and the cells the edit
    adds to the grid."""
    work, _ = finished_run
    cfg = finished_config
    old = set(cell_ids(validate_config(cfg, base_dir=work)))

    def planned_cells(**edit) -> tuple[int, set[str]]:
        path = work / "edited.yaml"
        path.write_text(yaml.safe_dump({**cfg, **edit}))
        plan = snakemake(work, "--configfile", str(path), "-n").stdout
        new = set(cell_ids(validate_config({**cfg, **edit}, base_dir=work)))
        return job_counts(plan).get("cell", 0) if "Job stats:" in plan else 0, new - old

    return planned_cells


def test_adding_a_loader_plans_only_its_new_cells(planned_cells, finished_config):
    n, new = planned_cells(loaders=[*finished_config["loaders"], "dali-cpu"])
    assert n == len(new) == 4  # dali-cpu on 2 tiers x 2 precisions


def test_adding_a_batch_size_plans_only_its_new_cells(planned_cells):
    n, new = planned_cells(batch_sizes=[4, 8])
    assert n == len(new) == 10


def test_removing_a_loader_plans_no_cell(planned_cells):
    assert planned_cells(loaders=["torchvision", "synthetic"])[0] == 0


def test_removing_a_precision_plans_no_cell(planned_cells):
    assert planned_cells(precisions=["fp32"])[0] == 0


def test_changing_the_time_limit_and_the_watchdog_plans_no_cell(planned_cells):
    assert planned_cells(cell_timeout_s=77, watchdog={"stall_s": 9})[0] == 0


def test_records_carried_to_a_fresh_project_are_not_measured_again(finished_run, tmp_path):
    """Resuming a study on another machine: a fresh project (no dataset, no staging, no Snakemake metadata) with the
    finished run's records and timelines in results/. Staging makes the dataset again, so every record is older than
    its tier's manifest; `loaderbench adopt` marks those that measured the same spec on the same data as current, and
    Snakemake then measures only the missing cell - and a cell whose record names other data."""
    work, cfg_path = finished_run
    for kept in ("cells", "telemetry", "traces"):  # a cell's outputs: its record, its timeline and its trace
        shutil.copytree(work / "results" / kept, tmp_path / "results" / kept)
    (tmp_path / "results/cells/opencv_disk-a_g1_b4_fp32_dp_r0.json").unlink()
    other = tmp_path / "results/cells/torchvision_disk-a_g1_b4_amp_dp_r0.json"
    rec = json.loads(other.read_text())
    other.write_text(json.dumps({**rec, "manifest_sha256": "0" * 64}))
    assert job_counts(snakemake(tmp_path, "--configfile", str(cfg_path), "-n").stdout)["cell"] == 10  # all, before
    snakemake(tmp_path, "--configfile", str(cfg_path), "--until", "stage")
    adopt = [
        sys.executable,
        "-m",
        "loaderbench",
        "adopt",
        "--config",
        str(cfg_path),
        "--snakefile",
        str(REPO / "Snakefile"),
    ]
    out = subprocess.run(adopt, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "9 records in results/cells: 8 adopted" in out.stdout and "1 other data or not staged" in out.stdout
    assert (
        "0 had some, 24 none" in out.stdout
    )  # a fresh project: Snakemake stored nothing for the 8 records, 8 timelines, 8 traces
    plan = snakemake(tmp_path, "--configfile", str(cfg_path), "-n").stdout
    assert job_counts(plan)["cell"] == 2
    assert (
        "cells/opencv_disk-a_g1_b4_fp32_dp_r0.json" in plan and "cells/torchvision_disk-a_g1_b4_amp_dp_r0.json" in plan
    )


def test_adopting_a_record_clears_the_params_another_configuration_left(finished_run, tmp_path):
    """A host that measured a cell under another configuration keeps that run's params for its output; a params
    change is a rerun trigger, so a carried record of the current spec would be measured again (a run lost 11
    cells to it). `loaderbench adopt` clears the adopted records' stored metadata."""
    work, cfg_path = finished_run
    record = work / "results/cells" / f"{FORCED}.json"
    timeline = work / "results/telemetry" / f"{FORCED}.csv"
    kept = record.read_bytes()
    times = {p: (p.stat().st_atime_ns, p.stat().st_mtime_ns) for p in (record, timeline)}
    other = yaml.safe_load(cfg_path.read_text())
    other["warmup_steps"] = other["warmup_steps"] + 1  # another spec for every cell
    other_path = tmp_path / "other.yaml"
    other_path.write_text(yaml.safe_dump(other))
    snakemake(work, f"results/cells/{FORCED}.json", "--configfile", str(other_path))  # measured under the other
    record.write_bytes(kept)  # the record of the current spec comes back, as from another host
    plan = snakemake(work, "--configfile", str(cfg_path), "-n").stdout
    assert job_counts(plan)["cell"] == 1 and "Params have changed" in plan  # what adopt must prevent
    adopt = [
        sys.executable,
        "-m",
        "loaderbench",
        "adopt",
        "--config",
        str(cfg_path),
        "--snakefile",
        str(REPO / "Snakefile"),
    ]
    out = subprocess.run(adopt, cwd=work, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "stored metadata of the adopted outputs cleared:" in out.stdout, out.stdout
    plan = snakemake(work, "--configfile", str(cfg_path), "-n").stdout
    assert job_counts(plan).get("cell", 0) == 0, plan
    assert record.read_bytes() == kept
    for p, (atime, mtime) in times.items():  # the run's tables stay newer than its records, for the other tests
        os.utime(p, ns=(atime, mtime))


def test_forcing_one_cells_record_plans_exactly_one_cell_job(finished_run):
    work, cfg_path = finished_run
    plan = snakemake(work, "--configfile", str(cfg_path), "-n", "--forcerun", f"results/cells/{FORCED}.json").stdout
    assert job_counts(plan)["cell"] == 1


def test_run_cell_remeasures_a_single_configuration_by_its_cell_id(finished_run):
    """Last of the tests on the finished run in this file: the new record leaves the table behind it, out of date."""
    work, cfg_path = finished_run
    old = cell_record(work, FORCED)["finished_at"]
    out = subprocess.run(
        [sys.executable, "-m", "loaderbench", "run-cell", "--config", str(cfg_path), "--cell", FORCED],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert f"cell {FORCED}: ok" in out.stderr
    assert cell_record(work, FORCED)["finished_at"] > old


def test_bad_config_fails_before_any_job_and_names_the_key(tmp_path):
    cfg_path = write_config(tmp_path, tiny_config(tmp_path, loaders=["torchvision", "dali"], batch_sizes=[0]))
    proc = snakemake(tmp_path, "--configfile", str(cfg_path), "-n", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "config key 'batch_sizes[0]': 0 is less than the minimum of 1" in out
    assert not (tmp_path / "results").exists()


def test_missing_dataset_path_fails_at_plan_time_naming_the_key(tmp_path):
    cfg = tiny_config(tmp_path, dataset={"source": "path", "path": str(tmp_path / "no-imagenet")})
    cfg_path = write_config(tmp_path, cfg)
    proc = snakemake(tmp_path, "--configfile", str(cfg_path), "-n", check=False)  # a dry run already says so
    assert proc.returncode != 0
    assert f"config key 'dataset.path': {tmp_path / 'no-imagenet'} does not exist" in proc.stdout + proc.stderr
