"""Where every file of a run lives: the one owner of the results layout. Snakemake's rules, the CLI's defaults,
the aggregation (the respread ledger) and the Makefile (`loaderbench where`) read it from here.

Paths are relative to the run's working directory (Snakemake's --directory). A method given a wildcard such as
"{tier}" returns the rule's pattern: `RESULTS.manifest("{tier}")` is "results/staging/{tier}.json"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DATASETS = "resources/datasets"  # generated datasets, one folder per dataset name
LOGS = "logs"


@dataclass(frozen=True)
class Layout:
    root: str = "results"

    def _p(self, *parts: str) -> str:
        return str(Path(self.root, *parts))

    # the dataset check and staging
    @property
    def check(self) -> str:
        return self._p("dataset", "check.json")

    @property
    def check_report(self) -> str:  # written beside the check by `check_dataset`
        return str(Path(self.check).with_suffix(".txt"))

    @property
    def quarantine(self) -> str:
        return self._p("dataset", "quarantine")

    def manifest(self, tier: str) -> str:
        return self._p("staging", f"{tier}.json")

    def probe(self, tier: str) -> str:
        return self._p("probe", f"{tier}.json")

    @property
    def config(self) -> str:  # the resolved config of the run
        return self._p("config.json")

    # cells
    @property
    def cells(self) -> str:
        return self._p("cells")

    def cell(self, cell_id: str) -> str:
        return self._p("cells", f"{cell_id}.json")

    @property
    def telemetry(self) -> str:
        return self._p("telemetry")

    def timeline(self, cell_id: str) -> str:
        return self._p("telemetry", f"{cell_id}.csv")

    @property
    def superseded(self) -> str:  # records of configurations requeued by `respread`
        return self._p("cells", "superseded")

    @property
    def respread_ledger(self) -> str:
        return self._p("respread.json")

    # tables, figures, bundle
    @property
    def tables(self) -> str:
        return self._p("tables")

    def table(self, name: str) -> str:
        """A file of the tables folder: cells.csv, repeats.csv, tier_probe.csv, diagnosis.csv, ..."""
        return self._p("tables", name)

    @property
    def figures(self) -> str:
        return self._p("figures")

    def figure(self, name: str, ext: str = "png") -> str:
        return self._p("figures", f"{name}.{ext}")

    @property
    def bundle(self) -> str:
        return self._p("bundle")

    @property
    def bundle_zip(self) -> str:
        return self._p("bundle.zip")

    @property
    def report(self) -> str:  # Snakemake's --report
        return self._p("report.html")

    # side measurements outside the grid
    @property
    def ceiling(self) -> str:
        return self._p("ceiling")

    @property
    def sweep(self) -> str:
        return self._p("sweep")


RESULTS = Layout()


def where(name: str, arg: str | None = None, root: str = "results") -> str:
    """The path `name` (a Layout attribute; `arg` for those that take one) names: `loaderbench where cell ID`."""
    value = getattr(Layout(root), name, None) if not name.startswith("_") else None
    if value is None:
        names = sorted(n for n in dir(Layout) if not n.startswith("_") and n != "root")
        raise ValueError(f"unknown path {name!r}; one of: {', '.join(names)}")
    if callable(value):
        if arg is None:
            raise ValueError(f"path {name!r} needs an argument (loaderbench where {name} ARG)")
        return value(arg)
    return value
