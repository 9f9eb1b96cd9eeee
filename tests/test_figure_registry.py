"""The figure registry is the one list of figures: each entry is drawn by a function of its name taking exactly the
inputs it names, has its caption file, and the rule, make_figures and the bundle follow it."""

import inspect

import pytest
from conftest import REPO

from loaderbench.report import figures
from loaderbench.report.figure_list import FIGURES, INPUTS, REGISTRY, Figure, load_captions, run_captions


def test_every_figure_has_a_draw_function_taking_the_inputs_it_names():
    for fig in REGISTRY:
        draw = getattr(figures, fig.name, None)
        assert callable(draw), f"figures.{fig.name} is missing"
        assert set(inspect.signature(draw).parameters) == {*fig.inputs, "out_dir"}, fig.name


def test_every_figure_has_a_caption_and_names_are_unique():
    captions = load_captions(REPO / "workflow/report")
    assert list(captions) == list(FIGURES) and len(set(FIGURES)) == len(FIGURES)
    assert all(text.strip() for text in captions.values())
    # the bundle shows a caption as text: the reStructuredText literal Snakemake's report renders is plain there
    assert "(model none:" in captions["loader_alone"] and not any("``" in text for text in captions.values())


def test_a_log_colour_bar_is_labelled_at_its_1_2_5_values():
    from loaderbench.report.figures.whatif import _round_ticks

    assert _round_ticks(1859, 20440) == [2000, 5000, 10000, 20000]
    assert _round_ticks(3.0, 9.0) == [5]  # one label: the colour bar keeps its own
    assert _round_ticks(1.0, 1e6) == [1, 10, 100, 1000, 10000, 100000, 1000000]  # many decades: the powers of ten


def test_an_unknown_input_is_refused():
    with pytest.raises(ValueError, match="unknown inputs"):
        Figure("x", "Throughput", ("tabel",))
    assert "table" in INPUTS


def test_the_captions_name_the_runs_own_baseline_and_models_never_a_default():
    captions = load_captions(REPO / "workflow/report")
    assert not any("MobileNetV2" in text or "torchvision on hdd" in text for text in captions.values())
    config = {"baseline": {"loader": "opencv", "tier": "ram", "gpus": 1, "batch_size": 256, "precision": "amp"}}
    run = run_captions(captions, config, ["resnet18", "vit_b_16"])
    assert run["speed_heatmap"].endswith("This run's baseline: opencv on ram, 1 GPU(s), batch 256, amp.")
    assert run["throughput"].endswith("Models: resnet18, vit_b_16.")
    assert run["au_bars"] == captions["au_bars"]


def test_the_au_bars_hatch_the_contended_and_the_implausible_bars_only(tmp_path, monkeypatch):
    """On the contended quickstart's table with all but two rows made clean: exactly those two bars are hatched, and
    the title says what the hatching means."""
    from loaderbench.report.columns import read_table
    from loaderbench.report.figures import limits

    t = read_table(REPO / "docs/results/2026-12-07-cpu2/contended-quickstart/results/tables/cells.csv")
    t["contended"] = (t["loader"] == "opencv") & (t["tier"] == "ram")
    t["warnings"] = [
        "implausible: AU 1.53" if (lo, ti) == ("dali-mc", "hdd") else ""
        for lo, ti in zip(t["loader"], t["tier"], strict=True)
    ]
    drawn = {}
    monkeypatch.setattr(limits, "save", lambda fig, out, name: drawn.setdefault(name, fig))
    assert limits.au_bars(t, tmp_path) is None
    fig = drawn["au_bars"]
    hatched = [p for ax in fig.axes for c in ax.containers for p in c.patches if p.get_hatch() == "///"]
    assert len(hatched) == 2
    assert "Hatched in red: contended or implausible" in fig._suptitle.get_text()
