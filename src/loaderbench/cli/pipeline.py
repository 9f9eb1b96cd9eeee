"""The steps Snakemake's rules run, one subcommand per job: dataset, check, staging, cells, tier probes, tables, diagnosis, the what-if, figures, bundle."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError
from loaderbench.core.layout import RESULTS
from loaderbench.data.stage import StagingError

from .common import add_required, config_of, host_options, host_settings, measuring_lock

TITLE = "Pipeline steps (the workflow runs these)"


def register(add) -> None:
    """Add this group's subcommands (`add` is `add_parser` that also lists the command under TITLE)."""
    _add_data_steps(add)
    _add_measure_steps(add)
    _add_report_steps(add)


def _add_data_steps(add) -> None:
    """make-dataset, check and stage: the dataset made, checked and staged onto a tier."""
    s = add(
        "make-dataset",
        help="write a deterministic ImageNet-like JPEG class-folder tree (and, beside its log, what it took)",
    )
    s.add_argument("--out", required=True)
    for name, default in (("--images", 256), ("--classes", 4), ("--seed", 0), ("--quality", 90), ("--jobs", None)):
        s.add_argument(name, type=int, default=default)
    s.set_defaults(func=cmd_make_dataset)

    s = add("check", help="check every image of a dataset source once; quarantine undecodable ones")
    add_required(s, "--source", "--out", "--quarantine")
    s.add_argument("--strict", action="store_true")
    s.add_argument("--jobs", type=int, default=None)
    s.set_defaults(func=cmd_check)

    s = add("stage", help="stage the checked dataset onto one tier and write its manifest")
    add_required(s, "--check", "--tier", "--tier-path", "--dataset", "--out")
    s.add_argument("--project-dir", default=".")
    s.add_argument(
        "--verify",
        action="store_true",
        help="checksum every staged file against the manifest and restage those that differ",
    )
    s.add_argument(
        "--shards",
        default=None,
        metavar="JSON",
        help='also write WebDataset shards: {"size_mb": .., "min_shards": .., "seed": ..}; empty: none',
    )
    s.set_defaults(func=cmd_stage)


def _add_measure_steps(add) -> None:
    """run-cell and probe-tier: a cell measured, a tier's read rate probed."""
    s = add("run-cell", help="measure one cell and write its record")
    s.add_argument("--spec", help="cell spec as JSON (what Snakemake passes)")
    s.add_argument("--config", help="config file, with --cell")
    s.add_argument("--cell", help="cell id (see `loaderbench cells`)")
    s.add_argument("--manifest", help=f"tier manifest (default {RESULTS.manifest('<tier>')})")
    s.add_argument("--out", help=f"record path (default {RESULTS.cell('<cell>')})")
    s.add_argument("--timeline", help=f"telemetry timeline CSV (default {RESULTS.timeline('<cell>')})")
    s.add_argument("--trace", help=f"trace for Perfetto or chrome://tracing (default {RESULTS.trace('<cell>')})")
    s.add_argument("--position", help="'i/n': the cell's place in the grid, shown in its progress lines")
    s.add_argument("--timeout-s", type=float, help="the cell's time limit (default: config cell_timeout_s, else auto)")
    s.add_argument("--stall-s", type=float, help="watchdog: no step for this long is a stall (default 60)")
    s.add_argument("--stall-factor", type=float, help="... or for this many median steps, when longer (default 50)")
    host_options(s, contention=True)
    s.set_defaults(func=cmd_run_cell)

    s = add("probe-tier", help="measured read rate of one tier (files/s, MB/s; 1 and N readers, cold)")
    s.add_argument("--manifest", required=True, help="the tier's staging manifest")
    s.add_argument("--tier", required=True, help="the tier's storage entry (config, full form) as JSON")
    s.add_argument("--readers", type=int, nargs="+", default=[1, 8])
    s.add_argument("--max-files", type=int)
    s.add_argument("--max-seconds", type=float, default=20.0)
    s.add_argument(
        "--sequential-mb",
        type=float,
        default=64.0,
        help="MB read front to back by one reader (a file written for it, and its shards where it has them)",
    )
    s.add_argument("--out", required=True)
    host_options(s)
    s.set_defaults(func=cmd_probe_tier)


def _add_report_steps(add) -> None:
    """aggregate, diagnose, figures and bundle: the records made into tables, diagnosis, figures and the bundle."""
    s = add("aggregate", help="cell records -> results tables")
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--baseline", required=True, help="baseline cell as JSON")
    s.add_argument("--spread-warn", type=float, default=0.05)
    s.add_argument("--probes", nargs="*", help="tier probe results -> tier_probe.csv")
    s.add_argument("--ledger", default=RESULTS.respread_ledger, help="respread's ledger (default %(default)s)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_aggregate)

    s = add("diagnose", help="cells table -> stall attribution, bottleneck per cell, recommendations")
    s.add_argument("--table", required=True)
    s.add_argument("--baseline", required=True, help="the config's baseline as JSON")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_diagnose)

    s = add("whatif", help="cell records -> every loader x model predicted from its parts, and the checks' scores")
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--gpus", type=int, nargs="+", default=[1], help="the GPU counts to predict at (default 1)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_whatif)

    s = add("figures", help="tables -> figures (PNG + SVG) and their index: those drawn, why each other one was not")
    add_required(s, "--table", "--repeats", "--out-dir")
    s.add_argument("--diagnosis", help="diagnosis.csv (default: computed from --table)")
    s.add_argument("--probe", help="tier_probe.csv (default: none, and no tier-probe figure)")
    s.add_argument("--timelines", nargs="*", default=[], help="the cells' telemetry timeline CSVs (<cell>.csv)")
    s.add_argument("--timeline-cells", nargs="*", help="cells whose timelines to draw (default: one per loader)")
    s.add_argument("--whatif", help="the what-if's matrix (whatif.csv; default: none, and no matrix figure)")
    s.set_defaults(func=cmd_figures)

    s = add("bundle", help=f"figures + tables + provenance -> {RESULTS.bundle}/ and {RESULTS.bundle_zip}")
    s.add_argument("--config-json", required=True)
    s.add_argument("--tables", nargs="+", required=True, help="the table files (cells.csv, repeats.csv, ...)")
    s.add_argument("--figures", required=True, help="the figures folder (`loaderbench figures --out-dir`)")
    s.add_argument("--check", required=True)
    s.add_argument("--check-report", required=True, help="the dataset check's text report")
    s.add_argument("--manifests", nargs="+", required=True)
    s.add_argument("--cells", nargs="+", required=True)
    add_required(s, "--captions", "--out-dir", "--zip")
    s.add_argument("--timelines", nargs="*", help="the cells' telemetry timeline CSVs, copied into the bundle")
    s.add_argument("--crosscheck", nargs="*", help="a `loaderbench crosscheck` summary (crosscheck.json) to show")
    s.set_defaults(func=cmd_bundle)


def cmd_make_dataset(a) -> int:
    import time

    from loaderbench.data.dataset import DatasetParams, make_dataset
    from loaderbench.plan.fixedcosts import record_generation

    t0 = time.monotonic()
    stats = make_dataset(
        DatasetParams(images=a.images, classes=a.classes, seed=a.seed, quality=a.quality), Path(a.out), jobs=a.jobs
    )
    seconds = time.monotonic() - t0
    try:  # read back by `loaderbench plan`; the line below is for people
        record_generation(stats["files"], seconds)
    except OSError as e:  # a hint for the next plan, not worth the dataset
        print(f"make-dataset: {e}; the next plan predicts generation by its rule", file=sys.stderr)
    print(
        f"wrote {stats['files']} images to {a.out}/train: mean {stats['mean_file_kb']} KB, in {seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


def cmd_check(a) -> int:
    from loaderbench.data.check import check_dataset, render_report

    result = check_dataset(Path(a.source), Path(a.out), Path(a.quarantine), strict=a.strict, jobs=a.jobs)
    print(render_report(result), file=sys.stderr, end="")
    return 0


def cmd_stage(a) -> int:
    from loaderbench.data.stage import stage

    m = stage(
        Path(a.check),
        a.tier,
        Path(a.tier_path),
        a.dataset,
        Path(a.out),
        project_dir=Path(a.project_dir),
        verify=a.verify,
        shards=json.loads(a.shards) if a.shards else None,
    )
    c = m["counts"]
    print(
        f"staged {c['files']} files ({c['bytes'] / 1e6:.1f} MB) on tier {a.tier} at {m['root']}: "
        f"{c['copied']} copied, {c['kept']} unchanged, {c['removed']} removed"
        + (f"; verified by checksum: {c['repaired']} differed and were restaged" if a.verify else "")
        + (f"; {c['foreign']} foreign file(s) in the tier ignored" if c.get("foreign") else ""),
        file=sys.stderr,
    )
    if sh := m.get("shards"):
        print(
            f"shards: {sh['count']} of {sh['bytes'] / 1e6:.1f} MB in all at {Path(m['root']).parent / sh['folder']}"
            f" ({'unchanged' if sh['kept'] else 'written'})",
            file=sys.stderr,
        )
    return 0


def cmd_run_cell(a) -> int:
    from loaderbench.core.cells import CellSpec
    from loaderbench.engine.runner.runcell import run_cell
    from loaderbench.engine.watchdog import StallRule

    cfg = None
    if a.spec:
        spec = CellSpec.from_dict(json.loads(a.spec))
    elif a.config and a.cell:
        cfg = config_of(a)
        spec = cell_spec(cfg, a.cell)
    else:
        raise ConfigError("run-cell needs --spec, or --config with --cell")
    manifest = Path(a.manifest or RESULTS.manifest(spec.tier))
    if not manifest.is_file():
        raise StagingError(f"tier manifest {manifest} is missing: stage the dataset first (snakemake {manifest})")
    out = Path(a.out or RESULTS.cell(spec.cell_id))
    timeline = Path(a.timeline or RESULTS.timeline(spec.cell_id))
    trace = Path(a.trace or RESULTS.trace(spec.cell_id))
    timeout_s = a.timeout_s or (cfg["cell_timeout_s"] if cfg else None)
    stall = StallRule(
        floor_s=a.stall_s or (cfg["watchdog"]["stall_s"] if cfg else 60.0),
        factor=a.stall_factor or (cfg["watchdog"]["step_factor"] if cfg else 50.0),
    )
    run_cell(
        spec,
        manifest,
        out,
        timeline=timeline,
        position=a.position or "",
        host=host_settings(a, cfg),
        timeout_s=timeout_s,
        stall=stall,
        trace=trace,
    )
    return 0


def cmd_probe_tier(a) -> int:
    from loaderbench.core.util import atomic_write_json
    from loaderbench.data.tierprobe import probe_tier

    manifest = json.loads(Path(a.manifest).read_text())
    with measuring_lock(a, f"probe-tier {manifest.get('tier')}", 0):
        result = probe_tier(manifest, json.loads(a.tier), a.readers, a.max_files, a.max_seconds, a.sequential_mb)
    atomic_write_json(Path(a.out), result)
    if result.get("error"):
        print(f"tier {result['tier']}: not probed: {result['error']}", file=sys.stderr)
    for run in result["runs"]:
        pred = (
            f", model predicts {run['predicted']['files_per_s']:.1f} (x{run['ratio']:.2f})" if run.get("ratio") else ""
        )
        print(
            f"tier {result['tier']} ({result['kind']}, {'cold' if result['cold'] else 'warm'}): {run['readers']} "
            f"readers {run['files_per_s']:.1f} files/s, {run['mb_per_s']:.1f} MB/s{pred}",
            file=sys.stderr,
        )
    for name in ("sequential", "shards"):
        if seq := result.get(name):
            print(
                f"tier {result['tier']}: one reader front to back ({name}, {seq['bytes'] / 1e6:.0f} MB) "
                f"{seq['mb_per_s']:.1f} MB/s",
                file=sys.stderr,
            )
    return 0


def cmd_aggregate(a) -> int:
    from loaderbench.report.aggregate import aggregate

    table = aggregate(
        [Path(p) for p in a.cells],
        json.loads(a.baseline),
        a.spread_warn,
        Path(a.out_dir),
        probes=[Path(p) for p in a.probes or []],
        ledger=Path(a.ledger),
    )
    print(f"aggregated {len(a.cells)} cell records into {len(table)} rows in {a.out_dir}/cells.csv", file=sys.stderr)
    return 0


def cmd_whatif(a) -> int:
    from loaderbench.report.whatiftables import MATRIX, summary, write_whatif

    df = write_whatif([Path(p) for p in a.cells], a.gpus, Path(a.out_dir))
    print(f"what-if: {summary(df)} in {a.out_dir}/{MATRIX}", file=sys.stderr)
    return 0


def cmd_figures(a) -> int:
    from loaderbench.report.figures import make_figures

    index = make_figures(
        Path(a.table),
        Path(a.repeats),
        Path(a.out_dir),
        diagnosis_csv=Path(a.diagnosis) if a.diagnosis else None,
        probe_csv=Path(a.probe) if a.probe else None,
        timeline_csvs=[Path(p) for p in a.timelines],
        timeline_cells=a.timeline_cells,
        whatif_csv=Path(a.whatif) if a.whatif else None,
    )
    print(
        f"drew {len(index['drawn'])} figure(s) in {a.out_dir}: {', '.join(index['drawn']) or 'none'}", file=sys.stderr
    )
    for name, why in index["not_drawn"].items():
        print(f"not drawn: {name}: {why}", file=sys.stderr)
    return 0


def cmd_diagnose(a) -> int:
    from loaderbench.report.diagnose import run
    from loaderbench.report.verdict import write_verdict

    baseline = json.loads(a.baseline)
    d = run(Path(a.table), baseline, Path(a.out_dir))
    write_verdict(d, baseline, Path(a.out_dir))
    for _, r in d.iterrows():
        print(
            f"{r['loader']:>12} {r['tier']:>8} g{r['gpus']} b{r['batch_size']} {r['precision']:>4} "
            f"{r['parallel']:>3}: {r['bottleneck']}",
            file=sys.stderr,
        )
    return 0


def cmd_bundle(a) -> int:
    from loaderbench.report.bundle import make_bundle

    paths = lambda names: [Path(n) for n in names or []]
    index = make_bundle(
        Path(a.config_json),
        paths(a.tables),
        Path(a.figures),
        Path(a.check),
        Path(a.check_report),
        paths(a.manifests),
        paths(a.cells),
        Path(a.captions),
        Path(a.out_dir),
        Path(a.zip),
        timeline_files=paths(a.timelines),
        crosscheck_files=paths(a.crosscheck),
    )
    print(f"bundle: {index.resolve()}  (zip: {Path(a.zip).resolve()})")
    return 0
