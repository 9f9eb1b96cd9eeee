"""One record per loader (core/registry.py): a loader known only by its record is planned, diagnosed, predicted and
tuned from it, and a plugin declares the same facts as its factory's attributes."""

from __future__ import annotations

import dataclasses

import pytest

from loaderbench.core import cells, registry
from loaderbench.core.cells import cell_spec, is_cell
from loaderbench.core.config import validate_config
from loaderbench.core.records import plugin_facts, upgrade
from loaderbench.core.registry import PLUGIN, LoaderRecord, loader_record, loaders_where, plugin_record
from loaderbench.experiments import tuneknobs
from loaderbench.experiments.tuneknobs import knobs
from loaderbench.report import aggregate, diagnose
from loaderbench.report.aggregate import cells_table, repeats_table
from loaderbench.report.columns import SETUP
from loaderbench.whatif import measured, parts, predictions, terms
from loaderbench.whatif.predictions import matrix
from tests.conftest import cells_with_au
from tests.test_diagnose import cell, row
from tests.test_sharing import record

TOY = LoaderRecord(module="toy_loader", backlog="workers")  # decodes and augments on the CPU


@pytest.fixture
def toy(monkeypatch):
    """Registers the loader `toy` through its record alone; the test swaps its record with `toy(**facts)`."""

    def register(**facts) -> LoaderRecord:
        rec = dataclasses.replace(TOY, **facts)
        monkeypatch.setitem(registry.LOADERS, "toy", rec)
        return rec

    register()
    return register


def test_the_scattered_lists_are_gone():
    gone = {
        registry: ("SHARD_LOADERS", "BACKLOG"),
        cells: ("TIERLESS",),
        diagnose: ("GPU_PREP_LOADERS", "HOST_LOADERS"),
        **{m: ("DEVICE_WORK", "DP_PER_GPU", "DDP_SINGLE") for m in (measured, parts, predictions, terms)},
        tuneknobs: ("GPU_WORK",),
        aggregate: ("ONE_GPU_BASELINE",),
    }
    assert {m.__name__: [n for n in names if hasattr(m, n)] for m, names in gone.items()} == {
        m.__name__: [] for m in gone
    }


def test_the_records_say_what_the_lists_said():
    assert loaders_where(reads="shards") == ("wds", "dali-wds")
    assert loaders_where(reads="nothing") == ("synthetic",)
    assert loaders_where(decodes="gpu") == ("dali-sc", "dali-mc", "nvjpeg", "dali-wds")
    assert loaders_where(device_work=True) == ("dali-sc", "dali-mc", "dali-cpu", "nvjpeg", "dali-wds")
    assert loaders_where(dp="per_gpu") == ("dali-mc", "dali-cpu", "dali-wds")
    assert loaders_where(ddp="rank0") == ("dali-sc",)
    assert {n: r.one_gpu_baseline for n, r in registry.LOADERS.items() if r.one_gpu_baseline} == {"dali-mc": "dali-sc"}
    assert loader_record("some-plugin") == PLUGIN and not PLUGIN.device_work


def _prep_bound(loader: str):
    """A prep-bound cell of `loader` on a GPU: a prep stall of 30 ms from RAM, fetching adds 10 (diagnose's test)."""
    t = cells_with_au(
        [
            cell("synthetic", "hdd", 100.0),
            cell(loader, "ram", 130.0, kind="ram", wait_ms=30.0),
            cell(loader, "hdd", 140.0, wait_ms=40.0),
        ]
    )
    return row(diagnose.diagnose(t), loader, "hdd")["bottleneck"]


def _scaled(loader: str):
    """The 2-GPU dp prediction for `loader` from its 1-GPU cell, with no loader-alone cell."""
    recs = [record("synthetic", 8000.0, cores=1.0), record(loader, 2000.0, cores=27.0)]
    rows = matrix(recs, gpus=(2,))
    return rows[(rows["loader"] == loader) & (rows["gpus"] == 2) & (rows["parallel"] == "dp")].iloc[0]


def _tune_knobs(loader: str) -> list[str]:
    cfg = validate_config({"loaders": ["torchvision"], "batch_sizes": [4]})
    spec = cell_spec(cfg, f"torchvision_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0")  # its settings: the knobs' start
    return list(knobs(loader, spec, cpus=16, cuda=True))


def test_a_loader_added_as_one_record_is_diagnosed_predicted_and_tuned_from_it(toy):
    assert _prep_bound("toy") == "CPU-prep-bound"
    on_cpu = _scaled("toy")
    assert "a loader-alone cell" in on_cpu["lacks"] and "its own device work" not in on_cpu["lacks"]
    assert _tune_knobs("toy") == ["workers", "prefetch_factor", "compile"]

    toy(decodes="gpu")  # the one fact changed: it decodes on the GPU
    assert loader_record("toy").device_work
    assert _prep_bound("toy") == "GPU-prep-bound"
    on_gpu = _scaled("toy")
    assert "its own device work unknown, taken as none" in on_gpu["lacks"]  # the device-work term is on
    assert _tune_knobs("toy") == ["workers", "prefetch_factor", "step_stream_priority", "compile"]


def test_a_records_pipelines_and_reads_reach_the_prediction_and_the_grid(toy):
    assert _scaled("toy")["loader_side"] == 2000.0  # one pipeline in the one dp process
    toy(dp="per_gpu")
    assert _scaled("toy")["loader_side"] > 2000.0  # one per GPU: the cores the second GPU brings
    assert is_cell("toy", "none")
    toy(reads="nothing")
    assert not is_cell("toy", "none")  # no loader and no model: nothing to measure


def test_a_plugin_declares_its_facts_as_attributes_of_its_factory():
    def build(ctx):
        return iter(())

    assert plugin_record(build) == PLUGIN  # declaring nothing: files, decoded and augmented on the CPU, no knobs
    build.loaderbench_decodes = "gpu"
    build.loaderbench_dp = "per_gpu"
    build.loaderbench_knobs = ["workers"]
    declared = plugin_record(build)
    assert (declared.decodes, declared.device_work, declared.dp, declared.knobs) == (
        "gpu",
        True,
        "per_gpu",
        ("workers",),
    )
    build.loaderbench_reads = "tar"
    with pytest.raises(ValueError, match="loaderbench_reads 'tar': one of 'files', 'shards', 'nothing'"):
        plugin_record(build)


def _plugin_record(loader, step_ms, wait_ms, tier="hdd", repeat=0, facts=None):
    """A made-up ok record of a 1-GPU cell whose step took `step_ms`, read as `records.read_record` reads it; a plugin
    cell's keeps its factory's `facts` (`records.plugin_facts`)."""
    plugin = {"plugin": {"reference": "fast_io:build", "facts": facts}} if facts is not None else {}
    return upgrade(
        {
            "cell_id": f"{loader}_{tier}_g1_b128_fp32_dp_r{repeat}",
            "status": "ok",
            "spec": {
                "loader": loader,
                "tier": tier,
                "gpus": 1,
                "batch_size": 128,
                "precision": "fp32",
                "repeat": repeat,
            },
            "metrics": {
                "time_s": step_ms / 10,
                "steps": 100,
                "samples_per_s": 128_000 / step_ms * (1 + repeat / 1000),
                "data_wait_ms": {"mean": wait_ms},
                "device": {"type": "cuda"},
                "window": {"ci95_rel_halfwidth": 0.01, "converged": True},
            },
            "tier": {"kind": "ram" if tier == "ram" else "path"},
            "provenance": {"run_id": "run-1", "host": {"hostname": "box"}, **plugin},
        }
    )


def test_a_plugin_cells_recorded_facts_name_its_bottleneck_where_the_report_cannot_import_it():
    """The same prep-bound plugin cell (a prep stall of 30 ms from RAM, fetching adds 10): GPU-prep-bound where its
    record says its factory decodes on the GPU, CPU-prep-bound where it says the CPU, as a record without facts is."""

    def build(ctx):
        return iter(())

    def label(declared: str | None):
        build.loaderbench_decodes = declared
        facts = plugin_facts(build) if declared else None
        records = [_plugin_record("synthetic", 100.0, 0.0, repeat=r) for r in range(2)]
        for r in range(2):
            records += [_plugin_record("fast-io", 130.0, 30.0, "ram", r, facts)]
            records += [_plugin_record("fast-io", 140.0, 40.0, "hdd", r, facts)]
        t = cells_table(repeats_table(records), {"loader": "fast-io", "tier": "hdd", **dict.fromkeys(SETUP)})
        d = diagnose.diagnose(t)
        return row(d, "fast-io", "hdd")["bottleneck"]

    assert plugin_facts(build)["decodes"] == "cpu"
    assert label("gpu") == "GPU-prep-bound"
    assert label("cpu") == "CPU-prep-bound"
    assert label(None) == "CPU-prep-bound"  # no facts kept: the plugin defaults (registry.PLUGIN)
    build.loaderbench_decodes = "tpu"
    assert plugin_facts(build) == {"error": "loaderbench_decodes 'tpu': one of 'cpu', 'gpu', None"}
