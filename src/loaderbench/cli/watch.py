"""`loaderbench watch [options] -- COMMAND...`: the user's own training command run unchanged, timed per batch by
the injected probe, and said what limits it in a cell's terms; a record of kind `watch` and a trace under --out.

Exit status: the command's (128 + N where signal N ended it), EXIT_STOPPED (124) where --seconds stopped it,
EXIT_NOT_FOUND (127) where it could not be started, 2 for a usage error. The watch's own lines go to stderr, each
starting `[watch] `: the first before the command starts, the rest after it ended, after a newline of their own (the
command's last line may lack one); the command's stdout and stderr are its own, untouched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from loaderbench.core.records import validate_record
from loaderbench.core.util import atomic_write_json
from loaderbench.engine.runner import trace as cell_trace
from loaderbench.engine.watch import emit, launch
from loaderbench.engine.watch import record as watch_record
from loaderbench.report import watchrank
from loaderbench.report.watchtext import PREFIX, lines


def register(add) -> None:
    """Add `watch`."""
    s = add("watch", help="run your own training command unchanged and say what limits it (-- COMMAND...)")
    s.add_argument(
        "--out",
        help="where the record, trace and probe files go (default: a new folder under ~/.cache/loaderbench/watch/)",
    )
    s.add_argument(
        "--seconds",
        type=float,
        help="stop the command after this long (SIGTERM to its process "
        f"group, SIGKILL after --grace); the watch then exits {launch.EXIT_STOPPED}",
    )
    s.add_argument("--grace", type=float, default=launch.GRACE_S, help="seconds between SIGTERM and SIGKILL")
    s.add_argument(
        "--records",
        help="a folder of a grid's cell records (results/cells/): rank those of this host at the script's model, "
        "batch and precision against the script's rate, with intervals",
    )
    s.add_argument(
        "--emit-config",
        metavar="FILE",
        help="write a grid config of what the watch saw (dataset, batch, workers, precision, model) to FILE",
    )
    s.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    s.set_defaults(func=cmd_watch)


def default_out() -> Path:
    """A new folder outside the user's tree: $XDG_CACHE_HOME (or ~/.cache)/loaderbench/watch/<time>."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    return cache / "loaderbench" / "watch" / stamp


def say(text: str) -> None:
    print(PREFIX + text, file=sys.stderr, flush=True)


def cmd_watch(a) -> int:
    """Run the command under the watch, write its record and trace, say what limits it; the exit status it should."""
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        say("error: no command to watch (loaderbench watch [options] -- COMMAND...)")
        return 2
    out = Path(a.out) if a.out else default_out()
    out.mkdir(parents=True, exist_ok=True)
    say(f"out: {out}")
    run = launch.run(command, out, a.seconds, a.grace)
    if run.error:
        say(f"cannot start {command[0]}: {run.error}")
    record, trace = watch_record.build(run)
    grid = []
    if a.records:
        records, unreadable = watchrank.read_grid(Path(a.records))
        rows = watchrank.ranking(records, record) if record["status"] == "ok" else []
        record["watch"]["grid"] = [{"configuration": c, "samples_per_s": r, "ratio": q.to_dict()} for c, r, q in rows]
        guessed = watchrank.predicted(records, record) if record["status"] == "ok" else []
        record["watch"]["predicted"] = [
            {"configuration": c, "samples_per_s": r, "ratio": q.to_dict()} for c, r, q in guessed
        ]
        validate_record(record)
        grid = watchrank.lines(len(records), unreadable, record, Path(a.records), rows, guessed)
    record_path = out / f"{record['cell_id']}.json"
    trace_path = out / f"{record['cell_id']}.trace.json"
    atomic_write_json(record_path, record)
    cell_trace.write(trace_path, trace)
    if a.emit_config:
        grid.append(_emit(Path(a.emit_config), record))
    # a blank line first: the command's last line of stderr may lack its newline, and the watch's own start afresh
    print("\n" + "\n".join([*lines(record, record_path, trace_path), *grid]), file=sys.stderr, flush=True)
    return run.exit_status


def _emit(path: Path, record: dict) -> str:
    """Write the grid config of `record`; the line saying so, or why not."""
    if record["status"] != "ok":
        return f"{PREFIX}no config written to {path}: the script has no window to take one from"
    cfg = emit.write(path, record)
    dataset = cfg["dataset"].get("path") or "a generated dataset (no ImageFolder root seen)"
    return (
        f"{PREFIX}grid config: {path} (dataset {dataset}, {len(cfg['loaders'])} loaders on the RAM tier); "
        f"check it with `loaderbench validate-config --config {path}`, run it with `loaderbench run --config {path}`"
    )
