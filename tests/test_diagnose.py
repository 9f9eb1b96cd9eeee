"""Stall attribution, bottleneck labels and recommendations on made-up cells whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loaderbench.diagnose import attribute, diagnose, recommendations, render_markdown


def cell(loader, disk, step_ms, kind="path", gpus=1, batch=128, precision="fp32", parallel="dp", wait_ms=None,
         device="cuda", steps=100):  # fmt: skip
    """One row of the cells table for a cell whose step took `step_ms` (median over repeats)."""
    return {
        "loader": loader, "tier": disk, "gpus": gpus, "batch_size": batch, "precision": precision,
        "parallel": parallel, "tier_kind": kind, "time_s": steps * step_ms / 1000, "steps": steps,
        "samples_per_s": 1000 * gpus * batch / step_ms, "data_wait_ms": wait_ms if wait_ms is not None else 0.0,
        "device": device, "cpu_pct": 50.0, "gpu_util_pct": np.nan, "disk_read_mb_s": 120.0, "pcie_rx_mb_s": np.nan,
        "status": "ok",
    }  # fmt: skip


def table(rows):
    t = pd.DataFrame(rows)
    synth = t[t["loader"] == "synthetic"].set_index(["gpus", "batch_size", "precision", "parallel"])["samples_per_s"]
    t["au"] = [r["samples_per_s"] / synth.get((r["gpus"], r["batch_size"], r["precision"], r["parallel"]), np.nan)
               for _, r in t.iterrows()]  # fmt: skip
    return t


GRID = table([
    cell("synthetic", "hdd", 100.0),
    cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),  # prep stall 150
    cell("torchvision", "hdd", 650.0, wait_ms=550.0),  # + fetch stall 400: I/O-bound
    cell("dali-sc", "ram", 130.0, kind="ram", wait_ms=30.0),  # GPU decode: prep stall 30
    cell("dali-sc", "hdd", 140.0, wait_ms=40.0),  # fetch 10 < prep 30: GPU-prep-bound
    cell("dali-cpu", "ram", 104.0, kind="ram", wait_ms=2.0),  # AU 0.96: GPU-bound
    cell("opencv", "ram", 200.0, kind="ram", wait_ms=5.0),  # batches ready, step +100: transfer-bound
])  # fmt: skip


def row(d, loader, disk):
    return d[(d["loader"] == loader) & (d["tier"] == disk)].iloc[0]


def test_attribution_splits_compute_prep_and_fetch():
    a = attribute(GRID)
    tv_hdd, tv_ram = row(a, "torchvision", "hdd"), row(a, "torchvision", "ram")
    assert tv_hdd["compute_only_ms"] == pytest.approx(100.0)
    assert tv_hdd["prep_stall_ms"] == pytest.approx(150.0)
    assert tv_hdd["fetch_stall_ms"] == pytest.approx(400.0)
    assert tv_ram["fetch_stall_ms"] == pytest.approx(0.0)
    assert tv_hdd["compute_only_ms"] + tv_hdd["prep_stall_ms"] + tv_hdd["fetch_stall_ms"] == pytest.approx(650.0)
    assert row(a, "synthetic", "hdd")["prep_stall_ms"] == 0.0


def test_labels_name_the_known_bottleneck_with_evidence():
    d = diagnose(GRID)
    assert row(d, "torchvision", "hdd")["bottleneck"] == "I/O-bound"
    assert "fetch stall 400.0 ms/step" in row(d, "torchvision", "hdd")["evidence"]
    assert row(d, "torchvision", "ram")["bottleneck"] == "CPU-prep-bound"
    assert row(d, "dali-sc", "hdd")["bottleneck"] == "GPU-prep-bound"
    assert row(d, "dali-cpu", "ram")["bottleneck"] == "GPU-bound"
    assert row(d, "opencv", "ram")["bottleneck"] == "transfer-bound"
    assert row(d, "synthetic", "hdd")["bottleneck"] == "GPU-bound"


def test_cpu_device_is_compute_bound_and_missing_pieces_are_said():
    t = table([cell("synthetic", "ssd", 100.0, device="cpu"), cell("torchvision", "ssd", 102.0, device="cpu"),
               cell("opencv", "ssd", 300.0, device="cpu", wait_ms=200.0)])  # fmt: skip
    d = diagnose(t)
    assert row(d, "torchvision", "ssd")["bottleneck"] == "compute-bound"
    # no RAM tier: prep and fetch cannot be separated, and the evidence says so
    assert row(d, "opencv", "ssd")["bottleneck"] == "CPU-prep-bound"
    assert "no RAM tier" in row(d, "opencv", "ssd")["evidence"]
    # batches ready but the step slower than compute: on the CPU the workers share the cores, no bus is crossed
    shared = diagnose(table([cell("synthetic", "ssd", 100.0, device="cpu"),
                             cell("dali-cpu", "ssd", 130.0, device="cpu", wait_ms=1.0)]))  # fmt: skip
    assert row(shared, "dali-cpu", "ssd")["bottleneck"] == "CPU-prep-bound"
    cpu_nvjpeg = diagnose(table([cell("synthetic", "ssd", 100.0, device="cpu"),
                                 cell("nvjpeg", "ssd", 200.0, device="cpu", wait_ms=90.0)]))  # fmt: skip
    assert row(cpu_nvjpeg, "nvjpeg", "ssd")["bottleneck"] == "CPU-prep-bound"  # no GPU: it decodes on the CPU
    assert "share the CPU" in row(shared, "dali-cpu", "ssd")["evidence"]
    lonely = diagnose(table([cell("torchvision", "ssd", 100.0)]))
    assert lonely.iloc[0]["bottleneck"] == "unknown" and "synthetic" in lonely.iloc[0]["evidence"]


def test_recommendations_are_computed_from_the_cells():
    rows = [
        cell("synthetic", "hdd", 100.0), cell("synthetic", "hdd", 180.0, batch=256),
        cell("torchvision", "hdd", 650.0, wait_ms=550.0), cell("torchvision", "hdd", 1300.0, batch=256, wait_ms=1100.0),
        cell("torchvision", "ssd", 260.0, wait_ms=160.0), cell("dali-sc", "hdd", 140.0, wait_ms=40.0),
        cell("torchvision", "hdd", 600.0, gpus=2, wait_ms=500.0),
    ]  # fmt: skip
    d = diagnose(table(rows))
    recs = recommendations(d, {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128,
                               "precision": "fp32", "parallel": "dp"})  # fmt: skip
    text = "\n".join(r["topic"] + ": " + r["text"] for r in recs)
    # loader: dali-sc 914 samples/s vs torchvision 197 on hdd = 4.64x
    assert "On hdd, use dali-sc" in text and "4.64x torchvision" in text
    # storage: ssd 2.50x hdd for torchvision
    assert "torchvision: ssd instead of hdd gives 2.50x" in text
    # batch: 256 vs 128 on hdd is 1.00x, and the loader sets the pace (no RAM tier here: prep and fetch together)
    assert "torchvision on hdd: batch 256 vs 128 gives 1.00x, barely matters: the loader sets the pace" in text
    assert "synthetic on hdd: batch 256 vs 128 gives 1.11x, worth it" in text
    # GPUs: 2 GPUs give 2*1000*128/600 / (1000*128/650) = 2.17x > 1.6 -> pays off
    assert "2 GPUs give 2.17x one GPU" in text and "pays off" in text
    assert all(r["cells"] for r in recs)
    close = recommendations(diagnose(table([cell("synthetic", "ram", 100.0, kind="ram"),
                                            cell("torchvision", "ram", 104.0, kind="ram"),
                                            cell("opencv", "ram", 101.0, kind="ram")])),
                            {"loader": "torchvision", "gpus": 1, "batch_size": 128, "precision": "fp32"})  # fmt: skip
    assert "On ram, the loader hardly matters: the best, opencv, is 1.03x torchvision" in close[0]["text"]
    md = render_markdown(d, recs)
    assert "| torchvision/hdd/g1/b128/fp32/dp |" in md and "CPU-prep-bound" in md and "# Recommendations" in md
