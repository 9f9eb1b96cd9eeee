"""The side measurements train the config's models (or the one `--model` names) and their reports name it: tune, sweep,
ceiling and crosscheck; bench (the loader alone) says `model: none`. The cells are made-up records here: what is
checked is which specs the commands build and what they report."""

from __future__ import annotations

import contextlib
import json

import pytest
import yaml

from loaderbench.cli import main
from loaderbench.core.config import validate_config
from loaderbench.engine.runner import runcell, warmclient
from loaderbench.experiments import ceiling as ceiling_mod
from loaderbench.experiments import crosscheck as crosscheck_mod
from loaderbench.experiments.crosscheck import crosscheck
from loaderbench.experiments.crosscheck import render as render_crosscheck
from loaderbench.experiments.sweep import render as render_sweep
from loaderbench.experiments.sweep import sweep
from loaderbench.experiments.tune import tune
from loaderbench.experiments.tunereport import render as render_tune
from loaderbench.report.bundlepage import crosscheck_html

RAW = {"loaders": ["torchvision"], "models": ["resnet18", "none"], "batch_sizes": [4], "crop_size": 32}


@pytest.fixture
def cells(monkeypatch):
    """run_cell made up: every spec a command measures, in order; an ok record (the ceiling at 100 samples/s, a
    loader at 50) in place of a measurement."""
    specs = []

    def run_cell(spec, manifest, out, *args, **kwargs):
        specs.append(spec)
        rate = 100.0 if spec.loader == "synthetic" else 50.0
        return {
            "status": "ok",
            "wall_s": 1.0,
            "metrics": {
                "samples_per_s": rate,
                "data_wait_fraction": 0.3,
                "window": {"ci95_rel_halfwidth": 0.01},
                "compute_ms": {"mean": 10.0},
                "data_wait_ms": {"mean": 3.0},
                "setup_s": 1.0,
                "steps": 3,
                "time_s": 0.2,
            },
        }

    monkeypatch.setattr(runcell, "run_cell", run_cell)
    monkeypatch.setattr(warmclient, "serving", contextlib.nullcontext)
    return specs


@pytest.fixture
def config(tmp_path):
    """The config file of RAW (models: resnet18, none) and the options every command needs to run in tmp_path."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**RAW, "storage": {"disk": str(tmp_path / "tier")}}))
    return ["--config", str(path), "--results", str(tmp_path / "results"), "--lock-dir", str(tmp_path / "locks")]


def test_tune_trains_the_configs_model_and_its_report_names_it(cells, tmp_path):
    cfg = validate_config({**RAW, "models": ["resnet18"]})
    rep = tune(cfg, "torchvision", cfg["tiers"][0], 4, None, 60, tmp_path / "m.json", tmp_path, cpus=2, cuda=False)
    assert cells and {s.model for s in cells} == {"resnet18"}
    assert {s.loader for s in cells} == {"torchvision", "synthetic"}  # the ceiling trains the same model
    assert all("_resnet18_" in s.cell_id for s in cells)
    assert rep["model"] == "resnet18"
    assert json.loads((tmp_path / "tune.json").read_text())["model"] == "resnet18"
    assert render_tune(rep).startswith(f"tune torchvision on {cfg['tiers'][0]}, model resnet18, batch 4 fp32:")


def test_the_tune_cli_tunes_each_model_of_the_config_and_model_restricts_to_one(cells, config, tmp_path, capsys):
    args = ["tune", *config, "--loader", "torchvision", "--budget-s", "60", "--out", str(tmp_path / "tune")]
    assert main([*args, "--json", str(tmp_path / "all.json")]) == 0
    assert list(dict.fromkeys(s.model for s in cells)) == ["resnet18", "none"]
    # `none` trains nothing: no ceiling beside it
    assert {(s.model, s.loader) for s in cells} == {
        ("resnet18", "torchvision"),
        ("resnet18", "synthetic"),
        ("none", "torchvision"),
    }
    out = capsys.readouterr().out
    assert "tune torchvision on disk, model resnet18, batch 4 fp32:" in out
    assert "tune torchvision on disk, model none, batch 4 fp32:" in out
    assert "AU - (model none: the loader alone, no step to take a ceiling of)" in out
    assert out.count("  ceiling (synthetic):") == 1  # resnet18's; none has none
    assert [r["model"] for r in json.loads((tmp_path / "all.json").read_text())] == ["resnet18", "none"]
    for model in ("resnet18", "none"):
        assert json.loads((tmp_path / "tune" / model / "tune.json").read_text())["model"] == model

    cells.clear()
    assert main([*args, "--model", "resnet18", "--json", str(tmp_path / "one.json")]) == 0
    assert cells and {s.model for s in cells} == {"resnet18"}
    assert json.loads((tmp_path / "one.json").read_text())["model"] == "resnet18"
    cells.clear()
    # a model outside the config's list, but one a config may name
    assert main([*args, "--model", "mobilenet_v3_small"]) == 0
    assert cells and {s.model for s in cells} == {"mobilenet_v3_small"}
    assert "model mobilenet_v3_small, batch 4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["tune", "--loader", "torchvision"],
        ["sweep", "--loaders", "torchvision", "--variant", "a:"],
        ["ceiling"],
        ["crosscheck", "--loaders", "torchvision"],
    ],
    ids=lambda c: c[0],
)
def test_a_bad_model_is_named_and_nothing_is_measured(command, cells, config, capsys):
    assert main([*command, *config, "--model", "resnet1"]) == 2
    err = capsys.readouterr().err
    assert f"loaderbench {command[0]}: error: --model: unknown model 'resnet1'; closest: resnet18" in err
    # a torchvision model that takes one image size only, at another crop
    assert main([*command, *config, "--model", "vit_b_16"]) == 2
    assert "--model 'vit_b_16': vit_b_16 takes 224 x 224 images only" in capsys.readouterr().err
    assert cells == []


def test_sweep_cells_train_the_configs_models_and_its_rows_name_them(cells, tmp_path):
    cfg = validate_config(RAW)
    loaders = ["torchvision", "synthetic"]
    rows = sweep(cfg, ["a:", "b:workers=2"], loaders, cfg["tiers"][0], 4, "fp32", 1, tmp_path / "m.json", tmp_path)
    # synthetic x none measures nothing; the second variant changes a loader setting only: the first's synthetic serves
    assert [(s.model, s.loader) for s in cells] == [
        ("resnet18", "torchvision"),
        ("resnet18", "synthetic"),
        ("none", "torchvision"),
        ("resnet18", "torchvision"),
        ("none", "torchvision"),
    ]
    assert [(r["variant"], r["model"], r["loader"], r["au"]) for r in rows] == [
        ("a", "resnet18", "torchvision", 0.5),
        ("a", "resnet18", "synthetic", 1.0),
        ("a", "none", "torchvision", None),
        ("b", "resnet18", "torchvision", 0.5),
        ("b", "none", "torchvision", None),
    ]
    assert json.loads((tmp_path / "sweep.json").read_text())[0]["model"] == "resnet18"
    lines = render_sweep(rows).splitlines()
    assert lines[0].split()[:3] == ["variant", "model", "loader"]
    assert lines[3].split()[:3] == ["a", "none", "torchvision"]


def test_the_sweep_cli_measures_only_the_model_named(cells, config, capsys):
    assert main(["sweep", *config, "--loaders", "torchvision", "--variant", "a:", "--model", "none"]) == 0
    assert [(s.model, s.loader) for s in cells] == [("none", "torchvision")]
    assert "sweep on tier disk, model none, batch 4" in capsys.readouterr().out


def test_crosscheck_rows_train_and_name_the_configs_models(cells, monkeypatch, tmp_path):
    monkeypatch.setattr(crosscheck_mod, "_bare_process", lambda spec, *a: {"samples_per_s": 50.0, "halfwidth": 0.01})
    cfg = validate_config(RAW)
    rows = crosscheck(cfg, ["torchvision", "synthetic"], cfg["tiers"][0], 4, ["fp32"], 1, tmp_path / "m.json", tmp_path)
    assert [(s.model, s.loader) for s in cells] == [
        ("resnet18", "torchvision"),
        ("resnet18", "synthetic"),
        ("none", "torchvision"),
    ]
    assert [(r["model"], r["loader"], r["status"]) for r in rows] == [
        ("resnet18", "torchvision", "ok"),
        ("resnet18", "synthetic", "ok"),
        ("none", "torchvision", "ok"),
    ]
    summary = json.loads((tmp_path / "crosscheck.json").read_text())
    assert summary["models"] == ["resnet18", "none"]
    assert [line.split()[:2] for line in render_crosscheck(rows).splitlines()] == [
        ["resnet18", "torchvision"],
        ["resnet18", "synthetic"],
        ["none", "torchvision"],
    ]
    html = crosscheck_html([summary])
    assert "<th>Model</th><th>Dataloader</th>" in html and "<td>none</td><td>torchvision</td>" in html


def test_the_crosscheck_cli_names_the_model_it_measured(cells, config, monkeypatch, capsys):
    monkeypatch.setattr(crosscheck_mod, "_bare_process", lambda spec, *a: {"samples_per_s": 50.0, "halfwidth": 0.01})
    assert main(["crosscheck", *config, "--loaders", "torchvision", "--model", "resnet18", "--rounds", "1"]) == 0
    assert [(s.model, s.loader) for s in cells] == [("resnet18", "torchvision")]
    out = capsys.readouterr().out
    assert "1 GPU x batch 4, model resnet18:" in out and "  resnet18       torchvision  fp32 cell 50" in out


def test_ceiling_measures_each_model_but_none_and_names_it(config, monkeypatch, tmp_path, capsys):
    measured = []

    def ceiling(spec, manifest, rounds, variant_steps, out_dir, timeout_s=None, host=None):
        measured.append(spec)
        return {
            "device": "cpu",
            "model": spec.model,
            "batch_size": spec.batch_size,
            "precision": spec.precision,
            "channels_last": spec.channels_last,
            "compile": spec.compile,
            "cudnn_benchmark": spec.cudnn_benchmark,
            "placement": None,
            "steps": [3],
            "synthetic_phases": [{"setup_s": 1.0, "first_step_s": 0.1, "warmup_s": 0.2, "warmup_steps": 1}],
            "synthetic_samples_per_s": [100.0],
            "bare_samples_per_s": [101.0],
            "synthetic_over_bare": 0.99,
        }

    monkeypatch.setattr(ceiling_mod, "ceiling", ceiling)
    assert main(["ceiling", *config, "--json", str(tmp_path / "c.json")]) == 0
    assert [(s.model, s.loader) for s in measured] == [("resnet18", "synthetic")]  # `none` has no ceiling
    assert "compute ceiling on cpu: model resnet18, batch 4," in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["model"] == "resnet18"

    measured.clear()
    assert main(["ceiling", *config, "--model", "mobilenet_v3_small"]) == 0
    assert [s.model for s in measured] == ["mobilenet_v3_small"]
    # the ceilings of several models: a list, which engine-report (one ceiling) refuses by name
    several = tmp_path / "two.json"
    several.write_text(json.dumps([{"model": "resnet18"}, {"model": "mobilenet_v3_small"}]))
    assert main(["engine-report", "--cells", str(tmp_path), "--ceiling", str(several)]) == 2
    assert "the ceilings of 2 models (resnet18, mobilenet_v3_small); give one model's" in capsys.readouterr().err
    assert main(["ceiling", *config, "--model", "none"]) == 2
    assert "loaderbench ceiling: error: --model none: the ceiling is a model's training step" in capsys.readouterr().err


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
