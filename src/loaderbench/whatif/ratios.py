"""MobileNetV2's measured 2-GPU/1-GPU ceiling ratios, dp and ddp: what the step side becomes at n GPUs where the
records hold no n-GPU ceiling of the model (never n x C)."""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from loaderbench.core.records import CorruptRecord, read_record
from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.uncertainty import Ratio, ratio

from .measured import CEILING, Index, by_run, configurations, measurement

KEPT = Path(__file__).resolve().parents[3] / "docs" / "results"  # the records kept in the repository
RATIO_GPUS = 2  # the GPU count of the measured ratio


@dataclass(frozen=True)
class CeilingRatio:
    """C_2 / C_1 of MobileNetV2's ceilings in one parallel mode, over the pairs measured in one run each."""

    mode: str
    value: Ratio
    pairs: list[str]  # the 2-GPU ceilings paired, by name and run
    batch_size: int | None = None  # the batch and precision of its pairs; None: every pair of the mode
    precision: str | None = None

    def label(self) -> str:
        at = f"b{self.batch_size} {self.precision}" if self.batch_size else "every batch and precision"
        return (
            f"MobileNetV2's {RATIO_GPUS}-GPU/1-GPU {self.mode} ceiling ratio {self.value.text(2)} "
            f"({at}, {len(self.pairs)} pair{'s' if len(self.pairs) > 1 else ''} of docs/results)"
        )


def ceiling_ratios(records: list[dict]) -> dict[tuple, CeilingRatio]:
    """The 2-GPU/1-GPU ratio of MobileNetV2's ceilings, each 2-GPU ceiling paired with the 1-GPU one of its run at its
    batch, precision and mode: keyed (mode, batch, precision), and (mode,) over every pair of the mode."""
    pairs: dict[tuple, list] = defaultdict(list)
    for mine in by_run(configurations(records)).values():
        index = Index(mine)
        for two in mine:
            if two.loader != CEILING or two.model != DEFAULT_MODEL or two.spec["gpus"] != RATIO_GPUS:
                continue
            at = two.fields("batch_size", "precision", "parallel")
            one = index.find(of=two, loader=CEILING, model=DEFAULT_MODEL, gpus=1, **at)
            if one is None:
                continue
            pair = ((two.rate, one.rate, two.halfwidth, one.halfwidth), f"{two.name} ({two.run})")
            pairs[(at["parallel"], at["batch_size"], at["precision"])].append(pair)
            pairs[(at["parallel"],)].append(pair)
    out = {}
    for key, found in pairs.items():
        value = ratio([p for p, _ in found])
        out[key] = CeilingRatio(key[0], value, [n for _, n in found], *key[1:])
    return out


@functools.cache
def kept_ceiling_ratios() -> dict[tuple, CeilingRatio]:
    """`ceiling_ratios` of the ceiling records kept under docs/results; {} where the tree has none."""
    records: dict[tuple, dict] = {}
    for path in sorted(KEPT.rglob(f"{CEILING}_*.json")) if KEPT.is_dir() else []:
        if path.parent.name == "cells":
            try:
                r = read_record(path)
            except CorruptRecord:
                continue
            records.setdefault(measurement(r), r)
    return ceiling_ratios(list(records.values()))


def ratio_for(ratios: dict[tuple, CeilingRatio], mode: str, batch_size: int, precision: str) -> CeilingRatio | None:
    """The ratio measured at the row's batch and precision in its mode, else the mode's over every pair."""
    return ratios.get((mode, batch_size, precision)) or ratios.get((mode,))
