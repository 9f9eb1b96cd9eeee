"""The prediction of a cell's rate from its parts (the `whatif` package): the terms on constructed records, the matrix
of measured and never-measured pairs, the n-GPU sides, and `loaderbench predict` on real records."""

from __future__ import annotations

import math
import shutil

import pandas as pd
import pytest
from conftest import REPO

from loaderbench.cli import main
from loaderbench.core.uncertainty import Ratio, widened
from loaderbench.whatif.predictions import matrix, predict
from loaderbench.whatif.ratios import CeilingRatio
from loaderbench.whatif.render import render_matrix
from loaderbench.whatif.terms import (
    CONSUMING,
    GPU_SHARED,
    LOADER,
    MODEL,
    beside_ms,
    ceiling_eff,
    consuming_ms,
    cores_cap,
)

ENGINE = REPO / "docs/results/2026-11-30-h200x2/engine/bundle/cells"


def record(
    loader: str,
    rate: float,
    *,
    model: str = "mobilenet_v2",
    gpus: int = 1,
    parallel: str = "dp",
    cores: float | None = 1.0,
    util: float | None = 50.0,
    host: int = 32,
    pinned: bool = True,
    device: str = "cuda",
    batch: int = 256,
    repeat: int = 0,
    run: str = "run-a",
    host_ms: float | None = None,
    main_cpu_ms: float | None = None,
    beside: bool = False,
    ranks: int = 1,
    **spec,
) -> dict:
    """An ok cell record with what the prediction reads: rate, telemetry, placement, host and the step's host times;
    `beside` and `ranks` make a part of those kinds."""
    launch = list(range(host - 1, host - 1 - gpus, -1)) if pinned else []
    suffix = ("" if model == "mobilenet_v2" else f"_{model}") + ("_beside" if beside else "")
    suffix += f"_ranks{ranks}" if ranks > 1 else ""
    metrics = {
        "samples_per_s": rate,
        "window": {"ci95_rel_halfwidth": 0.01},
        "device": {"type": device},
        "placement": {"launch_cores": launch, "other_cores": list(range(host - len(launch)))} if pinned else None,
    }
    if host_ms is not None:
        metrics["host_step_ms"] = {"mean": host_ms, "p50": host_ms}
    if main_cpu_ms is not None:
        metrics["main_cpu_ms"] = main_cpu_ms
    return {
        "cell_id": f"{loader}_ram_g{gpus}_b{batch}_amp_{parallel}{suffix}_r{repeat}",
        "status": "ok",
        "spec": {
            "loader": loader,
            "tier": "ram",
            "gpus": gpus,
            "batch_size": batch,
            "precision": "amp",
            "parallel": parallel,
            "repeat": repeat,
            "seed": repeat,
            **({"model": model} if model != "mobilenet_v2" else {}),
            **({"beside": True} if beside else {}),
            **({"ranks": ranks} if ranks > 1 else {}),
            **spec,
        },
        "metrics": metrics,
        "telemetry": {
            "cpu_cores_busy": cores,
            "gpus": [] if device == "cpu" or util is None else [{"util_pct": {"mean": util}}] * gpus,
        },
        "provenance": {
            "run_id": run,
            "host": {"cpus_usable": host - len(launch), "gpu_models": [] if device == "cpu" else ["H200"] * 2},
        },
    }


def row(df: pd.DataFrame, loader: str, model: str = "mobilenet_v2", gpus: int = 1, parallel: str = "dp") -> pd.Series:
    rows = df[(df["loader"] == loader) & (df["model"] == model) & (df["gpus"] == gpus) & (df["parallel"] == parallel)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


# ---- the terms


def test_the_gpu_side_loses_the_gpu_time_of_the_loaders_own_device_work():
    assert ceiling_eff(4000.0, 0.0) == 4000.0
    assert ceiling_eff(4000.0, 0.5 / 1000) == pytest.approx(1 / (1 / 4000 + 0.5 / 1000))


def test_the_cores_cap_fills_the_pool_with_both_sides_core_seconds():
    assert cores_cap(7.0, 7 / 1000, 1 / 4000) == pytest.approx(7 / (7 / 1000 + 1 / 4000))
    assert cores_cap(None, 7 / 1000, 0.0) == math.inf and cores_cap(7.0, None, 0.0) == math.inf


def test_the_beside_time_is_the_step_call_plus_the_main_threads_cpu_outside_it():
    # the step call took 20 ms beside the loader; the main thread ran 95 ms of CPU a step, 15 of them the step's own
    assert beside_ms(20.0, 95.0, 15.0) == 100.0
    assert beside_ms(20.0, 10.0, 15.0) == 20.0  # no CPU outside the step: its wall time alone
    # the model's own 30 ms of main thread, plus what the beside part's main thread spent beyond the step alone
    assert consuming_ms(100.0, 30.0, 15.0) == 115.0
    assert consuming_ms(10.0, 30.0, 15.0) == 30.0  # a beside part faster than the step alone adds nothing


# ---- the 1-GPU rows


def test_a_row_takes_its_parts_and_is_classed_by_the_term_that_binds():
    recs = [
        record("dali-sc", 1000.0, model="none", util=50.0, cores=4.0),  # decodes on the GPU: half of it alone
        record("synthetic", 4000.0, cores=1.0),
        record("dali-sc", 900.0, cores=5.0),
        record("torchvision", 500.0, model="none", util=0.0, cores=20.0),
        record("torchvision", 480.0, cores=21.0),
        record("opencv", 700.0),  # no loader-alone cell: no 1-GPU row
    ]
    df = matrix(recs, gpus=(1,))
    assert set(df["loader"]) == {"dali-sc", "torchvision"} and set(df["status"]) == {"measured"}
    sc = row(df, "dali-sc")
    assert sc["gpu_side"] == pytest.approx(1 / (1 / 4000 + 0.5 / 1000))
    assert sc["loader_side"] == 1000.0  # the step needs only its launch core
    assert sc["class"] == LOADER and sc["predicted"] == 1000.0  # 1000 < 1333: the hard minimum, no k
    assert sc["error"] == pytest.approx(900.0 / 1000.0 - 1) and sc["naive"] == 1000.0
    assert row(df, "torchvision")["gpu_side"] == 4000.0
    assert "a beside part of the loader (the consuming process's term unknown)" in sc["lacks"]
    assert math.isnan(sc["consuming_side"])


def test_the_gpu_shared_with_the_loaders_decoding_is_named_when_it_binds():
    recs = [
        record("nvjpeg", 3000.0, model="none", util=90.0, cores=2.0),
        record("synthetic", 4000.0),
        record("nvjpeg", 1500.0, cores=3.0),
    ]
    r = row(matrix(recs, gpus=(1,)), "nvjpeg")
    assert r["gpu_side"] == pytest.approx(1 / (1 / 4000 + 0.9 / 3000))  # 1818: below the loader's 3000
    assert r["class"] == GPU_SHARED and r["naive"] == 3000.0
    recs[0] = record("nvjpeg", 9000.0, model="none", util=1.0, cores=2.0)
    assert row(matrix(recs, gpus=(1,)), "nvjpeg")["class"] == MODEL


def test_on_a_cpu_host_the_step_takes_the_loaders_cores():
    kw = {"device": "cpu", "pinned": False, "host": 4}
    recs = [
        record("torchvision", 400.0, model="none", cores=4.0, **kw),
        record("synthetic", 100.0, cores=4.0, **kw),
        record("torchvision", 70.0, cores=4.0, **kw),
    ]
    r = row(matrix(recs, gpus=(1, 2)), "torchvision")  # no n-GPU row on a CPU host
    # the pool of 4 cores holds 4/400 + 4/100 core-seconds per sample: 80 samples/s, below the ceiling's 100
    assert r["loader_side"] == pytest.approx(4 / (4 / 400 + 4 / 100))
    assert r["class"] == LOADER and r["naive"] == 100.0


def test_a_beside_part_gives_the_consuming_term_and_can_bind():
    recs = [
        record("synthetic", 9000.0, host_ms=15.0, main_cpu_ms=15.0),
        record("synthetic", 6000.0, model="resnet50", host_ms=18.0, main_cpu_ms=18.0),
        record("torchvision", 3300.0, model="none", util=0.0, cores=15.0),
        record("torchvision", 2660.0, cores=16.0),
        record("torchvision", 2650.0, model="resnet50", cores=16.0),
        record("torchvision", 2700.0, beside=True, host_ms=20.0, main_cpu_ms=95.0),  # a part, never a check
    ]
    df = matrix(recs, gpus=(1,))
    assert len(df) == 2 and set(df["status"]) == {"measured"}  # the beside part is no row's training cell
    mine = row(df, "torchvision")
    assert mine["measured"] == 2660.0 and mine["configuration"] == "torchvision_ram_g1_b256_amp_dp"
    t_ms = 20.0 + (95.0 - 15.0)  # its step call, and the main thread's CPU outside it
    assert mine["consuming_side"] == pytest.approx(256 / (t_ms / 1000))  # the beside part's own model: T_beside
    assert mine["class"] == CONSUMING and mine["predicted"] == pytest.approx(2560.0)
    assert row(df, "torchvision", "resnet50")["consuming_side"] == pytest.approx(256 / ((18 + t_ms - 15) / 1000))
    assert mine["lacks"] == ""


def test_without_host_times_the_consuming_term_is_unknown_never_zero():
    recs = [
        record("synthetic", 9000.0),  # an old ceiling: no host_step_ms
        record("torchvision", 3300.0, model="none", util=0.0, cores=15.0),
        record("torchvision", 2600.0, beside=True, host_ms=20.0, main_cpu_ms=95.0),
    ]
    r = row(matrix(recs, gpus=(1,)), "torchvision")
    assert math.isnan(r["consuming_side"]) and r["class"] == LOADER and r["predicted"] == 3300.0
    assert "mobilenet_v2's ceiling's host_step_ms, mobilenet_v2's ceiling's host side" in r["lacks"]


def test_every_pair_is_a_row_measured_or_not_and_measured_rows_come_first():
    recs = [
        record("synthetic", 8000.0),
        record("synthetic", 3000.0, model="vit_b_16"),
        record("opencv", 4000.0, model="none", util=0.0),
        record("torchvision", 3000.0, model="none", util=0.0),
        record("torchvision", 2500.0, model="vit_b_16"),
    ]
    df = matrix(recs, gpus=(1,))
    assert list(df["status"]) == ["measured", "predicted", "predicted", "predicted"]
    assert df.loc[0, "configuration"] == "torchvision_ram_g1_b256_amp_dp_vit_b_16"
    never = df[df["status"] == "predicted"]
    assert sorted(never["configuration"]) == [
        "opencv_ram_g1_b256_amp_dp",
        "opencv_ram_g1_b256_amp_dp_vit_b_16",
        "torchvision_ram_g1_b256_amp_dp",
    ]
    assert never["measured"].isna().all() and never["error"].isna().all() and never["predicted"].notna().all()


def test_variants_of_one_cell_id_stay_apart():
    recs = [
        record("synthetic", 4000.0),
        record("torchvision", 1000.0, model="none", util=0.0, cores=10.0, prefetch_factor=2),
        record("torchvision", 900.0, cores=10.0, prefetch_factor=2),
        record("torchvision", 950.0, cores=10.0, prefetch_factor=4),
    ]
    df = matrix(recs, gpus=(1,))
    assert list(df["configuration"]) == ["torchvision_ram_g1_b256_amp_dp [prefetch_factor=2]"]
    assert list(df["measured"]) == [900.0]


def test_parts_of_another_run_are_not_taken():
    recs = [record("synthetic", 4000.0, run="b"), record("torchvision", 1000.0, model="none"), record("torchvision", 9)]
    assert matrix(recs, gpus=(1,)).empty


def test_the_cells_table_gets_each_checks_prediction_and_class():
    recs = [
        record("synthetic", 4000.0),
        record("torchvision", 1000.0, model="none", util=0.0),
        record("torchvision", 9),
    ]
    rows = predict(recs)
    assert list(rows["configuration"]) == ["torchvision_ram_g1_b256_amp_dp"]
    assert list(rows["role"]) == ["check"] and list(rows["limited_by"]) == [LOADER]
    assert rows["error"].iloc[0] == pytest.approx(9 / 1000 - 1)


def test_the_package_serves_the_matrix_its_scores_and_its_table():
    from loaderbench import whatif

    recs = [
        record("synthetic", 4000.0),
        record("synthetic", 3000.0, model="vit_b_16"),
        record("torchvision", 1000.0, model="none", util=0.0),
        record("torchvision", 900.0),
    ]
    df = whatif.matrix(recs, gpus=(1,))
    table = whatif.scores(df)  # the per-class table, as df.attrs holds it
    assert list(table["class"]) == [LOADER, "all"] and table.to_dict("records") == df.attrs["scores"]
    assert table.loc[0, "checks"] == 1 and table.loc[0, "median_abs_error"] == pytest.approx(0.1)
    shown = whatif.grid(df, gpus=1)
    assert shown.loc[("ram", 256, "amp", "torchvision"), "vit_b_16"] == 1000.0
    assert whatif.grid(df, gpus=1, value="status").loc[("ram", 256, "amp", "torchvision")].to_dict() == {
        "mobilenet_v2": "measured",
        "vit_b_16": "predicted",
    }
    assert whatif.render_matrix(df).startswith("scores of the 1 checks")


# ---- more GPUs

RATIOS = {(mode,): CeilingRatio(mode, Ratio(value, 0.05, 2), ["a", "b"]) for mode, value in (("dp", 1.5), ("ddp", 1.8))}


def test_without_a_rank_part_ddp_splits_the_cores_and_dp_keeps_one_loader():
    # 32 cores; 1 GPU: the loader alone had 31, keeping 26 busy at 2000/s
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("torchvision", 2000.0, model="none", util=0.0, cores=26.0),
        record("dali-mc", 2000.0, model="none", util=0.0, cores=26.0),
    ]
    df = matrix(recs, gpus=(2,), ratios=RATIOS)
    per_sample = 26.0 / 2000  # the loader's core-seconds per sample; the step needs only its launch core
    ddp = row(df, "torchvision", gpus=2, parallel="ddp")
    assert ddp["status"] == "predicted, unchecked" and ddp["configuration"] == "torchvision_ram_g2_b256_amp_ddp"
    assert ddp["loader_side"] == pytest.approx(30 / per_sample)  # 2 ranks on 30 cores: below 2 x 2000
    assert ddp["naive"] == 4000.0 and ddp["class"] == LOADER
    assert ddp["gpu_side"] == pytest.approx(8000.0 * 1.8)  # the measured ratio, not 2 x C
    assert "today's rule, no rank part: 2 pipeline(s)" in ddp["loader_basis"]
    dp = row(df, "torchvision", gpus=2, parallel="dp")
    assert dp["loader_side"] == 2000.0 and dp["predicted"] == 2000.0 and dp["gpu_side"] == pytest.approx(12000.0)
    assert row(df, "dali-mc", gpus=2, parallel="dp")["loader_side"] == pytest.approx(30 / per_sample)  # 2 pipelines


def test_a_rank_part_sets_the_loader_side_where_measured():
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("torchvision", 2000.0, model="none", util=0.0, cores=9.0),
        record("torchvision", 2600.0, model="none", util=0.0, cores=18.0, ranks=2, parallel="ddp"),
        record("torchvision", 2500.0, gpus=2, parallel="ddp", cores=19.0),
    ]
    df = matrix(recs, gpus=(1, 2), ratios=RATIOS)
    ddp = row(df, "torchvision", gpus=2, parallel="ddp")
    assert ddp["loader_part"] == 2600.0 and ddp["loader_side"] == 2600.0 and ddp["naive"] == 2600.0
    assert ddp["loader_basis"] == "the loader's 2-rank ddp part" and ddp["status"] == "measured"
    assert ddp["error"] == pytest.approx(2500 / 2600 - 1)
    assert row(df, "torchvision", gpus=2, parallel="dp")["loader_side"] == 2000.0  # no dp rank part: today's rule
    assert len(df[df["gpus"] == 1]) == 1  # the rank part is no 1-GPU loader-alone cell


def test_the_measured_n_gpu_ceiling_is_taken_where_the_run_has_it():
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("synthetic", 12000.0, gpus=2, parallel="dp", cores=1.5),
        record("torchvision", 20000.0, model="none", util=0.0, cores=9.0),
    ]
    dp = row(matrix(recs, gpus=(2,), ratios=RATIOS), "torchvision", gpus=2, parallel="dp")
    assert dp["gpu_side"] == 12000.0 and dp["step_basis"] == "the 2-GPU dp ceiling" and dp["class"] == MODEL


def test_the_gpu_work_of_one_pipeline_lands_on_the_first_gpu():
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("dali-sc", 3000.0, model="none", util=60.0, cores=3.0),
        record("dali-mc", 3000.0, model="none", util=60.0, cores=3.0),
    ]
    df = matrix(recs, gpus=(2,), ratios=RATIOS)
    device, step = 0.6 / 3000, 8000.0 * 1.5
    assert row(df, "dali-sc", gpus=2)["gpu_side"] == pytest.approx(1 / (1 / step + device))
    step = 8000.0 * 1.8
    assert row(df, "dali-sc", gpus=2, parallel="ddp")["gpu_side"] == pytest.approx(1 / (1 / step + device))
    step = 8000.0 * 1.5
    assert row(df, "dali-mc", gpus=2)["gpu_side"] == pytest.approx(1 / (1 / step + device / 2))  # each its own share


def test_without_loader_alone_cells_the_loader_side_comes_from_its_training_cells():
    recs = [
        record("synthetic", 8000.0),
        record("dali-cpu", 7900.0, cores=12.0),  # within noise of the ceiling: it keeps up
        record("torchvision", 2000.0, cores=12.0),  # below it: the slower side
        record("torchvision", 3000.0, gpus=2, parallel="ddp", cores=20.0),
    ]
    df = matrix(recs, gpus=(1, 2), ratios=RATIOS)
    assert not (df["gpus"] == 1).any()  # the 1-GPU cells are parts here, never checks
    keeps = row(df, "dali-cpu", gpus=2)
    assert keeps["loader_side"] == math.inf and keeps["class"] == MODEL and keeps["predicted"] == pytest.approx(12000)
    assert "keeps up" in keeps["loader_basis"]
    assert "its own device work unknown" in keeps["lacks"]
    tv = row(df, "torchvision", gpus=2, parallel="ddp")
    assert tv["loader_part"] == 4000.0 and tv["error"] == pytest.approx(3000 / tv["predicted"] - 1)
    assert row(df, "torchvision", gpus=2)["status"] == "predicted, unchecked"  # no 2-GPU dp check


def test_without_a_ceiling_ratio_the_n_gpu_step_is_unknown_and_the_row_says_so():
    recs = [record("synthetic", 8000.0), record("torchvision", 2000.0, model="none", util=0.0)]
    r = row(matrix(recs, gpus=(2,), ratios={}), "torchvision", gpus=2, parallel="ddp")
    assert pd.isna(r["predicted"])
    assert "a 2-GPU ddp ceiling, or MobileNetV2's measured 2-GPU/1-GPU ddp ratio" in r["lacks"]


# ---- the text and the command


def test_the_text_gives_the_class_table_first_and_every_number_with_its_unit():
    recs = [
        record("synthetic", 4.0),
        record("torchvision", 23.0, model="none", util=0.0),
        record("torchvision", 1.37),
        record("synthetic", 3.0, model="vit_b_16"),
        record("torchvision", 2.9, model="vit_b_16"),
    ]
    printed = render_matrix(matrix(recs, gpus=(1,)))
    lines = printed.splitlines()
    assert lines[0].startswith("scores of the 2 checks (measured rows) per class")
    assert lines[1].split() == ["class", "checks", "(cells)", "median", "|error|", "naive", "median", "|error|"] + [
        "worst",
        "cell",
        "worst",
        "error",
    ]
    assert lines[2].split()[:4] == ["model", "2", "34.5%", "34.5%"]  # |1.37/4 - 1| 65.8%, |2.9/3 - 1| 3.3%
    assert "consuming process's term is unknown in 2 of 2 rows" in printed
    assert next(x for x in lines if x.startswith("coverage: ")) and "measured rows (2): rates in samples/s" in printed
    row_line = next(x for x in lines if x.lstrip().startswith("torchvision_ram_g1_b256_amp_dp ")).split()
    # the ceiling's one window widened by the default noise between processes, then by the other check's |error|
    hw, w = widened(0.01, None), abs(2.9 / 3 - 1)
    interval = [f"[{4 / (1 + hw) / (1 + w):.3g},", f"{4 * (1 + hw) * (1 + w):.3g}]"]
    assert interval == ["[3.69,", "4.33]"]
    assert row_line[:7] == ["torchvision_ram_g1_b256_amp_dp", "model", "1.37", "4", *interval, "-65.8%"]
    assert "..." not in printed


def test_loaderbench_predict_on_real_records(tmp_path, capsys):
    cells = tmp_path / "run" / "cells"
    cells.mkdir(parents=True)
    for name in [f"{lo}_ram_g{g}_b256_amp_dp_r0.json" for lo in ("torchvision", "synthetic") for g in (1, 2)]:
        shutil.copy(ENGINE / name, cells / name)
    out = tmp_path / "matrix.csv"
    assert main(["predict", "--records", str(tmp_path / "run"), "--gpus", "1", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "scores of the 1 checks" in printed and f"wrote the matrix (2 rows) to {out}" in printed
    df = pd.read_csv(out)
    two = df[df["configuration"] == "torchvision_ram_g2_b256_amp_dp"].iloc[0]
    assert two["status"] == "measured" and two["step_basis"] == "the 2-GPU dp ceiling"
    assert "a loader-alone cell (the loader side inferred from its 1-GPU training cells)" in two["lacks"]
    assert df[df["configuration"] == "torchvision_ram_g2_b256_amp_ddp"].iloc[0]["status"] == "predicted, unchecked"


@pytest.mark.parametrize("gone", [["--k", "4"], ["--fit-model", "resnet50"]])
def test_loaderbench_predict_refuses_the_removed_fit_options_and_names_what_replaced_them(tmp_path, capsys, gone):
    cells = tmp_path / "run" / "cells"
    cells.mkdir(parents=True)
    shutil.copy(ENGINE / "synthetic_ram_g1_b256_amp_dp_r0.json", cells)
    assert main(["predict", "--records", str(tmp_path / "run"), *gone]) == 2
    err = capsys.readouterr().err
    assert f"{gone[0]}: removed - nothing is fitted now" in err and "every measured cell is a check" in err


def test_loaderbench_predict_names_a_folder_without_records(tmp_path, capsys):
    assert main(["predict", "--records", str(tmp_path)]) == 2
    assert f"--records {tmp_path}: no cell record" in capsys.readouterr().err
