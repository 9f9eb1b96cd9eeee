"""A plugin's code is part of its cells' specs: found and hashed without importing it, its version and source hash
re-measure its cells through real Snakemake when they change (a failed cell too, once fixed), the record keeps them,
and a config naming a plugin module that cannot be found is refused, naming the key and the module."""

from __future__ import annotations

import os
import re
import sys
import textwrap

import pytest

from loaderbench.cli import main as cli
from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError, validate_config
from loaderbench.core.pluginsource import find_module, plugin_identity, plugin_source
from loaderbench.core.records import make_record, spec_hash
from loaderbench.core.registry import installed_plugins
from tests.conftest import REPO, cell_record, record_parts, snakemake, tiny_config, write_config

# A module that must never run while its identity is taken or a config is validated: it leaves a mark and fails.
EXPLODES = """
from pathlib import Path

Path(__file__).with_name("imported.mark").write_text("{name}")


def build(ctx):  # found in the source by validation, never run
    raise AssertionError("never called")


raise RuntimeError("{name} was imported")
"""

GOOD = """
import torch

def build(ctx):
    shape = (ctx.batch_size, 3, ctx.crop_size, ctx.crop_size)

    class Batches:
        def __iter__(self):
            while True:
                yield torch.randn(shape, device=ctx.device), torch.zeros(ctx.batch_size, dtype=torch.int64,
                                                                         device=ctx.device)

    return Batches()
"""

# the same plugin broken: its images are one pixel too tall
BROKEN = GOOD.replace("ctx.crop_size, ctx.crop_size)", "ctx.crop_size + 1, ctx.crop_size)")


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_modules_identity_is_the_hash_of_its_source_taken_without_importing_it(tmp_path, monkeypatch):
    src = write(tmp_path / "lone_plugin.py", EXPLODES.format(name="lone_plugin") + "\ndef build(ctx):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = plugin_identity("lone_plugin:build")
    assert first["distribution"] is None and first["version"] is None  # only on the path: no distribution
    assert re.fullmatch(r"[0-9a-f]{64}", first["source_sha256"])
    assert plugin_identity("lone_plugin:other") == first  # the module's code, whichever factory of it
    original = src.read_text()
    src.write_text(original.replace("pass", "return []"))
    edited = plugin_identity("lone_plugin:build")
    assert edited["source_sha256"] != first["source_sha256"]
    src.write_text(original)  # the same bytes again: the same identity (content, not time)
    assert plugin_identity("lone_plugin:build") == first
    source = plugin_source("lone_plugin:build")
    assert source["root"] == str(src) and source["files"] == 1 and source["module"] == "lone_plugin"
    assert "lone_plugin" not in sys.modules and not (tmp_path / "imported.mark").exists()


def test_every_source_file_of_a_plugins_package_counts_and_its_init_never_runs(tmp_path, monkeypatch):
    pkg = tmp_path / "io_pkg"
    write(pkg / "__init__.py", EXPLODES.format(name="io_pkg"))
    write(pkg / "loaders" / "__init__.py", "")
    write(pkg / "loaders" / "fast_io.py", "from io_pkg.helpers import decode\n\ndef build(ctx):\n    return []\n")
    helpers = write(pkg / "helpers.py", "def decode(x):\n    return x\n")
    notes = write(pkg / "notes.txt", "not code\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ref = "io_pkg.loaders.fast_io:build"
    assert find_module("io_pkg.loaders.fast_io").origin == str(pkg / "loaders" / "fast_io.py")
    first = plugin_source(ref)
    assert first["root"] == str(pkg) and first["files"] == 4 and first["module"] == "io_pkg.loaders.fast_io"
    helpers.write_text("def decode(x):\n    return x + 0\n")  # a helper beside the plugin: its code too
    second = plugin_identity(ref)
    assert second["source_sha256"] != first["identity"]["source_sha256"]
    notes.write_text("edited, still not code\n")
    write(pkg / "__pycache__" / "helpers.cpython-311.pyc", "compiled")
    assert plugin_identity(ref) == second  # neither data nor compiled files count
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    pkg.rename(moved / "io_pkg")
    monkeypatch.syspath_prepend(str(moved))
    assert plugin_identity(ref) == second  # the same code installed elsewhere: the same identity
    assert "io_pkg" not in sys.modules and not list(tmp_path.rglob("imported.mark"))


def test_a_distributions_version_counts_beside_its_source(tmp_path, monkeypatch):
    site = tmp_path / "site"
    write(site / "dist_plugin" / "__init__.py", "def build(ctx):\n    return []\n")
    info = site / "dist_plugin-1.0.dist-info"
    meta = write(info / "METADATA", "Metadata-Version: 2.1\nName: dist-plugin\nVersion: 1.0\n")
    write(info / "top_level.txt", "dist_plugin\n")
    monkeypatch.syspath_prepend(str(site))
    first = plugin_identity("dist_plugin:build")
    assert (first["distribution"], first["version"]) == ("dist-plugin", "1.0")
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 1.1"))  # a release, the source the same
    bumped = plugin_identity("dist_plugin:build")
    assert bumped == {**first, "version": "1.1"}
    assert plugin_source("dist_plugin:build")["editable"] is False


@pytest.mark.skipif(
    "threaded-pil" not in installed_plugins(),
    reason=("the example plugin is not installed: pip install -e examples/threaded-loader (make does)"),
)
def test_an_editable_install_is_named_by_its_version_and_the_source_it_runs():
    """examples/threaded-loader, installed editable: its version does not follow its source, the hash does."""
    import tomllib

    version = tomllib.loads((REPO / "examples/threaded-loader/pyproject.toml").read_text())["project"]["version"]
    source = plugin_source(installed_plugins()["threaded-pil"])
    assert source["root"] == str(REPO / "examples/threaded-loader/loaderbench_threaded.py") and source["editable"]
    assert source["identity"]["distribution"] == "loaderbench-threaded-loader"
    assert source["identity"]["version"] == version
    assert re.fullmatch(r"[0-9a-f]{64}", source["identity"]["source_sha256"])
    cfg = validate_config({"loaders": ["threaded-pil"], "batch_sizes": [4]}, find_plugins=True)
    spec = cell_spec(cfg, f"threaded-pil_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0")
    assert spec.loader_identity == source["identity"] and spec.to_dict()["loader_identity"] == source["identity"]


def test_a_plugin_cells_spec_carries_its_identity_and_a_built_in_cells_spec_and_hash_stay(tmp_path, monkeypatch):
    write(tmp_path / "spec_plugin.py", GOOD)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = validate_config({"loaders": ["torchvision", "spec_plugin:build"], "batch_sizes": [4]})
    tier = cfg["tiers"][0]
    spec = cell_spec(cfg, f"spec-plugin_{tier}_g1_b4_fp32_dp_r0")
    assert spec.to_dict()["loader_identity"] == plugin_identity("spec_plugin:build")
    builtin = cell_spec(cfg, f"torchvision_{tier}_g1_b4_fp32_dp_r0")
    assert builtin.loader_identity is None and "loader_identity" not in builtin.to_dict()
    assert spec_hash(builtin) == spec_hash(cell_spec(validate_config({"batch_sizes": [4]}), builtin.cell_id))
    before = spec_hash(spec)
    (tmp_path / "spec_plugin.py").write_text(GOOD + "\n# tuned\n")
    assert spec_hash(cell_spec(cfg, spec.cell_id)) != before
    record = make_record(spec, "failed", reason="x", **record_parts())
    assert record["spec"]["loader_identity"] == spec.loader_identity
    assert record["provenance"]["plugin"]["reference"] == "spec_plugin:build"
    assert record["provenance"]["plugin"]["root"] == str(tmp_path / "spec_plugin.py")
    assert record["provenance"]["plugin"]["identity"] != spec.loader_identity  # the code as the cell ended: edited
    assert "plugin" not in make_record(builtin, "failed", reason="x", **record_parts())["provenance"]


def test_validate_config_refuses_a_plugin_module_that_cannot_be_found_naming_the_key(tmp_path, monkeypatch, capsys):
    write(tmp_path / "plugins" / "found_plugin.py", EXPLODES.format(name="found_plugin"))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    storage = {"disk": str(tmp_path / "tier")}
    (tmp_path / "tier").mkdir()
    cases = [
        (
            {"loaders": ["torchvision", "missing_plugin_mod:build"]},
            "config key 'loaders': plugin 'missing_plugin_mod:build': module 'missing_plugin_mod' cannot be found here",
        ),
        (
            {"loaders": ["mine"], "plugins": {"mine": "found_plugin.sub:build"}},
            "config key 'plugins.mine': module 'found_plugin.sub' cannot be found here",
        ),
        (
            {"parts": [{"name": "a", "loaders": ["torchvision"]}, {"name": "b", "loaders": ["gone_plugin:build"]}]},
            "config key 'parts[1]' (b): config key 'loaders': plugin 'gone_plugin:build': module 'gone_plugin' cannot",
        ),
    ]
    for raw, message in cases:
        path = write_config(tmp_path, {"storage": storage, "batch_sizes": [4], **raw})
        assert cli(["validate-config", "--config", str(path)]) == 2, raw
        err = capsys.readouterr().err
        assert message in err and "PYTHONPATH" in err, err
        assert cli(["validate-config", "--config", str(path), "--skip-paths"]) == 0  # a config for another machine
        assert "valid" in capsys.readouterr().out
    path = write_config(tmp_path, {"storage": storage, "batch_sizes": [4], "loaders": ["found_plugin:build"]})
    assert cli(["validate-config", "--config", str(path)]) == 0
    assert f"{path}: valid (1 cells)" in capsys.readouterr().out
    assert "found_plugin" not in sys.modules and not (tmp_path / "plugins" / "imported.mark").exists()
    with pytest.raises(ConfigError, match="module 'missing_plugin_mod' cannot be found"):
        validate_config({"loaders": ["missing_plugin_mod:build"]}, find_plugins=True)


@pytest.mark.e2e
def test_snakemake_measures_a_plugin_cell_again_when_the_plugin_changes_and_only_then(tmp_path, monkeypatch):
    """A broken plugin's cell fails; unchanged, `snakemake -n` has nothing to do; fixed, the dry run lists that cell
    (and no other) for its changed params, and the run measures it with the new identity in its record."""
    plugins = tmp_path / "plugins"
    src = write(plugins / "edited_plugin.py", BROKEN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}
    env.pop("LOADERBENCH_WARM_SOCKET", None)  # a server started elsewhere has another path
    cfg = tiny_config(
        tmp_path,
        storage={"disk-a": str(tmp_path / "tier-a")},
        precisions=["fp32"],
        loaders=["torchvision", "edited_plugin:build"],
    )
    plugin_cell, builtin_cell = "edited-plugin_disk-a_g1_b4_fp32_dp_r0", "torchvision_disk-a_g1_b4_fp32_dp_r0"
    # the two cells' records as targets (before --configfile, which takes every file after it)
    args = [
        f"results/cells/{plugin_cell}.json",
        f"results/cells/{builtin_cell}.json",
        "--configfile",
        str(write_config(tmp_path, cfg)),
    ]
    snakemake(tmp_path, *args, env=env)
    failed = cell_record(tmp_path, plugin_cell)
    assert failed["status"] == "failed" and "images of shape (4, 3, 33, 32)" in failed["reason"]
    monkeypatch.syspath_prepend(str(plugins))  # to take the identity here as Snakemake did
    broken_identity = plugin_identity("edited_plugin:build")
    assert failed["spec"]["loader_identity"] == broken_identity
    assert failed["provenance"]["plugin"]["root"] == str(src)
    assert failed["provenance"]["plugin"]["identity"] == broken_identity
    builtin_measured = cell_record(tmp_path, builtin_cell)["finished_at"]

    unchanged = snakemake(tmp_path, *args, "-n", env=env)
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr

    src.write_text(textwrap.dedent(GOOD))  # the fix
    fixed_identity = plugin_identity("edited_plugin:build")
    assert fixed_identity["source_sha256"] != broken_identity["source_sha256"]
    planned = snakemake(tmp_path, *args, "-n", env=env)
    out = planned.stdout + planned.stderr
    assert re.search(r"^cell\s+1$", out, re.MULTILINE), out  # the plugin's cell alone
    assert f"cell={plugin_cell}" in out and f"cell={builtin_cell}" not in out
    assert "Params have changed since last execution" in out

    snakemake(tmp_path, *args, env=env)
    measured = cell_record(tmp_path, plugin_cell)
    assert measured["status"] == "ok" and measured["metrics"]["steps"] == 3, measured["reason"]
    assert measured["spec"]["loader_identity"] == fixed_identity
    assert measured["provenance"]["plugin"]["identity"] == fixed_identity
    assert cell_record(tmp_path, builtin_cell)["finished_at"] == builtin_measured  # not measured again
    again = snakemake(tmp_path, *args, "-n", env=env)
    assert "Nothing to be done" in again.stdout + again.stderr
