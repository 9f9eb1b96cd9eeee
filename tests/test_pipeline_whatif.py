"""The what-if through the real workflow on the CPU: the shipped parts-only config (each loader alone, each model's
ceiling, the beside parts; no training cell) runs to the bundle, whose matrix table predicts every loader x model
and whose figure draws it."""

from __future__ import annotations

import itertools
import json

import pandas as pd
import pytest
import yaml

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from tests.conftest import REPO, snakemake, write_config

pytestmark = pytest.mark.e2e


def test_the_parts_only_config_predicts_every_pair_in_the_bundle(tmp_path):
    raw = yaml.safe_load((REPO / "config/whatif-parts.yaml").read_text())
    # the shipped config on a tier of its own, with a quarter of its images and windows of 3 steps: the same cells,
    # quicker to make and to measure (what is checked is the matrix they make, not their rates)
    raw.update(storage={"ram": str(tmp_path / "tier")}, dataset={**raw["dataset"], "images": 256})
    raw.update(window={"steps": 3}, warmup_steps=1)
    cfg = validate_config(raw, base_dir=tmp_path)
    assert not [c for c in cell_ids(cfg) if "_none_" not in c and not c.startswith("synthetic") and "_beside" not in c]
    snakemake(tmp_path, "--configfile", str(write_config(tmp_path, raw)))

    bundle = tmp_path / "results/bundle"
    matrix = pd.read_csv(bundle / "tables/whatif.csv")
    loaders = raw["parts"][0]["loaders"]
    models = raw["parts"][1]["models"]
    assert set(zip(matrix["loader"], matrix["model"], strict=True)) == set(itertools.product(loaders, models))
    assert (matrix["status"] == "predicted").all() and (matrix["gpus"] == 1).all()  # no pair measured, 1 device
    assert (matrix["predicted"] > 0).all(), matrix[["loader", "model", "predicted", "lacks"]]
    assert (matrix["predicted_lo"] <= matrix["predicted"]).all() and (
        matrix["predicted"] <= matrix["predicted_hi"]
    ).all()
    assert matrix["consuming_side"].notna().all()  # every loader's beside part measured: no term unknown
    figures = json.loads((bundle / "figures/figures.json").read_text())
    assert "whatif_matrix" in figures["drawn"] and (bundle / "figures/whatif_matrix.png").stat().st_size > 10_000
    scores = json.loads((bundle / "tables/whatif_scores.json").read_text())
    assert scores["classes"] == [] and scores["coverage"]["checks"] == 0  # nothing checked, nothing scored
    page = (bundle / "index.html").read_text()
    assert "What if: every loader x model predicted from its parts" in page and "6 rows: 6 predicted" in page
