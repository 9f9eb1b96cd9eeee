"""The training step's settings: its stream priority and a captured step, from the config to the cell's record, and
refused with the key named where they cannot apply."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from loaderbench.core.cells import ConfigError, cell_spec
from loaderbench.core.config import validate_config
from loaderbench.core.records import spec_hash, validate_record
from loaderbench.engine.runner.runcell import run_cell
from loaderbench.engine.step import check_step_settings
from tests.conftest import staged_disk


def test_the_step_settings_default_off_and_leave_the_hash_of_existing_cells_alone():
    cfg = validate_config({"loaders": ["dali-sc", "synthetic"], "batch_sizes": [4]})
    assert cfg["step_stream_priority"] == "default" and cfg["compile"] is False
    tier = cfg["tiers"][0]
    plain = cell_spec(cfg, f"dali-sc_{tier}_g1_b4_fp32_dp_r0")
    assert "step_stream_priority" not in plain.to_dict() and plain.to_dict()["compile"] is False
    high = validate_config({"loaders": ["dali-sc", "synthetic"], "batch_sizes": [4], "step_stream_priority": "high"})
    spec = cell_spec(high, f"dali-sc_{tier}_g1_b4_fp32_dp_r0")
    assert spec.step_stream_priority == "high" and spec.to_dict()["step_stream_priority"] == "high"
    assert spec_hash(spec) != spec_hash(plain) and spec_hash(
        replace(spec, step_stream_priority="default")
    ) == spec_hash(plain)
    # compile keeps its meaning: true is torch.compile's default mode, and an old config's hash does not move
    compiled = validate_config({"loaders": ["synthetic"], "batch_sizes": [4], "compile": True})
    assert cell_spec(compiled, f"synthetic_{tier}_g1_b4_fp32_dp_r0").to_dict()["compile"] is True


def test_a_captured_step_and_a_high_priority_stream_reach_every_cell_of_the_run_the_ceiling_included():
    cfg = validate_config(
        {
            "loaders": ["dali-cpu", "synthetic"],
            "batch_sizes": [4],
            "gpus": [1, 2],
            "parallel": ["ddp"],
            "compile": "reduce-overhead",
            "step_stream_priority": "high",
        }
    )
    tier = cfg["tiers"][0]
    for cid in (f"dali-cpu_{tier}_g2_b4_fp32_ddp_r0", f"synthetic_{tier}_g2_b4_fp32_ddp_r0"):
        spec = cell_spec(cfg, cid)
        assert (spec.compile, spec.step_stream_priority) == ("reduce-overhead", "high")


@pytest.mark.parametrize(
    ("settings", "key"),
    [({"step_stream_priority": "highest"}, "step_stream_priority"), ({"compile": "max-autotune"}, "compile")],
)
def test_a_value_the_schema_does_not_know_names_its_key(settings, key):
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        validate_config({"loaders": ["dali-sc"], **settings})


def test_a_captured_step_under_dataparallel_over_several_gpus_is_refused_naming_the_key():
    base = {"batch_sizes": [4], "gpus": [1, 2], "compile": "reduce-overhead"}
    with pytest.raises(ConfigError, match=r"config key 'compile': reduce-overhead .* parallel dp on 2 GPUs") as e:
        validate_config({**base, "loaders": ["torchvision"], "parallel": ["dp", "ddp"]})
    assert "dali-mc" not in str(e.value)
    with pytest.raises(ConfigError, match="dali-mc's batches come to it already scattered"):
        validate_config({**base, "loaders": ["dali-mc"]})
    with pytest.raises(ConfigError, match=r"config key 'parts\[0\]' \(mc\): config key 'compile'"):
        validate_config({"loaders": ["dali-mc"], "batch_sizes": [4], "parts": [{"name": "mc", **base}]})
    # one GPU, or a process per GPU (ddp): a captured step applies
    assert validate_config({**base, "loaders": ["dali-mc"], "gpus": [1]})["compile"] == "reduce-overhead"
    assert validate_config({**base, "loaders": ["dali-mc"], "parallel": ["ddp"]})["parallel"] == ["ddp"]


def test_a_cell_is_held_against_a_ceiling_of_the_same_step_across_parts():
    parts = [
        {"name": "fast-step", "loaders": ["dali-sc"], "step_stream_priority": "high"},
        {"name": "ceiling", "loaders": ["synthetic"]},
    ]
    with pytest.raises(ConfigError, match=r"parts\[0\]' \(fast-step\).*step_stream_priority 'high' \(the ceiling: "):
        validate_config({"loaders": ["dali-sc"], "batch_sizes": [4], "parts": parts})
    # the ceiling in the same part trains the same step; another configuration's ceiling may differ
    same = [{**parts[0], "loaders": ["dali-sc", "synthetic"]}, {**parts[1], "batch_sizes": [8]}]
    cfg = validate_config({"loaders": ["dali-sc"], "batch_sizes": [4], "parts": same})
    assert [p["settings"]["step_stream_priority"] for p in cfg["parts"]] == ["high", "default"]


def test_a_spec_made_outside_the_config_is_refused_at_cell_time_where_the_step_cannot_take_it():
    cfg = validate_config({"loaders": ["dali-mc"], "batch_sizes": [4], "gpus": [2]})
    spec = cell_spec(cfg, f"dali-mc_{cfg['tiers'][0]}_g2_b4_fp32_dp_r0")
    check_step_settings(spec, "cuda")  # the defaults apply anywhere
    with pytest.raises(ConfigError, match=r"config key 'compile': .* DataParallel over 2 GPUs"):
        check_step_settings(replace(spec, compile="reduce-overhead"), "cuda")
    check_step_settings(replace(spec, compile="reduce-overhead", parallel="ddp"), "cuda")
    check_step_settings(replace(spec, step_stream_priority="high"), "cuda")
    with pytest.raises(ConfigError, match=r"config key 'step_stream_priority': high .* on the CPU"):
        check_step_settings(replace(spec, step_stream_priority="high"), "cpu")


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "levers")


def _run(staged, tmp_path, cid: str, **settings) -> dict:
    folder, cfg = staged
    spec = replace(cell_spec(cfg, cid, in_grid=False), **settings)
    out = tmp_path / f"{spec.cell_id}.json"
    run_cell(spec, folder / "disk.json", out)
    rec = json.loads(out.read_text())
    validate_record(rec)
    return rec


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_cell_records_the_step_settings_it_ran_with(staged, tmp_path):
    rec = _run(staged, tmp_path, "torchvision_disk_g1_b4_fp32_dp_r0")
    assert rec["status"] == "ok", rec.get("reason")
    m = rec["metrics"]
    assert m["step_stream_priority"] == "default" and m["step_stream_cuda_priority"] is None
    assert m["captured_step"] is False and m["compiled"] is False
    assert "step_stream_priority" not in rec["spec"]


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"step_stream_priority": "high"}, r"config key 'step_stream_priority': high .* runs on the CPU"),
        ({"compile": "reduce-overhead"}, r"config key 'compile': reduce-overhead .* runs on the CPU"),
    ],
)
def test_a_step_setting_a_cpu_cell_cannot_run_fails_the_cell_with_the_key_named(staged, tmp_path, settings, reason):
    rec = _run(staged, tmp_path, "synthetic_disk_g1_b4_fp32_dp_r0", **settings)
    assert rec["status"] == "failed" and rec["metrics"] is None
    assert rec["reason"].startswith("ConfigError: ") and re.search(reason, rec["reason"])
    assert {k: rec["spec"][k] for k in settings} == settings  # the record names the setting it was asked for
