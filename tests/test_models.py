"""Models as a grid axis: named in `models` (torchvision's builders, `none`, plugin models), carried by the cell id
(MobileNetV2 left out), built and trained by real cells on the CPU, a broken model failing its cell with a reason that
names it, planned per model, and a grid of two models run through real Snakemake."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap

import pytest
import yaml

from loaderbench.core.cells import CellSpec, cell_id, cell_ids, cell_spec, configuration, parse_cell_id
from loaderbench.core.config import ConfigError, validate_config
from loaderbench.core.records import validate_record
from loaderbench.core.registry import TORCHVISION_MODELS
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.models import GFLOPS_224, relative_cost
from loaderbench.plan.costmodel import ASSUMED_SAMPLES_PER_S
from loaderbench.plan.hostrecords import Host, host_of_records
from loaderbench.plan.predict import make_plan
from tests.conftest import REPO, cell_record, cells_table, snakemake, staged_disk, tiny_config, write_config

MODELS = {
    # a model that keeps the contract: (N, 3, H, W) images in, (N, num_classes) logits out
    "tiny_net": """
        import torch

        def build(num_classes):
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(8, num_classes),
            )
    """,
    # a model whose forward raises at its fourth call: a failure after the first step
    "late_raising_net": """
        import torch


        class Late(torch.nn.Module):
            def __init__(self, num_classes):
                super().__init__()
                self.fc, self.calls = torch.nn.Linear(3, num_classes), 0

            def forward(self, x):
                self.calls += 1
                if self.calls == 4:
                    raise RuntimeError(f"boom at call {self.calls}")
                return self.fc(x.mean(dim=(2, 3)))


        def build(num_classes):
            return Late(num_classes)
    """,
    "raising_net": """
        def build(num_classes):
            raise ValueError(f"no width for {num_classes} classes")
    """,
    "wrong_shape_net": """
        import torch

        def build(num_classes):
            return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, num_classes + 1))
    """,
    "sized_net": """
        import torch

        def build(num_classes):
            return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, num_classes))

        build.input_size = 224
    """,
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A folder of model modules."""
    d = tmp_path_factory.mktemp("models")
    for name, text in MODELS.items():
        (d / f"{name}.py").write_text(textwrap.dedent(text))
    return d


@pytest.fixture
def on_path(model_dir, monkeypatch):
    """The model modules findable here (the spec's identity) and in the cells' processes (PYTHONPATH)."""
    monkeypatch.syspath_prepend(str(model_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(model_dir), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("LOADERBENCH_WARM_SOCKET", raising=False)  # a server started elsewhere has another path
    return model_dir


def test_the_model_table_is_torchvisions_and_its_costs_cover_it():
    import torchvision

    assert set(TORCHVISION_MODELS) == set(torchvision.models.list_models(module=torchvision.models))
    assert set(GFLOPS_224) == set(TORCHVISION_MODELS)
    assert relative_cost("mobilenet_v2") == 1.0 and relative_cost("resnet50") > 10 and relative_cost("none") == 0
    assert relative_cost("my-plugin") is None


def test_validating_the_models_imports_no_torch():
    import subprocess

    code = (
        "import sys\nfrom loaderbench.core.config import validate_config\n"
        "validate_config({'models': ['mobilenet_v2', 'resnet50', 'none', 'vit_b_16'], 'crop_size': 224})\n"
        "print('torch' in sys.modules, 'torchvision' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False"]


def test_the_default_model_is_mobilenet_v2_and_its_cells_keep_their_ids_and_hashes():
    cfg = validate_config({"storage": {"ram": "/dev/shm"}, "loaders": ["torchvision", "synthetic"]})
    assert cfg["models"] == ["mobilenet_v2"] and cfg["model_plugins"] == {}
    assert cell_ids(cfg) == ["torchvision_ram_g1_b128_fp32_dp_r0", "synthetic_ram_g1_b128_fp32_dp_r0"]
    spec = cell_spec(cfg, "torchvision_ram_g1_b128_fp32_dp_r0")
    assert spec.model == "mobilenet_v2" and not {"model", "model_ref", "model_identity"} & set(spec.to_dict())


@pytest.mark.parametrize(
    "models, closest",
    [(["resnet5"], "resnet50"), (["mobilnet_v2"], "mobilenet_v2"), (["efficientnet-b0"], "efficientnet_b0")],
)
def test_an_unknown_model_names_the_key_and_the_closest_names(models, closest):
    with pytest.raises(ConfigError, match=r"config key 'models': unknown model") as e:
        validate_config({"models": models})
    assert f"closest: {closest}" in str(e.value)


def test_a_vision_transformer_needs_crop_size_224():
    with pytest.raises(ConfigError, match=r"vit_b_16 takes 224 x 224 images only.*'crop_size' is 64"):
        validate_config({"models": ["vit_b_16"], "crop_size": 64})
    validate_config({"models": ["vit_b_16"], "crop_size": 224})
    parts = [{"name": "small"}, {"name": "vit", "models": ["vit_b_16", "resnet18"]}]
    with pytest.raises(ConfigError, match=r"parts\[1\]' \(vit\).*crop_size"):
        validate_config({"crop_size": 64, "parts": parts})
    parts[1]["crop_size"] = 224  # a part of its own at 224
    cfg = validate_config({"crop_size": 64, "parts": parts})
    assert {parse_cell_id(c)["model"] for c in cell_ids(cfg)} == {"mobilenet_v2", "vit_b_16", "resnet18"}


@pytest.mark.parametrize("model", ["efficientnet_b0", "vit_b_16", "regnet_y_800mf", "resnet50", "none", "my-net"])
def test_a_cell_id_round_trips_with_its_model(model):
    cid = cell_id("torchvision", "ram-disk", 2, 256, "amp", "ddp", 3, model)
    assert cid == f"torchvision_ram-disk_g2_b256_amp_ddp_{model}_r3"
    assert parse_cell_id(cid) == {
        "loader": "torchvision",
        "tier": "ram-disk",
        "gpus": 2,
        "batch_size": 256,
        "precision": "amp",
        "parallel": "ddp",
        "repeat": 3,
        "model": model,
        "beside": False,
        "ranks": 1,
    }
    assert configuration(cid) == f"torchvision_ram-disk_g2_b256_amp_ddp_{model}"


def test_the_default_model_is_left_out_of_the_id():
    assert cell_id("opencv", "ssd", 1, 128, "fp32", "dp", 0, "mobilenet_v2") == "opencv_ssd_g1_b128_fp32_dp_r0"
    assert parse_cell_id("opencv_ssd_g1_b128_fp32_dp_r0")["model"] == "mobilenet_v2"
    with pytest.raises(ConfigError, match="left out"):  # one cell, one id
        parse_cell_id("opencv_ssd_g1_b128_fp32_dp_mobilenet_v2_r0")


def test_a_grid_of_models_has_each_cell_once_and_no_synthetic_cell_without_a_model():
    cfg = validate_config(
        {
            "storage": {"ram": "/dev/shm"},
            "loaders": ["torchvision", "synthetic"],
            "models": ["mobilenet_v2", "efficientnet_b0", "none"],
            "repeats": 2,
        }
    )
    ids = cell_ids(cfg)
    assert len(ids) == len(set(ids)) == (2 + 2 + 1) * 2
    assert "synthetic_ram_g1_b128_fp32_dp_none_r0" not in ids and "torchvision_ram_g1_b128_fp32_dp_none_r1" in ids
    for cid in ids:
        spec = cell_spec(cfg, cid)
        assert spec.cell_id == cid and spec.model == parse_cell_id(cid)["model"] and spec.model_ref is None
    with pytest.raises(ConfigError, match="not in this configuration's grid"):
        cell_spec(cfg, "synthetic_ram_g1_b128_fp32_dp_none_r0")
    with pytest.raises(ConfigError, match="not in this configuration's grid"):
        cell_spec(cfg, "torchvision_ram_g1_b128_fp32_dp_resnet50_r0")


def test_plugin_models_are_named_like_plugin_loaders(on_path):
    cfg = validate_config(
        {"models": ["tiny_net:build", "mine", "resnet18"], "model_plugins": {"mine": "sized_net:build"}}
    )
    assert cfg["models"] == ["tiny-net", "mine", "resnet18"]
    assert cfg["model_plugins"] == {"mine": "sized_net:build", "tiny-net": "tiny_net:build"}
    assert validate_config(cfg)["models"] == cfg["models"]  # a resolved config validates again
    with pytest.raises(ConfigError, match=r"config key 'model_plugins.resnet50'"):
        validate_config({"model_plugins": {"resnet50": "a.b:c"}})
    with pytest.raises(ConfigError, match=r"config key 'model_plugins.mine': 'nope' is not"):
        validate_config({"model_plugins": {"mine": "nope"}})
    with pytest.raises(ConfigError, match=r"module 'no_such_models' cannot be found"):
        validate_config({"models": ["no_such_models:build"]}, find_plugins=True)
    # a factory the module does not define, read from its source without running it
    with pytest.raises(
        ConfigError, match=r"plugin 'tiny_net:bulid'.*module 'tiny_net' \(.*tiny_net.py\) defines no 'bulid'"
    ):
        validate_config({"models": ["tiny_net:bulid"]}, find_plugins=True)
    assert validate_config({"models": ["late_raising_net:Late"]}, find_plugins=True)  # a class counts


def test_a_factory_is_found_in_the_source_where_it_is_defined_and_unknown_where_the_source_cannot_tell(tmp_path):
    import importlib.util

    from loaderbench.core.pluginsource import defines

    def spec_of(text: str):
        path = tmp_path / "m.py"
        path.write_text(textwrap.dedent(text))
        return importlib.util.spec_from_file_location("m", path)

    conditional = """
        try:
            import fast as build
        except ImportError:
            def build(num_classes): ...
        if True:
            other = 1
    """
    assert defines(spec_of(conditional), "build") and defines(spec_of(conditional), "other")
    assert defines(spec_of("def build(n): ...\n"), "bulid") is False
    assert defines(spec_of("from torchvision.models import *\n"), "resnet50") is None  # a star import may supply it
    assert defines(spec_of("def __getattr__(name): ...\n"), "build") is None


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    """A staged tier and its config's settings, without its grid (each test names its own models)."""
    folder, cfg = staged_disk(tmp_path_factory, small_dataset, "model-cells")
    return folder, {k: v for k, v in cfg.items() if k not in ("parts", "plugins", "model_plugins")}


@pytest.mark.slow
def test_a_plugin_model_is_trained_by_a_real_cell_and_its_record_names_it(staged, on_path, tmp_path):
    folder, base = staged
    cfg = validate_config({**base, "loaders": ["torchvision"], "models": ["tiny_net:build"]})
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_tiny-net_r0")
    assert spec.model_identity["source_sha256"]
    record = run_cell(spec, folder / "disk.json", tmp_path / "cell.json")
    assert record["status"] == "ok" and record["metrics"]["steps"] == 3, record.get("reason")
    validate_record(record)
    written = json.loads((tmp_path / "cell.json").read_text())
    assert written["cell_id"] == "torchvision_disk_g1_b4_fp32_dp_tiny-net_r0"
    assert written["spec"]["model"] == "tiny-net" and written["spec"]["model_ref"] == "tiny_net:build"
    assert written["spec"]["model_identity"] == spec.model_identity
    assert written["metrics"]["optimizer"]["name"] == "SGD" and written["metrics"]["final_loss"] > 0


def test_editing_a_plugin_model_changes_its_cells_spec(on_path, tmp_path, monkeypatch):
    (tmp_path / "edited_net.py").write_text(textwrap.dedent(MODELS["tiny_net"]))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = validate_config({"models": ["edited_net:build"]})
    cid = cell_ids(cfg)[0]
    before = cell_spec(cfg, cid).to_dict()
    (tmp_path / "edited_net.py").write_text(textwrap.dedent(MODELS["tiny_net"]).replace("8", "16"))
    assert cell_spec(cfg, cid).to_dict()["model_identity"] != before["model_identity"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, reason",
    [
        ("raising_net", "model 'raising_net:build' raised ValueError: no width for 3 classes"),
        ("wrong_shape_net", "model 'wrong_shape_net:build' returned a tensor of shape (4, 4); expected logits of"),
        ("sized_net", "model 'sized_net:build' takes 224 x 224 images (its factory's input_size); the cell's crop"),
        ("no_such_net", "model 'no_such_net:build': cannot import 'no_such_net': ModuleNotFoundError"),
    ],
)
def test_a_broken_model_fails_its_cell_with_a_reason_naming_it(staged, on_path, tmp_path, module, reason):
    folder, base = staged
    cfg = validate_config({**base, "loaders": ["torchvision"], "models": [f"{module}:build"]})
    name = cfg["models"][0]
    record = run_cell(cell_spec(cfg, f"torchvision_disk_g1_b4_fp32_dp_{name}_r0"), folder / "disk.json", tmp_path / "c")
    validate_record(record)
    assert record["status"] == "failed" and reason in record["reason"], record["reason"]


@pytest.mark.slow
def test_a_model_failing_mid_cell_names_the_phase_step_and_its_own_line(staged, on_path, tmp_path):
    """The reason says where: the phase, the step, the user's line that raised (the cell's id names the model and the
    loader); the detail keeps the whole traceback (the user's frames too) and the trace the phases so far, the last
    one ending failed."""
    folder, base = staged
    cfg = validate_config({**base, "loaders": ["torchvision"], "models": ["late_raising_net:build"]})
    spec = cell_spec(cfg, f"torchvision_disk_g1_b4_fp32_dp_{cfg['models'][0]}_r0")
    trace = tmp_path / "c.trace.json"
    record = run_cell(spec, folder / "disk.json", tmp_path / "c.json", trace=trace)
    validate_record(record)
    source = on_path / "late_raising_net.py"
    line = next(i for i, text in enumerate(source.read_text().splitlines(), 1) if "raise RuntimeError" in text)
    assert record["status"] == "failed", record["reason"]
    assert re.fullmatch(
        r"RuntimeError: boom at call 4 \(in the (warm-up|window), at the cell's step 4; "
        rf"raised at {re.escape(str(source))}:{line} in forward\)",
        record["reason"],
    ), record["reason"]
    assert f'File "{source}", line {line}, in forward' in record["detail"]  # the user's frame, whole
    phases = [e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "phase"]
    assert phases[0] == "setup" and phases[-1].endswith("(failed)") and len(phases) >= 2, phases


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_the_loader_alone_delivers_batches_and_runs_no_model(staged, tmp_path):
    folder, base = staged
    cfg = validate_config({**base, "loaders": ["torchvision"], "models": ["none"]})
    spec = cell_spec(cfg, "torchvision_disk_g1_b4_fp32_dp_none_r0")
    record = run_cell(spec, folder / "disk.json", tmp_path / "c.json")
    assert record["status"] == "ok", record.get("reason")
    validate_record(record)
    m = record["metrics"]
    assert m["steps"] == 3 and m["samples_per_s"] > 0 and m["final_loss"] == 0
    assert m["optimizer"] is None and m["parallel"]["wrapper"] is None and record["spec"]["model"] == "none"


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_vision_transformer_cell_of_another_crop_fails_naming_it(staged, tmp_path):
    folder, base = staged
    spec = cell_spec(validate_config({**base, "loaders": ["torchvision"]}), "torchvision_disk_g1_b4_fp32_dp_r0")
    spec = CellSpec.from_dict({**spec.to_dict(), "model": "vit_b_32"})  # a spec made outside a validated grid
    record = run_cell(spec, folder / "disk.json", tmp_path / "c.json")
    assert record["status"] == "failed" and "model 'vit_b_32' takes 224 x 224 images only" in record["reason"]


# ---- the plan

H200X2 = REPO / "docs/results/2026-11-30-h200x2/engine/bundle/cells"


def test_records_of_one_model_predict_another_only_scaled_by_its_compute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = yaml.safe_load((H200X2.parent.parent / "config.yaml").read_text())
    raw.update(cudnn_benchmark=True, placement="auto", models=["mobilenet_v2", "resnet50", "none"])
    cfg = validate_config(raw, base_dir=REPO)
    host = host_of_records(H200X2)
    cells = {c.cell: c for c in make_plan(cfg, [], host=host, host_dirs=[H200X2]).cells}
    mobilenet = json.loads((H200X2 / "synthetic_ram_g1_b256_amp_dp_r0.json").read_text())
    assert cells["synthetic_ram_g1_b256_amp_dp_r0"].basis == "record"
    resnet = cells["synthetic_ram_g1_b256_amp_dp_resnet50_r0"]
    scale = relative_cost("resnet50", "gpu")  # a GPU host's prior: slower than the compute grows
    assert 1 < scale < GFLOPS_224["resnet50"] / GFLOPS_224["mobilenet_v2"]
    assert resnet.basis == "host records" and "another model (mobilenet_v2)" in resnet.detail
    rate = float(resnet.detail.split(" samples/s")[0])
    assert rate == pytest.approx(mobilenet["metrics"]["samples_per_s"] / scale, rel=0.01)
    assert resnet.seconds > cells["synthetic_ram_g1_b256_amp_dp_r0"].seconds
    alone = cells["torchvision_ram_g1_b256_amp_dp_none_r0"]  # the loader alone: not slower than with a model
    torchvision = json.loads((H200X2 / "torchvision_ram_g1_b256_amp_dp_r0.json").read_text())
    assert float(alone.detail.split(" samples/s")[0]) == pytest.approx(torchvision["metrics"]["samples_per_s"], 0.01)
    # a loader's cell: at most the loader's rate, and at most the costlier model's pace (its compute per step x scale)
    m = torchvision["metrics"]
    pace = m["global_batch"] / (m["compute_ms"]["mean"] / 1e3 * scale)
    loaded = cells["torchvision_ram_g1_b256_amp_dp_resnet50_r0"]
    assert float(loaded.detail.split(" samples/s")[0]) == pytest.approx(min(m["samples_per_s"], pace), rel=0.01)


def test_the_rules_scale_an_unmeasured_model_by_its_compute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = validate_config(tiny_config(tmp_path, models=["mobilenet_v2", "resnet50"]), base_dir=tmp_path)
    cells = make_plan(cfg, [], host=Host((), 2, "a 2-core CPU host")).cells
    rates = {parse_cell_id(c.cell)["model"]: float(c.detail.split(" samples/s")[0]) for c in cells}
    assert rates["mobilenet_v2"] == ASSUMED_SAMPLES_PER_S["cpu"]
    assert rates["resnet50"] == pytest.approx(ASSUMED_SAMPLES_PER_S["cpu"] / relative_cost("resnet50"), abs=0.5)


# ---- the pipeline


@pytest.mark.e2e
def test_a_grid_of_two_models_runs_through_snakemake(tmp_path):
    cfg = tiny_config(
        tmp_path,
        loaders=["torchvision", "synthetic"],
        models=["mobilenet_v2", "resnet18"],
        storage={"disk-a": str(tmp_path / "tier-a")},
        precisions=["fp32"],
    )
    snakemake(tmp_path, "--configfile", str(write_config(tmp_path, cfg)))
    ids = cell_ids(validate_config(cfg, base_dir=tmp_path))
    assert ids == [
        "torchvision_disk-a_g1_b4_fp32_dp_r0",
        "synthetic_disk-a_g1_b4_fp32_dp_r0",
        "torchvision_disk-a_g1_b4_fp32_dp_resnet18_r0",
        "synthetic_disk-a_g1_b4_fp32_dp_resnet18_r0",
    ]
    for cid in ids:
        rec = cell_record(tmp_path, cid)
        assert rec["status"] == "ok" and rec["spec"].get("model", "mobilenet_v2") == parse_cell_id(cid)["model"]
    table = cells_table(tmp_path)
    assert set(table["Status"]) == {"ok"} and len(table) == 4
    assert sorted(table["Model"]) == ["mobilenet_v2", "mobilenet_v2", "resnet18", "resnet18"]
