"""Cell job: run the measurement in a fresh child process and always leave a complete record.

The child (`python -m loaderbench.train`) writes ok/skipped/failed itself; this parent covers what the
child cannot: death by a signal (OOM killer, segfault in a decoder), a hang past the cell timeout.
The record reaches `out` only by an atomic rename, so an interrupted run never leaves a truncated file.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import telemetry
from .config import TIERLESS, CellSpec, staged_root
from .records import failed_record, skipped_record
from .util import atomic_write_json


def run_cell(spec: CellSpec, manifest: Path, out: Path, timeline: Path | None = None, position: str = "") -> dict:
    """Measure the cell in child processes and write its record to `out` (and its telemetry to `timeline`).

    Around the measurement: an emulated tier is mounted (and always unmounted), a cold tier's files are evicted
    from the page cache, and the resource sampler runs. `position` ("3/26") prefixes the progress lines."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.child"
    ranks = spec.gpus if spec.parallel == "ddp" else 1
    leftovers = [partial, *(partial.with_name(f"{partial.name}.rank{r}") for r in range(1, ranks))]
    for p in leftovers:
        p.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "loaderbench.train",
        "--spec", json.dumps(spec.to_dict()), "--manifest", str(manifest), "--out", str(partial),
    ]  # fmt: skip
    started = time.time()
    label = f"[{position}] " if position else ""
    print(f"{label}cell {spec.cell_id}: starting ({spec.loader} on {spec.tier} ({spec.tier_kind}, {spec.cache}), "
          f"{spec.gpus} GPU x batch {spec.batch_size}, {spec.precision}, {spec.parallel})",
          file=sys.stderr, flush=True)  # fmt: skip
    manifest_data = json.loads(Path(manifest).read_text())
    tier = {"name": spec.tier, "kind": spec.tier_kind, "cache": spec.cache, "path": spec.tier_path,
            "read_path": str(spec.data_root), "model": spec.device_model}  # fmt: skip
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_exit) if in_main else None  # SIGTERM -> cleanup below
    procs = []
    mount = sampler = samples = None
    rc, why, culprit, absent = None, None, None, False
    try:
        if spec.loader not in TIERLESS:
            try:
                mount = _prepare_tier(spec, manifest_data, tier)
            except (OSError, RuntimeError) as e:  # no FUSE, a refused mount: the cell's record says so
                why = f"tier {spec.tier} ({spec.tier_kind}) could not be prepared: {e}"
                # FUSE simply absent here: skipped (the reason names the fix); a refused mount stays failed
                absent = spec.tier_kind == "emulated" and _fuse_missing()
        # ddp: one process per GPU (rank), as torchrun would start them, under this runner's supervision
        port = _free_port() if spec.parallel == "ddp" else None
        for rank in range(ranks if why is None else 0):
            env = dict(os.environ)
            if port:
                env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
                # the ranks share the CPUs: split torch's intra-op threads among them as torchrun does (without it,
                # 2 ranks on 2 cores spun against each other: dali-sc's scattered steps ran 40x slower)
                env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // ranks)))
            procs.append(subprocess.Popen(cmd, preexec_fn=_die_with_parent, env=env))
        if spec.telemetry_hz > 0 and procs:
            sampler = telemetry.Sampler(spec.telemetry_hz, [p.pid for p in procs], spec.data_root, spec.gpus).start()
        if procs:
            rc, why, culprit = _wait_all(procs, spec.timeout_s)
    except BaseException:
        for proc in procs:
            _kill_tree(proc)  # interrupted: take the ranks and their loader workers down with us
        raise
    finally:
        if sampler:
            samples = sampler.stop()
        if mount:
            mount.unmount()
            tier["emulated"] = mount.final_stats
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if rc in (-signal.SIGTERM, -signal.SIGINT):
        # Interrupted with the run (Snakemake, Ctrl-C, scancel), not a property of the cell: leave no record,
        # so the next run measures this cell again.
        raise SystemExit(f"cell {spec.cell_id}: interrupted ({signal.Signals(-rc).name}); no record written")
    if culprit:
        # another rank failed first; what rank 0 then recorded (a broken collective) is a consequence, not the cause
        own = leftovers[culprit]
        if own.is_file():
            record = json.loads(own.read_text())
        else:
            consequence = json.loads(partial.read_text())["reason"] if partial.is_file() else None
            record = failed_record(spec, why, f"rank 0 then: {consequence}" if consequence else None)
            record["started_at"] = started
    elif partial.is_file() and (why is None or json.loads(partial.read_text())["status"] != "ok"):
        record = json.loads(partial.read_text())
    else:
        record = skipped_record(spec, why) if absent else failed_record(spec, why or "measurement process wrote no record")
        record["started_at"] = started
    record["wall_s"] = time.time() - started
    metrics = record.get("metrics") or {}
    if spec.loader not in TIERLESS:
        _check_rereads(spec, manifest_data, tier, metrics)
    record["tier"] = tier
    marks = metrics.get("marks")
    if samples is not None:
        record["telemetry"] = telemetry.summarize(samples, marks)
    else:
        record["telemetry"] = {"off": "telemetry_hz is 0"}
    if timeline is not None:
        telemetry.write_timeline(Path(timeline), samples or {"meta": {}, "rows": []}, marks)
        record["telemetry"]["timeline"] = str(timeline)
    atomic_write_json(out, record)
    for p in leftovers:
        p.unlink(missing_ok=True)
    print(label + summary_line(record), file=sys.stderr, flush=True)
    return record


def _fuse_missing() -> bool:
    from .emulated import fuse_available

    return fuse_available() is not None


def _prepare_tier(spec: CellSpec, manifest: dict, tier: dict):
    """Mount an emulated tier (returned, to be unmounted by the caller) and make a cold tier cold."""
    mount = None
    if spec.tier_kind == "emulated":
        from .emulated import DeviceModel, mount as mount_emulated

        mount = mount_emulated(spec.tier_path, spec.read_path, DeviceModel.from_dict(spec.device_model))
    if spec.cache == "cold":
        from .cache import evict

        root = staged_root(spec.tier_path, spec.dataset)  # the real files (an emulated tier's backing files)
        tier["eviction"] = evict([root / f["path"] for f in manifest["files"]])
    return mount


def _check_rereads(spec: CellSpec, manifest: dict, tier: dict, metrics: dict) -> None:
    """A cold tier read more images than it holds: after the first pass they came from the page cache (unless
    the tier is emulated: its FUSE mount bypasses the cache). Warn with the share of such rereads."""
    files = len(manifest["files"])
    read = (metrics.get("warmup_steps", 0) + metrics.get("steps", 0)) * metrics.get("global_batch", 0)
    if not files or not read:
        return
    tier["images_read"] = read
    tier["reread_fraction"] = max(0.0, read - files) / read
    if spec.cache == "cold" and spec.tier_kind == "path" and read > files:
        import psutil

        size_mb = manifest.get("counts", {}).get("bytes", 0) / 1e6
        ram_mb = psutil.virtual_memory().total / 1e6
        if size_mb < ram_mb:
            metrics.setdefault("warnings", []).append(
                f"cold tier reread: the cell read {read} images of a {files}-file dataset ({size_mb:.0f} MB, fits in "
                f"{ram_mb / 1e3:.0f} GB RAM), so {100 * tier['reread_fraction']:.0f}% of its reads came from the page "
                "cache, not the device; use a larger dataset, a shorter window or an emulated tier"
            )


def _wait_all(procs: list[subprocess.Popen], timeout_s: float,
              grace_s: float = 60.0) -> tuple[int | None, str | None, int | None]:  # fmt: skip
    """Wait for every rank. The first rank to fail (or a hang past the timeout) stops the others: ranks block in
    collectives for their peers, so one failure would otherwise hang the rest until the timeout. When one rank
    finishes, the others get `grace_s` to finish too. Returns (exit status, reason, rank) of the first process that
    exited non-zero or by a signal (rank None when none did)."""
    deadline = time.monotonic() + timeout_s
    first_done = None
    while True:
        codes = [p.poll() for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            rank, code = bad[0]
            for p in procs:
                _kill_tree(p)
            who = f"rank {rank} " if len(procs) > 1 else ""
            return code, who + _exit_reason(code), rank
        if all(c == 0 for c in codes):
            return 0, None, None
        now = time.monotonic()
        if first_done is None and any(c == 0 for c in codes):
            first_done = now
        if now > deadline or (first_done is not None and now - first_done > grace_s):
            for p in procs:
                _kill_tree(p)
            if now > deadline:
                return None, f"timed out after {timeout_s:g} s (cell_timeout_s)", None
            return None, f"ranks still running {grace_s:g} s after another finished (a collective without its peers)", None
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary_line(record: dict) -> str:
    m = record.get("metrics") or {}
    if record["status"] == "ok":
        warn = "".join(f"\n  warning: {w}" for w in m.get("warnings", []))
        tel = record.get("telemetry") or {}
        res = ""
        if (tel.get("cpu_mean_pct") or {}).get("mean") is not None:
            res += f", CPU {tel['cpu_mean_pct']['mean']:.0f}%"
        gpu_util = [g["util_pct"]["mean"] for g in tel.get("gpus", []) if g.get("util_pct")]
        if gpu_util:
            res += ", GPU " + "/".join(f"{u:.0f}" for u in gpu_util) + "%"
        return (f"cell {record['cell_id']}: ok  {m['samples_per_s']:.1f} samples/s  ({m['steps']} steps in "
                f"{m['time_s']:.1f} s, data wait {100 * m['data_wait_fraction']:.0f}% of the window{res}){warn}")  # fmt: skip
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
