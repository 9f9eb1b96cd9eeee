"""The what-if's part cells by id and spec - `_beside` and `_ranks<n>` before the repeat, every other cell's id and spec
hash as they were - and in the tables: never among the real cells, in parts.csv beside them."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pandas as pd
import pytest

from loaderbench.core.cells import (
    CELL_ID_PATTERN,
    CELL_ID_RE,
    CellSpec,
    ConfigError,
    cell_id,
    configuration,
    parse_cell_id,
    part_kind,
)
from loaderbench.core.records import SCHEMA_VERSION, make_record, read_record, spec_hash
from loaderbench.report.aggregate import aggregate
from loaderbench.report.columns import read_table
from tests.conftest import REPO, ok_metrics, record_parts


@pytest.mark.parametrize(
    "fields, kw, cid",
    [
        (("torchvision", "ram", 1, 256, "amp", "dp", 0, "resnet50"), {"beside": True}, "dp_resnet50_beside_r0"),
        (("torchvision", "ram", 1, 256, "amp", "dp", 2), {"beside": True}, "dp_beside_r2"),  # MobileNetV2 left out
        (("torchvision", "ram", 1, 256, "amp", "ddp", 1, "none"), {"ranks": 2}, "ddp_none_ranks2_r1"),
        (("dali-mc", "ram", 1, 256, "amp", "dp", 0, "none"), {"ranks": 16}, "dp_none_ranks16_r0"),
        (("torchvision", "ram", 1, 256, "amp", "dp", 0, "my_net_r2"), {"beside": True}, "dp_my_net_r2_beside_r0"),
    ],
)
def test_a_part_id_round_trips_with_its_token_before_the_repeat(fields, kw, cid):
    made = cell_id(*fields, **kw)
    assert made.endswith(cid)  # the token after the model, before the repeat
    d = parse_cell_id(made)
    assert d["beside"] == kw.get("beside", False) and d["ranks"] == kw.get("ranks", 1)
    assert d["model"] == (fields[7] if len(fields) > 7 else "mobilenet_v2") and d["repeat"] == fields[6]
    assert cell_id(*(d[k] for k in ("loader", "tier", "gpus", "batch_size", "precision", "parallel", "repeat", "model")),
                   beside=d["beside"], ranks=d["ranks"]) == made  # fmt: skip
    assert part_kind(made) == ("beside" if kw.get("beside") else "ranks")
    assert configuration(made) == made.rsplit("_r", 1)[0]  # its repeats are one configuration, apart from the cell's
    assert re.fullmatch(CELL_ID_PATTERN, made)  # Snakemake's wildcard takes it


def test_every_kept_records_id_and_spec_hash_are_unchanged():
    """The records under docs/results made before the parts are cells of the matrix by spec and id, the what-if
    study's parts are parts by both, and a spec that names every field a spec holds today (not one made before a field
    was added) reads back to its id and its hash."""
    known = set(CellSpec.__dataclass_fields__)
    checked, parts = 0, 0
    for path in sorted((REPO / "docs/results").rglob("cells/*.json")):
        record = read_record(path)
        kind = part_kind(record["spec"])
        if kind is not None:  # a part is written at the schema that has parts
            assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION, path
            parts += 1
        if CELL_ID_RE.match(record["cell_id"]):  # (the oldest ids name no parallel mode: no id of today's grammar)
            assert part_kind(record["cell_id"]) == kind, path
        if not (set(record["spec"]) <= known and record["spec_hash"]):
            continue
        spec = CellSpec.from_dict(record["spec"])
        if set(spec.to_dict()) <= set(record["spec"]):
            assert spec.cell_id == record["cell_id"] and spec_hash(spec) == record["spec_hash"], path
            checked += 1
    assert checked > 200 and parts > 0


def test_ids_that_make_no_part_are_refused_naming_why():
    with pytest.raises(ConfigError, match="beside part steps a model"):
        cell_id("torchvision", "ram", 1, 256, "amp", "dp", 0, "none", beside=True)
    with pytest.raises(ConfigError, match=r"loader alone on one GPU \(model none, g1\), not model resnet50"):
        parse_cell_id("torchvision_ram_g1_b256_amp_ddp_resnet50_ranks2_r0")
    with pytest.raises(ConfigError, match="not model none on 2 GPU"):
        cell_id("torchvision", "ram", 2, 256, "amp", "ddp", 0, "none", ranks=2)
    # a plain cell's id is as it was: no token, the same fields
    plain = parse_cell_id("opencv_ssd_g2_b128_fp32_ddp_resnet18_r3")
    assert plain["model"] == "resnet18" and not plain["beside"] and plain["ranks"] == 1


SPEC = {
    "loader": "torchvision",
    "tier": "ram",
    "tier_path": "/dev/shm/x",
    "dataset": "ds",
    "gpus": 1,
    "batch_size": 256,
    "precision": "amp",
    "parallel": "dp",
    "repeat": 0,
    "seed": 0,
    "window_steps": None,
    "window_s": None,
    "window_max_s": 30.0,
    "window_min_s": 3.0,
    "window_precision": 0.02,
    "warmup_steps": 5,
    "crop_size": 224,
    "workers": "auto",
    "prefetch_factor": 2,
    "channels_last": True,
    "input_dtype": "auto",
    "compile": False,
    "dali_threads": "auto",
    "dali_prefetch": 2,
    "dali_hw_decoder_load": 0.65,
    "amp_dtype": "auto",
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 0.0001,
    "cudnn_benchmark": True,
    "placement": "auto",
}


def test_a_parts_spec_names_its_kind_and_hashes_apart_while_a_cells_spec_leaves_both_out():
    cell = CellSpec(**SPEC)
    assert "beside" not in cell.to_dict() and "ranks" not in cell.to_dict()  # as records made before the parts
    beside = replace(cell, beside=True)
    ranks = replace(cell, model="none", parallel="ddp", ranks=2)
    assert beside.to_dict()["beside"] is True and ranks.to_dict()["ranks"] == 2
    assert len({spec_hash(cell), spec_hash(beside), spec_hash(ranks)}) == 3
    assert beside.cell_id == "torchvision_ram_g1_b256_amp_dp_beside_r0"
    assert ranks.cell_id == "torchvision_ram_g1_b256_amp_ddp_none_ranks2_r0"
    assert (ranks.processes, ranks.launchers) == (2, 2)  # a process a rank, each with its launch core
    assert replace(ranks, parallel="dp").processes == cell.processes == 1


def made_record(spec: CellSpec, samples_per_s: float) -> dict:
    """A valid ok record of `spec` at `samples_per_s` (its metrics otherwise made-up)."""
    metrics = ok_metrics(
        samples_per_s=samples_per_s,
        time_s=10.0,
        steps=int(samples_per_s * 10 / 256),
        data_wait_ms={"mean": 1.0},
        compute_ms={"mean": 2.0},
        host_step_ms={"mean": 2.0, "p50": 2.0},
        main_cpu_ms=3.0,
        window={"ci95_rel_halfwidth": 0.02, "converged": True},
        device={"type": "cuda", "count": 1, "used": 1},
    )
    return make_record(spec, "ok", metrics, **record_parts())


def test_part_cells_go_to_parts_csv_and_never_among_the_real_cells(tmp_path):
    cell = CellSpec(**SPEC)
    records = [
        made_record(cell, 500.0),
        made_record(replace(cell, loader="synthetic"), 1000.0),
        made_record(replace(cell, beside=True), 700.0),
        made_record(replace(cell, model="none", parallel="ddp", ranks=2), 1800.0),
        made_record(replace(cell, model="none", parallel="ddp", ranks=2, repeat=1), 1900.0),
    ]
    cells = tmp_path / "cells"
    cells.mkdir()
    files = []
    for r in records:
        files.append(cells / f"{r['cell_id']}.json")
        files[-1].write_text(json.dumps(r))
    baseline = {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 256, "precision": "amp"}
    aggregate(files, baseline, 0.05, tmp_path)
    table = read_table(tmp_path / "cells.csv")
    assert sorted(table["loader"]) == ["synthetic", "torchvision"] and set(table["model"]) == {"mobilenet_v2"}
    assert table.loc[table["loader"] == "torchvision", "samples_per_s"].tolist() == [500.0]
    assert table.loc[table["loader"] == "torchvision", "au"].tolist() == [0.5]  # the ceiling is the synthetic cell
    repeats = pd.read_csv(tmp_path / "repeats.csv")
    assert not repeats["cell_id"].str.contains("_beside_|_ranks").any() and len(repeats) == 2
    parts = read_table(tmp_path / "parts.csv")
    assert parts["part"].tolist() == ["beside", "ranks2"]
    assert parts["samples_per_s"].tolist() == [700.0, 1850.0]  # the ranks part's median over its two repeats
    assert parts["model"].tolist() == ["mobilenet_v2", "none"]
    assert parts[["speed", "gpu_efficiency", "au"]].isna().all().all()  # a part is divided by nothing
    assert set(table.columns) <= set(parts.columns)  # the columns of cells.csv


def test_the_verdicts_retry_measures_a_matrix_cell_again_never_its_parts(tmp_path):
    """A part shares its matrix cell's report name (beside MobileNetV2 is `torchvision/ram/.../dp`): the retry the
    verdict asks for takes the cell it names, not the parts of that name."""
    from loaderbench.cli.run import blocked_cells_of

    plain = "torchvision_ram_g1_b256_amp_dp_r0"
    parts = ["torchvision_ram_g1_b256_amp_dp_beside_r0", "torchvision_ram_g1_b256_amp_dp_none_ranks2_r0"]
    verdict = tmp_path / "results/tables/verdict.json"
    verdict.parent.mkdir(parents=True)
    verdict.write_text(json.dumps([{"tier": "ram", "rerun": ["torchvision/ram/g1/b256/amp/dp"]}]))
    assert blocked_cells_of([plain, *parts], tmp_path, started=0) == {plain: "needed by the verdict on ram"}
