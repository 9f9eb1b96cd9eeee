"""A toy loader added as a built-in one is: one module (this file, whose `build` is the loader) and one record in
`registry.LOADERS`. The config, the bottleneck labels, tune's knobs and the prediction take it from there; no module
keeps a list of loader names of its own."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import pkgutil

import pytest
import torch

import loaderbench
from loaderbench.core import registry
from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.registry import LoaderRecord, loader_record
from loaderbench.experiments.tuneknobs import knobs
from loaderbench.loaders import get_loader
from loaderbench.loaders.common import LoaderContext
from loaderbench.report.diagnose import diagnose
from loaderbench.whatif import matrix
from tests.conftest import cells_with_au
from tests.test_diagnose import cell, row
from tests.test_sharing import record

TOY = LoaderRecord(module=__name__, backlog="workers")  # reads files, decodes and augments on the CPU
# the lists of loader names that the records replaced, each once kept by the module that needed it
OLD_LISTS = (
    "GPU_PREP_LOADERS",
    "HOST_LOADERS",
    "DEVICE_WORK",
    "DP_PER_GPU",
    "DDP_SINGLE",
    "GPU_WORK",
    "ONE_GPU_BASELINE",
    "TIERLESS",
)


def build(ctx: LoaderContext):
    """The toy loader: one batch of zeros of the cell's shape on its device, every step."""
    images = torch.zeros(ctx.batch_size, 3, ctx.crop_size, ctx.crop_size, dtype=ctx.dtype, device=ctx.device)
    labels = torch.zeros(ctx.batch_size, dtype=torch.int64, device=ctx.device)
    ctx.info.update(prefetch_batches=0)
    return itertools.repeat((images, labels))


@pytest.fixture
def toy(monkeypatch):
    """Registers `toy` by its record alone; `toy(**facts)` changes the record's facts."""

    def register(**facts) -> LoaderRecord:
        rec = dataclasses.replace(TOY, **facts)
        monkeypatch.setitem(registry.LOADERS, "toy", rec)
        return rec

    register()
    return register


def _bottleneck(loader: str) -> str:
    """The label of a prep-bound cell of `loader` on a GPU: a prep stall of 30 ms from RAM, fetching adds 10."""
    t = cells_with_au(
        [
            cell("synthetic", "hdd", 100.0),
            cell(loader, "ram", 130.0, kind="ram", wait_ms=30.0),
            cell(loader, "hdd", 140.0, wait_ms=40.0),
        ]
    )
    return row(diagnose(t), loader, "hdd")["bottleneck"]


def _tuned(loader: str) -> list[str]:
    """The settings tune searches for `loader` on a CUDA host, in its order, from a config that measures it."""
    cfg = validate_config({"loaders": [loader], "batch_sizes": [4]})
    spec = cell_spec(cfg, f"{loader}_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0")
    return list(knobs(loader, spec, cpus=16, cuda=True))


def prediction_counts_device_work(loader: str) -> bool:
    """Whether the prediction takes `loader` to have GPU work of its own beside the step (its GPU share counted on the
    step's side), as the whatif package decides it: from the loader's registry record, read where the package reads
    it. Its 2-GPU row of a 1-GPU cell with no loader-alone cell says so. The one function to change if the package
    reads the record elsewhere."""
    recs = [record("synthetic", 8000.0, cores=1.0), record(loader, 2000.0, cores=27.0)]
    rows = matrix(recs, gpus=(1, 2))
    lacks = rows[(rows["loader"] == loader) & (rows["gpus"] == 2) & (rows["parallel"] == "dp")].iloc[0]["lacks"]
    said = "its own device work unknown, taken as none" in lacks
    assert said == loader_record(loader).device_work
    return said


def test_no_module_keeps_a_list_of_loader_names():
    modules = [
        importlib.import_module(m.name)
        for m in pkgutil.walk_packages(loaderbench.__path__, "loaderbench.")
        if not m.name.endswith(".__main__")  # the CLI's: importing one runs it
    ]
    assert len(modules) > 100  # every module of the package, not the walk stopped early
    assert {m.__name__: kept for m in modules if (kept := [n for n in OLD_LISTS if hasattr(m, n)])} == {}


def test_the_toy_record_names_its_module_and_the_config_measures_it(toy, tmp_path):
    loader = get_loader("toy")
    assert loader.build is build  # the record's module, this one
    ctx = LoaderContext(tmp_path, frozenset(), 4, 8, 0, 2, 0, torch.device("cpu"), channels_last=False)
    images, labels = next(loader.build(ctx))
    assert (tuple(images.shape), tuple(labels.shape), ctx.info["prefetch_batches"]) == ((4, 3, 8, 8), (4,), 0)
    cfg = validate_config({"loaders": ["toy"], "batch_sizes": [4]})
    assert cell_spec(cfg, f"toy_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0").loader == "toy"


def test_decoding_on_the_gpu_in_the_record_moves_the_label_the_knobs_and_the_prediction(toy):
    on_cpu = (_bottleneck("toy"), _tuned("toy"), prediction_counts_device_work("toy"))
    toy(decodes="gpu")  # the one fact changed
    assert loader_record("toy").device_work
    on_gpu = (_bottleneck("toy"), _tuned("toy"), prediction_counts_device_work("toy"))
    assert on_cpu == ("CPU-prep-bound", ["workers", "prefetch_factor", "compile"], False)
    assert on_gpu == ("GPU-prep-bound", ["workers", "prefetch_factor", "step_stream_priority", "compile"], True)
