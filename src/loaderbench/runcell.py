"""Cell job: run the measurement in a fresh child process and always leave a complete record.

The child (`python -m loaderbench.train`) writes ok/skipped/failed itself; this parent covers what the
child cannot: death by a signal (OOM killer, segfault in a decoder), a hang past the cell timeout.
The record reaches `out` only by an atomic rename, so an interrupted run never leaves a truncated file.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .config import CellSpec
from .records import failed_record
from .util import atomic_write_json


def run_cell(spec: CellSpec, manifest: Path, out: Path) -> dict:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.child"
    partial.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "loaderbench.train",
        "--spec", json.dumps(spec.to_dict()), "--manifest", str(manifest), "--out", str(partial),
    ]  # fmt: skip
    started = time.time()
    print(f"cell {spec.cell_id}: starting ({spec.loader} on {spec.tier}, {spec.gpus} GPU x batch {spec.batch_size}, "
          f"{spec.precision})", file=sys.stderr, flush=True)  # fmt: skip
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_exit) if in_main else None  # SIGTERM -> cleanup below
    proc = subprocess.Popen(cmd, preexec_fn=_die_with_parent)
    try:
        rc = proc.wait(timeout=spec.timeout_s)
        why = None if rc == 0 else _exit_reason(rc)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        rc, why = None, f"timed out after {spec.timeout_s:g} s (cell_timeout_s)"
    except BaseException:
        _kill_tree(proc)  # interrupted: take the child and its loader workers down with us
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if rc in (-signal.SIGTERM, -signal.SIGINT):
        # Interrupted with the run (Snakemake, Ctrl-C, scancel), not a property of the cell: leave no record,
        # so the next run measures this cell again.
        raise SystemExit(f"cell {spec.cell_id}: interrupted ({signal.Signals(-rc).name}); no record written")
    if why is None and partial.is_file():
        record = json.loads(partial.read_text())
    else:
        record = failed_record(spec, why or "measurement process wrote no record")
        record["started_at"] = started
    record["wall_s"] = time.time() - started
    atomic_write_json(out, record)
    partial.unlink(missing_ok=True)
    print(summary_line(record), file=sys.stderr, flush=True)
    return record


def summary_line(record: dict) -> str:
    m = record.get("metrics") or {}
    if record["status"] == "ok":
        warn = "".join(f"\n  warning: {w}" for w in m.get("warnings", []))
        return (f"cell {record['cell_id']}: ok  {m['samples_per_s']:.1f} samples/s  ({m['steps']} steps in "
                f"{m['time_s']:.1f} s, data wait {100 * m['data_wait_fraction']:.0f}% of the window){warn}")  # fmt: skip
    return f"cell {record['cell_id']}: {record['status']}  {record['reason']}"


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (SIGKILL: often the kernel's OOM killer)" if -rc == signal.SIGKILL else ""
        return f"measurement process killed by {name}{hint}"
    return f"measurement process exited with status {rc}"


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _die_with_parent() -> None:
    """In the child: get SIGKILL if this runner dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    for p in [proc, *family]:
        try:
            p.kill()
        except (ProcessLookupError, psutil.Error):
            pass
    proc.wait()
