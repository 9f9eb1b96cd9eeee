"""Worker-fed loaders deliver in bursts: which steps start a burst, whether a window delivers in bursts at all, and
the window cut to whole bursts (docs/method.md, "The window")."""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING

from .batchmeans import relative_halfwidth

if TYPE_CHECKING:
    from .window import StopRule


# A wait of at least this share of the gaps between bursts (`gap_reference`) starts a burst (a worker-fed loader's
# waits between bursts are a worker's batch time; a late worker inside a burst makes shorter ones)
BURST_GAP_SHARE = 0.5


def gap_reference(waits: list[float], burst: int, lead_wait: float = 0.0) -> float:
    """The wait a burst start is judged against: the median of the longest ceil(n / burst) waits of n steps (as many
    as a window has burst starts if every burst is `burst` batches), so that one stall longer than every gap between
    bursts does not hide them."""
    c = max(1, -(-(len(waits) + 1) // max(1, burst)))
    top = heapq.nlargest(c, [lead_wait, *waits])
    return top[len(top) // 2]


def _waited(waits: list[float], step_end: list[float], j: int) -> bool:
    """Whether step `j` of a window waited for its batch (`drained`)."""
    return drained(waits[j], step_end[j] - (step_end[j - 1] if j else 0.0))


def is_burst_start(waits: list[float], step_end: list[float], j: int, reference: float) -> bool:
    """Whether step `j` of a window started a burst: it waited for its batch (`drained`), at least BURST_GAP_SHARE
    of `reference` (`gap_reference`)."""
    return _waited(waits, step_end, j) and waits[j] >= BURST_GAP_SHARE * reference


def burst_bounds(waits: list[float], step_end: list[float], burst: int, lead_wait: float = 0.0) -> list[int] | None:
    """The burst starts of a worker-fed loader's window (`burst` > 1: its workers deliver together), by index, -1 for
    the window's start when the warm-up ended on a burst's first step (`lead_wait`, that step's wait, is a burst
    start's): the window's whole bursts are the steps after the first of them up to and with the last. None: fewer
    than a burst's worth of steps between the first and the last (every step counts).

    A warm-up can end on a late worker's short wait with a whole round of batches ready: those steps are not a burst of the steady
    state, and they are cut as the steps after the last burst start are."""
    if burst <= 1:
        return None
    reference = gap_reference(waits, burst, lead_wait)
    starts = [j for j in range(len(waits)) if is_burst_start(waits, step_end, j, reference)]
    if lead_wait >= max(DRAIN_MIN_S, BURST_GAP_SHARE * reference):
        starts.insert(0, -1)
    return starts if starts and starts[-1] - starts[0] >= burst else None


# A worker-fed window delivers in bursts when the waits opening its bursts take at least this share of its time and
# its cycles' lengths (in steps) vary by at most CYCLE_CV (standard deviation over mean): otherwise its stalls are not
# a rhythm to cut at
BURST_WAIT_SHARE = 0.1
CYCLE_CV = 0.5


def delivers_in_bursts(waits: list[float], step_end: list[float], bounds: list[int] | None) -> bool:
    """Whether a worker-fed loader's window (`bounds`: its burst starts, `burst_bounds`) delivers in bursts - its
    rate set by the waits between them, in a rhythm - rather than a batch a step with stalls now and then."""
    if not bounds or not step_end:
        return False
    if sum(waits[j] for j in bounds if j >= 0) < BURST_WAIT_SHARE * step_end[-1]:
        return False
    cycles = [b - a for a, b in itertools.pairwise(bounds)]
    if len(cycles) < 3:
        return True
    mean = sum(cycles) / len(cycles)
    return math.sqrt(sum((c - mean) ** 2 for c in cycles) / (len(cycles) - 1)) <= CYCLE_CV * mean


def _cycles(bounds: list[int], first: int, last: int) -> list[int]:
    """The burst starts of the steps first+1..last (with `first` and `last`), re-indexed to them: `first` is -1."""
    return [j - first - 1 for j in sorted({first, last, *(j for j in bounds if first <= j <= last)})]


def at_burst_start(rule: StopRule, waits: list[float], step_end: list[float], lead_wait: float):
    """(whether the window's last step started a burst, the precision of its whole cycles so far there - inf when
    not known yet, None when not judged here, whether it delivers in bursts - None when not judged) for
    `StopRule.done`."""
    j = len(step_end) - 1
    # most steps of a burst do not wait: the gaps' reference (a sort of every wait) only for one that did
    if rule.burst <= 1 or not _waited(waits, step_end, j):
        return False, None, None
    if not is_burst_start(waits, step_end, j, gap_reference(waits, rule.burst, lead_wait)):
        return False, None, None
    if rule.mode != "adaptive":
        return True, None, None
    bounds = burst_bounds(waits, step_end, rule.burst, lead_wait)
    if not bounds:
        return True, math.inf, None  # no whole bursts yet
    if not delivers_in_bursts(waits, step_end, bounds):
        return True, None, False
    first, last = bounds[0], bounds[-1]
    hw = relative_halfwidth(rebased(step_end, first, last), bounds=_cycles(bounds, first, last))
    return True, math.inf if hw is None else hw, True


def whole_bursts_cut(rule: StopRule, waits, step_end, lead_wait, agree_max, elapsed: float, end):
    """A worker-fed loader's window cut to whole bursts: (first, last, seconds, cycles, what the record says), the
    steps first+1..last kept; None for other loaders. Every rank keeps the latest first and last burst start any rank
    saw (ddp ranks wait for each other: one that waited for its batch starts the burst for all; +2 carries -1, the
    window's start, and 0, none). `end(j)`: seconds from the window's start to the end of step j."""
    if rule.burst <= 1:
        return None
    n = len(step_end)
    bounds = burst_bounds(waits, step_end, rule.burst, lead_wait) if rule.mode != "steps" else None  # kept whole
    bursts = bool(agree_max(int(delivers_in_bursts(waits, step_end, bounds))))
    first = agree_max(bounds[0] + 2 if bounds else 0) - 2
    last = agree_max(bounds[-1] + 2 if bounds else 0) - 2
    delivery = "fixed steps" if rule.mode == "steps" else "bursts" if bursts else "stream"
    if not bursts or first < -1 or last - first < rule.burst:
        return (
            -1,
            n - 1,
            elapsed,
            None,
            {"steps": n, "cut_head_steps": 0, "cut_tail_steps": 0, "cut_s": 0.0, "delivery": delivery},
        )
    cycles = _cycles(bounds or [], first, last)
    kept = elapsed if (first, last) == (-1, n - 1) else end(last) - end(first)
    return (
        first,
        last,
        kept,
        cycles,
        {
            "steps": last - first,
            "cut_head_steps": first + 1,
            "cut_tail_steps": n - 1 - last,
            "cut_s": round(elapsed - kept, 4),
            "cycles": len(cycles) - 1,
            "delivery": delivery,
        },
    )


def rebased(step_end: list[float], first: int, last: int) -> list[float]:
    """The step ends of steps first+1..last, from the end of step `first` (-1: the window's start)."""
    base = step_end[first] if first >= 0 else 0.0
    return [t - base for t in step_end[first + 1 : last + 1]]


# The loader made a warm-up step wait (its queue was empty) when the wait took this share of the step and this long.
DRAIN_SHARE, DRAIN_MIN_S = 0.2, 0.002


def drained(wait_s: float, step_s: float) -> bool:
    """Whether a step's wait for its batch says the loader's start-up backlog is used up (see `warm_up`)."""
    return wait_s >= DRAIN_MIN_S and wait_s >= DRAIN_SHARE * step_s
