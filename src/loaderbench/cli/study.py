"""The commands a user runs around a study: check a config, list and plan its cells, read the verdict, find its files, requeue disagreeing repeats, adopt carried records."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from loaderbench.core.cells import cell_ids, cell_parts, cell_spec, parse_cell_id
from loaderbench.core.config import ConfigError, load_config
from loaderbench.core.layout import LOGS, PATHS, RESULTS, Layout

from . import run, watch
from .common import at_least, config_of, config_option, write_json

TITLE = "Run and read a study"


def register(add) -> None:
    """Add this group's subcommands (`add` is `add_parser` that also lists the command under TITLE)."""
    run.register(add)
    _add_config_commands(add)
    _add_results_commands(add)
    watch.register(add)


def _add_config_commands(add) -> None:
    """validate-config, fuse-check, cells and plan: a config checked, its cells listed and planned."""
    s = add("validate-config", help="validate a config file and print the cell count")
    config_option(s)
    s.add_argument("--show", action="store_true", help="print the config with defaults filled in")
    s.add_argument(
        "--skip-paths",
        action="store_true",
        help="do not check what lies on this machine: the dataset and tier paths, a path source's image "
        "count and the plugin loaders' modules (a config for another machine)",
    )
    s.set_defaults(func=cmd_validate)

    s = add("fuse-check", help="say whether the config's emulated tiers can be mounted here (FUSE)")
    config_option(s)
    s.add_argument(
        "--install",
        action="store_true",
        help="install fuse3 with apt-get when missing and running as root (LOADERBENCH_INSTALL=0: never)",
    )
    s.set_defaults(func=cmd_fuse_check)

    s = add("cells", help="list the cell ids of a config")
    config_option(s)
    s.add_argument("--status", action="store_true", help="also show each cell's status in --results")
    s.add_argument("--part", help="only the cells of this part of the config (its `parts`)")
    s.add_argument("--paths", action="store_true", help="print each cell's record path (Snakemake targets) instead")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_cells)

    s = add(
        "plan",
        help="the study's cells, predicted run time per part, fixed costs, total and "
        "budget verdict (exit 2 when over budget_minutes without trim)",
    )
    config_option(s)
    s.add_argument(
        "--results",
        default=RESULTS.root,
        help="results folder: its staging manifests, check and probes say what is done (default %(default)s)",
    )
    s.add_argument(
        "--records",
        nargs="+",
        metavar="DIR",
        help=f"folders of cell records: measured cells and calibration (default {RESULTS.cells})",
    )
    s.add_argument(
        "--host-from",
        metavar="DIR",
        help="plan for the host these records came from (and calibrate on them), not this machine",
    )
    s.add_argument("--json", metavar="FILE", help="also write the plan as JSON here")
    s.add_argument("--cells", action="store_true", help="list every cell with its predicted seconds and basis")
    s.set_defaults(func=cmd_plan)


def _add_results_commands(add) -> None:
    """verdict, where, respread and adopt: a run's results read, requeued and carried to another host."""
    s = add("verdict", help="print the run's verdict: per GPU count and tier, what limits it and the best fix")
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument(
        "--lines",
        type=at_least(4),
        default=12,
        help="at most this many lines, at least 4: the header, one group's two and what is left out (default 12)",
    )
    s.set_defaults(func=cmd_verdict)

    s = add("where", help="print where a run keeps a file (the results layout), e.g. `where cell ID`")
    s.add_argument("name", metavar="NAME", choices=list(PATHS), help="one of: " + ", ".join(PATHS))
    s.add_argument("arg", nargs="?", help="the cell id, tier or table file name, for those that take one")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_where)

    s = add("unstage", help="remove this project's staged copies from the config's tiers (`make clean` runs it)")
    config_option(s)
    s.set_defaults(func=cmd_unstage)

    s = add(
        "respread",
        help="requeue (once) configurations whose repeats spread over spread_warn or that have a contended cell",
    )
    config_option(s)
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_respread)

    s = add(
        "adopt",
        help="after staging on a fresh host: mark carried cell records that measured the "
        "current spec on the same data as up to date, so Snakemake measures only the missing cells",
    )
    config_option(s)
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument(
        "--snakefile",
        default="Snakefile",
        help="the workflow whose stored metadata of the adopted records is cleared (default ./Snakefile)",
    )
    s.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="first copy in the records of this grid from DIR/cells (a crosscheck's folder)",
    )
    s.set_defaults(func=cmd_adopt)


def cmd_validate(a) -> int:
    cfg = load_config(a.config, check_paths=not a.skip_paths)
    print(json.dumps(cfg, indent=2) if a.show else f"{a.config}: valid ({len(cell_ids(cfg))} cells)")
    return 0


def _fuse_problem() -> str | None:
    """Why an emulated tier cannot be mounted here (None: it can), asked in a fresh process: the FUSE binding
    loads libfuse once, when first imported."""
    import subprocess

    code = "from loaderbench.data.emulated import fuse_available; print(fuse_available() or '')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout.strip()
    return out or None


def cmd_fuse_check(a) -> int:
    """Before and after `make quickstart`: FUSE for the config's emulated tiers, installed when root and apt can."""
    import os
    import shutil
    import subprocess

    cfg = load_config(a.config)
    emulated = [t for t in cfg["tiers"] if cfg["storage"][t]["kind"] == "emulated"]
    problem = _fuse_problem() if emulated else None
    may_install = os.geteuid() == 0 and shutil.which("apt-get") and os.environ.get("LOADERBENCH_INSTALL", "1") != "0"
    if problem and a.install and may_install:
        log = Path(LOGS, "fuse-install.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"loaderbench: FUSE is missing ({problem}); installing fuse3 with apt-get (log: {log})", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with log.open("w") as out:
            for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "fuse3", "libfuse3-3"]):
                subprocess.run(command, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
        problem = _fuse_problem()
    if problem:
        print(
            f"loaderbench: FUSE is not usable here ({problem}). The emulated tier(s) {', '.join(emulated)} are "
            "not measured: their cells are recorded 'skipped' with the fix, the other tiers run. Fix: as root "
            "`apt install fuse3` (a container also needs --device /dev/fuse), then run again."
        )
    return 0


def cmd_cells(a) -> int:
    from loaderbench.core.records import load_records

    cfg = config_of(a)
    parts = cell_parts(cfg)
    if a.part and a.part not in {p["name"] for p in cfg["parts"]}:
        raise ConfigError(f"no part {a.part!r} in {a.config} (parts: {', '.join(p['name'] for p in cfg['parts'])})")
    for cid, part in parts.items():
        if a.part and part["name"] != a.part:
            continue
        path = Path(Layout(a.results).cell(cid))
        if a.paths:
            print(path)
        elif a.status:
            status = "missing"
            if path.is_file():
                records, moved = load_records([path])
                status = records[0]["status"] if records else f"missing (unreadable record moved to {moved[0][1]})"
            print(f"{cid}\t{status}")
        else:
            print(cid)
    return 0


def cmd_plan(a) -> int:
    from loaderbench.plan.hostrecords import host_of_records
    from loaderbench.plan.predict import make_plan

    cfg = config_of(a)
    host = host_of_records(a.host_from) if a.host_from else None
    plan = make_plan(
        cfg,
        a.records or [Layout(a.results).cells],
        host=host,
        host_dirs=[a.host_from] if a.host_from else [],
        results=a.results,
    )
    print(plan.render(cells=a.cells))
    write_json(a, plan.to_dict())
    return 2 if plan.refused else 0


def cmd_respread(a) -> int:
    from loaderbench.plan.respread import requeue

    cfg = config_of(a)
    results = Layout(a.results)
    keys = requeue(Path(results.cells), cfg["spread_warn"], Path(results.respread_ledger))
    for k, why in keys.items():
        print(f"requeued {k}: {why}; its records moved to {results.superseded}", file=sys.stderr)
    print(f"{len(keys)} configuration(s) requeued; run snakemake again to measure them", file=sys.stderr)
    return 0


def cmd_adopt(a) -> int:
    """Resuming a study on another host: its records (results/cells/) and timelines (results/telemetry/) were carried
    here and the dataset staged again (`snakemake --until stage`). The new manifests are newer than the records, so
    Snakemake would measure every cell again. A record whose spec_hash is its cell's current spec and whose
    manifest_sha256 is its tier's current manifest measured this very configuration on this very data: it and its
    timeline get the current time, and Snakemake leaves them be. Every other record is left as it is (and
    re-measured).

    On a host that ran another configuration over the same output paths, Snakemake also keeps that run's params for
    them, and a params change is a rerun trigger: the adopted records' stored metadata is cleared too
    (`snakemake --cleanup-metadata`, with `--snakefile`).

    With `--from DIR` (a `loaderbench crosscheck` folder: DIR/cells, DIR/telemetry), the records there that would be
    adopted are copied in first, so that the pipeline counts a crosscheck's cells as measured; a cell already in
    results/cells is left as it is."""
    from loaderbench.core.records import load_records, spec_hash

    cfg = config_of(a)
    layout = Layout(a.results)
    if a.source:
        print(_copy_in(cfg, layout, Path(a.source)))
    grid = set(cell_ids(cfg))
    data = {}
    for tier in cfg["tiers"]:
        try:
            data[tier] = json.loads(Path(layout.manifest(tier)).read_text()).get("sha256")
        except (OSError, ValueError):
            data[tier] = None
    paths = sorted(Path(layout.cells).glob("*.json"))
    counts = {"adopted": 0, "not in this grid": 0, "another spec": 0, "other data or not staged": 0}
    adopted: list[Path] = []
    for rec in load_records(paths)[0]:
        cid = rec["cell_id"]
        if cid not in grid:
            why = "not in this grid"
        elif rec.get("spec_hash") != spec_hash(cell_spec(cfg, cid)):
            why = "another spec"
        elif not rec.get("manifest_sha256") or rec["manifest_sha256"] != data.get(parse_cell_id(cid)["tier"]):
            why = "other data or not staged"
        else:
            why = "adopted"
            for f in (Path(layout.cell(cid)), Path(layout.timeline(cid)), Path(layout.trace(cid))):
                if f.is_file():
                    os.utime(f)
                    adopted.append(f)
        counts[why] += 1
        if why != "adopted":
            print(f"  {cid}: {why} (measured again)", file=sys.stderr)
    print(f"{len(paths)} records in {layout.cells}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    if adopted:
        print(_forget_metadata(adopted, Path(a.config), Path(a.snakefile)))
    return 0


def _copy_in(cfg: dict, layout: Layout, source: Path) -> str:
    """Copy the records under source/cells (and their timelines) whose cell is in the grid and not measured yet."""
    import shutil

    grid = set(cell_ids(cfg))
    copied = present = 0
    for rec in sorted((source / "cells").glob("*.json")):
        cid = rec.stem
        if cid not in grid:
            continue
        if Path(layout.cell(cid)).exists():
            present += 1
            continue
        timeline = source / "telemetry" / f"{cid}.csv"
        if timeline.is_file():
            Path(layout.timeline(cid)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(timeline, layout.timeline(cid))
        trace = source / "traces" / f"{cid}.trace.json"
        if trace.is_file():
            Path(layout.trace(cid)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(trace, layout.trace(cid))
        Path(layout.cell(cid)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(rec, layout.cell(cid))
        copied += 1
    return f"{copied} records of this grid copied from {source}, {present} measured here already"


def _forget_metadata(outputs: list[Path], config: Path, snakefile: Path) -> str:
    """Clear Snakemake's stored metadata of `outputs` (this directory's workflow), so that params stored by a run of
    another configuration do not trigger their rerun. Returns what was done, for the user."""
    import subprocess

    if not snakefile.is_file():
        return f"Snakemake's stored metadata left as it is: no workflow at {snakefile} (--snakefile)"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(snakefile),
        "--directory",
        str(Path.cwd()),
        "--cores",
        "1",
        "--configfile",
        str(config),
        "--cleanup-metadata",
        *map(str, outputs),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    # Snakemake clears what it has and exits 1 naming the outputs it had nothing for (a fresh host has nothing)
    absent = "because the metadata was not present" in out.stderr
    if out.returncode != 0 and not absent:
        raise RuntimeError(f"snakemake --cleanup-metadata failed ({out.returncode}): {out.stderr[-2000:]}")
    none = sum(str(p) in out.stderr.split("Files:", 1)[-1].split() for p in outputs) if absent else 0
    return f"Snakemake's stored metadata of the adopted outputs cleared: {len(outputs) - none} had some, {none} none"


def cmd_where(a) -> int:
    from loaderbench.core.layout import CELL_PATHS, where

    if a.name in CELL_PATHS and a.arg is not None:
        parse_cell_id(a.arg)  # a ConfigError naming what is wrong with the id
    try:
        print(where(a.name, a.arg, a.results))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return 0


def cmd_unstage(a) -> int:
    from loaderbench.data.stage import unstage

    cfg = load_config(a.config)
    for tier, spec in cfg["storage"].items():
        gone = unstage(Path(spec["path"]))
        print(f"{tier}: removed {gone[0]} ({gone[1] / 1e6:.1f} MB)" if gone else f"{tier}: nothing staged here")
    return 0


def cmd_verdict(a) -> int:
    from loaderbench.core.layout import Layout
    from loaderbench.report.verdict import run_text

    path = Path(Layout(a.results).table("verdict.json"))
    if not path.is_file():
        raise ConfigError(f"no verdict at {path}: run the pipeline (snakemake) first")
    print("\n".join(run_text(path.parent, a.lines)))
    return 0
