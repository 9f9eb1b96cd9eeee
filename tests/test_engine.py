"""The measuring engine's parts on their own: the adaptive window's stop rule, the stall rule and heartbeat, thread
placement on a real process tree, DataParallel's persistent replica threads, and where a cell's wall time went
(the engine report: test_enginereport.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time

import pytest
import torch

from loaderbench.engine import placement
from loaderbench.engine.process.batchmeans import relative_halfwidth
from loaderbench.engine.process.bursts import burst_bounds, is_burst_start
from loaderbench.engine.process.parallel import ReplicaThreads
from loaderbench.engine.process.window import StopRule, timed_window, warm_up
from loaderbench.engine.runner.record import phases
from loaderbench.engine.watchdog import Beat, Heartbeat, StallRule, describe, read
from tests.conftest import BacklogLoader


def ends(durations):
    out, t = [], 0.0
    for d in durations:
        t += d
        out.append(t)
    return out


def test_steady_steps_are_known_to_the_precision_and_stop_the_adaptive_window():
    rng = random.Random(1)
    steady = ends([0.1 * (1 + rng.uniform(-0.05, 0.05)) for _ in range(40)])  # 4 s of +-5% noise per step
    hw = relative_halfwidth(steady)
    assert hw is not None and hw < 0.02
    rule = StopRule(max_seconds=30, min_seconds=3, precision=0.02)
    assert rule.mode == "adaptive" and rule.done(steady)
    assert not rule.done(steady[:25])  # 2.5 s: under min_seconds


def test_bursty_or_drifting_steps_keep_the_window_open_until_its_maximum():
    bursty = ends(([0.01] * 7 + [1.0]) * 5)  # a worker-fed loader: 7 batches ready, then a long wait
    hw = relative_halfwidth(bursty)
    assert hw is not None and hw > 0.02
    rule = StopRule(max_seconds=30, min_seconds=3, precision=0.02)
    assert not rule.done(bursty)
    slowing = ends([0.1 + 0.01 * i for i in range(60)])
    assert not rule.done(slowing) and slowing[-1] < 30
    assert StopRule(max_seconds=5, min_seconds=3).done(slowing)  # past the maximum: stop, not converged
    assert relative_halfwidth(ends([0.1] * 4)) is None  # fewer than 5 steps: no 5 batch means


def test_batches_of_whole_bursts_make_a_worker_fed_loader_converge():
    """31 workers each delivering a batch: bursts of fast steps, then a worker's batch time (as torchvision on an
    H200). Batch means over whole bursts know the rate; batches cut across bursts swing with the phase."""
    bursty = ends(([0.05] * 6 + [2.0]) * 12)  # 84 steps, bursts of 7
    assert relative_halfwidth(bursty) > 0.1  # 10 batches of 8 steps: across bursts
    assert relative_halfwidth(bursty, burst=7) == pytest.approx(0.0, abs=1e-9)  # 6 batches of 2 whole bursts
    rule = StopRule(max_seconds=60, min_seconds=3, precision=0.02, burst=7)
    assert rule.done(bursty) and not StopRule(max_seconds=60, min_seconds=3, precision=0.02).done(bursty)
    assert relative_halfwidth(bursty[:34], burst=7) is None  # 4 whole bursts: fewer than 5 batches of one


def test_few_slow_steps_are_known_from_batches_of_one_step():
    """A loader on an HDD: about a second a step. Five to nine steps make batches of one step each, so the window
    stops once they agree, rather than running 20 steps (two per batch mean) at a second each."""
    rng = random.Random(2)
    slow = ends([1.1 * (1 + rng.uniform(-0.01, 0.01)) for _ in range(6)])
    rule = StopRule(max_seconds=60, min_seconds=3, precision=0.02)
    assert not rule.done(slow[:4])  # 4 steps: too few batch means
    assert rule.done(slow) and relative_halfwidth(slow) < 0.02
    erratic = ends([1.1, 0.4, 1.9, 0.8, 1.5, 0.6])
    assert not rule.done(erratic)


def test_fixed_windows_stop_at_their_steps_or_seconds():
    assert StopRule(steps=3).done([0.1, 0.2, 0.3]) and not StopRule(steps=3).done([0.1, 0.2])
    assert StopRule(seconds=1.0).done([0.5, 1.01]) and not StopRule(seconds=1.0).done([0.5, 0.9])


def test_the_stall_limit_follows_the_median_step_with_a_floor_and_a_longer_first_step():
    rule = StallRule(floor_s=60, factor=50, first_step_factor=3, setup_factor=5)
    assert rule.limit(Beat(0, "setup", 0, None)) == 300
    assert rule.limit(Beat(0, "warmup", 0, None)) == 180
    assert rule.limit(Beat(10, "window", 0, 0.03)) == 60  # 50 x 30 ms is under the floor
    assert rule.limit(Beat(10, "window", 0, 4.0)) == 200
    assert rule.stalled(Beat(10, "window", 100.0, 4.0), now=250.0) is None
    assert rule.stalled(Beat(10, "window", 100.0, 4.0), now=301.0) == pytest.approx(201.0)
    assert describe(Beat(12, "window", 0, 0.5), 61, rank=1) == (
        "rank 1 stalled in window after 12 steps (no step for 61 s, median step 500.0 ms)"
    )


def test_a_compiled_models_first_step_may_take_its_compilation_as_the_cells_timeout_allows():
    """torch.compile on 2 slow cores took over 180 s before its first step, which the watchdog called a stall."""
    from dataclasses import replace

    from loaderbench.core.cells import cell_spec
    from loaderbench.core.config import COMPILE_ALLOWANCE_S, validate_config
    from loaderbench.engine.runner.runcell import _stall_rule

    cfg = validate_config({"loaders": ["synthetic"], "batch_sizes": [4]})
    eager = cell_spec(cfg, f"synthetic_{cfg['tiers'][0]}_g1_b4_fp32_dp_r0")
    rule = StallRule(floor_s=60, first_step_factor=3)
    compiled = _stall_rule(rule, replace(eager, compile=True))
    assert compiled.limit(Beat(0, "warmup", 0, None)) == 180 + COMPILE_ALLOWANCE_S
    assert compiled.limit(Beat(10, "window", 0, 4.0)) == rule.limit(Beat(10, "window", 0, 4.0)) == 200
    assert _stall_rule(rule, eager) == rule


def test_the_heartbeat_file_carries_steps_phase_time_and_median(tmp_path):
    hb = Heartbeat(tmp_path / "hb")
    hb.phase("warmup")
    for d in (0.2, 0.1, 0.3):
        hb.beat(d)
    beat = read(tmp_path / "hb")
    assert beat.steps == 3 and beat.phase == "warmup" and beat.median_step_s == pytest.approx(0.2)
    assert abs(time.monotonic() - beat.last) < 5
    assert read(tmp_path / "missing") is None


def test_a_heartbeat_file_not_yet_written_is_no_beat_and_a_new_one_is_born_with_its_time(tmp_path):
    """A reader between the file's creation and its first write saw steps 0 at time 0 (CLOCK_MONOTONIC's zero, the
    boot), and a slow start read as "no step for <uptime> s": a stalled cell. Zeros are no beat; a new file holds
    its creation time."""
    from loaderbench.engine.watchdog import _SIZE

    (tmp_path / "zeros").write_bytes(b"\0" * _SIZE)
    assert read(tmp_path / "zeros") is None
    Heartbeat(tmp_path / "hb")
    beat = read(tmp_path / "hb")
    assert beat.steps == 0 and beat.phase == "startup" and abs(time.monotonic() - beat.last) < 5


def test_the_plan_reserves_the_highest_cores_for_launching_and_leaves_at_least_two():
    assert placement.plan({0, 1, 2, 3}, 1) == placement.Placement((3,), (0, 1, 2))
    assert placement.plan(set(range(16)), 2) == placement.Placement((15, 14), tuple(range(14)))
    assert placement.plan({0, 1}, 1) is None  # a 2-core machine: pinning would starve the loader
    assert placement.wanted("auto", "cuda") and not placement.wanted("auto", "cpu") and placement.wanted("pin", "cpu")


def test_a_cells_placement_has_one_launch_core_per_gpu_wherever_it_is_asked_for():
    """One plan for the runner, the ranks and the bare loop: a pinned 2-rank ddp cell gets a launch core per rank
    on a CPU device too (each rank indexes the plan by its rank)."""
    cpus = set(range(8))
    assert placement.for_cell("pin", 2, "cpu", cpus) == placement.Placement((7, 6), tuple(range(6)))
    assert placement.for_cell("auto", 2, "cuda", cpus).launch == (7, 6)
    assert placement.for_cell("auto", 2, "cpu", cpus) is None and placement.for_cell("off", 1, "cuda", cpus) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to place threads apart")
def test_pinning_a_real_process_tree_puts_every_thread_but_the_launcher_on_the_other_cores():
    cpus = sorted(os.sched_getaffinity(0))
    launch, others = cpus[-1], set(cpus[:-1])
    # a process with a second thread and a child process (as a cell has DataLoader workers)
    code = (
        "import subprocess, sys, threading, time; threading.Thread(target=time.sleep, args=(30,), daemon=True)"
        ".start(); subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while time.time() < deadline and (len(placement.threads_of(proc.pid)) < 2 or not _children(proc.pid)):
            time.sleep(0.1)
        main_tid = proc.pid  # a process's first thread has the process id
        placed = placement.pin_process_tree(proc.pid, others, {main_tid: launch})
        assert placed >= 3
        got = placement.thread_cpus(proc.pid)
        assert got[main_tid] == [launch]
        assert all(set(c) == others for t, c in got.items() if t != main_tid)
        child = _children(proc.pid)[0]
        assert all(set(c) == others for c in placement.thread_cpus(child).values())
    finally:
        for pid in [*_children(proc.pid), proc.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()


def _children(pid):
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def test_replica_threads_live_across_calls_and_carry_grad_mode_and_autocast():
    """The fix for DataParallel's 100x slowdown: replica i runs on the same thread every step (cuDNN's plans are
    cached per thread). Checked on the CPU with CPU replicas; the speed itself is measured on GPUs."""
    seen = {}  # (call, replica) -> (thread, grad mode, autocast on, autocast dtype)

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen[(len(seen) // 3, int(x[0].item()) - 1)] = (
                threading.get_native_id(),
                torch.is_grad_enabled(),
                torch.is_autocast_enabled("cuda"),
                torch.get_autocast_dtype("cuda"),
            )
            return x * 2

    pool = ReplicaThreads(3)
    mods = [Probe(), Probe(), Probe()]
    x = [(torch.ones(2),), (torch.ones(2) * 2,), (torch.ones(2) * 3,)]
    out1 = pool.apply(mods, x, [{}, {}, {}], [None, None, None])
    with torch.no_grad():
        pool.apply(mods, x, [{}, {}, {}], [None, None, None])
    assert [o.tolist() for o in out1] == [[2, 2], [4, 4], [6, 6]]
    first, second = [seen[(0, i)] for i in range(3)], [seen[(1, i)] for i in range(3)]
    assert first[0][0] == threading.get_native_id()  # replica 0 on the caller's thread
    assert [s[0] for s in first] == [s[0] for s in second]  # the same threads on the next step
    assert len({s[0] for s in first}) == 3 and pool.native_ids == [s[0] for s in first[1:]]
    assert all(s[1] for s in first) and not any(s[1] for s in second)  # grad mode follows the caller


def test_phases_split_the_wall_time_at_the_measuring_process_marks():
    marks = {"setup_start": 12.0, "warmup_start": 14.0, "window_start": 17.0, "window_end": 27.0}
    p = phases(started=10.0, spawned=10.5, marks=marks, exited=27.3, ended=27.5)
    assert p == pytest.approx(
        {
            "wall": 17.5,
            "before_process": 0.5,
            "startup": 1.5,
            "setup": 2.0,
            "warmup": 3.0,
            "window": 10.0,
            "teardown": 0.3,
            "close": 0.2,
            "overhead": 7.5,
        }
    )
    assert phases(10.0, None, None, None, 11.0) == {"wall": 1.0}


class _Beat:
    def beat(self, d):
        pass


def test_the_warm_up_ends_once_the_loader_made_a_step_wait(simulated_clock):
    steps = []
    step = lambda i: (steps.append(i), time.sleep(0.002))
    # 5 batches prepared during start-up, then 30 ms each for a 2 ms step: the 6th step waits, the backlog is gone
    durations, drained_at = warm_up(step, BacklogLoader(5, 0.03), 40, lambda: None, _Beat(), min_steps=2)
    assert drained_at == 6 and len(durations) == 6 and steps == list(range(1, 7))
    # a loader that keeps up never makes a step wait: every warm-up step of the backlog bound runs
    durations, drained_at = warm_up(step, BacklogLoader(100, 0.0), 12, lambda: None, _Beat(), min_steps=2)
    assert drained_at is None and len(durations) == 12
    # never fewer than min_steps, and every rank must agree (ddp): one that is not drained keeps all going
    durations, drained_at = warm_up(step, BacklogLoader(0, 0.01), 40, lambda: None, _Beat(), min_steps=4)
    assert drained_at == 4
    votes = iter([False, False, True])
    durations, drained_at = warm_up(
        step,
        BacklogLoader(0, 0.01),
        40,
        lambda: None,
        _Beat(),
        min_steps=2,
        agree_drained=lambda done: done and next(votes),
    )
    assert drained_at == 4


class _Bursts:
    """A worker-fed loader after its warm-up: the rest of a burst (`burst` - 1 batches) at once, then each burst's
    first batch after `gap_s` (its workers' batch time), the rest of it at once; `ready` more batches at once first
    (a round made before the warm-up ended)."""

    def __init__(self, burst: int, gap_s: float, ready: int = 0):
        self.burst, self.gap_s, self.ready, self.given = burst, gap_s, ready, 0

    def __iter__(self):
        return self

    def __next__(self):
        self.given += 1
        if self.given > self.ready and (self.given - self.ready) % self.burst == 0:
            time.sleep(self.gap_s)
        return (self.given,)


def _window(loader, rule, step_s, lead_wait=0.0):
    return timed_window(
        lambda *b: time.sleep(step_s),
        loader,
        rule,
        lambda: None,
        _Beat(),
        lambda v: v,
        None,
        "w",
        1,
        False,
        lead_wait=lead_wait,
    )


def test_a_worker_fed_loaders_window_is_cut_to_whole_bursts(simulated_clock):
    """Bursts of 5 batches: 60 ms steps, a 200 ms wait before each burst's first step - 10 steps/s over whole bursts.
    A 1.2 s maximum falls inside the third burst, whose fast steps without their wait would read 11.3 steps/s."""
    rule = StopRule(max_seconds=1.2, min_seconds=0.1, precision=0.02, burst=5)
    win = _window(_Bursts(5, 0.2), rule, 0.06, lead_wait=0.2)  # the warm-up ended on a burst's first step
    cut = win.extra["whole_bursts"]
    assert cut["steps"] == win.steps == 10 and cut["cut_head_steps"] == 0 and cut["cut_tail_steps"] == 4
    assert len(win.step_end) == len(win.waits) == 10 and win.steps / win.elapsed_s == pytest.approx(10.0, rel=0.04)
    assert cut["cut_s"] == pytest.approx(0.24, abs=0.04)
    # a warm-up that ended on a short wait with a round of 5 batches made: 9 steps at once, then the next burst's
    # first (10 steps in 0.8 s, not 1.0) - cut, with the window's steps up to and with that burst start
    win = _window(_Bursts(5, 0.2, ready=5), StopRule(max_seconds=1.6, min_seconds=0.1, burst=5), 0.06, lead_wait=0.01)
    cut = win.extra["whole_bursts"]
    assert cut["cut_head_steps"] == 10 and win.steps == 10 and cut["cut_tail_steps"] == 0  # 2 bursts, 1.8 s
    assert win.steps / win.elapsed_s == pytest.approx(10.0, rel=0.04)
    # a loader that never makes a step wait keeps its window; one delivering a batch a step is not cut either
    win = _window(BacklogLoader(10**6, 0.0), StopRule(max_seconds=0.3, burst=5), 0.01)
    assert win.extra["whole_bursts"]["cut_tail_steps"] == 0 and win.steps == len(win.step_end)
    win = _window(_Bursts(5, 0.2), StopRule(max_seconds=0.6), 0.01)
    assert "whole_bursts" not in win.extra


def test_a_worker_fed_loaders_precision_is_judged_at_a_bursts_first_step_only():
    steady = ends([0.1] * 40)
    rule = StopRule(max_seconds=30, min_seconds=3, precision=0.02, burst=5)
    assert rule.done(steady, burst_start=True) and not rule.done(steady, burst_start=False)
    assert StopRule(max_seconds=30, min_seconds=3, precision=0.02).done(steady, burst_start=False)  # burst 1
    assert StopRule(max_seconds=3, burst=5).done(steady, burst_start=False)  # the maximum stops it anywhere
    # a burst's first step: a long wait; inside a burst, or a late worker's shorter wait: not
    waits, step_end = [0.0, 0.0, 0.5, 0.0, 0.1], ends([0.05, 0.05, 0.55, 0.05, 0.15])
    assert [is_burst_start(waits, step_end, j, 0.5) for j in range(5)] == [False, False, True, False, False]
    # bursts of 4 (a 0.5 s wait before each), a late worker's 0.1 s wait inside the second
    waits = [0, 0, 0, 0.5, 0, 0.1, 0, 0.5, 0, 0, 0, 0.5]
    step_end = ends([0.01 + w for w in waits])
    assert burst_bounds(waits, step_end, 4) == [3, 7, 11]
    assert burst_bounds(waits, step_end, 4, lead_wait=0.5) == [-1, 3, 7, 11]  # the window's start is one
    assert burst_bounds(waits, step_end, 9) is None  # 8 steps from the first start to the last: less than a burst
    assert burst_bounds(waits, step_end, 9, lead_wait=0.5) == [-1, 3, 7, 11]
    assert burst_bounds(waits, step_end, 1, lead_wait=0.5) is None
    # one stall far longer than every gap between bursts does not hide them (judged against the gaps' median)
    stalled = waits[:7] + [3.0] + waits[8:]
    assert burst_bounds(stalled, ends([0.01 + w for w in stalled]), 4) == [3, 7, 11]


def test_a_worker_fed_loader_stops_once_its_whole_bursts_know_the_rate(simulated_clock):
    """Steady bursts of 5 (0.3 s each): the precision is reached over 5 whole bursts, judged at a burst's first
    step, also after a start on a round of batches made before the window (cut, not judged)."""
    rule = StopRule(max_seconds=10, min_seconds=0.5, precision=0.02, burst=5)
    for ready, lead in ((0, 0.2), (5, 0.01)):
        win = _window(_Bursts(5, 0.2, ready=ready), rule, 0.02, lead_wait=lead)
        assert win.converged and win.steps == 25 and win.elapsed_s == pytest.approx(1.5, rel=0.05)
        assert win.steps / win.elapsed_s == pytest.approx(5 / 0.3, rel=0.04)


def test_batch_means_of_a_worker_fed_loader_follow_its_cycles_not_its_worker_count():
    """15 workers with 4 batches each ahead delivered about 32 batches a cycle on the 1-GPU H200 host: batches of 15
    steps cut across its cycles (+-35%); batches of whole cycles, between its burst starts, know the rate."""
    from loaderbench.engine.process.batchmeans import cycle_batches

    durations = ([0.5] + [0.03] * 31) * 8  # 8 cycles of 32 steps, each opened by a 0.5 s wait
    step_end = ends(durations)
    waits = [0.47 if d == 0.5 else 0.0 for d in durations]
    assert relative_halfwidth(step_end, burst=15) > 0.1
    bounds = burst_bounds(waits, step_end, 15)
    assert bounds == list(range(0, 256, 32)) and len(cycle_batches(step_end, bounds)) == 7
    assert relative_halfwidth(step_end, bounds=bounds) == pytest.approx(0.0, abs=1e-9)
    assert cycle_batches(step_end, bounds[:5]) == []  # 4 cycles: fewer than 5 batch means


class _SlowImages(torch.utils.data.Dataset):
    """A worker's batch takes `per_item_s` an image (sleeping, as a decode would take the time): a real DataLoader
    over it delivers in bursts of its workers' batches."""

    def __init__(self, per_item_s: float):
        self.per_item_s = per_item_s

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(self.per_item_s)
        return torch.zeros(1)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 4 sleeping workers on 2 cores: on purpose
def test_a_real_dataloaders_window_holds_whole_cycles():
    """4 workers, 8 images a batch at 40 ms each: every worker delivers a batch each 0.32 s, 12.5 batches/s over
    whole cycles, each opened by a wait that dwarfs a loaded machine's jitter. The window - after a warm-up that
    drains the backlog, as a cell's - is cut to its burst starts: it spans whole cycles, never a backlog's or a
    burst's fast steps without their wait (which would read faster than the workers deliver)."""
    loader = iter(torch.utils.data.DataLoader(_SlowImages(0.04), batch_size=8, num_workers=4, prefetch_factor=2))
    step = lambda *b: time.sleep(0.002)
    waits = []
    warm_up(step, loader, 12, lambda: None, _Beat(), min_steps=2, waits=waits)
    win = _window(loader, StopRule(max_seconds=3.5, min_seconds=0.5, precision=0.01, burst=4), 0.002, waits[-1])
    cut, bounds = win.extra["whole_bursts"], win.extra["bounds"]
    # from a burst start to a burst start (its workers may drift apart into smaller bursts: those count too)
    assert cut["cycles"] >= 5 and win.steps == cut["steps"] and bounds[0] == -1 and bounds[-1] == win.steps - 1
    # the window's time ends with its last kept step: exactly where bursts were cut off, a moment after it where the
    # window was kept whole (its clock is read once the loop has stopped)
    assert win.elapsed_s == pytest.approx(win.step_end[-1], abs=0.05) and len(win.waits) == win.steps
    # sleeping workers are only ever late on a loaded machine: their rate caps the window's, whatever the load
    assert win.steps / win.elapsed_s <= 4 / 0.32 * 1.05
