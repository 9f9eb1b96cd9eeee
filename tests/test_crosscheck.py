"""`loaderbench crosscheck`: real cells against bare loops of the same loader, and a harness slowed on purpose."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import REPO, staged_disk

from loaderbench.core.uncertainty import ratio
from loaderbench.experiments.crosscheck import crosscheck, render

# Injected into the measuring processes through PYTHONPATH: every step of a cell's timed window sleeps `DELAY_S`
# more. The bare loop never calls timed_window, so only the cell's path is slowed.
SLOW_CELL = """
import time
import loaderbench.engine.process.window as w
_timed = w.timed_window
def _slowed(step, *a, **k):
    def slow(*b):
        time.sleep({delay})
        return step(*b)
    return _timed(slow, *a, **k)
w.timed_window = _slowed
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(
        tmp_path_factory, small_dataset, "crosscheck", window={"max_seconds": 3, "min_seconds": 1.5}, warmup_steps=2
    )


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_every_loader_kind_is_crosschecked_against_its_bare_loop(staged, tmp_path):
    tmp, cfg = staged
    rows = crosscheck(
        cfg, ["torchvision", "dali-cpu", "synthetic"], "disk", 4, ["fp32"], 1, tmp / "disk.json", tmp_path
    )
    assert [r["status"] for r in rows] == ["ok"] * 3, render(rows)
    saved = json.loads((tmp_path / "crosscheck.json").read_text())
    assert [r["loader"] for r in saved["rows"]] == ["torchvision", "dali-cpu", "synthetic"]
    for r in rows:
        q = r["cell_over_bare"]
        assert r["cell_samples_per_s"][0] > 0 and r["bare_samples_per_s"][0] > 0
        assert q["value"] == pytest.approx(r["cell_samples_per_s"][0] / r["bare_samples_per_s"][0])
        assert q["low"] < q["value"] < q["high"]  # a rate is not asserted: on a shared host it moves by tens of %
    assert (tmp_path / "cells" / "torchvision_disk_g1_b4_fp32_dp_r0.json").is_file()  # a real cell record
    bare = json.loads((tmp_path / "bare" / "torchvision_disk_g1_b4_fp32_dp_r0.json").read_text())
    assert bare["samples_per_s"] == rows[0]["bare_samples_per_s"][0] and bare["workers"] == 1


@pytest.mark.slow
def test_a_harness_slowed_on_purpose_reads_below_one_with_an_interval_that_excludes_it(staged, tmp_path, monkeypatch):
    tmp, cfg = staged
    site = tmp_path / "site"
    site.mkdir()
    # 0.3 s a step, several times a step's own time on a CPU: a slowdown no noise between processes can hide
    (site / "sitecustomize.py").write_text(SLOW_CELL.format(delay=0.3))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    rows = crosscheck(cfg, ["synthetic"], "disk", 4, ["fp32"], 2, tmp / "disk.json", tmp_path / "out")
    q = rows[0]["cell_over_bare"]
    assert rows[0]["status"] == "ok" and q["rounds"] == 2
    assert q["high"] < 1.0, render(rows)  # the 300 ms a step shows, and the interval says so
    assert "harness costs the loader" in render(rows)


def test_the_ratios_interval_adds_window_and_round_noise():
    one = ratio([(90.0, 100.0, 0.02, 0.02)])
    assert one.value == pytest.approx(0.9) and one.halfwidth == pytest.approx(0.0287, abs=2e-4)
    assert one.differs_from(1.0) and not one.differs_from(0.9)
    spread = ratio([(90.0, 100.0, 0.0, 0.0), (110.0, 100.0, 0.0, 0.0)])  # two rounds 20% apart: no difference
    assert not spread.differs_from(1.0) and spread.rounds == 2
    tight = ratio([(50.0, 100.0, 0.01, 0.01), (51.0, 100.0, 0.01, 0.01)])
    assert tight.differs_from(1.0) and tight.high < 0.55
    with pytest.raises(ValueError):
        ratio([])


def test_the_cli_names_an_unknown_loader(staged, tmp_path):
    import subprocess

    tmp, _ = staged
    cfg = tmp / "c.yaml"
    cfg.write_text("dataset: {name: ds}\nstorage: {disk: " + str(tmp / "tier") + "}\n")
    out = subprocess.run(
        [sys.executable, "-m", "loaderbench", "crosscheck", "--config", str(cfg), "--loaders", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "--loaders: unknown loader 'nope'" in out.stderr and "module:factory" in out.stderr


@pytest.mark.e2e
def test_the_bundle_shows_the_crosscheck_of_its_results_folder(tmp_path):
    """A pipeline run, then `loaderbench crosscheck` on its staged tier, then the pipeline again: the bundle is built
    anew and shows cell/bare for the loader."""
    import subprocess

    from conftest import snakemake, tiny_config, write_config

    cfg = tiny_config(
        tmp_path, loaders=["torchvision"], precisions=["fp32"], storage={"disk-a": str(tmp_path / "tier-a")}
    )
    cfg_path = write_config(tmp_path, cfg)
    snakemake(tmp_path, "--configfile", str(cfg_path))
    index = tmp_path / "results/bundle/index.html"
    assert "Does the harness slow the loader?" not in index.read_text()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "loaderbench",
            "crosscheck",
            "--config",
            str(cfg_path),
            "--loaders",
            "torchvision",
            "--batch-size",
            "4",
            "--rounds",
            "1",
            "--results",
            "results",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torchvision  fp32 cell" in out.stdout and "cell/bare" in out.stdout
    snakemake(tmp_path, "--configfile", str(cfg_path))
    page = index.read_text()
    assert "Does the harness slow the loader?" in page and "<td>torchvision</td><td>fp32</td>" in page
    assert (tmp_path / "results/bundle/tables/crosscheck.json").is_file()


@pytest.mark.e2e
def test_a_crosschecks_cells_join_the_pipeline_as_measured(tmp_path):
    """`loaderbench adopt --from` a crosscheck's folder: the pipeline then counts its cells of the grid as measured
    (record and timeline copied in) and plans only the others."""
    import subprocess

    from conftest import snakemake, tiny_config, write_config
    from test_pipeline_plan import job_counts

    cfg = tiny_config(tmp_path, precisions=["fp32"], storage={"disk-a": str(tmp_path / "tier-a")})
    cfg_path = write_config(tmp_path, cfg)
    snakemake(tmp_path, "--configfile", str(cfg_path), "--until", "stage")
    lb = [sys.executable, "-m", "loaderbench"]
    out = subprocess.run(
        [
            *lb,
            "crosscheck",
            "--config",
            str(cfg_path),
            "--loaders",
            "torchvision",
            "--batch-size",
            "4",
            "--rounds",
            "1",
            "--results",
            "results",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cid = "torchvision_disk-a_g1_b4_fp32_dp_r0"
    assert (tmp_path / f"results/crosscheck/telemetry/{cid}.csv").is_file()
    out = subprocess.run(
        [
            *lb,
            "adopt",
            "--config",
            str(cfg_path),
            "--from",
            "results/crosscheck",
            "--snakefile",
            str(REPO / "Snakefile"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "1 records of this grid copied from results/crosscheck, 0 measured here already" in out.stdout
    assert "1 records in results/cells: 1 adopted" in out.stdout
    assert (tmp_path / f"results/telemetry/{cid}.csv").is_file()
    plan = snakemake(tmp_path, "--configfile", str(cfg_path), "-n").stdout
    assert job_counts(plan)["cell"] == 1 and f"output: results/cells/{cid}.json" not in plan
    assert "output: results/cells/opencv_disk-a_g1_b4_fp32_dp_r0.json" in plan
