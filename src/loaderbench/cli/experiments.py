"""Side measurements outside the grid, each against a reference: loader-only throughput, the ceiling, the harness
against a bare loop; settings sweeps and searches, predictions and the engine's own cost come from `searches`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError
from loaderbench.core.layout import Layout
from loaderbench.core.registry import NO_MODEL
from loaderbench.core.resolve import measured_models

from .common import (
    batch_and_precision,
    config_of,
    host_settings,
    measuring_lock,
    model_option,
    require_cells,
    side_measurement,
    write_json,
)
from .searches import add_searches

TITLE = "Measure outside the grid"


def register(add) -> None:
    """Add this group's subcommands (`add` is `add_parser` that also lists the command under TITLE)."""
    _add_harness_checks(add)
    add_searches(add)


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
    for s_, b_, n, ph in zip(
        r["synthetic_samples_per_s"], r["bare_samples_per_s"], r["steps"], r["synthetic_phases"], strict=True
    ):
        lines.append(
            f"  synthetic cell {s_:9.1f} Samples/s   bare loop {b_:9.1f} Samples/s   ({n} steps each)  ratio "
            f"{s_ / b_:.4f}   (cell setup {ph['setup_s']:.1f} s, first step {ph['first_step_s']:.1f} s, warm-up "
            f"{ph['warmup_steps']} steps {ph['warmup_s']:.1f} s)"
        )
    lines.append(f"  synthetic / bare loop (median of rounds) = {r['synthetic_over_bare']:.4f}")
    for name, ms in (r.get("input_variants_ms_per_step") or {}).items():
        lines.append(f"  amp step, input {name:26s} {ms:8.2f} ms/step")
    return "\n".join(lines)


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
