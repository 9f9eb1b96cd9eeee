"""The window on constructed step traces: a start-up backlog stays out of it, equal steps converge at the minimum,
a GPU's queue ahead of the host does not skew its batch means, and unequal cycles are weighted by their steps."""

from __future__ import annotations

import functools
import math
import operator
import time

import pytest
from conftest import BacklogLoader

from loaderbench.engine.process.batchmeans import cycle_batches, relative_halfwidth
from loaderbench.engine.process.window import StopRule, timed_window, warm_up
from loaderbench.engine.watchdog import Heartbeat


def _window(loader, rule, step, sync=lambda: None, cuda_timer=None, lead_wait=0.0):
    return timed_window(
        step, loader, rule, sync, Heartbeat(None), lambda v: v, cuda_timer, "w", 1, False, lead_wait=lead_wait
    )


def test_a_backlog_of_30_fast_steps_is_spent_before_the_window(simulated_clock):
    """30 batches made during setup, then one each 20 ms for a 2 ms step: the warm-up runs until a step waits (the
    31st), so the window sees the loader's rate - 1/22 ms - and none of the backlog."""
    step = lambda *b: time.sleep(0.002)
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


def test_equal_steps_converge_at_the_minimum(simulated_clock):
    rule = StopRule(max_seconds=5, min_seconds=0.5, precision=0.02)
    win = _window(BacklogLoader(10**6, 0.0), rule, lambda *b: time.sleep(0.01))
    assert win.converged and win.halfwidth < 0.02 and win.elapsed_s < rule.max_seconds  # stopped by its precision


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


def test_the_devices_clock_keeps_a_queue_ahead_of_the_host_out_of_the_batch_means(simulated_clock):
    """10 ms steps with 6 queued ahead: on the host's clock the first batch holds 6 steps it never waited for; on the
    device's clock every batch is the same and the window converges at its minimum."""
    rule = StopRule(max_seconds=3, min_seconds=0.5, precision=0.02)
    dev = _QueuedDevice(0.01, 6)
    win = _window(BacklogLoader(10**6, 0.0), rule, dev.launch, dev.sync, dev.event)
    assert win.converged and win.halfwidth < 0.01 and win.elapsed_s < rule.max_seconds
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
    even = [functools.reduce(operator.iadd, ([0.03] * n for n in [30, 34] * 4), [])[: i + 1] for i in range(256)]
    assert relative_halfwidth([sum(e) for e in even], bounds=bounds) == pytest.approx(0.0, abs=1e-9)


class _Stalls:
    """A worker-fed loader that delivers a batch a step, with a stall before the given batches (as 15 torchvision
    workers feeding an fp32 step on the H200: a 0.2 s stall every few seconds)."""

    def __init__(self, stall_s: float, at: set[int]):
        self.stall_s, self.at, self.given = stall_s, at, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.given += 1
        if self.given in self.at:
            time.sleep(self.stall_s)
        return (self.given,)


def test_a_worker_fed_loader_that_stalls_now_and_then_keeps_every_step(simulated_clock):
    """15 workers, 10 ms steps, 30 ms stalls at irregular steps (about 4% of the time): not bursts, so nothing is cut
    - a cut from the first stall to the last would drop most of the window - and the rate is that of every step."""
    step = lambda *b: time.sleep(0.01)
    stalls = {37, 52, 130, 141, 260}
    win = _window(_Stalls(0.03, stalls), StopRule(seconds=3.0, burst=15), step)
    cut = win.extra["whole_bursts"]
    assert cut["delivery"] == "stream" and cut["cut_head_steps"] == 0 and cut["cut_tail_steps"] == 0
    assert win.steps == len(win.step_end) == len(win.waits) and "bounds" not in win.extra
    assert win.steps / win.elapsed_s == pytest.approx(win.steps / (win.steps * 0.0101 + 0.03 * len(stalls)), rel=0.1)


def test_delivery_in_bursts_needs_long_waits_in_a_rhythm():
    """Regular bursts whose waits set the rate are bursts; rare stalls, or long waits at irregular steps, are not."""
    from loaderbench.engine.process.bursts import burst_bounds, delivers_in_bursts

    def trace(durations, waits):
        return waits, [sum(durations[: i + 1]) for i in range(len(durations))]

    regular = trace(([0.3] + [0.02] * 9) * 6, ([0.28] + [0.0] * 9) * 6)
    assert delivers_in_bursts(*regular, burst_bounds(*regular, 10))
    rare = trace(([0.05] + [0.02] * 39) * 4, ([0.03] + [0.0] * 39) * 4)  # 3.7% of the time in its waits
    assert not delivers_in_bursts(*rare, burst_bounds(*rare, 10))
    d, w = [0.02] * 120, [0.0] * 120
    for j in (10, 14, 70, 75, 119):  # long waits, but cycles of 4, 56, 5 and 44 steps
        d[j], w[j] = 0.3, 0.28
    assert not delivers_in_bursts(*trace(d, w), burst_bounds(*trace(d, w), 4))
    assert not delivers_in_bursts([0.0] * 5, [0.1, 0.2, 0.3, 0.4, 0.5], None)


def test_a_worker_fed_loader_faster_than_its_step_stops_at_the_minimum(simulated_clock):
    """15 workers always ahead of a 10 ms step (no step waits): its window is judged as a stream and stops at its
    minimum once converged, not at its maximum."""
    rule = StopRule(max_seconds=5, min_seconds=0.5, precision=0.02, burst=15)
    win = _window(BacklogLoader(10**6, 0.0), rule, lambda *b: time.sleep(0.01))
    assert win.converged and win.elapsed_s < rule.max_seconds and win.extra["whole_bursts"]["delivery"] == "stream"
