"""The real Snakemake pipeline on the CPU: a tiny grid end to end, resume after deletion, resume after a kill."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from loaderbench.config import cell_ids, validate_config
from loaderbench.records import validate_record
from tests.conftest import snakemake, tiny_config, write_config

pytestmark = pytest.mark.e2e


def test_every_loader_runs_through_the_pipeline_on_the_cpu(tmp_path):
    """DALI in its CPU-only mode (device_id=None), nvjpeg's decode path on the CPU and the synthetic ceiling,
    through real Snakemake jobs."""
    loaders = ["torchvision", "opencv", "dali-sc", "dali-mc", "dali-cpu", "nvjpeg", "synthetic"]
    cfg = tiny_config(tmp_path, loaders=loaders, storage={"disk-a": str(tmp_path / "tier-a")},
                      baseline={"loader": "torchvision", "tier": "disk-a", "gpus": 1, "batch_size": 4, "precision": "fp32"})  # fmt: skip
    cfg_path = write_config(tmp_path, cfg)
    snakemake(tmp_path, "--configfile", str(cfg_path))
    table = pd.read_csv(tmp_path / "results/tables/cells.csv")
    assert sorted(set(table["Dataloader"])) == sorted(loaders) and len(table) == 14
    assert set(table["Status"]) == {"ok"} and (table["Steps"] == 3).all()
    rec = json.loads((tmp_path / "results/cells/dali-cpu_disk-a_g1_b4_fp32_dp_r0.json").read_text())
    validate_record(rec)
    info = rec["metrics"]["loader_info"]
    assert info["decoder"] == "cpu" and info["augment_device"] == "cpu" and info["prefetch_queue_depth"] == 2
    # under amp every loader delivers the autocast dtype (bfloat16 on the CPU) in channels_last, as the model takes it
    for lo in loaders:
        rec = json.loads((tmp_path / f"results/cells/{lo}_disk-a_g1_b4_amp_dp_r0.json").read_text())
        assert rec["metrics"]["input"] == {"dtype": "bfloat16", "channels_last": True}, lo
        rec = json.loads((tmp_path / f"results/cells/{lo}_disk-a_g1_b4_fp32_dp_r0.json").read_text())
        assert rec["metrics"]["input"]["dtype"] == "float32", lo
    au = table.set_index(["Dataloader", "Precision"])["AU"]
    assert au[("synthetic", "fp32")] == pytest.approx(1.0) and au[("synthetic", "amp")] == pytest.approx(1.0)
    assert (au > 0).all()


def test_dp_and_ddp_cells_run_through_the_pipeline_on_the_cpu(tmp_path):
    """ddp with 2 gloo processes for torchvision, opencv and dali-mc (CPU-only DALI), the dp path at 1 device, and
    dp over 2 devices recorded as skipped on a CPU-only host - all real cell jobs, one record schema."""
    loaders = ["torchvision", "opencv", "dali-mc"]
    cfg = tiny_config(tmp_path, loaders=loaders, storage={"disk-a": str(tmp_path / "tier-a")}, gpus=[1, 2],
                      parallel=["dp", "ddp"], precisions=["fp32"],
                      baseline={"loader": "torchvision", "tier": "disk-a", "gpus": 1, "batch_size": 4, "precision": "fp32"})  # fmt: skip
    cfg_path = write_config(tmp_path, cfg)
    snakemake(tmp_path, "--configfile", str(cfg_path))
    table = pd.read_csv(tmp_path / "results/tables/cells.csv")
    assert len(table) == 3 * 2 * 2 and "Parallel" in table.columns
    t = table.set_index(["Dataloader", "GPU", "Parallel"])
    for lo in loaders:
        assert t.loc[(lo, 2, "dp"), "Status"] == "skipped" and "needs 2 GPUs" in t.loc[(lo, 2, "dp"), "Reason"]
        for g in (1, 2):
            for par in ("ddp", "dp") if g == 1 else ("ddp",):
                row = t.loc[(lo, g, par)]
                assert row["Status"] == "ok" and row["Samples/s"] > 0, (lo, g, par, row["Status"], row["Reason"])
        # GPU Efficiency of the 2-rank ddp cell is against the 1-rank ddp cell of the same loader (dali-mc: dali-sc's,
        # absent here, so none)
        eff = t.loc[(lo, 2, "ddp"), "GPU Efficiency"]
        if lo == "dali-mc":
            assert pd.isna(eff)
        else:
            assert eff == pytest.approx(t.loc[(lo, 2, "ddp"), "Samples/s"] / (2 * t.loc[(lo, 1, "ddp"), "Samples/s"]), rel=2e-3)
    for cid in cell_ids(validate_config(cfg)):
        rec = json.loads((tmp_path / "results/cells" / f"{cid}.json").read_text())
        validate_record(rec)
        if rec["status"] == "ok":
            ranks = rec["metrics"]["parallel"]["per_rank"]
            assert len(ranks) == (2 if "_g2_" in cid else 1) and rec["spec"]["parallel"] in cid
    rec = json.loads((tmp_path / "results/cells/dali-mc_disk-a_g2_b4_fp32_ddp_r0.json").read_text())
    assert rec["metrics"]["loader_info"]["sharding"] == "shard 0 of 2" and rec["metrics"]["samples"] == 3 * 8
