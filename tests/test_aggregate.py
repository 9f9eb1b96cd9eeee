"""Speed, GPU Efficiency, medians and spread on made-up rows with known answers."""

from __future__ import annotations

import io
import json
import math
import re

import pandas as pd
import pytest

from loaderbench.core.records import upgrade
from loaderbench.core.uncertainty import DEFAULT_BETWEEN_NOISE
from loaderbench.report.aggregate import aggregate, cells_table, seed_table_frame
from loaderbench.report.columns import SEED_COLUMNS, read_table, table_csv
from tests.conftest import REPO

BASELINE = {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128, "precision": "fp32"}


def row(loader, tier, gpus, sps, repeat=0, batch=128, precision="fp32", status="ok", reason=None, parallel="dp"):
    return {
        "cell_id": f"{loader}_{tier}_g{gpus}_b{batch}_{precision}_{parallel}_r{repeat}",
        "loader": loader,
        "model": "mobilenet_v2",
        "tier": tier,
        "gpus": gpus,
        "batch_size": batch,
        "precision": precision,
        "parallel": parallel,
        "repeat": repeat,
        "status": status,
        "reason": reason,
        "time_s": 60.0 if status == "ok" else None,
        "steps": sps * 60 / (batch * gpus) if status == "ok" else None,
        "samples_per_s": sps if status == "ok" else None,
        "data_wait_ms": 1.0,
        "compute_ms": 2.0,
        "data_wait_fraction": 0.1,
        "half_ratio": 1.0,
        "peak_gpu_mem_mb": None,
        "device": "cuda",
        "workers": 8,
        "warnings": "",
        "run": "run-1",
        "compare_group": "run run-1",
    }


def table(rows):
    return cells_table(pd.DataFrame(rows), BASELINE).set_index(["loader", "tier", "gpus", "batch_size", "precision"])


def test_seed_columns_come_first_with_exact_names():
    t = cells_table(pd.DataFrame([row("torchvision", "hdd", 1, 100.0)]), BASELINE)
    assert list(t.columns[: len(SEED_COLUMNS)]) == SEED_COLUMNS
    written = pd.read_csv(io.StringIO(table_csv(t)))
    assert list(written.columns[: len(SEED_COLUMNS)]) == [
        "Dataloader",
        "Disk",
        "GPU",
        "Batch size",
        "Time(s)",
        "Steps",
        "Samples/s",
        "Speed",
        "GPU Efficiency",
    ]
    assert "Precision" in written and "Data wait (ms/step)" in written and "AU" in written
    assert read_table(io.StringIO(table_csv(t))).columns.tolist() == t.columns.tolist()  # the labels map back


def test_speed_is_relative_to_the_baseline_cell():
    t = table(
        [row("torchvision", "hdd", 1, 200.0), row("torchvision", "ssd", 1, 500.0), row("opencv", "hdd", 2, 700.0)]
    )
    assert t.loc[("torchvision", "hdd", 1, 128, "fp32"), "speed"] == pytest.approx(1.0)
    assert t.loc[("torchvision", "ssd", 1, 128, "fp32"), "speed"] == pytest.approx(2.5)
    assert t.loc[("opencv", "hdd", 2, 128, "fp32"), "speed"] == pytest.approx(3.5)


def test_gpu_efficiency_uses_the_same_groups_one_gpu_cell():
    t = table(
        [
            row("torchvision", "hdd", 1, 200.0),
            row("torchvision", "hdd", 2, 300.0),
            row("torchvision", "hdd", 4, 280.0),
            row("torchvision", "ssd", 1, 400.0),
            row("torchvision", "ssd", 4, 1600.0),
        ]
    )
    assert t.loc[("torchvision", "hdd", 2, 128, "fp32"), "gpu_efficiency"] == pytest.approx(300 / (2 * 200))
    assert t.loc[("torchvision", "hdd", 4, 128, "fp32"), "gpu_efficiency"] == pytest.approx(280 / (4 * 200))
    assert t.loc[("torchvision", "ssd", 4, 128, "fp32"), "gpu_efficiency"] == pytest.approx(1.0)


def test_dali_mc_efficiency_is_against_dali_sc_one_gpu():
    t = table(
        [
            row("torchvision", "hdd", 1, 100.0),
            row("dali-sc", "ssd", 1, 1000.0),
            row("dali-sc", "ssd", 2, 1500.0),
            row("dali-mc", "ssd", 2, 1800.0),
            row("dali-mc", "ssd", 4, 3000.0),
        ]
    )
    assert t.loc[("dali-mc", "ssd", 2, 128, "fp32"), "gpu_efficiency"] == pytest.approx(1800 / (2 * 1000))
    assert t.loc[("dali-mc", "ssd", 4, 128, "fp32"), "gpu_efficiency"] == pytest.approx(3000 / (4 * 1000))
    assert t.loc[("dali-sc", "ssd", 2, 128, "fp32"), "gpu_efficiency"] == pytest.approx(0.75)


def test_repeats_give_median_min_max_and_flag_spread():
    t = table([row("torchvision", "hdd", 1, v, repeat=i) for i, v in enumerate([100.0, 104.0, 120.0])])
    r = t.loc[("torchvision", "hdd", 1, 128, "fp32")]
    assert r["samples_per_s"] == 104.0 and r["samples_per_s_min"] == 100.0 and r["samples_per_s_max"] == 120.0
    assert r["spread"] == pytest.approx(20 / 104) and bool(r["spread_flag"]) and r["repeats"] == 3
    t2 = table([row("torchvision", "hdd", 1, v, repeat=i) for i, v in enumerate([100.0, 101.0, 102.0])])
    assert not bool(t2.loc[("torchvision", "hdd", 1, 128, "fp32"), "spread_flag"])


def test_skipped_and_failed_cells_keep_their_reason_and_have_no_numbers():
    t = table(
        [
            row("torchvision", "hdd", 1, 100.0),
            row("torchvision", "hdd", 4, 0, status="skipped", reason="cell needs 4 GPUs; this host has 1"),
            row("opencv", "hdd", 1, 0, status="failed", reason="out of memory: CUDA out of memory"),
            row("opencv", "ssd", 1, 90.0, repeat=0),
            row("opencv", "ssd", 1, 0, repeat=1, status="failed", reason="boom"),
        ]
    )
    sk = t.loc[("torchvision", "hdd", 4, 128, "fp32")]
    assert sk["status"] == "skipped" and "needs 4 GPUs" in sk["reason"] and math.isnan(sk["samples_per_s"])
    assert math.isnan(sk["speed"]) and math.isnan(sk["gpu_efficiency"])
    assert t.loc[("opencv", "hdd", 1, 128, "fp32"), "status"] == "failed"
    partial = t.loc[("opencv", "ssd", 1, 128, "fp32")]
    assert partial["status"] == "partial" and partial["repeats_ok"] == 1 and partial["samples_per_s"] == 90.0


def test_missing_baseline_gives_no_speed_rather_than_a_wrong_one():
    t = table([row("opencv", "ssd", 1, 100.0)])
    assert math.isnan(t.loc[("opencv", "ssd", 1, 128, "fp32"), "speed"])


def test_au_is_against_the_synthetic_cell_of_the_same_gpus_batch_and_precision_on_any_tier():
    t = table(
        [
            row("synthetic", "hdd", 1, 1000.0),
            row("synthetic", "hdd", 1, 2000.0, precision="amp"),
            row("dali-sc", "ssd", 1, 950.0),
            row("dali-sc", "ssd", 1, 1500.0, precision="amp"),
            row("torchvision", "hdd", 1, 250.0),
            row("opencv", "hdd", 1, 300.0, batch=256),
        ]
    )
    assert t.loc[("synthetic", "hdd", 1, 128, "fp32"), "au"] == pytest.approx(1.0)
    assert t.loc[("dali-sc", "ssd", 1, 128, "fp32"), "au"] == pytest.approx(0.95)
    assert t.loc[("dali-sc", "ssd", 1, 128, "amp"), "au"] == pytest.approx(0.75)
    assert t.loc[("torchvision", "hdd", 1, 128, "fp32"), "au"] == pytest.approx(0.25)
    assert math.isnan(t.loc[("opencv", "hdd", 1, 256, "fp32"), "au"])  # no synthetic cell at batch 256


def test_efficiency_and_au_compare_within_the_same_parallel_mode():
    t = cells_table(
        pd.DataFrame(
            [
                row("torchvision", "hdd", 1, 100.0),
                row("synthetic", "hdd", 1, 400.0),
                row("synthetic", "hdd", 1, 500.0, parallel="ddp"),
                row("dali-sc", "ssd", 1, 300.0),
                row("dali-sc", "ssd", 1, 350.0, parallel="ddp"),
                row("dali-mc", "ssd", 2, 500.0),
                row("dali-mc", "ssd", 2, 650.0, parallel="ddp"),
            ]
        ),
        BASELINE,
    ).set_index(["loader", "tier", "gpus", "parallel"])
    assert t.loc[("dali-mc", "ssd", 2, "dp"), "gpu_efficiency"] == pytest.approx(500 / (2 * 300))
    assert t.loc[("dali-mc", "ssd", 2, "ddp"), "gpu_efficiency"] == pytest.approx(650 / (2 * 350))
    assert t.loc[("dali-sc", "ssd", 1, "ddp"), "au"] == pytest.approx(350 / 500)
    assert t.loc[("dali-sc", "ssd", 1, "dp"), "au"] == pytest.approx(300 / 400)
    assert t.loc[("torchvision", "hdd", 1, "dp"), "speed"] == pytest.approx(1.0)


def test_peak_memory_of_the_main_card_and_the_others_are_kept_apart():
    from loaderbench.report.aggregate import repeats_table

    rec = {
        "cell_id": "x",
        "status": "ok",
        "spec": {
            "loader": "dali-sc",
            "tier": "ssd",
            "gpus": 2,
            "batch_size": 128,
            "precision": "fp32",
            "parallel": "dp",
            "repeat": 0,
        },
        "metrics": {"peak_gpu_mem_mb": [9000.0, 4000.0], "samples_per_s": 10.0, "time_s": 1.0, "steps": 1},
    }
    rec = upgrade(rec)  # a record as `records.read_record` reads it
    t = cells_table(repeats_table([rec]), BASELINE)
    assert t.loc[0, "peak_gpu_mem_main_mb"] == 9000.0 and t.loc[0, "peak_gpu_mem_others_mb"] == 4000.0
    assert t.loc[0, "peak_gpu_mem_mb"] == 9000.0


def test_an_au_above_the_ceiling_is_flagged_implausible_and_others_are_not():
    t = table([row("synthetic", "hdd", 1, 1000.0), row("dali-sc", "ssd", 1, 1100.0), row("dali-cpu", "ssd", 1, 1040.0)])
    assert (
        "implausible: AU 1.10 > 1.05 (ceiling or cell disturbed)"
        in t.loc[("dali-sc", "ssd", 1, 128, "fp32"), "warnings"]
    )
    assert "implausible" not in str(t.loc[("dali-cpu", "ssd", 1, 128, "fp32"), "warnings"])


def test_a_cells_interval_comes_from_its_repeats_else_its_window_widened_by_the_runs_noise():
    """opencv's 3 repeats give the run's noise between processes (relative sd 2%) and their own interval;
    torchvision's single window of +-1% is widened by that noise."""
    reps = [row("opencv", "ram", 1, v, repeat=i) for i, v in enumerate([98.0, 100.0, 102.0])]
    one = row("torchvision", "hdd", 1, 100.0)
    one.update(window_halfwidth=0.01, converged=True, contended=True)
    t = table([*reps, one])
    op, tv = t.loc[("opencv", "ram", 1, 128, "fp32")], t.loc[("torchvision", "hdd", 1, 128, "fp32")]
    assert op["halfwidth_basis"] == "3 repeats" and op["halfwidth"] == pytest.approx(4.303 * 2 / math.sqrt(3) / 100)
    assert (
        tv["halfwidth"] == pytest.approx(math.hypot(0.01, 1.96 * 0.02))
        and "noise between processes (2.0%)" in tv["halfwidth_basis"]
    )
    assert bool(tv["contended"]) and bool(tv["converged"]) and not bool(op["contended"])
    alone = table([one])  # no repeated cell: the window's interval widened by the default noise, said so
    assert alone.iloc[0]["halfwidth"] == pytest.approx(math.hypot(0.01, 1.96 * DEFAULT_BETWEEN_NOISE))
    assert "default noise between processes (2.4%: no cell of this run was repeated" in alone.iloc[0]["halfwidth_basis"]


def test_speed_efficiency_and_au_divide_only_within_one_comparison_group():
    """Cells of two comparison groups (two machines): a ratio whose two cells come from different groups is '-', and
    the row says why; within a group everything divides as before. A configuration whose repeats span groups divides
    nothing."""
    a = lambda *args, **kw: {**row(*args, **kw), "run": "run-a", "compare_group": "group-a"}
    b = lambda *args, **kw: {**row(*args, **kw), "run": "run-b", "compare_group": "group-b"}
    t = table(
        [
            a("torchvision", "hdd", 1, 200.0),
            a("synthetic", "hdd", 1, 1000.0),
            a("opencv", "hdd", 1, 400.0),
            b("opencv", "hdd", 2, 700.0),
            b("torchvision", "ssd", 1, 300.0),
            a("dali-cpu", "hdd", 1, 500.0, repeat=0),
            b("dali-cpu", "hdd", 1, 520.0, repeat=1),
        ]
    )
    same = t.loc[("opencv", "hdd", 1, 128, "fp32")]
    assert same["speed"] == pytest.approx(2.0) and same["au"] == pytest.approx(0.4) and same["not_divided"] == ""
    other = t.loc[("opencv", "hdd", 2, 128, "fp32")]  # its 1-GPU cell and the baseline are group a's
    assert math.isnan(other["speed"]) and math.isnan(other["gpu_efficiency"])
    assert "Speed: the baseline cell is not comparable (measured on another boot" in other["not_divided"]
    assert "GPU Efficiency: the 1-GPU cell is not comparable" in other["not_divided"]
    assert "synthetic ceiling" not in other["not_divided"]  # no 2-GPU ceiling at all: AU is '-' for want of one
    ssd = t.loc[("torchvision", "ssd", 1, 128, "fp32")]
    assert math.isnan(ssd["speed"]) and math.isnan(ssd["au"]) and ssd["gpu_efficiency"] == pytest.approx(1.0)
    mixed = t.loc[("dali-cpu", "hdd", 1, 128, "fp32")]
    assert mixed["samples_per_s"] == pytest.approx(510.0) and mixed["compare_group"].startswith("several: ")
    assert mixed["run"] == "run-a, run-b"
    assert all(math.isnan(mixed[c]) for c in ("speed", "gpu_efficiency", "au"))
    assert mixed["not_divided"] == "its repeats come from several boots, codes or stacks"


def test_an_au_above_one_is_implausible_only_beyond_its_interval():
    """The ceiling and two loaders, each with 3 repeats: dali-sc at 1.03 of the ceiling with tight repeats lies above 1
    beyond its interval; opencv at 1.08 with repeats 10% apart does not, though it is over 1.05."""
    t = table(
        [
            *[row("synthetic", "ssd", 1, v, repeat=i) for i, v in enumerate([999.0, 1000.0, 1001.0])],
            *[row("dali-sc", "ssd", 1, v, repeat=i) for i, v in enumerate([1020.0, 1030.0, 1040.0])],
            *[row("opencv", "ssd", 1, v, repeat=i) for i, v in enumerate([1030.0, 1080.0, 1130.0])],
        ]
    )
    tight, wide = t.loc[("dali-sc", "ssd", 1, 128, "fp32")], t.loc[("opencv", "ssd", 1, 128, "fp32")]
    assert tight["au"] == pytest.approx(1.03) and wide["au"] == pytest.approx(1.08)
    assert (
        "implausible: AU 1.03 [1.01, 1.05] lies above 1 beyond its interval: the loader delivers more than the "
        "compute ceiling; check its batches and the ceiling cell" in tight["warnings"]
    )
    assert "implausible" not in str(wide["warnings"])


def test_the_loaders_workers_and_threads_come_from_its_records():
    from loaderbench.report.aggregate import repeats_table

    def rec(loader, metrics):
        return upgrade(
            {
                "cell_id": f"{loader}_ssd_g1_b128_fp32_dp_r0",
                "status": "ok",
                "spec": {
                    "loader": loader,
                    "tier": "ssd",
                    "gpus": 1,
                    "batch_size": 128,
                    "precision": "fp32",
                    "parallel": "dp",
                    "repeat": 0,
                },
                "metrics": {"samples_per_s": 10.0, "time_s": 1.0, "steps": 1, **metrics},
            }
        )

    t = cells_table(
        repeats_table(
            [
                rec("torchvision", {"workers": 3, "loader_info": {"workers": 3, "prefetch_batches": 6}}),
                rec("dali-cpu", {"workers": None, "loader_info": {"threads": 15, "prefetch_batches": 2}}),
                rec("fast-io", {"workers": None, "loader_info": {"plugin": "fast_io:build", "prefetch_batches": 0}}),
            ]
        ),
        BASELINE,
    ).set_index("loader")
    assert t.loc["torchvision", "workers"] == 3 and math.isnan(t.loc["torchvision", "loader_threads"])
    assert math.isnan(t.loc["dali-cpu", "workers"]) and t.loc["dali-cpu", "loader_threads"] == 15
    assert math.isnan(t.loc["fast-io", "workers"]) and math.isnan(t.loc["fast-io", "loader_threads"])


def test_the_seed_table_gives_samples_speed_and_efficiency_with_their_intervals(tmp_path):
    """On one H200 run's records: every ratio lies inside its own interval, a cell divided by itself is exactly 1,
    and dali-mc's GPU Efficiency (divided by dali-sc's 1-GPU cell) has an interval of two measurements."""
    run = REPO / "docs/results/2026-12-02-h200/seed-1gpu"
    config = json.loads((run / "config.json").read_text())
    t = aggregate(sorted((run / "cells").glob("*.json")), config["baseline"], 0.05, tmp_path)
    for col in ("au", "speed", "gpu_efficiency"):
        known = t[t[f"{col}_low"].notna()]
        assert len(known) and (known[f"{col}_low"] <= known[col]).all() and (known[col] <= known[f"{col}_high"]).all()
    one = t[(t["loader"] == "dali-sc") & (t["gpus"] == 1)].iloc[0]
    assert one["gpu_efficiency_low"] == one["gpu_efficiency_high"] == 1.0
    mc = t[(t["loader"] == "dali-mc") & t["halfwidth"].notna()].iloc[0]
    assert mc["gpu_efficiency_low"] < mc["gpu_efficiency"] < mc["gpu_efficiency_high"]
    seed = seed_table_frame(t).set_index(["Dataloader", "Disk", "Batch size", "Precision"])
    row = seed.loc[("dali-mc", "ram", 256, "amp")]
    assert re.fullmatch(r"\d+\.\d \(\+-\d+\.\d%\)", row["Samples/s"])
    # the table keeps dali-mc's 1-GPU ratio; the seed table shows GPU Efficiency only where it compares n GPUs with 1
    assert row["GPU Efficiency"] == "- (1 GPU)"


def test_the_seed_table_flags_what_the_diagnosis_holds_against_a_row_and_says_why_a_number_is_missing():
    """Never a bare number the diagnosis refuses: a contended, implausible or unconverged row says so in its Flags; a
    single window without an interval says "one window", a single repeat no spread, the reference its Speed, and
    GPU Efficiency stays blank at 1 GPU, where it compares nothing."""
    t = cells_table(
        pd.DataFrame(
            [row("torchvision", "hdd", 1, 100.0), row("opencv", "hdd", 1, 300.0), row("dali-cpu", "hdd", 2, 500.0)]
        ),
        BASELINE,
    )
    at = t.set_index("loader").index
    t.loc[at == "opencv", ["contended", "warnings", "au"]] = [True, "implausible: AU 4.73 [3.02, 7.39]", 4.73]
    t.loc[at == "dali-cpu", "converged"] = False
    seed = seed_table_frame(t).set_index("Dataloader")
    assert seed.loc["opencv", "Flags"] == "contended; implausible: AU 4.73 > 1"
    assert seed.loc["dali-cpu", "Flags"] == "window not converged" and seed.loc["torchvision", "Flags"] == ""
    assert seed.loc["torchvision", "Speed"] == "1.00 (reference)"
    assert (
        seed.loc["torchvision", "GPU Efficiency"] == "- (1 GPU)"
        and seed.loc["dali-cpu", "GPU Efficiency"] != "- (1 GPU)"
    )
    assert seed.loc["torchvision", "Spread"] == "- (one repeat)"
    assert seed.loc["torchvision", "Samples/s"] == "100.0 (one window)"
    assert list(seed.columns).index("Flags") == list(seed.columns).index("Spread") + 1
