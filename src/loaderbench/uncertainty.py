"""How far a ratio of two measurements can be trusted: the one place that says whether they differ.

A ratio's interval comes from both sources of noise: each window's own 95% interval (within a process) and, with
two or more rounds in separate processes, the spread of the rounds' ratios (between processes). They are combined on
the log scale, where a ratio's errors add.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

Z_95 = 1.96


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
        return {"value": self.value, "halfwidth": self.halfwidth, "low": self.low, "high": self.high,
                "rounds": self.rounds}  # fmt: skip


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
