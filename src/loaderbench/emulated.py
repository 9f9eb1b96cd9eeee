"""An emulated storage device: a read-only FUSE passthrough that throttles every read to a device model.

A `DeviceModel` is a positioning time, a bandwidth and how many requests the device serves at once. The
filesystem (`serve`, run as `python -m loaderbench.emulated serve ...`) keeps that many "heads"; a read holds
one head for access time (unless it continues that head's last read) plus bytes / bandwidth, real read
included. `mount()` runs the server as a child process, records it in `<mountpoint>.owner.json` and
`cleanup_stale()` removes what a crashed owner left behind. `predict()` is the rate the model promises,
which `loaderbench.tierprobe` compares a measured probe against.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from .util import atomic_write_json

try:  # mfusepy raises at import when libfuse is missing; fuse_available() reports it
    import mfusepy

    _MFUSEPY_ERROR: str | None = None
except (ImportError, OSError, AttributeError) as _e:
    mfusepy = None
    _MFUSEPY_ERROR = f"{type(_e).__name__}: {_e}"

FSNAME = "loaderbench-emulated"
SUBTYPE = "loaderbench"
MAX_READ = 1 << 20  # one request per read of up to 1 MiB (the kernel's FUSE limit is 256 pages)
STATS_EVERY_S = 2.0
INSTALL_HINT = (
    "Install FUSE (Debian/Ubuntu: `apt install fuse3`, then `pip install mfusepy`) "
    "or point the tier at a real mount point instead of an emulated device"
)


class EmulatedTierError(RuntimeError):
    """An emulated tier cannot be modelled, mounted or cleaned; the message names the path and the fix."""


@dataclass(frozen=True)
class DeviceModel:
    """A storage device as seen by whole-file reads: positioning time, bandwidth (MB = 1e6 B), parallel requests."""

    name: str
    access_ms: float
    bandwidth_mb_s: float
    concurrency: int = 1

    def __post_init__(self):
        access = self.access_ms
        if not isinstance(access, (int, float)) or isinstance(access, bool) or access < 0:
            raise EmulatedTierError(f"device model '{self.name}': access_ms must be a number >= 0, got {access!r}")
        bw = self.bandwidth_mb_s
        if not isinstance(bw, (int, float)) or isinstance(bw, bool) or bw <= 0:
            raise EmulatedTierError(f"device model '{self.name}': bandwidth_mb_s must be a number > 0, got {bw!r}")
        if not isinstance(self.concurrency, int) or isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise EmulatedTierError(
                f"device model '{self.name}': concurrency must be an integer >= 1, got {self.concurrency!r}"
            )

    @classmethod
    def from_dict(cls, d: dict, name: str | None = None) -> DeviceModel:
        if not isinstance(d, dict):
            raise EmulatedTierError(f"device model {name or ''}: expected a mapping, got {type(d).__name__}")
        fields = {"name", "access_ms", "bandwidth_mb_s", "concurrency"}
        label = d.get("name", name or "custom")
        unknown = sorted(set(d) - fields)
        if unknown:
            raise EmulatedTierError(f"device model '{label}': unknown keys {unknown}; allowed: {sorted(fields)}")
        missing = sorted({"access_ms", "bandwidth_mb_s"} - set(d))
        if missing:
            raise EmulatedTierError(f"device model '{label}': missing keys {missing}")
        return cls(str(label), d["access_ms"], d["bandwidth_mb_s"], d.get("concurrency", 1))

    def to_dict(self) -> dict:
        return asdict(self)

    def service_s(self, nbytes: int, seek: bool = True) -> float:
        """Seconds one head is busy with a request of `nbytes` (plus a positioning when `seek`)."""
        return (self.access_ms / 1e3 if seek else 0.0) + nbytes / (self.bandwidth_mb_s * 1e6)


# Typical datasheet figures. HDD access = average seek + half a rotation (7200 rpm: ~4.3 + 4.2 ms; 5400 rpm:
# ~6.5 + 5.6 ms); sustained rates of current 1-4 TB desktop drives; one actuator. SATA SSD: the SATA III
# link caps reads near 530-560 MB/s, ~0.1 ms read latency, NCQ queue depth 32. NFS over 1 GbE: 125 MB/s line
# rate less TCP/RPC overhead, ~0.5 ms round trip with server, 8 = the default number of nfsd threads.
DEVICE_MODELS: dict[str, DeviceModel] = {
    m.name: m
    for m in (
        DeviceModel("hdd-7200", 8.5, 160.0, 1),
        DeviceModel("hdd-5400", 12.0, 100.0, 1),
        DeviceModel("sata-ssd", 0.1, 530.0, 32),
        DeviceModel("nfs-1gbe", 0.5, 110.0, 8),
    )
}


def resolve_model(name_or_dict: str | dict | DeviceModel, extra_models: dict | None = None) -> DeviceModel:
    """A model by built-in name, by a name in `extra_models` (these win over built-ins), or inline as a dict."""
    if isinstance(name_or_dict, DeviceModel):
        return name_or_dict
    if isinstance(name_or_dict, dict):
        return DeviceModel.from_dict(name_or_dict)
    if not isinstance(name_or_dict, str):
        raise EmulatedTierError(f"device model must be a name or a mapping, got {type(name_or_dict).__name__}")
    extra = extra_models or {}
    if name_or_dict in extra:
        found = extra[name_or_dict]
        return found if isinstance(found, DeviceModel) else DeviceModel.from_dict(found, name=name_or_dict)
    if name_or_dict in DEVICE_MODELS:
        return DEVICE_MODELS[name_or_dict]
    known = sorted(set(DEVICE_MODELS) | set(extra))
    raise EmulatedTierError(
        f"unknown device model '{name_or_dict}'; known models: {', '.join(known)} (or give access_ms, "
        "bandwidth_mb_s and concurrency inline)"
    )


def predict(model: DeviceModel, mean_file_bytes: float, readers: int) -> dict:
    """Files/s and MB/s the model gives whole-file reads of that mean size with `readers` concurrent readers."""
    if readers < 1:
        raise EmulatedTierError(f"predict: readers must be >= 1, got {readers}")
    service = model.service_s(mean_file_bytes)
    in_service = min(readers, model.concurrency)
    files_s = in_service / service if service > 0 else float("inf")
    return {
        "model": model.name,
        "readers": readers,
        "in_service": in_service,
        "mean_file_bytes": mean_file_bytes,
        "service_ms": service * 1e3,
        "files_per_s": files_s,
        "mb_per_s": files_s * mean_file_bytes / 1e6,
    }


# ---------------------------------------------------------------- the throttle and the filesystem


class _Head:
    """One head: the file and contiguous byte range it read last (the drive's track buffer holds that range)."""

    __slots__ = ("busy", "file", "start", "next_offset", "last_used")

    def __init__(self):
        self.busy, self.file, self.start, self.next_offset, self.last_used = False, None, -1, -1, 0.0

    def holds(self, key: str, offset: int) -> bool:
        """A read here needs no positioning: it continues the range just read or rereads part of it (a reader that
        opens a file twice, as OpenCV's imread does to sniff the format, finds the first bytes in the buffer)."""
        return self.file == key and self.start <= offset <= self.next_offset


class Throttle:
    """`model.concurrency` heads served first come, first served; a read holds a head for its service time."""

    def __init__(self, model: DeviceModel):
        self.model = model
        self._cond = threading.Condition()
        self._heads = [_Head() for _ in range(model.concurrency)]
        self._queue: deque = deque()
        self.requests = self.bytes = self.seeks = self.overruns = 0
        self.busy_s = self.wait_s = 0.0

    def _acquire(self, key: str, offset: int) -> tuple[_Head, bool]:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while True:
                free = [h for h in self._heads if not h.busy]
                if free and self._queue[0] is ticket:
                    break
                self._cond.wait()
            self._queue.popleft()
            head = next((h for h in free if h.holds(key, offset)), None)
            seek = head is None
            if seek:
                head = min(free, key=lambda h: h.last_used)
            head.busy = True
            if self._queue and len(free) > 1:
                self._cond.notify_all()
            return head, seek

    def _release(self, head: _Head, key: str, end: int, nbytes: int, seek: bool, waited: float, held: float,
                 overrun: bool) -> None:  # fmt: skip
        with self._cond:
            if seek:
                head.start, head.next_offset = end - nbytes, end
            else:
                head.next_offset = max(head.next_offset, end)
            head.busy, head.file, head.last_used = False, key, time.monotonic()
            self.requests += 1
            self.bytes += nbytes
            self.seeks += seek
            self.overruns += overrun
            self.busy_s += held
            self.wait_s += waited
            self._cond.notify_all()

    def read(self, key: str, offset: int, do_read) -> bytes:
        """Run `do_read()` (the real read of `key` at `offset`) on a head; return after the modelled service time."""
        arrived = time.monotonic()
        head, seek = self._acquire(key, offset)
        buffered_to = -1 if seek else head.next_offset  # bytes before this came from the track buffer
        start = time.monotonic()
        data, overrun = b"", False
        try:
            data = do_read()
            fresh = len(data) if seek else max(0, offset + len(data) - max(offset, buffered_to))
            remaining = start + self.model.service_s(fresh, seek) - time.monotonic()
            overrun = remaining < 0  # the backing read alone took longer than the model allows
            if remaining > 0:
                time.sleep(remaining)
        finally:
            held = time.monotonic() - start
            self._release(head, key, offset + len(data), len(data), seek, start - arrived, held, overrun)
        return data

    def snapshot(self) -> dict:
        with self._cond:
            return {
                "requests": self.requests,
                "bytes": self.bytes,
                "seeks": self.seeks,
                "busy_s": round(self.busy_s, 6),
                "wait_s": round(self.wait_s, 6),
                "overruns": self.overruns,
            }


class EmulatedFS(mfusepy.Operations if mfusepy else object):
    """Read-only passthrough over `backing`: each read goes through the throttle, then its backing pages are dropped."""

    use_ns = True  # mfusepy: times as integer nanoseconds (float seconds are deprecated)

    def __init__(self, backing: Path, model: DeviceModel):
        self.backing = str(backing)
        self.throttle = Throttle(model)
        self.opens = self.eof_reads = 0
        self._lock = threading.Lock()

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
        if offset >= os.fstat(fh).st_size:  # the size is metadata: EOF costs the device nothing
            with self._lock:
                self.eof_reads += 1
            return b""

        def do_read() -> bytes:
            data = os.pread(fh, size, offset)
            os.posix_fadvise(fh, offset, len(data), os.POSIX_FADV_DONTNEED)
            return data

        return self.throttle.read(path, offset, do_read)

    def release(self, path, fh):
        try:
            os.posix_fadvise(fh, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fh)
        return 0

    def stats(self) -> dict:
        with self._lock:
            extra = {"opens": self.opens, "eof_reads": self.eof_reads}
        return {**self.throttle.snapshot(), **extra}


# ---------------------------------------------------------------- the server process


def _write_stats(path: Path | None, fs: EmulatedFS, info: dict, final: bool) -> None:
    if path is None:
        return
    now = time.time()
    try:
        atomic_write_json(path, {**info, **fs.stats(), "uptime_s": round(now - info["started_at"], 3),
                                 "written_at": now, "final": final})  # fmt: skip
    except OSError as e:  # keep serving: the mount matters more than its counters
        print(f"emulated tier: cannot write stats to {path}: {e}", file=sys.stderr)


def serve(backing: Path, mountpoint: Path, model: DeviceModel, stats_path: Path | None = None) -> int:
    """Mount and serve in the foreground until unmounted or SIGTERM/SIGINT/SIGHUP (then unmount); exit status."""
    if mfusepy is None:
        print(f"emulated tier: mfusepy is not usable ({_MFUSEPY_ERROR}). {INSTALL_HINT}.", file=sys.stderr)
        return 2
    backing, mountpoint = Path(backing).resolve(), _absolute(mountpoint)
    for label, p in (("--backing", backing), ("--mountpoint", mountpoint)):
        if not p.is_dir():
            print(f"emulated tier: {label} {p} is not a directory; create it first", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    fs = EmulatedFS(backing, model)
    info = {"model": model.to_dict(), "backing": str(backing), "mountpoint": str(mountpoint), "pid": os.getpid(),
            "started_at": time.time()}  # fmt: skip
    stop, dump = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # set before libfuse, so it leaves these alone
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: dump.set())
    failure: list[BaseException] = []

    def run() -> None:
        try:  # in a thread: the main thread stays free to run Python signal handlers
            mfusepy.FUSE(fs, str(mountpoint), foreground=True, ro=True, direct_io=True, max_read=MAX_READ,
                         max_threads=max(32, 2 * model.concurrency), fsname=FSNAME, subtype=SUBTYPE)  # fmt: skip
        except BaseException as e:  # noqa: BLE001 - reported below
            failure.append(e)

    fuse = threading.Thread(target=run, name="fuse", daemon=True)
    fuse.start()
    last_write, stop_at = 0.0, None
    while fuse.is_alive():
        fuse.join(0.1)
        now = time.monotonic()
        if stop.is_set() and stop_at is None:
            stop_at = now
            if not _fusermount(mountpoint, lazy=False)[0]:
                _fusermount(mountpoint, lazy=True)
        if stop_at is not None and now - stop_at > 10:
            print(f"emulated tier: {mountpoint} still busy 10 s after the unmount; exiting", file=sys.stderr)
            break
        if dump.is_set() or now - last_write >= STATS_EVERY_S:
            dump.clear()
            _write_stats(stats_path, fs, info, final=False)
            last_write = now
    _write_stats(stats_path, fs, info, final=True)
    if failure:
        print(f"emulated tier: serving {mountpoint} failed: {failure[0]!r}", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------- mounts, processes, owner files


def fuse_available() -> str | None:
    """None when an emulated tier can be mounted here, else why not (with the fix)."""
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "neither fusermount3 nor fusermount is on PATH (Debian/Ubuntu: apt install fuse3)"
    if mfusepy is None:
        return f"the mfusepy binding is not usable: {_MFUSEPY_ERROR} (pip install mfusepy; libfuse: apt install fuse3)"
    if not os.path.exists("/dev/fuse"):
        return ("/dev/fuse does not exist (load the fuse kernel module, or start the container with "
                "--device /dev/fuse; packages: apt install fuse3)")  # fmt: skip
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return f"/dev/fuse cannot be opened ({e.strerror}); a container needs --device /dev/fuse (and fuse3 installed)"
    return None


def _absolute(path: str | Path) -> Path:
    """Absolute path with the parent's symlinks resolved, without touching the (maybe dead) mount point itself."""
    p = Path(os.path.abspath(path))
    return Path(os.path.realpath(p.parent)) / p.name


def owner_path(mountpoint: str | Path) -> Path:
    mp = _absolute(mountpoint)
    return mp.with_name(mp.name + ".owner.json")


def _unescape(field: str) -> str:
    """Undo the octal escapes of /proc/self/mountinfo (space, tab, newline, backslash)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_entry(mountpoint: str | Path) -> dict | None:
    """The topmost mount at `mountpoint` ({"fstype", "source"}) from /proc/self/mountinfo, else None."""
    target = str(_absolute(mountpoint))
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
    return b"loaderbench.emulated" in argv and str(mountpoint).encode() in argv


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


def _fusermount(mountpoint: Path, lazy: bool) -> tuple[bool, str]:
    """Unmount a FUSE mount (`-u`, or lazily `-uz`); (done, errors)."""
    errors = []
    for tool in ("fusermount3", "fusermount"):
        exe = shutil.which(tool)
        if not exe:
            continue
        try:
            r = subprocess.run([exe, "-uz" if lazy else "-u", str(mountpoint)], capture_output=True, text=True,
                               timeout=15)  # fmt: skip
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
    mp = _absolute(mountpoint)
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
    reason = ("no owner file" if not owner else "owner pid {} is gone".format(owner.get("owner_pid"))
              if not owner_alive else "server pid {} is gone or not answering".format(server_pid))  # fmt: skip
    done = []
    if entry is not None:
        ok, err = _fusermount(mp, lazy=True)
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

    def __init__(self, backing: Path, mountpoint: Path, model: DeviceModel, proc: subprocess.Popen,
                 stats_path: Path, own_stats: bool, log_path: Path, cleaned: str | None):  # fmt: skip
        self.backing, self.mountpoint, self.model = backing, mountpoint, model
        self.proc, self.stats_path, self.log_path = proc, stats_path, log_path
        self.server_pid = proc.pid
        self.owner_path = owner_path(mountpoint)
        self.cleaned = cleaned
        self.final_stats: dict | None = None
        self._own_stats = own_stats
        self._pid = os.getpid()
        self._done = False

    def __enter__(self) -> EmulatedMount:
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
            while not _fusermount(self.mountpoint, lazy=False)[0] and time.monotonic() < deadline:
                time.sleep(0.1)  # busy: a reader may still be closing its file
        if mount_entry(self.mountpoint) is not None:
            _fusermount(self.mountpoint, lazy=True)
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
            _fusermount(self.mountpoint, lazy=True)
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
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:].strip() or "(no output)"
    except OSError:
        return "(no output)"


def mount(backing: str | Path, mountpoint: str | Path, model: DeviceModel | str | dict,
          stats_path: str | Path | None = None, timeout_s: float = 15.0) -> EmulatedMount:  # fmt: skip
    """Mount `backing` read-only at `mountpoint`, throttled to `model`, served by a child process."""
    mp = _absolute(mountpoint)
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
    fd, log_name = tempfile.mkstemp(prefix="loaderbench-emulated-", suffix=".log")
    cmd = [sys.executable, "-m", "loaderbench.emulated", "serve", "--backing", str(backing), "--mountpoint", str(mp),
           "--model-json", json.dumps(model.to_dict()), "--stats", str(stats_path)]  # fmt: skip
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=_server_env(), start_new_session=True)  # fmt: skip
    handle = EmulatedMount(backing, mp, model, proc, stats_path, own_stats, Path(log_name), cleaned)
    atomic_write_json(handle.owner_path, {
        "owner_pid": os.getpid(), "owner_start": _proc_start(os.getpid()), "server_pid": proc.pid,
        "server_start": _proc_start(proc.pid), "backing": str(backing), "mountpoint": str(mp),
        "model": model.to_dict(), "stats": str(stats_path), "temporary": [str(p) for p in handle.temporary()],
        "started_at": time.time(),
    })  # fmt: skip
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


# ---------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loaderbench.emulated", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="mount and serve an emulated tier in the foreground")
    s.add_argument("--backing", required=True, help="directory whose files the mount shows")
    s.add_argument("--mountpoint", required=True, help="empty directory to mount on")
    s.add_argument("--model", default=None, help=f"built-in device model: {', '.join(DEVICE_MODELS)}")
    s.add_argument("--model-json", default=None, help='inline model, e.g. {"access_ms": 8, "bandwidth_mb_s": 150}')
    s.add_argument("--stats", default=None, help="JSON file for the counters (every few s, on SIGUSR1, at exit)")
    c = sub.add_parser("cleanup", help="remove a stale emulated mount left by a crashed owner")
    c.add_argument("mountpoint")
    args = p.parse_args(argv)
    try:
        if args.command == "cleanup":
            print(cleanup_stale(args.mountpoint) or f"{_absolute(args.mountpoint)}: nothing stale")
            return 0
        if (args.model is None) == (args.model_json is None):
            p.error("give exactly one of --model NAME or --model-json '{...}'")
        model = resolve_model(json.loads(args.model_json) if args.model_json else args.model)
    except (EmulatedTierError, ValueError) as e:
        print(f"emulated tier: {e}", file=sys.stderr)
        return 2
    return serve(Path(args.backing), Path(args.mountpoint), model, Path(args.stats) if args.stats else None)


if __name__ == "__main__":
    sys.exit(main())
