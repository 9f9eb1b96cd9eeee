"""Each bottleneck label's threshold, on made-up cells just either side of it; the compute-only step from the fastest
of two ceilings; and when more GPUs pay off (80% of ideal: 0.8 x GPUs their one-GPU rate)."""

from __future__ import annotations

import pandas as pd
import pytest
from test_diagnose import cell, row

from loaderbench.report.diagnose import diagnose
from loaderbench.report.ratios import accelerator_utilisation
from loaderbench.report.recommend import recommendations

BASELINE = {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128, "precision": "fp32", "parallel": "dp"}


def _diagnosed(rows: list[dict]) -> pd.DataFrame:
    """The diagnosis of made-up cells, each with its AU against the fastest synthetic cell of its configuration."""
    t = pd.DataFrame(rows)
    t["au"] = accelerator_utilisation(t)
    return diagnose(t)


def _label(rows: list[dict], loader: str, tier: str) -> tuple[str, str]:
    r = row(_diagnosed(rows), loader, tier)
    return r["bottleneck"], r["evidence"]


@pytest.mark.parametrize("wait_ms, bottleneck", [(19.8, "transfer-bound"), (20.2, "CPU-prep-bound")])
def test_batches_were_ready_under_a_tenth_of_the_step(wait_ms, bottleneck):
    """A 200 ms step, 100 ms over compute, from RAM: waiting 9.9% of it the batches were ready (the step itself is
    slow: the transfer); waiting 10.1% the loader did not keep up."""
    rows = [
        cell("opencv", "ram", 200.0, kind="ram", wait_ms=wait_ms),
        cell("synthetic", "ram", 100.0, kind="ram"),
    ]
    label, evidence = _label(rows, "opencv", "ram")
    assert label == bottleneck
    assert ("batches were ready" in evidence) is (bottleneck == "transfer-bound")


@pytest.mark.parametrize("au_pct, bottleneck", [(91, "GPU-bound"), (89, "transfer-bound")])
def test_gpu_bound_from_an_au_of_0_9(au_pct, bottleneck):
    rows = [
        cell("dali-cpu", "ram", 100.0 * 100 / au_pct, kind="ram", wait_ms=2.0),
        cell("synthetic", "ram", 100.0, kind="ram"),
    ]
    assert _label(rows, "dali-cpu", "ram")[0] == bottleneck


@pytest.mark.parametrize("step_ms, bottleneck", [(116.0, "CPU-prep-bound"), (118.0, "I/O-bound")])
def test_a_fetch_stall_over_a_tenth_of_the_step_is_the_tier(step_ms, bottleneck):
    """From RAM 105 ms; on the local disk 11 ms more of a 116 ms step (9.5%) is no I/O bound, 13 ms of 118 (11%) is."""
    rows = [
        cell("torchvision", "local", step_ms, wait_ms=30.0),
        cell("torchvision", "ram", 105.0, kind="ram", wait_ms=5.0),
        cell("synthetic", "ram", 100.0, kind="ram"),
    ]
    assert _label(rows, "torchvision", "local")[0] == bottleneck


def _on_hdd(files_s: float, image_mb_s: float) -> dict:
    """torchvision waiting 550 ms of a 650 ms step on an HDD (197 samples/s), no RAM cell, the tier probe's rates."""
    r = cell("torchvision", "hdd", 650.0, wait_ms=550.0)
    return {**r, "tier_files_s": files_s, "tier_sequential_mb_s": 100.0, "image_mb_s": image_mb_s}


@pytest.mark.parametrize("image_mb_s, bottleneck", [(49.0, "seek-bound"), (51.0, "I/O-bound")])
def test_seek_bound_under_half_the_tiers_sequential_rate(image_mb_s, bottleneck):
    """At the HDD's random-file rate (197 of 300 files/s), taking 49% of the 100 MB/s it streams is seek-bound; 51%
    is I/O-bound."""
    label, evidence = _label([_on_hdd(300.0, image_mb_s), cell("synthetic", "hdd", 100.0)], "torchvision", "hdd")
    assert label == bottleneck
    assert ("the images come in at 49.0 MB/s, 49% of the 100 MB/s the tier streams" in evidence) is (
        bottleneck == "seek-bound"
    )


@pytest.mark.parametrize("share, bottleneck", [(0.51, "I/O-bound"), (0.49, "CPU-prep-bound")])
def test_a_waiting_cell_reads_as_fast_as_its_tier_from_half_its_probed_rate(share, bottleneck):
    """No RAM cell to take a fetch stall against: a waiting cell that takes 51% of the files a second the tier probe
    read is limited by the tier; at 49% it is not."""
    rate = 128000 / 650.0
    label, evidence = _label([_on_hdd(rate / share, 100.0), cell("synthetic", "hdd", 100.0)], "torchvision", "hdd")
    assert label == bottleneck
    assert (f"{100 * share:.0f}% of the {rate / share:.0f} files/s it reads at random (tier probe)" in evidence) is (
        bottleneck == "I/O-bound"
    )


def test_the_compute_only_step_is_the_fastest_synthetic_cell_of_the_configuration():
    """Two ceilings of one configuration, the slower (120 ms, hdd) first: compute is 100 ms, the prep stall 150."""
    d = _diagnosed(
        [
            cell("synthetic", "hdd", 120.0),
            cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
            cell("synthetic", "ram", 100.0, kind="ram"),
        ]
    )
    tv = row(d, "torchvision", "ram")
    assert tv["compute_only_ms"] == pytest.approx(100.0) and tv["prep_stall_ms"] == pytest.approx(150.0)
    assert "step 250.0 ms vs compute-only 100.0 ms (AU 0.40)" in tv["evidence"]


@pytest.mark.parametrize(
    "speedup, verdict",
    [
        (1.0, "does not pay off: fix the CPU-prep-bound limit first"),
        (1.5, "does not pay off: fix the CPU-prep-bound limit first"),
        (1.6, "cannot tell whether it reaches 80% of ideal"),
        (1.7, "pays off"),
    ],
)
def test_n_gpus_pay_off_from_80_percent_of_n_times_one_gpu(speedup, verdict):
    """2 GPUs against one, each known to +-2% (the ratio to +-2.8%): they pay off where the interval lies above 1.6x,
    not above 0.8x."""
    rows = [
        cell("torchvision", "ram", 2 * 250.0 / speedup, kind="ram", gpus=2, wait_ms=150.0),
        cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
        cell("synthetic", "ram", 100.0, kind="ram"),
        cell("synthetic", "ram", 100.0, kind="ram", gpus=2),
    ]
    recs = recommendations(_diagnosed(rows), BASELINE)
    (rec,) = [r for r in recs if r["topic"] == "GPUs" and r["cells"][0].startswith("torchvision/")]
    assert rec["text"].startswith(f"torchvision on ram (dp): 2 GPUs give {speedup:.2f}x [")
    assert rec["text"].endswith(f"one GPU (ideal 2x), {verdict}.")
