"""Models as an axis of the report: every table names the model, AU, Speed and GPU Efficiency divide within one model,
the loader alone (model `none`) is measured but divided by nothing, and the two model figures are drawn only where the
records hold what they show."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from loaderbench.core.records import upgrade
from loaderbench.report import aggregate as agg
from loaderbench.report import figures
from loaderbench.report.aggregate import add_predictions, aggregate, cells_table, repeats_table, seed_table_frame
from loaderbench.report.bundle import make_bundle
from loaderbench.report.columns import read_table, table_csv
from loaderbench.report.diagnose import diagnose
from loaderbench.report.diagnose import run as diagnose_run
from loaderbench.report.figure_list import REGISTRY, load_captions
from loaderbench.report.recommend import recommendations
from loaderbench.report.verdict import render_html, verdicts, write_verdict
from tests.claims import parse_cell

BASELINE = {"loader": "torchvision", "tier": "ram", "gpus": 1, "batch_size": 256, "precision": "amp", "parallel": "dp"}


def record(loader, model, sps, gpus=1, tier="ram", repeat=0, run="run-1", halfwidth=0.02, wait_ms=1.0):
    """A made-up ok cell record of `model` as `records.read_record` reads it (mobilenet_v2: a record from before
    models, which names none: its model is named when it is read)."""
    spec = {
        "loader": loader,
        "tier": tier,
        "gpus": gpus,
        "batch_size": 256,
        "precision": "amp",
        "parallel": "dp",
        "repeat": repeat,
    }
    part = ""
    if model != "mobilenet_v2":
        spec["model"], part = model, f"_{model}"
    steps = sps * 10 / (256 * gpus)
    return upgrade(
        {
            "cell_id": f"{loader}_{tier}_g{gpus}_b256_amp_dp{part}_r{repeat}",
            "status": "ok",
            "spec": spec,
            "metrics": {
                "samples_per_s": sps,
                "time_s": 10.0,
                "steps": steps,
                "data_wait_ms": {"mean": wait_ms},
                "compute_ms": {"mean": 10000.0 / steps - wait_ms},
                "device": {"type": "cuda"},
                "window": {"ci95_rel_halfwidth": halfwidth, "converged": True},
            },
            "tier": {"kind": "ram", "cache": "warm"},
            "provenance": {
                "run_id": run,
                "host": {"hostname": "box", "gpu_models": ["NVIDIA H200"], "cpus_usable": 16},
            },
        }
    )


# two models with their ceilings, a 2-GPU cell of each, and two loaders alone
TWO_MODELS = [
    record("synthetic", "mobilenet_v2", 1000.0),
    record("synthetic", "resnet50", 400.0),
    record("torchvision", "mobilenet_v2", 500.0),
    record("torchvision", "resnet50", 300.0),
    record("torchvision", "mobilenet_v2", 800.0, gpus=2),
    record("torchvision", "resnet50", 560.0, gpus=2),
    record("dali-sc", "mobilenet_v2", 950.0, wait_ms=0.1),
    record("dali-sc", "resnet50", 390.0, wait_ms=0.1),
    record("torchvision", "none", 600.0),
    record("dali-sc", "none", 5000.0),
]
MOBILENET = [r for r in TWO_MODELS if r["spec"]["model"] == "mobilenet_v2"]  # a grid of one model


def cells(records: list[dict]) -> pd.DataFrame:
    return cells_table(repeats_table(records), BASELINE).set_index(["loader", "model", "gpus"])


def test_every_table_names_the_model_and_a_record_without_one_trained_mobilenet_v2():
    reps = repeats_table(TWO_MODELS)
    assert list(reps.columns[:3]) == ["cell_id", "loader", "model"]
    assert set(reps["model"]) == {"mobilenet_v2", "resnet50", "none"}
    t = cells_table(reps, BASELINE)
    assert len(t) == len(TWO_MODELS)  # each model's cell is its own configuration
    assert t.columns[len(agg.SEED_COLUMNS)] == "model"  # right after the seed's own columns, kept as they were
    # a table written before models were an axis reads as MobileNetV2's
    old = cells_table(repeats_table(TWO_MODELS[:1] + TWO_MODELS[2:3]), BASELINE).drop(columns="model")
    read = read_table(io.StringIO(table_csv(old)))
    assert set(read["model"]) == {"mobilenet_v2"} and list(read.columns[:2]) == ["loader", "model"]
    # so does a record made before: its model is named when it is read
    assert upgrade({"cell_id": "x", "status": "ok", "spec": {"loader": "opencv"}})["spec"]["model"] == "mobilenet_v2"


def test_au_speed_and_efficiency_divide_within_one_model():
    t = cells(TWO_MODELS)
    # AU: against the synthetic cell of the cell's own model
    assert t.loc[("torchvision", "resnet50", 1), "au"] == pytest.approx(300 / 400)
    assert t.loc[("torchvision", "mobilenet_v2", 1), "au"] == pytest.approx(500 / 1000)
    # Speed: against the baseline cell of the same model
    assert t.loc[("dali-sc", "resnet50", 1), "speed"] == pytest.approx(390 / 300)
    assert t.loc[("dali-sc", "mobilenet_v2", 1), "speed"] == pytest.approx(950 / 500)
    # GPU Efficiency: against the 1-GPU cell of the same model
    assert t.loc[("torchvision", "resnet50", 2), "gpu_efficiency"] == pytest.approx(560 / (2 * 300))
    assert t.loc[("torchvision", "mobilenet_v2", 2), "gpu_efficiency"] == pytest.approx(800 / (2 * 500))


def test_the_loader_alone_is_divided_by_nothing_and_is_no_ones_baseline():
    # were the loader alone anyone's baseline, dali-sc's Speed would be 950/600 and AU none of it would hold
    t = cells(TWO_MODELS)
    alone = t.xs("none", level="model")
    assert alone["samples_per_s"].tolist() == [600.0, 5000.0]
    assert alone[["au", "speed", "gpu_efficiency"]].isna().all().all()
    assert all("the loader alone" in why for why in alone["not_divided"])
    # a grid whose baseline loader was measured alone only: no Speed at all, rather than one against the loader alone
    no_base = cells([record("torchvision", "none", 600.0), record("dali-sc", "mobilenet_v2", 950.0)])
    assert no_base["speed"].isna().all()


def test_the_loader_alone_has_no_bottleneck_recommendation_or_verdict():
    t = cells_table(repeats_table(TWO_MODELS), BASELINE)
    d = diagnose(t)
    assert "none" not in set(d["model"]) and {"mobilenet_v2", "resnet50"} == set(d["model"])
    # compute of a resnet cell is resnet's synthetic step, not mobilenet's
    row = d[(d["loader"] == "torchvision") & (d["model"] == "resnet50") & (d["gpus"] == 1)].iloc[0]
    assert row["compute_only_ms"] == pytest.approx(1000.0 * 10.0 / (400.0 * 10 / 256))  # 10 s over its steps
    recs = recommendations(d, BASELINE)
    assert recs and all(r["model"] in ("mobilenet_v2", "resnet50") for r in recs)
    assert all(r["text"].startswith(f"{r['model']}: ") for r in recs)  # several models: each names its own
    assert not any("model=none" in c for r in recs for c in r["cells"])
    vs = verdicts(d, BASELINE)
    assert sorted(v["model"] for v in vs) == ["mobilenet_v2", "mobilenet_v2", "resnet50", "resnet50"]
    resnet = next(v for v in vs if v["model"] == "resnet50" and v["gpus"] == 1)
    assert resnet["reference"]["cell"] == "torchvision/ram/g1/b256/amp/dp/model=resnet50"
    assert resnet["fix"]["cell"] == "dali-sc/ram/g1/b256/amp/dp/model=resnet50"  # not the faster mobilenet cell
    assert "<th>Model</th>" in render_html(vs)
    one_model = verdicts(diagnose(cells_table(repeats_table(MOBILENET), BASELINE)), BASELINE)
    assert "<th>Model</th>" not in render_html(one_model)


def test_a_claim_names_a_models_cell():
    assert parse_cell("torchvision/ram/b256/amp/model=resnet50")[-1] == "resnet50"
    assert parse_cell("torchvision/ram/b256/amp")[-1] == "mobilenet_v2"
    with pytest.raises(ValueError, match="cannot read 'fp16'"):
        parse_cell("torchvision/ram/b256/fp16")


def test_the_shown_table_has_a_model_column_only_where_there_are_several():
    several = seed_table_frame(cells_table(repeats_table(TWO_MODELS), BASELINE))
    assert list(several.columns[:3]) == ["Dataloader", "Model", "Disk"]
    one = seed_table_frame(cells_table(repeats_table(MOBILENET), BASELINE))
    assert "Model" not in one and "Predicted samples/s" not in one


def test_the_shown_table_gives_each_predictions_role_beside_its_error():
    """A fit cell's error says how well k was fitted, not how well the model predicts: it is never shown bare."""
    t = cells_table(repeats_table(TWO_MODELS), BASELINE)
    confs = pd.Series([f"c{i}" for i in range(len(t))], index=t.index)
    roles = ["fit" if i % 2 else "check" for i in range(len(t))]
    pred = pd.DataFrame({"configuration": confs, "predicted": t["samples_per_s"] / 1.05, "error": 0.05, "role": roles})
    add_predictions(t, confs, pred[t["model"] != "none"])
    shown = seed_table_frame(t)
    cols = list(shown.columns)
    assert cols[cols.index("Prediction error") + 1] == "Prediction role"
    has = shown[shown["Predicted samples/s"] != "-"]
    assert set(has["Prediction role"]) == {"fit", "check"}
    assert set(shown.loc[shown["Predicted samples/s"] == "-", "Prediction role"]) <= {"-"}


def predictions_of(records: list[dict], role_of=lambda i: "fit" if i % 2 else "check") -> pd.DataFrame:
    """Made-up predictions in the sharing model's form: each training cell's measured rate missed by 5%."""
    rows = []
    for i, r in enumerate(x for x in records if x["spec"].get("model") != "none"):
        s = r["spec"]
        measured = r["metrics"]["samples_per_s"]
        rows.append(
            {
                "configuration": r["cell_id"].rsplit("_r", 1)[0],
                "model": s.get("model", "mobilenet_v2"),
                "loader": s["loader"],
                "tier": s["tier"],
                "gpus": s["gpus"],
                "batch_size": s["batch_size"],
                "precision": s["precision"],
                "parallel": s["parallel"],
                "measured": measured,
                "predicted": measured / 1.05,
                "error": 0.05,
                "limited_by": "loader",
                "role": role_of(i),
            }
        )
    return pd.DataFrame(rows)


def write_records(folder: Path, records: list[dict]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in records:
        (folder / f"{r['cell_id']}.json").write_text(json.dumps(r))
        paths.append(folder / f"{r['cell_id']}.json")
    return paths


def test_cells_csv_always_has_model_and_predicted_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(agg, "predictions", lambda records: predictions_of(records))
    files = write_records(tmp_path / "cells", TWO_MODELS)
    aggregate(files, BASELINE, 0.05, tmp_path)
    written = pd.read_csv(tmp_path / "cells.csv")
    assert {"Model", "Predicted samples/s", "Prediction error", "Prediction role"} <= set(written.columns)
    t = read_table(tmp_path / "cells.csv")
    resnet = t[(t["loader"] == "torchvision") & (t["model"] == "resnet50") & (t["gpus"] == 1)].iloc[0]
    assert resnet["predicted"] == pytest.approx(300 / 1.05, rel=1e-3) and resnet["prediction_error"] == 0.05
    assert t.loc[t["model"] == "none", "predicted"].isna().all()  # a cell with no prediction: blank
    assert "Model" in pd.read_csv(tmp_path / "repeats.csv")
    # without any prediction the columns are there, blank
    monkeypatch.setattr(agg, "predictions", lambda records: None)
    aggregate(files[:3], BASELINE, 0.05, tmp_path)
    written = pd.read_csv(tmp_path / "cells.csv")
    assert "Model" in written and written["Predicted samples/s"].isna().all()


def test_the_sharing_models_predictions_reach_cells_csv_and_its_figure(tmp_path):
    files = write_records(tmp_path / "cells", TWO_MODELS)
    aggregate(files, BASELINE, 0.05, tmp_path)
    t = read_table(tmp_path / "cells.csv")
    has = t[t["predicted"].notna()]
    # every training cell of a loader measured alone and a model with its ceiling, and no other
    assert sorted(zip(has["loader"], has["model"], has["gpus"], strict=True)) == [
        ("dali-sc", "mobilenet_v2", 1),
        ("dali-sc", "resnet50", 1),
        ("torchvision", "mobilenet_v2", 1),
        ("torchvision", "resnet50", 1),
    ]
    assert has["prediction_error"].to_numpy() == pytest.approx(
        has["samples_per_s"] / has["predicted"] - 1, abs=1e-3
    )  # 4 digits written
    assert set(has["prediction_role"]) == {"check"}  # nothing is fitted: every measured cell checks the model
    assert figures.predicted(t, tmp_path) is None  # drawn


def test_predictions_join_by_configuration_and_leave_the_rest_blank():
    t = cells_table(repeats_table(TWO_MODELS), BASELINE)
    confs = pd.Series(["x"] * len(t), index=t.index)
    confs.iloc[0] = "synthetic_ram_g1_b256_amp_dp"
    add_predictions(t, confs, predictions_of(TWO_MODELS[:1]))
    assert t["predicted"].notna().tolist() == [True] + [False] * (len(t) - 1)
    assert t["prediction_role"].iloc[0] == "check"


def test_the_model_figures_are_drawn_only_where_the_records_hold_them(tmp_path):
    t = cells_table(repeats_table(TWO_MODELS), BASELINE)
    confs = pd.Series([f"c{i}" for i in range(len(t))], index=t.index)
    pred = pd.DataFrame(
        {"configuration": confs, "predicted": t["samples_per_s"] / 1.05, "error": 0.05, "role": "check"}
    )
    add_predictions(t, confs, pred[t["model"] != "none"])
    out = tmp_path / "with"
    out.mkdir()
    assert figures.loader_alone(t, out) is None and figures.predicted(t, out) is None
    assert sorted(p.name for p in out.iterdir()) == [
        f"{n}.{x}" for n in ("loader_alone", "predicted") for x in ("png", "svg")
    ]
    # no loader alone, no ceiling, no prediction: neither is drawn (each says why), and one left from an earlier
    # grid goes
    bare = cells_table(repeats_table([r for r in TWO_MODELS if r["spec"].get("model") != "none"]), BASELINE)
    assert figures.loader_alone(bare, out) == "no loader alone (model none) measured"
    assert figures.predicted(bare, out).startswith("no measured cell has a predicted rate")
    no_ceiling = t[t["loader"] != "synthetic"]
    assert figures.loader_alone(no_ceiling, out).startswith("no model's compute ceiling")
    assert not any(out.iterdir())


def test_the_model_figures_have_captions():
    captions = load_captions(REPO / "workflow/report", tuple(f for f in REGISTRY if f.category == "Models"))
    assert set(captions) == {"loader_alone", "predicted", "whatif_matrix"} and all(captions.values())


def bundle(tmp_path: Path, records: list[dict]) -> str:
    """The bundle's index.html of `records` through aggregate, diagnose, verdict and the figures."""
    tables, figs = tmp_path / "tables", tmp_path / "figures"
    tables.mkdir(parents=True)
    files = write_records(tmp_path / "cells", records)
    aggregate(files, BASELINE, 0.05, tables)
    d = diagnose_run(tables / "cells.csv", BASELINE, tables)
    write_verdict(d, BASELINE, tables)
    figures.make_figures(tables / "cells.csv", tables / "repeats.csv", figs, diagnosis_csv=tables / "diagnosis.csv")
    (tmp_path / "config.json").write_text(json.dumps({"name": "models"}))
    check = {"source": "src", "counts": {"files": 1, "ok": 1, "odd": 0, "bad": 0}, "issues": {}}
    (tmp_path / "check.json").write_text(json.dumps(check))
    (tmp_path / "check.txt").write_text("ok\n")
    index = make_bundle(
        tmp_path / "config.json",
        [tables / n for n in ("cells.csv", "repeats.csv", "diagnosis.csv", "diagnosis.md", "tier_probe.csv")]
        + [tables / "recommendations.json", tables / "verdict.json"],
        figs,
        tmp_path / "check.json",
        tmp_path / "check.txt",
        [],
        files,
        REPO / "workflow/report",
        tmp_path / "bundle",
        tmp_path / "bundle.zip",
    )
    return index.read_text()


def test_the_bundle_shows_the_model_and_its_figures_only_where_the_grid_has_them(tmp_path, monkeypatch):
    monkeypatch.setattr(agg, "predictions", lambda records: predictions_of(records))
    page = bundle(tmp_path / "two", TWO_MODELS)
    assert page.count("<th>Model</th>") >= 3  # the table, the verdict and the diagnosis
    assert "Predicted samples/s" in page and "<th>Prediction role</th>" in page
    for name in ("loader_alone", "predicted"):
        assert f"<img src='figures/{name}.png'" in page
        assert (tmp_path / "two/bundle/figures" / f"{name}.svg").is_file()
    monkeypatch.setattr(agg, "predictions", lambda records: None)
    page = bundle(tmp_path / "one", MOBILENET)
    assert "<th>Model</th>" not in page and "Predicted samples/s" not in page
    assert "loader_alone" not in page and "figures/predicted" not in page
