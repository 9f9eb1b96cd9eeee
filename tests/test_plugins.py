"""Plugin loaders: named as 'module:factory', under `plugins`, or by an installed package's entry point; measured,
diagnosed and tabulated like a built-in loader through real Snakemake; a broken one fails its cell with the reason."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError, validate_config
from loaderbench.core.registry import installed_plugins, reference_name
from loaderbench.engine.runner.runcell import run_cell
from tests.conftest import cell_record, cells_table, snakemake, staged_disk, tiny_config, write_config

PLUGINS = {
    # a plugin that keeps the contract: random batches of the right shape on the cell's device
    "good_plugin": """
        import torch

        def build(ctx):
            ctx.info.update(prefetch_batches=0)
            shape = (ctx.batch_size, 3, ctx.crop_size, ctx.crop_size)

            class Batches:
                def __iter__(self):
                    while True:
                        yield (torch.randn(shape, device=ctx.device),
                               torch.randint(0, 3, (ctx.batch_size,), device=ctx.device))

            return Batches()
    """,
    "import_error_plugin": "import no_such_module_anywhere\n",
    "signature_plugin": "def build(ctx, extra):\n    return []\n",
    "shape_plugin": """
        import torch

        def build(ctx):
            return [(torch.zeros(ctx.batch_size, 3, ctx.crop_size + 1, ctx.crop_size),
                     torch.zeros(ctx.batch_size, dtype=torch.int64))]
    """,
}


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    """A folder of plugin modules, put on PYTHONPATH for the cells' processes."""
    d = tmp_path_factory.mktemp("plugins")
    for name, text in PLUGINS.items():
        (d / f"{name}.py").write_text(textwrap.dedent(text))
    return d


@pytest.fixture
def on_path(plugin_dir, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("LOADERBENCH_WARM_SOCKET", raising=False)  # a server started elsewhere has another path
    return plugin_dir


def test_a_reference_is_named_from_its_module_and_factory():
    assert reference_name("mypkg.fast_io:build") == "fast-io"
    assert reference_name("mypkg.loaders:Make_Loader") == "loaders-make-loader"
    cfg = validate_config({"loaders": ["torchvision", "mypkg.fast_io:build"], "plugins": {"mine": "a.b:c"}})
    assert cfg["loaders"] == ["torchvision", "fast-io"]
    assert cfg["plugins"] == {"mine": "a.b:c", "fast-io": "mypkg.fast_io:build"}
    assert validate_config(cfg)["loaders"] == ["torchvision", "fast-io"]  # a resolved config validates again


def test_bad_plugin_names_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"unknown loader 'nope'.*module:factory"):
        validate_config({"loaders": ["nope"]})
    with pytest.raises(ConfigError, match=r"plugins.dali-sc"):
        validate_config({"loaders": ["dali-sc"], "plugins": {"dali-sc": "a:b"}})
    with pytest.raises(ConfigError, match=r"'plugins.x'.*not a 'module:factory'"):
        validate_config({"loaders": ["x"], "plugins": {"x": "no-colon"}})
    with pytest.raises(ConfigError, match=r"both be named 'io'"):
        validate_config({"loaders": ["a.io:build", "b.io:build"]})


def test_the_cell_spec_carries_the_factory_and_a_built_in_cell_keeps_its_hash():
    cfg = validate_config({"loaders": ["torchvision", "mypkg.fast_io:build"], "batch_sizes": [4]})
    tier = cfg["tiers"][0]
    spec = cell_spec(cfg, f"fast-io_{tier}_g1_b4_fp32_dp_r0")
    assert spec.loader_ref == "mypkg.fast_io:build" and spec.to_dict()["loader_ref"] == "mypkg.fast_io:build"
    assert "loader_ref" not in cell_spec(cfg, f"torchvision_{tier}_g1_b4_fp32_dp_r0").to_dict()


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    """A staged tier and its config's settings, without its grid (each test names its own loaders)."""
    folder, cfg = staged_disk(tmp_path_factory, small_dataset, "plugin-cells")
    return folder, {k: v for k, v in cfg.items() if k not in ("parts", "plugins")}


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, reason",
    [
        ("import_error_plugin", "cannot import 'import_error_plugin': ModuleNotFoundError"),
        ("signature_plugin", "it must take one argument, the cell's LoaderContext"),
        ("shape_plugin", "images of shape (4, 3, 33, 32)"),
    ],
)
def test_a_broken_plugin_fails_its_cell_with_the_reason(staged, on_path, tmp_path, module, reason):
    folder, base = staged
    cfg = validate_config({**base, "loaders": [f"{module}:build"]})
    name = reference_name(f"{module}:build")
    spec = cell_spec(cfg, f"{name}_disk_g1_b4_fp32_dp_r0")
    record = run_cell(spec, folder / "disk.json", tmp_path / "cell.json")
    assert record["status"] == "failed" and reason in record["reason"], record["reason"]


@pytest.mark.slow
def test_a_plugin_that_keeps_the_contract_is_measured(staged, on_path, tmp_path):
    folder, base = staged
    cfg = validate_config({**base, "loaders": ["good_plugin:build"]})
    record = run_cell(cell_spec(cfg, "good-plugin_disk_g1_b4_fp32_dp_r0"), folder / "disk.json", tmp_path / "c.json")
    assert record["status"] == "ok" and record["metrics"]["steps"] == 3, record.get("reason")
    assert record["metrics"]["loader_info"]["plugin"] == "good_plugin:build"
    # what the factory declares (nothing: the defaults), as the measuring process read it, kept in the record
    facts = record["provenance"]["plugin"]["facts"]
    assert (facts["decodes"], facts["reads"]) == ("cpu", "files") and "plugin_facts" not in record["metrics"][
        "loader_info"
    ]
    assert json.loads((tmp_path / "c.json").read_text())["spec"]["loader_ref"] == "good_plugin:build"


needs_example = pytest.mark.skipif(
    "threaded-pil" not in installed_plugins(),
    reason=("the example plugin is not installed: pip install -e examples/threaded-loader (make does)"),
)


@needs_example
@pytest.mark.e2e
def test_the_installed_example_plugin_runs_through_the_pipeline_beside_built_ins(tmp_path, plugin_dir):
    """The example (examples/threaded-loader, entry point `threaded-pil`) beside torchvision and the ceiling, and a
    broken plugin in the same run: the table, the diagnosis and the bundle hold the plugin; the broken one's cell
    is a failed record with its reason, and the rest of the run goes on."""
    cfg = tiny_config(
        tmp_path,
        storage={"disk-a": str(tmp_path / "tier-a")},
        precisions=["fp32"],
        loaders=["torchvision", "threaded-pil", "synthetic", "shape_plugin:build"],
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")]))}
    env.pop("LOADERBENCH_WARM_SOCKET", None)
    snakemake(tmp_path, "--configfile", str(write_config(tmp_path, cfg)), env=env)
    table = cells_table(tmp_path).set_index("Dataloader")
    assert table.loc["threaded-pil", "Status"] == "ok" and table.loc["threaded-pil", "Steps"] == 3
    assert table.loc["threaded-pil", "AU"] > 0
    assert table.loc["shape-plugin", "Status"] == "failed"
    assert "images of shape (4, 3, 33, 32)" in cell_record(tmp_path, "shape-plugin_disk-a_g1_b4_fp32_dp_r0")["reason"]
    rec = cell_record(tmp_path, "threaded-pil_disk-a_g1_b4_fp32_dp_r0")
    assert rec["metrics"]["loader_info"]["decoder"] == "PIL in threads"
    diagnosis = (tmp_path / "results/tables/diagnosis.csv").read_text()
    assert "threaded-pil" in diagnosis
    assert "threaded-pil" in (tmp_path / "results/bundle/index.html").read_text()


@pytest.mark.slow
def test_a_plugin_is_crosschecked_against_a_bare_loop_of_it(staged, on_path, tmp_path):
    from loaderbench.core.resolve import resolve_loaders
    from loaderbench.experiments.crosscheck import crosscheck, render

    folder, base = staged
    cfg = validate_config(base)
    loaders = resolve_loaders(cfg, ["good_plugin:build"], "--loaders")
    assert loaders == ["good-plugin"] and cfg["plugins"]["good-plugin"] == "good_plugin:build"
    rows = crosscheck(cfg, loaders, "disk", 4, ["fp32"], 1, folder / "disk.json", tmp_path)
    assert rows[0]["status"] == "ok" and rows[0]["bare_samples_per_s"][0] > 0, render(rows)
