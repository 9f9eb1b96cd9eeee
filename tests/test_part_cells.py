"""The what-if's part cells measured for real on the CPU: the step's host time and the main thread's CPU time in every
record, a `beside` part (the loader's batches fetched and dropped, the model stepped on a synthetic batch) and a
`ranks` part (the loader alone at n ranks, every batch delivered to the one device)."""

from __future__ import annotations

import os
import textwrap

import pytest

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.records import validate_record
from loaderbench.core.registry import reference_name
from loaderbench.engine.runner.runcell import run_cell
from tests.conftest import staged_disk

pytestmark = pytest.mark.slow

SLEEP_S = 0.4  # what the slow plugin's main thread sleeps for each batch: far above a CPU step's noise

# batches of NaN images, each after a sleep in `__next__`, on the main thread: a model trained on them diverges
SLOW = f"""
    import time

    import torch

    def build(ctx):
        ctx.info.update(prefetch_batches=0)
        shape = (ctx.batch_size, 3, ctx.crop_size, ctx.crop_size)

        class Batches:
            def __iter__(self):
                return self

            def __next__(self):
                time.sleep({SLEEP_S})
                return (torch.full(shape, float("nan"), device=ctx.device),
                        torch.randint(0, 3, (ctx.batch_size,), device=ctx.device))

        return Batches()
"""

# a model whose step takes milliseconds: the sleep beside it stands out of the host's noise
TINY = """
    import torch

    def build(num_classes):
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(4, num_classes),
        )
"""


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    """The staged tier and its config, a 6-step window."""
    folder, cfg = staged_disk(tmp_path_factory, small_dataset, "parts", window={"steps": 6})
    return folder, cfg


@pytest.fixture
def slow(staged, tmp_path, monkeypatch):
    """The staged tier and a config of the slow plugin loader and the tiny model, both findable here and in the
    cells' processes."""
    (tmp_path / "slow_plugin.py").write_text(textwrap.dedent(SLOW))
    (tmp_path / "tiny_net.py").write_text(textwrap.dedent(TINY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("LOADERBENCH_WARM_SOCKET", raising=False)  # a server started elsewhere has another path
    folder, cfg = staged
    keep = {k: v for k, v in cfg.items() if k not in ("parts", "plugins", "model_plugins")}
    return folder, validate_config({**keep, "loaders": ["slow_plugin:build"], "models": ["tiny_net:build"]})


def measure(staged, tmp_path, cid: str) -> dict:
    folder, cfg = staged
    record = run_cell(cell_spec(cfg, cid, in_grid=False), folder / "disk.json", tmp_path / f"{cid}.json")
    validate_record(record)
    assert record["status"] == "ok", record.get("reason")
    assert record["cell_id"] == cid
    return record


@pytest.mark.usefixtures("warm_cells")
def test_a_real_cells_record_carries_the_steps_host_time_and_the_main_threads_cpu_time(staged, tmp_path):
    m = measure(staged, tmp_path, "torchvision_disk_g1_b4_fp32_dp_r0")["metrics"]
    assert set(m["host_step_ms"]) == {"mean", "p50"}
    assert m["host_step_ms"]["mean"] > 0 and m["host_step_ms"]["p50"] > 0 and m["main_cpu_ms"] > 0
    # on the CPU the step's host time is its compute; the main thread's CPU time a step holds the step's own share
    assert m["host_step_ms"]["mean"] == pytest.approx(m["compute_ms"]["mean"])
    rank = m["parallel"]["per_rank"][0]
    assert rank["host_step_ms"] == pytest.approx(m["host_step_ms"]["mean"]) and rank["main_cpu_ms"] > 0


def test_a_beside_part_steps_its_model_on_a_synthetic_batch_and_pays_the_loaders_main_thread_time(slow, tmp_path):
    """The slow plugin's NaN images would make the model's loss NaN: the beside part's loss stays finite (it trained
    on the synthetic batch) while each step still waited the plugin's sleep for the batch it dropped, so its period
    is the model's synthetic ceiling's plus that sleep."""
    name = reference_name("slow_plugin:build")
    beside = measure(slow, tmp_path, f"{name}_disk_g1_b4_fp32_dp_tiny-net_beside_r0")
    ceiling = measure(slow, tmp_path, "synthetic_disk_g1_b4_fp32_dp_tiny-net_r0")["metrics"]
    m = beside["metrics"]
    assert beside["spec"]["beside"] is True and "ranks" not in beside["spec"]
    assert isinstance(m["final_loss"], float) and not any(w["code"] == "diverged" for w in m["warnings"])
    assert m["data_wait_ms"]["mean"] >= 0.9 * 1000 * SLEEP_S  # the loader's batch fetched on the main thread
    # each step's period is the model's step on the synthetic batch plus about the sleep (more than 80% of it, under
    # twice it on a busy host), and its rate is below the ceiling's by that much: at most a batch a 0.8 sleeps
    beside_ms = m["step_ms"] - m["host_step_ms"]["mean"]
    assert 0.8 * 1000 * SLEEP_S <= beside_ms <= 2 * 1000 * SLEEP_S, (beside_ms, m["host_step_ms"])
    assert m["samples_per_s"] <= 4 / (0.8 * SLEEP_S) < ceiling["samples_per_s"], (m["samples_per_s"], ceiling)
    # the step itself is the model's on the synthetic batch: far less than the sleep beside it
    assert m["host_step_ms"]["mean"] < 0.5 * 1000 * SLEEP_S
    trained = measure(slow, tmp_path, f"{name}_disk_g1_b4_fp32_dp_tiny-net_r0")["metrics"]
    assert any(w["code"] == "diverged" for w in trained["warnings"])  # the same loader trained on: NaN


@pytest.mark.usefixtures("warm_cells")
def test_a_ddp_ranks_part_runs_its_ranks_as_processes_each_on_its_share_of_the_host(staged, tmp_path):
    record = measure(staged, tmp_path, "torchvision_disk_g1_b4_fp32_ddp_none_ranks2_r0")
    m, par = record["metrics"], record["metrics"]["parallel"]
    assert record["spec"]["ranks"] == 2 and record["spec"]["model"] == "none" and record["spec"]["gpus"] == 1
    assert par["processes"] == 2 and par["backend"] == "gloo" and par["wrapper"] is None
    assert par["delivered_to"] == "cpu" and par["pipelines"] == 2
    ranks = par["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1] and len({r["pid"] for r in ranks}) == 2
    assert [p["pid"] for p in record["process_start"]] == [r["pid"] for r in ranks]
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert all(r["device"] == "cpu" and r["intra_op_threads"] == share and r["workers"] == 1 for r in ranks)
    assert m["loader_info"]["sampler"].endswith(", rank 0 of 2")  # each rank its own loader on its own shard
    assert m["global_batch"] == 8 and m["samples"] == m["steps"] * 8  # both ranks' batches a step


@pytest.mark.usefixtures("warm_cells")
@pytest.mark.parametrize("loader, pipelines", [("torchvision", 1), ("dali-mc", 2)])
def test_a_dp_ranks_part_makes_every_ranks_batches_in_one_process(staged, tmp_path, loader, pipelines):
    """dp: one process; a loader with one pipeline under dp makes the ranks' batches as one, one that builds a pipeline
    per GPU (dali-mc) builds one per rank, each on its shard."""
    record = measure(staged, tmp_path, f"{loader}_disk_g1_b4_fp32_dp_none_ranks2_r0")
    m, par = record["metrics"], record["metrics"]["parallel"]
    assert par["processes"] == 1 and len(par["per_rank"]) == 1 and len(record["process_start"]) == 1
    assert par["delivered_to"] == "cpu" and par["pipelines"] == pipelines
    assert m["global_batch"] == 8 and m["samples_per_s"] == pytest.approx(m["steps"] * 8 / m["time_s"])
    if loader == "dali-mc":
        assert m["loader_info"]["sharding"] == "shard 0 of 2" and m["loader_info"]["pipeline_batch"] == 4
