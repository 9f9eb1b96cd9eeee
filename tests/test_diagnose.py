"""Stall attribution, bottleneck labels and recommendations on made-up cells whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loaderbench.report.diagnose import attribute, diagnose, render_markdown
from loaderbench.report.recommend import compare, recommendations
from tests.conftest import cells_with_au as table


def cell(
    loader,
    disk,
    step_ms,
    kind="path",
    gpus=1,
    batch=128,
    precision="fp32",
    parallel="dp",
    wait_ms=None,
    device="cuda",
    steps=100,
    halfwidth=0.02,
    repeats=3,
    contended=False,
    converged=True,
):
    """One row of the cells table for a cell whose step took `step_ms` (median over repeats), its rate known to
    +-`halfwidth` (95%)."""
    return {
        "loader": loader,
        "model": "mobilenet_v2",
        "tier": disk,
        "gpus": gpus,
        "batch_size": batch,
        "precision": precision,
        "parallel": parallel,
        "tier_kind": kind,
        "time_s": steps * step_ms / 1000,
        "steps": steps,
        "samples_per_s": 1000 * gpus * batch / step_ms,
        "data_wait_ms": wait_ms if wait_ms is not None else 0.0,
        "device": device,
        "cpu_pct": 50.0,
        "gpu_util_pct": np.nan,
        "disk_read_mb_s": 120.0,
        "pcie_rx_mb_s": np.nan,
        "status": "ok",
        "halfwidth": halfwidth,
        "repeats_ok": repeats,
        "contended": contended,
        "converged": converged,
    }


GRID = table(
    [
        cell("synthetic", "hdd", 100.0),
        cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),  # prep stall 150
        cell("torchvision", "hdd", 650.0, wait_ms=550.0),  # + fetch stall 400: I/O-bound
        cell("dali-sc", "ram", 130.0, kind="ram", wait_ms=30.0),  # GPU decode: prep stall 30
        cell("dali-sc", "hdd", 140.0, wait_ms=40.0),  # fetch 10 < prep 30: GPU-prep-bound
        cell("dali-cpu", "ram", 104.0, kind="ram", wait_ms=2.0),  # AU 0.96: GPU-bound
        cell("opencv", "ram", 200.0, kind="ram", wait_ms=5.0),  # batches ready, step +100: transfer-bound
    ]
)


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


def test_a_prep_bound_shard_loader_that_decodes_on_the_gpu_is_gpu_prep_bound():
    """dali-wds decodes on the GPU as dali-sc does: prep-bound on a GPU, the prep is the GPU's; without one, the CPU's."""
    for device, where in (("cuda", "GPU"), ("cpu", "CPU")):
        d = diagnose(
            table(
                [
                    cell("synthetic", "hdd", 100.0, device=device),
                    cell("dali-wds", "ram", 130.0, kind="ram", wait_ms=30.0, device=device),
                    cell("dali-wds", "hdd", 140.0, wait_ms=40.0, device=device),  # fetch 10 < prep 30
                ]
            )
        )
        assert row(d, "dali-wds", "hdd")["bottleneck"] == f"{where}-prep-bound"


def test_a_cell_whose_batches_were_ready_is_not_io_bound_however_slower_than_ram():
    """On a CPU device a cold tier's reads cost the cores the training runs on: the step is slower than from RAM,
    yet it never waited for a batch. That is the loader taking the CPU, not the disk limiting it."""
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
                cell("torchvision", "ram", 105.0, kind="ram", wait_ms=4.0, device="cpu"),
                cell("torchvision", "local", 125.0, wait_ms=5.0, device="cpu"),  # fetch stall 20 ms, waits 4% of a step
                cell("torchvision", "hdd", 400.0, wait_ms=290.0, device="cpu"),  # waits 73%: the disk
            ]
        )
    )
    assert row(d, "torchvision", "local")["bottleneck"] == "CPU-prep-bound"
    assert "batches were ready" in row(d, "torchvision", "local")["evidence"]
    assert row(d, "torchvision", "hdd")["bottleneck"] == "I/O-bound"


def test_cpu_device_is_compute_bound_and_missing_pieces_are_said():
    t = table(
        [
            cell("synthetic", "ssd", 100.0, device="cpu"),
            cell("torchvision", "ssd", 102.0, device="cpu"),
            cell("opencv", "ssd", 300.0, device="cpu", wait_ms=200.0),
        ]
    )
    d = diagnose(t)
    assert row(d, "torchvision", "ssd")["bottleneck"] == "compute-bound"
    # no RAM tier: prep and fetch cannot be separated, and the evidence says so
    assert row(d, "opencv", "ssd")["bottleneck"] == "CPU-prep-bound"
    assert "no RAM tier" in row(d, "opencv", "ssd")["evidence"]
    # batches ready but the step slower than compute: on the CPU the workers share the cores, no bus is crossed
    shared = diagnose(
        table(
            [cell("synthetic", "ssd", 100.0, device="cpu"), cell("dali-cpu", "ssd", 130.0, device="cpu", wait_ms=1.0)]
        )
    )
    assert row(shared, "dali-cpu", "ssd")["bottleneck"] == "CPU-prep-bound"
    cpu_nvjpeg = diagnose(
        table([cell("synthetic", "ssd", 100.0, device="cpu"), cell("nvjpeg", "ssd", 200.0, device="cpu", wait_ms=90.0)])
    )
    assert row(cpu_nvjpeg, "nvjpeg", "ssd")["bottleneck"] == "CPU-prep-bound"  # no GPU: it decodes on the CPU
    assert "share the CPU" in row(shared, "dali-cpu", "ssd")["evidence"]
    lonely = diagnose(table([cell("torchvision", "ssd", 100.0)]))
    assert lonely.iloc[0]["bottleneck"] == "unknown" and "synthetic" in lonely.iloc[0]["evidence"]


def test_recommendations_are_computed_from_the_cells():
    rows = [
        cell("synthetic", "hdd", 100.0),
        cell("synthetic", "hdd", 180.0, batch=256),
        cell("torchvision", "hdd", 650.0, wait_ms=550.0),
        cell("torchvision", "hdd", 1300.0, batch=256, wait_ms=1100.0),
        cell("torchvision", "ssd", 260.0, wait_ms=160.0),
        cell("dali-sc", "hdd", 140.0, wait_ms=40.0),
        cell("torchvision", "hdd", 600.0, gpus=2, wait_ms=500.0),
    ]
    d = diagnose(table(rows))
    recs = recommendations(
        d, {"loader": "torchvision", "tier": "hdd", "gpus": 1, "batch_size": 128, "precision": "fp32", "parallel": "dp"}
    )
    text = "\n".join(r["topic"] + ": " + r["text"] for r in recs)
    # loader: dali-sc 914 samples/s vs torchvision 197 on hdd = 4.64x, each known to +-2%
    assert "On hdd, use dali-sc: 914 samples/s, 4.64x [4.51, 4.77] torchvision" in text
    # storage: ssd 2.50x hdd for torchvision
    assert "torchvision: ssd instead of hdd gives 2.50x [2.43, 2.57]" in text and "worth it" in text
    # batch: 256 vs 128 on hdd is 1.00x, and the loader sets the pace (no RAM tier here: prep and fetch together)
    assert (
        "torchvision on hdd: batch 256 vs 128 gives 1.00x [0.97, 1.03], no measurable difference: the loader sets "
        "the pace"
    ) in text
    assert "synthetic on hdd: batch 256 vs 128 gives 1.11x [1.08, 1.14], a measurable gain" in text
    # GPUs: 2 GPUs give 2*1000*128/600 / (1000*128/650) = 2.17x > 1.6 -> pays off
    assert "2 GPUs give 2.17x [2.11, 2.23] one GPU" in text and "pays off" in text
    assert all(r["cells"] and r["interval"]["low"] < r["interval"]["high"] for r in recs)
    close = recommendations(
        diagnose(
            table(
                [
                    cell("synthetic", "ram", 100.0, kind="ram"),
                    cell("torchvision", "ram", 104.0, kind="ram"),
                    cell("opencv", "ram", 101.0, kind="ram"),
                ]
            )
        ),
        {"loader": "torchvision", "gpus": 1, "batch_size": 128, "precision": "fp32"},
    )
    assert "On ram, the loader hardly matters: the best, opencv, is 1.03x" in close[0]["text"]
    md = render_markdown(d, recs)
    assert "| torchvision/hdd/g1/b128/fp32/dp |" in md and "CPU-prep-bound" in md and "# Recommendations" in md


BASE = {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 128, "precision": "fp32"}


def test_equal_cells_within_their_noise_carry_no_recommendation():
    """Two batch sizes 6% apart, each measured once and known to +-8% (2 shared cores): inside the interval."""
    rows = [
        cell("synthetic", "ram", 100.0, kind="ram"),
        cell("torchvision", "ram", 200.0, kind="ram", halfwidth=0.08, repeats=1),
        cell("torchvision", "ram", 377.0, kind="ram", batch=256, halfwidth=0.08, repeats=1),
    ]
    rec = next(
        r
        for r in recommendations(diagnose(table(rows)), BASE)
        if r["topic"] == "batch size" and r["cells"][0].startswith("torchvision")
    )
    assert rec["verdict"] == "no measurable difference" and "no measurable difference" in rec["text"]
    assert "worth it" not in rec["text"] and "slower" not in rec["text"]
    assert rec["interval"]["low"] < 1 < rec["interval"]["high"]


def test_a_2x_difference_with_tight_repeats_is_recommended_with_its_interval():
    rows = [
        cell("synthetic", "ram", 100.0, kind="ram"),
        cell("torchvision", "ram", 200.0, kind="ram", halfwidth=0.01),
        cell("dali-cpu", "ram", 100.0, kind="ram", halfwidth=0.01),
    ]
    rec = next(r for r in recommendations(diagnose(table(rows)), BASE) if r["topic"] == "loader")
    assert rec["verdict"] == "measured" and rec["text"].startswith(
        "On ram, use dali-cpu: 1280 samples/s, 2.00x [1.97, 2.03]"
    )
    assert rec["interval"]["value"] == pytest.approx(2.0) and 1.96 < rec["interval"]["low"] < 2.0


def test_a_contended_or_unconverged_cell_measured_once_is_left_out_with_the_reason():
    rows = [
        cell("synthetic", "ram", 100.0, kind="ram"),
        cell("torchvision", "ram", 200.0, kind="ram"),
        cell("dali-cpu", "ram", 100.0, kind="ram", repeats=1, contended=True),
        cell("opencv", "ssd", 100.0, repeats=1, converged=False),
        cell("torchvision", "ssd", 200.0),
    ]
    recs = recommendations(diagnose(table(rows)), BASE)
    loader = [r for r in recs if r["topic"] == "loader"]
    assert loader[0]["verdict"] == "left out" and "dali-cpu/ram/g1/b128/fp32/dp was contended" in loader[0]["text"]
    assert (
        loader[1]["verdict"] == "left out"
        and "opencv/ssd/g1/b128/fp32/dp: its window did not converge" in loader[1]["text"]
    )
    assert "interval" not in loader[0]
    # the same contended cell with repeats: its median stands, with their interval
    rows[2] = cell("dali-cpu", "ram", 100.0, kind="ram", repeats=3, contended=True)
    assert (
        next(r for r in recommendations(diagnose(table(rows)), BASE) if r["topic"] == "loader")["verdict"] == "measured"
    )


def test_a_warm_cell_on_a_cold_tier_carries_no_verdict():
    """A cold-tier cell whose window read under 95% of its bytes from the device (the rest from the page cache) is
    left out of every comparison, with its share named; one that read from the device is compared."""
    from loaderbench.report.recommend import compare

    d = diagnose(
        table(
            [
                cell("synthetic", "ssd", 100.0),
                dict(cell("torchvision", "ssd", 250.0, wait_ms=150.0), cache="cold", device_read_share=0.62),
                dict(cell("dali-cpu", "ssd", 125.0, wait_ms=20.0), cache="cold", device_read_share=0.99),
                dict(cell("dali-cpu", "hdd", 600.0, wait_ms=500.0), cache="cold", device_read_share=1.0),
            ]
        )
    )
    q, why = compare(row(d, "dali-cpu", "ssd"), row(d, "torchvision", "ssd"))
    assert q is None and "torchvision/ssd/g1/b128/fp32/dp read only 62% of its bytes from the device" in why
    q, why = compare(row(d, "dali-cpu", "ssd"), row(d, "dali-cpu", "hdd"))
    assert why is None and q.value > 4
    recs = recommendations(d, {"loader": "torchvision", "gpus": 1, "batch_size": 128, "precision": "fp32"})
    assert [r["verdict"] for r in recs if r["topic"] == "loader"] == ["left out"]


def test_without_a_ram_cell_the_fetch_stall_is_taken_against_the_fastest_other_tier():
    """A study with no RAM tier for a configuration (the seed's table: local disk and HDD): a cell that waits for its
    HDD is I/O-bound against the local disk's cell, named as a lower bound; the fastest tier keeps prep and fetch
    together."""
    t = pd.DataFrame(
        [
            {
                "loader": "synthetic",
                "tier": "ram",
                "tier_kind": "ram",
                "gpus": 1,
                "batch_size": 128,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": 10.0,
                "steps": 400,
                "au": 1.0,
                "device": "cuda:0",
                "data_wait_ms": 0.0,
            },
            {
                "loader": "torchvision",
                "tier": "local",
                "tier_kind": "path",
                "gpus": 1,
                "batch_size": 128,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": 10.0,
                "steps": 200,
                "au": 0.5,
                "device": "cuda:0",
                "data_wait_ms": 13.0,
            },
            {
                "loader": "torchvision",
                "tier": "hdd",
                "tier_kind": "emulated",
                "gpus": 1,
                "batch_size": 128,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": 13.0,
                "steps": 10,
                "au": 0.02,
                "device": "cuda:0",
                "data_wait_ms": 1280.0,
            },
        ]
    ).assign(model="mobilenet_v2")
    d = diagnose(t).set_index("tier")
    assert d.loc["hdd", "bottleneck"] == "I/O-bound" and d.loc["hdd", "fetch_reference"] == "local"
    assert d.loc["hdd", "fetch_stall_ms"] == pytest.approx(1300.0 - 50.0)
    assert "from local (no RAM cell: a lower bound)" in d.loc["hdd", "evidence"]
    assert d.loc["local", "bottleneck"] == "CPU-prep-bound" and "no RAM tier" in d.loc["local", "evidence"]


def test_a_skipped_cell_on_another_tier_is_no_reference_and_breaks_nothing():
    """A tier that could not be measured (FUSE missing: the cell is `skipped`, no time) is not a read reference: the
    measured tier keeps prep and fetch together, and the skipped one is labelled from its status."""
    t = pd.DataFrame(
        [
            {
                "loader": "synthetic",
                "tier": "disk-a",
                "tier_kind": "path",
                "gpus": 1,
                "batch_size": 4,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": 1.0,
                "steps": 40,
                "au": 1.0,
                "device": "cpu",
                "data_wait_ms": 0.0,
                "status": "ok",
            },
            {
                "loader": "torchvision",
                "tier": "disk-a",
                "tier_kind": "path",
                "gpus": 1,
                "batch_size": 4,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": 2.0,
                "steps": 40,
                "au": 0.5,
                "device": "cpu",
                "data_wait_ms": 25.0,
                "status": "ok",
            },
            {
                "loader": "torchvision",
                "tier": "hdd",
                "tier_kind": "emulated",
                "gpus": 1,
                "batch_size": 4,
                "precision": "fp32",
                "parallel": "dp",
                "time_s": np.nan,
                "steps": np.nan,
                "au": np.nan,
                "device": "",
                "data_wait_ms": np.nan,
                "status": "skipped",
            },
        ]
    ).assign(model="mobilenet_v2")
    d = diagnose(t)
    d = d[d["loader"] == "torchvision"].set_index("tier")
    assert d.loc["disk-a", "fetch_reference"] == "" and np.isnan(d.loc["disk-a", "fetch_stall_ms"])
    assert d.loc["disk-a", "bottleneck"] != "unknown"
    assert d.loc["hdd", "bottleneck"] == "unknown" and "skipped" in d.loc["hdd", "evidence"]


def test_an_au_above_one_beyond_its_interval_is_implausible_and_given_no_cause():
    """A loader at 2.74x its ceiling (a plugin that timed smaller images than the ceiling's) cannot be explained: it is
    labelled implausible, with its AU's interval and what to check, never CPU-prep-bound or within 10% of the
    ceiling; no recommendation rests on it. An AU of 1.03 known to +-10% is within its interval of 1."""
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
                cell("fast-io", "ram", 36.5, kind="ram", device="cpu", wait_ms=1.0),
                cell("torchvision", "ram", 97.0, kind="ram", device="cpu", wait_ms=1.0, halfwidth=0.1),
                cell("opencv", "ram", 250.0, kind="ram", device="cpu", wait_ms=150.0),
            ]
        )
    )
    odd = row(d, "fast-io", "ram")
    assert odd["bottleneck"] == "implausible"
    assert odd["evidence"].startswith(
        "AU 2.74 [2.66, 2.82] lies above 1 beyond its interval: the loader delivers "
        "more than the compute ceiling; check its batches and the ceiling cell "
        "(synthetic/g1/b128/fp32/dp: is it the same work?)"
    )
    assert "workers" not in odd["evidence"] and "within 10%" not in odd["evidence"]
    assert row(d, "torchvision", "ram")["bottleneck"] == "compute-bound"
    recs = recommendations(d, BASE)
    loader = next(r for r in recs if r["topic"] == "loader")
    assert (
        loader["verdict"] == "left out"
        and "fast-io/ram/g1/b128/fp32/dp delivered more than its compute ceiling (AU 2.74, implausible)"
        in loader["text"]
    )


def test_ready_batches_on_the_cpu_blame_workers_only_for_a_loader_that_has_them():
    """Batches ready, the step 30% slower than compute on a CPU: the loader's workers or threads took the cores -
    said with their number where the records give it, by the loader's kind in a table without it - and a loader
    with neither (a plugin that makes its batches in the training's thread, or 0 workers) is left unexplained."""
    rows = [
        cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
        dict(cell("torchvision", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0), workers=2),
        dict(cell("dali-cpu", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0), loader_threads=4),
        cell("fast-io", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0),
        dict(cell("opencv", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0), workers=0),
        dict(cell("threaded", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0), loader_threads=8),
    ]
    d = diagnose(table(rows))
    assert row(d, "torchvision", "ram")["bottleneck"] == "CPU-prep-bound"
    assert "the loader's 2 worker processes share the CPU with the training" in row(d, "torchvision", "ram")["evidence"]
    assert "the loader's 4 threads share the CPU" in row(d, "dali-cpu", "ram")["evidence"]
    assert "the loader's 8 threads share the CPU" in row(d, "threaded", "ram")["evidence"]
    for loader in ("fast-io", "opencv"):
        r = row(d, loader, "ram")
        assert r["bottleneck"] == "unexplained" and "share the CPU" not in r["evidence"], r["evidence"]
        assert "the loader has no workers or threads beside the training" in r["evidence"]
    older = diagnose(
        table(
            [
                rows[0],
                cell("torchvision", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0),
                cell("dali-cpu", "ram", 130.0, kind="ram", device="cpu", wait_ms=1.0),
            ]
        )
    )
    assert "the loader's worker processes share" in row(older, "torchvision", "ram")["evidence"]
    assert "the loader's DALI threads share" in row(older, "dali-cpu", "ram")["evidence"]


PROBE = {"ram": (29770.0, 4369.0), "local": (7371.0, 1662.0), "hdd": (104.0, 138.0)}  # files/s, sequential MB/s


def probed(r: dict) -> dict:
    """A row with its tier's rates from the tier probe."""
    files_s, mb_s = PROBE[r["tier"]]
    return {**r, "tier_files_s": files_s, "tier_sequential_mb_s": mb_s}


def test_no_storage_advice_moves_to_a_slower_tier_or_away_from_a_compute_bound_cell():
    """dali-wds measured faster on the HDD than from RAM (both at AU about 1, tight intervals): the probe reads the
    HDD 30x slower, so the tier does not set its pace - no advice to move there. opencv is compute-bound on the local
    disk: no other tier is advised for it. torchvision, seek-bound on the HDD, is advised RAM."""
    d = diagnose(
        table(
            [
                probed(r)
                for r in [
                    cell("synthetic", "ram", 94.6, kind="ram", device="cpu"),
                    cell("dali-wds", "hdd", 95.3, device="cpu"),
                    cell("dali-wds", "ram", 107.3, kind="ram", device="cpu"),
                    cell("opencv", "local", 96.0, device="cpu"),
                    cell("opencv", "ram", 95.0, kind="ram", device="cpu"),
                    cell("torchvision", "hdd", 245.6, device="cpu", wait_ms=120.0),
                    cell("torchvision", "ram", 96.0, kind="ram", device="cpu"),
                ]
            ]
        )
    )
    storage = {r["cells"][0].split("/")[0]: r for r in recommendations(d, BASE) if r["topic"] == "storage"}
    wds = storage["dali-wds"]
    assert wds["verdict"] == "left out" and "interval" not in wds
    assert wds["text"] == (
        "left out: dali-wds ran faster on hdd (1343 samples/s) than on ram (1193), though the tier "
        "probe reads hdd slower (138 against 4369 MB/s streamed): the tier does not set its pace, "
        "so no move to hdd is advised"
    )
    assert storage["opencv"]["verdict"] == "left out"
    assert storage["opencv"]["text"] == (
        "left out: on local opencv is compute-bound (AU 0.99): the tier does not limit it, so no other tier is advised"
    )
    assert storage["torchvision"]["verdict"] == "measured"
    assert storage["torchvision"]["text"].startswith("torchvision: ram instead of hdd gives 2.56x")


def test_two_single_windows_differ_only_beyond_the_noise_between_processes():
    """opencv 6% faster than torchvision, each one window of +-2%: the windows alone would call it measured. Widened
    by the noise between processes - the default where the run repeated no cell (a table that left them unwidened
    too), the run's own where it repeated one - it is no measurable difference, or, with a run that measured
    0.5% between its processes, a measured one."""
    from loaderbench.report.aggregate import cells_table

    def record(loader, sps, repeat=0, window=0.02):
        return {
            "cell_id": f"{loader}_ram_g1_b128_fp32_dp_r{repeat}",
            "loader": loader,
            "tier": "ram",
            "gpus": 1,
            "batch_size": 128,
            "precision": "fp32",
            "parallel": "dp",
            "repeat": repeat,
            "status": "ok",
            "time_s": 60.0,
            "steps": sps * 60 / 128,
            "samples_per_s": sps,
            "data_wait_ms": 1.0,
            "compute_ms": 2.0,
            "device": "cpu",
            "tier_kind": "ram",
            "window_halfwidth": window,
            "converged": True,
            "contended": False,
            "warnings": "",
            "reason": None,
            "half_ratio": 1.0,
            "data_wait_fraction": 0.01,
            "model": "mobilenet_v2",
            "run": "run-1",
            "compare_group": "run run-1",
        }

    singles = [record("synthetic", 1100.0), record("torchvision", 1000.0), record("opencv", 1060.0)]

    def opencv_rec(repeats):
        d = diagnose(cells_table(pd.DataFrame(singles + repeats), BASE))
        return next(r for r in recommendations(d, BASE) if r["topic"] == "loader")

    alone = opencv_rec([])
    assert alone["verdict"] == "no measurable difference" and alone["interval"]["low"] < 1 < alone["interval"]["high"]
    quiet = opencv_rec([record("dali-cpu", v, repeat=i) for i, v in enumerate([995.0, 1000.0, 1005.0])])
    assert quiet["verdict"] == "measured" and 1.02 < quiet["interval"]["low"] < 1.06
    # a table written with the windows' intervals alone ('window only') is widened when compared
    q, _ = compare(
        dict(cell("opencv", "ram", 120.75, halfwidth=0.02, repeats=1), halfwidth_basis="window only"),
        dict(cell("torchvision", "ram", 128.0, halfwidth=0.02, repeats=1), halfwidth_basis="window only"),
    )
    assert q.value == pytest.approx(1.06, abs=1e-3) and not q.differs_from(1.0)
