"""The stall watchdog: each measuring process beats a heartbeat after every training step; the cell runner reads it
and ends a cell whose steps stopped, with every rank's Python stacks and where it stood.

The heartbeat is a 40-byte file per rank, written in place through mmap (a few hundred nanoseconds a step): the step
count, the phase, the CLOCK_MONOTONIC time of the last beat (system-wide, so comparable across processes) and the
median step time so far. The runner, not the stalled process, judges: a process stuck while holding the GIL, or
blocked in a collective, cannot judge itself. Stacks come from `faulthandler` registered on SIGUSR1, which dumps at
C level even when the GIL is held.
"""

from __future__ import annotations

import faulthandler
import mmap
import os
import signal
import statistics
import struct
import time
from dataclasses import dataclass
from pathlib import Path

PHASES = ("startup", "setup", "warmup", "window", "teardown")
_FORMAT = "<qqddd"  # steps, phase index, last beat (monotonic s), median step (s; 0 = none yet), written at (monotonic)
_SIZE = struct.calcsize(_FORMAT)
STACK_SIGNAL = signal.SIGUSR1


def heartbeat_path(partial: Path, rank: int) -> Path:
    return partial.with_name(f"{partial.name}.hb{rank}")


def stacks_path(partial: Path, rank: int) -> Path:
    return partial.with_name(f"{partial.name}.stacks{rank}")


class Heartbeat:
    """The measuring process's side: `phase(name)` when a phase starts, `beat(step_s)` after each step."""

    def __init__(self, path: Path | None, stacks: Path | None = None):
        self.steps = 0
        self._phase = 0
        self._durations: list[float] = []
        self._median = 0.0
        self._map = None
        self._stacks = None
        if path is not None:
            with open(path, "w+b") as f:
                now = time.monotonic()  # born with a time: a file of zeros would read as a beat at the boot
                f.write(struct.pack(_FORMAT, 0, 0, now, 0.0, now).ljust(_SIZE, b"\0"))
                f.flush()
                self._map = mmap.mmap(f.fileno(), _SIZE)
        if stacks is not None:
            self._stacks = open(stacks, "w")  # noqa: SIM115 - kept open: faulthandler writes to its fd from a signal handler
            faulthandler.register(STACK_SIGNAL, file=self._stacks, all_threads=True)
        self._write()

    def phase(self, name: str) -> None:
        self._phase = PHASES.index(name)
        self._write()

    def where(self) -> str:
        """Where this process stands, for a failure's reason: its phase and, in the warm-up or the window, the step
        it was running (the one after the last beat)."""
        phase = PHASES[self._phase]
        if phase in ("warmup", "window"):
            return f"in the {'warm-up' if phase == 'warmup' else phase}, at the cell's step {self.steps + 1}"
        return f"in its {phase}"

    def beat(self, step_s: float) -> None:
        self.steps += 1
        self._durations.append(step_s)
        n = len(self._durations)
        if n <= 8 or n % 16 == 0:  # the median moves slowly; recomputing it every step would cost more than a beat
            self._median = statistics.median(self._durations[-512:])
        self._write()

    def _write(self) -> None:
        if self._map is not None:
            now = time.monotonic()
            struct.pack_into(_FORMAT, self._map, 0, self.steps, self._phase, now, self._median, now)


@dataclass(frozen=True)
class Beat:
    steps: int
    phase: str
    last: float  # monotonic time of the last beat
    median_step_s: float | None


def read(path: Path) -> Beat | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if len(data) < _SIZE:
        return None
    steps, phase, last, median, _ = struct.unpack_from(_FORMAT, data)
    if not 0 <= phase < len(PHASES) or last <= 0:  # not written yet: no beat, not one at the boot
        return None
    return Beat(steps, PHASES[phase], last, median or None)


@dataclass(frozen=True)
class StallRule:
    """No step for max(floor_s, factor x the median step so far) is a stall. Before the first step the floor is
    stretched (`first_step_factor`: cuDNN autotuning), for a compiled model by `compile_s` more, in setup too
    (`setup_factor`: loader builds)."""

    floor_s: float = 60.0
    factor: float = 50.0
    first_step_factor: float = 3.0
    setup_factor: float = 5.0
    compile_s: float = 0.0

    def limit(self, beat: Beat) -> float:
        if beat.phase in ("startup", "setup"):
            return self.floor_s * self.setup_factor
        if beat.steps == 0 or beat.median_step_s is None:
            return self.floor_s * self.first_step_factor + self.compile_s
        return max(self.floor_s, self.factor * beat.median_step_s)

    def stalled(self, beat: Beat, now: float | None = None) -> float | None:
        """Seconds since the last beat when that is past the limit, else None."""
        idle = (now if now is not None else time.monotonic()) - beat.last
        return idle if idle > self.limit(beat) else None


def describe(beat: Beat, idle_s: float, rank: int | None = None) -> str:
    who = f"rank {rank} " if rank is not None else ""
    median = f", median step {beat.median_step_s * 1000:.1f} ms" if beat.median_step_s else ""
    return f"{who}stalled in {beat.phase} after {beat.steps} steps (no step for {idle_s:.0f} s{median})"


def request_stacks(pids: list[int], paths: list[Path], wait_s: float = 2.0) -> dict[str, str]:
    """Ask each process for its Python stacks (SIGUSR1 -> faulthandler) and collect what they wrote."""
    for pid in pids:
        try:
            os.kill(pid, STACK_SIGNAL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    sizes = None
    while time.monotonic() < deadline:  # until every file has something and stopped growing
        time.sleep(0.2)
        now = [p.stat().st_size if p.exists() else 0 for p in paths]
        if all(now) and now == sizes:
            break
        sizes = now
    return {str(rank): p.read_text(errors="replace") for rank, p in enumerate(paths) if p.exists() and p.stat().st_size}
