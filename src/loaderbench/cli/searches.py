"""`sweep`, `tune`, `predict` and `engine-report`: settings searched, rates predicted, the engine's cost read."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from loaderbench.core.config import ConfigError
from loaderbench.core.layout import RESULTS, Layout
from loaderbench.core.resolve import measured_models

from .common import (
    batch_and_precision,
    config_of,
    config_option,
    host_settings,
    measuring_lock,
    model_option,
    require_cells,
    side_measurement,
    write_json,
)


def add_searches(add) -> None:
    """sweep, tune, predict and engine-report: settings searched, rates predicted, the engine's cost read."""
    s = add("sweep", help="the same cells under variants of settings (a tuning experiment outside the grid)")
    config_option(s)
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
        help="every loader x model x GPU count's samples/s predicted from its parts (the loader alone or its rank "
        "parts, the model's ceiling, the loader's beside part, the host's cores), scored per class on the measured",
    )
    s.add_argument(
        "--records",
        action="append",
        required=True,
        metavar="DIR",
        help="a folder holding cell records: every cells/*.json beneath it (repeatable)",
    )
    s.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4], help="GPU counts of the matrix (default 1 2 4)")
    s.add_argument(
        "--parts-from",
        metavar="DIR",
        help="records of another host whose loader parts (alone, rank, beside) stand in for those --records lacks, "
        "carried by the cores rule (docs/method.md); only the rows they predict are shown and scored",
    )
    s.add_argument("--out", help="write the matrix to this CSV")
    for gone in ("--fit-model", "--k"):  # refused with what replaced them (cmd_predict)
        s.add_argument(gone, help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_predict)

    s = add("engine-report", help="the engine's cost and trust: per-cell overhead, convergence, dp/ddp, spread")
    s.add_argument("--cells", default=RESULTS.cells, help="folder of cell records (default %(default)s)")
    s.add_argument("--ceiling", help="a `loaderbench ceiling --json` file to include")
    s.add_argument("--json", help="also write the report as JSON here")
    s.set_defaults(func=cmd_engine_report)


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


def cmd_predict(a) -> int:
    from loaderbench.core.comparable import group_of
    from loaderbench.core.util import atomic_write_text
    from loaderbench.whatif import matrix, render_matrix

    if a.fit_model is not None or a.k is not None:
        raise ConfigError(
            f"{'--fit-model' if a.fit_model is not None else '--k'}: removed - nothing is fitted now: the slowest of "
            "three terms (the loader side, the GPU side, the consuming process) sets the rate, every measured cell "
            "is a check, scored per class and per model (docs/method.md, 'Predicted samples/s')"
        )
    if any(g < 1 for g in a.gpus):
        raise ConfigError("--gpus: GPU counts of 1 or more")
    records, folders, commits = [], {}, {}
    for d, r in _records_in(a.records, "--records"):
        records.append(r)
        folders.setdefault(group_of(r), set()).add(d)
        commit = ((r.get("provenance") or {}).get("git") or {}).get("commit")
        commits.setdefault(group_of(r), set()).add(str(commit)[:7] if commit else "unknown")
    parts_from = [r for _, r in _records_in([a.parts_from], "--parts-from")] if a.parts_from else None
    df = matrix(records, tuple(a.gpus), parts_from=parts_from)
    print(f"{len(records)} cell records from {', '.join(a.records)}")
    if parts_from is not None:
        print(
            f"loader parts carried from {a.parts_from} ({len(parts_from)} records) by the cores rule: {len(df)} rows "
            f"predicted from them; {df.attrs['left_out']} rows with no carried loader part left out"
        )
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
    print(render_matrix(df))
    if a.out:
        atomic_write_text(Path(a.out), df.to_csv(index=False, float_format="%.6g"))
        print(f"wrote the matrix ({len(df)} rows) to {a.out}")
    return 0


def _records_in(folders: list[str], option: str):
    """(folder, record) for every cell record (cells/*.json) beneath each folder, each measurement once (a run's
    cells and its bundle's copy are one); a corrupt record left out with a line on stderr."""
    from loaderbench.core.records import CorruptRecord, read_record
    from loaderbench.whatif.measured import measurement

    seen = set()
    for d in folders:
        if not Path(d).is_dir():
            raise ConfigError(f"{option} {d}: no such folder")
        files = sorted(p for p in Path(d).rglob("*.json") if p.parent.name == "cells")
        if not files:
            raise ConfigError(f"{option} {d}: no cell record (cells/*.json) beneath it")
        for p in files:
            try:
                r = read_record(p)
            except CorruptRecord as e:
                print(f"loaderbench predict: {e}; left out", file=sys.stderr)
                continue
            if measurement(r) not in seen:
                seen.add(measurement(r))
                yield d, r
