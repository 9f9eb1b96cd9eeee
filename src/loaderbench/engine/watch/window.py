"""The probe's lines read back, per process, and each process's window: warm-up skipped, rate and data-wait share with
their 95% intervals, from the same batch means as a cell's window (`process.batchmeans`).

The window follows the iterable that delivered most of a process's batches (the training loader: one signature of
kind, workers, dataset and root, over all its epochs); another iterable's batches (a validation loader) are left out,
and so is a step its batches interrupt (from the training batch before them to the one after: an epoch's evaluation).
Warm-up: the first WARMUP_SHARE of those batches, at least WARMUP_MIN of them, are left out (worker start-up,
first-step initialisation, the prefetch backlog). The window's steps are the rest; a step's period is the time from
one batch's delivery to the next's, its wait the time blocked in `__next__`; data_wait_fraction = their sums' ratio,
and the rate is the steps' samples over the sum of their periods.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ..process.batchmeans import BATCHES, MIN_BATCHES, T_975, relative_halfwidth

WARMUP_MIN = 3
WARMUP_SHARE = 0.1
WARMUP_RULE = (
    f"each process's first {WARMUP_SHARE:.0%} of its batches, at least {WARMUP_MIN}, are warm-up and left out of its"
    " window"
)


@dataclass
class Process:
    """One process's probe file: who it is, its iterators, its batches (perf seconds) and the probe's own cost."""

    pid: int
    rank: int | None
    offset: float  # epoch seconds minus perf_counter seconds in that process
    argv: list = field(default_factory=list)
    iterators: list[dict] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # each batch's iterable: its iterator line's signature
    probe_s: float = 0.0
    probe_batches: int = 0
    autocast: str | None = None
    model: str | None = None  # the torchvision builder it called first


def read_probe(path: Path) -> Process | None:
    """A probe file's content; None for a file without its header (cut before its first write)."""
    proc, source = None, ""
    for line in Path(path).read_text().splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "h":
            head = json.loads(rest)
            rank = head.get("rank")
            proc = Process(head["pid"], int(rank) if rank not in (None, "") else None, head["epoch_minus_perf"])
            proc.argv = head.get("argv") or []
        elif proc is None:
            continue
        elif tag == "b":
            parts = rest.split()
            if len(parts) == 3:
                proc.starts.append(float(parts[0]))
                proc.ends.append(float(parts[1]))
                proc.sizes.append(int(parts[2]))
                proc.sources.append(source)
        elif tag == "i":
            proc.iterators.append(json.loads(rest))
            source = json.dumps(proc.iterators[-1], sort_keys=True)
        elif tag == "o":
            cost, n = rest.split()
            proc.probe_s, proc.probe_batches = float(cost), int(n)
        elif tag == "a":
            proc.autocast = rest.strip() or "autocast"
        elif tag == "m":
            proc.model = rest.strip() or None
    return proc


def read_probes(folder: Path) -> list[Process]:
    """Every process that wrote a probe file, by rank then pid."""
    procs = [p for p in (read_probe(f) for f in sorted(Path(folder).glob("probe-*.log"))) if p is not None]
    return sorted(procs, key=lambda p: (p.rank if p.rank is not None else -1, p.pid))


@dataclass
class Window:
    """One process's window: its steps after warm-up, in epoch seconds where said."""

    proc: Process
    warmup: int
    start_epoch: float
    end_epoch: float
    steps: int
    samples: int
    waits: list[float]
    periods: list[float]
    rate_halfwidth: float | None  # relative, of samples/s
    wait_halfwidth: float | None  # absolute, of the share
    other_batches: int = 0  # batches of other iterables (a validation loader), left out with the steps they cut
    first: int = 0  # the index of the window's first batch among all the process's batches

    @property
    def time_s(self) -> float:
        """The steps' time: the sum of their periods (a step another iterable interrupted left out)."""
        return sum(self.periods)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.time_s

    @property
    def data_wait_fraction(self) -> float:
        return sum(self.waits) / sum(self.periods)

    @property
    def probe_share(self) -> float | None:
        """The probe's own bookkeeping as a share of the mean step period."""
        if not self.proc.probe_batches:
            return None
        return (self.proc.probe_s / self.proc.probe_batches) / (self.time_s / self.steps)


def window(proc: Process) -> Window | None:
    """The window of a process with batches (None: too few to leave one step after warm-up)."""
    sources = proc.sources if len(proc.sources) == len(proc.ends) else [""] * len(proc.ends)
    main = max(set(sources), key=sources.count) if sources else ""
    mine = [i for i, src in enumerate(sources) if src == main]
    n = len(mine)
    warmup = max(WARMUP_MIN, math.ceil(WARMUP_SHARE * n))
    if n - warmup < 1:
        return None
    steps = [(a, b) for a, b in zip(mine[warmup - 1 :], mine[warmup:], strict=False) if b == a + 1]
    if not steps:
        return None
    waits = [proc.ends[b] - proc.starts[b] for _, b in steps]
    periods = [proc.ends[b] - proc.ends[a] for a, b in steps]
    step_end = list(itertools.accumulate(periods))
    if step_end[-1] <= 0:
        return None
    return Window(
        proc,
        warmup,
        proc.ends[mine[warmup - 1]] + proc.offset,
        proc.ends[mine[-1]] + proc.offset,
        len(steps),
        sum(proc.sizes[b] for _, b in steps),
        waits,
        periods,
        relative_halfwidth(step_end),
        share_halfwidth(waits, periods),
        len(sources) - n,
        mine[warmup],
    )


def share_halfwidth(waits: list[float], periods: list[float], batches: int = BATCHES) -> float | None:
    """95% half-width of the wait share from batch means: up to `batches` runs of consecutive steps, each its own
    share (as `batchmeans.batch_durations` splits a window); None with fewer than MIN_BATCHES of them."""
    k = min(batches, len(periods))
    if k < MIN_BATCHES:
        return None
    b = len(periods) // k
    shares = [sum(waits[j * b : (j + 1) * b]) / sum(periods[j * b : (j + 1) * b]) for j in range(k)]
    return T_975[k - 1] * statistics.stdev(shares) / math.sqrt(k)


def steps_trace(proc: Process, w: Window | None) -> dict:
    """The process's batches as the cells' trace takes them (`runner.trace.build`'s `steps`): each step from its
    call of `__next__` to the next call, its wait the time blocked in it, the rest the script's own step."""
    n = len(proc.starts)
    warm = w.first if w else n
    base = proc.starts[0] if n else 0.0

    def part(lo: int, hi: int) -> dict:
        idx = range(lo, min(hi, n - 1))
        return {
            "start": [proc.starts[i] - base for i in idx],
            "wait": [proc.ends[i] - proc.starts[i] for i in idx],
            "end": [proc.starts[i + 1] - base for i in idx],
        }

    return {"t0_epoch": base + proc.offset, "device": "cpu", "warmup": part(0, warm), "window": part(warm, n)}
