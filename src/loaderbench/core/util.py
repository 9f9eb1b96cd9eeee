"""Small shared helpers: atomic writes (and the one-line error of a failed write), hashing, progress lines, process
trees, a package's lazy exports."""

from __future__ import annotations

import errno
import hashlib
import importlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def lazy_exports(package: str, names: dict[str, str]):
    """A package's `__getattr__` that imports each public name (`names`: name -> its module in `package`) on first
    use: the package's surface without importing its modules when any one of them is imported."""

    def __getattr__(name: str):
        if name in names:
            return getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


class WriteError(OSError):
    """A file could not be written: the message names the file, the cause and, when the disk is full, its free space."""

    def __init__(self, path: str | Path, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.message = f"cannot write {path}: {cause.strerror or cause}{_space_note(Path(path), cause.errno)}"

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # through a process pool: rebuilt from what the constructor takes
        return type(self), (self.filename, OSError(self.errno, self.strerror))


def _space_note(path: Path, errno_: int | None) -> str:
    """' (12 KB free on /mnt/x)' for a full disk or quota, naming the filesystem the file was to be on; else ''."""
    if errno_ not in (errno.ENOSPC, errno.EDQUOT):
        return ""
    try:
        free, mount = free_space(path)
    except OSError:
        return ""
    return f" ({human_bytes(free)} free on {mount})"


def free_space(path: str | Path) -> tuple[int, Path]:
    """(bytes free, mount point) of the filesystem `path` is (or would be, once created) on."""
    place = Path(os.path.abspath(path))
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    while not os.path.ismount(place) and place != place.parent:
        place = place.parent
    return free, place


def human_bytes(n: float) -> str:
    """'512 B', '12 KB', '3.4 MB' (decimal units, as the rest of the messages)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@contextmanager
def writing(path: str | Path):
    """Turn an OSError raised while writing `path` (a file or a folder of them) into a WriteError that names it."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(path, e) from e


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and rename: readers never see a partial file. The file gets the mode
    a plain open() gives (0666 less the umask), and a failed write leaves no temp file (WriteError names the path)."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _create_temp(path: Path) -> tuple[int, str]:
    """A new file beside `path`, opened for writing. Not tempfile.mkstemp: it creates files 0600, and the rename
    would give tables and records that mode."""
    for _ in range(100):
        tmp = str(path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp"))
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def stable_hash(obj) -> str:
    """Short hash of a JSON-serialisable object, independent of key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def progress(items: Iterable[T], total: int, label: str, every_s: float = 2.0) -> Iterator[T]:
    """Yield items, printing 'label: i/total' to stderr at most every `every_s` seconds and at the end."""
    last = 0.0
    i = 0
    for i, item in enumerate(items, 1):
        now = time.monotonic()
        if now - last >= every_s or i == total:
            print(f"{label}: {i}/{total}", file=sys.stderr, flush=True)
            last = now
        yield item


class BackgroundSampler:
    """A sampler whose `_run` loop (until `_stop` is set) runs in a daemon thread; `stop()` returns `result()`."""

    thread_name = "loaderbench-sampler"

    def __init__(self):
        import threading

        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.result()

    def _run(self) -> None:
        raise NotImplementedError

    def result(self) -> dict:
        raise NotImplementedError


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """`sig` to this process when its parent dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG); for a
    child, as `preexec_fn`."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)
    except OSError:
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL to `pid` and its descendants (a measuring process and its loader workers), listed first so that none
    escapes by being re-parented."""
    import psutil

    try:
        family = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        family = []
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
