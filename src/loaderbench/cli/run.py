"""`loaderbench run`: the pipeline with a terminal a person reads. Snakemake's own output goes to a log file; the
terminal gets a line per finished cell (its rate with its interval and how much of a step it waited for data, the
count and the time left by `loaderbench plan`), a line per finished stage, each error with its rule, its log's last
lines and its path, and at the end the bundle's path, the verdict and the cells that failed or were skipped, each
with its reason. It exits non-zero where Snakemake did (its status) or where a cell of the grid failed (CELLS_FAILED);
a skipped cell (a tier this host cannot provide) is listed but fails nothing. The cells a `--forcerun` measures again
keep their previous record if the new measurement fails (`forcerun`); the cells its comparisons or its verdict need
are measured again in the same invocation. `snakemake` called directly is unchanged."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from loaderbench.core.cells import cell_ids
from loaderbench.core.layout import LOGS, RESULTS, Layout
from loaderbench.plan.predict import duration as human_duration

from . import forcerun
from .common import config_of

# What a finished stage says, by rule; a rule not named here is said by its name. `all` and `resolved_config` say
# nothing: the first is the end, the second a copy of the config.
STAGES = {
    "make_dataset": "dataset made",
    "check_dataset": "dataset checked",
    "stage": "dataset staged on the tiers",
    "probe_tier": "tiers probed",
    "aggregate": "tables written",
    "diagnose": "cells diagnosed",
    "figures": "figures drawn",
    "bundle": "bundle written",
}
SILENT = {"all", "resolved_config"}
ERROR_LINES = 12  # of a failed job's log
CELLS_FAILED = 3  # the exit status of a run whose Snakemake finished but one of whose cells' records says `failed`


def register(add) -> None:
    s = add(
        "run",
        help="run the pipeline with a quiet terminal: a line per cell, Snakemake's output in a log, then the verdict",
        epilog=f"exit status: 0 when every cell of the grid is ok or skipped, {CELLS_FAILED} when one failed, "
        "Snakemake's own when the pipeline failed, 2 for a config error",
    )
    s.add_argument("--config", required=True)
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
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    with log.open() as text:
        text.seek(start)
        while True:
            ended = proc.poll() is not None
            for line in iter(text.readline, ""):
                follower.feed(line.rstrip("\n"))
            if ended:
                break
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
    return rc


def blocked_cells_of(cells: list[str], root: Path, started: float) -> dict[str, str]:
    """The grid's `cells` that the verdict this run wrote needs and that were contended or did not converge
    (`verdict.json`'s `rerun`); none where this run wrote no verdict (a dry run, `--until`, nothing to do)."""
    from loaderbench.core.cells import parse_cell_id
    from loaderbench.report.rows import cell_name

    path = root / RESULTS.table("verdict.json")
    try:
        if path.stat().st_mtime < started - 1:
            return {}
        verdicts = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    names = {name: f"needed by the verdict on {v['tier']}" for v in verdicts for name in v.get("rerun") or []}
    named = {cid: cell_name(parse_cell_id(cid)) for cid in cells}
    return {cid: names[name] for cid, name in named.items() if name in names}


def stale_cells_of(cells: list[str], root: Path, run: str) -> dict[str, str]:
    """The grid's `cells` to measure again so that they compare with those run `run` measured (`plan.regroup`)."""
    from loaderbench.core.records import load_records
    from loaderbench.plan.regroup import stale_cells

    records, _ = load_records([root / RESULTS.cell(c) for c in cells if (root / RESULTS.cell(c)).is_file()])
    return stale_cells(records, run, cells)


def say(line: str) -> None:
    print(line, flush=True)


def say_wrapped(text: str, indent: str, first: str = "") -> None:
    """`text` wrapped to the terminal's width (100 columns where it has none: a pipe, a log) at spaces, never inside a
    word or a path, its later lines indented by `indent`."""
    width = max(60, shutil.get_terminal_size((100, 24)).columns)
    for line in textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ):
        say(line)


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


@dataclass
class Job:
    rule: str
    wildcards: str = ""
    log: str = ""


@dataclass
class Follower:
    """Reads Snakemake's log line by line and says what a person wants to know as it happens."""

    root: Path  # the run's working directory
    predicted: dict[str, float]
    started: float
    counts: dict[str, int] = field(default_factory=dict)  # jobs per rule, from Snakemake's job stats
    finished: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    errors: list[Job] = field(default_factory=list)
    nothing_to_do: bool = False
    _block: Job | None = None
    _in_stats: bool = False
    _in_error: bool = False

    def feed(self, line: str) -> None:
        if self._stats(line):
            return
        if m := re.match(r"(?:local)?rule (\S+):$", line):
            self._block, self._in_error = Job(m[1]), False
        elif m := re.match(r"Error in rule (\S+):$", line):
            self._block, self._in_error = Job(m[1]), True
            self.errors.append(self._block)
        elif self._block is not None and (m := re.match(r"\s+(jobid|wildcards|log): (.*)$", line)):
            self._field(m[1], m[2])
        elif m := re.match(r"Finished job(?:id:)? (\d+)", line):
            self._finished(m[1])
        elif line.startswith("Nothing to be done"):
            self.nothing_to_do = True

    def _stats(self, line: str) -> bool:
        """Snakemake's job stats table (`job  count` ... `total  N`): the jobs per rule."""
        if re.match(r"job\s+count$", line):
            self._in_stats = True
            return True
        if not self._in_stats:
            return False
        if m := re.match(r"(\S+)\s+(\d+)$", line):
            if m[1] == "total":
                self._in_stats = False
            else:
                self.counts[m[1]] = int(m[2])
            return True
        return line.startswith("-") or not line.strip()

    def _field(self, name: str, value: str) -> None:
        job = self._block
        if name == "jobid" and not self._in_error:
            self.jobs[value] = job
        elif name == "wildcards":
            job.wildcards = value
        elif name == "log":
            job.log = value.split(" (check log file")[0]

    def _finished(self, jobid: str) -> None:
        job = self.jobs.get(jobid)
        if job is None:
            return
        self.finished[job.rule] = self.finished.get(job.rule, 0) + 1
        if job.rule == "cell":
            self._cell(job)
        elif job.rule not in SILENT and self.finished[job.rule] == self.counts.get(job.rule, 1):
            say(f"  [{clock(time.time() - self.started)}] {STAGES.get(job.rule, job.rule + ': done')}")

    def _cell(self, job: Job) -> None:
        cell = job.wildcards.removeprefix("cell=")
        self.predicted.pop(cell, None)
        n, total = self.finished["cell"], self.counts.get("cell", 0)
        left = sum(self.predicted.values())
        when = f", ~{human_duration(left)} left" if self.predicted and n < total else ""
        log = str(self.root / job.log) if job.log else ""
        line = f"  [{n:>{len(str(total))}}/{total}{when}] {cell_line(self.root, cell, log)}"
        if " samples/s" in line:
            say(line)
        else:  # a reason, said in full
            say_wrapped(line, "      ")


def clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def cell_line(root: Path, cell: str, log: str) -> str:
    """One cell as the terminal shows it: its rate with its interval and its data wait, or why it has none."""
    try:
        record = json.loads((root / RESULTS.cell(cell)).read_text())
    except (OSError, ValueError) as e:
        return f"{cell}  no record ({e}); log: {log}"
    status = record.get("status")
    if status != "ok":
        reason = " ".join(str(record.get("reason") or "no reason given").split())
        return f"{cell}  {status}: {reason}" + (f"; log: {log}" if status == "failed" and log else "")
    m = record.get("metrics") or {}
    hw = (m.get("window") or {}).get("ci95_rel_halfwidth")
    interval = f" (+-{100 * hw:.0f}%)" if isinstance(hw, (int, float)) else f" (no interval: {m.get('steps')} steps)"
    wait = m.get("data_wait_fraction")
    waits = f", waits for data {100 * wait:.0f}% of a step" if isinstance(wait, (int, float)) else ""
    return f"{cell}  {m.get('samples_per_s', float('nan')):.0f} samples/s{interval}{waits}"


def say_error(root: Path, job: Job) -> None:
    """A failed job: its rule, what it was for, its log's last lines and the log's path."""
    what = f" ({job.wildcards})" if job.wildcards else ""
    log = root / job.log if job.log else None
    say(f"ERROR in rule {job.rule}{what}" + (f"; its log: {log}" if log else ""))
    if log:
        say_tail(log)


def say_tail(path: Path, lines: int = ERROR_LINES) -> None:
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as e:
        say(f"    (cannot read {path}: {e})")
        return
    for line in tail:
        say(f"    | {line[:200]}")


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
