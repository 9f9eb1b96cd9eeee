"""What `loaderbench run` says on the terminal as Snakemake's log grows: a line per finished cell and stage (`Follower`),
each failed job with its log's last lines, and what to do about a locked run directory."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from loaderbench.core.layout import RESULTS
from loaderbench.core.records import warnings_of
from loaderbench.plan.predict import duration as human_duration

# What a finished stage says, by rule; a rule not named here is said by its name. `all` and `resolved_config` say
# nothing: the first is the end, the second a copy of the config.
STAGES = {
    "make_dataset": "dataset made",
    "check_dataset": "dataset checked",
    "stage": "dataset staged on {tier}",
    "probe_tier": "{tier} probed",
    "aggregate": "tables written",
    "diagnose": "cells diagnosed",
    "figures": "figures drawn",
    "bundle": "bundle written",
}


SILENT = {"all", "resolved_config"}
PER_TIER = {"stage", "probe_tier"}  # said per tier (the wildcard `tier`)


ERROR_LINES = 12  # of a failed job's log


def log_text(path: Path) -> str:
    """A log's text, empty where it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def lock_advice(root: Path) -> str:
    """What to do about Snakemake's lock on `root`: wait for the Snakemake that holds it, or, where none runs there
    (a run that was killed left it), unlock - never both at once (two runs would write the same files)."""
    live = snakemakes_in(root)
    if live:
        pids = ", ".join(map(str, live))
        return f"another Snakemake (pid {pids}) is running in {root}: let it finish or stop it; do not --unlock while it runs"
    return (
        f"no Snakemake runs in {root}: a run that was killed left its lock; remove it with "
        f"`snakemake --unlock --directory {shlex.quote(str(root))}`, then run again"
    )


def snakemakes_in(root: Path) -> list[int]:
    """The pids of the Snakemake processes whose working directory is `root` (this user's that /proc shows)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if "snakemake" in cmd and Path(os.readlink(proc / "cwd")) == Path(root).resolve():
                out.append(int(proc.name))
        except OSError:
            continue
    return sorted(out)


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
    done: list[float] = field(default_factory=lambda: [0.0, 0.0])  # finished cells' predicted and taken seconds
    last_cell: float | None = None  # when the last cell finished
    waiting: set[str] = field(default_factory=set)  # cells said to wait for the host
    _open: set[str] = field(default_factory=set)  # job ids started and not finished
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
            self._open.add(value)
        elif name == "wildcards":
            job.wildcards = value
        elif name == "log":
            job.log = value.split(" (check log file")[0]

    def tick(self) -> None:
        """Between Snakemake's lines: a running cell that waits for the host (another measurement holds its lock),
        said once, with who holds it; its log says so every few seconds, the terminal otherwise would not."""
        for jobid in sorted(self._open):
            job = self.jobs[jobid]
            cell = job.wildcards.removeprefix("cell=")
            if job.rule != "cell" or not job.log or cell in self.waiting:
                continue
            try:
                with open(self.root / job.log, "rb") as f:
                    f.seek(max(0, f.seek(0, 2) - 4096))
                    tail = f.read().decode(errors="replace")
            except OSError:
                continue
            if m := re.search(r": waiting for the host \((.+?); waited", tail):
                self.waiting.add(cell)
                say(f"  {cell}: waiting for the host ({m[1]}): another measurement holds it")

    def _finished(self, jobid: str) -> None:
        self._open.discard(jobid)
        job = self.jobs.get(jobid)
        if job is None:
            return
        self.finished[job.rule] = self.finished.get(job.rule, 0) + 1
        if job.rule == "cell":
            self._cell(job)
        elif job.rule in PER_TIER:  # each tier as it is ready: its cells follow it, not the last tier
            tier = job.wildcards.removeprefix("tier=")
            say(f"  [{clock(time.time() - self.started)}] {STAGES[job.rule].format(tier=tier)}")
        elif job.rule not in SILENT and self.finished[job.rule] == self.counts.get(job.rule, 1):
            what = STAGES.get(job.rule, job.rule + ": done")
            if job.rule == "check_dataset":
                what += check_summary(self.root)
            say(f"  [{clock(time.time() - self.started)}] {what}")

    def _cell(self, job: Job) -> None:
        cell = job.wildcards.removeprefix("cell=")
        self.pace(self.predicted.pop(cell, None), time.time())
        n, total = self.finished["cell"], self.counts.get("cell", 0)
        when = f", ~{human_duration(self.time_left())} left" if self.predicted and n < total else ""
        log = str(self.root / job.log) if job.log else ""
        line = f"  [{n:>{len(str(total))}}/{total}{when}] {cell_line(self.root, cell, log)}"
        if " samples/s" in line:
            say(line)
        else:  # a reason, said in full
            say_wrapped(line, "      ")

    def pace(self, predicted: float | None, now: float) -> None:
        """Count a finished cell's predicted seconds and the time since the cell before it finished (cells are
        measured one at a time: that is what it took, its job's overhead included; the first cell's start is not
        known, so it does not count)."""
        if predicted and self.last_cell is not None:
            self.done[0] += predicted
            self.done[1] += now - self.last_cell
        self.last_cell = now

    def time_left(self) -> float:
        """The cells still to run, as the plan predicted them, at the pace the finished cells kept (the time they took
        over their predicted seconds): a plan that was off by half says so after the first cells, not at the end."""
        pace = self.done[1] / self.done[0] if self.done[0] > 0 else 1.0
        return pace * sum(self.predicted.values())


def check_summary(root: Path) -> str:
    """What the dataset check found, where it found more than good images: odd ones kept, undecodable ones
    quarantined (never staged), stray files and empty class folders left out; "" where all were good."""
    try:
        counts = json.loads((root / RESULTS.check).read_text())["counts"]
    except (OSError, ValueError, KeyError):
        return ""
    said = [
        f"{counts['bad']} undecodable image(s) quarantined in {RESULTS.quarantine} (never staged)"
        if counts["bad"]
        else "",
        f"{counts['odd']} odd image(s) kept" if counts["odd"] else "",
        f"{counts['stray']} stray file(s) left out" if counts.get("stray") else "",
        f"{counts['empty_classes']} empty class folder(s) left out" if counts.get("empty_classes") else "",
    ]
    said = [x for x in said if x]
    return f" ({counts['files']} files: {'; '.join(said)}; see {RESULTS.check_report})" if said else ""


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
    held = [w for w in warnings_of(m) if w["code"] in FLAGGED]
    flags = "".join(f"; {FLAGGED[w['code']]}" for w in held)
    return f"{cell}  {m.get('samples_per_s', float('nan')):.0f} samples/s{interval}{waits}{flags}"


# what a cell's own record holds against its rate, said on its line (the verdict leaves such a cell out)
FLAGGED = {"contended": "CONTENDED: other processes used the CPU in its window"}


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
