"""One measurement at a time per host: `flock` on lock files shared by every measuring process, and a watch on the
runner's ancestors so that a cell never outlives the run that started it.

`cpus.lock` for the host's CPUs and `gpu<i>.lock` per physical GPU, in one directory (`host.lock_dir`), taken in
one order (CPUs, then GPUs ascending) so that two waiters never deadlock; the holder's pid and task are written in
each file. A holder takes its lock again at no cost. Details: docs/internals.md, "engine.hostlock".
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from loaderbench.core.util import writing

DEFAULT_DIR = "/tmp/loaderbench-locks"
DEFAULT_WAIT_S = 1800.0
DEFAULT_CPU_CORES = 0.5
ENV_DIR = "LOADERBENCH_LOCK_DIR"


@dataclass(frozen=True)
class HostSettings:
    """The `host:` config section: where the locks are, how long to wait for them, when a cell is contended.
    Not part of a cell's spec (a spec field is a Snakemake rerun trigger; these must not re-measure cells)."""

    lock_dir: str | None = None
    lock_wait_s: float = DEFAULT_WAIT_S
    contention_cpu_cores: float = DEFAULT_CPU_CORES
    contention_gpu_processes: int = 0

    @classmethod
    def from_config(cls, cfg: dict | None) -> HostSettings:
        h = (cfg or {}).get("host") or {}
        return cls(
            h.get("lock_dir"),
            float(h.get("lock_wait_s", DEFAULT_WAIT_S)),
            float(h.get("contention_cpu_cores", DEFAULT_CPU_CORES)),
            int(h.get("contention_gpu_processes", 0)),
        )

    @property
    def directory(self) -> Path:
        return lock_directory(self.lock_dir)


def lock_directory(configured: str | os.PathLike | None = None) -> Path:
    return Path(configured or os.environ.get(ENV_DIR) or DEFAULT_DIR)


class HostBusy(RuntimeError):
    """The lock stayed taken past the wait limit; the message names the holder."""


def gpu_indices(gpus: int) -> list[int]:
    """Physical indices of the GPUs a measurement on `gpus` devices uses: none on a host without NVML GPUs (a
    CPU-only host, where a cell takes just `cpus`), else CUDA_VISIBLE_DEVICES' first `gpus` (or 0..gpus-1)."""
    if gpus <= 0:
        return []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no nvidia-ml-py, no driver
        return []
    ids = list(range(count))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        try:
            ids = [int(v) for v in visible.split(",") if v.strip()]
        except ValueError:  # UUIDs: NVML's order is not CUDA's; lock the first cards (as telemetry reads them)
            pass
    return sorted(set(ids[:gpus]))


_held: dict[str, list] = {}  # lock file -> [fd, depth], for this process
_held_lock = threading.Lock()


def read_holder(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def describe(holder: dict, now: float | None = None) -> str:
    """'pid 123 (cell torchvision_..., for 42 s)' from a lock file's content."""
    if not holder.get("pid"):
        return "an unknown holder (its lock file names none yet)"
    what = holder.get("holder") or "?"
    since = f", for {(now or time.time()) - holder['started_at']:.0f} s" if holder.get("started_at") else ""
    host = f" on {holder['host']}" if holder.get("host") and holder["host"] != socket.gethostname() else ""
    return f"pid {holder['pid']}{host} ({what}{since})"


@contextmanager
def exclusive(
    holder: str,
    gpus: list[int],
    directory: str | os.PathLike | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    report_s: float = 5.0,
    poll_s: float = 0.2,
):
    """Hold the host (cpus, then `gpus` ascending) for the block. Waits while another process holds a lock,
    printing who every `report_s` seconds to stderr; raises HostBusy after `wait_s` seconds in all."""
    directory = lock_directory(directory)
    names = ["cpus", *(f"gpu{i}" for i in sorted(set(gpus)))]
    taken: list[str] = []
    start = time.monotonic()
    try:
        for name in names:
            _take(directory / f"{name}.lock", holder, start, wait_s, report_s, poll_s)
            taken.append(name)
        yield [str(directory / f"{n}.lock") for n in names]
    finally:
        for name in reversed(taken):
            _release(directory / f"{name}.lock")


def _take(path: Path, holder: str, start: float, wait_s: float, report_s: float, poll_s: float) -> None:
    key = str(path)
    with _held_lock:
        if key in _held:
            _held[key][1] += 1
            return
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(path.parent, 0o1777)  # shared by every user's runs, like /tmp (best effort: it may be another's)
        except OSError:
            pass
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        next_report = start + report_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            now = time.monotonic()
            waited = now - start
            if waited >= wait_s:
                raise HostBusy(
                    f"host busy: waited {waited:.0f} s (host.lock_wait_s = {wait_s:g}) for {path}, held by "
                    f"{describe(read_holder(path))}: another measurement runs on this host"
                )
            if now >= next_report:
                print(
                    f"loaderbench: {holder}: waiting for the host ({path.name} held by "
                    f"{describe(read_holder(path))}; waited {waited:.0f} s of {wait_s:g})",
                    file=sys.stderr,
                    flush=True,
                )
                next_report += report_s
            time.sleep(min(poll_s, max(0.01, wait_s - waited)))
    except BaseException:
        os.close(fd)
        raise
    info = {
        "pid": os.getpid(),
        "holder": holder,
        "started_at": time.time(),
        "host": socket.gethostname(),
        "command": " ".join(sys.argv)[:300],
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
    except OSError:  # a full /tmp: the lock is held all the same, waiters only cannot name its holder (read_holder)
        pass
    with _held_lock:
        _held[key] = [fd, 1]


def _release(path: Path) -> None:
    key = str(path)
    with _held_lock:
        entry = _held.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _held[key]
    fd = entry[0]
    try:
        os.ftruncate(fd, 0)  # names no holder once free
    except OSError:
        pass
    os.close(fd)  # releases the flock


@contextmanager
def measuring(holder: str, gpus: list[int], settings: HostSettings | None = None):
    """The host lock for a measurement outside the cell runner (probe-tier, bench, ceiling, sweep), with the
    ancestor watch: HostBusy ends the command with its message."""
    settings = settings or HostSettings()
    with watch_ancestors(), exclusive(holder, gpus, settings.directory, settings.lock_wait_s) as paths:
        yield paths


class _AncestorWatch(threading.Thread):
    """Polls the ancestors of the run that started this process every `period_s`: up to the nearest Snakemake (its
    job shell and Snakemake itself), or the parent alone when no Snakemake started it. When one is gone (Snakemake
    killed with SIGKILL), sends SIGTERM to this process, which the cell runner turns into its cleanup (ranks killed,
    tier unmounted, lock released, no record). Processes above that run are not watched: the shell that started a
    detached `setsid nohup snakemake ...` may end while the run goes on."""

    def __init__(self, period_s: float):
        super().__init__(name="loaderbench-ancestors", daemon=True)
        import psutil

        self.period_s = period_s
        self.stop = threading.Event()
        self.gone: str | None = None
        self.ancestors = []
        for p in (p for p in psutil.Process().parents() if p.pid > 1):  # the parent first
            try:
                argv = p.cmdline()
                self.ancestors.append((p.pid, p.create_time(), " ".join(argv)[:120]))
            except psutil.Error:
                continue
            if _is_snakemake(argv):
                break
        else:  # no Snakemake above: a measurement started by hand or by a test watches its parent only
            self.ancestors = self.ancestors[:1]

    def run(self) -> None:
        import psutil

        while not self.stop.wait(self.period_s):
            for pid, created, cmd in self.ancestors:
                try:
                    p = psutil.Process(pid)
                    alive = p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
                except psutil.Error:
                    alive = False
                if not alive:
                    self.gone = f"ancestor pid {pid} ({cmd}) is gone"
                    print(f"loaderbench: {self.gone}: stopping this measurement", file=sys.stderr, flush=True)
                    os.kill(os.getpid(), signal.SIGTERM)
                    return


def _is_snakemake(argv: list[str]) -> bool:
    """A Snakemake process: the `snakemake` script, `python -m snakemake` or `python .../snakemake/__main__.py`."""
    head = argv[:3]
    return (
        any(Path(a).name == "snakemake" for a in head[:2])
        or "-m snakemake" in " ".join(head)
        or any(a.endswith("snakemake/__main__.py") for a in head)
    )


@contextmanager
def watch_ancestors(period_s: float = 0.5):
    """In the main thread: SIGTERM (turned into SystemExit, so cleanup runs) when an ancestor of this process dies.
    Elsewhere (a runner called from a thread, as in tests) it does nothing: the signal would hit the whole process."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_exit)
    watch = _AncestorWatch(period_s)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop.set()
        if previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


MEASURING_COMMANDS = ("run-cell", "probe-tier")


def stop_measurements_on_signals() -> None:
    """In the Snakemake process (the workflow's `onstart`): on SIGINT or SIGTERM sent to Snakemake's pid alone,
    first send SIGTERM to the measuring jobs it runs (cell runners, tier probes: they clean up and write no
    record), then do what Snakemake does. Without this, Snakemake 9 waits for running jobs to finish: SIGTERM is
    its "graceful" stop, and on SIGINT its local executor's shutdown waits for the job threads."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous = signal.getsignal(sig)
            signal.signal(sig, _forwarding(previous))
        except ValueError:  # not the main thread
            return


def _forwarding(previous):
    def handler(signum, frame):
        stopped = terminate_measurements()
        if stopped:
            print(
                f"loaderbench: {signal.Signals(signum).name}: stopping {len(stopped)} measuring job(s) "
                f"(pid {', '.join(map(str, stopped))})",
                file=sys.stderr,
                flush=True,
            )
        if callable(previous) and signum == signal.SIGTERM:
            # Snakemake's SIGTERM handler (JobScheduler.exit_gracefully) takes the scheduler's non-reentrant lock,
            # which the interrupted main thread may hold: called here it can deadlock (it did, about one run in
            # three). It only sets a flag and wakes the scheduler, so a thread of its own does it safely.
            threading.Thread(target=previous, args=(signum, None), name="loaderbench-sigterm", daemon=True).start()
        elif callable(previous):
            previous(signum, frame)
        elif signum == signal.SIGINT and previous != signal.SIG_IGN:
            raise KeyboardInterrupt
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return handler


def terminate_measurements() -> list[int]:
    """SIGTERM to every descendant of this process that runs a measuring loaderbench command."""
    import psutil

    out = []
    try:
        family = psutil.Process().children(recursive=True)
    except psutil.Error:
        return out
    for p in family:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if any("loaderbench" in c for c in cmd) and any(c in MEASURING_COMMANDS for c in cmd):
            try:
                p.terminate()
                out.append(p.pid)
            except psutil.Error:
                pass
    return out
