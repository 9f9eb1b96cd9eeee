"""Staging: the check finds every bad-file class, the manifest is right, restaging is incremental and safe."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from loaderbench.cli import main as cli
from loaderbench.core.layout import project_key, read_root
from loaderbench.core.util import sha256_file
from loaderbench.data.check import DatasetError, check_dataset
from loaderbench.data.stage import MARKER, StagingError, stage


def jpeg(mode: str = "RGB", size=(120, 90), fmt="JPEG") -> bytes:
    rng = np.random.default_rng(0)
    arr = (np.linspace(0, 255, size[0])[None, :, None] + rng.normal(0, 20, (size[1], size[0], 3))).clip(0, 255)
    img = Image.fromarray(arr.astype(np.uint8)).convert(mode)
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.fixture
def messy_source(tmp_path, small_dataset) -> Path:
    """The small dataset plus one file of every odd and bad kind."""
    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    good = jpeg()
    odd = src / "class_0000"
    (odd / "gray.JPEG").write_bytes(jpeg("L"))
    (odd / "cmyk.JPEG").write_bytes(jpeg("CMYK"))
    (odd / "png_named.JPEG").write_bytes(jpeg(fmt="PNG"))  # content does not match the extension
    (odd / "jpeg_named.png").write_bytes(good)
    bad = src / "class_0001"
    (bad / "truncated.JPEG").write_bytes(good[: len(good) // 2])
    (bad / "corrupt.JPEG").write_bytes(good[:3] + bytes(200) + good[203:])
    (bad / "notes.JPEG").write_text("this is not an image\n")
    return src


def test_the_terminal_says_what_the_check_quarantined_and_kept(tmp_path, messy_source, capsys):
    """The quiet run's line when the check finishes counts the undecodable images quarantined, the odd ones kept, and
    points at the report; a clean dataset's line says only that it was checked."""
    from loaderbench.cli.follow import Follower
    from loaderbench.core.layout import RESULTS

    check_dataset(messy_source, tmp_path / RESULTS.check, tmp_path / RESULTS.quarantine, jobs=2)
    follower = Follower(tmp_path, {}, 0.0)
    for line in ["rule check_dataset:", "    jobid: 3", "Finished jobid: 3 (Rule: check_dataset)"]:
        follower.feed(line)
    out = capsys.readouterr().out
    assert "dataset checked (31 files: 3 undecodable image(s) quarantined in results/dataset/quarantine (never " in out
    assert "staged); 4 odd image(s) kept; see results/dataset/check.txt)" in out


def test_check_classifies_every_bad_file_class(tmp_path, messy_source):
    out = tmp_path / "results/check.json"
    result = check_dataset(messy_source, out, tmp_path / "quarantine", jobs=2)
    by = {Path(f["path"]).name: f for f in result["files"]}
    assert by["gray.JPEG"]["status"] == "odd" and by["gray.JPEG"]["issues"] == ["grayscale"]
    assert by["cmyk.JPEG"]["status"] == "odd" and by["cmyk.JPEG"]["issues"] == ["cmyk"]
    assert by["png_named.JPEG"]["issues"] == ["extension_mismatch"] and by["png_named.JPEG"]["kind"] == "png"
    assert by["jpeg_named.png"]["issues"] == ["extension_mismatch"] and by["jpeg_named.png"]["kind"] == "jpeg"
    assert by["truncated.JPEG"]["status"] == "bad" and by["truncated.JPEG"]["issues"] == ["undecodable"]
    assert by["corrupt.JPEG"]["status"] == "bad"
    assert by["notes.JPEG"]["status"] == "bad" and by["notes.JPEG"]["issues"] == ["not_an_image"]
    assert result["counts"] == {
        "files": 31,
        "ok": 24,
        "odd": 4,
        "bad": 3,
        "rechecked": 31,
        "stray": 0,
        "empty_classes": 0,
    }
    # bad files are quarantined (copied aside) and listed in the report; the source is left untouched
    quarantined = sorted(p.name for p in (tmp_path / "quarantine").rglob("*") if p.is_file())
    assert quarantined == ["corrupt.JPEG", "notes.JPEG", "truncated.JPEG"]
    report = out.with_suffix(".txt").read_text()
    assert "3 undecodable (quarantined)" in report and "class_0001/truncated.JPEG" in report
    assert (messy_source / "class_0001/truncated.JPEG").exists()
    # a second check reads only changed files
    (messy_source / "class_0002/new.JPEG").write_bytes(jpeg())
    again = check_dataset(messy_source, out, tmp_path / "quarantine", jobs=2)
    assert again["counts"]["rechecked"] == 1 and again["counts"]["files"] == 32


def test_strict_turns_odd_and_bad_files_into_a_clear_failure(tmp_path, messy_source):
    out = tmp_path / "check.json"
    with pytest.raises(DatasetError) as err:
        check_dataset(messy_source, out, tmp_path / "q", strict=True, jobs=2)
    assert "strict: true" in str(err.value) and "class_0001/notes.JPEG" in str(err.value)
    assert not out.exists()


@pytest.mark.parametrize(
    "layout, words", [("missing", "does not exist"), ("empty", "is empty"), ("flat", "has files but no class folders")]
)
def test_unusable_dataset_paths_are_named(tmp_path, layout, words, capsys):
    src = tmp_path / "data"
    if layout != "missing":
        src.mkdir()
    if layout == "flat":
        (src / "a.JPEG").write_bytes(jpeg())
    rc = cli(["check", "--source", str(src), "--out", str(tmp_path / "c.json"), "--quarantine", str(tmp_path / "q")])
    err = capsys.readouterr().err
    assert rc == 2 and str(src) in err and words in err and "dataset.path" in err


@pytest.mark.slow
def test_staged_files_decode_with_every_loader(tmp_path, messy_source):
    """Odd files that staging keeps are decodable by both loaders, and labels agree for the same file."""
    import torch
    from torchvision.datasets import ImageFolder

    from loaderbench.loaders.common import LoaderContext
    from loaderbench.loaders.opencv_loader import dataset as opencv_dataset
    from loaderbench.loaders.torchvision_loader import transform

    check_dataset(messy_source, tmp_path / "check.json", tmp_path / "q", jobs=2)
    man = stage(tmp_path / "check.json", "disk", tmp_path / "tier", "ds", tmp_path / "m.json", project_dir=tmp_path)
    ctx = LoaderContext(
        data_root=Path(man["root"]),
        allowed=frozenset(f["path"] for f in man["files"]),
        batch_size=2,
        crop_size=64,
        workers=0,
        prefetch_factor=2,
        seed=0,
        device=torch.device("cpu"),
        channels_last=False,
    )
    samples, classes = ctx.samples()
    tv = ImageFolder(str(ctx.data_root), transform=transform(64), is_valid_file=ctx.is_valid_file)
    cv = opencv_dataset(samples, 64)
    assert tv.samples == samples and len(samples) == 28 and classes == ["class_0000", "class_0001", "class_0002"]
    names = [Path(p).name for p, _ in samples]
    for odd in ("gray.JPEG", "cmyk.JPEG", "png_named.JPEG", "jpeg_named.png"):
        i = names.index(odd)
        x, y = tv[i]
        u, v = cv[i]
        assert tuple(x.shape) == (3, 64, 64) and tuple(u.shape) == (64, 64, 3) and u.dtype == torch.uint8
        assert y == v == 0
    assert "truncated.JPEG" not in names
    # nvjpeg: bytes in the workers (pixels for non-JPEG files), decode + augment on the device (the CPU here)
    from loaderbench.loaders.nvjpeg import BytesDataset, augment, collate, decode

    odd = [names.index(n) for n in ("gray.JPEG", "cmyk.JPEG", "png_named.JPEG", "jpeg_named.png")]
    buffer, meta, labels, crops = collate([BytesDataset(samples)[i] for i in odd])
    batch = augment(decode(buffer, meta, torch.device("cpu")), crops, 64, channels_last=True)
    assert tuple(batch.shape) == (4, 3, 64, 64) and labels.tolist() == [0, 0, 0, 0] and torch.isfinite(batch).all()
    # PNG content travelled as pixels (height recorded); the JPEGs, whatever their name, as bytes (height 0)
    assert meta[:, 2].tolist()[2] > 0 and [meta[k, 2].item() for k in (0, 1, 3)] == [0, 0, 0]


def test_manifest_and_incremental_restage(tmp_path, small_dataset):
    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    tier = tmp_path / "tier"
    tier.mkdir()
    (tier / "someone-elses.txt").write_text("keep me")
    check, out = tmp_path / "check.json", tmp_path / "results/staging/t.json"
    check_dataset(src, check, tmp_path / "q", jobs=2)
    man = stage(check, "t", tier, "ds", out)
    root = Path(man["root"])
    assert root == tier / "loaderbench" / project_key() / "ds/train" and (tier / "loaderbench" / MARKER).exists()
    assert man["counts"]["files"] == 24 and man["counts"]["copied"] == 24
    for f in man["files"]:
        assert sha256_file(root / f["path"]) == f["sha256"] and (root / f["path"]).stat().st_size == f["size"]
    assert json.loads(out.read_text())["sha256"] == man["sha256"]

    # unchanged source: nothing copied
    man2 = stage(check, "t", tier, "ds", out)
    assert (man2["counts"]["copied"], man2["counts"]["kept"]) == (0, 24) and man2["sha256"] == man["sha256"]

    # one file changed, one removed: exactly those are restaged / removed
    changed = src / "class_0000" / min(os.listdir(src / "class_0000"))
    changed.write_bytes(jpeg())
    gone = src / "class_0001" / min(os.listdir(src / "class_0001"))
    gone.unlink()
    (root / "class_0002" / "not-ours.JPEG").write_bytes(b"x")
    check_dataset(src, check, tmp_path / "q", jobs=2)
    man3 = stage(check, "t", tier, "ds", out)
    assert (man3["counts"]["copied"], man3["counts"]["kept"], man3["counts"]["removed"]) == (1, 22, 1)
    assert (root / changed.relative_to(src)).read_bytes() == changed.read_bytes()
    assert not (root / gone.relative_to(src)).exists()
    assert man3["sha256"] != man["sha256"]
    # files staging did not create are never deleted
    assert (tier / "someone-elses.txt").read_text() == "keep me" and (root / "class_0002/not-ours.JPEG").exists()


def test_refuses_dangerous_or_unusable_tier_paths(tmp_path, small_dataset):
    check = tmp_path / "check.json"
    check_dataset(small_dataset, check, tmp_path / "q", jobs=2)

    def fails(path, words):
        with pytest.raises(StagingError) as err:
            stage(check, "hdd", path, "ds", tmp_path / "m.json", project_dir=tmp_path / "project")
        assert "storage.hdd" in str(err.value) and words in str(err.value), str(err.value)

    fails(Path("/"), "root or home")
    fails(Path.home(), "root or home")
    fails(small_dataset, "overlaps the dataset source")
    fails(small_dataset / "class_0000", "overlaps the dataset source")
    fails(tmp_path / "no-such-mount", "does not exist; mount the hdd device there")
    (tmp_path / "a-file").write_text("")
    fails(tmp_path / "a-file", "is not a directory")
    foreign = tmp_path / "foreign"
    (foreign / "loaderbench").mkdir(parents=True)
    fails(foreign, "was not created by loaderbench")
    if os.geteuid() == 0:
        fails(Path("/sys"), "is not writable")  # root passes permission bits; sysfs refuses anyway
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        fails(ro, "is not writable")
    # inside the project, a missing tier folder is created
    inside = tmp_path / "project" / "resources" / "tiers" / "hdd"
    man = stage(check, "hdd", inside, "ds", tmp_path / "m.json", project_dir=tmp_path / "project")
    assert man["counts"]["files"] == 24


def test_check_report_is_the_same_on_every_run_and_names_the_file(tmp_path, messy_source):
    """The report held a PIL message with a BytesIO address (`<_io.BytesIO object at 0x...>`), new on every run."""
    reports = []
    for run in ("a", "b"):
        check_dataset(messy_source, tmp_path / run / "check.json", tmp_path / run / "quarantine", jobs=2)
        reports.append((tmp_path / run / "check.txt").read_text())
    assert reports[0] == reports[1]
    assert "BytesIO" not in reports[0] and " at 0x" not in reports[0]
    line = next(x for x in reports[0].splitlines() if "notes.JPEG" in x)
    assert "cannot identify image file 'class_0001/notes.JPEG'" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["torchvision", "opencv", "nvjpeg", "dali-cpu"])
def test_cells_take_files_and_labels_from_the_manifest_not_a_scan_of_the_tier(
    tmp_path, small_dataset, loader, monkeypatch
):
    """A stray folder in a staged tree (staging keeps foreign files) made every cell fail with 'Target 3 is out of
    bounds': labels came from a directory scan, the class count from the manifest."""
    from loaderbench.core.cells import cell_spec
    from loaderbench.core.config import validate_config
    from loaderbench.engine.runner.runcell import run_cell

    monkeypatch.chdir(tmp_path)  # the project's folder, where the workflow runs its jobs
    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    check_dataset(src, tmp_path / "check.json", tmp_path / "q", jobs=2)
    man = stage(tmp_path / "check.json", "disk", tmp_path / "tier", "ds", tmp_path / "m.json", project_dir=tmp_path)
    root = Path(man["root"])
    (root / "aaa_stray").mkdir()  # sorts before every class: a scan would shift every label by one
    shutil.copy(next((src / "class_0000").iterdir()), root / "aaa_stray/foreign.JPEG")
    (root / "class_0001/notes.txt").write_text("foreign\n")
    man = stage(tmp_path / "check.json", "disk", tmp_path / "tier", "ds", tmp_path / "m.json", project_dir=tmp_path)
    assert man["counts"]["foreign"] == 2 and man["classes"] == ["class_0000", "class_0001", "class_0002"]
    assert sorted(man["foreign_files"]) == ["aaa_stray/foreign.JPEG", "class_0001/notes.txt"]
    cfg = validate_config(
        {
            "storage": {"disk": str(tmp_path / "tier")},
            "loaders": [loader],
            "batch_sizes": [4],
            "window": {"steps": 2},
            "warmup_steps": 1,
            "crop_size": 32,
            "workers": 1,
            "prefetch_factor": 1,
            "telemetry_hz": 0,
            "dataset": {"name": "ds"},
            "baseline": {"loader": loader, "tier": "disk", "gpus": 1, "batch_size": 4, "precision": "fp32"},
        },
        base_dir=tmp_path,
    )
    spec = cell_spec(cfg, f"{loader}_disk_g1_b4_fp32_dp_r0")
    record = run_cell(spec, tmp_path / "m.json", tmp_path / "cells/x.json")
    assert record["status"] == "ok", (record["reason"], record.get("detail"))
    assert record["metrics"]["steps"] == 2


def test_tier_too_small_is_refused_before_copying_naming_needed_and_free(tmp_path, small_dataset, small_filesystem):
    tier = small_filesystem(512)
    check_dataset(small_dataset, tmp_path / "check.json", tmp_path / "q", jobs=2)
    with pytest.raises(StagingError) as err:
        stage(tmp_path / "check.json", "ssd", tier, "ds", tmp_path / "m.json", project_dir=tmp_path)
    msg = str(err.value)
    assert f"config key 'storage.ssd': {tier} has 0.5 MB free but staging needs 2.0 MB more (24 files)" in msg, msg
    assert [p for p in tier.rglob("*") if p.is_file() and p.name != MARKER] == []
    assert shutil.disk_usage(tier).used < 64 * 1024


def test_a_copy_that_fails_midway_leaves_no_partial_file(tmp_path, small_dataset, small_filesystem, monkeypatch):
    """Another writer fills the tier during staging: the copy hits a real ENOSPC mid-file."""
    tier = small_filesystem(4096)
    check_dataset(small_dataset, tmp_path / "check.json", tmp_path / "q", jobs=2)
    real_copy, calls = shutil.copyfile, []

    def copy_while_another_writer_fills_the_tier(src, dst):
        calls.append(dst)
        if len(calls) == 3:
            with open(tier / "other-writer.bin", "wb") as f:
                f.write(bytes(shutil.disk_usage(tier).free - 40_000))
        return real_copy(src, dst)

    monkeypatch.setattr(shutil, "copyfile", copy_while_another_writer_fills_the_tier)
    with pytest.raises(StagingError) as err:
        stage(tmp_path / "check.json", "ssd", tier, "ds", tmp_path / "m.json", project_dir=tmp_path)
    assert "No space left on device" in str(err.value) and "the partial file was removed" in str(err.value)
    assert str(Path(calls[-1]).with_name(Path(calls[-1]).name.removeprefix(".").removesuffix(".staging"))) in str(
        err.value
    )
    assert list(tier.rglob("*.staging")) == [] and len(calls) == 3
    assert (
        cli(
            [
                "stage",
                "--check",
                str(tmp_path / "check.json"),
                "--tier",
                "ssd",
                "--tier-path",
                str(tier),
                "--dataset",
                "ds",
                "--out",
                str(tmp_path / "m.json"),
            ]
        )
        == 2
    )  # named, no traceback
    (tier / "other-writer.bin").unlink()
    monkeypatch.setattr(shutil, "copyfile", real_copy)
    man = stage(tmp_path / "check.json", "ssd", tier, "ds", tmp_path / "m.json", project_dir=tmp_path)
    assert man["counts"]["files"] == 24 and list(tier.rglob("*.staging")) == []


def test_verify_restages_a_file_corrupted_in_place(tmp_path, small_dataset, capsys):
    check_dataset(small_dataset, tmp_path / "check.json", tmp_path / "q", jobs=2)
    args = ["ds", tmp_path / "m.json"]
    man = stage(tmp_path / "check.json", "disk", tmp_path / "tier", *args, project_dir=tmp_path)
    victim = Path(man["root"]) / man["files"][5]["path"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # same size, different bytes
    victim.write_bytes(bytes(data))
    again = stage(tmp_path / "check.json", "disk", tmp_path / "tier", *args, project_dir=tmp_path)
    assert again["counts"]["copied"] == 0 and sha256_file(victim) != man["files"][5]["sha256"]  # size alone: unnoticed
    rc = cli(
        [
            "stage",
            "--check",
            str(tmp_path / "check.json"),
            "--tier",
            "disk",
            "--tier-path",
            str(tmp_path / "tier"),
            "--dataset",
            "ds",
            "--out",
            str(tmp_path / "m.json"),
            "--project-dir",
            str(tmp_path),
            "--verify",
        ]
    )
    assert rc == 0 and "verified by checksum: 1 differed and were restaged" in capsys.readouterr().err
    verified = json.loads((tmp_path / "m.json").read_text())
    assert verified["counts"]["repaired"] == 1 and verified["verified"]["repaired"] == [man["files"][5]["path"]]
    assert sha256_file(victim) == man["files"][5]["sha256"]


@pytest.mark.slow
def test_staging_verify_config_key_reaches_the_stage_job(tmp_path):
    from tests.conftest import snakemake, tiny_config, write_config

    cfg_path = write_config(tmp_path, tiny_config(tmp_path, staging={"verify": True}))
    plan = snakemake(tmp_path, "--configfile", str(cfg_path), "-n", "-p", "--until", "stage").stdout
    stage_cmds = [line for line in plan.splitlines() if "lb stage " in line]
    assert len(stage_cmds) == 2 and all("--verify" in c for c in stage_cmds), plan


@pytest.mark.parametrize(
    "second, words",
    [("same", "is the same directory as"), ("inside", "contains"), ("mount", "is the same directory as")],
)
def test_tiers_on_the_same_or_nested_paths_are_refused_at_validation(tmp_path, second, words):
    from loaderbench.core.config import ConfigError, validate_config

    a = str(tmp_path / "a")
    b = {
        "same": a,
        "inside": str(tmp_path / "a/b"),
        "mount": {"kind": "emulated", "path": str(tmp_path / "c"), "mount": a},
    }[second]
    with pytest.raises(ConfigError) as err:
        validate_config({"storage": {"x": a, "y": b}}, base_dir=tmp_path)
    key_b = "storage.y.mount" if second == "mount" else "storage.y.path"
    assert str(err.value).startswith(f"config key 'storage.x.path': {a} {words} ") and f"(config key '{key_b}')" in str(
        err.value
    )


@pytest.mark.slow
def test_a_name_that_is_not_utf8_is_flagged_and_staged_under_a_safe_name(tmp_path, small_dataset, monkeypatch):
    """It passed check and stage, then dali-cpu failed: 'Unsupported argument type with name files'."""
    from loaderbench.core.cells import cell_spec
    from loaderbench.core.config import validate_config
    from loaderbench.engine.runner.runcell import run_cell

    monkeypatch.chdir(tmp_path)  # the project's folder, where the workflow runs its jobs
    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    raw_name = os.path.join(os.fsencode(src / "class_0001"), b"b\xffd.JPEG")
    with open(raw_name, "wb") as f:
        f.write(jpeg())
    result = check_dataset(src, tmp_path / "check.json", tmp_path / "q", jobs=2)
    entry = next(f for f in result["files"] if f["path"] == os.fsdecode(raw_name)[len(str(src)) + 1 :])
    assert entry["status"] == "odd" and entry["issues"] == ["non_utf8_name"]
    assert "  odd  class_0001/b\\xffd.JPEG: non_utf8_name" in (tmp_path / "check.txt").read_text()
    man = stage(tmp_path / "check.json", "disk", tmp_path / "tier", "ds", tmp_path / "m.json", project_dir=tmp_path)
    renamed = [f for f in man["files"] if "source_name" in f]
    assert man["counts"]["renamed"] == 1 and len(renamed) == 1
    assert renamed[0]["source_name"] == "class_0001/b\\xffd.JPEG"
    assert renamed[0]["path"].startswith("class_0001/b_d-") and renamed[0]["path"].endswith(".JPEG")
    assert sha256_file(Path(man["root"]) / renamed[0]["path"]) == entry["sha256"]
    json.loads((tmp_path / "m.json").read_text(encoding="utf-8", errors="strict"))  # valid UTF-8 JSON
    cfg = validate_config(
        {
            "storage": {"disk": str(tmp_path / "tier")},
            "loaders": ["dali-cpu"],
            "batch_sizes": [5],
            "window": {"steps": 6},
            "warmup_steps": 1,
            "crop_size": 32,
            "telemetry_hz": 0,
            "dataset": {"name": "ds"},
        },
        base_dir=tmp_path,
    )
    record = run_cell(cell_spec(cfg, "dali-cpu_disk_g1_b5_fp32_dp_r0"), tmp_path / "m.json", tmp_path / "cells/x.json")
    assert record["status"] == "ok", (record["reason"], record.get("detail"))
    assert record["metrics"]["steps"] == 6  # 30 images: more than one pass over the 25 files, the renamed one read


def test_two_projects_staging_into_one_shared_tier_keep_their_own_trees_and_manifests(
    tmp_path, small_dataset, monkeypatch
):
    """Two clones on one host with the quickstart's `ram: /dev/shm` shared one staged copy: the second restaged it
    and rewrote the first's manifest. Each project now stages into its own folder of the tier, and its cells read
    there; the tier path in their specs stays the configured one."""
    from loaderbench.core.cells import cell_spec
    from loaderbench.core.config import validate_config

    shared = tmp_path / "shm"  # a tier outside both projects, as /dev/shm is
    shared.mkdir()
    a, b = tmp_path / "clone-a", tmp_path / "clone-b"
    for project in (a, b):
        (project / "results/staging").mkdir(parents=True)
    check = tmp_path / "check.json"
    check_dataset(small_dataset, check, tmp_path / "q", jobs=2)
    shards = {"size_mb": 1, "min_shards": 2, "seed": 0}
    man_a = stage(check, "ram", shared, "ds", a / "results/staging/ram.json", project_dir=a, shards=shards)
    man_b = stage(check, "ram", shared, "ds", b / "results/staging/ram.json", project_dir=b, shards=shards)
    root_a, root_b = Path(man_a["root"]), Path(man_b["root"])
    assert root_a.parent.parent.parent == root_b.parent.parent.parent == shared.resolve() / "loaderbench"
    assert root_a.parent.name == root_b.parent.name == "ds" and root_a.parent.parent != root_b.parent.parent
    assert root_a.parent.parent.name.startswith("clone-a-") and root_b.parent.parent.name.startswith("clone-b-")
    assert man_b["counts"]["copied"] == 24  # its own copy, not the first project's files counted as kept
    for man, root in ((man_a, root_a), (man_b, root_b)):
        assert sorted(str(p.relative_to(root)) for p in root.rglob("*.JPEG")) == sorted(f["path"] for f in man["files"])
        assert all(sha256_file(root / f["path"]) == f["sha256"] for f in man["files"])
        shard_dir = root.parent / man["shards"]["folder"]
        assert sorted(p.name for p in shard_dir.glob("*.tar")) == sorted(f["path"] for f in man["shards"]["files"])

    # the first project's dataset changes and it restages: the second's tree and manifest stay as they were
    b_manifest = (root_b.parent / "manifest.json").read_bytes()
    src_a = tmp_path / "src-a"
    shutil.copytree(small_dataset, src_a)
    gone = min((src_a / "class_0001").iterdir())
    gone.unlink()
    check_dataset(src_a, tmp_path / "check-a.json", tmp_path / "q-a", jobs=2)
    again = stage(tmp_path / "check-a.json", "ram", shared, "ds", a / "results/staging/ram.json", project_dir=a)
    assert again["counts"]["files"] == 23 and again["counts"]["removed"] == 1
    assert (root_b.parent / "manifest.json").read_bytes() == b_manifest
    assert (root_b / gone.relative_to(src_a)).is_file() and len(list(root_b.rglob("*.JPEG"))) == 24

    # each project's cells read its own copy, through the configured tier path, or an emulated tier's mount
    cfg = validate_config(
        {
            "storage": {"ram": str(shared)},
            "loaders": ["torchvision"],
            "batch_sizes": [4],
            "dataset": {"name": "ds"},
            "baseline": {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 4, "precision": "fp32"},
        },
        base_dir=tmp_path,
    )
    for project, root in ((a, root_a), (b, root_b)):
        monkeypatch.chdir(project)
        spec = cell_spec(cfg, "torchvision_ram_g1_b4_fp32_dp_r0")
        assert spec.tier_path == str(shared) and spec.data_root == root
        assert read_root(json.loads((project / "results/staging/ram.json").read_text()), shared) == root
    mount = tmp_path / "mnt"
    assert read_root(man_b, mount) == mount / root_b.relative_to(shared.resolve())


def test_an_empty_class_folder_is_named_in_the_check_report_as_left_out_once(tmp_path, small_dataset, capsys):
    """An empty class folder vanished without a word: staging lists classes from files, so the staged dataset (and
    the model's class count) silently had one class fewer than the source's folders."""
    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    (src / "class_0003_empty").mkdir()
    (src / "class_0004_empty" / "nested").mkdir(parents=True)  # folders, but not one file
    (src / "class_0005_broken").mkdir()
    (src / "class_0005_broken" / "a.JPEG").write_bytes(b"not a jpeg")
    result = check_dataset(src, tmp_path / "dataset/check.json", tmp_path / "q", jobs=2)
    assert result["empty_classes"] == ["class_0003_empty", "class_0004_empty"]
    assert result["all_bad_classes"] == ["class_0005_broken"] and result["counts"]["empty_classes"] == 2
    report = (tmp_path / "dataset/check.txt").read_text()
    assert (
        "class folders left out (no files; not classes of the staged dataset): class_0003_empty, class_0004_empty\n"
    ) in report
    assert (
        "class folders left out (every file undecodable; not classes of the staged dataset): class_0005_broken\n"
    ) in report
    man = stage(
        tmp_path / "dataset/check.json", "t", tmp_path / "tier", "ds", tmp_path / "m.json", project_dir=tmp_path
    )
    assert man["classes"] == ["class_0000", "class_0001", "class_0002"]
    capsys.readouterr()
    assert (
        cli(
            [
                "check",
                "--source",
                str(src),
                "--out",
                str(tmp_path / "again.json"),
                "--quarantine",
                str(tmp_path / "q2"),
                "--jobs",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert (out.out + out.err).count("class_0003_empty") == 1


@pytest.mark.e2e
def test_the_runs_output_names_an_empty_class_folder_once(tmp_path, small_dataset):
    """The check job's report went only to its log: a run said nothing of the class it left out."""
    from tests.conftest import snakemake, tiny_config, write_config

    src = tmp_path / "src"
    shutil.copytree(small_dataset, src)
    (src / "class_0009").mkdir()
    cfg = tiny_config(tmp_path, dataset={"source": "path", "path": str(src), "name": "mine"})
    out = snakemake(tmp_path, "--configfile", str(write_config(tmp_path, cfg)), "--until", "check_dataset")
    text = out.stdout + out.stderr
    assert text.count("class folders left out (no files; not classes of the staged dataset): class_0009") == 1, text
    assert "24 files: 24 ok" in text and "  odd" not in text
