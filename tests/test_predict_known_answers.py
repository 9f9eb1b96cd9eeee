"""Known answers for the prediction of a cell's rate from its parts (the `whatif` package): each test is built so that
one plausible wrong formula gives another number, and the published predictions are recomputed from their records."""

from __future__ import annotations

import math
import re
import statistics

import pytest
from conftest import REPO
from test_sharing import record

from loaderbench.core.records import read_record
from loaderbench.whatif.model import CORES, K_GRID, LOADER, fit_k, softmin
from loaderbench.whatif.ngpu import scale
from loaderbench.whatif.onegpu import fit_error, predict, score

MODELS = REPO / "docs/results/2026-12-04-h200/models"


def _check_model_made_with_another_k(fit_k_true: float, check_k_true: float, check_scale: float = 1.0) -> list[dict]:
    """MobileNetV2's three cells (to fit on) measured at softmin_{fit_k_true} of their parts, ResNet-50's five (to
    check) at softmin_{check_k_true} times `check_scale`; every loader is close to each ceiling, where k matters
    most. The check cells outnumber the fit cells, so a fit that saw them would follow them."""
    recs = []
    for model, ceiling, k, factor, alones in (
        ("mobilenet_v2", 4000.0, fit_k_true, 1.0, (3000.0, 4000.0, 5000.0)),
        ("resnet50", 2000.0, check_k_true, check_scale, (1500.0, 1800.0, 2000.0, 2200.0, 2600.0)),
    ):
        recs.append(record("synthetic", ceiling, model=model))
        for alone in alones:
            loader = f"plug{int(alone)}"
            if not any(r["spec"]["loader"] == loader for r in recs):
                recs.append(record(loader, alone, model="none", util=0.0, cores=4.0))
            recs.append(record(loader, factor * softmin(alone, ceiling, k), model=model, cores=4.0))
    return recs


# ---- the fit sees the fit model's cells only


def test_a_check_model_made_with_another_k_does_not_move_the_fit():
    """Guards against fitting k on every cell, check cells included: the check model's own k would win the fit."""
    df = predict(_check_model_made_with_another_k(4.0, 1.0), fit_model="mobilenet_v2")
    assert df.attrs["fit_model"] == "mobilenet_v2"
    assert df.attrs["k"] == pytest.approx(4.0, rel=0.03)
    check = df[df["role"] == "check"]
    assert list(check["predicted"]) == pytest.approx(
        [softmin(r.loader_alone, r.ceiling, df.attrs["k"]) for r in check.itertuples()]
    )
    assert score(df) > 0.05  # the check cells were made with k = 1: the check says the fit does not carry over


def test_scaling_the_check_cells_measured_rates_moves_no_prediction():
    """The leak by perturbation: a fit that saw the check cells would follow them."""
    base = predict(_check_model_made_with_another_k(4.0, 4.0), fit_model="mobilenet_v2")
    moved = predict(_check_model_made_with_another_k(4.0, 4.0, check_scale=0.8), fit_model="mobilenet_v2")
    assert moved.attrs["k"] == base.attrs["k"]
    assert list(moved["predicted"]) == list(base["predicted"])
    assert list(moved.loc[moved["role"] == "check", "error"] + 1) == pytest.approx(
        list(0.8 * (base.loc[base["role"] == "check", "error"] + 1))
    )


# ---- the host's cores: the pool is what the placement leaves, the step takes only its cores beyond the launch ones


def _one_gpu_on_eight_cores(loader_cores: float, ceiling_cores: float) -> dict:
    """One 1-GPU cell on an 8-core host whose placement reserves one launch core: the row of its prediction."""
    recs = [
        record("synthetic", 4000.0, host=8, cores=ceiling_cores),
        record("torchvision", 1000.0, model="none", util=0.0, cores=loader_cores, host=8),
        record("torchvision", 950.0, cores=loader_cores + ceiling_cores, host=8),
    ]
    df = predict(recs)
    assert len(df) == 1 and df.iloc[0]["host_cores"] == 8
    return df.iloc[0]


def test_the_launch_core_is_not_the_loaders_at_one_gpu():
    """Guards against a pool of all the host's cores: the loader shares 8 - 1 cores with the step's extra core."""
    row = _one_gpu_on_eight_cores(loader_cores=7.0, ceiling_cores=2.0)
    # pool 7 cores; the loader needs 7/1000 core-s a sample, the step 1/4000 beyond its launch core
    assert row["loader_eff"] == pytest.approx(7 / (7 / 1000 + 1 / 4000))  # 965.5; all 8 cores would leave it 1000
    assert row["cores_taken"] == pytest.approx(1 - 7 / (7 + 1000 / 4000))
    assert row["limited_by"] == LOADER  # cut by 3.4%, under the 10% that names the cores


def test_a_pool_cut_of_more_than_a_tenth_names_the_cores():
    row = _one_gpu_on_eight_cores(loader_cores=7.0, ceiling_cores=5.0)
    assert row["loader_eff"] == pytest.approx(7 / (7 / 1000 + 4 / 4000))  # 875
    assert row["limited_by"] == CORES


def test_a_step_on_its_launch_core_alone_takes_nothing_from_the_loader():
    """Guards against counting the step's cores without subtracting its launch core: a ceiling on one core busy
    (its launch core) leaves the loader its whole pool, even a loader that fills it."""
    row = _one_gpu_on_eight_cores(loader_cores=7.0, ceiling_cores=1.0)
    assert row["loader_eff"] == 1000.0
    assert row["cores_taken"] == 0.0


# ---- the fit: the median, and the smallest k on a flat objective


def test_the_fit_follows_the_median_not_the_mean():
    """Guards against minimising the mean |error|: two cells far above both parts would pull k up."""
    exact = [(softmin(lo, 1000.0, 6.0), lo, 1000.0) for lo in (700.0, 1000.0, 1400.0)]
    outliers = [(2 * softmin(lo, 1000.0, 6.0), lo, 1000.0) for lo in (900.0, 1100.0)]
    assert fit_k(exact + outliers) == pytest.approx(6.0, rel=0.03)
    mean_k = min(K_GRID, key=lambda k: statistics.mean(abs(m / softmin(lo, c, k) - 1) for m, lo, c in exact + outliers))
    assert mean_k > 20.0  # what the mean would take: the two known answers differ


def test_on_a_flat_objective_the_fit_takes_the_smallest_k():
    """Guards against the opposite tie-break: loaders far below the ceiling fit every k above a few equally well,
    and the fit takes the first k of K_GRID at the minimum, not inf."""
    pairs = [(lo, lo, 1e6) for lo in (100.0, 200.0, 300.0)]  # measured = the loader: any sharp k explains it

    def objective(k):
        return statistics.median(abs(m / softmin(lo, c, k) - 1) for m, lo, c in pairs)

    best = min(objective(k) for k in K_GRID)
    assert objective(math.inf) == best  # inf is at the minimum: a tie with every sharp k
    fitted = fit_k(pairs)
    assert fitted < 16.0 and objective(fitted) <= best + 1e-12


# ---- parts of the same batch size


def test_each_batch_size_takes_its_own_ceiling():
    """Guards against matching the ceiling without the batch size: one run holding batch 128 and 256."""
    recs = []
    for batch, ceiling in ((128, 3000.0), (256, 4000.0)):
        recs += [
            record("synthetic", ceiling, batch=batch),
            record("torchvision", 2500.0, model="none", util=0.0, cores=4.0, batch=batch),
            record("torchvision", softmin(2500.0, ceiling, 4.0), cores=4.0, batch=batch),
        ]
    df = predict(recs).set_index("batch_size")
    assert df.loc[128, "ceiling"] == 3000.0 and df.loc[256, "ceiling"] == 4000.0
    assert df.loc[128, "predicted"] == pytest.approx(softmin(2500.0, 3000.0, df.attrs["k"]))
    assert list(df["error"].abs()) == pytest.approx([0.0, 0.0], abs=0.01)


# ---- the published numbers


def _records(folder) -> list[dict]:
    return [read_record(p) for p in sorted(folder.rglob("*.json")) if p.parent.name == "cells"]


def test_the_published_predictions_are_what_their_records_give():
    """docs/method.md and the models run's README state the fit, its check and the 2-GPU misses: recomputed here from
    the records in the tree, at the rounding they are written to."""
    df = predict(_records(MODELS / "bundle"))
    k, n_fit, n_check = df.attrs["k"], int((df["role"] == "fit").sum()), int((df["role"] == "check").sum())
    check, fit, every = score(df), fit_error(df), float(df["error"].abs().median())
    assert (df.attrs["fit_model"], f"{k:.3g}", n_fit, n_check) == ("mobilenet_v2", "33.4", 4, 16)
    assert (f"{100 * check:.1f}", f"{100 * fit:.1f}", f"{100 * every:.1f}", len(df)) == ("1.2", "9.2", "3.3", 20)
    readme = " ".join((MODELS / "README.md").read_text().split())
    method = " ".join((REPO / "docs/method.md").read_text().split())
    assert f"k = {k:.3g}, was fitted on MobileNetV2's {n_fit} cells and checked on the {n_check} cells" in readme
    assert f"Check cells: median |measured / predicted - 1| = {100 * check:.1f}%; fit cells {100 * fit:.1f}%" in readme
    assert f"all {len(df)} cells {100 * every:.1f}%" in readme
    assert f"k fitted on MobileNetV2's {n_fit} cells is {k:.3g}" in method
    assert f"The {n_check} cells of the other four models are within {100 * check:.1f}% (median |error|)" in method

    two_gpu = {}
    for run in ("2026-11-30-h200x2/engine", "2026-12-01-h200x2/engine-3", "2026-12-01-h200x2/study"):
        more = scale(_records(REPO / "docs/results" / run), gpus=(2,))
        measured = more[more["measured"].notna()]
        two_gpu[run] = (f"{100 * measured['error'].abs().median():.1f}%", len(measured))
    assert two_gpu == {
        "2026-11-30-h200x2/engine": ("15.4%", 4),
        "2026-12-01-h200x2/engine-3": ("25.4%", 4),
        "2026-12-01-h200x2/study": ("18.7%", 28),
    }
    for run, (pct, n) in two_gpu.items():
        assert re.search(rf"{re.escape(pct)} over {n}(?: cells)? \(`{re.escape(run)}`\)", readme), (run, pct, n)
