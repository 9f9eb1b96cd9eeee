"""The emulated storage tier as a real FUSE mount: throttling, content, stale mounts, and the FUSE check."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from loaderbench.data.emulated import (
    DEVICE_MODELS,
    DeviceModel,
    EmulatedTierError,
    cleanup_stale,
    fuse_available,
    mount,
    mount_entry,
    owner_path,
    predict,
    resolve_model,
)

FUSE_PROBLEM = fuse_available()
needs_fuse = pytest.mark.skipif(FUSE_PROBLEM is not None, reason=f"FUSE is not usable here: {FUSE_PROBLEM}")

ONE_HEAD = DeviceModel("test-one-head", access_ms=20, bandwidth_mb_s=200, concurrency=1)
EIGHT_HEADS = DeviceModel("test-eight-heads", access_ms=20, bandwidth_mb_s=200, concurrency=8)
ACCESS_S = ONE_HEAD.access_ms / 1e3
N = 24


def make_tree(root: Path, n: int = N, size: int = 20_000, seed: int = 3) -> tuple[Path, list[str]]:
    """n random files of about `size` bytes in 3 class folders, written through to disk."""
    rng = random.Random(seed)
    backing = root / "backing"
    rels = []
    for i in range(n):
        rel = f"class{i % 3}/img{i:03d}.jpg"
        path = backing / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(rng.randbytes(size + rng.randrange(-size // 10, size // 10)))
            os.fsync(f.fileno())
        rels.append(rel)
    return backing, rels


def read_file(path: Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks)


def read_all(mountpoint: Path, rels: list[str], readers: int) -> float:
    start = time.monotonic()
    with ThreadPoolExecutor(readers) as pool:
        list(pool.map(lambda rel: read_file(mountpoint / rel), rels))
    return time.monotonic() - start


def mounted_paths() -> set[str]:
    return {line.split()[1].replace("\\040", " ") for line in Path("/proc/mounts").read_text().splitlines()}


def servers_for(mountpoint: Path) -> list[int]:
    """Pids of live (not zombie) emulated-tier servers for this mountpoint."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if b"loaderbench.data.emulated" in argv and str(mountpoint).encode() in argv and state not in ("Z", "X"):
            pids.append(int(proc.name))
    return pids


@pytest.fixture
def mounts():
    """mount() that unmounts whatever it mounted when the test ends, passed or not."""
    made = []

    def make(backing, mountpoint, model, **kwargs):
        m = mount(backing, mountpoint, model, **kwargs)
        made.append(m)
        return m

    yield make
    for m in made:
        m.unmount()
        with contextlib.suppress(EmulatedTierError):
            cleanup_stale(m.mountpoint)


@pytest.mark.slow
@needs_fuse
def test_one_head_pays_every_access_and_nothing_is_cached(tmp_path, mounts):
    backing, rels = make_tree(tmp_path)
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    assert read_all(m.mountpoint, rels, readers=1) >= N * ACCESS_S
    first = m.stats()
    assert first["seeks"] >= N and first["requests"] >= N
    # the second read of the same files, now by 8 readers sharing the one head: the page cache serves nothing
    assert read_all(m.mountpoint, rels, readers=8) >= N * ACCESS_S
    second = m.stats()
    assert second["requests"] >= first["requests"] + N
    assert second["seeks"] >= first["seeks"] + N
    m.unmount()
    assert m.final_stats["final"] and m.final_stats["requests"] == second["requests"]


@pytest.mark.slow
@needs_fuse
def test_more_heads_serve_concurrent_readers_in_parallel(tmp_path, mounts):
    backing, rels = make_tree(tmp_path)
    one = mounts(backing, tmp_path / "one", ONE_HEAD)
    eight = mounts(backing, tmp_path / "eight", EIGHT_HEADS)
    t_one = read_all(one.mountpoint, rels, readers=8)
    t_eight = read_all(eight.mountpoint, rels, readers=8)
    assert t_eight * 2.5 < t_one, f"8 heads took {t_eight:.3f} s, 1 head {t_one:.3f} s (the model expects ~8x)"


@pytest.mark.slow
@needs_fuse
def test_content_matches_backing_and_sequential_reads_do_not_seek(tmp_path, mounts):
    backing, rels = make_tree(tmp_path, n=6)
    big = backing / "big.bin"
    big.write_bytes(random.Random(9).randbytes(2_500_000))
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    assert sorted(os.listdir(m.mountpoint)) == sorted(os.listdir(backing))
    for rel in rels:
        assert read_file(m.mountpoint / rel) == (backing / rel).read_bytes()
    before = m.stats()
    assert read_file(m.mountpoint / "big.bin") == big.read_bytes()
    after = m.stats()
    # one positioning, then requests that continue it (3 of 1 MiB, more when the kernel splits at an unaligned buffer)
    assert after["seeks"] - before["seeks"] == 1
    assert after["requests"] - before["requests"] >= 3
    with pytest.raises(OSError) as e:
        open(m.mountpoint / "new.txt", "w").close()
    assert e.value.errno == errno.EROFS


@pytest.mark.slow
@needs_fuse
def test_rereading_what_the_head_just_read_needs_no_second_positioning(tmp_path, mounts):
    """OpenCV's imread opens a file twice (a few bytes to sniff the format, then the decode): a real drive serves
    the second start from its track buffer, so the model charges one positioning per file, not two."""
    backing, rels = make_tree(tmp_path, n=6)
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    before = m.stats()
    for rel in rels:
        with open(m.mountpoint / rel, "rb", buffering=0) as f:
            assert len(f.read(16)) == 16
        assert read_file(m.mountpoint / rel) == (backing / rel).read_bytes()
    after = m.stats()
    assert after["seeks"] - before["seeks"] == len(rels)
    # another file in between moves the head: the first file costs a positioning again
    read_file(m.mountpoint / rels[0])
    assert m.stats()["seeks"] - after["seeks"] == 1


@pytest.mark.slow
@needs_fuse
def test_small_reads_of_files_read_in_turn_pay_one_positioning_per_file(tmp_path, mounts):
    """Two workers reading their files 4 KB at a time, in turn (OpenCV's reads): a disk's readahead fetches each file
    in one request, so the head is positioned once per file - not once per 4 KB, as when the reader's read size was
    the device's (3 images/s from a 110 files/s HDD on the H200). Read again, a file is fetched again."""
    backing, rels = make_tree(tmp_path, n=6)
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    for _ in range(2):
        before = m.stats()
        for a, b in zip(rels[0::2], rels[1::2], strict=True):
            with open(m.mountpoint / a, "rb", buffering=0) as fa, open(m.mountpoint / b, "rb", buffering=0) as fb:
                got = {a: [], b: []}
                while True:
                    ca, cb = fa.read(4096), fb.read(4096)
                    got[a].append(ca)
                    got[b].append(cb)
                    if not ca and not cb:
                        break
            for rel in (a, b):
                assert b"".join(got[rel]) == (backing / rel).read_bytes()
        after = m.stats()
        assert after["seeks"] - before["seeks"] == len(rels)
        assert after["readahead_hits"] - before["readahead_hits"] >= len(rels) * 4  # ~20 KB: 5 reads, 1 fetched


@pytest.mark.slow
@needs_fuse
def test_stale_mount_of_a_killed_owner_is_cleaned_by_the_next_mount(tmp_path, mounts):
    backing, rels = make_tree(tmp_path, n=4)
    mp = tmp_path / "mnt"
    code = textwrap.dedent(f"""
        import time
        from loaderbench.data.emulated import DeviceModel, mount
        m = mount({str(backing)!r}, {str(mp)!r}, DeviceModel("t", 1, 200, 1))
        print(m.server_pid, flush=True)
        time.sleep(120)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline()
        if not line.strip().isdigit():
            owner.kill()
            pytest.fail(f"the owner process did not mount: {line!r} {owner.communicate()[1]}")
        old_server = int(line)
        with pytest.raises(EmulatedTierError, match=f"mounted by running pid {owner.pid}"):
            mounts(backing, mp, ONE_HEAD)
        owner.kill()
        owner.wait(timeout=10)
        assert mount_entry(mp) is not None and owner_path(mp).exists()  # stale: still mounted, owner gone
        leftovers = json.loads(owner_path(mp).read_text())["temporary"]
        m = mounts(backing, mp, ONE_HEAD)
        assert m.cleaned and f"owner pid {owner.pid} is gone" in m.cleaned
        assert read_file(mp / rels[0]) == (backing / rels[0]).read_bytes()
        m.unmount()
        assert str(mp) not in mounted_paths()
        assert not owner_path(mp).exists() and not any(Path(p).exists() for p in leftovers)
        assert m.proc.returncode is not None and old_server not in servers_for(mp)
        assert servers_for(mp) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        with contextlib.suppress(EmulatedTierError):
            cleanup_stale(mp)


@pytest.mark.slow
@needs_fuse
def test_unmount_cleans_after_the_server_was_killed(tmp_path, mounts):
    backing, _ = make_tree(tmp_path, n=2)
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    os.kill(m.server_pid, signal.SIGKILL)
    m.proc.wait(timeout=10)
    with pytest.raises(OSError) as e:
        os.listdir(m.mountpoint)
    assert e.value.errno == errno.ENOTCONN
    m.unmount()
    m.unmount()  # idempotent
    assert str(m.mountpoint) not in mounted_paths()
    assert not owner_path(m.mountpoint).exists()
    assert cleanup_stale(m.mountpoint) is None


@pytest.mark.slow
@needs_fuse
def test_server_unmounts_itself_on_sigterm(tmp_path, mounts):
    backing, rels = make_tree(tmp_path, n=2)
    m = mounts(backing, tmp_path / "mnt", ONE_HEAD)
    read_file(m.mountpoint / rels[0])
    os.kill(m.server_pid, signal.SIGTERM)
    assert m.proc.wait(timeout=10) == 0
    assert str(m.mountpoint) not in mounted_paths()
    m.unmount()
    assert m.final_stats["final"] and m.final_stats["requests"] >= 1


def test_missing_fusermount_is_reported_with_the_package_to_install(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    reason = fuse_available()
    assert reason is not None and "fusermount" in reason and "fuse3" in reason
    with pytest.raises(EmulatedTierError, match="apt install fuse3") as e:
        mount(tmp_path, tmp_path / "mnt", "hdd-7200")
    assert "real mount point" in str(e.value)


def test_models_resolve_and_predict():
    hdd = resolve_model("hdd-7200")
    assert hdd == DEVICE_MODELS["hdd-7200"] and hdd.concurrency == 1
    custom = resolve_model("lab-nas", {"lab-nas": {"access_ms": 2, "bandwidth_mb_s": 50, "concurrency": 4}})
    assert custom.name == "lab-nas" and custom.concurrency == 4
    assert resolve_model({"access_ms": 1, "bandwidth_mb_s": 10}).name == "custom"
    assert DeviceModel.from_dict(hdd.to_dict()) == hdd
    with pytest.raises(EmulatedTierError, match="unknown device model 'floppy'.*hdd-5400.*sata-ssd"):
        resolve_model("floppy")
    with pytest.raises(EmulatedTierError, match="bandwidth_mb_s"):
        resolve_model({"access_ms": 1, "bandwidth_mb_s": 0})
    one = predict(hdd, 110_000, readers=1)
    assert one["files_per_s"] == pytest.approx(1 / (0.0085 + 110_000 / 160e6))
    assert predict(hdd, 110_000, readers=8)["files_per_s"] == pytest.approx(one["files_per_s"])  # one head
    ssd = DEVICE_MODELS["sata-ssd"]
    assert predict(ssd, 110_000, 8)["files_per_s"] == pytest.approx(8 * predict(ssd, 110_000, 1)["files_per_s"])
    assert predict(ssd, 110_000, 64)["in_service"] == 32
