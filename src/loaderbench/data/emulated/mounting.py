"""Mounting an emulated tier: `mount()` runs the server (`python -m loaderbench.data.emulated serve ...`) as a child
process and records it in `<mountpoint>.owner.json` (`owner`); `EmulatedMount.unmount()` takes it down."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from loaderbench.core.devices import DeviceModel, EmulatedTierError, resolve_model
from loaderbench.core.util import atomic_write_json

from .fs import INSTALL_HINT
from .mounts import absolute_path, fuse_available, fusermount, is_ours, mount_entry
from .owner import cleanup_stale, owner_path, proc_start


class EmulatedMount:
    """A running emulated tier; `unmount()` (or leaving the `with` block) takes it down."""

    def __init__(
        self,
        backing: Path,
        mountpoint: Path,
        model: DeviceModel,
        proc: subprocess.Popen,
        stats_path: Path,
        own_stats: bool,
        log_path: Path,
        cleaned: str | None,
    ):
        self.backing, self.mountpoint, self.model = backing, mountpoint, model
        self.proc, self.stats_path, self.log_path = proc, stats_path, log_path
        self.server_pid = proc.pid
        self.owner_path = owner_path(mountpoint)
        self.cleaned = cleaned
        self.final_stats: dict | None = None
        self._own_stats = own_stats
        self._pid = os.getpid()
        self._done = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.unmount()

    @property
    def mounted(self) -> bool:
        return not self._done and self.proc.poll() is None and mount_entry(self.mountpoint) is not None

    def stats(self, timeout_s: float = 5.0) -> dict:
        """The server's counters now (asks it with SIGUSR1); after unmount, the final ones."""
        if self._done or self.proc.poll() is not None:
            return self.final_stats or _read_json(self.stats_path) or {}
        asked = time.time()
        os.kill(self.server_pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stats = _read_json(self.stats_path)
            if stats and stats.get("written_at", 0) >= asked:
                return stats
            time.sleep(0.02)
        raise EmulatedTierError(
            f"emulated tier at {self.mountpoint}: the server wrote no stats to {self.stats_path} within {timeout_s} s"
        )

    def temporary(self) -> list[Path]:
        """Files this mount made for itself and removes on unmount."""
        return [self.log_path, *([self.stats_path] if self._own_stats else [])]

    def unmount(self, timeout_s: float = 10.0) -> None:
        """Unmount, stop the server and remove the owner file; idempotent, safe in `finally` and signal handlers."""
        if self._done or os.getpid() != self._pid:  # a forked child (a loader worker) must not unmount its parent's
            return
        if self.proc.poll() is None and mount_entry(self.mountpoint) is not None:
            deadline = time.monotonic() + min(2.0, timeout_s)
            while not fusermount(self.mountpoint, lazy=False)[0] and time.monotonic() < deadline:
                time.sleep(0.1)  # busy: a reader may still be closing its file
        if mount_entry(self.mountpoint) is not None:
            fusermount(self.mountpoint, lazy=True)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if mount_entry(self.mountpoint) is not None:  # killed server: ENOTCONN mount left behind
            fusermount(self.mountpoint, lazy=True)
        self.owner_path.unlink(missing_ok=True)
        self.final_stats = _read_json(self.stats_path)
        for path in self.temporary():
            path.unlink(missing_ok=True)
        atexit.unregister(self.unmount)
        self._done = True


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _server_env() -> dict:
    """The environment for the server: this very loaderbench first on the import path."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])  # src/, above loaderbench/
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:].strip() or "(no output)"
    except OSError:
        return "(no output)"


def mount(
    backing: str | Path,
    mountpoint: str | Path,
    model: DeviceModel | str | dict,
    stats_path: str | Path | None = None,
    timeout_s: float = 15.0,
) -> EmulatedMount:
    """Mount `backing` read-only at `mountpoint`, throttled to `model`, served by a child process."""
    mp = absolute_path(mountpoint)
    reason = fuse_available()
    if reason:
        raise EmulatedTierError(f"cannot mount an emulated tier at {mp}: {reason}. {INSTALL_HINT}.")
    model = resolve_model(model)
    backing = Path(backing).resolve()
    if not backing.is_dir():
        raise EmulatedTierError(f"emulated tier at {mp}: backing directory {backing} does not exist")
    if mp == backing or backing in mp.parents or mp in backing.parents:
        raise EmulatedTierError(f"emulated tier: mountpoint {mp} and backing {backing} must not contain each other")
    cleaned = cleanup_stale(mp)
    if cleaned:
        print(f"emulated tier: {cleaned}", file=sys.stderr)
    if mp.exists() and not mp.is_dir():
        raise EmulatedTierError(f"emulated tier: mountpoint {mp} exists and is not a directory; pick another path")
    mp.mkdir(parents=True, exist_ok=True)
    own_stats = stats_path is None
    if own_stats:
        fd, name = tempfile.mkstemp(prefix="loaderbench-emulated-", suffix=".stats.json")
        os.close(fd)
        stats_path = Path(name)
    stats_path = Path(stats_path).resolve()
    proc, log_path = _start_server(backing, mp, model, stats_path)
    handle = EmulatedMount(backing, mp, model, proc, stats_path, own_stats, log_path, cleaned)
    atomic_write_json(handle.owner_path, _owner_record(handle))
    atexit.register(handle.unmount)
    try:
        _wait_mounted(handle, timeout_s)
    except EmulatedTierError as e:
        log = _tail(handle.log_path)
        handle.unmount(timeout_s=2)
        raise EmulatedTierError(f"{e}; server output:\n{log}") from None
    except BaseException:
        handle.unmount(timeout_s=2)
        raise
    return handle


def _start_server(backing: Path, mp: Path, model: DeviceModel, stats_path: Path) -> tuple[subprocess.Popen, Path]:
    """The server process serving `backing` at `mp` in its own session, and the log file its output goes to."""
    fd, log_name = tempfile.mkstemp(prefix="loaderbench-emulated-", suffix=".log")
    cmd = [
        sys.executable,
        "-m",
        "loaderbench.data.emulated",
        "serve",
        "--backing",
        str(backing),
        "--mountpoint",
        str(mp),
        "--model-json",
        json.dumps(model.to_dict()),
        "--stats",
        str(stats_path),
    ]
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_server_env(),
            start_new_session=True,
        )
    return proc, Path(log_name)


def _owner_record(handle: EmulatedMount) -> dict:
    """The owner file's content: who owns the mount and its server, what it serves, and the files it made."""
    return {
        "owner_pid": os.getpid(),
        "owner_start": proc_start(os.getpid()),
        "server_pid": handle.proc.pid,
        "server_start": proc_start(handle.proc.pid),
        "backing": str(handle.backing),
        "mountpoint": str(handle.mountpoint),
        "model": handle.model.to_dict(),
        "stats": str(handle.stats_path),
        "temporary": [str(p) for p in handle.temporary()],
        "started_at": time.time(),
    }


def _wait_mounted(handle: EmulatedMount, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle.proc.poll() is not None:
            raise EmulatedTierError(f"emulated tier server exited with status {handle.proc.returncode}")
        entry = mount_entry(handle.mountpoint)
        if entry is not None and is_ours(entry):
            try:
                os.listdir(handle.mountpoint)
                return
            except OSError:
                pass
        time.sleep(0.05)
    raise EmulatedTierError(f"emulated tier at {handle.mountpoint} did not appear within {timeout_s} s")
