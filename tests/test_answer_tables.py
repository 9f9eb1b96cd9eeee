"""Speed, GPU Efficiency and AU on small tables whose divisor is never the first row: which cell each divides by, and
their 95% intervals on known numbers (both half-widths joined); and when a ratio's interval says it differs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from loaderbench.core.uncertainty import T_95, Ratio
from loaderbench.report.aggregate import cells_table, seed_table_frame
from tests.test_aggregate import BASELINE, row


def _repeats(loader, tier, gpus, rates, **kw) -> list[dict]:
    """A cell's rows, one per repeat at each of `rates`."""
    return [row(loader, tier, gpus, v, repeat=i, **kw) for i, v in enumerate(rates)]


def _hw3(rates) -> float:
    """The relative 95% half-width of the mean of three repeats (Student's t, 2 degrees of freedom)."""
    mean = sum(rates) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in rates) / 2)
    return T_95[2] * sd / math.sqrt(3) / mean


def _joined(a_hw: float, b_hw: float) -> float:
    """The half-width of a ratio of two independent measurements: their half-widths added on the log scale."""
    return math.expm1(math.hypot(math.log1p(a_hw), math.log1p(b_hw)))


def _cells(rows: list[dict]) -> pd.DataFrame:
    return cells_table(pd.DataFrame(rows), BASELINE).set_index(["loader", "tier", "gpus", "batch_size", "precision"])


def test_speed_divides_by_the_baseline_cell_on_the_baselines_tier():
    """torchvision on ssd comes first at 4x its hdd cell, the baseline: every Speed is against the hdd cell, which reads
    1.00 (0.25 against the ssd cell)."""
    t = _cells(
        [
            row("torchvision", "ssd", 1, 400.0),
            row("opencv", "ssd", 1, 800.0),
            row("torchvision", "hdd", 1, 100.0),
            row("opencv", "hdd", 1, 200.0),
        ]
    )
    speed = t["speed"].to_dict()
    assert speed[("torchvision", "hdd", 1, 128, "fp32")] == pytest.approx(1.0)
    assert speed[("opencv", "hdd", 1, 128, "fp32")] == pytest.approx(2.0)
    assert speed[("torchvision", "ssd", 1, 128, "fp32")] == pytest.approx(4.0)
    assert speed[("opencv", "ssd", 1, 128, "fp32")] == pytest.approx(8.0)


def test_au_divides_by_the_fastest_synthetic_row_of_its_configuration_with_its_interval():
    """Two ceilings of one configuration, the slower (800, repeats 100 apart) first: AU is against the faster (1000,
    tight), 0.60 not 0.75, and its interval joins the cell's half-width with that ceiling's."""
    slow, fast, tv = [700.0, 800.0, 900.0], [990.0, 1000.0, 1010.0], [590.0, 600.0, 610.0]
    t = _cells(
        [
            *_repeats("synthetic", "hdd", 1, slow),
            *_repeats("synthetic", "ram", 1, fast),
            *_repeats("torchvision", "hdd", 1, tv),
        ]
    )
    cell = t.loc[("torchvision", "hdd", 1, 128, "fp32")]
    hw = _joined(_hw3(tv), _hw3(fast))
    assert cell["au"] == pytest.approx(0.6)
    assert cell["au_low"] == pytest.approx(0.6 / (1 + hw)) and cell["au_high"] == pytest.approx(0.6 * (1 + hw))
    assert (round(cell["au_low"], 2), round(cell["au_high"], 2)) == (0.57, 0.63)
    assert t.loc[("synthetic", "hdd", 1, 128, "fp32"), "au"] == pytest.approx(0.8)


def test_speeds_interval_joins_the_cells_half_width_and_the_baselines():
    """opencv at 200 (+-1.2%) over the baseline at 100 (+-12.4%): Speed 2.00 [1.78, 2.25], not the cell's own
    [1.98, 2.02]; the baseline itself is exactly 1."""
    base, cell = [95.0, 100.0, 105.0], [199.0, 200.0, 201.0]
    t = _cells([*_repeats("opencv", "hdd", 1, cell), *_repeats("torchvision", "hdd", 1, base)])
    op = t.loc[("opencv", "hdd", 1, 128, "fp32")]
    hw = _joined(_hw3(cell), _hw3(base))
    assert hw == pytest.approx(0.1249, abs=1e-4)
    assert op["speed"] == pytest.approx(2.0)
    assert op["speed_low"] == pytest.approx(2.0 / (1 + hw)) and op["speed_high"] == pytest.approx(2.0 * (1 + hw))
    seed = seed_table_frame(t.reset_index()).set_index("Dataloader")["Speed"]
    assert seed["opencv"] == "2.00 [1.78, 2.25]" and seed["torchvision"] == "1.00 (reference)"


def test_gpu_efficiencys_interval_joins_the_cells_half_width_and_its_one_gpu_cells():
    """2 GPUs at 200 (+-1.2%) over twice the 1-GPU cell's 100 (+-12.4%): GPU Efficiency 1.00 [0.89, 1.12]."""
    one, two = [95.0, 100.0, 105.0], [199.0, 200.0, 201.0]
    t = _cells([*_repeats("torchvision", "ssd", 2, two), *_repeats("torchvision", "ssd", 1, one)])
    g2 = t.loc[("torchvision", "ssd", 2, 128, "fp32")]
    hw = _joined(_hw3(two), _hw3(one))
    assert g2["gpu_efficiency"] == pytest.approx(1.0)
    assert g2["gpu_efficiency_low"] == pytest.approx(1 / (1 + hw)) and g2["gpu_efficiency_high"] == pytest.approx(
        1 + hw
    )
    seed = seed_table_frame(t.reset_index()).set_index("GPU")["GPU Efficiency"]
    assert seed[2] == "1.00 [0.89, 1.12]" and seed[1] == "- (1 GPU)"


@pytest.mark.parametrize(
    "q, target, differs",
    [
        (Ratio(0.7, 0.1, 1), 1.0, True),  # [0.64, 0.77]: wholly below
        (Ratio(1.3, 0.1, 1), 1.0, True),  # [1.18, 1.43]: wholly above
        (Ratio(0.95, 0.1, 1), 1.0, False),  # [0.86, 1.05]: holds 1
        (Ratio(1.1, 0.1, 1), 1.0, False),  # [1.00, 1.21]: 1 on the low end
        (Ratio(0.8, 0.25, 1), 1.0, False),  # [0.64, 1.00]: 1 on the high end
        (Ratio(0.8, 0.249, 1), 1.0, True),  # [0.64, 0.9992]: just below
        (Ratio(2.0, 0.1, 1), 1.6, True),  # [1.82, 2.2] against another target
    ],
)
def test_a_ratio_differs_only_where_its_interval_leaves_out_the_target(q, target, differs):
    assert q.differs_from(target) is differs
