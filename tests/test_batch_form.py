"""Every batch a cell takes keeps its first batch's shape, dtype and device: a loader whose later batches change fails
its cell with the batch's number and the change, built-in or plugin."""

from __future__ import annotations

import itertools
import os
import textwrap

import pytest
import torch

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.registry import reference_name
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.loaders.common import BatchChanged, SameForm
from tests.conftest import staged_disk

# right-sized batches for the first two, then 16 px images: the contract's check of the first batch passes
SHRINKING = """
    import torch

    def build(ctx):
        ctx.info.update(prefetch_batches=0)

        class Batches:
            given = 0

            def __iter__(self):
                while True:
                    Batches.given += 1
                    side = ctx.crop_size if Batches.given <= 2 else 16
                    yield (torch.randn(ctx.batch_size, 3, side, side, device=ctx.device),
                           torch.randint(0, 3, (ctx.batch_size,), device=ctx.device))

        return Batches()
"""

# images of the cell's dtype for three batches, then float16 from the fourth on (`switch_after` None: float16 always):
# the cast to the cell's dtype would make every batch look alike
HALVING = """
    import torch

    def build(ctx, switch_after=3):
        ctx.info.update(prefetch_batches=0)

        class Batches:
            given = 0

            def __iter__(self):
                while True:
                    Batches.given += 1
                    half = switch_after is None or Batches.given > switch_after
                    images = torch.randn(ctx.batch_size, 3, ctx.crop_size, ctx.crop_size, device=ctx.device)
                    yield (images.half() if half else images,
                           torch.randint(0, 3, (ctx.batch_size,), device=ctx.device))

        return Batches()

    def build_half(ctx):
        return build(ctx, switch_after=None)
"""


def pair(side: int = 32, label_dtype=torch.int64):
    return torch.zeros(4, 3, side, side), torch.zeros(4, dtype=label_dtype)


def test_a_batch_that_changes_shape_or_dtype_is_named_with_what_changed():
    batches = SameForm(iter([pair(), pair(), pair(16, torch.int32)]), "loader 'x'")
    assert next(batches)[0].shape == (4, 3, 32, 32) and next(batches)[0].shape == (4, 3, 32, 32)
    with pytest.raises(BatchChanged) as e:
        next(batches)
    assert str(e.value).startswith(
        "loader 'x': batch 3 differs from batch 1: images shape (4, 3, 16, 16), was "
        "(4, 3, 32, 32); labels dtype torch.int32, was torch.int64"
    )


def test_a_pre_scattered_batch_is_checked_part_by_part_and_equal_batches_pass():
    """dali-mc hands DataParallel one part of the images a GPU: each part keeps its own form."""

    def split(n):
        return [torch.zeros(2, 3, 8, 8), torch.zeros(n, 3, 8, 8)], torch.zeros(4, dtype=torch.int64)

    batches = SameForm(iter([split(2), split(2), split(1)]), "loader 'dali-mc'")
    next(batches), next(batches)
    with pytest.raises(
        BatchChanged,
        match=r"batch 3 differs from batch 1: images\[1\] shape \(1, 3, 8, 8\), was "
        r"\(2, 3, 8, 8\)",
    ):
        next(batches)
    same = SameForm(itertools.repeat(pair()), "loader 'synthetic'")
    assert all(next(same)[1].dtype == torch.int64 for _ in range(100)) and same.taken == 100


@pytest.fixture
def shrinking_on_path(tmp_path, monkeypatch):
    (tmp_path / "shrinking_plugin.py").write_text(textwrap.dedent(SHRINKING))
    (tmp_path / "halving_plugin.py").write_text(textwrap.dedent(HALVING))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("LOADERBENCH_WARM_SOCKET", raising=False)  # a server started elsewhere has another path


@pytest.mark.slow
def test_a_plugin_whose_later_batches_shrink_fails_its_cell_naming_the_batch(
    tmp_path_factory, small_dataset, shrinking_on_path, tmp_path
):
    """A real cell (its own measuring process, MobileNetV2 steps on the CPU): its first two batches are 32 px and keep
    the contract, the third is 16 px - the cell is failed, not measured on smaller images."""
    folder, cfg = staged_disk(tmp_path_factory, small_dataset, "shrinking-cell")
    cfg = validate_config(
        {**{k: v for k, v in cfg.items() if k not in ("parts", "plugins")}, "loaders": ["shrinking_plugin:build"]}
    )
    name = reference_name("shrinking_plugin:build")
    record = run_cell(cell_spec(cfg, f"{name}_disk_g1_b4_fp32_dp_r0"), folder / "disk.json", tmp_path / "cell.json")
    assert record["status"] == "failed", record["status"]
    assert (
        "BatchChanged: plugin loader 'shrinking_plugin:build': batch 3 differs from batch 1: images shape "
        "(4, 3, 16, 16), was (4, 3, 32, 32)"
    ) in record["reason"], record["reason"]
    assert not record.get("metrics")


def plugin_cell(tmp_path_factory, small_dataset, tmp_path, reference: str, name: str) -> dict:
    """The record of a real cell of the plugin `reference` (fp32, a 5-step window: batches past the fourth)."""
    folder, cfg = staged_disk(tmp_path_factory, small_dataset, name, window={"steps": 5})
    cfg = validate_config({**{k: v for k, v in cfg.items() if k not in ("parts", "plugins")}, "loaders": [reference]})
    cell = f"{reference_name(reference)}_disk_g1_b4_fp32_dp_r0"
    return run_cell(cell_spec(cfg, cell), folder / "disk.json", tmp_path / "cell.json")


@pytest.mark.slow
def test_a_plugin_that_switches_to_float16_after_batch_3_fails_its_cell_naming_the_batch_and_both_dtypes(
    tmp_path_factory, small_dataset, shrinking_on_path, tmp_path
):
    """Its batches were cast to the cell's float32 before they were compared, so the switch passed unseen and the cell
    was recorded ok with `input.dtype float32`: they are compared as delivered now."""
    record = plugin_cell(tmp_path_factory, small_dataset, tmp_path, "halving_plugin:build", "halving-cell")
    assert record["status"] == "failed", record["status"]
    assert (
        "BatchChanged: plugin loader 'halving_plugin:build': batch 4 differs from batch 1: images dtype "
        "torch.float16, was torch.float32"
    ) in record["reason"], record["reason"]
    assert not record.get("metrics")


@pytest.mark.slow
def test_a_plugin_that_delivers_float16_throughout_is_measured_and_its_record_says_so(
    tmp_path_factory, small_dataset, shrinking_on_path, tmp_path
):
    """float16 in every batch keeps the contract (floating point, one dtype): the cell casts it to its float32 and
    the record states both, the dtype the model took and the one the plugin delivered."""
    record = plugin_cell(tmp_path_factory, small_dataset, tmp_path, "halving_plugin:build_half", "half-cell")
    assert record["status"] == "ok", record.get("reason")
    m = record["metrics"]
    assert m["steps"] == 5 and m["input"]["dtype"] == "float32" and m["input"]["delivered_dtype"] == "float16"
    assert m["loader_info"]["delivered_dtype"] == "float16"
