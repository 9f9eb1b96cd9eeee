"""The verdict's choices on small tables whose right answer is never the first row: which cell is the reference, which
is the fix, which tuned setting may be offered, and how the trust line summarises the group."""

from __future__ import annotations

import pytest
from test_diagnose import cell, table

from loaderbench.core.uncertainty import Ratio
from loaderbench.report.diagnose import diagnose
from loaderbench.report.verdict import render_text, tuned_fix, verdicts

BASELINE = {"loader": "torchvision", "gpus": 1, "batch_size": 128, "precision": "fp32", "parallel": "dp"}


def _verdicts(rows: list[dict], baseline: dict = BASELINE) -> dict[str, dict]:
    """The verdicts of made-up cells, by tier."""
    return {v["tier"]: v for v in verdicts(diagnose(table(rows)), baseline)}


def test_the_fix_is_the_fastest_usable_cell_not_the_first_faster_one():
    """opencv is faster than torchvision and comes first; dali-cpu is faster still: the fix is dali-cpu at 250/110."""
    v = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
            cell("opencv", "ram", 200.0, kind="ram", wait_ms=100.0),  # 1.25x
            cell("dali-cpu", "ram", 110.0, kind="ram", wait_ms=5.0),  # 2.27x
        ]
    )["ram"]
    assert v["fix"]["what"] == "dali-cpu b128 fp32"
    assert v["fix"]["text"].startswith("dali-cpu b128 fp32: 2.27x [")
    assert v["fix"]["samples_per_s"] == pytest.approx(128000 / 110)
    assert "fix: dali-cpu b128 fp32: 2.27x [" in render_text([v])[2]


def test_a_fix_for_a_dp_reference_is_a_dp_cell_however_fast_a_ddp_one():
    """torchvision under ddp is 2.08x the dp reference and comes first: a dp reference's fix is the dp dali-cpu cell."""
    v = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
            cell("torchvision", "ram", 120.0, kind="ram", parallel="ddp"),  # 2.08x, another mode
            cell("dali-cpu", "ram", 200.0, kind="ram", wait_ms=100.0),  # 1.25x
        ]
    )["ram"]
    assert v["reference"]["cell"] == "torchvision/ram/g1/b128/fp32/dp"
    assert v["fix"]["cell"] == "dali-cpu/ram/g1/b128/fp32/dp"
    assert v["fix"]["text"].startswith("dali-cpu b128 fp32: 1.25x [")


def test_the_reference_is_at_the_baselines_parallel_mode_where_another_comes_first():
    """The baseline loader measured under ddp first, then dp: the reference is the dp cell (the baseline's mode) and
    its fix the fastest dp cell, not a ddp cell held against a ddp reference."""
    v = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            cell("torchvision", "ram", 120.0, kind="ram", parallel="ddp"),
            cell("dali-cpu", "ram", 100.0, kind="ram", parallel="ddp"),  # 1.20x the ddp cell
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
            cell("dali-cpu", "ram", 200.0, kind="ram", wait_ms=100.0),  # 1.25x the dp cell
        ]
    )["ram"]
    assert v["reference"]["cell"] == "torchvision/ram/g1/b128/fp32/dp"
    assert v["fix"]["cell"] == "dali-cpu/ram/g1/b128/fp32/dp"
    assert v["fix"]["text"].startswith("dali-cpu b128 fp32: 1.25x [")


@pytest.mark.parametrize(
    "first",
    [
        cell("torchvision", "ram", 75.0, kind="ram", batch=64),  # 853 samples/s at batch 64
        cell("torchvision", "ram", 150.0, kind="ram", precision="amp"),  # 853 samples/s at amp
    ],
    ids=["other-batch", "other-precision"],
)
def test_the_reference_is_the_baseline_loader_at_the_baselines_batch_and_precision(first):
    """The baseline loader at another batch or precision comes first, at 853 samples/s: the reference is its cell at
    b128 fp32 (512), and the fix dali-cpu at 1024 reads 2.00x (1.20x against the first cell)."""
    v = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            first,
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),  # 512 samples/s
            cell("dali-cpu", "ram", 125.0, kind="ram", wait_ms=25.0),  # 1024 samples/s
        ]
    )["ram"]
    assert v["reference"]["what"] == "torchvision b128 fp32" and v["reference"]["samples_per_s"] == 512.0
    assert v["fix"]["what"] == "dali-cpu b128 fp32" and v["fix"]["interval"]["value"] == pytest.approx(2.0)
    assert v["fix"]["text"].startswith("dali-cpu b128 fp32: 2.00x [")


def test_a_tier_without_the_baseline_loader_takes_its_slowest_cell_as_the_reference():
    """No torchvision on nvme: the reference is the slowest cell there (dali-sc, last), the fix the fastest."""
    vs = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
            cell("opencv", "nvme", 150.0, wait_ms=50.0),  # 853 samples/s
            cell("dali-cpu", "nvme", 125.0, wait_ms=25.0),  # 1024
            cell("dali-sc", "nvme", 300.0, wait_ms=200.0),  # 427: the slowest
        ]
    )
    v = vs["nvme"]
    assert v["reference"]["what"] == "dali-sc b128 fp32"
    assert v["fix"]["verdict"] == "measured" and v["fix"]["what"] == "dali-cpu b128 fp32"
    assert v["fix"]["text"].startswith("dali-cpu b128 fp32: 2.40x [")


@pytest.mark.parametrize(
    "gain, offered",
    [
        (Ratio(1.05, 0.07, 3), False),  # [0.98, 1.12]: holds 1
        (Ratio(1.10, 0.10, 3), False),  # [1.00, 1.21]: 1 on its low end
        (Ratio(1.10, 0.08, 3), True),  # [1.02, 1.19]: above 1
    ],
)
def test_a_tuned_setting_is_a_fix_only_where_its_gains_interval_lies_above_1(gain, offered):
    """A tuned fix whose gain's interval holds 1 is none, however far its value lies above 1."""
    fix = tuned_fix("torchvision", {"workers": 8}, gain.to_dict())
    assert (fix is not None) is offered
    if offered:
        assert fix["text"] == "torchvision with workers: 8: 1.10x [1.02, 1.19] the config's settings"
    assert (
        tuned_fix("torchvision", {}, gain.to_dict()) is None and tuned_fix("torchvision", {"workers": 8}, None) is None
    )


def test_the_trust_line_gives_the_median_interval_not_the_mean():
    """Half-widths of 2%, 3% and 25%: the median is 3% (their mean, 10%, is what one wide cell makes of it)."""
    v = _verdicts(
        [
            cell("synthetic", "ram", 100.0, kind="ram"),
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0, halfwidth=0.25),
            cell("opencv", "ram", 200.0, kind="ram", wait_ms=100.0, halfwidth=0.02),
            cell("dali-cpu", "ram", 125.0, kind="ram", wait_ms=25.0, halfwidth=0.03),
        ]
    )["ram"]
    assert v["trust"]["halfwidth_median"] == pytest.approx(0.03)
    assert "median interval +-3%" in render_text([v])[2]
