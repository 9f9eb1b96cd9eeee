"""The window's stop rule and convergence flag at their boundaries, and its batch means, on step traces whose answer
is known: the window runs on a made-up clock, so that each step takes exactly what the trace says."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from loaderbench.engine.process import window
from loaderbench.engine.process.batchmeans import MIN_BATCHES, T_975, batch_durations, relative_halfwidth
from loaderbench.engine.process.window import StopRule, timed_window
from loaderbench.engine.watchdog import Heartbeat


class _Clock:
    """The window's clock, moved only by the steps it times."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return 1.7e9 + self.now


def _timed(monkeypatch, durations: list[float], rule: StopRule) -> window.WindowResult:
    """The window over steps of `durations` seconds, each batch ready when asked for."""
    clock = _Clock()
    monkeypatch.setattr(window, "time", clock)
    steps = iter(durations)

    def step(*batch):
        clock.now += next(steps)

    return timed_window(
        step, itertools.repeat((None,)), rule, lambda: None, Heartbeat(None), lambda v: v, None, "w", 1, False
    )


# six slow steps (an HDD's): six batch means of one step, 2 s on average, known to +-28.7%
SLOW = [1.5, 2.5] * 3
SLOW_HW = T_975[5] * math.sqrt(6 * 0.5**2 / 5 / 6) / 2.0


def test_six_steps_make_six_batch_means_and_their_interval():
    """The interval of 6 batch means: Student's t with 5 degrees of freedom over their standard error."""
    ends = list(itertools.accumulate(SLOW))
    assert batch_durations(ends) == pytest.approx(SLOW)
    assert relative_halfwidth(ends) == pytest.approx(SLOW_HW) and SLOW_HW == pytest.approx(0.2874, abs=1e-4)


def test_batch_means_need_five_batches_and_span_whole_bursts():
    steps = [1.0, 1.2, 0.9, 1.1, 0.8, 1.0, 1.1, 0.9, 1.2, 1.0, 0.9, 1.1]
    ends = list(itertools.accumulate(steps))
    assert MIN_BATCHES == 5
    assert batch_durations(ends[:5]) == pytest.approx(steps[:5])
    assert batch_durations(ends[:4]) == [] and relative_halfwidth(ends[:4]) is None
    # 12 steps delivered two at a time: 6 batches of one burst each, not 10 of one step
    assert batch_durations(ends, burst=2) == pytest.approx([2.2, 2.0, 1.8, 2.0, 2.2, 2.0])
    # 20 steps: 10 batches of 2
    twenty = list(itertools.accumulate(steps + steps[:8]))
    assert batch_durations(twenty) == pytest.approx([2.2, 2.0, 1.8, 2.0, 2.2, 2.0, 2.2, 2.0, 1.8, 2.0])


@pytest.mark.parametrize("scale, done", [(1.0, True), (0.999, False), (0.6, False)])
def test_an_adaptive_window_stops_once_its_interval_is_within_its_precision(scale, done):
    ends = list(itertools.accumulate(SLOW))
    h = relative_halfwidth(ends)
    assert StopRule(max_seconds=100.0, min_seconds=1.0, precision=scale * h).done(ends) is done


def test_an_adaptive_window_runs_at_least_its_minimum_and_five_batches():
    ends = list(itertools.accumulate(SLOW))
    assert not StopRule(max_seconds=100.0, min_seconds=12.5, precision=1.0).done(ends)
    assert not StopRule(max_seconds=100.0, min_seconds=1.0, precision=1.0).done(ends[:4])
    assert StopRule(max_seconds=12.0, min_seconds=1.0, precision=0.01).done(ends)  # at its maximum


def test_the_window_stops_at_the_first_step_whose_interval_is_within_precision(monkeypatch):
    """Steps of 6 to 14 ms at random: the window stops at the first step past its minimum with the 95% interval of
    its batch means within +-2%, and is converged there; the minimum does not decide it."""
    rng = random.Random(1)
    durations = [rng.uniform(0.006, 0.014) for _ in range(20000)]
    rule = StopRule(max_seconds=60.0, min_seconds=0.2, precision=0.02)
    ends = list(itertools.accumulate(durations))
    past_min = next(n for n in range(1, len(ends)) if ends[n - 1] >= rule.min_seconds)
    assert relative_halfwidth(ends[:past_min]) > rule.precision
    expected = next(
        n for n in range(past_min, len(ends)) if (relative_halfwidth(ends[:n]) or math.inf) <= rule.precision
    )
    win = _timed(monkeypatch, durations, rule)
    assert win.steps == expected and win.elapsed_s == pytest.approx(ends[expected - 1])
    assert win.converged is True and win.halfwidth == pytest.approx(relative_halfwidth(ends[:expected]))


@pytest.mark.parametrize("scale, converged", [(1.0, True), (0.999, False), (0.07, False)])
def test_a_window_stopped_at_its_maximum_is_converged_only_within_its_precision(monkeypatch, scale, converged):
    """Six slow steps known to +-28.7% when the window reaches its maximum: converged only where that is within its
    precision (a window with any interval is not converged for having one)."""
    win = _timed(monkeypatch, SLOW, StopRule(max_seconds=11.0, min_seconds=3.0, precision=scale * SLOW_HW))
    assert win.steps == 6 and win.halfwidth == pytest.approx(SLOW_HW)
    assert win.converged is converged
