"""The server process of an emulated tier, run as `python -m loaderbench.data.emulated serve ...` (`mount()` starts it as
a child): it mounts the filesystem and serves it in the foreground, writing its counters to a stats file.
`python -m loaderbench.data.emulated cleanup MOUNTPOINT` removes a stale mount by hand."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from loaderbench.core.devices import DEVICE_MODELS, DeviceModel, EmulatedTierError, resolve_model
from loaderbench.core.util import atomic_write_json

from .fs import FSNAME, INSTALL_HINT, MAX_READ, MFUSEPY_ERROR, SUBTYPE, EmulatedFS, mfusepy
from .mounts import absolute_path, fusermount
from .owner import cleanup_stale

STATS_EVERY_S = 2.0


def _write_stats(path: Path | None, fs: EmulatedFS, info: dict, final: bool) -> None:
    if path is None:
        return
    now = time.time()
    try:
        atomic_write_json(
            path,
            {**info, **fs.stats(), "uptime_s": round(now - info["started_at"], 3), "written_at": now, "final": final},
        )
    except OSError as e:  # keep serving: the mount matters more than its counters
        print(f"emulated tier: cannot write stats to {path}: {e}", file=sys.stderr)


def serve(backing: Path, mountpoint: Path, model: DeviceModel, stats_path: Path | None = None) -> int:
    """Mount and serve in the foreground until unmounted or SIGTERM/SIGINT/SIGHUP (then unmount); exit status."""
    if mfusepy is None:
        print(f"emulated tier: mfusepy is not usable ({MFUSEPY_ERROR}). {INSTALL_HINT}.", file=sys.stderr)
        return 2
    backing, mountpoint = Path(backing).resolve(), absolute_path(mountpoint)
    for label, p in (("--backing", backing), ("--mountpoint", mountpoint)):
        if not p.is_dir():
            print(f"emulated tier: {label} {p} is not a directory; create it first", file=sys.stderr)
            return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    fs = EmulatedFS(backing, model)
    info = {
        "model": model.to_dict(),
        "backing": str(backing),
        "mountpoint": str(mountpoint),
        "pid": os.getpid(),
        "started_at": time.time(),
    }
    stop, dump = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # set before libfuse, so it leaves these alone
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: dump.set())
    failure: list[BaseException] = []

    def run() -> None:
        try:  # in a thread: the main thread stays free to run Python signal handlers
            mfusepy.FUSE(
                fs,
                str(mountpoint),
                foreground=True,
                ro=True,
                direct_io=True,
                max_read=MAX_READ,
                max_threads=max(32, 2 * model.concurrency),
                fsname=FSNAME,
                subtype=SUBTYPE,
            )
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
            if not fusermount(mountpoint, lazy=False)[0]:
                fusermount(mountpoint, lazy=True)
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


def main(argv: list[str] | None = None) -> int:
    from . import __doc__ as package_doc  # the command is the package's: its help says what the package is

    p = argparse.ArgumentParser(prog="python -m loaderbench.data.emulated", description=package_doc.splitlines()[0])
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
            print(cleanup_stale(args.mountpoint) or f"{absolute_path(args.mountpoint)}: nothing stale")
            return 0
        if (args.model is None) == (args.model_json is None):
            p.error("give exactly one of --model NAME or --model-json '{...}'")
        model = resolve_model(json.loads(args.model_json) if args.model_json else args.model)
    except (EmulatedTierError, ValueError) as e:
        print(f"emulated tier: {e}", file=sys.stderr)
        return 2
    return serve(Path(args.backing), Path(args.mountpoint), model, Path(args.stats) if args.stats else None)
