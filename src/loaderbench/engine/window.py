"""The timed part of a cell: warm-up, then a window that stops once its steady-state rate is known.

Warm-up runs until the loader's start-up backlog is spent (at most its prefetch depth + 2 steps). The window's clock
is the device's on a GPU (CUDA events). The adaptive rule stops at the first step after `min_seconds` at which the 95%
interval of the window's batch means is within `precision`, or at `max_seconds`. A worker-fed loader that delivers
in bursts is judged on whole cycles of bursts and its window cut to whole bursts (`delivers_in_bursts`).
Details and the reasoning: docs/method.md, "The window", and docs/internals.md, "engine.window".
"""

from __future__ import annotations

import gc
import heapq
import math
import sys
import time
from dataclasses import dataclass, field

BATCHES = 10
MIN_BATCHES = 5
# Student's t, 95% two-sided, by degrees of freedom (batch means - 1)
T_975 = {4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
PROGRESS_S = 5.0


@dataclass(frozen=True)
class StopRule:
    """Exactly one of `steps` (fixed), `seconds` (fixed) or `max_seconds` (adaptive) is set."""

    steps: int | None = None
    seconds: float | None = None
    max_seconds: float | None = None
    min_seconds: float = 3.0
    precision: float = 0.02
    burst: int = 1  # batches a worker-fed loader delivers at once (its workers); see relative_halfwidth

    @property
    def mode(self) -> str:
        return "steps" if self.steps else ("seconds" if self.seconds else "adaptive")

    def done(self, step_end: list[float], burst_start: bool = True, halfwidth: float | None = None) -> bool:
        """Whether the window stops after its last step (`burst_start`: that step started a burst, see
        `is_burst_start`; a worker-fed loader's precision is judged only there, as `halfwidth`: that of the window's
        whole cycles so far - `burst_bounds`, `cycle_batches`; inf: not known yet; None: from batches of `burst`
        steps)."""
        n, t = len(step_end), step_end[-1]
        if self.steps:
            return n >= self.steps
        if self.seconds:
            return t >= self.seconds
        if t >= self.max_seconds:
            return True
        if t < self.min_seconds or n < MIN_BATCHES or (self.burst > 1 and not burst_start):
            return False
        hw = halfwidth if halfwidth is not None else relative_halfwidth(step_end, burst=self.burst)
        return hw is not None and hw <= self.precision


def trace(step_end: list[float], points: int = 50) -> list[list[float]]:
    """[steps, seconds] at about `points` evenly spaced steps: the window's shape, kept in the record."""
    n = len(step_end)
    idx = sorted({max(1, round(n * k / points)) for k in range(1, points + 1)} if n else set())
    return [[i, round(step_end[i - 1], 5)] for i in idx]


def batch_durations(step_end: list[float], batches: int = BATCHES, burst: int = 1,
                    bounds: list[int] | None = None) -> list[float]:  # fmt: skip
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


def relative_halfwidth(step_end: list[float], batches: int = BATCHES, burst: int = 1,
                       bounds: list[int] | None = None) -> float | None:  # fmt: skip
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
    cycles = [b - a for a, b in zip(bounds, bounds[1:])]
    if len(cycles) < 3:
        return True
    mean = sum(cycles) / len(cycles)
    return math.sqrt(sum((c - mean) ** 2 for c in cycles) / (len(cycles) - 1)) <= CYCLE_CV * mean


def _cycles(bounds: list[int], first: int, last: int) -> list[int]:
    """The burst starts of the steps first+1..last (with `first` and `last`), re-indexed to them: `first` is -1."""
    return [j - first - 1 for j in sorted({first, last, *(j for j in bounds if first <= j <= last)})]


def _at_burst_start(rule: StopRule, waits: list[float], step_end: list[float], lead_wait: float):
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
    hw = relative_halfwidth(_rebased(step_end, first, last), bounds=_cycles(bounds, first, last))
    return True, math.inf if hw is None else hw, True


def _whole_bursts_cut(rule: StopRule, waits, step_end, lead_wait, agree_max, elapsed: float, end):
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
        return -1, n - 1, elapsed, None, {"steps": n, "cut_head_steps": 0, "cut_tail_steps": 0, "cut_s": 0.0,
                                          "delivery": delivery}  # fmt: skip
    cycles = _cycles(bounds or [], first, last)
    kept = elapsed if (first, last) == (-1, n - 1) else end(last) - end(first)
    return first, last, kept, cycles, {"steps": last - first, "cut_head_steps": first + 1,
                                       "cut_tail_steps": n - 1 - last, "cut_s": round(elapsed - kept, 4),
                                       "cycles": len(cycles) - 1, "delivery": delivery}  # fmt: skip


def _rebased(step_end: list[float], first: int, last: int) -> list[float]:
    """The step ends of steps first+1..last, from the end of step `first` (-1: the window's start)."""
    base = step_end[first] if first >= 0 else 0.0
    return [t - base for t in step_end[first + 1 : last + 1]]


def _finished(start, events: list, device_end: list[float]) -> None:
    """Append to `device_end` the device's end time (from `start`) of each step whose end event has completed, in
    order, without waiting for the others (`events`: the steps' (start, end) CUDA events)."""
    while len(device_end) < len(events) and events[len(device_end)][1].query():
        device_end.append(start.elapsed_time(events[len(device_end)][1]) / 1000.0)


@dataclass
class WindowResult:
    elapsed_s: float
    steps: int
    waits: list[float]  # host seconds blocked on the loader, per step
    computes: list  # per step: seconds (CPU) or a pair of CUDA events, resolved by `resolve`
    step_end: list[float]  # seconds from the window's start, host clock
    loss: object
    last_batch: object
    halfwidth: float | None
    converged: bool | None  # adaptive windows only
    extra: dict = field(default_factory=dict)


# The loader made a warm-up step wait (its queue was empty) when the wait took this share of the step and this long.
DRAIN_SHARE, DRAIN_MIN_S = 0.2, 0.002


def drained(wait_s: float, step_s: float) -> bool:
    """Whether a step's wait for its batch says the loader's start-up backlog is used up (see `warm_up`)."""
    return wait_s >= DRAIN_MIN_S and wait_s >= DRAIN_SHARE * step_s


def hold_collection() -> None:
    """Collect cyclic garbage once, freeze what survives out of later collections and stop collecting until the
    window ends (`timed_window` enables it again); nothing to do when already held. A cell calls it before its
    warm-up, so that the warm-up's steps rebuild the host's lead on the device after the collection's pause."""
    if gc.isenabled():
        gc.collect()
        gc.freeze()
        gc.disable()


def warm_up(step, batches, steps: int, sync, heartbeat, on_first_step=None, min_steps: int | None = None,
            agree_drained=None, waits: list | None = None) -> tuple[list[float], int | None]:  # fmt: skip
    """Run untimed steps (at least one); returns their host durations and the step after which the backlog was
    found used up (None: all `steps` ran).

    `steps` is the upper bound: the loader's prefetch backlog + 2, which a window must never drain. With `min_steps`
    the warm-up ends earlier, after the first step past `min_steps` on which the loader made the step wait (see
    `drained`): a batch that was not ready means nothing prepared ahead is left, and from then on batches arrive as
    fast as the loader makes them - its steady state. A worker-fed loader then starts the window at a burst's
    start. On a slow tier (an HDD) this saves most of the warm-up: the backlog would take minutes there.
    `agree_drained(bool) -> bool` makes every rank of a ddp cell end at the same step (all of them drained);
    `waits`, a list, gets each step's wait for its batch."""
    durations = []
    stopped = None
    for i in range(max(1, steps)):
        t = time.perf_counter()
        batch = next(batches)
        wait = time.perf_counter() - t
        if waits is not None:
            waits.append(wait)
        step(*batch)
        if i == 0:
            sync()  # the first step carries autotuning and lazy initialisation: keep it out of the next ones
            if on_first_step is not None:
                on_first_step()
        d = time.perf_counter() - t
        durations.append(d)
        heartbeat.beat(d)
        if min_steps is not None and i >= max(1, min_steps - 1) and i + 1 < steps:
            done = drained(wait, d)
            if agree_drained is not None:
                done = agree_drained(done)
            if done:
                stopped = i + 1
                break
    return durations, stopped


def timed_window(step, batches, rule: StopRule, sync, heartbeat, agree_max, cuda_timer, label: str,
                 samples_per_step: int, show_progress: bool, lead_wait: float = 0.0) -> WindowResult:  # fmt: skip
    """The measured loop. `agree_max(int) -> int` (the largest of every rank's value; ddp) makes every rank stop at
    the same step and keep the same whole bursts; `lead_wait`: the last warm-up step's wait for its batch."""
    waits: list[float] = []
    computes: list = []
    step_end: list[float] = []
    shown = 0.0
    loss = images_labels = None
    # No cyclic garbage collection inside the window (its pauses are noise, not the loader's cost). A cell collects
    # before its warm-up (`hold_collection`): run here, between the warm-up and the window, the collection stalled
    # the host for ~50 ms with nothing queued on the device, and the window's first steps waited for the host to
    # build its lead again (a synthetic amp window's first batch of ten: 0.674 s against nine of 0.619 s).
    # Collection resumes after the window.
    hold_collection()  # a no-op when the caller did so before the warm-up
    start = cuda_timer() if cuda_timer else None
    if start is not None:
        start.record()  # the device's clock starts where the window's first step is queued
    t0 = time.perf_counter()
    last = t0
    cycles_hw = None  # the precision of a worker-fed loader's whole cycles, at its last burst start
    bursts = None  # whether a worker-fed loader delivers in bursts, as judged at its last burst start
    waited = 0.0
    device_end: list[float] = []  # the device's step ends, from the window's start, of the steps it has finished
    while True:
        tw = time.perf_counter()
        images_labels = next(batches)
        tc = time.perf_counter()
        waits.append(tc - tw)
        if cuda_timer:
            ev0, ev1 = cuda_timer(), cuda_timer()
            ev0.record()
            loss = step(*images_labels)
            ev1.record()
            computes.append((ev0, ev1))
        else:
            loss = step(*images_labels)
            computes.append(time.perf_counter() - tc)
        now = time.perf_counter()
        step_end.append(now - t0)
        heartbeat.beat(now - last)
        last = now
        waited += waits[-1]
        at_start, hw, judged = _at_burst_start(rule, waits, step_end, lead_wait)
        cycles_hw = hw if hw is not None else cycles_hw
        bursts = judged if judged is not None else bursts
        # a loader delivering a batch a step - or a worker-fed one that, as far as its window tells, does not deliver
        # in bursts (before any whole bursts: two rounds of its workers' batches with little waiting) - is judged at
        # any step, on the device's clock where there is one
        stream = rule.burst <= 1 or bursts is False or (
            bursts is None and len(step_end) >= 2 * rule.burst and waited < BURST_WAIT_SHARE * step_end[-1])
        steady_hw = None
        if stream and rule.mode == "adaptive":
            if cuda_timer:
                _finished(start, computes, device_end)
                steady_hw = relative_halfwidth(device_end)
            else:
                steady_hw = relative_halfwidth(step_end)
            steady_hw = math.inf if steady_hw is None else steady_hw
        if show_progress and step_end[-1] - shown >= PROGRESS_S:
            shown = step_end[-1]
            # a worker-fed loader's: that of its whole cycles at the last burst start (the stop rule's)
            shown_hw = steady_hw if stream else cycles_hw
            known = f", known to +-{100 * shown_hw:.1f}%" if shown_hw is not None and math.isfinite(shown_hw) else ""
            print(f"  {label}: {len(step_end)} steps in {shown:.0f} s, {len(step_end) * samples_per_step / shown:.1f} "
                  f"samples/s{known} (host clock, device not synchronised)", file=sys.stderr, flush=True)  # fmt: skip
        if stream:
            at_start, hw = True, steady_hw
        if agree_max(int(rule.done(step_end, at_start, hw))):
            break
    sync()
    gc.enable()

    def end(j):  # seconds from the window's start to the end of step j: the device's clock on a GPU
        return 0.0 if j < 0 else start.elapsed_time(computes[j][1]) / 1000.0 if cuda_timer else step_end[j]

    elapsed = end(len(computes) - 1) if cuda_timer else time.perf_counter() - t0

    cut = _whole_bursts_cut(rule, waits, step_end, lead_wait, agree_max, elapsed, end)
    if cuda_timer:
        # the batch means from the device's clock too: the host's step ends run ahead of the device by the steps
        # it has queued, so its first batch would be short by them (a synthetic window's first of ten: 0.83 s
        # against nine of 1.00 s, an interval of +-4% where two processes agreed to 0.03%)
        step_end = [end(j) for j in range(len(computes))]
        computes = [a.elapsed_time(b) / 1000.0 for a, b in computes]
    extra, cycles = {}, None
    if cut is not None:
        first, last, elapsed, cycles, extra["whole_bursts"] = cut
        waits, computes = waits[first + 1 : last + 1], computes[first + 1 : last + 1]
        step_end = _rebased(step_end, first, last)
        if cycles:
            extra["bounds"] = cycles  # the burst starts of the steps kept: batch means over whole cycles
    streamed = cut is not None and extra["whole_bursts"]["delivery"] == "stream"
    extra["batch_unit"] = 1 if streamed else rule.burst  # steps a batch mean is a whole number of
    hw = relative_halfwidth(step_end, burst=extra["batch_unit"], bounds=cycles)
    converged = (hw is not None and hw <= rule.precision) if rule.mode == "adaptive" else None
    return WindowResult(elapsed, len(step_end), waits, computes, step_end, loss, images_labels, hw, converged, extra)
