"""The watched command run as it is: its own process group, the terminal's stdin, stdout and stderr (nothing
captured), SIGINT and SIGTERM forwarded to its group, the probe injected through PYTHONPATH and the tree sampled.

`seconds`: after that long the group gets SIGTERM, then SIGKILL after `grace_s`; the watch then exits EXIT_STOPPED.
A command killed by a signal exits 128 + its number, as a shell reports it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..runner import contention
from .probe import DIR_ENV
from .sample import Sampler, visible_gpus

INJECT_DIR = Path(__file__).resolve().parent / "inject"
EXIT_STOPPED = 124  # the watch stopped the command after --seconds (as timeout(1) does)
EXIT_NOT_FOUND = 127  # the command could not be started (as a shell reports it)
GRACE_S = 5.0
FORWARDED = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Run:
    """What the watch saw of a run: its command, exit status, whether it stopped it, its clock and samples."""

    command: list[str]
    returncode: int
    stopped: bool
    started_at: float
    ended_at: float
    timeline: dict
    probe_dir: Path
    error: str | None = None
    contention: dict | None = None  # runner.contention's samples: what else ran on the host meanwhile

    @property
    def exit_status(self) -> int:
        """The watch's own exit status: EXIT_STOPPED where it stopped the command, else the command's."""
        if self.stopped:
            return EXIT_STOPPED
        return 128 - self.returncode if self.returncode < 0 else self.returncode


def child_env(probe_dir: Path) -> dict:
    """The command's environment: the probe's folder first on PYTHONPATH and where it writes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR), *filter(None, [env.get("PYTHONPATH")])])
    env[DIR_ENV] = str(probe_dir)
    return env


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the command's group, SIGKILL to it after `grace_s` if the command is still there."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def run(command: list[str], out: Path, seconds: float | None = None, grace_s: float = GRACE_S) -> Run:
    """Run `command` under the watch, its probe files in `out`/probe; returns when it has ended (or was stopped)."""
    probe_dir = Path(out) / "probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    for old in probe_dir.glob("probe-*.log"):  # an earlier watch's, in the same --out
        old.unlink()
    started = time.time()
    try:
        proc = subprocess.Popen(command, env=child_env(probe_dir), process_group=0)
    except OSError as e:
        return Run(command, EXIT_NOT_FOUND, False, started, time.time(), {}, probe_dir, f"{type(e).__name__}: {e}")
    sampler = Sampler(proc.pid).start()
    others = contention.Sampler(visible_gpus()[0], root=proc.pid).start()
    previous = {sig: signal.signal(sig, lambda s, _f: _signal_group(proc.pid, s)) for sig in FORWARDED}
    stopped = False
    try:
        while True:
            try:
                proc.wait(timeout=None if seconds is None else max(0.0, started + seconds - time.time()))
                break
            except subprocess.TimeoutExpired:
                stopped = True
                _stop(proc, grace_s)
                break
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    ended = time.time()
    return Run(command, proc.returncode, stopped, started, ended, sampler.stop(), probe_dir, None, others.stop())
