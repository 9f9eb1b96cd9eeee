"""Config validation: defaults filled, and every bad input named by its key."""

from __future__ import annotations

import pytest

from loaderbench.core.cells import cell_ids, cell_part, cell_parts, cell_spec, parse_cell_id
from loaderbench.core.config import ConfigError, load_config, validate_config
from tests.conftest import REPO


def test_defaults_are_filled_and_paths_resolved(tmp_path):
    cfg = validate_config({"storage": {"ssd": "rel/ssd"}}, base_dir=tmp_path)
    assert cfg["loaders"] == ["torchvision", "opencv"]
    assert cfg["tiers"] == ["ssd"]
    assert cfg["window"] == {"steps": None, "seconds": None, "max_seconds": 30, "min_seconds": 3, "precision": 0.02}
    assert cfg["cell_timeout_s"] == 300 + 4 * 30  # auto: follows the window
    assert cfg["baseline"] == {
        "loader": "torchvision",
        "tier": "hdd",
        "gpus": 1,
        "batch_size": 128,
        "precision": "fp32",
        "parallel": "dp",
    }
    assert cfg["parallel"] == ["dp"]
    assert cfg["storage"]["ssd"] == {
        "kind": "path",
        "path": str(tmp_path / "rel/ssd"),
        "cache": "cold",
        "model": None,
        "mount": None,
    }
    assert cfg["telemetry_hz"] == 10
    assert cfg["cold_step"] == "auto"
    assert cfg["dataset"]["name"].startswith("generated-256x4-")


def test_tier_kinds_cache_policy_and_device_models(tmp_path):
    cfg = validate_config(
        {
            "storage": {
                "ram": "/dev/shm",
                "ssd": {"path": "t/ssd", "cache": "warm"},
                "hdd": {"kind": "emulated", "path": "t/hdd"},
                "nas": {"kind": "emulated", "path": "t/nas", "model": "slow", "mount": "m/nas"},
            },
            "device_models": {"slow": {"access_ms": 30, "bandwidth_mb_s": 50, "concurrency": 2}},
        },
        base_dir=tmp_path,
    )
    st = cfg["storage"]
    assert (st["ram"]["kind"], st["ram"]["cache"]) == ("ram", "warm")
    assert (st["ssd"]["kind"], st["ssd"]["cache"]) == ("path", "warm")
    assert st["hdd"]["kind"] == "emulated" and st["hdd"]["cache"] == "cold"
    assert st["hdd"]["model"]["name"] == "hdd-7200" and st["hdd"]["model"]["concurrency"] == 1
    assert st["hdd"]["mount"] == str(tmp_path / "resources/mnt/hdd")
    assert st["nas"]["model"]["access_ms"] == 30 and st["nas"]["mount"] == str(tmp_path / "m/nas")
    spec = cell_spec(cfg, "torchvision_hdd_g1_b128_fp32_dp_r0")
    assert spec.tier_kind == "emulated" and spec.tier_path == str(tmp_path / "t/hdd")
    assert str(spec.data_root).startswith(str(tmp_path / "resources/mnt/hdd") + "/loaderbench/")
    assert validate_config(cfg) == cfg  # the full form validates again unchanged


def test_a_fixed_window_replaces_the_adaptive_default():
    cfg = validate_config({"window": {"steps": 10}})
    assert cfg["window"]["steps"] == 10 and cfg["window"]["seconds"] is None and cfg["window"]["max_seconds"] is None
    cfg = validate_config({"window": {"seconds": 8}})
    assert cfg["window"]["seconds"] == 8 and cfg["window"]["max_seconds"] is None
    assert cfg["cell_timeout_s"] == 300 + 4 * 8
    assert validate_config({"window": {"steps": 10}, "cell_timeout_s": 50})["cell_timeout_s"] == 50


@pytest.mark.parametrize(
    "raw, key, words",
    [
        ({"loaders": ["torchvision", "pil-simd"]}, "'loaders'", "unknown loader 'pil-simd'"),
        ({"tiers": ["nvme"]}, "'tiers'", "'nvme' not defined under 'storage'"),
        ({"batch_sizes": [128, 0]}, "'batch_sizes[1]'", "less than the minimum of 1"),
        ({"batch_sizes": [-3]}, "'batch_sizes[0]'", "less than the minimum of 1"),
        ({"batch_sizes": [1.5]}, "'batch_sizes[0]'", "not of type 'integer'"),
        ({"batch_sizes": ["big"]}, "'batch_sizes[0]'", "not of type 'integer'"),
        ({"gpus": [0]}, "'gpus[0]'", "less than the minimum of 1"),
        ({"gpus": "2"}, "'gpus'", "not of type 'array'"),
        ({"repeats": "three"}, "'repeats'", "not of type 'integer'"),
        ({"precisions": ["fp16"]}, "'precisions[0]'", "is not one of"),
        ({"window": {"steps": 5, "seconds": 5}}, "'window'", "not steps and seconds"),
        ({"window": {"seconds": 5, "max_seconds": 9}}, "'window'", "not seconds and max_seconds"),
        ({"window": {"min_seconds": 9, "max_seconds": 5}}, "'window.min_seconds'", "exceeds"),
        ({"placement": "cores"}, "'placement'", "is not one of"),
        ({"cold_step": "yes"}, "'cold_step'", "is not one of"),
        ({"dataset": {"source": "path"}}, "'dataset.path'", "required"),
        ({"dataset": {"images": 2, "classes": 3}}, "'dataset.classes'", "exceed"),
        ({"storage": {"Bad Name": "/tmp"}}, "'storage'", "does not match"),
        ({"batchsize": [1]}, "unknown key", "'batchsize' was unexpected"),
        (
            {"storage": {"r": {"kind": "ram", "path": "/dev/shm", "cache": "cold"}}},
            "'storage.r.cache'",
            "cannot be cold",
        ),
        ({"storage": {"s": {"path": "/mnt/ssd", "model": "hdd-7200"}}}, "'storage.s.model'", "only an emulated tier"),
        ({"storage": {"e": {"kind": "emulated", "path": "/x", "model": "floppy"}}}, "'storage.e.model'", "floppy"),
        ({"storage": {"e": {"kind": "emulated", "path": "/x", "mount": "/x/m"}}}, "'storage.e.mount'", "outside"),
        ({"storage": {"e": {"kind": "tape", "path": "/x"}}}, "'storage.e'", "is not valid under any"),
        ({"device_models": {"d": {"access_ms": 1}}}, "'device_models.d'", "'bandwidth_mb_s' is a required property"),
        ({"baseline": {"tier": "nvme"}}, "'baseline.tier'", "'nvme' is not in the grid's tiers (hdd, ssd)"),
        ({"batch_sizes": [64], "baseline": {"batch_size": 32}}, "'baseline.batch_size'", "not in the grid's"),
        (
            {"parts": [{"name": "a", "loaders": ["opencv"]}], "baseline": {"loader": "dali-sc"}},
            "'baseline.loader'",
            "'dali-sc' is not in the grid's loaders (opencv)",
        ),
    ],
)
def test_bad_config_names_the_key(raw, key, words):
    with pytest.raises(ConfigError) as err:
        validate_config(raw)
    assert key in str(err.value) and words in str(err.value), str(err.value)


def test_missing_or_unparsable_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n  gpus: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad)
    assert str(err.value) == f"config file {bad}, line 2, column 7: not valid YAML: mapping values are not allowed here"


@pytest.mark.slow
def test_empty_config_file_is_refused_as_snakemake_refuses_it(tmp_path, capsys):
    from loaderbench.cli import main as cli
    from tests.conftest import snakemake

    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    assert cli(["validate-config", "--config", str(empty)]) == 2
    assert f"config file {empty} is empty" in capsys.readouterr().err
    proc = snakemake(tmp_path, "--configfile", str(empty), "-n", check=False)
    assert proc.returncode != 0 and "keys at top level" in proc.stdout + proc.stderr


def test_yaml_syntax_error_names_file_line_and_column_before_make_runs_snakemake(tmp_path, capsys):
    """Snakemake reads --configfile before the Snakefile, with a message naming no line; `make` runs validate-config
    first, which does."""
    from loaderbench.cli import main as cli

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nloaders: [torchvision\nbatch_sizes: [4]\n")
    assert cli(["validate-config", "--config", str(bad)]) == 2
    assert f"config file {bad}, line 3, column 12: not valid YAML" in capsys.readouterr().err
    recipe = (REPO / "Makefile").read_text().split("\nquickstart:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("validate-config --config $(CONFIG)") < recipe.index("$(RUN)"), recipe


@pytest.mark.slow
@pytest.mark.parametrize("case", ["dataset missing", "dataset is a file", "tier is a file", "tier outside missing"])
def test_bad_paths_fail_at_plan_time_naming_the_key(tmp_path, case):
    from tests.conftest import snakemake, tiny_config, write_config

    (tmp_path / "afile").write_text("x")
    over = {
        "dataset missing": {"dataset": {"source": "path", "path": str(tmp_path / "no-imagenet")}},
        "dataset is a file": {"dataset": {"source": "path", "path": str(tmp_path / "afile")}},
        "tier is a file": {"storage": {"disk-a": str(tmp_path / "afile"), "disk-b": str(tmp_path / "b")}},
        "tier outside missing": {"storage": {"disk-a": "/nonexistent-mount/ssd", "disk-b": str(tmp_path / "b")}},
    }[case]
    cfg_path = write_config(tmp_path, tiny_config(tmp_path, **over))
    proc = snakemake(tmp_path, "--configfile", str(cfg_path), "-n", check=False)
    out = proc.stdout + proc.stderr
    expected = {
        "dataset missing": f"config key 'dataset.path': {tmp_path / 'no-imagenet'} does not exist",
        "dataset is a file": f"config key 'dataset.path': {tmp_path / 'afile'} is not a directory",
        "tier is a file": f"config key 'storage.disk-a': {tmp_path / 'afile'} is a file, not a directory",
        "tier outside missing": "config key 'storage.disk-a': /nonexistent-mount/ssd does not exist; mount the disk-a",
    }[case]
    assert proc.returncode != 0 and expected in out, out
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_a_missing_tier_inside_the_project_plans_fine_staging_creates_it(tmp_path):
    """As the quickstart's resources/tiers/local on a fresh clone."""
    from tests.conftest import snakemake, tiny_config, write_config

    cfg = tiny_config(tmp_path, storage={"disk-a": "resources/tiers/a", "disk-b": str(tmp_path / "b")})
    proc = snakemake(tmp_path, "--configfile", str(write_config(tmp_path, cfg)), "-n")
    assert "stage" in proc.stdout and not (tmp_path / "resources/tiers/a").exists()


def test_shipped_configs_are_valid_and_the_seed_grid_has_its_cells():
    quick = load_config(REPO / "config/quickstart.yaml", base_dir=REPO)
    seed = load_config(REPO / "config/config.yaml", base_dir=REPO)
    # loaders x tiers x gpus x batch x precision, the tierless synthetic loader on the first tier only
    assert (
        len(cell_ids(quick)) == 8 * 3 * 1 * 1 * 1 + 1 * 1 * 1 * 1 * 1
    )  # 8 loaders that read (2 of shards), synthetic once
    assert {c for c in cell_ids(quick) if c.startswith("synthetic")} == {"synthetic_local_g1_b16_fp32_dp_r0"}
    assert [quick["storage"][t]["kind"] for t in ("local", "ram", "hdd")] == ["path", "ram", "emulated"]
    single = load_config(REPO / "config/studies/h200-single.yaml", base_dir=REPO)
    assert len(cell_ids(single)) == (6 * 3 + 1) * 4 * 2 * 2 * 3 == 912
    # the seed's experiment: its 4 loaders x hdd/ssd x 1, 2, 4 GPUs x batch 128, 256, fp32, 3 repeats, and the ceiling
    assert seed["tiers"] == ["hdd", "ssd"] and seed["gpus"] == [1, 2, 4] and seed["batch_sizes"] == [128, 256]
    assert set(seed["loaders"]) == {"torchvision", "opencv", "dali-sc", "dali-mc", "synthetic"}
    assert len(cell_ids(seed)) == (4 * 2 + 1) * 3 * 2 * 1 * 3
    assert all(seed["storage"][t]["cache"] == "cold" for t in ("hdd", "ssd"))


def test_cell_ids_round_trip_and_specs_carry_the_cell():
    cfg = validate_config({"storage": {"hdd": "/mnt/hdd", "ram-disk": "/dev/shm"}, "gpus": [1, 2], "repeats": 2})
    ids = cell_ids(cfg)
    assert len(ids) == len(set(ids)) == 2 * 2 * 2 * 1 * 1 * 2
    d = parse_cell_id("opencv_ram-disk_g2_b128_fp32_dp_r1")
    assert d == {
        "loader": "opencv",
        "tier": "ram-disk",
        "gpus": 2,
        "batch_size": 128,
        "precision": "fp32",
        "parallel": "dp",
        "repeat": 1,
        "model": "mobilenet_v2",
        "beside": False,
        "ranks": 1,
    }
    both = validate_config({"storage": {"hdd": "/mnt/hdd"}, "parallel": ["dp", "ddp"]})
    assert len(cell_ids(both)) == 2 * 2 and cell_spec(both, "opencv_hdd_g1_b128_fp32_ddp_r0").parallel == "ddp"
    spec = cell_spec(cfg, "opencv_ram-disk_g2_b128_fp32_dp_r1")
    assert spec.cell_id == "opencv_ram-disk_g2_b128_fp32_dp_r1" and spec.seed == 1 and spec.tier_path == "/dev/shm"
    with pytest.raises(ConfigError, match="not in this configuration's grid"):
        cell_spec(cfg, "opencv_ram-disk_g4_b128_fp32_dp_r1")
    with pytest.raises(ConfigError, match="is not a cell id"):
        parse_cell_id("opencv-ram")


def test_cells_on_the_same_devices_in_the_same_mode_follow_one_another():
    # a kept process (host.reuse_processes) serves the next dp cell on its devices: a ddp cell or a cell on other
    # GPUs in between ends it, so the order groups by (repeat, parallel mode, GPUs) before loader, tier and batch
    cfg = validate_config(
        {
            "storage": {"ram": "/dev/shm"},
            "loaders": ["opencv", "dali-cpu"],
            "gpus": [1, 2],
            "batch_sizes": [128, 256],
            "parallel": ["dp", "ddp"],
            "repeats": 2,
            "dataset": {"images": 512},
        }
    )
    ids = cell_ids(cfg)
    envs = [(parse_cell_id(c)["repeat"], parse_cell_id(c)["parallel"], parse_cell_id(c)["gpus"]) for c in ids]
    assert [e for i, e in enumerate(envs) if i == 0 or e != envs[i - 1]] == [
        (r, par, g) for r in (0, 1) for par in ("dp", "ddp") for g in (1, 2)
    ]  # each environment in one run
    assert ids[:4] == [
        "opencv_ram_g1_b128_fp32_dp_r0",
        "opencv_ram_g1_b256_fp32_dp_r0",
        "dali-cpu_ram_g1_b128_fp32_dp_r0",
        "dali-cpu_ram_g1_b256_fp32_dp_r0",
    ]


def _study(**over):
    raw = {
        "storage": {"ram": "/dev/shm", "disk": "resources/tiers/disk"},
        "loaders": ["torchvision"],
        "batch_sizes": [64],
        "workers": 2,
        "parts": [
            {"name": "every-loader", "loaders": ["torchvision", "synthetic"], "tiers": ["ram"], "repeats": 2},
            {"name": "disk", "tiers": ["disk"], "batch_sizes": [32, 64], "workers": 4, "window": {"max_seconds": 5}},
        ],
    }
    raw.update(over)
    return validate_config(raw)


def test_parts_are_a_union_of_sub_grids_with_their_own_settings():
    cfg = _study()
    ids = cell_ids(cfg)
    # repeats outermost across the parts: both parts' first repeats before any second repeat
    assert ids == [
        "torchvision_ram_g1_b64_fp32_dp_r0",
        "synthetic_ram_g1_b64_fp32_dp_r0",
        "torchvision_disk_g1_b32_fp32_dp_r0",
        "torchvision_disk_g1_b64_fp32_dp_r0",
        "torchvision_ram_g1_b64_fp32_dp_r1",
        "synthetic_ram_g1_b64_fp32_dp_r1",
    ]
    assert cfg["tiers"] == ["ram", "disk"]  # staged and probed: the parts' tiers
    assert cell_spec(cfg, "torchvision_ram_g1_b64_fp32_dp_r1").workers == 2
    disk = cell_spec(cfg, "torchvision_disk_g1_b32_fp32_dp_r0")
    assert (disk.workers, disk.window_max_s) == (4, 5)
    assert disk.cold_step == "auto"  # the top level's settings reach every part's cells
    assert cell_spec(_study(cold_step=False), "torchvision_disk_g1_b32_fp32_dp_r0").cold_step is False
    assert validate_config(cfg) == cfg  # a validated config validates to itself
    assert all(cell_part(cfg, cid) is part for cid, part in cell_parts(cfg).items())
    assert cell_part(cfg, "synthetic_disk_g1_b64_fp32_dp_r0") is None  # no part measures synthetic on the disk
    with pytest.raises(ConfigError, match="not in this configuration's grid"):
        cell_spec(cfg, "torchvision_disk_g1_b32_fp32_dp_r1")


@pytest.mark.parametrize(
    "parts, words",
    [
        ([{"name": "a", "storage": {}}], ["parts[0]", "'storage' cannot differ between parts"]),
        ([{"name": "a"}, {"name": "a"}], ["parts[1]", "used by an earlier part"]),
        ([{"name": "a", "loaders": ["nope"]}], ["parts[0]", "unknown loader 'nope'"]),
        (
            [{"name": "a", "workers": 2}, {"name": "b", "workers": 3}],
            ["parts[1]' (b)", "torchvision_ram_g1_b64_fp32_dp_r0 is also in part 'a'", "workers"],
        ),
    ],
)
def test_bad_parts_name_the_part_and_the_key(parts, words):
    with pytest.raises(ConfigError) as e:
        _study(parts=parts, tiers=["ram"])
    for w in words:
        assert w in str(e.value)


def test_a_batch_larger_than_a_generated_dataset_is_refused_naming_batch_sizes(tmp_path, capsys):
    from loaderbench.cli import main as cli
    from tests.conftest import write_config

    small = {"dataset": {"images": 32, "classes": 2}, "storage": {"ram": "/dev/shm"}}
    with pytest.raises(ConfigError) as e:
        validate_config({**small, "batch_sizes": [4, 64]})
    assert str(e.value) == (
        "config key 'batch_sizes': batch 64 takes 64 images a step, but dataset.images is 32; use "
        "batch sizes up to 4, or give the dataset more images"
    )
    # a step takes batch x GPUs images, under dp (one process) and ddp (a share each) alike
    for parallel in ("dp", "ddp"):
        with pytest.raises(ConfigError) as e:
            validate_config({**small, "batch_sizes": [16, 32], "gpus": [1, 2], "parallel": [parallel]})
        assert str(e.value).startswith(
            "config key 'batch_sizes': batch 32 on 2 GPUs takes 64 images a step, but "
            "dataset.images is 32; use batch sizes up to 16 or use fewer GPUs"
        )
    assert cell_ids(validate_config({**small, "batch_sizes": [16], "gpus": [2]})) == [
        "torchvision_ram_g2_b16_fp32_dp_r0",
        "opencv_ram_g2_b16_fp32_dp_r0",
    ]  # 32 images: exactly enough
    assert validate_config({**small, "batch_sizes": [256], "loaders": ["synthetic"]})  # reads no image
    with pytest.raises(ConfigError) as e:
        validate_config(
            {**small, "parts": [{"name": "ok", "batch_sizes": [8]}, {"name": "big", "batch_sizes": [8, 128]}]}
        )
    assert str(e.value).startswith("config key 'parts[1]' (big): config key 'batch_sizes': batch 128 takes 128 images")
    path = write_config(tmp_path, {**small, "batch_sizes": [64]})
    assert cli(["validate-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "config key 'batch_sizes': batch 64 takes 64 images a step, but dataset.images is 32" in err


def test_a_batch_larger_than_a_path_sources_images_is_refused_when_paths_are_checked(tmp_path, small_dataset, capsys):
    """The source's class folders hold 24 images: batch 32 is refused where the paths are checked (validate-config,
    the workflow), counted only up to the images needed; a config for another machine (--skip-paths) is not."""
    from loaderbench.cli import main as cli
    from tests.conftest import write_config

    (tmp_path / "tier").mkdir()
    raw = {
        "dataset": {"source": "path", "path": str(small_dataset)},
        "storage": {"disk": str(tmp_path / "tier")},
        "loaders": ["torchvision"],
    }
    path = write_config(tmp_path, {**raw, "batch_sizes": [8, 32]})
    assert cli(["validate-config", "--config", str(path)]) == 2
    assert (
        f"config key 'batch_sizes': batch 32 takes 32 images a step, but dataset.path {small_dataset} holds 24 "
        "image files in its class folders; use batch sizes up to 8"
    ) in capsys.readouterr().err
    assert cli(["validate-config", "--config", str(path), "--skip-paths"]) == 0
    assert "valid (2 cells)" in capsys.readouterr().out
    assert validate_config({**raw, "batch_sizes": [24]}, check_paths=True)["batch_sizes"] == [24]  # exactly enough


def test_a_crop_whose_batches_in_flight_exceed_the_memory_is_refused_naming_its_size():
    from loaderbench.core import machine

    cfg = validate_config({"crop_size": 100000, "batch_sizes": [16], "workers": 2, "prefetch_factor": 2})
    with pytest.raises(
        ConfigError, match=r"config key 'crop_size': 100000 at batch 16 with 2 workers x 2 .* ~11520\.0 GB"
    ):
        machine.check_memory(cfg, available=8 * 10**9)
    machine.check_memory(validate_config({"batch_sizes": [256], "workers": 2}), available=8 * 10**9)  # 224: fits
