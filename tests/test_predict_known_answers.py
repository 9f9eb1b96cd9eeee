"""Known answers for the prediction of a cell's rate from its parts (the `whatif` package): each test is built so that
one plausible wrong formula gives another number, and the published scores are recomputed from their records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import REPO
from test_sharing import record, row

from loaderbench.core.records import read_record
from loaderbench.core.uncertainty import repeats_halfwidth
from loaderbench.whatif.intervals import WIDEN_PERCENTILE
from loaderbench.whatif.predictions import matrix
from loaderbench.whatif.ratios import ceiling_ratios, kept_ceiling_ratios
from loaderbench.whatif.render import render_matrix
from loaderbench.whatif.terms import CONSUMING, LOADER, MODEL

MODELS = REPO / "docs/results/2026-12-04-h200/models"
STUDY = REPO / "docs/results/2026-12-01-h200x2/study"
WHATIF = REPO / "docs/results/2026-12-07-h100/whatif"
CHECKS = {  # each check's training cell: its loader and model at 1 GPU, its measured rate
    ("torchvision", "mobilenet_v2"): 2600.0,
    ("torchvision", "resnet50"): 2500.0,
    ("opencv", "mobilenet_v2"): 4700.0,
    ("opencv", "resnet50"): 4300.0,
    ("dali-sc", "resnet50"): 5600.0,
}


def _run(scaled: tuple | None = None, factor: float = 1.0) -> list[dict]:
    """Three loaders alone and two models' ceilings (with host times), torchvision's beside part and rank parts, and
    the CHECKS - the one named `scaled` measured `factor` times its rate - plus a 2-GPU check."""
    recs = [
        record("synthetic", 9300.0, host_ms=15.0, main_cpu_ms=14.0, cores=1.0),
        record("synthetic", 6150.0, model="resnet50", host_ms=18.0, main_cpu_ms=17.0, cores=1.0),
        record("synthetic", 14000.0, gpus=2, parallel="ddp", host_ms=16.0, cores=2.0),
        record("torchvision", 3300.0, model="none", util=0.0, cores=15.0),
        record("torchvision", 2700.0, beside=True, host_ms=20.0, main_cpu_ms=85.0, cores=15.0),
        record("torchvision", 4000.0, model="none", util=0.0, cores=16.0, ranks=2, parallel="ddp"),
        record("opencv", 4400.0, model="none", util=0.0, cores=14.0),
        record("dali-sc", 19750.0, model="none", util=35.0, cores=3.0),
        record("torchvision", 3600.0, gpus=2, parallel="ddp", cores=18.0),
    ]
    for (loader, model), rate in CHECKS.items():
        recs.append(record(loader, rate * (factor if (loader, model) == scaled else 1.0), model=model, cores=16.0))
    return recs


# ---- what a check's measured rate may move: its own error, other rows' widening; nothing else


def test_scaling_a_checks_measured_rate_moves_no_prediction_nor_its_own_interval_nor_its_class():
    """The leak by perturbation. Leave-one-out widening moves OTHER rows' intervals by design (their widening is this
    check's |error| among others); every prediction, the parts' interval of every row, every class and the scaled
    row's own interval must stay where they were."""
    base = matrix(_run(), gpus=(1, 2), ratios=kept_ceiling_ratios())
    fixed = ["configuration", "predicted", "parts_lo", "parts_hi", "class", "naive", "status"]
    assert (base["status"] == "measured").sum() == len(CHECKS) + 1
    moved_others = False
    for scaled in CHECKS:
        for factor in (0.6, 1.7):
            moved = matrix(_run(scaled, factor), gpus=(1, 2), ratios=kept_ceiling_ratios())
            assert moved[fixed].equals(base[fixed]), (scaled, factor)
            mine = (moved["loader"] == scaled[0]) & (moved["model"] == scaled[1]) & (moved["gpus"] == 1)
            assert mine.sum() == 1
            for col in ("predicted_lo", "predicted_hi", "widening"):
                assert moved.loc[mine, col].item() == base.loc[mine, col].item(), (scaled, col)
            assert moved.loc[mine, "error"].item() + 1 == pytest.approx(factor * (base.loc[mine, "error"].item() + 1))
            moved_others |= not np.allclose(moved.loc[~mine, "widening"], base.loc[~mine, "widening"])
    assert moved_others  # the widening of the others is the checks' own errors: it can move


def test_a_checks_widening_is_the_percentile_of_the_other_checks_errors():
    df = matrix(_run(), gpus=(1,))
    checks = df[df["status"] == "measured"]
    for i, r in checks.iterrows():
        others = checks.drop(index=i)["error"].abs()
        assert r["widening"] == pytest.approx(np.percentile(others, WIDEN_PERCENTILE))
        assert r["predicted_lo"] == pytest.approx(r["parts_lo"] / (1 + r["widening"]))
    never = df[df["status"] == "predicted"].iloc[0]  # an unmeasured pair: widened by every check
    assert never["widening"] == pytest.approx(np.percentile(checks["error"].abs(), WIDEN_PERCENTILE))
    # at 2 GPUs: by the 2-GPU checks alone; the one 2-GPU check, with no other at its count, by the 1-GPU ones
    df = matrix(_run(), gpus=(1, 2), ratios=kept_ceiling_ratios())
    one, two = (df[(df["status"] == "measured") & (df["gpus"] == g)] for g in (1, 2))
    assert len(two) == 1 and two["widening"].item() == pytest.approx(np.percentile(one["error"].abs(), 80))
    unmeasured = df[(df["status"] != "measured") & (df["gpus"] == 2)]
    assert list(unmeasured["widening"]) == pytest.approx([abs(two["error"].item())] * len(unmeasured))


def test_the_class_is_the_term_that_binds_in_the_parts_whatever_was_measured():
    """Guards against a class read from the measured rate: a check measured nearer another term keeps its class."""
    for measured in (3900.0, 2000.0, 9000.0):  # near the GPU side, far below both, above both
        recs = [
            record("synthetic", 4000.0),
            record("torchvision", 3000.0, model="none", util=0.0),
            record("torchvision", measured),
        ]
        assert row(matrix(recs, gpus=(1,)), "torchvision")["class"] == LOADER


# ---- the host's cores: the pool is what the placement leaves, the step takes only its cores beyond the launch ones


def _one_gpu_on_eight_cores(loader_cores: float, ceiling_cores: float):
    """One 1-GPU cell on an 8-core host whose placement reserves one launch core: its row."""
    recs = [
        record("synthetic", 4000.0, host=8, cores=ceiling_cores),
        record("torchvision", 1000.0, model="none", util=0.0, cores=loader_cores, host=8),
        record("torchvision", 950.0, cores=loader_cores + ceiling_cores, host=8),
    ]
    r = row(matrix(recs, gpus=(1,)), "torchvision")
    assert r["host_cores"] == 8
    return r


def test_the_launch_core_is_not_the_loaders_at_one_gpu():
    """Guards against a pool of all the host's cores: the loader shares 8 - 1 cores with the step's extra core."""
    r = _one_gpu_on_eight_cores(loader_cores=7.0, ceiling_cores=2.0)
    # pool 7 cores; the loader needs 7/1000 core-s a sample, the step 1/4000 beyond its launch core
    assert r["loader_side"] == pytest.approx(7 / (7 / 1000 + 1 / 4000))  # 965.5; all 8 cores would leave it 1000
    assert r["predicted"] == pytest.approx(965.5, abs=0.1) and r["class"] == LOADER and r["naive"] == 1000.0


def test_a_step_on_its_launch_core_alone_takes_nothing_from_the_loader():
    """Guards against counting the step's cores without subtracting its launch core."""
    r = _one_gpu_on_eight_cores(loader_cores=7.0, ceiling_cores=1.0)
    assert r["loader_side"] == 1000.0


# ---- parts of the same batch size


def test_each_batch_size_takes_its_own_ceiling_and_beside_part():
    """Guards against matching the ceiling (or the beside part, or its host time) without the batch size: one run
    holding batch 128 and 256, each side binding at one of them only."""
    recs = []
    for batch, ceiling, host_ms, cpu in ((128, 3000.0, 10.0, 30.0), (256, 4000.0, 16.0, 50.0)):
        recs += [
            record("synthetic", ceiling, batch=batch, host_ms=host_ms, main_cpu_ms=host_ms / 2, util=100.0),
            record("torchvision", 3500.0, model="none", util=0.0, cores=4.0, batch=batch),
            record("torchvision", 3400.0, cores=4.0, batch=batch),
            record("torchvision", 3000.0, beside=True, host_ms=host_ms, main_cpu_ms=cpu, batch=batch),
        ]
    df = matrix(recs, gpus=(1,)).set_index("batch_size")
    assert df.loc[128, "ceiling"] == 3000.0 and df.loc[256, "ceiling"] == 4000.0
    assert df.loc[128, "predicted"] == 3000.0 and df.loc[128, "class"] == MODEL
    assert df.loc[256, "predicted"] == 3500.0 and df.loc[256, "class"] == LOADER
    # c(M) + (s + (m - h0) - h0), each of its own batch: 5 + (10 + 20 - 10) and 8 + (16 + 34 - 16) ms
    assert df.loc[128, "consuming_side"] == pytest.approx(128 / 0.025)
    assert df.loc[256, "consuming_side"] == pytest.approx(256 / 0.042)


# ---- the consuming process: the model's host side plus the loader's consuming work


def test_the_consuming_term_adds_the_loaders_consuming_work_to_the_models_host_side():
    """The beside part (torchvision with MobileNetV2, h0 = 15 ms) spent 20 ms in the step call and 95 ms of main-thread
    CPU a step: T_beside = 20 + (95 - 15) = 100 ms, of which 100 - 15 = 85 ms is consuming. ResNet-50's ceiling kept
    its GPU busy (its step call of 30 ms waited for it) and its main thread works 115 ms a step: t_cons = 115 + 85 =
    200 ms, 1280 samples/s at batch 256. Wrong readings give 2560 (T_beside alone), 853 (T_beside x h/h0), 2226 (h(M)
    + 85: the GPU's wait taken for the host's), 1113 (c(M) + T_beside) or 1347 (the CPU time alone)."""
    recs = [
        record("synthetic", 9000.0, host_ms=15.0, main_cpu_ms=12.0, util=60.0),
        record("synthetic", 6000.0, model="resnet50", host_ms=30.0, main_cpu_ms=115.0, util=99.0),
        record("torchvision", 3300.0, model="none", util=0.0, cores=15.0),
        record("torchvision", 2700.0, beside=True, host_ms=20.0, main_cpu_ms=95.0),
        record("torchvision", 1300.0, model="resnet50", cores=15.0),
    ]
    df = matrix(recs, gpus=(1, 2), ratios=kept_ceiling_ratios())
    mine = row(df, "torchvision", "resnet50")
    assert mine["consuming_side"] == pytest.approx(1280.0) and mine["predicted"] == pytest.approx(1280.0)
    assert mine["class"] == CONSUMING and mine["naive"] == 3300.0
    assert mine["error"] == pytest.approx(1300 / 1280 - 1)
    # MobileNetV2's ceiling left its GPU idle 40% of the time: the host set its pace, its host side is its step call,
    # and the beside part's own model gets the beside part's time back (15 + 85 ms), not its CPU time's (12 + 85)
    assert row(df, "torchvision", "mobilenet_v2")["consuming_side"] == pytest.approx(256 / 0.100)
    # at 2 GPUs: a main thread per rank under ddp, one for both GPUs' batches under dp
    assert row(df, "torchvision", "resnet50", 2, "ddp")["consuming_side"] == pytest.approx(2 * 1280.0)
    assert row(df, "torchvision", "resnet50", 2, "dp")["consuming_side"] == pytest.approx(1280.0)


@pytest.mark.parametrize(
    ("util", "expected_ms"),
    [(100.0, 65.3 + 30.9), (96.0, 65.3 + 30.9), (94.0, 110.4 + 30.9), (None, 65.3 + 30.9)],
)
def test_the_host_side_is_the_step_call_only_where_the_gpu_idled(util, expected_ms):
    """A ceiling whose GPU was busy (share >= 0.95) waited for it in its step call: its host side is its main thread's
    CPU time, and torchvision's 30.9 ms of consuming hides under the GPU's 110 ms (the model binds); one that left the
    GPU idle was paced by its host, whose step call the consuming work lengthens. No GPU share known: the CPU time."""
    recs = [
        record("synthetic", 8000.0, host_ms=31.9, main_cpu_ms=21.5, util=99.7),
        record("synthetic", 2316.0, model="resnet152", host_ms=110.4, main_cpu_ms=65.3, util=util),
        record("torchvision", 3000.0, model="none", util=0.0, cores=15.0),
        record("torchvision", 2500.0, beside=True, host_ms=62.8, main_cpu_ms=30.0),
    ]
    mine = row(matrix(recs, gpus=(1,)), "torchvision", "resnet152")
    assert mine["consuming_ms"] == pytest.approx(expected_ms)
    if expected_ms < 110.4:
        assert mine["class"] == MODEL and mine["predicted"] == pytest.approx(2316.0)
    else:
        assert mine["class"] == CONSUMING and mine["predicted"] == pytest.approx(256 / expected_ms * 1000)
    # the interval's low end takes the host side at its longest, the step call (110.4 + 30.9 ms): a busy GPU hid
    # how long the host took, and the consuming work beside the step may turn it host-paced (every part here has
    # one half-width: the binding term's high end gives it)
    hw = mine["parts_hi"] / min(2316.0, 256 / expected_ms * 1000) - 1
    assert mine["parts_lo"] == pytest.approx(256 / (110.4 + 30.9) * 1000 / (1 + hw))


def _convnext_at_b64() -> list[dict]:
    """The batch 64 H100 run's parts for torchvision + ConvNeXt-T (MobileNetV2's and ConvNeXt-T's ceilings, the loader
    alone and beside MobileNetV2) and its check."""
    return [
        record("synthetic", 2372.0, host_ms=26.8, main_cpu_ms=15.5, util=37.0, batch=64, host=16),
        record(
            "synthetic", 2221.0, model="convnext_tiny", host_ms=28.8, main_cpu_ms=14.6, util=100.0, batch=64, host=16
        ),
        record("torchvision", 2666.0, model="none", util=0.0, cores=15.0, batch=64, host=16),
        record("torchvision", 1712.0, beside=True, host_ms=36.5, main_cpu_ms=18.3, batch=64, host=16),
        record("torchvision", 1511.0, model="convnext_tiny", cores=15.0, batch=64, host=16),
    ]


def test_a_step_paced_by_its_gpu_alone_can_be_paced_by_its_host_beside_the_loader():
    """Batch 64 on an H100: ConvNeXt-T's ceiling kept its GPU busy (28.8 ms a step, 14.6 ms of main-thread CPU) and
    torchvision's consuming work beside MobileNetV2 (h0 = 26.8 ms) was 9.7 ms: 14.6 + 9.7 < 28.8, so the prediction
    is the ceiling; beside torchvision the step ran 42.4 ms (1,511 samples/s, GPU busy 70%). Its interval reaches
    down to the step call plus the consuming work (38.5 ms) and holds it; with the CPU time as the host side at the
    low end too, the parts' low end would be the ceiling's (2,199) and the measured rate far below it."""
    recs = [
        *_convnext_at_b64(),
        record("torchvision", 1627.0, model="resnet50", cores=15.0, batch=64, host=16),
        record("synthetic", 2739.0, model="resnet50", host_ms=23.2, main_cpu_ms=12.7, util=63.0, batch=64, host=16),
    ]
    mine = row(matrix(recs, gpus=(1,)), "torchvision", "convnext_tiny")
    assert mine["class"] == MODEL and mine["predicted"] == pytest.approx(2221.0)
    hw = mine["parts_hi"] / 2221.0 - 1  # every part has one half-width: the binding ceiling's high end gives it
    assert mine["parts_lo"] == pytest.approx(64 / (28.8 + 9.7) * 1000 / (1 + hw))
    assert mine["predicted_lo"] <= 1511.0 <= mine["predicted_hi"]


@pytest.mark.parametrize(
    ("launch", "expected_ms", "read_from"),
    [
        ((8, 25.0, 30.0), 25.0 + 9.7, "its launch time (its ceiling at batch 8"),  # the host's launch time
        ((8, 31.0, 30.0), 28.8 + 9.7, "its launch time (its ceiling at batch 8"),  # never past the step call
        ((8, 25.0, 99.0), 14.6 + 9.7, "its main thread's CPU time"),  # busy GPU at batch 8: no launch time
        ((128, 25.0, 30.0), 14.6 + 9.7, "its main thread's CPU time"),  # a larger batch is no launch part
        (None, 14.6 + 9.7, "its main thread's CPU time"),
    ],
)
def test_a_launch_part_gives_the_host_side_of_a_gpu_paced_ceiling(launch, expected_ms, read_from):
    """ConvNeXt-T's ceiling at batch 64 kept its GPU busy (28.8 ms a step, 14.6 ms of main-thread CPU); its ceiling
    at a batch small enough for the host to set the pace (GPU busy 30%) gives the host's launch time a step, its
    host side at batch 64: 25.0 + 9.7 ms of torchvision's consuming work = 34.7 ms, 1,844 samples/s, under the
    ceiling's 2,221 (the consuming process binds). Without such a part the CPU time (14.6 ms) stands."""
    recs = _convnext_at_b64()
    if launch:
        batch, host_ms, util = launch
        recs.append(record("synthetic", 500.0, model="convnext_tiny", host_ms=host_ms, util=util, batch=batch, host=16))
    mine = row(matrix(recs, gpus=(1,)), "torchvision", "convnext_tiny")
    assert mine["consuming_ms"] == pytest.approx(expected_ms)
    assert mine["predicted"] == pytest.approx(min(2221.0, 64 / expected_ms * 1000))
    assert mine["class"] == (CONSUMING if 64 / expected_ms * 1000 < 2221.0 else MODEL)
    assert read_from in mine["consuming_basis"]


# ---- intervals


def test_the_interval_holds_the_measured_where_the_parts_interval_does():
    """The prediction's interval is every part at its low end to every part at its high end, then widened: a check
    measured inside its parts' interval is inside; one measured far below is outside (its one other check's error is
    small), and coverage counts them."""
    recs = [
        record("synthetic", 9000.0),
        record("torchvision", 1000.0, model="none", util=0.0, repeat=0),
        record("torchvision", 1100.0, model="none", util=0.0, repeat=1),  # its repeats: a wide interval
        record("torchvision", 1120.0),
        record("opencv", 2000.0, model="none", util=0.0),
        record("opencv", 1000.0),
    ]
    df = matrix(recs, gpus=(1,))
    tv, cv = row(df, "torchvision"), row(df, "opencv")
    hw = repeats_halfwidth([1000.0, 1100.0])  # the loader alone binds: its two repeats' interval is the parts'
    assert (tv["parts_lo"], tv["parts_hi"]) == pytest.approx((1050 / (1 + hw), 1050 * (1 + hw)))
    assert tv["parts_lo"] < tv["measured"] < tv["parts_hi"]
    assert tv["predicted_lo"] <= tv["measured"] <= tv["predicted_hi"]
    assert cv["widening"] == pytest.approx(abs(1120 / 1050 - 1))
    assert not cv["predicted_lo"] <= cv["measured"] <= cv["predicted_hi"]
    cov = df.attrs["coverage"]
    assert (cov["checks"], cov["inside"], cov["coverage"]) == (2, 1, 0.5)


# ---- n GPUs: the step side from a measured ratio, never n x C


def test_the_n_gpu_ceiling_ratio_is_read_from_the_records_not_n_times_c():
    """The kept 2-GPU/1-GPU ratio at b256 fp32 dp is the study's one pair of records; a run without n-GPU ceilings
    takes the step side at 2 GPUs as C x that ratio (1.96, not 2), at 4 as C x ratio x 4/2."""
    two = read_record(STUDY / "bundle/cells/synthetic_ram_g2_b256_fp32_dp_r0.json")["metrics"]["samples_per_s"]
    one = read_record(STUDY / "bundle/cells/synthetic_ram_g1_b256_fp32_dp_r0.json")["metrics"]["samples_per_s"]
    kept = kept_ceiling_ratios()[("dp", 256, "fp32")]
    assert kept.value.value == pytest.approx(two / one) and len(kept.pairs) == 1
    assert set(kept_ceiling_ratios()) >= {("dp",), ("ddp",), ("dp", 256, "amp"), ("ddp", 256, "amp")}
    recs = [record("synthetic", 5000.0), record("dali-cpu", 90000.0, model="none", util=0.0, cores=1.0)]
    for r in recs:
        r["spec"]["precision"] = "fp32"
    df = matrix(recs, gpus=(2, 4))
    assert row(df, "dali-cpu", gpus=2)["gpu_side"] == pytest.approx(5000.0 * two / one)
    assert row(df, "dali-cpu", gpus=4)["gpu_side"] == pytest.approx(5000.0 * two / one * 2)
    assert "MobileNetV2's 2-GPU/1-GPU dp ceiling ratio 1.96" in row(df, "dali-cpu", gpus=2)["step_basis"]


def test_the_ratio_pairs_each_2_gpu_ceiling_with_its_runs_1_gpu_one():
    recs = [
        record("synthetic", 8000.0, run="a"),
        record("synthetic", 12000.0, gpus=2, run="a"),
        record("synthetic", 9000.0, run="b"),
        record("synthetic", 18000.0, gpus=2, run="b"),
        record("synthetic", 5000.0, model="resnet50", run="b"),  # another model's ceiling: not MobileNetV2's ratio
        record("synthetic", 5000.0, model="resnet50", gpus=2, run="b"),
    ]
    ratios = ceiling_ratios(recs)
    assert ratios[("dp",)].value.value == pytest.approx(math.sqrt(1.5 * 2.0)) and len(ratios[("dp",)].pairs) == 2
    assert ("ddp",) not in ratios


# ---- the published numbers


def _records(folder) -> list[dict]:
    return [read_record(p) for p in sorted(folder.rglob("*.json")) if p.parent.name == "cells"]


PUBLISHED = (  # each scores block docs/method.md prints: its records, the GPU counts of its command, its first class
    (WHATIF / "bundle", (1, 2, 4), "loader", None),  # one H100 with beside and rank parts: `predict`'s default
    (WHATIF.parent / "whatif-classes/bundle", (1, 2, 4), "loader", None),  # another H100: the consuming checks
    (REPO / "docs/results/2026-12-07-h200/whatif-b64/bundle", (1,), "loader", None),  # batch 64: host-paced
    (WHATIF.parent / "whatif-b128/bundle", (1,), "loader", None),  # batch 128: scored after the rule
    (WHATIF.parent / "whatif-b64/bundle", (1,), "model", None),  # batch 64 on another H100: out of sample
    (MODELS / "bundle", (1,), "loader", None),
    (STUDY, (1, 2), "loader", None),
    (STUDY, (1, 2), "loader", WHATIF / "bundle/cells"),  # the 2 x H200 records from the H100's loader parts
)


def _scores_block(folder, gpus, parts_from=None) -> list[str]:
    """The lines `loaderbench predict` prints for these records from its scores' head to its coverage line."""
    carried = _records(parts_from) if parts_from else None
    printed = render_matrix(matrix(_records(folder), gpus=gpus, parts_from=carried)).splitlines()
    start = printed.index(next(x for x in printed if x.startswith("scores of the ")))
    return printed[start : printed.index(next(x for x in printed if x.startswith("coverage: "))) + 1]


@pytest.mark.parametrize(
    ("folder", "gpus", "first", "parts_from"),
    PUBLISHED,
    ids=[
        "h100-whatif",
        "h100-whatif-classes",
        "h200-b64",
        "h100-b128",
        "h100-b64",
        "h200-models",
        "h200x2-study",
        "h200x2-from-h100-parts",
    ],
)
def test_the_published_scores_are_what_their_records_give(folder, gpus, first, parts_from):
    """docs/method.md prints the per-class scores of the kept records (the H100 what-if run, the models run at 1 GPU,
    the 2 x H200 study at 2, and again from the H100's loader parts): recomputed here from the records in the tree, as
    one block, line for line and in order."""
    method = (REPO / "docs/method.md").read_text()
    block = _scores_block(folder, gpus, parts_from)
    assert block[2].split()[0] == first
    assert "\n".join(block) in method, (folder, "\n".join(block))
