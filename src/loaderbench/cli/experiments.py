"""Side measurements outside the grid, each against a reference: loader-only throughput, the ceiling, the harness against a bare loop, settings sweeps, the engine's own cost."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError
from loaderbench.core.layout import RESULTS, Layout
from loaderbench.core.registry import NO_MODEL
from loaderbench.core.resolve import measured_models

from .common import batch_and_precision, config_of, host_settings, measuring_lock, side_measurement, write_json

TITLE = "Measure outside the grid"


def register(add) -> None:
    """Add this group's subcommands (`add` is `add_parser` that also lists the command under TITLE)."""
    _add_harness_checks(add)
    _add_searches(add)


def model_option(s, default: str) -> None:
    """`--model`: the one model a side measurement trains instead of the config's."""
    s.add_argument(
        "--model",
        help=f"the model the cells train: one of the config's `models` or any model a config may name (default: "
        f"{default})",
    )


def _add_harness_checks(add) -> None:
    """bench, ceiling and crosscheck: a loader, the step and the harness measured apart."""
    s = add("bench", help="loader-only throughput (images/s, model: none) on a staged tier")
    s.add_argument("--config", required=True)
    s.add_argument("--tier", help="tier to read (default: the config's first)")
    s.add_argument("--loaders", nargs="+")
    s.add_argument("--batch-size", type=int, default=32)
    s.add_argument("--workers", type=int, default=None, help="default: all usable CPUs")
    s.add_argument("--seconds", type=float, default=10.0)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--json", help="also write the figures as JSON here")
    side_measurement(s, cmd_bench)

    s = add("ceiling", help="the synthetic cell against a bare training loop, and input layout/dtype costs")
    s.add_argument("--config", required=True, help="settings (window, warm-up, compile, ...) and the staged tier")
    batch_and_precision(s)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--compile", action="store_true", help="torch.compile the model (the compiled ceiling)")
    model_option(s, "the ceiling of each model of the config's `models` but none")
    s.add_argument("--variant-steps", type=int, default=50, help="bare-loop steps per input variant (0: skip them)")
    s.add_argument("--json", help="also write the figures as JSON here")
    side_measurement(s, cmd_ceiling)

    s = add(
        "crosscheck",
        help="cells against a bare training loop of the same loader: does the harness "
        "slow what it measures? (cell/bare with its interval)",
    )
    s.add_argument("--config", required=True, help="settings (window, warm-up, workers, ...) and the staged tier")
    s.add_argument("--loaders", nargs="+", required=True, help="built-in loader names (or plugins)")
    s.add_argument("--tier", help="default: the config's first")
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", nargs="+", choices=["fp32", "amp"], default=["fp32"])
    s.add_argument("--rounds", type=int, default=2, help="cell and bare loop each, alternating (default 2)")
    model_option(s, "each model of the config's `models`")
    s.add_argument("--out", help="folder for crosscheck.json and the cells' records (default <results>/crosscheck)")
    side_measurement(s, cmd_crosscheck)


def _add_searches(add) -> None:
    """sweep, tune, predict and engine-report: settings searched, rates predicted, the engine's cost read."""
    s = add("sweep", help="the same cells under variants of settings (a tuning experiment outside the grid)")
    s.add_argument("--config", required=True)
    s.add_argument(
        "--variant",
        action="append",
        required=True,
        help="name:field=value,... over cell settings, e.g. hw1:dali_hw_decoder_load=1.0 (repeatable)",
    )
    s.add_argument("--loaders", nargs="+", required=True)
    s.add_argument("--tier", help="default: the config's first")
    batch_and_precision(s)
    s.add_argument("--repeats", type=int, default=1)
    model_option(s, "each model of the config's `models`")
    s.add_argument("--out", help="records folder (default <results>/sweep)")
    side_measurement(s, cmd_sweep)

    s = add(
        "tune",
        help="search one loader's settings on this host within a time budget, against the ceiling, the knobs that "
        "measured the larger gains first (on a GPU host the training step's stream priority and a captured step too); "
        "the best with its interval, the config lines to paste and the knobs the budget did not reach",
    )
    s.add_argument("--config", required=True, help="the starting settings and the staged tier")
    s.add_argument(
        "--loader",
        required=True,
        help="a loader of the registry (torchvision, dali-cpu, wds, ...) or a plugin that declares loaderbench_knobs",
    )
    s.add_argument("--tier", help="default: the config's first")
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument(
        "--precision",
        choices=["fp32", "amp"],
        help="default: the config's (its baseline's where the config measures it, else its first)",
    )
    model_option(s, "each model of the config's `models` in turn, each with its own budget")
    s.add_argument("--budget-s", type=float, default=300.0, help="time for the search's cells, per model (default 300)")
    s.add_argument(
        "--out",
        help="folder of a folder per model (<out>/<model>: its records and tune.json; default <results>/tune/<loader>)",
    )
    s.add_argument("--json", help="also write the report here (a list of reports, one per model, for several)")
    side_measurement(s, cmd_tune)

    s = add(
        "predict",
        help="each cell's samples/s predicted from its parts (the loader alone, the model's ceiling, the host's "
        "cores), and at more GPUs from one GPU's cells, against the measured",
    )
    s.add_argument(
        "--records",
        action="append",
        required=True,
        metavar="DIR",
        help="a folder holding cell records: every cells/*.json beneath it (repeatable)",
    )
    s.add_argument("--fit-model", help="the model whose cells k is fitted on (default: the most measured)")
    s.add_argument("--gpus", type=int, nargs="+", default=[2, 4], help="GPU counts to predict (default 2 4)")
    s.add_argument("--k", type=float, help="use this k instead of fitting it (inf: the hard minimum)")
    s.add_argument("--out", help="write the 1-GPU table to this CSV, and the n-GPU table beside it (<stem>.scale.csv)")
    s.set_defaults(func=cmd_predict)

    s = add("engine-report", help="the engine's cost and trust: per-cell overhead, convergence, dp/ddp, spread")
    s.add_argument("--cells", default=RESULTS.cells, help="folder of cell records (default %(default)s)")
    s.add_argument("--ceiling", help="a `loaderbench ceiling --json` file to include")
    s.add_argument("--json", help="also write the report as JSON here")
    s.set_defaults(func=cmd_engine_report)


def cmd_bench(a) -> int:
    from loaderbench.experiments.bench import bench

    cfg = config_of(a)
    tier = a.tier or cfg["tiers"][0]
    loaders = a.loaders or ["torchvision", "opencv"]
    with measuring_lock(a, "bench", 1, cfg):
        r = bench(
            Path(Layout(a.results).manifest(tier)),
            loaders,
            a.batch_size,
            cfg["crop_size"],
            a.workers,
            a.seconds,
            a.rounds,
        )
    print(
        f"loader-only throughput (model: {r['model']}) delivered to {r['device']}, tier {r['tier']}, {r['files']} "
        f"files, batch {a.batch_size}, {r['workers']} workers, {a.rounds} rounds x {a.seconds:g} s after a warm-up "
        "that drains the prefetch:"
    )
    for lo, v in r["images_per_s"].items():
        runs = ", ".join(f"{x:.0f}" for x in r["images_per_s_all"][lo])
        print(f"  {lo:12s} {v:8.1f} images/s (median; rounds: {runs})")
    if {"torchvision", "opencv"} <= set(loaders):
        print(f"  opencv / torchvision = {r['images_per_s']['opencv'] / r['images_per_s']['torchvision']:.2f}x")
    write_json(a, r)
    return 0


def ceiling_models(cfg: dict, model: str | None) -> list[str]:
    """The models `ceiling` measures: `measured_models` but `none`, which trains nothing and so has no ceiling."""
    models = [m for m in measured_models(cfg, model) if m != NO_MODEL]
    if not models:
        where = f"--model {NO_MODEL}" if model else f"config key 'models' ({NO_MODEL} only)"
        raise ConfigError(
            f"{where}: the ceiling is a model's training step on batches already on the device, and `{NO_MODEL}` "
            "trains nothing; name a model with --model"
        )
    return models


def cmd_ceiling(a) -> int:
    from loaderbench.core.cells import cell_id
    from loaderbench.experiments.ceiling import ceiling

    cfg = config_of(a)
    tier = cfg["tiers"][0]
    specs = []
    for model in ceiling_models(cfg, a.model):
        cid = cell_id("synthetic", tier, 1, a.batch_size or cfg["batch_sizes"][-1], a.precision, "dp", 0, model)
        spec = cell_spec(cfg, cid, in_grid=False)
        specs.append(dataclasses.replace(spec, compile=True) if a.compile else spec)
    reports = []
    for spec in specs:
        with measuring_lock(a, "ceiling", 1, cfg):
            r = ceiling(
                spec,
                Path(Layout(a.results).manifest(tier)),
                a.rounds,
                a.variant_steps,
                Path(Layout(a.results).ceiling),
                timeout_s=cfg["cell_timeout_s"],
                host=host_settings(a, cfg),
            )
        print(render_ceiling(r, spec, a.rounds))
        reports.append(r)
    write_json(a, reports[0] if len(reports) == 1 else reports)
    return 0


def render_ceiling(r: dict, spec, rounds: int) -> str:
    """A `ceiling` report as printed: the model, both loops by round, their ratio and the input variants."""
    window = (
        f"{spec.window_steps} steps"
        if spec.window_steps
        else f"{spec.window_s:g} s"
        if spec.window_s
        else f"adaptive (+-{100 * spec.window_precision:g}%, at most {spec.window_max_s:g} s)"
    )
    lines = [
        (
            f"compute ceiling on {r['device']}: model {r['model']}, batch {r['batch_size']}, {r['precision']}, "
            f"channels_last={r['channels_last']}, compile={r['compile']}, cudnn.benchmark={r['cudnn_benchmark']}; "
            f"window {window} after the cell's warm-up, {rounds} alternating rounds, each in a fresh process"
        ),
        f"  placement (both loops): {json.dumps(r['placement'])}",
    ]
    for s_, b_, n, ph in zip(r["synthetic_samples_per_s"], r["bare_samples_per_s"], r["steps"], r["synthetic_phases"]):
        lines.append(
            f"  synthetic cell {s_:9.1f} Samples/s   bare loop {b_:9.1f} Samples/s   ({n} steps each)  ratio "
            f"{s_ / b_:.4f}   (cell setup {ph['setup_s']:.1f} s, first step {ph['first_step_s']:.1f} s, warm-up "
            f"{ph['warmup_steps']} steps {ph['warmup_s']:.1f} s)"
        )
    lines.append(f"  synthetic / bare loop (median of rounds) = {r['synthetic_over_bare']:.4f}")
    for name, ms in (r.get("input_variants_ms_per_step") or {}).items():
        lines.append(f"  amp step, input {name:26s} {ms:8.2f} ms/step")
    return "\n".join(lines)


def require_cells(loaders: list[str], models: list[str]) -> None:
    """Refuse loaders and models of which no cell can be made (synthetic x none measures nothing)."""
    from loaderbench.core.cells import is_cell

    if not any(is_cell(lo, m) for lo in loaders for m in models):
        raise ConfigError(
            f"--loaders {' '.join(loaders)} with model {', '.join(models)}: no cell (synthetic x {NO_MODEL} measures "
            "nothing); name a loader that reads files, or a model with --model"
        )


def cmd_crosscheck(a) -> int:
    from loaderbench.experiments.crosscheck import crosscheck, render

    cfg = config_of(a)
    tier = a.tier or cfg["tiers"][0]
    batch = a.batch_size or cfg["batch_sizes"][-1]
    out = Path(a.out or Layout(a.results).crosscheck)
    if a.rounds < 1:
        raise ConfigError("--rounds: at least 1")
    from loaderbench.core.resolve import resolve_loaders

    loaders = resolve_loaders(cfg, a.loaders, "--loaders")  # built-ins, the config's plugins, or 'module:factory'
    models = measured_models(cfg, a.model)
    require_cells(loaders, models)
    with measuring_lock(a, "crosscheck", 1, cfg):
        rows = crosscheck(
            cfg,
            loaders,
            tier,
            batch,
            a.precision,
            a.rounds,
            Path(Layout(a.results).manifest(tier)),
            out,
            host=host_settings(a, cfg),
            models=models,
        )
    print(
        f"crosscheck on tier {tier}, 1 GPU x batch {batch}, model {', '.join(models)}: each cell against a bare loop "
        f"of its loader, {a.rounds} alternating round(s) in fresh processes; cell/bare [95% interval]; "
        f"{out / 'crosscheck.json'}"
    )
    print(render(rows))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def cmd_tune(a) -> int:
    from loaderbench.experiments.tune import config_precision, tune
    from loaderbench.experiments.tunereport import render

    cfg = config_of(a)
    tier = a.tier or cfg["tiers"][0]
    batch = a.batch_size or cfg["batch_sizes"][-1]
    if a.budget_s <= 0:
        raise ConfigError("--budget-s: a positive number of seconds")
    from loaderbench.core.resolve import resolve_loaders

    loader = resolve_loaders(cfg, [a.loader], "--loader")[0]  # a built-in, the config's plugin, or 'module:factory'
    models = measured_models(cfg, a.model)
    out = Path(a.out or Path(Layout(a.results).root) / "tune" / loader)
    precision = a.precision or config_precision(cfg)
    reports = []
    for model in models:  # one search per model, each its own budget: settings that feed one model may starve another
        with measuring_lock(a, "tune", 1, cfg):
            rep = tune(
                cfg,
                loader,
                tier,
                batch,
                precision,
                a.budget_s,
                Path(Layout(a.results).manifest(tier)),
                out / model,
                host=host_settings(a, cfg),
                model=model,
            )
        print(render(rep))
        reports.append(rep)
    write_json(a, reports[0] if len(reports) == 1 else reports)
    return 0 if all(rep["samples_per_s"] for rep in reports) else 1


def cmd_engine_report(a) -> int:
    from loaderbench.report.enginereport import load, render, report

    ceiling = json.loads(Path(a.ceiling).read_text()) if a.ceiling else None
    if isinstance(ceiling, list):  # `ceiling --json` of several models
        raise ConfigError(
            f"--ceiling {a.ceiling}: the ceilings of {len(ceiling)} models "
            f"({', '.join(str(c.get('model')) for c in ceiling)}); give one model's (`loaderbench ceiling --model M "
            "--json FILE`)"
        )
    rep = report(load(Path(a.cells)), ceiling)
    print(render(rep))
    write_json(a, rep)
    return 0


def cmd_sweep(a) -> int:
    from loaderbench.experiments.sweep import render, sweep

    cfg = config_of(a)
    tier = a.tier or cfg["tiers"][0]
    batch = a.batch_size or cfg["batch_sizes"][-1]
    models = measured_models(cfg, a.model)
    require_cells(a.loaders, models)
    out = Path(a.out or Layout(a.results).sweep)
    with measuring_lock(a, "sweep", max(cfg["gpus"]), cfg):  # held across its cells (each cell's own lock: a no-op)
        rows = sweep(
            cfg,
            a.variant,
            a.loaders,
            tier,
            batch,
            a.precision,
            a.repeats,
            Path(Layout(a.results).manifest(tier)),
            out,
            host=host_settings(a, cfg),
            models=models,
        )
    print(
        f"sweep on tier {tier}, model {', '.join(models)}, batch {batch}, {a.precision}, {a.repeats} interleaved "
        f"repeat(s); records in {out}; AU against the variant's synthetic cell of the model (else the first's)"
    )
    print(render(rows))
    return 0


def cmd_predict(a) -> int:
    from loaderbench.core.comparable import group_of
    from loaderbench.core.records import CorruptRecord, read_record
    from loaderbench.core.util import atomic_write_text
    from loaderbench.whatif import predict, render_predict, render_scale, scale

    records, folders, commits, seen = [], {}, {}, set()
    for d in a.records:
        if not Path(d).is_dir():
            raise ConfigError(f"--records {d}: no such folder")
        files = sorted(p for p in Path(d).rglob("*.json") if p.parent.name == "cells")
        if not files:
            raise ConfigError(f"--records {d}: no cell record (cells/*.json) beneath it")
        for p in files:
            try:
                r = read_record(p)
            except CorruptRecord as e:
                print(f"loaderbench predict: {e}; left out", file=sys.stderr)
                continue
            # the same record in two places (results/cells and the bundle's copy): one measurement
            key = (r.get("cell_id"), r.get("spec_hash"), r.get("started_at"), r.get("finished_at"))
            if key in seen:
                continue
            seen.add(key)
            records.append(r)
            folders.setdefault(group_of(r), set()).add(d)
            commit = ((r.get("provenance") or {}).get("git") or {}).get("commit")
            commits.setdefault(group_of(r), set()).add(str(commit)[:7] if commit else "unknown")
    if any(g < 2 for g in a.gpus):
        raise ConfigError("--gpus: GPU counts of 2 or more (1 GPU is the table of parts)")
    try:
        cells = predict(records, a.fit_model)
    except ValueError as e:
        raise ConfigError(f"--fit-model: {e}") from None
    more = scale(records, tuple(a.gpus), k=a.k, fit_model=a.fit_model)
    print(f"{len(records)} cell records from {', '.join(a.records)}")
    for group, dirs in sorted(folders.items()):
        if len(dirs) > 1:
            print(
                f"  note: {group!r} has records in {', '.join(sorted(dirs))}: they compare (one boot, code and stack)"
            )
        if len(commits[group]) > 1:
            print(
                f"  note: {group!r} holds records of {len(commits[group])} code commits "
                f"({', '.join(sorted(commits[group]))}): taken as one group (records that name no boot or code cannot "
                "be told apart)"
            )
    out = Path(a.out) if a.out else None
    beside = out.with_name(f"{out.stem}.scale.csv") if out else None
    print(render_predict(cells))
    print()
    print(render_scale(more, str(beside) if beside else None))
    if out:
        atomic_write_text(out, cells.to_csv(index=False, float_format="%.6g"))
        atomic_write_text(beside, more.to_csv(index=False, float_format="%.6g"))
        print(f"wrote {out} and {beside}")
    return 0
