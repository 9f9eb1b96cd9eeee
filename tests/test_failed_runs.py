"""Runs that measure no training, or whose cells fail or are skipped (real `loaderbench run`s of a tiny CPU grid): each
ends with its bundle and a verdict that says what happened; a failed cell makes the run exit non-zero and is listed on
the last screen by its id with its whole reason, a skipped one is listed and fails nothing."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from loaderbench.cli.run import CELLS_FAILED
from loaderbench.report.figure_list import FIGURES, read_index
from tests.conftest import tiny_config, write_config
from tests.test_no_fuse import NO_FUSE, config_with_emulated_tier
from tests.test_quiet_run import run

pytestmark = pytest.mark.e2e

RAISING_FORWARD = """
import torch


class Net(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.fc = torch.nn.Linear(3, num_classes)

    def forward(self, x):
        raise RuntimeError("this model's forward always raises, so every cell that trains it fails at its first step")


def build(num_classes):
    return Net(num_classes)
"""


def one_tier(tmp_path: Path, **overrides) -> Path:
    """The tiny grid on one tier at fp32, `overrides` over it, written as the run's config."""
    cfg = tiny_config(tmp_path, precisions=["fp32"], **overrides)
    cfg["storage"] = {"disk-a": cfg["storage"]["disk-a"]}
    return write_config(tmp_path, cfg)


def last_screen(stdout: str) -> list[str]:
    """What the run says once the pipeline is done: the bundle, the verdict and the cells that did not finish ok."""
    out = stdout.splitlines()
    return out[next(i for i, line in enumerate(out) if line.startswith("pipeline done in ")) + 1 :]


def said(lines: list[str]) -> str:
    """Lines wrapped for the terminal joined back into the text they say."""
    return " ".join(line.strip() for line in lines)


def record(work: Path, cell: str) -> dict:
    return json.loads((work / "results/cells" / f"{cell}.json").read_text())


def bundle_figures(work: Path) -> tuple[str, dict]:
    """The bundle's index.html and its figures' index (those drawn, and why each other one was not)."""
    index = (work / "results/bundle/index.html").read_text()
    return index, read_index(work / "results/bundle/figures")


def test_a_run_of_the_loader_alone_ends_with_its_bundle_and_a_verdict_of_its_rates(tmp_path):
    proc = run(tmp_path, one_tier(tmp_path, models=["none"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    screen = last_screen(proc.stdout)
    assert screen[0].startswith("bundle: ") and Path(screen[0].split()[1]).is_file()
    assert (
        screen[1]
        == "verdict: the loader alone was measured (model none): no training to judge; its rates (95% intervals):"
    )
    for loader in ("torchvision", "opencv"):
        rate = record(tmp_path, f"{loader}_disk-a_g1_b4_fp32_dp_none_r0")["metrics"]["samples_per_s"]
        said_rate = [
            m[1] for x in screen[2:] if (m := re.match(rf"  {loader}, CPU, disk-a, b4 fp32: (\d+) samples/s", x))
        ]
        assert len(said_rate) == 1 and abs(int(said_rate[0]) - rate) <= 1  # the table's median, rounded
    assert len(screen) == 4 and "failed" not in proc.stdout
    index, figures = bundle_figures(tmp_path)
    assert "The loader alone was measured (model none): no training to judge" in index
    # the training figures are left out with the reason, the loader's own drawn; no file stands in for one not drawn
    for name in ("throughput", "speed_heatmap", "au_bars", "stall_bars"):
        assert "nothing trained: every cell ran the loader alone (model none)" in figures["not_drawn"][name]
    assert {"seed_table", "batch_effect", "scaling", "tier_probe"} <= set(figures["drawn"])
    assert set(figures["drawn"]) | set(figures["not_drawn"]) == set(FIGURES)
    shown = {p.stem for p in (tmp_path / "results/bundle/figures").glob("*.png")}
    assert shown == set(figures["drawn"]) and all(f"figures/{name}.png" in index for name in shown)


def test_a_run_whose_every_cell_fails_ends_with_a_bundle_a_verdict_that_says_so_and_lists_them(tmp_path):
    (tmp_path / "raising_forward.py").write_text(textwrap.dedent(RAISING_FORWARD))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env.pop("LOADERBENCH_WARM_SOCKET", None)
    config = one_tier(tmp_path, loaders=["torchvision", "synthetic"], models=["raising_forward:build"])
    proc = run(tmp_path, config, env=env)
    assert proc.returncode == CELLS_FAILED, proc.stdout + proc.stderr
    cells = [f"{loader}_disk-a_g1_b4_fp32_dp_raising-forward_r0" for loader in ("torchvision", "synthetic")]
    reason = record(tmp_path, cells[0])["reason"]
    assert "its first step: RuntimeError: this model's forward always raises" in reason
    assert [record(tmp_path, c)["status"] for c in cells] == ["failed", "failed"]
    screen = last_screen(proc.stdout)
    assert screen[0].startswith("bundle: ") and Path(screen[0].split()[1]).is_file()
    assert screen[1] == "verdict: no training cell finished ok: 2 failed (of 2)"
    assert screen[2] == f"  2 failed: {reason}"
    # then the failed cells by id, their reason whole: wrapped at spaces to the width, not cut
    at = next(i for i, line in enumerate(screen) if "cells failed" in line)
    assert screen[at].startswith(f"2 of 2 cells failed (so the run exits with status {CELLS_FAILED}; each cell's log: ")
    listing = screen[at + 1 :]
    assert said(listing) == f"{', '.join(cells)}: {' '.join(reason.split())}"
    width = max(60, int(os.environ.get("COLUMNS") or 100))  # the terminal's, or 100 through a pipe
    assert len(listing) > 2 and all(len(line) <= width for line in listing), listing
    assert not any(".tmp" in line or ".child" in line for line in proc.stdout.splitlines())
    # the bundle: the verdict says so, the table is there, and no figure stands in for one with nothing to draw
    index, figures = bundle_figures(tmp_path)
    assert "No training cell finished ok: 2 failed (of 2)." in index
    assert "<td>failed</td>" in (tmp_path / "results/bundle/tables/seed_table.html").read_text()
    for name in ("throughput", "speed_heatmap", "au_bars", "batch_effect", "scaling", "timelines"):
        assert "finished ok (2 failed; each cell's reason under Cells)" in figures["not_drawn"][name], name
        assert f"<li><b>{name.replace('_', ' ')}</b>: " in index
        assert not list((tmp_path / "results/bundle/figures").glob(f"{name}.*"))


def test_a_skipped_cell_is_listed_with_its_reason_and_does_not_fail_the_run(tmp_path):
    config = write_config(tmp_path, config_with_emulated_tier(tmp_path))
    proc = run(tmp_path, config, env=NO_FUSE)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skipped = "torchvision_hdd_g1_b4_fp32_dp_r0"
    reason = " ".join(record(tmp_path, skipped)["reason"].split())
    assert record(tmp_path, skipped)["status"] == "skipped" and "apt install fuse3" in reason
    screen = last_screen(proc.stdout)
    at = screen.index("1 of 2 cells skipped (a skipped cell does not fail the run):")
    assert said(screen[at + 1 :]) == f"{skipped}: {reason}"
    assert "failed" not in proc.stdout
