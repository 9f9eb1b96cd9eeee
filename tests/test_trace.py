"""A cell's trace (Chrome trace-event JSON, for Perfetto and chrome://tracing): real cells on the CPU, their steps held
against the record's own step count, window and waits, and the telemetry's counters on the same clock."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.layout import RESULTS
from loaderbench.engine.runner import trace as cell_trace
from loaderbench.engine.runner.runcell import run_cell
from tests.conftest import staged_disk

SLACK_US = 5_000  # the marks and the steps are read by separate clock calls: a few ms either way


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "trace", gpus=[1, 2], window={"steps": 6})


def strict_json(path):
    """The file as JSON, refusing NaN and Infinity (not JSON: trace viewers reject them)."""

    def refuse(name):
        raise ValueError(f"{path}: {name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def spans(trace: dict, **match) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and all(e.get(k) == v for k, v in match.items())]


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
@pytest.mark.parametrize("loader", ["torchvision", "opencv"])
def test_a_cells_trace_has_its_steps_in_its_window_and_its_telemetry(staged, tmp_path, loader):
    tmp, cfg = staged
    spec = cell_spec(cfg, f"{loader}_disk_g1_b4_fp32_dp_r0")
    out, path = tmp_path / "cells" / f"{spec.cell_id}.json", tmp_path / "traces" / f"{spec.cell_id}.trace.json"
    rec = run_cell(spec, tmp / "disk.json", out, trace=path)
    trace = strict_json(path)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["telemetry"]["trace"] == str(path)
    assert trace["otherData"]["cell"] == spec.cell_id and trace["otherData"]["origin_epoch_s"] == rec["started_at"]
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "C"}
    us = lambda t: (t - rec["started_at"]) * 1e6
    marks = m["marks"]

    window = spans(trace, cat="window")
    counted = [e for e in window if e["args"]["counted"]]
    assert len(counted) == len(window) == m["steps"] == 6  # one worker: no burst cut, every window step counted
    assert len(spans(trace, cat="warm-up")) == m["warmup_steps"]
    for e in window:
        assert (
            us(marks["window_start"]) - SLACK_US <= e["ts"] <= e["ts"] + e["dur"] <= us(marks["window_end"]) + SLACK_US
        )
    for e in spans(trace, cat="warm-up"):
        assert (
            us(marks["warmup_start"]) - SLACK_US <= e["ts"]
            and e["ts"] + e["dur"] <= us(marks["window_start"]) + SLACK_US
        )
    steps = sorted(window + spans(trace, cat="warm-up"), key=lambda e: e["ts"])
    assert all(
        a["ts"] + a["dur"] <= b["ts"] for a, b in itertools.pairwise(steps)
    )  # one after another, never overlapping

    # each step holds its wait for the batch and then the step itself, exactly
    waits, computes = spans(trace, cat="wait"), spans(trace, cat="compute")
    assert len(waits) == len(computes) == len(steps)
    for step, wait, compute in zip(
        steps, sorted(waits, key=lambda e: e["ts"]), sorted(computes, key=lambda e: e["ts"]), strict=True
    ):
        assert wait["ts"] == step["ts"] and compute["ts"] == pytest.approx(wait["ts"] + wait["dur"], abs=0.2)
        assert compute["ts"] + compute["dur"] == pytest.approx(step["ts"] + step["dur"], abs=0.2)
    # the window's waits are the record's (its mean data wait), to the trace's 0.1 us
    in_window = [w for w in waits if us(marks["window_start"]) <= w["ts"] <= us(marks["window_end"])]
    assert sum(w["dur"] for w in in_window) / 1000 / m["steps"] == pytest.approx(m["data_wait_ms"]["mean"], abs=1e-3)
    assert sum(s["dur"] for s in counted) / 1e6 == pytest.approx(m["time_s"], rel=0.02)

    phases = {e["name"]: e for e in spans(trace, cat="phase")}
    assert set(phases) == {"setup", "warm-up", "window"}
    assert phases["window"]["ts"] == pytest.approx(us(marks["window_start"]), abs=0.1)

    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert {"CPU busy %", "memory MB"} <= names and not any(n.startswith("GPU") for n in names)  # no GPU here
    assert 0 <= min(e["args"]["mean of cores"] for e in counters if e["name"] == "CPU busy %") <= 100
    assert any(us(marks["window_start"]) <= e["ts"] <= us(marks["window_end"]) for e in counters)


@pytest.mark.slow
def test_a_skipped_cell_writes_a_trace_without_steps(staged, tmp_path):
    """A cell that is not measured still leaves a valid trace (Snakemake needs the output): no steps in it."""
    tmp, cfg = staged
    spec = cell_spec(cfg, "opencv_disk_g2_b4_fp32_dp_r0")  # 2 GPUs on a CPU host: skipped
    path = tmp_path / "t.trace.json"
    rec = run_cell(spec, tmp / "disk.json", tmp_path / "c.json", trace=path)
    trace = strict_json(path)
    assert rec["status"] == "skipped" and trace["otherData"]["status"] == "skipped"
    assert not [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] != "phase"]
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in trace["traceEvents"])


def test_a_gpus_steps_get_a_device_track_with_what_came_between_them():
    """The device's side, from a window's CUDA event times (made up here: this host has no GPU): each step on the
    device, and before it what the device did since the last one (the batch's copy to it, or nothing)."""
    steps = {
        "t0_epoch": 100.0,
        "device": "cuda",
        "warmup": {"start": [-0.01], "wait": [0.001], "end": [-0.002]},
        "window": {
            "start": [0.0, 0.001],
            "wait": [0.0002, 0.0001],
            "end": [0.0005, 0.0015],
            "kept": [0, 2],
            "device_start": [0.0004, 0.0030],
            "device_end": [0.0025, 0.0050],
        },
    }
    trace = cell_trace.build("c", "ok", 99.0, steps, None, {"window_start": 100.0, "window_end": 100.006})
    device = spans(trace, tid=cell_trace.DEVICE_TID)
    assert [(e["name"], e["ts"], e["dur"]) for e in device] == [
        ("before the step: copy to the device or idle", 1e6, 400.0),
        ("step 1 on the device", 1_000_400.0, 2100.0),
        ("before the step: copy to the device or idle", 1_002_500.0, 500.0),
        ("step 2 on the device", 1_003_000.0, 2000.0),
    ]
    assert {e["name"] for e in spans(trace, cat="compute")} == {"launch the step (host)"}
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert "steps on the device (cuda, CUDA events)" in names


def test_where_trace_prints_the_cells_trace_path(tmp_path):
    cid = "torchvision_disk_g1_b4_fp32_dp_r0"
    where = [sys.executable, "-m", "loaderbench", "where", "trace", cid]
    out = subprocess.run(where, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == RESULTS.trace(cid) == f"results/traces/{cid}.trace.json"
    out = subprocess.run([*where, "--results", "elsewhere"], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == f"elsewhere/traces/{cid}.trace.json"
    # an id of no cell is refused, naming what is wrong; the names it knows are listed in its help
    out = subprocess.run([*where[:-1], "nosuchcell"], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert out.returncode == 2 and not out.stdout and "nosuchcell" in out.stderr, out
    usage = subprocess.run([*where[:-2], "--help"], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert "one of: check, check_report" in " ".join(usage.split()) and "layout.Layout" not in usage


@pytest.mark.e2e
def test_the_pipeline_writes_each_cells_trace_and_the_bundle_links_them(finished_run):
    """Through Snakemake: every cell's trace at its layout path (an output of the cell rule), and the bundle holding a
    copy of each ok cell's, linked from its index with how to open them."""
    import zipfile

    work, _ = finished_run
    index = (work / "results/bundle/index.html").read_text()
    assert "ui.perfetto.dev" in index and "chrome://tracing" in index
    with zipfile.ZipFile(work / "results/bundle.zip") as z:
        zipped = set(z.namelist())
    records = [json.loads(p.read_text()) for p in sorted((work / "results/cells").glob("*.json"))]
    assert records
    bundled = {p.stem: json.loads(p.read_text()) for p in (work / "results/bundle/cells").glob("*.json")}
    copied = 0
    for rec in records:
        cid = rec["cell_id"]
        trace = strict_json(work / RESULTS.trace(cid))
        assert trace["otherData"]["cell"] == cid and rec["telemetry"]["trace"] == RESULTS.trace(cid)
        if rec["status"] == "ok":
            assert len([e for e in spans(trace, cat="window") if e["args"]["counted"]]) == rec["metrics"]["steps"]
            assert f"traces/{cid}.trace.json" in index and f"bundle/traces/{cid}.trace.json" in zipped
            copy = strict_json(work / "results/bundle/traces" / f"{cid}.trace.json")
            assert copy["otherData"]["origin_epoch_s"] == bundled[cid]["started_at"]  # the trace of the record it shows
            if bundled[cid]["started_at"] != rec["started_at"]:
                continue  # re-measured after the bundle was made (another test's single-cell rerun)
            assert (work / "results/bundle/traces" / f"{cid}.trace.json").read_bytes() == (
                work / RESULTS.trace(cid)
            ).read_bytes()
            copied += 1
    assert copied
