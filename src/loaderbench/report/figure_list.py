"""The figures of a run: the one list that the figures rule (report categories, captions), `make_figures` (what to
draw from which inputs, in order) and the bundle (what to copy and show) read. Light on purpose: no plotting library
is imported here, so the bundle and the Snakefile read the list without matplotlib.

Each figure is drawn by the function of its name in `figures` (`DRAW`), called with the inputs it names (keyword
arguments) and `out_dir`; it writes `<name>.png` and `<name>.svg` there, plus its `extra` files, where its inputs hold
what it shows, and otherwise writes nothing and returns why (no empty figure): the figures folder's index
(`figures.json`) names the figures drawn and the reason for each other one. Its caption is
`workflow/report/<name>.rst`, shared by Snakemake's --report and the bundle."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

# what a figure may draw from (make_figures loads each once): the tables (the what-if's matrix among them), every
# cell's telemetry timeline and the cells chosen for the timelines figure
INPUTS = ("table", "repeats", "diagnosis", "probe", "whatif", "timelines", "timeline_cells")
FORMATS = ("png", "svg")


@dataclass(frozen=True)
class Figure:
    name: str
    category: str  # the section of Snakemake's report
    inputs: tuple[str, ...]
    extra: tuple[str, ...] = ()  # other files it writes beside the figure, in the figures folder

    def __post_init__(self):
        unknown = set(self.inputs) - set(INPUTS)
        if unknown:
            raise ValueError(f"figure {self.name}: unknown inputs {sorted(unknown)}")

    def caption(self, captions_dir: Path | str) -> Path:
        return Path(captions_dir) / f"{self.name}.rst"


REGISTRY = (
    Figure("throughput", "Throughput", ("repeats",)),
    Figure("speed_heatmap", "Throughput", ("table",)),
    Figure("seed_table", "Tables", ("table",), extra=("seed_table.html",)),
    Figure("stall_bars", "Bottlenecks", ("diagnosis",)),
    Figure("au_bars", "Bottlenecks", ("table",)),
    Figure("memory", "Memory", ("table", "repeats")),
    Figure("batch_effect", "Throughput", ("table",)),
    Figure("scaling", "Throughput", ("table",)),
    Figure("timelines", "Bottlenecks", ("repeats", "timelines", "timeline_cells")),
    Figure("tier_probe", "Storage", ("probe",)),
    Figure("loader_alone", "Models", ("table",)),  # each loader's rate alone against each model's compute ceiling
    Figure("predicted", "Models", ("table",)),  # each cell's measured rate against the sharing model's prediction
    Figure("whatif_matrix", "Models", ("whatif",)),  # every loader x model predicted from its parts, checks marked
)
FIGURES = tuple(f.name for f in REGISTRY)  # the names, in the order they are drawn and shown
EXTRA_FILES = tuple(x for f in REGISTRY for x in f.extra)
INDEX = "figures.json"  # in the figures folder: {"drawn": [name, ...], "not_drawn": {name: reason}}, registry order


def read_index(folder: Path | str) -> dict:
    """The figures folder's index: the figures drawn there and why each other one was not."""
    return json.loads((Path(folder) / INDEX).read_text())


def load_captions(captions_dir: Path | str, figures: tuple[Figure, ...] = REGISTRY) -> dict[str, str]:
    """Each figure's caption as one line of text (from its .rst file, its inline literals ``x`` shown as x)."""
    return {f.name: re.sub(r"``(.+?)``", r"\1", " ".join(f.caption(captions_dir).read_text().split())) for f in figures}


def run_captions(captions: dict[str, str], config: dict, models: list[str]) -> dict[str, str]:
    """The captions with what their general words leave to the run said after them: its baseline cell (Speed) and
    the models it trained (throughput)."""
    b = config.get("baseline") or {}
    said = {
        "speed_heatmap": (
            f"This run's baseline: {b.get('loader')} on {b.get('tier')}, {b.get('gpus')} GPU(s), batch "
            f"{b.get('batch_size')}, {b.get('precision')}."
            if b
            else ""
        ),
        "throughput": f"Models: {', '.join(models)}." if models else "",
    }
    return {name: f"{text} {said[name]}" if said.get(name) else text for name, text in captions.items()}
