"""How far a measurement and a ratio of two can be trusted: the one place that says whether they differ.

A cell's interval comes from its repeats in separate processes where it has two or more; else from its window's own
95% interval, widened by the noise between processes that the run measured on its repeated cells (the median
relative standard deviation of their repeats), or by `DEFAULT_BETWEEN_NOISE` where the run repeated no cell. A
ratio's interval adds its two sides' on the log scale.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

Z_95 = 1.96
# Student's t, 95% two-sided, by degrees of freedom
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def repeats_halfwidth(values: list[float]) -> float:
    """Relative 95% half-width of the mean of two or more repeats (Student's t)."""
    n = len(values)
    mean = statistics.fmean(values)
    return T_95.get(n - 1, Z_95) * statistics.stdev(values) / math.sqrt(n) / mean


# The noise between processes a run that repeated no cell is taken to have: the median relative standard deviation of
# the repeated cells of the seed's 1-GPU table on an H200 (2.4%, docs/results/2026-12-02-h200/seed-1gpu); the shards
# runs measured 1.7% (run a) and 3.9% (run b), docs/results/2026-12-03-h200/shards, so a run's own can be larger. A
# window's own interval holds none of it, so two single windows' ratio without it reads that noise as a difference.
DEFAULT_BETWEEN_NOISE = 0.024


def between_noise(groups: list[list[float]]) -> float | None:
    """The run's noise between processes: the median relative standard deviation of the repeats of each
    configuration that has two or more; None without one."""
    rel = [statistics.stdev(g) / statistics.fmean(g) for g in groups if len(g) > 1 and statistics.fmean(g) > 0]
    return statistics.median(rel) if rel else None


def widened(window_halfwidth: float, noise: float | None) -> float:
    """A single process's window interval widened by the run's noise between processes (None: the run measured none,
    `DEFAULT_BETWEEN_NOISE`)."""
    return math.hypot(window_halfwidth, Z_95 * (DEFAULT_BETWEEN_NOISE if noise is None else noise))


@dataclass(frozen=True)
class Ratio:
    value: float  # geometric mean of the rounds' ratios
    halfwidth: float  # relative 95% half-width: the interval is value / (1 + hw) .. value * (1 + hw)
    rounds: int

    @property
    def low(self) -> float:
        return self.value / (1 + self.halfwidth)

    @property
    def high(self) -> float:
        return self.value * (1 + self.halfwidth)

    def differs_from(self, target: float = 1.0) -> bool:
        """Whether `target` lies outside the interval."""
        return not self.low <= target <= self.high

    def text(self, digits: int = 3) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"

    def to_dict(self) -> dict:
        return {
            "value": self.value,
            "halfwidth": self.halfwidth,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
        }


def quotient(a: float, a_halfwidth: float, b: float, b_halfwidth: float) -> Ratio:
    """a/b with the interval of two independent measurements, each known to its relative 95% half-width."""
    sd = math.hypot(math.log1p(a_halfwidth), math.log1p(b_halfwidth))
    return Ratio(a / b, math.expm1(sd), 1)


def ratio(pairs: list[tuple[float, float, float | None, float | None]]) -> Ratio:
    """The ratio a/b over rounds of (a, b, a's relative half-width, b's) - a half-width None when its window did not
    know one (counted as 0: the rounds' spread must then carry the noise).

    Within a round the two windows' intervals add in quadrature; the mean log-ratio's variance is their mean over the
    rounds plus the rounds' own sample variance, each divided by the number of rounds."""
    if not pairs:
        raise ValueError("no rounds to take a ratio of")
    logs = [math.log(a / b) for a, b, _, _ in pairs]
    within = [((ha or 0.0) ** 2 + (hb or 0.0) ** 2) / Z_95**2 for _, _, ha, hb in pairs]
    n = len(pairs)
    between = statistics.variance(logs) if n > 1 else 0.0
    sd = math.sqrt((sum(within) / n + between) / n)
    return Ratio(math.exp(sum(logs) / n), math.expm1(Z_95 * sd), n)
