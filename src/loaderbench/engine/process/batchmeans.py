"""How well a window knows its rate: batch means over its step end times, and their 95% interval."""

from __future__ import annotations

import math

BATCHES = 10


MIN_BATCHES = 5


# Student's t, 95% two-sided, by degrees of freedom (batch means - 1)
T_975 = {4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def trace(step_end: list[float], points: int = 50) -> list[list[float]]:
    """[steps, seconds] at about `points` evenly spaced steps: the window's shape, kept in the record."""
    n = len(step_end)
    idx = sorted({max(1, round(n * k / points)) for k in range(1, points + 1)} if n else set())
    return [[i, round(step_end[i - 1], 5)] for i in idx]


def batch_durations(
    step_end: list[float], batches: int = BATCHES, burst: int = 1, bounds: list[int] | None = None
) -> list[float]:
    """Durations of the window's batches of consecutive steps, the raw material of the batch means; [] with too few
    steps.

    Each batch is a whole number of `burst`s: a loader whose workers each deliver a whole batch delivers them in
    bursts of `burst` (= workers) batches, then waits a worker's batch time. A batch of steps that spans whole bursts does not swing with the phase.
    Up to `batches` batches are made, as few as MIN_BATCHES (of one burst, or one step, each): slow steps (a loader
    on an HDD takes seconds a step) are known from few of them. With `bounds` (burst starts): batches of whole
    cycles (`cycle_batches`)."""
    if bounds is not None:
        return [d for d, _ in cycle_batches(step_end, bounds, batches)]
    unit = max(1, burst)
    bursts = len(step_end) // unit
    k = min(batches, bursts)
    if k < MIN_BATCHES:
        return []
    b = (bursts // k) * unit  # steps per batch: whole bursts
    ends = [step_end[(j + 1) * b - 1] for j in range(k)]
    return [ends[0]] + [ends[j] - ends[j - 1] for j in range(1, k)]


def cycle_batches(step_end: list[float], bounds: list[int], batches: int = BATCHES) -> list[tuple[float, int]]:
    """(seconds, steps) of up to `batches` batches of whole cycles of a worker-fed loader: a cycle is the steps after
    one burst start up to and with the next (`bounds`: the burst starts, indices into `step_end`, -1 the window's
    start). Its bursts need not be its workers' number of batches (15 workers with 4 batches each ahead can
    deliver about 32 a cycle). [] with fewer than MIN_BATCHES cycles."""
    n = len(bounds) - 1
    k = min(batches, n)
    if k < MIN_BATCHES:
        return []
    edges = [bounds[(i * n) // k] for i in range(k + 1)]
    end = [0.0 if j < 0 else step_end[j] for j in edges]
    return [(end[i + 1] - end[i], edges[i + 1] - edges[i]) for i in range(k)]


def relative_halfwidth(
    step_end: list[float], batches: int = BATCHES, burst: int = 1, bounds: list[int] | None = None
) -> float | None:
    """Relative half-width of the 95% confidence interval of the mean time per step, from batch means over the step
    end times measured from the window's start (`batch_durations`: equal numbers of steps) - with `bounds`, over
    batches of whole cycles (`cycle_batches`), which hold unequal numbers of steps and are weighted by them (the
    ratio estimator: total time over total steps, its error from each batch's residual); None with too few steps."""
    if bounds is not None:
        pairs = cycle_batches(step_end, bounds, batches)
    else:
        b = batch_durations(step_end, batches, burst)
        pairs = [(d, 1) for d in b]
    k = len(pairs)
    if not k:
        return None
    steps = sum(n for _, n in pairs)
    mean = sum(d for d, _ in pairs) / steps  # seconds a step
    if mean <= 0:
        return None
    var = sum((d - mean * n) ** 2 for d, n in pairs) / (k - 1)
    return T_975[k - 1] * math.sqrt(var * k) / steps / mean
