"""Mounting an emulated tier: `mount()` runs the server (`python -m loaderbench.data.emulated serve ...`) as a child
process and records it in `<mountpoint>.owner.json`; `EmulatedMount.unmount()` takes it down, and `cleanup_stale()`
removes what a crashed owner left behind (a dead or hung mount, its server, its owner file)."""

from __future__ import annotations

import atexit
import ctypes
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

from loaderbench.core.devices import DeviceModel, EmulatedTierError, resolve_model
from loaderbench.core.util import atomic_write_json

from .fs import FSNAME, INSTALL_HINT, MFUSEPY_ERROR, SUBTYPE, mfusepy


def fuse_available() -> str | None:
    """None when an emulated tier can be mounted here, else why not (with the fix)."""
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "neither fusermount3 nor fusermount is on PATH (Debian/Ubuntu: apt install fuse3)"
    if mfusepy is None:
        return f"the mfusepy binding is not usable: {MFUSEPY_ERROR} (pip install mfusepy; libfuse: apt install fuse3)"
    if not os.path.exists("/dev/fuse"):
        return (
            "/dev/fuse does not exist (load the fuse kernel module, or start the container with "
            "--device /dev/fuse; packages: apt install fuse3)"
        )
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return f"/dev/fuse cannot be opened ({e.strerror}); a container needs --device /dev/fuse (and fuse3 installed)"
    return None


def absolute_path(path: str | Path) -> Path:
    """Absolute path with the parent's symlinks resolved, without touching the (maybe dead) mount point itself."""
    p = Path(os.path.abspath(path))
    return Path(os.path.realpath(p.parent)) / p.name


def owner_path(mountpoint: str | Path) -> Path:
    mp = absolute_path(mountpoint)
    return mp.with_name(mp.name + ".owner.json")


def _unescape(field: str) -> str:
    """Undo the octal escapes of /proc/self/mountinfo (space, tab, newline, backslash)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_entry(mountpoint: str | Path) -> dict | None:
    """The topmost mount at `mountpoint` ({"fstype", "source"}) from /proc/self/mountinfo, else None."""
    target = str(absolute_path(mountpoint))
    entry = None
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if _unescape(left.split()[4]) == target:
                fstype, source = right.split()[:2]
                entry = {"fstype": fstype, "source": _unescape(source)}
    except FileNotFoundError:
        for line in Path("/proc/mounts").read_text().splitlines():
            source, mnt, fstype = line.split()[:3]
            if _unescape(mnt) == target:
                entry = {"fstype": fstype, "source": _unescape(source)}
    return entry


def _is_ours(entry: dict) -> bool:
    return entry["source"] == FSNAME or entry["fstype"] == f"fuse.{SUBTYPE}"


def _proc_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), None when it is gone or a zombie."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _alive(pid: int | None, start: int | None = None) -> bool:
    if not pid:
        return False
    now_start = _proc_start(pid)
    return now_start is not None and (start is None or now_start == start)


def _is_server(pid: int, mountpoint: Path) -> bool:
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"loaderbench.data.emulated" in argv and str(mountpoint).encode() in argv


def _kill(pid: int, start: int | None, wait_s: float = 3.0) -> bool:
    """SIGTERM, then SIGKILL after `wait_s`, a process that may not be our child; True if it was running."""
    if not _alive(pid, start):
        return False
    for sig, wait in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid, start):
                return True
            time.sleep(0.02)
    return True


def fusermount(mountpoint: Path, lazy: bool) -> tuple[bool, str]:
    """Unmount a FUSE mount (`-u`, or lazily `-uz`); (done, errors)."""
    errors = []
    for tool in ("fusermount3", "fusermount"):
        exe = shutil.which(tool)
        if not exe:
            continue
        try:
            r = subprocess.run(
                [exe, "-uz" if lazy else "-u", str(mountpoint)], capture_output=True, text=True, timeout=15, check=False
            )
        except subprocess.TimeoutExpired:
            errors.append(f"{tool} timed out")
            continue
        if r.returncode == 0:
            return True, ""
        errors.append(r.stderr.strip() or f"{tool} exited {r.returncode}")
    if lazy and os.geteuid() == 0:  # root without fusermount on PATH: umount2(MNT_DETACH)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.umount2(str(mountpoint).encode(), 2) == 0:
            return True, ""
        errors.append(f"umount2: {os.strerror(ctypes.get_errno())}")
    return False, "; ".join(errors) or "no fusermount3/fusermount on PATH"


def _stat_errno(path: Path, timeout_s: float = 2.0) -> int | None:
    """errno of statfs(path) (ETIMEDOUT when a hung server does not answer), None when it succeeds.

    statfs, not stat: the kernel answers stat from its attribute cache for a while after the server died.
    """
    result: list[int | None] = [errno.ETIMEDOUT]

    def run():
        try:
            os.statvfs(path)
            result[0] = None
        except OSError as e:
            result[0] = e.errno

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    return result[0]


def _read_owner(mountpoint: Path) -> dict | None:
    try:
        return json.loads(owner_path(mountpoint).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: treated like a dead owner


def cleanup_stale(mountpoint: str | Path) -> str | None:
    """Remove an emulated mount whose owner died (or whose server is gone); a one-line account, or None."""
    mp = absolute_path(mountpoint)
    entry = mount_entry(mp)
    owner = _read_owner(mp)
    if entry is not None and not _is_ours(entry):
        raise EmulatedTierError(
            f"{mp} has a {entry['fstype']} filesystem ({entry['source']}) mounted that is not an emulated tier; "
            "unmount it or pick another mountpoint"
        )
    if entry is None and owner is None:
        return None
    owner = owner or {}
    owner_alive = _alive(owner.get("owner_pid"), owner.get("owner_start"))
    server_pid = owner.get("server_pid")
    server_alive = _alive(server_pid, owner.get("server_start")) and _is_server(server_pid, mp)
    if owner_alive and server_alive:
        broken = entry is not None and _stat_errno(mp) in (errno.ENOTCONN, errno.ECONNABORTED)
        if not broken:
            who = "this process" if owner["owner_pid"] == os.getpid() else f"running pid {owner['owner_pid']}"
            raise EmulatedTierError(
                f"{mp} is {'mounted' if entry else 'being mounted'} by {who} (server pid {server_pid}); "
                "unmount it there first or pick another mountpoint"
            )
    reason = (
        "no owner file"
        if not owner
        else "owner pid {} is gone".format(owner.get("owner_pid"))
        if not owner_alive
        else f"server pid {server_pid} is gone or not answering"
    )
    done = []
    if entry is not None:
        ok, err = fusermount(mp, lazy=True)
        done.append("lazily unmounted" if ok else f"lazy unmount failed ({err})")
    if server_alive and _kill(server_pid, owner.get("server_start")):
        done.append(f"stopped server pid {server_pid}")
    if owner_path(mp).exists():
        for leftover in owner.get("temporary", []):  # the dead owner's temporary stats and server log
            Path(leftover).unlink(missing_ok=True)
        owner_path(mp).unlink(missing_ok=True)
        done.append("removed the owner file")
    what = "stale emulated mount" if entry is not None else "leftover emulated-tier owner file"
    return f"cleaned {what} at {mp} ({reason}): {', '.join(done) or 'nothing left to do'}"


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
        "owner_start": _proc_start(os.getpid()),
        "server_pid": handle.proc.pid,
        "server_start": _proc_start(handle.proc.pid),
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
        if entry is not None and _is_ours(entry):
            try:
                os.listdir(handle.mountpoint)
                return
            except OSError:
                pass
        time.sleep(0.05)
    raise EmulatedTierError(f"emulated tier at {handle.mountpoint} did not appear within {timeout_s} s")
