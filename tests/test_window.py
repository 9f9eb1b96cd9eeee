"""The window on constructed step traces: a start-up backlog stays out of it, equal steps converge at the minimum,
a GPU's queue ahead of the host does not skew its batch means, and unequal cycles are weighted by their steps."""

from __future__ import annotations

import math
import time

import pytest

from conftest import BacklogLoader
from loaderbench.watchdog import Heartbeat
from loaderbench.window import StopRule, cycle_batches, relative_halfwidth, timed_window, warm_up


def _window(loader, rule, step, sync=lambda: None, cuda_timer=None, lead_wait=0.0):
    return timed_window(step, loader, rule, sync, Heartbeat(None), lambda v: v, cuda_timer, "w", 1, False,
                        lead_wait=lead_wait)  # fmt: skip


def test_a_backlog_of_30_fast_steps_is_spent_before_the_window():
    """30 batches made during setup, then one each 20 ms for a 2 ms step: the warm-up runs until a step waits (the
    31st), so the window sees the loader's rate - 1/22 ms - and none of the backlog."""
    step = lambda *b: time.sleep(0.002)  # noqa: E731
    loader = BacklogLoader(30, 0.02)
    waits = []
    _, drained_at = warm_up(step, loader, 32, lambda: None, Heartbeat(None), min_steps=2, waits=waits)
    assert drained_at == 31
    win = _window(loader, StopRule(max_seconds=1.0, min_seconds=0.4), step, lead_wait=waits[-1])
    assert win.steps / win.elapsed_s == pytest.approx(1 / 0.022, rel=0.1)
    assert min(win.waits) > 0.015  # every window step waited for the loader: no backlog inside
    # the same loader timed without the warm-up reads the backlog as speed
    early = _window(BacklogLoader(30, 0.02), StopRule(seconds=0.5), step)
    assert early.steps / early.elapsed_s > 1.5 / 0.022


def test_equal_steps_converge_at_the_minimum():
    rule = StopRule(max_seconds=5, min_seconds=0.5, precision=0.02)
    win = _window(BacklogLoader(10**6, 0.0), rule, lambda *b: time.sleep(0.01))
    assert win.converged and win.halfwidth < 0.02 and win.elapsed_s < 0.8


class _QueuedDevice:
    """A stand-in for a GPU (CUDA events cannot exist on a CPU-only machine): each step runs `step_s` on the device,
    the host queues up to `depth` steps ahead of it and blocks beyond that, as CUDA's launch queue does."""

    def __init__(self, step_s: float, depth: int):
        self.step_s, self.depth, self.finish = step_s, depth, []

    def launch(self, *batch):
        now = time.perf_counter()
        pending = [t for t in self.finish if t > now]
        if len(pending) >= self.depth:
            time.sleep(pending[-self.depth] - now)
        self.finish.append(max(time.perf_counter(), self.finish[-1] if self.finish else 0.0) + self.step_s)

    def sync(self):
        if self.finish:
            time.sleep(max(0.0, self.finish[-1] - time.perf_counter()))

    def event(self):
        return _Event(self)


class _Event:
    def __init__(self, device: _QueuedDevice):
        self.device, self.t = device, None

    def record(self):
        self.t = max(time.perf_counter(), self.device.finish[-1] if self.device.finish else 0.0)

    def query(self):
        return time.perf_counter() >= self.t

    def elapsed_time(self, other) -> float:
        return 1000.0 * (other.t - self.t)


def test_the_devices_clock_keeps_a_queue_ahead_of_the_host_out_of_the_batch_means():
    """10 ms steps with 6 queued ahead: on the host's clock the first batch holds 6 steps it never waited for; on the
    device's clock every batch is the same and the window converges at its minimum."""
    rule = StopRule(max_seconds=3, min_seconds=0.5, precision=0.02)
    dev = _QueuedDevice(0.01, 6)
    win = _window(BacklogLoader(10**6, 0.0), rule, dev.launch, dev.sync, dev.event)
    assert win.converged and win.halfwidth < 0.01 and win.elapsed_s < 0.8
    assert win.steps / win.elapsed_s == pytest.approx(100, rel=0.05)
    dev = _QueuedDevice(0.01, 6)
    host = _window(BacklogLoader(10**6, 0.0), rule, dev.launch, dev.sync)  # the host's clock alone
    assert not host.converged or host.elapsed_s > 1.5


def test_cycles_of_unequal_steps_are_weighted_by_them():
    """Cycles of 30 and 34 steps (each opened by a 0.5 s wait): the interval is that of total time over total steps
    (the ratio estimator), each cycle's residual from it weighted by the cycle's steps."""
    durations, waits = [], []
    for n in [30, 34] * 4:
        durations += [0.5] + [0.03] * (n - 1)
        waits += [0.47] + [0.0] * (n - 1)
    step_end = [sum(durations[: i + 1]) for i in range(len(durations))]
    bounds = [i for i, w in enumerate(waits) if w > 0]
    pairs = cycle_batches(step_end, bounds)
    k, steps = len(pairs), sum(n for _, n in pairs)
    mean = sum(d for d, _ in pairs) / steps
    by_hand = {6: 2.447}[k - 1] * math.sqrt(sum((d - mean * n) ** 2 for d, n in pairs) / (k - 1) * k) / steps / mean
    assert relative_halfwidth(step_end, bounds=bounds) == pytest.approx(by_hand)
    # cycles whose time follows their steps know the rate exactly, however unequal they are
    even = [sum(([0.03] * n for n in [30, 34] * 4), [])[: i + 1] for i in range(256)]
    assert relative_halfwidth([sum(e) for e in even], bounds=bounds) == pytest.approx(0.0, abs=1e-9)
