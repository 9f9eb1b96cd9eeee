"""The host's FUSE mounts: whether an emulated tier can be mounted here, the mount table, and fusermount."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

from .fs import FSNAME, MFUSEPY_ERROR, SUBTYPE, mfusepy


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


def is_ours(entry: dict) -> bool:
    """Whether mount table entry `entry` is an emulated tier's."""
    return entry["source"] == FSNAME or entry["fstype"] == f"fuse.{SUBTYPE}"


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
