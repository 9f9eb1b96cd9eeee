"""Which records compare (one boot, code, stack and dataset), and what a rerun, a resume or a reboot leaves in the
tables: Speed and AU in every training row whose baseline and ceiling are in the study."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from loaderbench.core.comparable import divisible, group_of
from loaderbench.plan.regroup import stale_cells
from loaderbench.report.aggregate import cells_table, repeats_table
from loaderbench.report.recommend import compare
from tests.conftest import REPO, tiny_config, write_config

BASELINE = {"loader": "torchvision", "tier": "disk", "gpus": 1, "batch_size": 4, "precision": "fp32"}


def record(loader, sps, run="run-a", boot="boot-1", code="code-1", torch="2.14.1", repeat=0, model="mobilenet_v2"):
    """A cell record as the runner writes it, with the provenance that decides what it compares with."""
    trained = "" if model == "mobilenet_v2" else f"_{model}"
    return {
        "cell_id": f"{loader}_disk_g1_b4_fp32_dp{trained}_r{repeat}",
        "status": "ok",
        "finished_at": f"2026-12-07T00:00:0{repeat}",
        "spec": {
            "loader": loader,
            "tier": "disk",
            "gpus": 1,
            "batch_size": 4,
            "precision": "fp32",
            "parallel": "dp",
            "repeat": repeat,
            "model": model,
            "dataset": "generated-32x3-abc",
        },
        "metrics": {"time_s": 2.0, "steps": 10, "samples_per_s": sps, "window": {"ci95_rel_halfwidth": 0.02}},
        "provenance": {
            "run_id": run,
            "host": {"hostname": "vm", "boot_id": boot},
            "code_sha256": code,
            "versions": {"torch": torch},
            "container": {"image": None},
        },
    }


def table(records):
    return cells_table(repeats_table(records), BASELINE).set_index("loader")


def test_records_of_two_invocations_on_one_boot_and_code_compare():
    """A rerun or a resume is another invocation (run id) on the same machine and code: its cells divide by the
    first invocation's."""
    t = table([record("torchvision", 100.0, run="a"), record("synthetic", 400.0, run="a"), record("opencv", 200, "b")])
    assert t.loc["opencv", "speed"] == pytest.approx(2.0) and t.loc["opencv", "au"] == pytest.approx(0.5)
    assert t.loc["opencv", "not_divided"] == "" and t.loc["opencv", "run"] == "b"


@pytest.mark.parametrize(
    "change",
    [{"boot": "boot-2"}, {"code": "code-2"}, {"torch": "2.15.0"}],
    ids=["another boot", "another code", "another library version"],
)
def test_records_of_another_boot_code_or_stack_do_not_divide(change):
    t = table([record("torchvision", 100.0), record("synthetic", 400.0), record("opencv", 200.0, run="b", **change)])
    row = t.loc["opencv"]
    assert pd.isna(row["speed"]) and pd.isna(row["au"])
    assert (
        "Speed: the baseline cell is not comparable (measured on another boot, code, stack or dataset)"
        in (row["not_divided"])
    )
    assert "AU: the synthetic ceiling is not comparable" in row["not_divided"]


def test_another_dataset_or_container_image_is_another_group():
    a = record("opencv", 1.0)
    other_data = copy.deepcopy(a)
    other_data["spec"]["dataset"] = "generated-64x3-def"
    other_image = copy.deepcopy(a)
    other_image["provenance"]["container"]["image"] = "/images/loaderbench.sif"
    assert len({group_of(a), group_of(other_data), group_of(other_image)}) == 3
    assert group_of(a) == group_of({**a, "provenance": {**a["provenance"], "run_id": "another"}})


def test_a_record_that_names_no_boot_or_code_compares_within_its_run_only():
    old = record("opencv", 1.0, run="r-1")
    del old["provenance"]["code_sha256"]
    assert group_of(old) == "run r-1"
    assert divisible(group_of(old), group_of(record("opencv", 1.0, run="r-1"))) is not None


def test_the_verdict_compares_no_fix_with_a_reference_of_another_group():
    cell = {"tier": "disk", "gpus": 1, "batch_size": 4, "precision": "fp32", "parallel": "dp", "model": "mobilenet_v2"}
    cell["halfwidth"] = 0.02
    ref = pd.Series({**cell, "loader": "torchvision", "samples_per_s": 100.0, "compare_group": "g1"})
    fix = pd.Series({**cell, "loader": "opencv", "samples_per_s": 200.0, "compare_group": "g2"})
    q, why = compare(fix, ref)
    assert q is None and "measured on another boot, code, stack or dataset" in why
    q, why = compare(fix, fix.copy())
    assert why is None and q.value == pytest.approx(1.0)


def test_a_run_measures_again_the_cells_of_its_models_that_another_group_measured():
    """This run measured torchvision on a new boot: opencv and the ceiling of that model (measured before the reboot)
    are measured again; the loader alone and a model this run did not touch are left as they are."""
    records = [
        record("torchvision", 100.0, run="now", boot="boot-2"),
        record("synthetic", 400.0, run="before"),
        record("opencv", 200.0, run="before"),
        record("opencv", 50.0, run="before", model="resnet18"),
        record("opencv", 900.0, run="before", model="none"),
        record("dali-cpu", 250.0, run="before", boot="boot-2"),  # an earlier run of this boot: compares
    ]
    grid = [r["cell_id"] for r in records]
    again = stale_cells(records, "now", grid)
    assert sorted(again) == ["opencv_disk_g1_b4_fp32_dp_r0", "synthetic_disk_g1_b4_fp32_dp_r0"]
    assert "boot boot-1" in again["opencv_disk_g1_b4_fp32_dp_r0"]
    assert stale_cells(records, "a run that measured nothing", grid) == {}
    assert stale_cells(records, "now", grid[:1]) == {}  # cells outside the grid are not the run's to measure


# ------------------------------------------------------------------------------------------ real pipeline runs


def lb_run(work: Path, config: Path, *more: str, wait: bool = True):
    """`loaderbench run` without its retry of contended cells (tests/test_retry.py tests it): on a busy 2-core host a
    retry would measure a cell again for no part of what these tests check."""
    cmd = [sys.executable, "-m", "loaderbench", "run", "--config", str(config), "--directory", str(work)]
    cmd += ["--snakefile", str(REPO / "Snakefile"), "--cores", "2", "--no-retry", *more]
    if not wait:
        return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=900)


def training_rows(work: Path) -> pd.DataFrame:
    t = pd.read_csv(work / "results/tables/cells.csv")
    return t[t["Dataloader"] != "synthetic"]


def assert_every_row_divided(work: Path, out: str) -> None:
    rows = training_rows(work)
    assert len(rows) == 2, out
    assert rows["Speed"].notna().all() and rows["AU"].notna().all(), rows.to_string() + out


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A run of three loaders on one tier, the reference torchvision and the ceiling among them."""
    work = tmp_path_factory.mktemp("comparable")
    cfg = tiny_config(work, loaders=["torchvision", "opencv", "synthetic"], precisions=["fp32"])
    cfg["storage"] = {"disk": cfg["storage"]["disk-a"]}
    cfg["baseline"] = {**cfg["baseline"], "tier": "disk"}
    config = write_config(work, cfg)
    proc = lb_run(work, config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_every_row_divided(work, proc.stdout)
    return work, config


@pytest.mark.e2e
@pytest.mark.parametrize("cell", ["torchvision_disk_g1_b4_fp32_dp_r0", "synthetic_disk_g1_b4_fp32_dp_r0"])
def test_a_forcerun_of_the_reference_or_the_ceiling_keeps_speed_and_au_in_every_row(study, cell):
    """What the verdict advises for a contended reference ("rerun it"), as `make rerun` does it."""
    work, config = study
    proc = lb_run(work, config, "--", "--forcerun", f"results/cells/{cell}.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "another boot" not in proc.stdout and f"] {cell}  " in proc.stdout  # no cell of another group
    assert_every_row_divided(work, proc.stdout)


@pytest.mark.e2e
def test_a_run_resumed_after_ctrl_c_keeps_speed_and_au_in_every_row(study):
    work, config = study
    for p in (work / "results/cells").glob("opencv_*.json"):
        p.unlink()  # the resumed run has a cell to measure
    cells = work / "results/cells"
    first = lb_run(work, config, "--", "--forcerun", "results/cells/torchvision_disk_g1_b4_fp32_dp_r0.json", wait=False)
    deadline = time.time() + 300
    while not (cells / "torchvision_disk_g1_b4_fp32_dp_r0.json").is_file() and time.time() < deadline:
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)  # Ctrl-C after the first cell, before or during opencv's
    first.communicate(timeout=300)
    proc = lb_run(work, config)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_every_row_divided(work, proc.stdout)


@pytest.mark.e2e
def test_a_run_after_a_reboot_measures_again_what_its_comparisons_need(study):
    """A reboot cannot happen inside a test: the opencv record is made to name another boot, as a record measured
    before a reboot does. Rerunning the reference then measures opencv again, in the same invocation."""
    work, config = study
    path = work / "results/cells/opencv_disk_g1_b4_fp32_dp_r0.json"
    rec = json.loads(path.read_text())
    rec["provenance"]["host"]["boot_id"] = "a-boot-before-this-one"
    path.write_text(json.dumps(rec))
    reference = work / "results/cells/torchvision_disk_g1_b4_fp32_dp_r0.json"
    proc = lb_run(work, config, "--", "--forcerun", str(reference.relative_to(work)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "measuring 1 cell(s) again: they were measured on another boot" in proc.stdout
    assert "  opencv_disk_g1_b4_fp32_dp_r0: measured as " in proc.stdout and " boot a-boot-b" in proc.stdout
    assert json.loads(path.read_text())["provenance"]["host"]["boot_id"] != "a-boot-before-this-one"
    assert_every_row_divided(work, proc.stdout)
