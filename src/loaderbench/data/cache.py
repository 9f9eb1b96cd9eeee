"""Page cache control: make files cold before a measurement, and measure how much of them is cached.

`evict()` fadvises each file DONTNEED, and drops the whole page cache (root and a writable
/proc/sys/vm/drop_caches) only when that left pages resident. `resident_fraction()` counts cached pages with mmap + mincore. That count
is for real filesystems: a FUSE mount with direct_io (the emulated tier) never caches file data, so there it
is always near zero and says nothing about the device behind it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Iterable
from pathlib import Path

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
PAGE = os.sysconf("SC_PAGE_SIZE")
_LSB = bytes(i & 1 for i in range(256))  # mincore: bit 0 = resident, the other bits are reserved

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _sample(paths: list, sample: int | None) -> list:
    """At most `sample` paths, evenly spread and always the same ones for the same input."""
    if sample is None or len(paths) <= sample:
        return paths
    if sample < 1:
        raise ValueError(f"sample must be >= 1 or None, got {sample}")
    return [paths[i * len(paths) // sample] for i in range(sample)]


def _resident_pages(path: str) -> tuple[int, int]:
    """(resident, total) pages of one file; a file that cannot be mapped counts as not resident."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        pages = (size + PAGE - 1) // PAGE
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
        if addr in (None, _MAP_FAILED):
            return 0, pages
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}", path)
            return bytes(vec).translate(_LSB).count(1), pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def resident_fraction(paths: Iterable[str | os.PathLike], sample: int | None = None) -> float:
    """Fraction of the files' pages now in the page cache (0.0 for no pages); `sample` caps the files looked at."""
    chosen = _sample([os.fspath(p) for p in paths], sample)
    resident = total = 0
    for path in chosen:
        r, t = _resident_pages(path)
        resident += r
        total += t
    return resident / total if total else 0.0


def _drop_caches() -> bool:
    """Write back dirty pages, then drop the clean page cache; False when not allowed here."""
    if os.geteuid() != 0:
        return False
    try:
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("1\n")
        return True
    except OSError:  # read-only /proc/sys in a container, or a kernel that refuses
        return False


def _fadvise_dontneed(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict(paths: Iterable[str | os.PathLike], sample: int | None = 1000, residue: float = 0.01) -> dict:
    """Make the files cold; returns the method used and the resident fraction before and after.

    First per file `posix_fadvise(DONTNEED)`: targeted, and cheap. Only when more than `residue` of the pages stay
    resident (dirty pages fadvise cannot drop) and this is root, the whole page cache is dropped too - which also
    evicts the Python libraries the next cell imports (seconds of start-up per cell), hence not by default.
    `sample` caps how many files the before/after fractions look at (the eviction covers all of them).
    """
    paths = [os.fspath(p) for p in paths]
    before = resident_fraction(paths, sample)
    start = time.monotonic()
    for path in paths:
        _fadvise_dontneed(path)
    method = "fadvise"
    after = resident_fraction(paths, sample)
    if after > residue and _drop_caches():
        method = "fadvise+drop_caches"
        after = resident_fraction(paths, sample)
    seconds = time.monotonic() - start
    return {
        "method": method,
        "files": len(paths),
        "resident_before": round(before, 6),
        "resident_after": round(after, 6),
        "seconds": round(seconds, 6),
    }


# A cold-tier cell whose window read less than this share of its bytes from the device (the rest from the page
# cache) is shown as warm, and no cold verdict rests on it (runcell measures it, diagnose holds to it)
COLD_SHARE = 0.95

# A cell on a cold tier keeps it cold: its files are evicted again every KEEP_COLD_S, so a file read twice in a window
# (a fast GPU reads a benchmark-sized dataset through in seconds) comes from the device both times. A sweep over every file costs
# the runner's process tens of milliseconds; the pause after one is at least KEEP_COLD_RATIO times its length.
KEEP_COLD_S = 0.25
KEEP_COLD_RATIO = 4.0


class KeepCold:
    """Evict `paths` from the page cache over and over, on a thread of the cell runner, until `stop`."""

    def __init__(self, paths: Iterable[str | os.PathLike], interval_s: float = KEEP_COLD_S):
        import threading

        self.paths = [os.fspath(p) for p in paths]
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="loaderbench-keep-cold", daemon=True)
        self.sweeps, self.sweep_s = 0, 0.0

    def start(self) -> KeepCold:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            t = time.monotonic()
            for path in self.paths:
                try:
                    _fadvise_dontneed(path)
                except OSError:
                    pass  # a file the tier lost meanwhile: the cell's reader reports it
            took = time.monotonic() - t
            self.sweeps, self.sweep_s = self.sweeps + 1, self.sweep_s + took
            if self._stop.wait(max(self.interval_s, KEEP_COLD_RATIO * took)):
                return

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {
            "sweeps": self.sweeps,
            "files": len(self.paths),
            "interval_s": self.interval_s,
            "sweep_ms_mean": round(1000 * self.sweep_s / self.sweeps, 3) if self.sweeps else None,
        }
