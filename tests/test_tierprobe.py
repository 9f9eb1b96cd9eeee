"""Page cache eviction and the tier probe, on a real disk and on a real emulated (FUSE) tier."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from loaderbench.core.provenance import filesystem_of
from loaderbench.data.cache import evict, resident_fraction
from loaderbench.data.emulated import DeviceModel, fuse_available, mount, predict
from loaderbench.data.tierprobe import ProbeError, probe, probe_manifest

FUSE_PROBLEM = fuse_available()
needs_fuse = pytest.mark.skipif(FUSE_PROBLEM is not None, reason=f"FUSE is not usable here: {FUSE_PROBLEM}")

SLOW_DISK = DeviceModel("test-slow-disk", access_ms=20, bandwidth_mb_s=100, concurrency=1)


def write_files(root: Path, n: int, size: int, seed: int = 5) -> list[dict]:
    """n random files under root; their manifest-style entries."""
    rng = random.Random(seed)
    entries = []
    for i in range(n):
        rel = f"c{i % 2}/f{i:03d}.jpg"
        data = rng.randbytes(size)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(root / rel, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        entries.append({"path": rel, "size": len(data), "sha256": "not-checked-here"})
    return entries


@pytest.fixture
def emulated(tmp_path):
    """A mounted emulated tier over 30 files of 50 kB, unmounted at the end whatever happens."""
    backing = tmp_path / "backing"
    entries = write_files(backing, 30, 50_000)
    m = mount(backing, tmp_path / "mnt", SLOW_DISK)
    try:
        yield m, entries
    finally:
        m.unmount()


def test_evict_makes_a_read_file_cold(tmp_path):
    fstype = filesystem_of(tmp_path)["fstype"]
    if fstype in ("tmpfs", "ramfs", None):
        pytest.skip(f"{tmp_path} is on {fstype}: its pages cannot be evicted, a real disk is needed")
    path = tmp_path / "data.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(4 << 20))
        os.fsync(f.fileno())
    empty = tmp_path / "empty.bin"
    empty.touch()
    path.read_bytes()
    assert resident_fraction([path, empty]) > 0.95
    record = evict([path, empty])
    assert record["method"] == "fadvise"  # targeted eviction was enough: the page cache as a whole is left alone
    assert record["files"] == 2 and record["resident_before"] > 0.95
    assert record["resident_after"] < 0.5 and resident_fraction([path]) < 0.5
    assert resident_fraction([empty]) == 0.0 and resident_fraction([]) == 0.0


@pytest.mark.slow
@needs_fuse
def test_probe_of_an_emulated_tier_is_paced_by_the_model(emulated):
    """Every file the probe reads through the mount pays the model's 20 ms positioning (the mount's counters say so
    whatever the host's speed), so no run reads faster than the model predicts; how much slower a loaded host reads
    is not asserted."""
    m, entries = emulated
    result = probe(m.mountpoint, entries, readers=(1, 4), model=SLOW_DISK)
    assert result["files_selected"] == 30
    for run in result["runs"]:
        assert run["files"] == 30 and run["bytes"] == sum(e["size"] for e in entries)
        expected = predict(SLOW_DISK, run["mean_file_bytes"], run["readers"])["files_per_s"]
        assert run["predicted"]["files_per_s"] == pytest.approx(expected)
        assert run["ratio"] <= 1.15, f"{run['readers']} readers: measured/predicted = {run['ratio']:.3f}"
        assert run["eviction"]["files"] == 30
    stats = m.stats()
    assert stats["seeks"] >= 2 * 30 and stats["busy_s"] >= 2 * 30 * SLOW_DISK.access_ms / 1e3, stats


@pytest.mark.slow
@needs_fuse
def test_probe_stops_issuing_files_after_max_seconds(emulated):
    m, entries = emulated
    run = probe(m.mountpoint, entries, readers=(1,), max_seconds=0.2, cold=False)["runs"][0]
    assert 1 <= run["files"] < 30 and run["stopped_by_time"]
    assert run["eviction"] is None and "ratio" not in run


def test_probe_manifest_on_a_plain_directory(tmp_path):
    root = tmp_path / "staged"
    entries = write_files(root, 12, 30_000)
    manifest = {"tier": "local", "root": str(root), "files": entries}
    result = probe_manifest(manifest, readers=(1, 2), max_files=8, max_seconds=5.0)
    assert result["tier"] == "local" and result["files_selected"] == 8 and result["files_available"] == 12
    for run in result["runs"]:
        assert run["files"] == 8 and run["bytes"] == 8 * 30_000 and run["mean_file_bytes"] == 30_000
        assert run["seconds"] > 0 and run["files_per_s"] > 0 and run["mb_per_s"] > 0
        assert run["eviction"]["method"] in ("fadvise", "fadvise+drop_caches")
    plain = probe(root, [e["path"] for e in entries], readers=(3,), cold=False)
    assert plain["runs"][0]["files"] == 12
    with pytest.raises(ProbeError, match="no 'root' key"):
        probe_manifest({"tier": "local", "files": entries})
    with pytest.raises(ProbeError, match="is not a directory"):
        probe(tmp_path / "missing", entries)


def test_a_cold_tier_kept_cold_comes_back_from_the_device_on_every_reread(tmp_path):
    """A file read again while `KeepCold` runs was evicted in between: read, wait a sweep, and it is cold again -
    as a cell's second pass over a small dataset would find it."""
    from loaderbench.data.cache import KeepCold

    fstype = filesystem_of(tmp_path)["fstype"]
    if fstype in ("tmpfs", "ramfs", None):
        pytest.skip(f"{tmp_path} is on {fstype}: its pages cannot be evicted, a real disk is needed")
    paths = []
    for i in range(20):
        paths.append(tmp_path / f"f{i}.bin")
        with open(paths[-1], "wb") as f:
            f.write(os.urandom(256 << 10))
            os.fsync(f.fileno())
    keep = KeepCold(paths, interval_s=0.05).start()
    try:
        for _ in range(3):
            for p in paths:
                p.read_bytes()
            deadline = time.monotonic() + 5
            while resident_fraction(paths) > 0.05 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert resident_fraction(paths) <= 0.05
    finally:
        stats = keep.stop()
    assert stats["sweeps"] >= 3 and stats["files"] == 20 and stats["sweep_ms_mean"] > 0
