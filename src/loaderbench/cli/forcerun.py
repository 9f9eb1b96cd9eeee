"""The cells a forced rerun measures again keep their previous record until the new one stands.

Snakemake removes a job's outputs before the job runs, so `loaderbench run -- --forcerun results/cells/<id>.json`
(`make rerun`) whose new measurement fails, or finds a full disk, or is interrupted, would leave the cell with a failed
record or none where a measurement stood. `set_aside` links each such cell's outputs (record, timeline, trace) into
`results/before-rerun/<cell>/` before Snakemake starts (a hard link: no copy, no room needed); `put_back` then moves
them back for each cell whose new record is missing or failed, and drops them for the others. A run that was
interrupted leaves them there, and the next `loaderbench run` puts them back first.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from loaderbench.core.layout import RESULTS
from loaderbench.core.records import find_kept

# a cell job's outputs by the name each has in its before-rerun folder
OUTPUTS = {"record.json": RESULTS.cell, "timeline.csv": RESULTS.timeline, "trace.json": RESULTS.trace}
FORCE_ALL = {"-F", "--forceall"}
FORCE_RULES = {"-R", "--forcerun"}


def forced_cells(root: Path, args: list[str]) -> list[str]:
    """The cells with a record that Snakemake's `args` would measure again: every word that names one of a cell's
    outputs (relative to the run's directory `root`, or absolute; `--forcerun=PATH` too), and every cell for
    `--forceall` or `--forcerun cell`."""
    every, rules = False, False
    cells = set()
    for arg in args:
        words = [arg]
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            rules = name in FORCE_RULES
            every |= name in FORCE_ALL
            words = [value] if eq else []
        for word in words:
            if rules and word == "cell":
                every = True
            elif cell := _cell_of(root, word):
                cells.add(cell)
    if every:
        cells |= {p.stem for p in (root / RESULTS.cells).glob("*.json")}
    return sorted(c for c in cells if (root / RESULTS.cell(c)).is_file())


def _cell_of(root: Path, word: str) -> str | None:
    """The cell whose output `word` names, else None."""
    path = Path(word) if Path(word).is_absolute() else root / word
    path = path.resolve()
    for pattern in OUTPUTS.values():
        wanted = (root / pattern("X")).resolve()
        suffix = wanted.name.removeprefix("X")
        if path.parent == wanted.parent and path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name.removesuffix(suffix)
    return None


def set_aside(root: Path, args: list[str]) -> list[str]:
    """Put back what an interrupted run left set aside, then set aside the outputs of each cell `args` force to run
    again; the lines that say so."""
    lines = put_back(root)
    cells = forced_cells(root, args)
    for cell in cells:
        folder = root / RESULTS.before_rerun / cell
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name, pattern in OUTPUTS.items():
            if (path := root / pattern(cell)).is_file():
                _link(path, folder / name)
    if cells:
        lines.append(
            f"forced rerun: the previous record of {len(cells)} cell(s) set aside in {root / RESULTS.before_rerun} "
            "until the new measurement stands"
        )
    return lines


def _link(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:  # a filesystem without hard links
        shutil.copy2(src, dest)


def put_back(root: Path) -> list[str]:
    """For each cell set aside: its previous outputs back where its new record is missing or failed (the record's
    time set to now, so the next run refreshes the tables from it), else dropped; a line for each put back."""
    lines = []
    aside = root / RESULTS.before_rerun
    for folder in sorted(p for p in aside.glob("*") if p.is_dir()):
        cell, record = folder.name, root / RESULTS.cell(folder.name)
        previous = folder / "record.json"
        why = _failed(record) if previous.is_file() and not _same(record, previous) else None
        if why is not None:
            for name, pattern in OUTPUTS.items():
                if (folder / name).is_file():
                    os.replace(folder / name, root / pattern(cell))
            os.utime(record)
            kept = find_kept(record, root)
            lines.append(
                f"{cell}: {why}; its previous record is back in {record}"
                + (
                    f" (the new measurement is kept at {kept}: `loaderbench run ... -- --forcerun {record}` "
                    "puts it in place)"
                    if kept
                    else ""
                )
            )
        shutil.rmtree(folder, ignore_errors=True)
    if aside.is_dir() and not any(aside.iterdir()):
        aside.rmdir()
    return lines


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _failed(record: Path) -> str | None:
    """Why the new record at `record` does not stand (missing, unreadable or failed), else None."""
    try:
        new = json.loads(record.read_text())
    except FileNotFoundError:
        return "the new measurement left no record"
    except (OSError, ValueError) as e:
        return f"the new record is unreadable ({type(e).__name__}: {e})"
    if new.get("status") == "failed":
        reason = " ".join(str(new.get("reason") or "no reason given").split())
        return f"the new measurement failed ({reason})"
    return None
