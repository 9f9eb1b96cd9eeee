"""The planner predicts a dataset generation from the last one's record (count and seconds, a JSON file beside
`make-dataset`'s log), not from the log line, which is for people."""

from __future__ import annotations

import json

import pytest

from loaderbench import cli
from loaderbench.core.config import validate_config
from loaderbench.plan.fixedcosts import GENERATION_RECORD, record_generation
from loaderbench.plan.hostrecords import Host
from loaderbench.plan.predict import make_plan
from tests.conftest import tiny_config

CPU2 = Host((), 2, "a 2-core CPU host")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder as the working directory (make-dataset's record and the plan are relative to it)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _generate_cost(project):
    cfg = validate_config(tiny_config(project), base_dir=project)  # 32 images, none generated yet
    return make_plan(cfg, [], host=CPU2).fixed[0]


def test_make_dataset_records_the_images_it_wrote_and_its_seconds_beside_its_log(project, capsys):
    assert cli.main(["make-dataset", "--out", "ds", "--images", "6", "--classes", "2", "--jobs", "1"]) == 0
    record = json.loads((project / GENERATION_RECORD).read_text())
    assert record["images"] == 6 and record["seconds"] > 0 and (project / GENERATION_RECORD).parent.name == "logs"
    assert "wrote 6 images to ds/train" in capsys.readouterr().err  # the line for people stays
    generate = _generate_cost(project)
    assert generate.basis == "log" and generate.seconds == pytest.approx(record["seconds"] * 32 / 6, rel=1e-3)
    assert GENERATION_RECORD in generate.detail


def test_dataset_generation_is_predicted_from_the_last_generations_record(project):
    record_generation(16, 2.0)
    generate = _generate_cost(project)
    assert (generate.basis, generate.seconds) == ("log", pytest.approx(4.0))
    assert generate.detail == f"2.0 s for 16 images in {GENERATION_RECORD}"


def test_the_log_line_alone_is_not_read_and_a_broken_record_falls_back_to_the_rule(project):
    (project / "logs").mkdir()
    (project / "logs/make_dataset.log").write_text("wrote 16 images to resources/datasets/x/train: in 2.0 s\n")
    assert _generate_cost(project).basis == "rules"
    (project / GENERATION_RECORD).write_text('{"images": 0, "seconds": 2.0}')
    assert _generate_cost(project).basis == "rules"
    (project / GENERATION_RECORD).write_text("{not json")
    assert _generate_cost(project).basis == "rules"
