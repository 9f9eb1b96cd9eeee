"""The side measurements name the model their cells train; bench (the loader alone) says `model: none`."""

from __future__ import annotations

import json

import pytest
import yaml

from loaderbench.cli import main

RAW = {"loaders": ["torchvision"], "batch_sizes": [4], "crop_size": 32}


@pytest.fixture
def config(tmp_path):
    """The config file of RAW and the options every command needs to run in tmp_path."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**RAW, "storage": {"disk": str(tmp_path / "tier")}}))
    return ["--config", str(path), "--results", str(tmp_path / "results"), "--lock-dir", str(tmp_path / "locks")]


def test_bench_measures_the_loader_alone_and_says_model_none(config, monkeypatch, tmp_path, capsys):
    from loaderbench.experiments import bench as bench_mod

    staging = tmp_path / "results" / "staging"
    staging.mkdir(parents=True)
    manifest = {"tier": "disk", "root": str(tmp_path / "tier"), "files": [{"path": "a/1.jpg"}, {"path": "b/2.jpg"}]}
    (staging / "disk.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(bench_mod, "loader_images_per_s", lambda *a, **k: 200.0)
    args = ["bench", *config, "--loaders", "opencv", "--rounds", "1", "--json", str(tmp_path / "b.json")]
    assert main(args) == 0
    assert capsys.readouterr().out.startswith("loader-only throughput (model: none) delivered to ")
    assert json.loads((tmp_path / "b.json").read_text())["model"] == "none"
