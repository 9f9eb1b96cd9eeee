"""`loaderbench run`: the pipeline with a terminal a person reads. Snakemake's own output goes to a log file; the
terminal gets a line per finished cell (its rate with its interval and how much of a step it waited for data, the
count and the time left by `loaderbench plan`), a line per finished stage, each error with its rule, its log's last
lines and its path, and at the end the bundle's path, the verdict and the cells that failed or were skipped, each
with its reason. It exits non-zero where Snakemake did (its status) or where a cell of the grid failed (CELLS_FAILED);
a skipped cell (a tier this host cannot provide) is listed but fails nothing. The cells a `--forcerun` measures again
keep their previous record if the new measurement fails (`forcerun`); the cells its comparisons or its verdict need
are measured again in the same invocation. `snakemake` called directly is unchanged."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from loaderbench.core.cells import cell_ids
from loaderbench.core.layout import LOGS, RESULTS, Layout
from loaderbench.core.util import die_with_parent
from loaderbench.plan.predict import duration as human_duration

from . import forcerun
from .common import config_of, config_option
from .follow import Follower, lock_advice, log_text, say, say_error, say_tail, say_wrapped

CELLS_FAILED = 3  # the exit status of a run whose Snakemake finished but one of whose cells' records says `failed`


def register(add) -> None:
    s = add(
        "run",
        help="run the pipeline with a quiet terminal: a line per cell, Snakemake's output in a log, then the verdict",
        epilog=f"exit status: 0 when every cell of the grid is ok or skipped, {CELLS_FAILED} when one failed, "
        "Snakemake's own when the pipeline failed, 2 for a config error",
    )
    config_option(s)
    s.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    s.add_argument("--directory", default=".", help="the run's working directory, as Snakemake's (default: here)")
    s.add_argument("--snakefile", help="the workflow (default: Snakemake's own choice, ./Snakefile)")
    s.add_argument("--log", help=f"Snakemake's output goes here (default {LOGS}/snakemake/<UTC time>.log)")
    s.add_argument(
        "--keep-other-groups",
        action="store_true",
        help="do not measure again the cells of another boot, code or stack than the cells this run measures (their "
        "Speed, GPU Efficiency and AU against this run's cells are then left out, with why)",
    )
    s.add_argument(
        "--no-retry",
        action="store_true",
        help="do not measure again, once, the cells a verdict needs whose window was contended or did not converge",
    )
    s.add_argument("snakemake_args", nargs="*", help="more Snakemake arguments, after `--` (e.g. -- --forcerun X)")
    s.set_defaults(func=cmd_run)


def cmd_run(a) -> int:
    from loaderbench.core.provenance import run_id

    cfg = config_of(a)
    root = Path(a.directory)
    log = Path(a.log or root / LOGS / "snakemake" / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + ".log"))
    log.parent.mkdir(parents=True, exist_ok=True)
    where = ["--directory", a.directory] + (["--snakefile", a.snakefile] if a.snakefile else [])
    command = [sys.executable, "-m", "snakemake", *where, "--cores", str(a.cores), *a.snakemake_args]
    command += ["--configfile", a.config]  # last: it takes every word after it
    say(f"pipeline: Snakemake's output in {log}")
    for line in forcerun.set_aside(root, a.snakemake_args):
        say(line)
    started = time.time()
    run = run_id()  # set here, so every job of every pass below names this run
    cells = cell_ids(cfg)
    rc = snakemake(command, log, Follower(root, predicted_seconds(cfg, root), started), started)
    passes = [
        (
            lambda: {} if a.keep_other_groups else stale_cells_of(cells, root, run),
            (
                "they were measured on another boot, code or stack than the cells this run measured, and Speed, GPU "
                "Efficiency and AU divide only cells that compare"
            ),
        ),
        (
            lambda: {} if a.no_retry else blocked_cells_of(cells, root, started),
            "a verdict needs them, and their one window was contended or did not converge",
        ),
    ]
    for cells_of, why in passes:
        if rc == 0 and (again := cells_of()):
            say(f"measuring {len(again)} cell(s) again: {why}")
            for cell, what in again.items():
                say(f"  {cell}: {what}")
            forced = ["--forcerun", *(str(RESULTS.cell(c)) for c in again)]  # as Snakemake names them: relative
            for line in forcerun.set_aside(root, forced):
                say(line)
            again_command = [*command[:-2], *forced, *command[-2:]]
            follower = Follower(root, {}, started)  # the plan counts these cells as done: no time left to say
            rc = snakemake(again_command, log, follower, started, append=True)
    outcomes = cell_outcomes(root, cells)
    if rc != 0:
        say_outcomes(root, outcomes, len(cells), None)
        return rc
    say(f"pipeline done in {human_duration(time.time() - started)}")
    answer(root, started)
    return CELLS_FAILED if say_outcomes(root, outcomes, len(cells), CELLS_FAILED) else 0


def snakemake(command: list[str], log: Path, follower: Follower, started: float, append: bool = False) -> int:
    """Run Snakemake with its output in `log`, saying what `follower` reads of it; its exit status."""
    with log.open("a" if append else "w") as out:
        start = out.tell()
        # a driver killed outright (SIGKILL) takes Snakemake with it, as Ctrl-C does: SIGTERM, which stops its jobs
        # and lets go of its lock, instead of a pipeline left running with no terminal
        stop = functools.partial(die_with_parent, signal.SIGTERM)
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=stop)  # noqa: PLW1509 - prctl only
    with log.open() as text:
        text.seek(start)
        while True:
            ended = proc.poll() is not None
            for line in iter(text.readline, ""):
                follower.feed(line.rstrip("\n"))
            if ended:
                break
            follower.tick()
            time.sleep(0.5)
    rc = proc.returncode
    for line in forcerun.put_back(follower.root):  # a forced cell whose new measurement failed: its record back
        say(line)
    if follower.nothing_to_do:
        say("nothing to do: every output is up to date")
    for error in follower.errors:
        say_error(follower.root, error)
    if rc != 0:
        say(f"pipeline FAILED (Snakemake exit {rc}) after {human_duration(time.time() - started)}; its log: {log}")
        if not follower.errors:
            say_tail(log)
        if "Directory cannot be locked" in log_text(log):
            say(lock_advice(follower.root))
    return rc


def blocked_cells_of(cells: list[str], root: Path, started: float) -> dict[str, str]:
    """The grid's `cells` that the verdict this run wrote needs and that were contended or did not converge
    (`verdict.json`'s `rerun`); none where this run wrote no verdict (a dry run, `--until`, nothing to do). A part
    cell (beside, ranks) is never one: the verdict's tables hold none, though its name is its matrix cell's."""
    from loaderbench.core.cells import parse_cell_id, part_kind
    from loaderbench.report.rows import cell_name

    path = root / RESULTS.table("verdict.json")
    try:
        if path.stat().st_mtime < started - 1:
            return {}
        verdicts = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    names = {name: f"needed by the verdict on {v['tier']}" for v in verdicts for name in v.get("rerun") or []}
    named = {cid: cell_name(parse_cell_id(cid)) for cid in cells if part_kind(cid) is None}
    return {cid: names[name] for cid, name in named.items() if name in names}


def stale_cells_of(cells: list[str], root: Path, run: str) -> dict[str, str]:
    """The grid's `cells` to measure again so that they compare with those run `run` measured (`plan.regroup`)."""
    from loaderbench.core.records import load_records
    from loaderbench.plan.regroup import stale_cells

    records, _ = load_records([root / RESULTS.cell(c) for c in cells if (root / RESULTS.cell(c)).is_file()])
    return stale_cells(records, run, cells)


def cell_outcomes(root: Path, cells: list[str]) -> dict[str, dict[str, list[str]]]:
    """Those of `cells` whose records say `failed` or `skipped`: per status, per reason (whitespace made single
    spaces), the cells' ids in their order. A cell without a readable record is not counted here (Snakemake failed its
    job, and says so)."""
    out: dict[str, dict[str, list[str]]] = {"failed": {}, "skipped": {}}
    for cell in cells:
        try:
            record = json.loads((root / RESULTS.cell(cell)).read_text())
        except (OSError, ValueError):
            continue
        status = record.get("status")
        if status in out:
            reason = " ".join(str(record.get("reason") or "no reason given").split())
            out[status].setdefault(reason, []).append(cell)
    return out


def say_outcomes(root: Path, outcomes: dict[str, dict[str, list[str]]], total: int, exit_status: int | None) -> bool:
    """The failed cells, then the skipped ones (of `total`), each group by reason: the cells' ids, then the reason in
    full (wrapped, not cut). `exit_status`: what the run exits with when a cell failed (None: Snakemake's own).
    Returns whether a cell failed."""
    for status in ("failed", "skipped"):
        groups = outcomes[status]
        n = sum(len(cells) for cells in groups.values())
        if not n:
            continue
        if status == "failed":
            logs = root.resolve() / LOGS / "cells"
            so = f"so the run exits with status {exit_status}; " if exit_status is not None else ""
            say(f"{n} of {total} cells failed ({so}each cell's log: {logs}/<cell>.log):")
        else:
            say(f"{n} of {total} cells skipped (a skipped cell does not fail the run):")
        for reason, cells in groups.items():
            say_wrapped(", ".join(cells) + ":", "  ", "  ")
            say_wrapped(reason, "      ", "      ")
    return bool(outcomes["failed"])


def predicted_seconds(cfg: dict, root: Path) -> dict[str, float]:
    """Each cell's predicted seconds from `loaderbench plan` (empty where it cannot plan: then no time is said)."""
    from loaderbench.plan.predict import make_plan

    results = Layout(str(root / RESULTS.root))
    try:
        return {
            c.cell: c.seconds for c in make_plan(cfg, [results.cells], results=results.root).cells if not c.left_out
        }
    except Exception:  # noqa: BLE001 - the time left is a courtesy; a plan that fails must not stop the run
        return {}


def answer(root: Path, started: float) -> None:
    """The bundle's path and the verdict, where this run wrote them."""
    from loaderbench.report.verdict import run_text

    root = root.resolve()
    bundle = root / RESULTS.bundle / "index.html"
    verdict = root / RESULTS.table("verdict.json")
    if not bundle.is_file() or bundle.stat().st_mtime < started - 1:
        return
    say(f"bundle: {bundle}  (zip: {root / RESULTS.bundle_zip}, table: {root / RESULTS.table('cells.csv')})")
    if verdict.is_file():
        say("\n".join(run_text(verdict.parent)))
