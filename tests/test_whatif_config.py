"""Config key `whatif`: the parts and checks it adds to the grid (at the configurations where a pair's parts are
both measured), every bad key named when the config loads, what `loaderbench plan` says it saves, and the matrix
figure drawn from the matrix table's columns."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from loaderbench import cli
from loaderbench.core.cells import cell_ids, cell_part, cell_spec, parse_cell_id
from loaderbench.core.config import ConfigError, load_config, validate_config
from loaderbench.core.whatifgrid import matrix_gpus, matrix_size, saving
from loaderbench.plan.hostrecords import Host
from loaderbench.plan.predict import make_plan
from loaderbench.report.figure_list import read_index
from loaderbench.report.figures import make_figures
from loaderbench.report.figures.whatif import whatif_matrix
from tests.conftest import REPO, write_config

CPU2 = Host((), 2, "a 2-core CPU host")
LOADERS = ["torchvision", "opencv", "dali-cpu"]
MODELS = ["mobilenet_v3_small", "resnet18"]


def parts_config(whatif: dict | None) -> dict:
    """Each loader alone at batch 16 and 32, each model's ceiling at batch 32 only, and `whatif` over them."""
    return {
        "storage": {"ram": "/dev/shm"},
        "crop_size": 64,
        "batch_sizes": [16, 32],
        "parts": [
            {"name": "alone", "loaders": LOADERS, "models": ["none"]},
            {"name": "ceilings", "loaders": ["synthetic"], "models": MODELS, "batch_sizes": [32]},
        ],
        **({"whatif": whatif} if whatif is not None else {}),
    }


def test_whatif_adds_beside_rank_and_check_parts_where_both_parts_are_measured():
    raw = parts_config(
        {"checks": [["opencv", "resnet18"]], "repeats": 2, "ranks": {"loaders": ["opencv"], "n": [2, 4]}}
    )
    cfg = validate_config(raw)
    added = [c for c in cell_ids(cfg) if cell_part(cfg, c)["name"].startswith("whatif-")]
    assert sorted(added) == sorted(
        [f"{lo}_ram_g1_b32_fp32_dp_mobilenet_v3_small_beside_r0" for lo in LOADERS]  # the first model: the reference
        + [f"opencv_ram_g1_b{b}_fp32_{par}_none_ranks{n}_r0" for b in (16, 32) for par in ("ddp", "dp") for n in (2, 4)]
        + ["opencv_ram_g1_b32_fp32_dp_resnet18_r0", "opencv_ram_g1_b32_fp32_dp_resnet18_r1"]  # whatif.repeats: 2
    )
    beside = cell_spec(cfg, "dali-cpu_ram_g1_b32_fp32_dp_mobilenet_v3_small_beside_r0")
    assert (beside.beside, beside.ranks, beside.model, beside.crop_size) == (True, 1, "mobilenet_v3_small", 64)
    ranks = cell_spec(cfg, "opencv_ram_g1_b16_fp32_ddp_none_ranks4_r0")
    assert (ranks.ranks, ranks.beside, ranks.gpus) == (4, False, 1)
    assert [p["name"] for p in cfg["parts"]] == [
        "alone",
        "ceilings",
        "whatif-beside",
        "whatif-ranks2",
        "whatif-ranks4",
        "whatif-check-opencv-resnet18",  # last: trim leaves the checks out first
    ]
    assert cfg["whatif"]["reference_model"] == "mobilenet_v3_small"
    assert cfg["whatif"]["ranks"] == [{"loaders": ["opencv"], "n": [2, 4], "parallel": ["ddp", "dp"], "repeats": None}]
    assert validate_config(cfg) == cfg  # a validated config validates to itself: the parts are added once
    assert matrix_gpus(cfg) == [1, 2, 4]
    # the matrix: 3 loaders x 2 models at batch 32, the one configuration both parts share
    assert matrix_size(cfg) == {"loaders": 3, "models": 2, "configurations": 6, "repeats": 2, "cells": 12}


def test_a_check_or_a_rank_entry_can_say_its_own_repeats_and_rank_entries_their_own_loaders_and_counts():
    raw = parts_config(
        {
            "checks": [["opencv", "resnet18", 3], ["torchvision", "resnet18"]],
            "repeats": 2,
            "ranks": [
                {"loaders": ["opencv", "dali-cpu"], "n": [2], "parallel": ["ddp"]},
                {"loaders": ["torchvision"], "n": [4], "repeats": 2},
            ],
        }
    )
    raw["repeats"] = 1
    cfg = validate_config(raw)
    runs = [c for c in cell_ids(cfg) if "ranks" in c or "_resnet18_r" in c and not c.startswith("synthetic")]
    assert sorted(runs) == sorted(
        [f"opencv_ram_g1_b32_fp32_dp_resnet18_r{r}" for r in range(3)]  # its own 3
        + [f"torchvision_ram_g1_b32_fp32_dp_resnet18_r{r}" for r in range(2)]  # whatif.repeats
        + [f"{lo}_ram_g1_b{b}_fp32_ddp_none_ranks2_r0" for lo in ("opencv", "dali-cpu") for b in (16, 32)]
        + [
            f"torchvision_ram_g1_b{b}_fp32_{par}_none_ranks4_r{r}"
            for b in (16, 32)
            for par in ("ddp", "dp")
            for r in (0, 1)
        ]
    )
    assert matrix_gpus(cfg) == [1, 2, 4]
    assert "whatif-ranks4" in [p["name"] for p in cfg["parts"]]
    with pytest.raises(ConfigError, match=r"'whatif.ranks\[1\].loaders\[0\]': 'wds' is not a loader"):
        validate_config(parts_config({"ranks": [{"n": [2]}, {"loaders": ["wds"]}]}))


def test_without_whatif_the_grid_is_the_parts_alone():
    cfg = validate_config(parts_config(None))
    assert len(cell_ids(cfg)) == 3 * 2 + 2 and saving(cfg) is None
    assert not any(parse_cell_id(c)["beside"] or parse_cell_id(c)["ranks"] > 1 for c in cell_ids(cfg))
    off = validate_config(parts_config({"beside": False}))
    assert cell_ids(off) == cell_ids(cfg)  # beside: false and nothing else asked: no cell added


@pytest.mark.parametrize(
    "whatif, key, words",
    [
        ({"checks": [["wds", "resnet18"]]}, "'whatif.checks[0]'", "loader 'wds' is not measured alone"),
        ({"checks": [["opencv", "resnet50"]]}, "'whatif.checks[0]'", "model 'resnet50' has no ceiling"),
        ({"checks": [["synthetic", "resnet18"]]}, "'whatif.checks[0]'", "loader 'synthetic' is not measured alone"),
        ({"ranks": {"loaders": ["opencv", "nvjpeg"]}}, "'whatif.ranks.loaders[1]'", "'nvjpeg' is not a loader"),
        ({"reference_model": "vit_b_16"}, "'whatif.reference_model'", "'vit_b_16' is not a model of the config"),
        ({"ranks": {"n": [1]}}, "'whatif.ranks.n[0]'", "less than the minimum of 2"),
        ({"checks": [["opencv"]]}, "'whatif.checks[0]'", "is too short"),
        ({"checks": [["opencv", "resnet18", 0]]}, "'whatif.checks[0][2]'", "less than the minimum of 1"),
        ({"ranks": [{"n": [2], "tiers": ["ram"]}]}, "'whatif.ranks[0]'", "'tiers' was unexpected"),
        ({"tiers": ["ram"]}, "'whatif'", "'tiers' was unexpected"),
    ],
)
def test_a_bad_whatif_key_is_named_with_what_the_config_measures(whatif, key, words):
    with pytest.raises(ConfigError) as e:
        validate_config(parts_config(whatif))
    assert key in str(e.value) and words in str(e.value), str(e.value)


def test_a_pair_whose_parts_share_no_configuration_is_refused_naming_both_parts():
    raw = parts_config({"checks": [["opencv", "resnet18"]]})
    raw["parts"][1]["precisions"] = ["amp"]  # the ceilings at amp, the loaders alone at fp32
    with pytest.raises(ConfigError) as e:
        validate_config(raw)
    text = str(e.value)
    assert "'whatif.reference_model'" in text and "share no GPUs, batch size, precision" in text, text
    assert "part 'alone'" in text and "part 'ceilings'" in text and "precisions ['amp']" in text, text


def test_whatif_needs_a_loader_alone_and_a_ceiling():
    raw = parts_config({})
    raw["parts"] = raw["parts"][1:]
    with pytest.raises(ConfigError, match=r"'whatif': no part measures a loader alone"):
        validate_config(raw)


def test_the_shipped_whatif_configs_are_the_parts_and_the_same_with_two_checks():
    parts = load_config(REPO / "config/whatif-parts.yaml", base_dir=REPO)
    checks = load_config(REPO / "config/whatif-checks.yaml", base_dir=REPO)
    assert len(cell_ids(parts)) == 3 + 2 + 3  # loaders alone, ceilings, beside
    extra = set(cell_ids(checks)) - set(cell_ids(parts))
    assert extra == {"opencv_ram_g1_b16_fp32_dp_resnet18_r0", "torchvision_ram_g1_b16_fp32_dp_mobilenet_v3_small_r0"}
    assert saving(checks)["matrix"]["cells"] == 6 and saving(checks)["measured_cells"] == 10


def test_plan_says_what_the_whatif_saves(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    raw = parts_config({"checks": [["opencv", "resnet18"]]})
    raw["parts"][0]["loaders"] = [*LOADERS, "nvjpeg", "wds"]
    raw["parts"][1]["models"] = [*MODELS, "mobilenet_v2", "efficientnet_b0"]
    plan = make_plan(validate_config(raw, base_dir=tmp_path), [], host=CPU2)
    # 5 loaders x 4 models at batch 32 against 5 alone x 2 batches, 4 ceilings, 5 beside and 1 check
    assert plan.whatif["matrix"]["cells"] == 20 and plan.whatif["measured_cells"] == 10 + 4 + 5 + 1
    assert plan.whatif["saved"] == 0
    cfg_path = write_config(tmp_path, raw)
    assert cli.main(["plan", "--config", str(cfg_path), "--json", str(tmp_path / "plan.json")]) == 0
    out = capsys.readouterr().out
    assert "full matrix, 5 loaders x 4 models" in out and "= 20 cells" in out, out
    assert "measured instead: 20 cells = 19 of parts (10 alone, 4 ceiling, 5 beside) + 1 training" in out, out
    assert json.loads((tmp_path / "plan.json").read_text())["whatif"]["saved"] == 0
    raw["parts"][1]["models"] += ["resnet50", "convnext_tiny"]
    bigger = make_plan(validate_config(raw, base_dir=tmp_path), [], host=CPU2).render()
    assert "saves 8 cells (27% of the matrix)" in bigger, bigger  # 30 against 22: a model costs one ceiling


def matrix_rows() -> pd.DataFrame:
    """A matrix table as whatif.matrix writes it: 1 GPU predicted (one pair checked), 2 GPUs unchecked."""
    rows = []
    for gpus in (1, 2):
        for loader in LOADERS:
            for model in MODELS:
                p = 100.0 * gpus * (2 if model == MODELS[0] else 1)
                checked = gpus == 1 and (loader, model) == ("opencv", "resnet18")
                rows.append(
                    {
                        "tier": "ram",
                        "gpus": gpus,
                        "batch_size": 16,
                        "precision": "fp32",
                        "parallel": "dp",
                        "loader": loader,
                        "model": model,
                        "predicted": p,
                        "predicted_lo": p / 1.2,
                        "predicted_hi": p * 1.2,
                        "status": "measured" if checked else "predicted" if gpus == 1 else "predicted, unchecked",
                        "measured": 110.0 if checked else None,
                        "error": 0.1 if checked else None,
                        "class": "consuming process" if loader == "torchvision" else "model",
                    }
                )
    return pd.DataFrame(rows)


def test_the_matrix_figure_is_drawn_from_the_tables_rows_and_says_why_not_without(tmp_path):
    assert whatif_matrix(matrix_rows(), tmp_path) is None
    assert (tmp_path / "whatif_matrix.png").stat().st_size > 10_000 and (tmp_path / "whatif_matrix.svg").is_file()
    svg = (tmp_path / "whatif_matrix.svg").read_text()
    assert "measured 110 (+10%)" in svg and "predicted, unchecked" in svg and "consuming process" in svg
    why = whatif_matrix(matrix_rows().drop(columns=["class", "predicted_hi"]), tmp_path)
    assert why == "the matrix table lacks the columns predicted_hi, class"
    assert not (tmp_path / "whatif_matrix.png").exists()  # a figure of an earlier run is not left behind
    assert "no loader x model has both its parts" in whatif_matrix(pd.DataFrame(), tmp_path)


def test_make_figures_reads_the_matrix_table_and_indexes_the_figure(tmp_path):
    kept = REPO / "docs/results/2026-12-04-h200/models/bundle/tables"
    for name in ("cells.csv", "repeats.csv", "diagnosis.csv"):  # two rows of a real run's tables: quick to draw
        (tmp_path / name).write_text(pd.read_csv(kept / name).head(2).to_csv(index=False))
    (tmp_path / "whatif.csv").write_text(matrix_rows().to_csv(index=False))
    (tmp_path / "empty.csv").write_text("\n")  # a matrix of no row, as pandas writes it

    def figures(out: str, matrix: str) -> dict:
        tables = [tmp_path / n for n in ("cells.csv", "repeats.csv")]
        return make_figures(*tables, tmp_path / out, tmp_path / "diagnosis.csv", whatif_csv=tmp_path / matrix)

    drawn = figures("a", "whatif.csv")
    assert "whatif_matrix" in drawn["drawn"] and read_index(tmp_path / "a") == drawn
    assert figures("b", "empty.csv")["not_drawn"]["whatif_matrix"].startswith("no loader x model has both its parts")
