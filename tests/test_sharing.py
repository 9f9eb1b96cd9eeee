"""The prediction of a cell's rate from its parts (the `whatif` package): the arithmetic on constructed records, the fit
on one model and its check on another, the n-GPU scaling, and `loaderbench predict` on real records."""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest
from conftest import REPO

from loaderbench.cli import main
from loaderbench.whatif.model import (
    CORES,
    GPU_SHARED,
    LOADER,
    MODEL,
    MODEL_CORES,
    ceiling_eff,
    fit_k,
    inverse_softmin,
    softmin,
)
from loaderbench.whatif.ngpu import scale as scale_of
from loaderbench.whatif.onegpu import predict, score
from loaderbench.whatif.render import render_predict

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
    **spec,
) -> dict:
    """An ok cell record with what the prediction reads: rate, telemetry, placement and host."""
    launch = list(range(host - 1, host - 1 - gpus, -1)) if pinned else []
    suffix = "" if model == "mobilenet_v2" else f"_{model}"
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
            **spec,
        },
        "metrics": {
            "samples_per_s": rate,
            "window": {"ci95_rel_halfwidth": 0.01},
            "device": {"type": device},
            "placement": {"launch_cores": launch, "other_cores": list(range(host - len(launch)))} if pinned else None,
        },
        "telemetry": {
            "cpu_cores_busy": cores,
            "gpus": [] if device == "cpu" or util is None else [{"util_pct": {"mean": util}}] * gpus,
        },
        "provenance": {
            "run_id": run,
            "host": {"cpus_usable": host - len(launch), "gpu_models": [] if device == "cpu" else ["H200"] * 2},
        },
    }


# ---- the arithmetic


def test_softmin_is_the_slower_side_softened_by_k():
    assert softmin(100.0, 100.0, 1.0) == pytest.approx(50.0)  # k = 1: the two sides' times add
    assert softmin(100.0, 300.0, 2.0) == pytest.approx((100**-2 + 300**-2) ** -0.5)
    assert softmin(300.0, 100.0, 2.0) == softmin(100.0, 300.0, 2.0)
    assert softmin(100.0, 300.0, math.inf) == 100.0
    assert softmin(100.0, math.inf, 3.0) == 100.0
    assert softmin(200.0, 600.0, 4.0) == pytest.approx(2 * softmin(100.0, 300.0, 4.0))  # a rate: scales with both
    assert softmin(100.0, 300.0, 8.0) > softmin(100.0, 300.0, 2.0)  # a sharper k: closer to the slower side


def test_the_inverse_recovers_the_loader_side_and_knows_when_it_cannot():
    for k in (1.0, 3.0, math.inf):
        assert inverse_softmin(softmin(700.0, 1000.0, k), 1000.0, k) == pytest.approx(700.0)
    assert inverse_softmin(1000.0, 1000.0, 3.0) == math.inf
    assert inverse_softmin(1100.0, 1000.0, 3.0) == math.inf


def test_the_ceiling_loses_the_gpu_time_of_the_loaders_own_device_work():
    assert ceiling_eff(4000.0, 0.0, 1000.0) == 4000.0
    assert ceiling_eff(4000.0, 0.5, 1000.0) == pytest.approx(1 / (1 / 4000 + 0.5 / 1000))


def test_a_configuration_takes_its_parts_and_says_what_limited_it():
    recs = [
        record("dali-sc", 1000.0, model="none", util=50.0, cores=4.0),  # decodes on the GPU: half of it alone
        record("synthetic", 4000.0, cores=1.0),
        record("dali-sc", 900.0, cores=5.0),
        record("torchvision", 500.0, model="none", util=0.0, cores=20.0),
        record("torchvision", 480.0, cores=21.0),
        record("opencv", 700.0),  # no loader-alone cell: no row
    ]
    df = predict(recs).set_index("loader")
    assert set(df.index) == {"dali-sc", "torchvision"}
    sc = df.loc["dali-sc"]
    assert sc["ceiling_eff"] == pytest.approx(1 / (1 / 4000 + 0.5 / 1000))
    assert sc["loader_eff"] == 1000.0 and sc["cores_taken"] == 0.0  # the step needs only its launch core
    assert sc["limited_by"] == LOADER  # 1000 < 1333
    assert sc["predicted"] == pytest.approx(softmin(1000.0, sc["ceiling_eff"], df.attrs["k"]))
    assert sc["error"] == pytest.approx(900.0 / sc["predicted"] - 1)
    assert df.loc["torchvision", "ceiling_eff"] == 4000.0
    assert df.attrs["fit_model"] == "mobilenet_v2" and set(df["role"]) == {"fit"}


def test_on_a_cpu_host_the_step_takes_the_loaders_cores():
    kw = {"device": "cpu", "pinned": False, "host": 4}
    recs = [
        record("torchvision", 400.0, model="none", cores=4.0, **kw),
        record("synthetic", 100.0, cores=4.0, **kw),
        record("torchvision", 70.0, cores=4.0, **kw),
    ]
    row = predict(recs).iloc[0]
    # the pool of 4 cores holds 4/400 + 4/100 core-seconds per sample: 80 samples/s
    assert row["loader_eff"] == pytest.approx(4 / (4 / 400 + 4 / 100))
    assert row["cores_taken"] == pytest.approx(0.8)
    assert row["limited_by"] == MODEL_CORES  # the step's 4/100 core-s a sample fill the cores, not the loader's 4/400
    assert row["loader_gpu_share"] == 0.0
    recs[1] = record("synthetic", 1000.0, cores=4.0, **kw)  # now the loader's 4/400 outweigh the step's 4/1000
    assert predict(recs).iloc[0]["limited_by"] == CORES


def test_a_slow_model_beside_a_fast_loader_on_a_cpu_host_is_limited_by_the_model():
    kw = {"device": "cpu", "pinned": False, "host": 2}
    recs = [
        record("torchvision", 23.0, model="none", cores=2.0, **kw),
        record("synthetic", 4.0, cores=2.0, **kw),
        record("torchvision", 3.3, cores=2.0, **kw),
    ]
    row = predict(recs).iloc[0]
    assert row["loader_eff"] == pytest.approx(2 / (2 / 23 + 2 / 4))  # 3.4/s: below the ceiling's 4
    assert row["limited_by"] == MODEL_CORES and row["limited_by"].startswith("model")


def test_the_table_prints_slow_rates_with_their_digits_and_each_miss_in_full():
    recs = [
        record("synthetic", 4.0),
        record("torchvision", 23.0, model="none", util=0.0),
        record("torchvision", 1.37),  # far below both parts
    ]
    for i, rate in enumerate((1.5, 2.5, 3.5)):  # three cells at the slower side: the fit takes k = inf
        recs += [record(f"plug{i}", rate, model="none", util=0.0), record(f"plug{i}", rate)]
    df = predict(recs)
    printed = render_predict(df)
    row = next(line for line in printed.splitlines() if line.lstrip().startswith("torchvision_")).split()
    assert row[:7] == ["torchvision_ram_g1_b256_amp_dp", "fit", "1.37", "23", "4", "4", "-65.8%"]
    assert "..." not in printed
    missed = df.set_index("loader").loc["torchvision", "missed"]
    assert missed.endswith("hides less than k says)")
    assert f"  torchvision_ram_g1_b256_amp_dp (fit): {missed}" in printed.splitlines()


def test_the_gpu_shared_with_the_loaders_decoding_is_named_when_it_limits():
    recs = [
        record("nvjpeg", 3000.0, model="none", util=90.0, cores=2.0),
        record("synthetic", 4000.0),
        record("nvjpeg", 1500.0, cores=3.0),
    ]
    row = predict(recs).iloc[0]
    assert row["ceiling_eff"] == pytest.approx(1 / (1 / 4000 + 0.9 / 3000))  # 1818: below the loader's 3000
    assert row["limited_by"] == GPU_SHARED
    recs[0] = record("nvjpeg", 9000.0, model="none", util=1.0, cores=2.0)
    assert predict(recs).iloc[0]["limited_by"] == MODEL


def _two_models(k: float) -> list[dict]:
    """Cells of two models whose measured rate is exactly softmin_k of their parts."""
    recs = []
    for model, ceiling in (("mobilenet_v2", 8000.0), ("resnet50", 2500.0)):
        recs.append(record("synthetic", ceiling, model=model))
        for i, alone in enumerate((1500.0, 2500.0, 4000.0, 7000.0, 12000.0)):
            loader = f"plug{i}"
            if model == "mobilenet_v2":
                recs.append(record(loader, alone, model="none", util=0.0, cores=4.0))
            recs.append(record(loader, softmin(alone, ceiling, k), model=model, cores=4.0))
    return recs


def test_k_is_fitted_on_one_model_and_checked_on_another():
    df = predict(_two_models(3.0))
    assert df.attrs["fit_model"] == "mobilenet_v2"  # the tie goes to the default model
    assert df.attrs["k"] == pytest.approx(3.0, rel=0.03)
    assert set(df.loc[df["model"] == "mobilenet_v2", "role"]) == {"fit"}
    assert set(df.loc[df["model"] == "resnet50", "role"]) == {"check"}
    assert score(df) < 0.01 and score(df, "resnet50") < 0.01
    other = predict(_two_models(3.0), fit_model="resnet50")
    assert set(other.loc[other["model"] == "mobilenet_v2", "role"]) == {"check"}
    assert other.attrs["k"] == pytest.approx(3.0, rel=0.03)
    with pytest.raises(ValueError, match="vit_b_32"):
        predict(_two_models(3.0), fit_model="vit_b_32")


def test_a_fit_is_never_scored_on_its_own_cells():
    df = predict(_two_models(2.0))
    with pytest.raises(ValueError, match="fitted on mobilenet_v2's cells"):
        score(df, "mobilenet_v2")
    one = predict([r for r in _two_models(2.0) if r["spec"].get("model") != "resnet50"])
    with pytest.raises(ValueError, match="no check cells"):
        score(one)


def test_the_fit_minimises_the_median_miss():
    pairs = [(softmin(lo, 1000.0, 5.0), lo, 1000.0) for lo in (600.0, 900.0, 1200.0, 2000.0)]
    assert fit_k(pairs) == pytest.approx(5.0, rel=0.03)
    assert fit_k([(lo, lo, 1000.0) for lo in (500.0, 700.0)]) == math.inf  # measured = the slower side: the hard min


def test_a_miss_says_which_part_missed():
    recs = [
        record("synthetic", 4000.0),
        record("torchvision", 1000.0, model="none", util=0.0, cores=10.0),
        record("torchvision", 600.0, cores=10.0),  # far below both parts
        record("opencv", 1000.0, model="none", util=0.0, cores=10.0),
        record("opencv", 1300.0, cores=10.0),  # above the loader alone
    ]
    for i, rate in enumerate((1000.0, 2000.0, 3000.0)):  # three cells at the slower side: the fit takes k = inf
        recs += [record(f"plug{i}", rate, model="none", util=0.0, cores=10.0), record(f"plug{i}", rate, cores=10.0)]
    df = predict(recs).set_index("loader")
    assert df.attrs["k"] == math.inf
    assert "below both parts: sharing stronger than modelled" in df.loc["torchvision", "missed"]
    assert "the loader-alone cell understates the loader" in df.loc["opencv", "missed"]
    assert df.loc["plug0", "missed"] == "" and df.loc["plug0", "error"] == 0.0


def test_variants_of_one_cell_id_stay_apart():
    recs = [
        record("synthetic", 4000.0),
        record("torchvision", 1000.0, model="none", util=0.0, cores=10.0, prefetch_factor=2),
        record("torchvision", 900.0, cores=10.0, prefetch_factor=2),
        record("torchvision", 950.0, cores=10.0, prefetch_factor=4),
    ]
    df = predict(recs)
    assert sorted(df["configuration"]) == [
        "torchvision_ram_g1_b256_amp_dp [prefetch_factor=2]",
        "torchvision_ram_g1_b256_amp_dp [prefetch_factor=4]",
    ]
    assert sorted(df["measured"]) == [900.0, 950.0]


def test_parts_of_another_run_are_not_taken():
    recs = [record("synthetic", 4000.0, run="b"), record("torchvision", 1000.0, model="none"), record("torchvision", 9)]
    assert predict(recs).empty


# ---- more GPUs


def _by(df: pd.DataFrame, loader: str, gpus: int, parallel: str) -> pd.Series:
    rows = df[(df["loader"] == loader) & (df["gpus"] == gpus) & (df["parallel"] == parallel)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_ddp_splits_the_cores_among_ranks_and_dp_keeps_one_loader():
    # 32 cores; 1 GPU: the loader had 31, keeping 26 busy at 2000/s (1 of the 27 is the step's launch core)
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("synthetic", 8000.0, cores=1.0, parallel="ddp"),
        record("torchvision", 2000.0, cores=27.0),
        record("torchvision", 2000.0, cores=27.0, parallel="ddp"),
        record("dali-mc", 2000.0, cores=27.0),
    ]
    df = scale_of(recs, gpus=(2,))
    assert df.attrs["k"] == math.inf and "not fitted" in df.attrs["k_basis"]
    per_sample = 27.0 / 2000 - 1.0 / 8000  # the loader's core-seconds per sample
    ddp = _by(df, "torchvision", 2, "ddp")
    assert ddp["kind"] == "predicted" and ddp["configuration"] == "torchvision_ram_g2_b256_amp_ddp"
    assert ddp["loader_side"] == pytest.approx(30 / per_sample)  # 2 ranks x 15 cores: below 2 x 2000
    assert ddp["limited_by"] == CORES and ddp["gpu_side"] == 16000.0
    dp = _by(df, "torchvision", 2, "dp")
    assert dp["loader_side"] == 2000.0 and dp["predicted"] == 2000.0 and dp["limited_by"] == LOADER
    assert dp["gpu_side"] == 16000.0
    mc = _by(df, "dali-mc", 2, "dp")  # a pipeline per GPU in the one process
    assert mc["loader_side"] == pytest.approx(30 / per_sample)
    assert "a 1-GPU ddp cell of the loader (its dp cell used)" in _by(df, "dali-mc", 2, "ddp")["lacks"]
    assert "loader-alone cells" in dp["lacks"] and "its own GPU work unknown" in mc["lacks"]
    assert "its own GPU work" not in dp["lacks"]
    assert "a host like it with 4" in _by(scale_of(recs, gpus=(4,)), "torchvision", 4, "ddp")["note"]


def test_a_loader_with_cores_to_spare_scales_with_its_ranks_and_is_compared_with_the_measured():
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("torchvision", 2000.0, cores=9.0),
        record("torchvision", 3000.0, gpus=2, parallel="ddp", cores=17.0),
        record("synthetic", 12000.0, gpus=2, parallel="dp", cores=1.5),
    ]
    df = scale_of(recs, gpus=(2,), k=2.0)
    ddp = _by(df, "torchvision", 2, "ddp")
    assert df.attrs["k_basis"] == "given"
    l1 = inverse_softmin(2000.0, 8000.0, 2.0)
    assert ddp["loader_eff_1gpu"] == pytest.approx(l1)
    assert ddp["predicted"] == pytest.approx(2 * 2000.0)  # both sides double: the rate doubles, whatever k
    assert ddp["measured"] == 3000.0 and ddp["error"] == pytest.approx(3000 / 4000 - 1)
    assert "a 1-GPU ddp ceiling (the dp one used)" in ddp["lacks"]
    assert "the loader scales worse than its cores allow" in ddp["missed"]
    dp = _by(df, "torchvision", 2, "dp")
    assert dp["ceiling_measured"] == 12000.0 and pd.isna(dp["measured"])


def test_the_gpu_work_of_one_pipeline_lands_on_the_first_gpu():
    recs = [
        record("synthetic", 8000.0, cores=1.0),
        record("dali-sc", 3000.0, model="none", util=60.0, cores=3.0),
        record("dali-sc", 2500.0, cores=4.0),
        record("dali-mc", 3000.0, model="none", util=60.0, cores=3.0),
        record("dali-mc", 2500.0, cores=4.0),
    ]
    df = scale_of(recs, gpus=(2,), k=4.0)
    device = 0.6 / 3000
    assert _by(df, "dali-sc", 2, "dp")["gpu_side"] == pytest.approx(1 / (1 / 16000 + device))
    assert _by(df, "dali-sc", 2, "ddp")["gpu_side"] == pytest.approx(1 / (1 / 16000 + device))  # rank 0 decodes all
    assert _by(df, "dali-mc", 2, "dp")["gpu_side"] == pytest.approx(2 / (1 / 8000 + device))
    assert _by(df, "dali-mc", 2, "dp")["loader_side"] == 6000.0
    assert "loader-alone" not in _by(df, "dali-mc", 2, "dp")["lacks"]


def test_a_loader_within_noise_of_its_ceiling_is_said_not_limiting():
    recs = [record("synthetic", 8000.0), record("dali-cpu", 7900.0, cores=12.0)]
    row = _by(scale_of(recs, gpus=(2,)), "dali-cpu", 2, "dp")
    assert row["loader_eff_1gpu"] == math.inf and "the loader is not limiting at 1 GPU" in row["note"]
    assert row["predicted"] == 16000.0 and row["limited_by"] == MODEL


def test_without_a_ceiling_nothing_is_predicted_and_the_row_says_why():
    row = _by(scale_of([record("torchvision", 2000.0)], gpus=(2,)), "torchvision", 2, "ddp")
    assert pd.isna(row["predicted"])
    assert "a 1-GPU ceiling (the synthetic cell of mobilenet_v2 at batch 256, amp)" in row["lacks"]


# ---- the command, on real records


def test_loaderbench_predict_on_real_records(tmp_path, capsys):
    cells = tmp_path / "run" / "cells"
    cells.mkdir(parents=True)
    names = [f"{lo}_ram_g{g}_b256_amp_dp_r0.json" for lo in ("torchvision", "synthetic") for g in (1, 2)]
    for name in names:
        shutil.copy(ENGINE / name, cells / name)
    out = tmp_path / "predicted.csv"
    assert main(["predict", "--records", str(tmp_path / "run"), "--gpus", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "no configuration has both its parts" in printed
    assert "torchvision_ram_g2_b256_amp_dp" in printed and "median |error| over the 1 measured n-GPU cells" in printed
    more = pd.read_csv(tmp_path / "predicted.scale.csv")
    row = more[(more["configuration"] == "torchvision_ram_g2_b256_amp_dp")].iloc[0]
    one = json.loads((ENGINE / "torchvision_ram_g1_b256_amp_dp_r0.json").read_text())["metrics"]["samples_per_s"]
    two = json.loads((ENGINE / "torchvision_ram_g2_b256_amp_dp_r0.json").read_text())["metrics"]["samples_per_s"]
    assert row["kind"] == "predicted" and row["predicted"] == pytest.approx(one, rel=1e-5)  # one loader: its 1-GPU rate
    assert row["measured"] == pytest.approx(two, rel=1e-5)
    assert "loader-alone cells" in row["lacks"]
    assert pd.read_csv(out).empty


def test_loaderbench_predict_names_the_csv_only_where_it_wrote_one(tmp_path, capsys):
    cells = tmp_path / "run" / "cells"
    cells.mkdir(parents=True)
    for lo in ("torchvision", "synthetic"):
        shutil.copy(ENGINE / f"{lo}_ram_g1_b256_amp_dp_r0.json", cells)  # 1 GPU only: nothing measured at 2
    assert main(["predict", "--records", str(tmp_path / "run"), "--gpus", "2"]) == 0
    printed = capsys.readouterr().out
    assert "no n-GPU cell measured to compare with (2 predicted rows not shown: --out writes them)" in printed
    assert "CSV" not in printed and "csv" not in printed
    out = tmp_path / "predicted.csv"
    assert main(["predict", "--records", str(tmp_path / "run"), "--gpus", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"(2 predicted rows in {tmp_path / 'predicted.scale.csv'})" in printed
    assert len(pd.read_csv(tmp_path / "predicted.scale.csv")) == 2


def test_loaderbench_predict_names_a_folder_without_records(tmp_path, capsys):
    assert main(["predict", "--records", str(tmp_path)]) == 2
    assert f"--records {tmp_path}: no cell record" in capsys.readouterr().err
