"""The timed part of a cell: warm-up, then a window that stops once its steady-state rate is known.

Warm-up runs until the loader's start-up backlog is spent (at most its prefetch depth + 2 steps). The window's clock
is the device's on a GPU (CUDA events). The adaptive rule stops at the first step after `min_seconds` at which the 95%
interval of the window's batch means is within `precision`, or at `max_seconds`. A worker-fed loader that delivers
in bursts is judged on whole cycles of bursts and its window cut to whole bursts (`delivers_in_bursts`).
Details and the reasoning: docs/method.md, "The window", and docs/internals.md, "engine.window".
"""

from __future__ import annotations

import gc
import math
import sys
import time
from dataclasses import dataclass, field
from time import thread_time  # the main thread's CPU time: a clock of its own, beside the window's

from .batchmeans import MIN_BATCHES, relative_halfwidth
from .bursts import BURST_WAIT_SHARE, at_burst_start, drained, rebased, whole_bursts_cut

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
    host_steps: list[float]  # per step: host seconds from the batch in hand to the step function's return
    main_cpu_s: float | None  # the main thread's CPU seconds per step over the steps kept (time.thread_time)
    step_end: list[float]  # seconds from the window's start, host clock
    loss: object
    last_batch: object
    halfwidth: float | None
    converged: bool | None  # adaptive windows only
    extra: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)  # every step the window ran, for the cell's trace (`step_timings`)


def hold_collection() -> None:
    """Collect cyclic garbage once, freeze what survives out of later collections and stop collecting until the
    window ends (`timed_window` enables it again); nothing to do when already held. A cell calls it before its
    warm-up, so that the warm-up's steps rebuild the host's lead on the device after the collection's pause."""
    if gc.isenabled():
        gc.collect()
        gc.freeze()
        gc.disable()


def warm_up(
    step,
    batches,
    steps: int,
    sync,
    heartbeat,
    on_first_step=None,
    min_steps: int | None = None,
    agree_drained=None,
    waits: list | None = None,
    starts: list | None = None,
) -> tuple[list[float], int | None]:
    """Run untimed steps (at least one); returns their host durations and the step after which the backlog was
    found used up (None: all `steps` ran).

    `steps` is the upper bound: the loader's prefetch backlog + 2, which a window must never drain. With `min_steps`
    the warm-up ends earlier, after the first step past `min_steps` on which the loader made the step wait (see
    `drained`): a batch that was not ready means nothing prepared ahead is left, and from then on batches arrive as
    fast as the loader makes them - its steady state. A worker-fed loader then starts the window at a burst's
    start. On a slow tier (an HDD) this saves most of the warm-up: the backlog would take minutes there.
    `agree_drained(bool) -> bool` makes every rank of a ddp cell end at the same step (all of them drained);
    `waits`, a list, gets each step's wait for its batch; `starts`, a list, each step's start (perf_counter)."""
    durations = []
    stopped = None
    for i in range(max(1, steps)):
        t = time.perf_counter()
        batch = next(batches)
        wait = time.perf_counter() - t
        if waits is not None:
            waits.append(wait)
        if starts is not None:
            starts.append(t)
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


def timed_window(
    step,
    batches,
    rule: StopRule,
    sync,
    heartbeat,
    agree_max,
    cuda_timer,
    label: str,
    samples_per_step: int,
    show_progress: bool,
    lead_wait: float = 0.0,
) -> WindowResult:
    """The measured loop. `agree_max(int) -> int` (the largest of every rank's value; ddp) makes every rank stop at
    the same step and keep the same whole bursts; `lead_wait`: the last warm-up step's wait for its batch."""
    w = _Window(rule, cuda_timer, lead_wait)
    # No cyclic garbage collection inside the window (its pauses are noise, not the loader's cost). A cell collects
    # before its warm-up (`hold_collection`): run here, between the warm-up and the window, the collection stalls
    # the host with nothing queued on the device, and the window's first steps wait for the host to build its lead
    # again. Collection resumes after the window.
    hold_collection()  # a no-op when the caller did so before the warm-up
    w.begin()
    shown = 0.0
    last = w.t0
    while True:
        w.step(step, batches)
        now = time.perf_counter()
        heartbeat.beat(now - last)
        last = now
        at_start, hw, stream = w.judge()
        if show_progress and w.step_end[-1] - shown >= PROGRESS_S:
            shown = w.step_end[-1]
            _progress(label, w, shown, samples_per_step, hw if stream else w.cycles_hw)
        if agree_max(int(rule.done(w.step_end, at_start, hw))):
            break
    sync()
    gc.enable()
    return w.result(agree_max)


class _Window:
    """A window being timed: each step's wait, compute and end, and how well its rate is known so far."""

    def __init__(self, rule: StopRule, cuda_timer, lead_wait: float):
        self.rule, self.cuda_timer, self.lead_wait = rule, cuda_timer, lead_wait
        self.waits: list[float] = []
        self.starts: list[float] = []  # each step's start on the host's clock (perf_counter), for the trace
        self.computes: list = []
        self.host_steps: list[float] = []
        self.cpu_end: list[float] = []  # the main thread's CPU time (time.thread_time) at each step's end
        self.cpu0 = 0.0  # ... and at the window's start
        self.step_end: list[float] = []
        self.loss = self.images_labels = None
        self.cycles_hw = None  # the precision of a worker-fed loader's whole cycles, at its last burst start
        self.bursts = None  # whether a worker-fed loader delivers in bursts, as judged at its last burst start
        self.waited = 0.0
        self.device_end: list[float] = []  # the device's step ends, from the window's start, of the finished steps
        self.start = None  # the device's clock: a CUDA event recorded where the window starts (`begin`)
        self.t0 = 0.0  # the host's clock at the window's start (`begin`)
        self.t0_epoch = 0.0  # the same instant in epoch seconds: the trace's link to the record's marks

    def begin(self) -> None:
        self.start = self.cuda_timer() if self.cuda_timer else None
        if self.start is not None:
            self.start.record()  # the device's clock starts where the window's first step is queued
        self.t0 = time.perf_counter()
        self.t0_epoch = time.time()
        self.cpu0 = thread_time()

    def step(self, step, batches) -> None:
        """One step: its wait for the batch, its compute (CUDA events on a GPU), its host time (the step function's
        call, no synchronisation added: on the CPU its compute), its end on the host's clock and the main thread's
        CPU time at its end."""
        tw = time.perf_counter()
        self.images_labels = next(batches)
        tc = time.perf_counter()
        self.waits.append(tc - tw)
        if self.cuda_timer:
            ev0, ev1 = self.cuda_timer(), self.cuda_timer()
            ev0.record()
            self.loss = step(*self.images_labels)
            self.host_steps.append(time.perf_counter() - tc)
            ev1.record()
            self.computes.append((ev0, ev1))
        else:
            self.loss = step(*self.images_labels)
            self.host_steps.append(time.perf_counter() - tc)
            self.computes.append(self.host_steps[-1])
        self.step_end.append(time.perf_counter() - self.t0)
        self.cpu_end.append(thread_time())
        self.starts.append(tw)  # after the clocks are read: outside the step's wait and compute
        self.waited += self.waits[-1]

    def judge(self) -> tuple[bool, float | None, bool]:
        """(whether the last step is one to judge the precision at, the precision there, whether the loader streams)."""
        rule, step_end = self.rule, self.step_end
        at_start, hw, judged = at_burst_start(rule, self.waits, step_end, self.lead_wait)
        self.cycles_hw = hw if hw is not None else self.cycles_hw
        self.bursts = judged if judged is not None else self.bursts
        # a loader delivering a batch a step - or a worker-fed one that, as far as its window tells, does not deliver
        # in bursts (before any whole bursts: two rounds of its workers' batches with little waiting) - is judged at
        # any step, on the device's clock where there is one
        stream = (
            rule.burst <= 1
            or self.bursts is False
            or (
                self.bursts is None
                and len(step_end) >= 2 * rule.burst
                and self.waited < BURST_WAIT_SHARE * step_end[-1]
            )
        )
        if not stream:
            return at_start, hw, False
        steady_hw = None
        if rule.mode == "adaptive":
            if self.cuda_timer:
                _finished(self.start, self.computes, self.device_end)
                steady_hw = relative_halfwidth(self.device_end)
            else:
                steady_hw = relative_halfwidth(step_end)
            steady_hw = math.inf if steady_hw is None else steady_hw
        return True, steady_hw, True

    def end(self, j: int) -> float:
        """Seconds from the window's start to the end of step j: the device's clock on a GPU."""
        if j < 0:
            return 0.0
        return self.start.elapsed_time(self.computes[j][1]) / 1000.0 if self.cuda_timer else self.step_end[j]

    def result(self, agree_max) -> WindowResult:
        """The window as measured: cut to whole bursts for a worker-fed loader that delivers in them, its batch means
        and interval from the device's clock on a GPU."""
        rule, waits, computes, step_end = self.rule, self.waits, self.computes, self.step_end
        elapsed = self.end(len(computes) - 1) if self.cuda_timer else time.perf_counter() - self.t0
        cut = whole_bursts_cut(rule, waits, step_end, self.lead_wait, agree_max, elapsed, self.end)
        if self.cuda_timer:
            # the batch means from the device's clock too: the host's step ends run ahead of the device by the steps
            # it has queued, so its first batch would be short by them
            step_end = [self.end(j) for j in range(len(computes))]
            computes = [a.elapsed_time(b) / 1000.0 for a, b in computes]
        timings = self.step_timings(cut, step_end if self.cuda_timer else None, computes)
        extra, cycles = {}, None
        host_steps, kept = self.host_steps, (-1, len(computes) - 1)  # kept: the steps after the first to the last
        if cut is not None:
            first, last, elapsed, cycles, extra["whole_bursts"] = cut
            waits, computes = waits[first + 1 : last + 1], computes[first + 1 : last + 1]
            host_steps, kept = host_steps[first + 1 : last + 1], (first, last)
            step_end = rebased(step_end, first, last)
            if cycles:
                extra["bounds"] = cycles  # the burst starts of the steps kept: batch means over whole cycles
        streamed = cut is not None and extra["whole_bursts"]["delivery"] == "stream"
        extra["batch_unit"] = 1 if streamed else rule.burst  # steps a batch mean is a whole number of
        hw = relative_halfwidth(step_end, burst=extra["batch_unit"], bounds=cycles)
        converged = (hw is not None and hw <= rule.precision) if rule.mode == "adaptive" else None
        return WindowResult(
            elapsed,
            len(step_end),
            waits,
            computes,
            host_steps,
            self.main_cpu_s(*kept),
            step_end,
            self.loss,
            self.images_labels,
            hw,
            converged,
            extra,
            timings,
        )

    def main_cpu_s(self, first: int, last: int) -> float | None:
        """The main thread's CPU seconds per step over steps first+1..last (first -1: from the window's start)."""
        if last <= first:
            return None
        start = self.cpu0 if first < 0 else self.cpu_end[first]
        return (self.cpu_end[last] - start) / (last - first)

    def step_timings(self, cut, device_end: list[float] | None, computes: list[float]) -> dict:
        """Every step the window ran, in seconds from its start (`t0` on the host's clock, `t0_epoch`): host start, wait and end, and on a GPU
        the device's end of each step and its time there (`device_end`, `computes`: read from the steps' CUDA events
        once, for the record too; the device's clock is 0 where the window's start event ran, about the host's 0),
        and which steps the window kept (`kept`: [first, end); a worker-fed loader's window is cut to whole bursts)."""
        n = len(self.step_end)
        first, last = (cut[0] + 1, cut[1] + 1) if cut is not None else (0, n)
        out = {
            "t0_epoch": self.t0_epoch,
            "t0": self.t0,
            "start": [t - self.t0 for t in self.starts],
            "wait": list(self.waits),
            "end": list(self.step_end),
            "kept": [first, last],
        }
        if device_end is not None:
            out["device_start"] = [e - c for e, c in zip(device_end, computes, strict=True)]
            out["device_end"] = list(device_end)
        return out


def _progress(label: str, w: _Window, shown: float, samples_per_step: int, hw: float | None) -> None:
    """A progress line every PROGRESS_S of the window (a worker-fed loader's precision: its whole cycles')."""
    known = f", known to +-{100 * hw:.1f}%" if hw is not None and math.isfinite(hw) else ""
    print(
        f"  {label}: {len(w.step_end)} steps in {shown:.0f} s, {len(w.step_end) * samples_per_step / shown:.1f} "
        f"samples/s{known} (host clock, device not synchronised)",
        file=sys.stderr,
        flush=True,
    )
