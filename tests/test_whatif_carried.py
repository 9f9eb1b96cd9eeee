"""Loader parts of one host carried to another by the cores rule: a part that kept its pool of cores busy scales with
the pools, one that left cores idle keeps its rate, a beside part keeps its main thread's times (with its own host's
ceilings for the host-time ratio), only the rows predicted from carried parts are kept, and the command prints them."""

from __future__ import annotations

import pytest
from conftest import REPO
from test_sharing import record, row

from loaderbench.cli import main
from loaderbench.whatif.carried import CORES_BOUND
from loaderbench.whatif.predictions import matrix

# host X: 16 cores (15 in the pool beside one launch core); host Y: 32 (31)
X = {"host": 16, "run": "x"}
Y = {"host": 32, "run": "y"}


def parts_of_x(torchvision_cores: float = 15.0, opencv_cores: float = 6.0) -> list[dict]:
    return [
        record("synthetic", 8000.0, host_ms=10.0, main_cpu_ms=9.0, util=100.0, **X),
        record("synthetic", 3000.0, model="resnet50", host_ms=30.0, main_cpu_ms=14.0, util=100.0, **X),
        record("torchvision", 4000.0, model="none", util=0.0, cores=torchvision_cores, **X),
        record("opencv", 5000.0, model="none", util=0.0, cores=opencv_cores, **X),
        record("torchvision", 7000.0, beside=True, host_ms=12.0, main_cpu_ms=40.0, **X),
        record("torchvision", 7500.0, model="none", ranks=2, parallel="ddp", util=0.0, cores=15.0, **X),
    ]


def records_of_y() -> list[dict]:
    return [
        record("synthetic", 9000.0, **Y),  # old ceilings: no host times
        record("synthetic", 3500.0, model="resnet50", **Y),
        record("synthetic", 17000.0, gpus=2, parallel="ddp", **Y),
        record("torchvision", 5000.0, **Y),
        record("torchvision", 2900.0, model="resnet50", **Y),
        record("opencv", 4800.0, **Y),
        record("torchvision", 9000.0, gpus=2, parallel="ddp", **Y),
        record("dali-sc", 8000.0, **Y),  # no part of X: its rows are left out
    ]


def test_a_cores_bound_part_scales_with_the_pools_and_one_that_left_cores_idle_keeps_its_rate():
    assert 6.0 < CORES_BOUND * 15 <= 15.0
    df = matrix(records_of_y(), gpus=(1,), parts_from=parts_of_x())
    tv, cv = row(df, "torchvision"), row(df, "opencv")
    assert tv["loader_part"] == pytest.approx(4000.0 * 31 / 15)  # kept its 15 cores busy: x 31/15
    assert (
        "x 31/15 cores" in tv["loader_basis"] and "carried from the 16-core host of run 'run x'" in tv["loader_basis"]
    )
    assert cv["loader_part"] == pytest.approx(5000.0)  # 6 of 15 busy: its own rate
    assert "not cores-bound" in cv["loader_basis"]
    assert set(df["loader"]) == {"torchvision", "opencv"} and df.attrs["left_out"] == 0  # no dali-sc row: no part


def test_the_rule_turns_on_the_cores_busy_not_on_the_loader():
    df = matrix(records_of_y(), gpus=(1,), parts_from=parts_of_x(torchvision_cores=6.0, opencv_cores=15.0))
    assert row(df, "torchvision")["loader_part"] == pytest.approx(4000.0)
    assert row(df, "opencv")["loader_part"] == pytest.approx(5000.0 * 31 / 15)


def test_a_carried_beside_part_keeps_its_times_and_takes_its_own_hosts_ceiling_times():
    """Y's ceilings hold no host times: X's beside part keeps its times, with X's reference step call (10 ms, not
    another) and X's models' host sides (GPU-bound ceilings: their main threads' 9 and 14 ms) where Y's lack them."""
    df = matrix(records_of_y(), gpus=(1,), parts_from=parts_of_x())
    extra = 12.0 + (40.0 - 10.0) - 10.0  # X's beside: its step call and its main thread outside it, less h0 = 10 ms
    assert row(df, "torchvision")["consuming_side"] == pytest.approx(256 / ((9.0 + extra) / 1000))
    assert row(df, "torchvision", "resnet50")["consuming_side"] == pytest.approx(256 / ((14.0 + extra) / 1000))
    assert "its main thread's times as measured" in row(df, "torchvision")["consuming_basis"]


def test_the_runs_own_ceiling_gives_the_models_host_side_where_it_holds_it():
    recs = records_of_y()
    recs[1] = record("synthetic", 3500.0, model="resnet50", host_ms=25.0, main_cpu_ms=20.0, util=100.0, **Y)
    df = matrix(recs, gpus=(1,), parts_from=parts_of_x())
    assert row(df, "torchvision", "resnet50")["consuming_side"] == pytest.approx(256 / ((20.0 + 32.0) / 1000))


def test_a_rank_part_is_carried_for_the_n_gpu_rows_and_the_runs_own_parts_win():
    df = matrix(records_of_y(), gpus=(2,), parts_from=parts_of_x(), ratios={})
    ddp = row(df, "torchvision", gpus=2, parallel="ddp")
    assert ddp["loader_part"] == pytest.approx(7500.0 * 31 / 15)  # its launch core beside the pool on each host
    assert ddp["measured"] == 9000.0 and ddp["step_basis"] == "the 2-GPU ddp ceiling"
    own = records_of_y() + [record("torchvision", 4100.0, model="none", util=0.0, cores=20.0, **Y)]
    assert matrix(own, gpus=(1,), parts_from=parts_of_x()).pipe(lambda d: "opencv" in set(d["loader"]))
    assert "torchvision" not in set(matrix(own, gpus=(1,), parts_from=parts_of_x())["loader"])  # its own alone part


def test_predict_scores_the_two_gpu_records_from_the_h100_hosts_parts(capsys):
    rc = main(
        [
            "predict",
            "--records",
            str(REPO / "docs/results/2026-12-01-h200x2/study"),
            "--parts-from",
            str(REPO / "docs/results/2026-12-07-h100/whatif/bundle/cells"),
            "--gpus",
            "1",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "by the cores rule: 12 rows predicted from them; 44 rows with no carried loader part left out" in out
    assert "scores of the 12 checks" in out and "carried from the 16-core host" in out
