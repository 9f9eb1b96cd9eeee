"""The cold step (`cold_step`): one training step on a random batch in setup, while the loader starts - the batch as
the loader delivers it, the loader's work started at build, and the step kept out of the warm-up and the window."""

from __future__ import annotations

import functools
import json
from dataclasses import replace

import psutil
import pytest
import torch

from loaderbench.core.cells import cell_spec
from loaderbench.core.records import validate_record
from loaderbench.data.manifest import Staged, class_names
from loaderbench.engine import step
from loaderbench.engine.process import entry, measure
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.loaders import get_loader
from loaderbench.loaders.common import LoaderContext
from tests.conftest import staged_disk


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "cold", precisions=["fp32", "amp"])


def _ctx(tmp, **kw) -> LoaderContext:
    staged = Staged.from_manifest(json.loads((tmp / "disk.json").read_text()))
    base = {
        "data_root": staged.root,
        "allowed": staged.allowed,
        "batch_size": 4,
        "crop_size": 32,
        "workers": 1,
        "prefetch_factor": 1,
        "seed": 3,
        "device": torch.device("cpu"),
        "channels_last": True,
    }
    return LoaderContext(**{**base, **kw})


def _layout(batch) -> list:
    images, labels = batch
    parts = images if isinstance(images, list) else [images]
    return [[(p.shape, p.dtype, p.stride(), p.device) for p in parts], (labels.shape, labels.dtype, labels.device)]


@pytest.mark.parametrize("loader", ["synthetic", "torchvision", "opencv", "nvjpeg", "dali-cpu"])
@pytest.mark.parametrize("channels_last, dtype", [(True, torch.bfloat16), (False, torch.float32)])
def test_the_cold_batch_is_laid_out_as_the_loaders_batches(staged, loader, channels_last, dtype):
    tmp, _ = staged
    ctx = _ctx(tmp, channels_last=channels_last, dtype=dtype, options={"threads": 1})
    batches = get_loader(loader).build(ctx)
    classes = len(class_names(ctx.allowed))
    images, labels = cold = step.cold_batch(ctx, classes)
    assert _layout(cold) == _layout(next(batches))
    assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert labels.dtype == torch.int64 and 0 <= int(labels.min()) and int(labels.max()) < classes


@pytest.mark.parametrize("loader", ["torchvision", "opencv", "nvjpeg"])
def test_a_worker_fed_loader_forks_its_workers_at_build_not_at_the_first_batch(staged, loader):
    """The cold step overlaps the loader's start-up only if its work has started when `build` returns."""
    tmp, _ = staged
    before = {p.pid for p in psutil.Process().children()}
    batches = get_loader(loader).build(_ctx(tmp))
    workers = [p for p in psutil.Process().children() if p.pid not in before]
    assert len(workers) == 1  # the DataLoader's one worker, before any next()
    images, _ = next(batches)
    assert images.shape == (4, 3, 32, 32)


def _counted_measure(monkeypatch, spec, tmp):
    """Run the cell in this process (dp on the CPU: no process group), with every call of its training step counted:
    which images each call got."""
    calls = []

    def counting(*a, **kw):
        model, step = training_step(*a, **kw)

        @functools.wraps(step)  # keeps what the step carries (its optimizer, for the record)
        def counted(images, labels):
            calls.append(images)
            return step(images, labels)

        return model, counted

    training_step = measure.training_step
    monkeypatch.setattr(measure, "training_step", counting)
    staged = Staged.from_manifest(json.loads((tmp / "disk.json").read_text()))
    metrics = entry.measure(spec, staged.root, staged.allowed)
    return metrics, calls


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_cold_step_true_runs_one_step_on_its_own_batch_before_the_warm_up_and_the_window(
    staged, monkeypatch, precision
):
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, f"synthetic_disk_g1_b4_{precision}_dp_r0", in_grid=False), cold_step=True)
    m, calls = _counted_measure(monkeypatch, spec, tmp)
    loaders = calls[-1]  # the synthetic loader hands every step its one batch
    marks = m["marks"]
    assert m["cold_step_s"] > 0 and marks["setup_start"] < marks["cold_step_start"] < marks["warmup_start"]
    assert len(calls) == 1 + m["warmup_steps"] + m["steps"] and len(m["warmup_steps_s"]) == m["warmup_steps"]
    assert calls[0] is not loaders and calls[0].shape == loaders.shape and calls[0].dtype == loaders.dtype
    assert all(c is loaders for c in calls[1:])  # the warm-up's and the window's steps all ran on the loader's batch
    assert m["steps"] == 3


@pytest.mark.slow
def test_cold_step_auto_runs_none_on_the_cpu(staged, monkeypatch):
    tmp, cfg = staged
    spec = cell_spec(cfg, "synthetic_disk_g1_b4_fp32_dp_r0", in_grid=False)
    assert spec.cold_step == "auto"
    m, calls = _counted_measure(monkeypatch, spec, tmp)
    assert m["cold_step_s"] is None and "cold_step_start" not in m["marks"]
    assert len(calls) == m["warmup_steps"] + m["steps"] and all(c is calls[-1] for c in calls)
    assert spec.cold_step_on("cuda") and not spec.cold_step_on("cpu")
    assert not replace(spec, cold_step=False).cold_step_on("cuda")


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_cells_cold_step_is_in_its_record_and_in_its_setup_phase(staged, tmp_path):
    """A real cell process (torchvision, one worker): the record keeps cold_step_s, the runner's phases count it in
    setup, and the warm-up and the window ran as many steps as without it."""
    tmp, cfg = staged
    spec = replace(cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_r0"), cold_step=True)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, tmp / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    m = rec["metrics"]
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["spec"]["cold_step"] is True and m["cold_step_s"] > 0 and m["steps"] == 3
    assert m["setup_s"] > m["cold_step_s"] and rec["phases_s"]["setup"] > m["cold_step_s"]
    assert len(m["warmup_steps_s"]) == m["warmup_steps"] <= m["warmup_steps_max"] == 3
