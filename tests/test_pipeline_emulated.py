"""The emulated HDD tier of the finished run (disk-b, a real FUSE mount throttled to one head) and what is measured
around its cells: telemetry, the tier probe, the diagnosis of every cell. Skipped without FUSE."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from loaderbench.data.emulated import mount_entry
from tests.conftest import cell_record, needs_fuse

pytestmark = [pytest.mark.e2e, needs_fuse]
EMULATED_CELLS = [f"{loader}_disk-b_g1_b4_fp32_dp_r0" for loader in ("torchvision", "opencv")]


@pytest.fixture(scope="module")
def diagnosis(finished_run) -> pd.DataFrame:
    work, _ = finished_run
    return pd.read_csv(work / "results/tables/diagnosis.csv")


@pytest.fixture(scope="module")
def probed_hdd(finished_run) -> pd.DataFrame:
    """The tier probe's rows of the emulated tier."""
    work, _ = finished_run
    probe = pd.read_csv(work / "results/tables/tier_probe.csv")
    return probe[probe["Tier"] == "disk-b"]


def test_emulated_tier_cells_read_through_the_mount(finished_run):
    work, _ = finished_run
    for cid in EMULATED_CELLS:
        tier = cell_record(work, cid)["tier"]
        assert tier["kind"] == "emulated" and tier["read_path"].startswith(str(work / "mnt-b")), cid


def test_every_image_an_emulated_tier_cell_read_paid_at_least_one_positioning_of_the_head(finished_run):
    work, _ = finished_run
    for cid in EMULATED_CELLS:
        rec = cell_record(work, cid)
        tier, m = rec["tier"], rec["metrics"]
        read = (m["warmup_steps"] + m["steps"]) * m["global_batch"]
        # every image the cell read went through the throttled mount: at least one positioning (5 ms) each
        assert tier["emulated"]["seeks"] >= read and tier["emulated"]["busy_s"] >= read * 0.005, cid


def test_emulated_tier_cells_evict_the_tier_from_the_page_cache_with_fadvise(finished_run):
    work, _ = finished_run
    for cid in EMULATED_CELLS:
        assert cell_record(work, cid)["tier"]["eviction"]["method"] in ("fadvise", "fadvise+drop_caches"), cid


def test_a_cells_telemetry_timeline_has_rows_before_and_in_the_window_with_the_cpu_load(finished_run):
    """A timeline whose window rows match the record's window (and the summary in the record, below). Before the
    window it has setup and warm-up rows; start-up rows only when the process took a sample period to start (a
    process forked warm starts in hundredths of a second)."""
    work, _ = finished_run
    for cid in EMULATED_CELLS:
        tl = pd.read_csv(work / f"results/telemetry/{cid}.csv")
        phases = set(tl["phase"])
        assert "window" in phases and {"setup", "warmup"} & phases and tl["cpu_mean"].notna().all(), (cid, phases)


def test_a_cells_record_summarises_its_telemetry_with_its_gpus_or_why_there_are_none(finished_run):
    work, _ = finished_run
    for cid in EMULATED_CELLS:
        telemetry = cell_record(work, cid)["telemetry"]
        assert telemetry["samples"] >= 1 and telemetry["cpu_mean_pct"]["mean"] > 0, cid
        assert "NVML" in telemetry["gpu_reason"] or telemetry["gpus"], cid


def test_the_emulated_tier_is_unmounted_after_every_cell(finished_run):
    work, _ = finished_run
    assert mount_entry(work / "mnt-b") is None
    assert not (work / "mnt-b.owner.json").exists()


def test_the_tier_probe_measures_the_emulated_tier_with_1_and_8_readers_under_its_model(probed_hdd):
    assert set(probed_hdd["Readers"]) == {1, 8} and (probed_hdd["Model"] == "test-hdd").all()


def test_the_probed_read_rate_of_the_emulated_tier_is_paced_by_its_model(finished_run, probed_hdd):
    """Every file the probe read through the mount paid the model's 5 ms positioning (its counters say so whatever
    the host's speed): no run read faster than the model predicts. How much slower a loaded host reads is not
    asserted."""
    work, _ = finished_run
    assert (probed_hdd["Measured/predicted"] < 1.2).all(), probed_hdd
    probe = json.loads((work / "results/probe/disk-b.json").read_text())
    files, stats = sum(run["files"] for run in probe["runs"]), probe["emulated_stats"]
    assert files > 0 and stats["seeks"] >= files and stats["busy_s"] >= files * 0.005, stats


def test_every_cell_is_diagnosed_with_a_bottleneck_and_its_evidence(diagnosis):
    assert len(diagnosis) == 10 and diagnosis["Bottleneck"].notna().all()
    assert diagnosis["Evidence"].str.len().gt(20).all()


def test_the_synthetic_loader_is_diagnosed_compute_bound(diagnosis):
    assert set(diagnosis.loc[diagnosis["Dataloader"] == "synthetic", "Bottleneck"]) == {"compute-bound"}


def test_the_bundle_index_shows_the_diagnosis_and_the_measured_read_rate_of_each_tier(finished_run):
    work, _ = finished_run
    index = (work / "results/bundle/index.html").read_text()
    assert "Diagnosis: the bottleneck of each cell" in index and "Measured read rate of each tier" in index


def test_the_bundle_carries_the_telemetry_and_its_index_links_it(finished_run):
    work, _ = finished_run
    index = (work / "results/bundle/index.html").read_text()
    assert (work / "results/bundle/telemetry").is_dir() and "telemetry/" in index
