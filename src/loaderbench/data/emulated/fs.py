"""The filesystem of an emulated tier: a read-only FUSE passthrough whose every read goes through the throttle."""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path

from loaderbench.core.devices import DeviceModel

from .throttle import Throttle

try:  # mfusepy raises at import when libfuse is missing; fuse_available() reports it
    import mfusepy

    MFUSEPY_ERROR: str | None = None
except (ImportError, OSError, AttributeError) as _e:
    mfusepy = None
    MFUSEPY_ERROR = f"{type(_e).__name__}: {_e}"

FSNAME = "loaderbench-emulated"
SUBTYPE = "loaderbench"
MAX_READ = 1 << 20  # one request per read of up to 1 MiB (the kernel's FUSE limit is 256 pages)
# What one device request fetches at least: Linux's readahead for a disk (/sys/block/*/queue/read_ahead_kb, 128 by
# default). The mount is direct_io (no page cache, so every cell reads cold), which also turns off the kernel's
# readahead: without this, a reader's own read size became the device's request size, and OpenCV's 4 KB reads of a
# file, interleaved with another worker's, paid a positioning each (a few images/s from a 110 files/s disk).
READAHEAD = 128 * 1024
# A fetch is kept until its file has been read to the end (the page cache of a file being read: OpenCV's imread opens
# a file twice, to sniff its format and then to decode it, and the second open reads what the first fetched), for at
# most this many files at once; a file read again later is read from the device again, as on a tier kept cold.
RECENT_FILES = 64
INSTALL_HINT = (
    "Install FUSE (Debian/Ubuntu: `apt install fuse3`, then `pip install mfusepy`) "
    "or point the tier at a real mount point instead of an emulated device"
)


class EmulatedFS(mfusepy.Operations if mfusepy else object):
    """Read-only passthrough over `backing`: each read goes through the throttle, then its backing pages are dropped.

    A device read fetches at least READAHEAD bytes, kept as the kernel's page cache would keep them until the file
    has been read to its end: its reads inside them cost the device nothing (`readahead_hits`)."""

    use_ns = True  # mfusepy: times as integer nanoseconds (float seconds are deprecated)

    def __init__(self, backing: Path, model: DeviceModel):
        self.backing = str(backing)
        self.throttle = Throttle(model)
        self.opens = self.eof_reads = self.readahead_hits = 0
        self._lock = threading.Lock()
        self._ahead: OrderedDict[str, tuple[int, bytes]] = OrderedDict()  # file -> (offset, bytes) it last fetched

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def init_with_config(self, conn_info, config_3):
        # libfuse 3 refuses to start when the max_read mount option and the connection's max_read differ
        if conn_info is not None and hasattr(conn_info, "max_read"):
            conn_info.max_read = MAX_READ

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        keys = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_blocks", "st_blksize", "st_rdev")
        attrs = {k: getattr(st, k) for k in keys}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path):
        return os.readlink(self._real(path))

    def access(self, path, amode):
        if amode & os.W_OK:
            raise mfusepy.FuseOSError(errno.EROFS)
        if not os.access(self._real(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._real(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_namemax")
        return {k: getattr(sv, k) for k in keys}

    def open(self, path, flags):
        if flags & os.O_ACCMODE != os.O_RDONLY:
            raise mfusepy.FuseOSError(errno.EROFS)
        fd = os.open(self._real(path), os.O_RDONLY)
        with self._lock:
            self.opens += 1
        return fd

    def read(self, path, size, offset, fh):
        file_size = os.fstat(fh).st_size
        if offset >= file_size:  # the size is metadata: EOF costs the device nothing
            with self._lock:
                self.eof_reads += 1
            return b""
        with self._lock:
            ahead = self._ahead.get(path)
            if ahead is not None:
                start, data = ahead
                end = start + len(data)
                if start <= offset < end and (offset + size <= end or end >= file_size):
                    self.readahead_hits += 1
                    if offset + size >= file_size:  # read to its end: a later read is a new, cold one
                        del self._ahead[path]
                    return data[offset - start : offset - start + size]

        def do_read() -> bytes:
            data = os.pread(fh, max(size, READAHEAD), offset)
            os.posix_fadvise(fh, offset, len(data), os.POSIX_FADV_DONTNEED)
            return data

        data = self.throttle.read(path, offset, do_read)
        if offset + size < file_size:  # the reader will come back for the rest
            with self._lock:
                self._ahead[path] = (offset, data)
                self._ahead.move_to_end(path)
                if len(self._ahead) > RECENT_FILES:
                    self._ahead.popitem(last=False)
        return data[:size]

    def release(self, path, fh):
        try:
            os.posix_fadvise(fh, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fh)
        return 0

    def stats(self) -> dict:
        with self._lock:
            extra = {"opens": self.opens, "eof_reads": self.eof_reads, "readahead_hits": self.readahead_hits}
        return {**self.throttle.snapshot(), **extra}
