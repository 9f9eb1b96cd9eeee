"""`loaderbench` command line: one subcommand per pipeline job (Snakemake calls these)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .check import DatasetError
from .config import ConfigError, cell_ids, cell_spec, load_config
from .hostlock import HostBusy
from .layout import RESULTS, Layout
from .stage import StagingError


def _cfg(a) -> dict:
    return load_config(a.config)


def cmd_validate(a) -> int:
    cfg = load_config(a.config, check_paths=not a.skip_paths)
    print(json.dumps(cfg, indent=2) if a.show else f"{a.config}: valid ({len(cell_ids(cfg))} cells)")
    return 0


def _fuse_problem() -> str | None:
    """Why an emulated tier cannot be mounted here (None: it can), asked in a fresh process: the FUSE binding
    loads libfuse once, when first imported."""
    import subprocess

    code = "from loaderbench.emulated import fuse_available; print(fuse_available() or '')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
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
        print(f"loaderbench: FUSE is missing ({problem}); installing fuse3 with apt-get", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "fuse3", "libfuse3-3"], env=env, check=False)
        problem = _fuse_problem()
    if problem:
        print(f"loaderbench: FUSE is not usable here ({problem}). The emulated tier(s) {', '.join(emulated)} are "
              "not measured: their cells are recorded 'skipped' with the fix, the other tiers run. Fix: as root "
              "`apt install fuse3` (a container also needs --device /dev/fuse), then run again.")  # fmt: skip
    return 0


def cmd_make_dataset(a) -> int:
    from .dataset import DatasetParams, make_dataset

    stats = make_dataset(
        DatasetParams(images=a.images, classes=a.classes, seed=a.seed, quality=a.quality), Path(a.out), jobs=a.jobs
    )
    print(f"wrote {stats['files']} images to {a.out}/train: mean {stats['mean_file_kb']} KB", file=sys.stderr)
    return 0


def cmd_check(a) -> int:
    from .check import check_dataset, render_report

    result = check_dataset(Path(a.source), Path(a.out), Path(a.quarantine), strict=a.strict, jobs=a.jobs)
    print(render_report(result), file=sys.stderr, end="")
    return 0


def cmd_stage(a) -> int:
    from .stage import stage

    m = stage(Path(a.check), a.tier, Path(a.tier_path), a.dataset, Path(a.out), project_dir=Path(a.project_dir),
              verify=a.verify)  # fmt: skip
    c = m["counts"]
    print(f"staged {c['files']} files ({c['bytes'] / 1e6:.1f} MB) on tier {a.tier} at {m['root']}: "
          f"{c['copied']} copied, {c['kept']} unchanged, {c['removed']} removed"
          + (f"; verified by checksum: {c['repaired']} differed and were restaged" if a.verify else "")
          + (f"; {c['foreign']} foreign file(s) in the tier ignored" if c.get("foreign") else ""), file=sys.stderr)  # fmt: skip
    return 0


def _host(a, cfg: dict | None = None):
    """Host settings (lock directory, wait limit, contention thresholds): the command line's, else the config's."""
    from .hostlock import HostSettings

    base = HostSettings.from_config(cfg)
    over = {k: getattr(a, k, None) for k in ("lock_dir", "lock_wait_s", "contention_cpu_cores",
                                            "contention_gpu_processes")}  # fmt: skip
    return dataclasses.replace(base, **{k: v for k, v in over.items() if v is not None})


def _measuring(a, holder: str, gpus: int, cfg: dict | None = None):
    """The host lock (and the ancestor watch) for a measuring command that is not a cell."""
    from .hostlock import gpu_indices, measuring

    return measuring(holder, gpu_indices(gpus), _host(a, cfg))


def cmd_run_cell(a) -> int:
    from .config import CellSpec
    from .runcell import run_cell
    from .watchdog import StallRule

    cfg = None
    if a.spec:
        spec = CellSpec.from_dict(json.loads(a.spec))
    elif a.config and a.cell:
        cfg = _cfg(a)
        spec = cell_spec(cfg, a.cell)
    else:
        raise ConfigError("run-cell needs --spec, or --config with --cell")
    manifest = Path(a.manifest or RESULTS.manifest(spec.tier))
    if not manifest.is_file():
        raise StagingError(f"tier manifest {manifest} is missing: stage the dataset first (snakemake {manifest})")
    out = Path(a.out or RESULTS.cell(spec.cell_id))
    timeline = Path(a.timeline or RESULTS.timeline(spec.cell_id))
    timeout_s = a.timeout_s or (cfg["cell_timeout_s"] if cfg else None)
    stall = StallRule(floor_s=a.stall_s or (cfg["watchdog"]["stall_s"] if cfg else 60.0),
                      factor=a.stall_factor or (cfg["watchdog"]["step_factor"] if cfg else 50.0))  # fmt: skip
    run_cell(spec, manifest, out, timeline=timeline, position=a.position or "", host=_host(a, cfg),
             timeout_s=timeout_s, stall=stall)  # fmt: skip
    return 0


def cmd_cells(a) -> int:
    from .records import load_records

    cfg = _cfg(a)
    for cid in cell_ids(cfg):
        path = Path(Layout(a.results).cell(cid))
        if a.status:
            status = "missing"
            if path.is_file():
                records, moved = load_records([path])
                status = records[0]["status"] if records else f"missing (unreadable record moved to {moved[0][1]})"
            print(f"{cid}\t{status}")
        else:
            print(cid)
    return 0


def cmd_aggregate(a) -> int:
    from .aggregate import aggregate

    table = aggregate([Path(p) for p in a.cells], json.loads(a.baseline), a.spread_warn, Path(a.out_dir),
                      probes=[Path(p) for p in a.probes or []], ledger=Path(a.ledger))  # fmt: skip
    print(f"aggregated {len(a.cells)} cell records into {len(table)} rows in {a.out_dir}/cells.csv", file=sys.stderr)
    return 0


def cmd_figures(a) -> int:
    from .figures import make_figures

    make_figures(Path(a.table), Path(a.repeats), Path(a.out_dir), diagnosis_csv=Path(a.diagnosis) if a.diagnosis else None,
                 probe_csv=Path(a.probe) if a.probe else None, timeline_csvs=[Path(p) for p in a.timelines],
                 timeline_cells=a.timeline_cells)  # fmt: skip
    return 0


def cmd_probe_tier(a) -> int:
    from .tierprobe import probe_tier
    from .util import atomic_write_json

    manifest = json.loads(Path(a.manifest).read_text())
    with _measuring(a, f"probe-tier {manifest.get('tier')}", 0):
        result = probe_tier(manifest, json.loads(a.tier), a.readers, a.max_files, a.max_seconds)
    atomic_write_json(Path(a.out), result)
    if result.get("error"):
        print(f"tier {result['tier']}: not probed: {result['error']}", file=sys.stderr)
    for run in result["runs"]:
        pred = f", model predicts {run['predicted']['files_per_s']:.1f} (x{run['ratio']:.2f})" if run.get("ratio") else ""
        print(f"tier {result['tier']} ({result['kind']}, {'cold' if result['cold'] else 'warm'}): {run['readers']} "
              f"readers {run['files_per_s']:.1f} files/s, {run['mb_per_s']:.1f} MB/s{pred}", file=sys.stderr)  # fmt: skip
    return 0


def cmd_respread(a) -> int:
    from .respread import requeue

    cfg = _cfg(a)
    results = Layout(a.results)
    keys = requeue(Path(results.cells), cfg["spread_warn"], Path(results.respread_ledger))
    for k, why in keys.items():
        print(f"requeued {k}: {why}; its records moved to {results.superseded}", file=sys.stderr)
    print(f"{len(keys)} configuration(s) requeued; run snakemake again to measure them", file=sys.stderr)
    return 0


def cmd_diagnose(a) -> int:
    from .diagnose import run

    d = run(Path(a.table), json.loads(a.baseline), Path(a.out_dir))
    for _, r in d.iterrows():
        print(f"{r['loader']:>12} {r['tier']:>8} g{r['gpus']} b{r['batch_size']} {r['precision']:>4} "
              f"{r['parallel']:>3}: {r['bottleneck']}", file=sys.stderr)  # fmt: skip
    return 0


def cmd_bundle(a) -> int:
    from .bundle import make_bundle

    paths = lambda names: [Path(n) for n in names or []]  # noqa: E731
    index = make_bundle(
        Path(a.config_json), paths(a.tables), paths(a.figures), Path(a.check), Path(a.check_report),
        paths(a.manifests), paths(a.cells), Path(a.captions), Path(a.out_dir), Path(a.zip),
        timeline_files=paths(a.timelines),
    )  # fmt: skip
    print(f"bundle: {index.resolve()}  (zip: {Path(a.zip).resolve()})")
    return 0


def cmd_bench(a) -> int:
    from .bench import bench

    cfg = _cfg(a)
    tier = a.tier or cfg["tiers"][0]
    loaders = a.loaders or ["torchvision", "opencv"]
    with _measuring(a, "bench", 1, cfg):
        r = bench(Path(Layout(a.results).manifest(tier)), loaders, a.batch_size, cfg["crop_size"], a.workers,
                  a.seconds, a.rounds)  # fmt: skip
    print(f"loader-only throughput (no model) delivered to {r['device']}, tier {r['tier']}, {r['files']} files, batch {a.batch_size}, "
          f"{r['workers']} workers, {a.rounds} rounds x {a.seconds:g} s after a warm-up that drains the prefetch:")  # fmt: skip
    for lo, v in r["images_per_s"].items():
        runs = ", ".join(f"{x:.0f}" for x in r["images_per_s_all"][lo])
        print(f"  {lo:12s} {v:8.1f} images/s (median; rounds: {runs})")
    if {"torchvision", "opencv"} <= set(loaders):
        print(f"  opencv / torchvision = {r['images_per_s']['opencv'] / r['images_per_s']['torchvision']:.2f}x")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    return 0


def cmd_ceiling(a) -> int:
    from .ceiling import ceiling
    from .config import cell_id

    cfg = _cfg(a)
    tier = cfg["tiers"][0]
    cid = cell_id("synthetic", tier, 1, a.batch_size or cfg["batch_sizes"][-1], a.precision, "dp", 0)
    spec = cell_spec(cfg, cid, in_grid=False)
    if a.compile:
        spec = dataclasses.replace(spec, compile=True)
    with _measuring(a, "ceiling", 1, cfg):
        r = ceiling(spec, Path(Layout(a.results).manifest(tier)), a.rounds, a.variant_steps,
                    Path(Layout(a.results).ceiling), timeout_s=cfg["cell_timeout_s"], host=_host(a, cfg))  # fmt: skip
    window = (f"{spec.window_steps} steps" if spec.window_steps else f"{spec.window_s:g} s" if spec.window_s
              else f"adaptive (+-{100 * spec.window_precision:g}%, at most {spec.window_max_s:g} s)")  # fmt: skip
    print(f"compute ceiling on {r['device']}: MobileNetV2, batch {r['batch_size']}, {r['precision']}, "
          f"channels_last={r['channels_last']}, compile={r['compile']}, cudnn.benchmark={r['cudnn_benchmark']}; "
          f"window {window} after the cell's warm-up, {a.rounds} alternating rounds, each in a fresh process")  # fmt: skip
    print(f"  placement (both loops): {json.dumps(r['placement'])}")
    for s_, b_, n, ph in zip(r["synthetic_samples_per_s"], r["bare_samples_per_s"], r["steps"], r["synthetic_phases"]):
        print(f"  synthetic cell {s_:9.1f} Samples/s   bare loop {b_:9.1f} Samples/s   ({n} steps each)  ratio "
              f"{s_ / b_:.4f}   (cell setup {ph['setup_s']:.1f} s, first step {ph['first_step_s']:.1f} s, warm-up "
              f"{ph['warmup_steps']} steps {ph['warmup_s']:.1f} s)")  # fmt: skip
    print(f"  synthetic / bare loop (median of rounds) = {r['synthetic_over_bare']:.4f}")
    for name, ms in (r.get("input_variants_ms_per_step") or {}).items():
        print(f"  amp step, input {name:26s} {ms:8.2f} ms/step")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    return 0


def cmd_engine_report(a) -> int:
    from .enginereport import load, render, report

    rep = report(load(Path(a.cells)), json.loads(Path(a.ceiling).read_text()) if a.ceiling else None)
    print(render(rep))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=2))
    return 0


def cmd_sweep(a) -> int:
    from .sweep import render, sweep

    cfg = _cfg(a)
    tier = a.tier or cfg["tiers"][0]
    with _measuring(a, "sweep", max(cfg["gpus"]), cfg):  # held across its cells (each cell's own lock: a no-op)
        rows = sweep(cfg, a.variant, a.loaders, tier, a.batch_size or cfg["batch_sizes"][-1], a.precision,
                     a.repeats, Path(Layout(a.results).manifest(tier)), Path(a.out or Layout(a.results).sweep), host=_host(a, cfg))  # fmt: skip
    print(f"sweep on tier {tier}, batch {a.batch_size or cfg['batch_sizes'][-1]}, {a.precision}, {a.repeats} "
          f"interleaved repeat(s); records in {a.out}; AU against the variant's synthetic cell (else the first's)")  # fmt: skip
    print(render(rows))
    return 0


def cmd_where(a) -> int:
    from .layout import where

    try:
        print(where(a.name, a.arg, a.results))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loaderbench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("validate-config", help="validate a config file and print the cell count")
    s.add_argument("--config", required=True)
    s.add_argument("--show", action="store_true", help="print the config with defaults filled in")
    s.add_argument("--skip-paths", action="store_true",
                   help="do not check the dataset and tier paths here (a config for another machine)")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("fuse-check", help="say whether the config's emulated tiers can be mounted here (FUSE)")
    s.add_argument("--config", required=True)
    s.add_argument("--install", action="store_true",
                   help="install fuse3 with apt-get when missing and running as root (LOADERBENCH_INSTALL=0: never)")
    s.set_defaults(func=cmd_fuse_check)

    s = sub.add_parser("make-dataset", help="write a deterministic ImageNet-like JPEG class-folder tree")
    s.add_argument("--out", required=True)
    s.add_argument("--images", type=int, default=256)
    s.add_argument("--classes", type=int, default=4)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--quality", type=int, default=90)
    s.add_argument("--jobs", type=int, default=None)
    s.set_defaults(func=cmd_make_dataset)

    s = sub.add_parser("check", help="check every image of a dataset source once; quarantine undecodable ones")
    s.add_argument("--source", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--quarantine", required=True)
    s.add_argument("--strict", action="store_true")
    s.add_argument("--jobs", type=int, default=None)
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("stage", help="stage the checked dataset onto one tier and write its manifest")
    s.add_argument("--check", required=True)
    s.add_argument("--tier", required=True)
    s.add_argument("--tier-path", required=True)
    s.add_argument("--dataset", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--project-dir", default=".")
    s.add_argument("--verify", action="store_true",
                   help="checksum every staged file against the manifest and restage those that differ")
    s.set_defaults(func=cmd_stage)

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
    s.set_defaults(func=cmd_run_cell)

    s = sub.add_parser("cells", help="list the cell ids of a config")
    s.add_argument("--config", required=True)
    s.add_argument("--status", action="store_true", help="also show each cell's status in --results")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_cells)

    s = sub.add_parser("aggregate", help="cell records -> results tables")
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--baseline", required=True, help="baseline cell as JSON")
    s.add_argument("--spread-warn", type=float, default=0.05)
    s.add_argument("--probes", nargs="*", help="tier probe results -> tier_probe.csv")
    s.add_argument("--ledger", default=RESULTS.respread_ledger, help="respread's ledger (default %(default)s)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_aggregate)

    s = sub.add_parser("figures", help="tables -> figures (PNG + SVG)")
    s.add_argument("--table", required=True)
    s.add_argument("--repeats", required=True)
    s.add_argument("--out-dir", required=True)
    s.add_argument("--diagnosis", help="diagnosis.csv (default: computed from --table)")
    s.add_argument("--probe", help="tier_probe.csv (default: none, the tier-probe figure says so)")
    s.add_argument("--timelines", nargs="*", default=[], help="the cells' telemetry timeline CSVs (<cell>.csv)")
    s.add_argument("--timeline-cells", nargs="*", help="cells whose timelines to draw (default: one per loader)")
    s.set_defaults(func=cmd_figures)

    s = sub.add_parser("probe-tier", help="measured read rate of one tier (files/s, MB/s; 1 and N readers, cold)")
    s.add_argument("--manifest", required=True, help="the tier's staging manifest")
    s.add_argument("--tier", required=True, help="the tier's storage entry (config, full form) as JSON")
    s.add_argument("--readers", type=int, nargs="+", default=[1, 8])
    s.add_argument("--max-files", type=int)
    s.add_argument("--max-seconds", type=float, default=20.0)
    s.add_argument("--out", required=True)
    _host_options(s)
    s.set_defaults(func=cmd_probe_tier)

    s = sub.add_parser("respread", help="requeue (once) configurations whose repeats spread over spread_warn or that have a contended cell")
    s.add_argument("--config", required=True)
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_respread)

    s = sub.add_parser("diagnose", help="cells table -> stall attribution, bottleneck per cell, recommendations")
    s.add_argument("--table", required=True)
    s.add_argument("--baseline", required=True, help="the config's baseline as JSON")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(func=cmd_diagnose)

    s = sub.add_parser("bundle", help=f"figures + tables + provenance -> {RESULTS.bundle}/ and {RESULTS.bundle_zip}")
    s.add_argument("--config-json", required=True)
    s.add_argument("--tables", nargs="+", required=True, help="the table files (cells.csv, repeats.csv, ...)")
    s.add_argument("--figures", nargs="+", required=True, help="the figure files (PNG, SVG, seed_table.html)")
    s.add_argument("--check", required=True)
    s.add_argument("--check-report", required=True, help="the dataset check's text report")
    s.add_argument("--manifests", nargs="+", required=True)
    s.add_argument("--cells", nargs="+", required=True)
    s.add_argument("--captions", required=True)
    s.add_argument("--out-dir", required=True)
    s.add_argument("--zip", required=True)
    s.add_argument("--timelines", nargs="*", help="the cells' telemetry timeline CSVs, copied into the bundle")
    s.set_defaults(func=cmd_bundle)

    s = sub.add_parser("bench", help="loader-only throughput (images/s, no model) on a staged tier")
    s.add_argument("--config", required=True)
    s.add_argument("--tier", help="tier to read (default: the config's first)")
    s.add_argument("--loaders", nargs="+")
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--workers", type=int, default=None, help="default: all usable CPUs")
    s.add_argument("--seconds", type=float, default=10.0)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument("--json", help="also write the figures as JSON here")
    _host_options(s)
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("ceiling", help="the synthetic cell against a bare training loop, and input layout/dtype costs")
    s.add_argument("--config", required=True, help="settings (window, warm-up, compile, ...) and the staged tier")
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", choices=["fp32", "amp"], default="amp")
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--compile", action="store_true", help="torch.compile the model (the compiled ceiling)")
    s.add_argument("--variant-steps", type=int, default=50, help="bare-loop steps per input variant (0: skip them)")
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument("--json", help="also write the figures as JSON here")
    _host_options(s)
    s.set_defaults(func=cmd_ceiling)

    s = sub.add_parser("engine-report", help="the engine's cost and trust: per-cell overhead, convergence, dp/ddp, spread")
    s.add_argument("--cells", default=RESULTS.cells, help="folder of cell records (default %(default)s)")
    s.add_argument("--ceiling", help="a `loaderbench ceiling --json` file to include")
    s.add_argument("--json", help="also write the report as JSON here")
    s.set_defaults(func=cmd_engine_report)

    s = sub.add_parser("sweep", help="the same cells under variants of settings (a tuning experiment outside the grid)")
    s.add_argument("--config", required=True)
    s.add_argument("--variant", action="append", required=True,
                   help="name:field=value,... over cell settings, e.g. hw1:dali_hw_decoder_load=1.0 (repeatable)")
    s.add_argument("--loaders", nargs="+", required=True)
    s.add_argument("--tier", help="default: the config's first")
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", choices=["fp32", "amp"], default="amp")
    s.add_argument("--repeats", type=int, default=1)
    s.add_argument("--results", default=RESULTS.root)
    s.add_argument("--out", help="records folder (default <results>/sweep)")
    _host_options(s)
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("where", help="print where a run keeps a file (the results layout), e.g. `where cell ID`")
    s.add_argument("name", help="bundle, bundle_zip, table, cell, manifest, report, cells, ... (layout.Layout)")
    s.add_argument("arg", nargs="?", help="the cell id, tier or table file name, for those that take one")
    s.add_argument("--results", default=RESULTS.root)
    s.set_defaults(func=cmd_where)
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
