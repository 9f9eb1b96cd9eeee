"""A measured window -> the cell's metrics: the seed's Time(s)/Steps/Samples/s, per-step waits and compute, how well
the rate is known, and warnings for results that should not be trusted as they are."""

from __future__ import annotations

import math
import statistics

import numpy as np

from loaderbench.core.records import warning

from .batchmeans import MIN_BATCHES

# A warm-up step (after the first, which carries autotuning) this much slower than a window step: the warm-up was
# disturbed, or the window measured something the warm-up did not (a drained backlog, a cache that filled).
WARMUP_SLOW = 10.0


def summarize_ms(values_s: list[float]) -> dict:
    a = np.asarray(values_s) * 1000.0
    if a.size == 0:
        return {"mean": None, "p50": None, "p95": None}
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95))}


def half_ratio(step_end: list[float], elapsed: float) -> float | None:
    """Throughput of the window's second half over its first half (1.0 = steady)."""
    steps = len(step_end)
    half = steps // 2
    if half < 2:
        return None
    t_half = step_end[half - 1]
    return ((steps - half) / max(elapsed - t_half, 1e-9)) / (half / t_half)


def step_durations(step_end: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *step_end[:-1]], step_end, strict=False)]


# Each warning has a stable code (records.WARNINGS) beside its text, so tables and reports can group them.
def warnings_for(
    *,
    final_loss: float,
    backlog: int,
    steps: int,
    ratio: float | None,
    rule,
    converged: bool | None,
    halfwidth: float | None,
    warmup_durations: list[float],
    window_step_end: list[float],
) -> list[dict]:
    out = []
    if not math.isfinite(final_loss):
        out.append(warning("diverged", f"loss is {final_loss} at the end of the window (throughput still measured)"))
    if backlog and steps < 10 * backlog and rule.mode != "adaptive":
        out.append(
            warning(
                "short_window",
                f"{steps} steps is under 10x the prefetch depth ({backlog} batches); "
                "lengthen it so start-up backlog cannot inflate the result",
            )
        )
    if ratio is not None and not 0.8 <= ratio <= 1.25:
        out.append(warning("unsteady", f"the second half of the window ran at {ratio:.2f}x the first half's rate"))
    if converged is False:
        known = (
            f"is known to +-{100 * halfwidth:.1f}%"
            if halfwidth is not None
            else f"has no interval ({steps} steps, fewer than {MIN_BATCHES * max(1, rule.burst)}"
            + (
                f": {MIN_BATCHES} batch means of whole bursts of {rule.burst} steps, one per loader worker"
                if rule.burst > 1
                else ""
            )
            + ")"
        )
        out.append(
            warning(
                "not_converged",
                f"after the window's maximum of {rule.max_seconds:g} s the rate {known}, not "
                f"+-{100 * rule.precision:g}%; raise window.max_seconds or read the spread of repeats",
            )
        )
    later = warmup_durations[1:]
    window_steps = step_durations(window_step_end)
    if later and window_steps:
        slow = statistics.median(later) / max(statistics.median(window_steps), 1e-9)
        if slow > WARMUP_SLOW:
            out.append(
                warning(
                    "implausible",
                    f"warm-up steps ran {slow:.0f}x slower than window steps (median); the warm-up was "
                    "disturbed or the window measured something else",
                )
            )
    return out
