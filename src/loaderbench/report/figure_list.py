"""The figures of a run: the one list that the figures rule (outputs, report categories, captions), `make_figures`
(what to draw from which inputs, in order) and the bundle (what to copy and show) read. Light on purpose: no
plotting library is imported here, so the bundle and the Snakefile read the list without matplotlib.

Each figure is drawn by the function of its name in `figures.py`, called with the inputs it names (keyword
arguments) and `out_dir`; it writes `<name>.png` and `<name>.svg` there, plus its `extra` files. Its caption is
`workflow/report/<name>.rst`, shared by Snakemake's --report and the bundle."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# what a figure may draw from (make_figures loads each once): the tables, every cell's telemetry timeline and
# the cells chosen for the timelines figure
INPUTS = ("table", "repeats", "diagnosis", "probe", "timelines", "timeline_cells")
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
)
FIGURES = tuple(f.name for f in REGISTRY)  # the names, in the order they are drawn and shown
FIGURE_FILES = tuple(f"{name}.{ext}" for name in FIGURES for ext in FORMATS)  # each figure as PNG and SVG
EXTRA_FILES = tuple(x for f in REGISTRY for x in f.extra)

# Figures that only some grids can draw: each is drawn where its inputs hold what it shows, else no file is written
# (no empty figure). Not outputs the figures rule promises: the bundle shows those it finds beside the others.
WHERE_MEASURED = (
    Figure("loader_alone", "Models", ("table",)),  # each loader's rate alone against each model's compute ceiling
    Figure("predicted", "Models", ("table",)),  # each cell's measured rate against the sharing model's prediction
)


def load_captions(captions_dir: Path | str, figures: tuple[Figure, ...] = REGISTRY) -> dict[str, str]:
    """Each figure's caption as one line of text (from its .rst file)."""
    return {f.name: " ".join(f.caption(captions_dir).read_text().split()) for f in figures}
