"""What each `loaderbench` subcommand does (the parser and `main` are in `cli`)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from .config import ConfigError, cell_ids, cell_parts, cell_spec, load_config, parse_cell_id
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
    import time

    from .dataset import DatasetParams, make_dataset

    t0 = time.monotonic()
    stats = make_dataset(
        DatasetParams(images=a.images, classes=a.classes, seed=a.seed, quality=a.quality), Path(a.out), jobs=a.jobs
    )
    # the duration is read back by `loaderbench plan` (fixedcosts.GENERATED_LOG_RE) to predict the next generation here
    print(f"wrote {stats['files']} images to {a.out}/train: mean {stats['mean_file_kb']} KB, in "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr)  # fmt: skip
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
    from .costmodel import host_of_records
    from .plan import make_plan

    cfg = _cfg(a)
    host = host_of_records(a.host_from) if a.host_from else None
    plan = make_plan(cfg, a.records or [Layout(a.results).cells], host=host,
                     host_dirs=[a.host_from] if a.host_from else [], results=a.results)  # fmt: skip
    print(plan.render(cells=a.cells))
    if a.json:
        Path(a.json).write_text(json.dumps(plan.to_dict(), indent=2))
    return 2 if plan.refused else 0


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
        timeline_files=paths(a.timelines), crosscheck_files=paths(a.crosscheck),
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


def cmd_crosscheck(a) -> int:
    from .crosscheck import crosscheck, render

    cfg = _cfg(a)
    tier = a.tier or cfg["tiers"][0]
    batch = a.batch_size or cfg["batch_sizes"][-1]
    out = Path(a.out or Layout(a.results).crosscheck)
    if a.rounds < 1:
        raise ConfigError("--rounds: at least 1")
    from .loaders import LOADERS

    if unknown := [lo for lo in a.loaders if lo not in LOADERS]:
        raise ConfigError(f"--loaders: unknown loader(s) {', '.join(unknown)}; known: {', '.join(LOADERS)}")
    with _measuring(a, "crosscheck", 1, cfg):
        rows = crosscheck(cfg, a.loaders, tier, batch, a.precision, a.rounds, Path(Layout(a.results).manifest(tier)),
                          out, host=_host(a, cfg))  # fmt: skip
    print(f"crosscheck on tier {tier}, 1 GPU x batch {batch}: each cell against a bare loop of its loader, "
          f"{a.rounds} alternating round(s) in fresh processes; cell/bare [95% interval]; {out / 'crosscheck.json'}")
    print(render(rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


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
    from .records import load_records, spec_hash

    cfg = _cfg(a)
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
            for f in (Path(layout.cell(cid)), Path(layout.timeline(cid))):
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
    cmd = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(Path.cwd()), "--cores", "1",
           "--configfile", str(config), "--cleanup-metadata", *map(str, outputs)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # Snakemake clears what it has and exits 1 naming the outputs it had nothing for (a fresh host has nothing)
    absent = "because the metadata was not present" in out.stderr
    if out.returncode != 0 and not absent:
        raise RuntimeError(f"snakemake --cleanup-metadata failed ({out.returncode}): {out.stderr[-2000:]}")
    none = sum(str(p) in out.stderr.split("Files:", 1)[-1].split() for p in outputs) if absent else 0
    return (f"Snakemake's stored metadata of the adopted outputs cleared: {len(outputs) - none} had some, "
            f"{none} none")


def cmd_where(a) -> int:
    from .layout import where

    try:
        print(where(a.name, a.arg, a.results))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return 0


def cmd_verdict(a) -> int:
    from .layout import Layout
    from .verdict import render_text

    path = Path(Layout(a.results).table("verdict.json"))
    if not path.is_file():
        raise ConfigError(f"no verdict at {path}: run the pipeline (snakemake) first")
    print("\n".join(render_text(json.loads(path.read_text()), a.lines)))
    return 0
