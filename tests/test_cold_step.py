"""A loader's work starts at build: what a cell does before its first batch overlaps the loader's start-up."""

from __future__ import annotations

import json

import psutil
import pytest
import torch

from loaderbench.check import check_dataset
from loaderbench.config import validate_config
from loaderbench.loaders import get_loader
from loaderbench.loaders.common import LoaderContext
from loaderbench.stage import stage
from loaderbench.staged import Staged


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    tmp = tmp_path_factory.mktemp("cold")
    check_dataset(small_dataset, tmp / "check.json", tmp / "q", jobs=2)
    (tmp / "tier").mkdir()
    stage(tmp / "check.json", "disk", tmp / "tier", "ds", tmp / "disk.json")
    cfg = validate_config({
        "dataset": {"name": "ds"}, "storage": {"disk": str(tmp / "tier")}, "gpus": [1], "batch_sizes": [4],
        "precisions": ["fp32"], "window": {"steps": 3}, "warmup_steps": 1, "crop_size": 32, "workers": 1,
        "prefetch_factor": 1,
    })  # fmt: skip
    return tmp, cfg


def _ctx(tmp, **kw) -> LoaderContext:
    staged = Staged.from_manifest(json.loads((tmp / "disk.json").read_text()))
    base = dict(data_root=staged.root, allowed=staged.allowed, batch_size=4, crop_size=32, workers=1, prefetch_factor=1,
                seed=3, device=torch.device("cpu"), channels_last=True)  # fmt: skip
    return LoaderContext(**{**base, **kw})


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
