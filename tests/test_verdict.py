"""The verdict on made-up cells whose answers are known: per GPU count and tier the reference's bottleneck, the best
measured fix with its interval (or why it is left out), how far to trust the group, and at most 12 lines of text."""

from __future__ import annotations

from test_diagnose import cell, table

from loaderbench.report.aggregate import seed_table_frame
from loaderbench.report.diagnose import diagnose
from loaderbench.report.rows import device_texts
from loaderbench.report.verdict import render_html, render_text, verdicts

BASELINE = {"loader": "torchvision", "gpus": 1, "batch_size": 128, "precision": "fp32", "parallel": "dp"}


def test_the_best_fix_is_measured_against_the_baseline_loader_with_its_interval():
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram"),
                cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
                cell("dali-cpu", "ram", 125.0, kind="ram", wait_ms=20.0),  # 2x torchvision, tight repeats
                cell("opencv", "ram", 200.0, kind="ram", wait_ms=100.0),
            ]
        )
    )
    (v,) = verdicts(d, BASELINE)
    assert (v["gpus"], v["tier"]) == (1, "ram")
    ref, fix = v["reference"], v["fix"]
    assert ref["what"] == "torchvision b128 fp32" and ref["bottleneck"] == "CPU-prep-bound"
    assert ref["au"] == 0.4 and ref["data_wait_ms"] == 150.0
    assert fix["verdict"] == "measured" and fix["what"] == "dali-cpu b128 fp32"
    assert fix["interval"]["value"] == 2.0 and fix["interval"]["low"] > 1.9 and "2.00x [" in fix["text"]
    assert v["trust"] == {
        "cells": 3,
        "repeats": [3, 3],
        "halfwidth_median": 0.02,
        "converged": [3, 3],
        "contended": 0,
        "implausible": 0,
    }
    lines = render_text([v])
    assert len(lines) == 3 and "CPU-prep-bound (AU 0.40, waits for data 60% of a step)" in lines[1]
    assert "fix: dali-cpu b128 fp32: 2.00x" in lines[2] and "3/3 windows converged" in lines[2]
    assert "<b>CPU-prep-bound</b>" in render_html([v])


def test_equal_cells_within_noise_read_no_measurable_difference_and_a_contended_one_is_left_out():
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram"),
                cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0, halfwidth=0.1),
                cell("opencv", "ram", 245.0, kind="ram", wait_ms=140.0, halfwidth=0.1),  # 2% faster, +-10% each
                cell("torchvision", "hdd", 650.0, wait_ms=550.0),
                cell("dali-cpu", "hdd", 300.0, wait_ms=150.0, repeats=1, contended=True),
            ]
        )
    )
    ram, hdd = verdicts(d, BASELINE)
    assert ram["fix"]["verdict"] == "no measurable difference" and "no measurable difference" in ram["fix"]["text"]
    assert hdd["reference"]["bottleneck"] == "I/O-bound" and hdd["fix"]["verdict"] == "left out"
    assert "contended" in hdd["fix"]["text"] and hdd["trust"]["contended"] == 1 and hdd["trust"]["repeats"] == [1, 3]


def test_the_text_stays_within_its_lines_and_says_what_it_left_out():
    rows = [cell("synthetic", "t0", 100.0)] + [cell("torchvision", f"t{i}", 200.0, wait_ms=90.0) for i in range(8)]
    vs = verdicts(diagnose(table(rows)), BASELINE)
    assert len(vs) == 8 and all(v["fix"]["verdict"] == "none faster" for v in vs)
    lines = render_text(vs)
    assert len(lines) <= 12 and lines[-1] == "  ... 3 more (device, tier) in the bundle"
    assert len(render_text(vs[:5])) == 11 and render_text([])[0].startswith("verdict: no real loader")
    # the fewest lines still hold one group's verdict
    assert render_text(vs, 4)[1].startswith("  1 GPU, t") and render_text(vs, 4)[-1].startswith("  ... 7 more")
    assert len(render_text(vs, 4)) == 4 and len(render_text(vs, 5)) == 4


def test_the_fix_is_the_fastest_cell_that_can_carry_a_verdict_and_an_unusable_reference_says_so():
    rows = [
        cell("synthetic", "ram", 100.0, kind="ram"),
        cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0),
        cell("opencv", "ram", 110.0, kind="ram", repeats=1, converged=False),  # fastest, but one unconverged window
        cell("dali-cpu", "ram", 125.0, kind="ram"),
    ]
    (v,) = verdicts(diagnose(table(rows)), BASELINE)
    assert v["fix"]["what"] == "dali-cpu b128 fp32" and v["fix"]["verdict"] == "measured"
    rows[1] = cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0, repeats=1, contended=True)
    (v,) = verdicts(diagnose(table(rows)), BASELINE)
    assert v["fix"]["verdict"] == "left out" and v["fix"]["text"].startswith("left out: the reference")


def test_a_reference_above_its_ceiling_is_implausible_and_no_implausible_cell_is_the_fix():
    """torchvision at 2.5x its ceiling on ram: its verdict names it implausible, with no limit made up for it, and no
    fix against it; on hdd a faster implausible cell is passed over for the fastest plausible one."""
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
                cell("torchvision", "ram", 40.0, kind="ram", device="cpu", wait_ms=1.0),
                cell("opencv", "ram", 35.0, kind="ram", device="cpu", wait_ms=1.0),
                cell("torchvision", "hdd", 650.0, device="cpu", wait_ms=550.0),
                cell("fast-io", "hdd", 30.0, device="cpu", wait_ms=1.0),
                cell("dali-cpu", "hdd", 300.0, device="cpu", wait_ms=150.0),
            ]
        )
    )
    ram, hdd = verdicts(d, BASELINE)
    assert ram["reference"]["bottleneck"] == "implausible" and ram["reference"]["implausible"] is True
    assert ram["fix"]["verdict"] == "left out" and ram["fix"]["text"].startswith(
        "left out: the reference torchvision/ram/g1/b128/fp32/dp delivered more than its compute ceiling (AU 2.50"
    )
    assert ram["trust"]["implausible"] == 2
    lines = render_text([ram, hdd])
    assert "torchvision b128 fp32 is implausible (AU 2.50: above the compute ceiling; check its batches" in lines[1]
    assert "2 implausible (above the compute ceiling)" in lines[2] and "CPU-prep-bound" not in lines[1]
    assert hdd["fix"]["what"] == "dali-cpu b128 fp32" and hdd["fix"]["verdict"] == "measured"
    assert hdd["trust"]["implausible"] == 1


def test_a_cpu_host_is_named_the_cpu_in_the_verdict_the_seed_table_and_the_figures():
    cells = [
        cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
        cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0, device="cpu"),
        cell("dali-cpu", "ram", 125.0, kind="ram", wait_ms=20.0, device="cpu"),
    ]
    (v,) = verdicts(diagnose(table(cells)), BASELINE)
    assert v["device"] == "cpu"
    text = "\n".join(render_text([v]))
    assert "  CPU, ram: torchvision b128 fp32 is" in text and "GPU" not in text
    assert "<td>CPU</td>" in render_html([v])
    gpu = [cell("synthetic", "ram", 100.0, kind="ram"), cell("torchvision", "ram", 250.0, kind="ram")]
    (g,) = verdicts(diagnose(table(gpu)), BASELINE)
    assert g["device"] == "gpu" and "  1 GPU, ram: " in render_text([g])[1]
    seed_columns = {"time_s": 5.0, "steps": 10, "speed": 1.0, "gpu_efficiency": 1.0, "spread": 0.0}
    seed = seed_table_frame(table(cells).assign(**seed_columns))
    assert list(seed["GPU"]) == ["1 (CPU)"] * 3  # the seed's column kept, marked
    assert list(seed_table_frame(table(gpu).assign(**seed_columns))["GPU"]) == [1, 1]
    assert set(device_texts(table(cells))) == {"CPU"} and set(device_texts(table(gpu))) == {"1 GPU"}


def test_the_verdict_names_the_cells_a_second_measurement_may_let_carry_it():
    """ram: the reference was contended once, so it is named; hdd: the fix (dali-mc, contended but with repeats)
    carries the verdict, and of the other cells only the faster one measured once that did not converge is named (not
    the slower contended one)."""
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram"),
                cell("torchvision", "ram", 250.0, kind="ram", repeats=1, contended=True),
                cell("opencv", "ram", 200.0, kind="ram"),
                cell("torchvision", "hdd", 650.0),
                cell("dali-cpu", "hdd", 600.0, repeats=1, contended=True),
                cell("opencv", "hdd", 400.0),
                cell("dali-sc", "hdd", 300.0, repeats=1, converged=False),
                cell("dali-mc", "hdd", 320.0, repeats=3, contended=True),
            ]
        )
    )
    ram, hdd = verdicts(d, BASELINE)
    assert ram["fix"]["verdict"] == "left out" and ram["rerun"] == ["torchvision/ram/g1/b128/fp32/dp"]
    assert hdd["fix"]["what"] == "dali-mc b128 fp32" and hdd["rerun"] == ["dali-sc/hdd/g1/b128/fp32/dp"]


def test_a_data_bound_beside_a_small_data_wait_says_on_its_line_where_the_step_lost_its_time():
    """CPU-prep-bound while waiting for data 2% of a step reads as a contradiction unless the line says why: the
    batches were ready and the loader's workers took the CPU from the step (a CPU cell: no bus to cross)."""
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram", device="cpu"),
                cell("torchvision", "ram", 180.0, kind="ram", wait_ms=3.6, device="cpu"),
            ]
        )
    )
    (v,) = verdicts(d, BASELINE)
    assert v["reference"]["bottleneck"] == "CPU-prep-bound"
    line = render_text([v])[1]
    assert (
        "waits for data 2% of a step): its batches were ready, but the loader's workers or threads take the CPU" in line
    )


def test_a_contended_references_rate_is_flagged_on_its_own_line():
    d = diagnose(
        table(
            [
                cell("synthetic", "ram", 100.0, kind="ram"),
                cell("torchvision", "ram", 250.0, kind="ram", wait_ms=150.0, contended=True, repeats=1),
                cell("dali-cpu", "ram", 125.0, kind="ram", wait_ms=20.0),
            ]
        )
    )
    (v,) = verdicts(d, BASELINE)
    assert v["reference"]["contended"] is True
    first = render_text([v])[1]
    assert first.endswith(" samples/s (CONTENDED)"), first
    assert " samples/s <b>(contended)</b></td>" in render_html([v])
