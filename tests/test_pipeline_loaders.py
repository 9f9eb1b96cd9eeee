"""Every loader, and the dp and ddp paths, through real Snakemake cell jobs on the CPU: DALI in its CPU-only mode
(device_id=None), nvjpeg's decode path on the CPU, the synthetic ceiling, ddp with 2 gloo processes."""

from __future__ import annotations

import pandas as pd
import pytest

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from loaderbench.core.records import validate_record
from tests.conftest import cell_record, cells_table, snakemake, tiny_config, write_config

pytestmark = pytest.mark.e2e
LOADERS = ["torchvision", "opencv", "dali-sc", "dali-mc", "dali-cpu", "nvjpeg", "synthetic"]
PARALLEL_LOADERS = ["torchvision", "opencv", "dali-mc"]


def run_grid(work, **overrides) -> dict:
    """Run a tiny grid on one tier (disk-a, the baseline's) with these overrides to the end; its config."""
    cfg = tiny_config(work, storage={"disk-a": str(work / "tier-a")}, **overrides)
    snakemake(work, "--configfile", str(write_config(work, cfg)))
    return cfg


@pytest.fixture(scope="module")
def every_loader(tmp_path_factory):
    """Every loader at fp32 and amp on one tier: the run's folder."""
    work = tmp_path_factory.mktemp("every-loader")
    run_grid(work, loaders=LOADERS)
    return work


def test_every_loader_runs_through_the_pipeline_on_the_cpu(every_loader):
    table = cells_table(every_loader)
    assert sorted(set(table["Dataloader"])) == sorted(LOADERS) and len(table) == 14
    assert set(table["Status"]) == {"ok"} and (table["Steps"] == 3).all()


def test_dali_on_the_cpu_decodes_and_augments_on_the_cpu_with_a_prefetch_queue_of_2(every_loader):
    rec = cell_record(every_loader, "dali-cpu_disk-a_g1_b4_fp32_dp_r0")
    validate_record(rec)
    info = rec["metrics"]["loader_info"]
    assert info["decoder"] == "cpu" and info["augment_device"] == "cpu" and info["prefetch_queue_depth"] == 2


def test_the_gpu_decode_loader_says_which_library_decoded(every_loader):
    """TorchCodec where it is installed for this torch, else torchvision.io (deprecated in TorchCodec's favour)."""
    from loaderbench.loaders.nvjpeg import jpeg_decoder

    info = cell_record(every_loader, "nvjpeg_disk-a_g1_b4_fp32_dp_r0")["metrics"]["loader_info"]
    assert info["decode_library"] == jpeg_decoder()[0]


def test_under_amp_every_loader_delivers_the_autocast_dtype_in_channels_last(every_loader):
    """bfloat16 on the CPU, in channels_last, as the model takes it."""
    for lo in LOADERS:
        rec = cell_record(every_loader, f"{lo}_disk-a_g1_b4_amp_dp_r0")
        given = rec["metrics"]["input"]
        assert (given["dtype"], given["channels_last"]) == ("bfloat16", True), lo
        assert isinstance(given["delivered_dtype"], str), lo  # what the loader delivered, before the cast


def test_under_fp32_every_loader_delivers_float32(every_loader):
    for lo in LOADERS:
        assert cell_record(every_loader, f"{lo}_disk-a_g1_b4_fp32_dp_r0")["metrics"]["input"]["dtype"] == "float32", lo


def test_the_synthetic_ceiling_has_au_1_and_every_cell_a_positive_au(every_loader):
    au = cells_table(every_loader).set_index(["Dataloader", "Precision"])["AU"]
    assert au[("synthetic", "fp32")] == pytest.approx(1.0) and au[("synthetic", "amp")] == pytest.approx(1.0)
    assert (au > 0).all()


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    """torchvision, opencv and dali-mc (CPU-only DALI) with dp and ddp at 1 and 2 devices, fp32: (the run's folder,
    its config)."""
    work = tmp_path_factory.mktemp("parallel")
    cfg = run_grid(work, loaders=PARALLEL_LOADERS, gpus=[1, 2], parallel=["dp", "ddp"], precisions=["fp32"])
    return work, cfg


@pytest.fixture(scope="module")
def parallel_table(parallel) -> pd.DataFrame:
    work, _ = parallel
    return cells_table(work)


def test_the_table_has_a_row_for_each_loader_device_count_and_parallel_mode(parallel_table):
    assert len(parallel_table) == 3 * 2 * 2 and "Parallel" in parallel_table.columns


def test_dp_over_2_devices_is_recorded_as_skipped_on_a_cpu_only_host(parallel_table):
    t = parallel_table.set_index(["Dataloader", "GPU", "Parallel"])
    for lo in PARALLEL_LOADERS:
        assert t.loc[(lo, 2, "dp"), "Status"] == "skipped" and "needs 2 GPUs" in t.loc[(lo, 2, "dp"), "Reason"]


def test_dp_and_ddp_cells_run_through_the_pipeline_on_the_cpu(parallel_table):
    """ddp at 1 and 2 ranks (2 gloo processes), dp at 1 device: every such cell ok."""
    t = parallel_table.set_index(["Dataloader", "GPU", "Parallel"])
    for lo in PARALLEL_LOADERS:
        for g in (1, 2):
            for par in ("ddp", "dp") if g == 1 else ("ddp",):
                row = t.loc[(lo, g, par)]
                assert row["Status"] == "ok" and row["Samples/s"] > 0, (lo, g, par, row["Status"], row["Reason"])


def test_gpu_efficiency_of_a_2_rank_ddp_cell_is_against_the_1_rank_ddp_cell_of_its_loader(parallel_table):
    """dali-mc's would be against dali-sc's, absent here: it has none."""
    t = parallel_table.set_index(["Dataloader", "GPU", "Parallel"])
    for lo in PARALLEL_LOADERS:
        eff = t.loc[(lo, 2, "ddp"), "GPU Efficiency"]
        if lo == "dali-mc":
            assert pd.isna(eff)
        else:
            one_rank = t.loc[(lo, 1, "ddp"), "Samples/s"]
            assert eff == pytest.approx(t.loc[(lo, 2, "ddp"), "Samples/s"] / (2 * one_rank), rel=2e-3)


def test_dp_and_ddp_records_share_one_schema_with_one_entry_per_rank(parallel):
    work, cfg = parallel
    for cid in cell_ids(validate_config(cfg)):
        rec = cell_record(work, cid)
        validate_record(rec)
        if rec["status"] == "ok":
            ranks = rec["metrics"]["parallel"]["per_rank"]
            assert len(ranks) == (2 if "_g2_" in cid else 1) and rec["spec"]["parallel"] in cid


def test_a_2_rank_ddp_dali_cell_records_its_sharding_and_the_samples_of_both_ranks(parallel):
    work, _ = parallel
    rec = cell_record(work, "dali-mc_disk-a_g2_b4_fp32_ddp_r0")
    assert rec["metrics"]["loader_info"]["sharding"] == "shard 0 of 2" and rec["metrics"]["samples"] == 3 * 8
