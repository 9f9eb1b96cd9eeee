"""The figure registry is the one list of figures: each entry is drawn by a function of its name taking exactly the
inputs it names, has its caption file, and the rule, make_figures and the bundle follow it."""

import inspect

import pytest
from conftest import REPO

from loaderbench.report import figures
from loaderbench.report.figure_list import FIGURES, INPUTS, REGISTRY, Figure, load_captions


def test_every_figure_has_a_draw_function_taking_the_inputs_it_names():
    for fig in REGISTRY:
        draw = getattr(figures, fig.name, None)
        assert callable(draw), f"figures.{fig.name} is missing"
        assert set(inspect.signature(draw).parameters) == {*fig.inputs, "out_dir"}, fig.name


def test_every_figure_has_a_caption_and_names_are_unique():
    captions = load_captions(REPO / "workflow/report")
    assert list(captions) == list(FIGURES) and len(set(FIGURES)) == len(FIGURES)
    assert all(text.strip() for text in captions.values())


def test_an_unknown_input_is_refused():
    with pytest.raises(ValueError, match="unknown inputs"):
        Figure("x", "Throughput", ("tabel",))
    assert "table" in INPUTS
