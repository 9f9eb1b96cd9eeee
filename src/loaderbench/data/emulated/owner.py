"""Who owns an emulated mount (`<mountpoint>.owner.json`), and removing what a crashed owner left behind (a dead or
hung mount, its server, its owner file)."""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
from pathlib import Path

from loaderbench.core.devices import EmulatedTierError

from .mounts import absolute_path, fusermount, is_ours, mount_entry


def owner_path(mountpoint: str | Path) -> Path:
    """The owner file of the mount at `mountpoint`, beside it."""
    mp = absolute_path(mountpoint)
    return mp.with_name(mp.name + ".owner.json")


def proc_start(pid: int) -> int | None:
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
    now_start = proc_start(pid)
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
    if entry is not None and not is_ours(entry):
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
