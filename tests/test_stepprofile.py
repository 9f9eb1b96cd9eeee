"""The step profile (`profile_steps`): a real CPU cell's record carries it; the reduction of CUPTI's GPU activity to
busy, idle and overlap figures is checked on events built here - CUPTI's records of a GPU cannot exist on these
CPU-only machines (the GPU host's records in docs/results are the real ones)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.records import validate_record
from loaderbench.engine.process.stepprofile import overlap_ns, run, summarize, union_ns
from loaderbench.engine.runner.runcell import run_cell
from tests.conftest import staged_disk


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "profile", gpus=[1], batch_sizes=[4], precisions=["fp32"])


def gpu(name, stream, start_ms, end_ms, kind="kernel", device=0):
    return {
        "name": name,
        "kind": kind,
        "gpu": True,
        "device": device,
        "stream": stream,
        "start": int(start_ms * 1e6),
        "end": int(end_ms * 1e6),
    }


def test_union_and_overlap_of_intervals():
    assert union_ns([(0, 10), (5, 15), (20, 30)]) == 25 and union_ns([]) == 0
    assert overlap_ns([(0, 10), (20, 30)], [(5, 25)]) == 10 and overlap_ns([(0, 10)], [(10, 20)]) == 0


def test_the_profile_splits_a_gpus_time_into_streams_idle_and_overlap():
    """2 steps in 20 ms on the training stream (7): kernels 0-6, 10-16 and 16-20, a 1 ms copy at 7-8; another
    stream (9, a loader's) runs a 3 ms kernel at 14-17, under the training stream's kernels."""
    events = [
        gpu("conv", 7, 0, 6),
        gpu("Memcpy HtoD (Pinned -> Device)", 7, 7, 8, kind="gpu_memcpy"),
        gpu("conv", 7, 10, 16),
        gpu("resize", 9, 14, 17),
        gpu("bn", 7, 16, 20),
        {
            "name": "cudaLaunchKernel",
            "kind": "cuda_runtime",
            "gpu": False,
            "device": -1,
            "stream": 0,
            "start": 0,
            "end": int(0.5e6),
        },
    ]
    p = summarize(events, 2)
    g = p["gpus"]["0"]
    assert g["main_stream"] == 7 and g["span_ms"] == pytest.approx(10.0)  # 20 ms over 2 steps
    assert g["busy_ms"] == pytest.approx((6 + 1 + 10) / 2)  # 0-6, 7-8 and 10-20 (conv, resize and bn joined)
    assert g["main_idle_ms"] == pytest.approx((1 + 2) / 2)  # 6-7 and 8-10 (the copy counts as the stream's work)
    assert g["overlap_ms"] == pytest.approx(3 / 2)  # resize 14-17: under conv to 16, under bn from 16
    s7, s9 = g["streams"]["7"], g["streams"]["9"]
    assert s7["role"] == "main" and s7["kernel_ms"] == pytest.approx(8.0) and s7["copy_ms"] == pytest.approx(0.5)
    assert s9["role"] == "other" and s9["kernel_ms"] == pytest.approx(1.5) and s9["kernels_per_step"] == 0.5
    assert [k["name"] for k in g["top_kernels"]] == ["conv", "bn", "resize"] and g["top_kernels"][0]["calls"] == 1
    assert p["host_runtime"] == [{"name": "cudaLaunchKernel", "ms": 0.25, "calls": 0.5}] and "note" not in p


def test_events_without_an_activity_type_are_told_apart_by_name():
    """torch 2.11 (the GPU host's) has no activity_type() on its events: copies, memsets and runtime calls by name."""
    events = [
        gpu("conv", 7, 0, 6, kind=None),
        gpu("Memcpy HtoD (Pinned -> Device)", 7, 7, 8, kind=None),
        gpu("Memset (Device)", 7, 8, 9, kind=None),
        {
            "name": "cudaStreamSynchronize",
            "kind": None,
            "gpu": False,
            "device": -1,
            "stream": 0,
            "start": 0,
            "end": int(2e6),
        },
        {"name": "aten::conv2d", "kind": None, "gpu": False, "device": -1, "stream": 0, "start": 0, "end": 10},
    ]
    s = summarize(events, 1)["gpus"]["0"]["streams"]["7"]
    assert (s["kernel_ms"], s["copy_ms"], s["memset_ms"]) == (6.0, 1.0, 1.0)
    assert summarize(events, 1)["host_runtime"] == [{"name": "cudaStreamSynchronize", "ms": 2.0, "calls": 1.0}]


def test_a_profile_that_fails_says_why_and_keeps_the_cell():
    def step(*batch):
        raise RuntimeError("CUPTI is not there")

    p = run(step, iter([(1,)] * 3), 2, lambda: None, "cpu")
    assert p["steps"] == 2 and p["error"] == "RuntimeError: CUPTI is not there" and "step" in p["traceback"]


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_cpu_cell_with_profile_steps_records_its_host_profile(staged, tmp_path):
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "synthetic_disk_g1_b4_fp32_dp_r0", in_grid=False), profile_steps=2)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    assert rec["status"] == "ok", rec.get("reason")
    (p,) = rec["metrics"]["profile"]
    assert p["steps"] == 2 and p["gpus"] == {} and "no GPU activity" in p["note"]
    assert p["host_ops"] and all(o["ms"] > 0 for o in p["host_ops"]) and p["wall_s"] > 0
    assert any("conv" in o["name"] for o in p["host_ops"])  # MobileNetV2's convolutions ran in the profiled steps
    assert rec["spec"]["profile_steps"] == 2
    plain = cell_spec(cfg, "synthetic_disk_g1_b4_fp32_dp_r0", in_grid=False)
    assert "profile_steps" not in plain.to_dict()  # at its default the field stays out of the spec and its hash
