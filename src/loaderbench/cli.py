"""`loaderbench` command line: one subcommand per pipeline job (Snakemake calls these)."""

from __future__ import annotations

import argparse
import sys

from . import commands
from .check import DatasetError
from .config import ConfigError
from .hostlock import HostBusy
from .layout import RESULTS
from .stage import StagingError


def _host_options(s, contention: bool = False) -> None:
    """The `host:` settings as options (Snakemake passes them to run-cell and probe-tier; they override a config's)."""
    s.add_argument("--lock-dir", help="host lock directory (default: host.lock_dir, else env LOADERBENCH_LOCK_DIR, "
                   "else /tmp/loaderbench-locks)")  # fmt: skip
    s.add_argument("--lock-wait-s", type=float, help="seconds to wait for a busy host before failing (default 1800)")
    if contention:
        s.add_argument("--contention-cpu-cores", type=float,
                       help="foreign CPU cores in the window above which the cell is contended (default 0.5)")
        s.add_argument("--contention-gpu-processes", type=int,
                       help="foreign GPU processes in the window above which the cell is contended (default 0)")


def _side_measurement(s, func) -> None:
    """What bench, ceiling and sweep share: the results folder they read the staged tiers from, the host lock."""
    s.add_argument("--results", default=RESULTS.root)
    _host_options(s)
    s.set_defaults(func=func)


def _batch_and_precision(s) -> None:
    """The one configuration a side measurement (ceiling, sweep) runs at."""
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", choices=["fp32", "amp"], default="amp")


def _required(s, *names: str) -> None:
    for name in names:
        s.add_argument(name, required=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loaderbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("validate-config", help="validate a config file and print the cell count")
    s.add_argument("--config", required=True)
    s.add_argument("--show", action="store_true", help="print the config with defaults filled in")
    s.add_argument("--skip-paths", action="store_true",
                   help="do not check the dataset and tier paths here (a config for another machine)")
    s.set_defaults(func=commands.cmd_validate)

    s = sub.add_parser("fuse-check", help="say whether the config's emulated tiers can be mounted here (FUSE)")
    s.add_argument("--config", required=True)
    s.add_argument("--install", action="store_true",
                   help="install fuse3 with apt-get when missing and running as root (LOADERBENCH_INSTALL=0: never)")
    s.set_defaults(func=commands.cmd_fuse_check)

    s = sub.add_parser("make-dataset", help="write a deterministic ImageNet-like JPEG class-folder tree")
    s.add_argument("--out", required=True)
    for name, default in (("--images", 256), ("--classes", 4), ("--seed", 0), ("--quality", 90), ("--jobs", None)):
        s.add_argument(name, type=int, default=default)
    s.set_defaults(func=commands.cmd_make_dataset)

    s = sub.add_parser("check", help="check every image of a dataset source once; quarantine undecodable ones")
    _required(s, "--source", "--out", "--quarantine")
    s.add_argument("--strict", action="store_true")
    s.add_argument("--jobs", type=int, default=None)
    s.set_defaults(func=commands.cmd_check)

    s = sub.add_parser("stage", help="stage the checked dataset onto one tier and write its manifest")
    _required(s, "--check", "--tier", "--tier-path", "--dataset", "--out")
    s.add_argument("--project-dir", default=".")
    s.add_argument("--verify", action="store_true",
                   help="checksum every staged file against the manifest and restage those that differ")
    s.set_defaults(func=commands.cmd_stage)

    s = sub.add_parser("run-cell", help="measure one cell and write its record")
    s.add_argument("--spec", help="cell spec as JSON (what Snakemake passes)")
    s.add_argument("--config", help="config file, with --cell")
    s.add_argument("--cell", help="cell id (see `loaderbench cells`)")
    s.add_argument("--manifest", help=f"tier manifest (default {RESULTS.manifest('<tier>')})")
    s.add_argument("--out", help=f"record path (default {RESULTS.cell('<cell>')})")
    s.add_argument("--timeline", help=f"telemetry timeline CSV (default {RESULTS.timeline('<cell>')})")
    s.add_argument("--position", help="'i/n': the cell's place in the grid, shown in its progress lines")
    s.add_argument("--timeout-s", type=float, help="the cell's time limit (default: config cell_timeout_s, else auto)")
    s.add_argument("--stall-s", type=float, help="watchdog: no step for this long is a stall (default 60)")
    s.add_argument("--stall-factor", type=float, help="... or for this many median steps, when longer (default 50)")
    _host_options(s, contention=True)
    s.set_defaults(func=commands.cmd_run_cell)

    s = sub.add_parser("cells", help="list the cell ids of a config")
    s.add_argument("--config", required=True)
    s.add_argument("--status", action="store_true", help="also show each cell's status in --results")
    s.add_argument("--part", help="only the cells of this part of the config (its `parts`)")
    s.add_argument("--paths", action="store_true", help="print each cell's record path (Snakemake targets) instead")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=commands.cmd_cells)

    s = sub.add_parser("plan", help="the study's cells, predicted device time per part, fixed costs, total and "
                       "budget verdict (exit 2 when over budget_minutes without trim)")  # fmt: skip
    s.add_argument("--config", required=True)
    s.add_argument("--results", default=RESULTS.root,
                   help="results folder: its staging manifests, check and probes say what is done "
                   "(default %(default)s)")
    s.add_argument("--records", nargs="+", metavar="DIR",
                   help=f"folders of cell records: measured cells and calibration (default {RESULTS.cells})")
    s.add_argument("--host-from", metavar="DIR",
                   help="plan for the host these records came from (and calibrate on them), not this machine")
    s.add_argument("--json", metavar="FILE", help="also write the plan as JSON here")
    s.add_argument("--cells", action="store_true", help="list every cell with its predicted seconds and basis")
    s.set_defaults(func=commands.cmd_plan)

    s = sub.add_parser("aggregate", help="cell records -> results tables")
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--baseline", required=True, help="baseline cell as JSON")
    s.add_argument("--spread-warn", type=float, default=0.05)
    s.add_argument("--probes", nargs="*", help="tier probe results -> tier_probe.csv")
    s.add_argument("--ledger", default=RESULTS.respread_ledger, help="respread's ledger (default %(default)s)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=commands.cmd_aggregate)

    s = sub.add_parser("figures", help="tables -> figures (PNG + SVG)")
    _required(s, "--table", "--repeats", "--out-dir")
    s.add_argument("--diagnosis", help="diagnosis.csv (default: computed from --table)")
    s.add_argument("--probe", help="tier_probe.csv (default: none, the tier-probe figure says so)")
    s.add_argument("--timelines", nargs="*", default=[], help="the cells' telemetry timeline CSVs (<cell>.csv)")
    s.add_argument("--timeline-cells", nargs="*", help="cells whose timelines to draw (default: one per loader)")
    s.set_defaults(func=commands.cmd_figures)

    s = sub.add_parser("probe-tier", help="measured read rate of one tier (files/s, MB/s; 1 and N readers, cold)")
    s.add_argument("--manifest", required=True, help="the tier's staging manifest")
    s.add_argument("--tier", required=True, help="the tier's storage entry (config, full form) as JSON")
    s.add_argument("--readers", type=int, nargs="+", default=[1, 8])
    s.add_argument("--max-files", type=int)
    s.add_argument("--max-seconds", type=float, default=20.0)
    s.add_argument("--out", required=True)
    _host_options(s)
    s.set_defaults(func=commands.cmd_probe_tier)

    s = sub.add_parser("respread", help="requeue (once) configurations whose repeats spread over spread_warn or that have a contended cell")
    s.add_argument("--config", required=True)
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=commands.cmd_respread)

    s = sub.add_parser("diagnose", help="cells table -> stall attribution, bottleneck per cell, recommendations")
    s.add_argument("--table", required=True)
    s.add_argument("--baseline", required=True, help="the config's baseline as JSON")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=commands.cmd_diagnose)

    s = sub.add_parser("bundle", help=f"figures + tables + provenance -> {RESULTS.bundle}/ and {RESULTS.bundle_zip}")
    s.add_argument("--config-json", required=True)
    s.add_argument("--tables", nargs="+", required=True, help="the table files (cells.csv, repeats.csv, ...)")
    s.add_argument("--figures", nargs="+", required=True, help="the figure files (PNG, SVG, seed_table.html)")
    s.add_argument("--check", required=True)
    s.add_argument("--check-report", required=True, help="the dataset check's text report")
    s.add_argument("--manifests", nargs="+", required=True)
    s.add_argument("--cells", nargs="+", required=True)
    _required(s, "--captions", "--out-dir", "--zip")
    s.add_argument("--timelines", nargs="*", help="the cells' telemetry timeline CSVs, copied into the bundle")
    s.add_argument("--crosscheck", nargs="*", help="a `loaderbench crosscheck` summary (crosscheck.json) to show")
    s.set_defaults(func=commands.cmd_bundle)

    s = sub.add_parser("bench", help="loader-only throughput (images/s, no model) on a staged tier")
    s.add_argument("--config", required=True)
    s.add_argument("--tier", help="tier to read (default: the config's first)")
    s.add_argument("--loaders", nargs="+")
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--workers", type=int, default=None, help="default: all usable CPUs")
    s.add_argument("--seconds", type=float, default=10.0)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--json", help="also write the figures as JSON here")
    _side_measurement(s, commands.cmd_bench)

    s = sub.add_parser("ceiling", help="the synthetic cell against a bare training loop, and input layout/dtype costs")
    s.add_argument("--config", required=True, help="settings (window, warm-up, compile, ...) and the staged tier")
    _batch_and_precision(s)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--compile", action="store_true", help="torch.compile the model (the compiled ceiling)")
    s.add_argument("--variant-steps", type=int, default=50, help="bare-loop steps per input variant (0: skip them)")
    s.add_argument("--json", help="also write the figures as JSON here")
    _side_measurement(s, commands.cmd_ceiling)

    s = sub.add_parser("crosscheck", help="cells against a bare training loop of the same loader: does the harness "
                       "slow what it measures? (cell/bare with its interval)")  # fmt: skip
    s.add_argument("--config", required=True, help="settings (window, warm-up, workers, ...) and the staged tier")
    s.add_argument("--loaders", nargs="+", required=True, help="built-in loader names (or plugins)")
    s.add_argument("--tier", help="default: the config's first")
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", nargs="+", choices=["fp32", "amp"], default=["fp32"])
    s.add_argument("--rounds", type=int, default=2, help="cell and bare loop each, alternating (default 2)")
    s.add_argument("--out", help="folder for crosscheck.json and the cells' records (default <results>/crosscheck)")
    _side_measurement(s, commands.cmd_crosscheck)

    s = sub.add_parser("engine-report", help="the engine's cost and trust: per-cell overhead, convergence, dp/ddp, spread")
    s.add_argument("--cells", default=RESULTS.cells, help="folder of cell records (default %(default)s)")
    s.add_argument("--ceiling", help="a `loaderbench ceiling --json` file to include")
    s.add_argument("--json", help="also write the report as JSON here")
    s.set_defaults(func=commands.cmd_engine_report)

    s = sub.add_parser("sweep", help="the same cells under variants of settings (a tuning experiment outside the grid)")
    s.add_argument("--config", required=True)
    s.add_argument("--variant", action="append", required=True,
                   help="name:field=value,... over cell settings, e.g. hw1:dali_hw_decoder_load=1.0 (repeatable)")
    s.add_argument("--loaders", nargs="+", required=True)
    s.add_argument("--tier", help="default: the config's first")
    _batch_and_precision(s)
    s.add_argument("--repeats", type=int, default=1)
    s.add_argument("--out", help="records folder (default <results>/sweep)")
    _side_measurement(s, commands.cmd_sweep)

    s = sub.add_parser("adopt", help="after staging on a fresh host: mark carried cell records that measured the "
                       "current spec on the same data as up to date, so Snakemake measures only the missing cells")
    s.add_argument("--config", required=True)
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument("--snakefile", default="Snakefile",
                   help="the workflow whose stored metadata of the adopted records is cleared (default ./Snakefile)")
    s.add_argument("--from", dest="source", metavar="DIR",
                   help="first copy in the records of this grid from DIR/cells (a crosscheck's folder)")
    s.set_defaults(func=commands.cmd_adopt)

    s = sub.add_parser("verdict", help="print the run's verdict: per GPU count and tier, what limits it and the best fix")
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument("--lines", type=int, default=12, help="at most this many lines (default 12)")
    s.set_defaults(func=commands.cmd_verdict)

    s = sub.add_parser("where", help="print where a run keeps a file (the results layout), e.g. `where cell ID`")
    s.add_argument("name", help="bundle, bundle_zip, table, cell, manifest, report, cells, ... (layout.Layout)")
    s.add_argument("arg", nargs="?", help="the cell id, tier or table file name, for those that take one")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=commands.cmd_where)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except (ConfigError, DatasetError, StagingError, HostBusy) as e:
        print(f"loaderbench {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
