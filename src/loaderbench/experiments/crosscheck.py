"""Does the harness slow the loader it measures? A cell against a bare loop of the same loader object.

The bare loop is what a user's training script does: the loader the cell builds (`step.loader_context`, the
registry), the cell's model and step, `for batch in loader: step(batch)` in a fresh process - no runner, watchdog,
telemetry, thread placement, stop rule or window bookkeeping. After the same warm-up rule as a cell (until the
prefetch backlog is spent) it runs for the cell's window time, noting only each step's wait for its batch and its end
(two clock reads; on a GPU an end event, the device's clock, as a cell's), with garbage collection held and a cold
tier kept cold as in a cell, so that a worker-fed loader that delivers in bursts has its rate taken over whole bursts
as a cell's is. Rounds alternate the order of cell and bare loop, each in its own process; cell/bare and its
interval come from `uncertainty.ratio`. Each row trains one model: each of the config's, or one named
(`loaderbench crosscheck --model`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

from loaderbench.core.cells import CellSpec, cell_id, cell_spec, config_models, is_cell
from loaderbench.core.config import ConfigError
from loaderbench.core.layout import read_root
from loaderbench.core.registry import DEFAULT_MODEL, loader_record
from loaderbench.core.uncertainty import ratio
from loaderbench.core.util import atomic_write_json
from loaderbench.data.manifest import Staged, class_names
from loaderbench.engine.process.batchmeans import relative_halfwidth
from loaderbench.engine.process.bursts import burst_bounds, delivers_in_bursts
from loaderbench.engine.process.window import hold_collection, warm_up
from loaderbench.engine.runner import warmclient
from loaderbench.engine.watchdog import Heartbeat


def bare_loop(spec: CellSpec, manifest: Path, seconds: float) -> dict:
    """The loader and step of `spec`'s cell in a plain loop, in this process: its Samples/s and what it ran."""
    import torch

    from loaderbench.engine import placement
    from loaderbench.engine.process import parallel
    from loaderbench.engine.step import configure_cudnn, loader_context, training_step
    from loaderbench.loaders import get_loader

    if spec.parallel != "dp":
        raise ConfigError("crosscheck runs dp cells only (one process)")
    from loaderbench.engine.runner.tier_run import keep_cold

    manifest_data = json.loads(Path(manifest).read_text())
    allowed = Staged.from_manifest(manifest_data).allowed
    dist = parallel.start("dp", spec.gpus, 600.0)
    threads = placement.set_intra_op_threads("dp", 1)  # the cell's intra-op threads, whatever OMP_NUM_THREADS says
    device = dist.device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    torch.manual_seed(spec.seed)
    if device.type == "cuda":
        configure_cudnn(spec)
    ctx = loader_context(spec, read_root(manifest_data, spec.read_path or spec.tier_path), allowed, device, None)
    batches = get_loader(spec.loader, spec.loader_ref).build(ctx)
    prescattered = bool(ctx.info.get("prescattered"))
    _, step = training_step(
        spec, len(class_names(allowed)), device, wrap=lambda m: parallel.wrap(m, dist, spec.gpus, prescattered)
    )
    backlog = ctx.info["prefetch_batches"]
    hold_collection()  # as a cell does: no collection pauses in the warm-up and the loop
    cold = keep_cold(spec, manifest_data, evict_first=True)  # a cold tier read as a cell reads it
    warm, _ = warm_up(
        step, batches, max(spec.warmup_steps, backlog + 2), sync, Heartbeat(None), min_steps=spec.warmup_steps
    )
    waits, ends, events = [], [], []
    clock = time.perf_counter
    # on a GPU the device's clock, as a cell's: an event where the loop starts and one after each step (recording
    # one costs microseconds and synchronises nothing)
    event = (lambda: torch.cuda.Event(enable_timing=True)) if device.type == "cuda" else None
    start = event() if event else None
    if start is not None:
        start.record()
    t0 = clock()
    while True:
        t = clock()
        batch = next(batches)
        waits.append(clock() - t)
        step(*batch)
        if event:
            events.append(event())
            events[-1].record()
        ends.append(clock() - t0)
        if ends[-1] >= seconds:
            break
    sync()
    if cold is not None:
        cold.stop()
    if events:
        ends = [start.elapsed_time(e) / 1000.0 for e in events]
    burst = int(ctx.info.get("workers") or 1) if loader_record(spec.loader).backlog == "workers" else 1
    bounds = burst_bounds(waits, ends, burst) if burst > 1 else None
    steps, span = len(ends), ends[-1]
    hw = relative_halfwidth(ends)
    if delivers_in_bursts(waits, ends, bounds):  # whole bursts, from the first burst start's end to the last's
        first, last = bounds[0], bounds[-1]
        base = ends[first] if first >= 0 else 0.0
        kept = [e - base for e in ends[first + 1 : last + 1]]
        steps, span = last - first, kept[-1]
        hw = relative_halfwidth(kept, bounds=[j - first - 1 for j in bounds])
    return {
        "samples_per_s": steps * spec.batch_size * spec.gpus / span,
        "steps": steps,
        "seconds": span,
        "halfwidth": hw,
        "warmup_steps": len(warm),
        "workers": ctx.info.get("workers"),
        "intra_op_threads": threads,
        "loader_info": {k: v for k, v in ctx.info.items() if isinstance(v, (str, int, float, bool))},
    }


def _bare_process(spec: CellSpec, manifest: Path, seconds: float, timeout_s: float) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "loaderbench.experiments.crosscheck",
        "--spec",
        json.dumps(spec.to_dict()),
        "--manifest",
        str(manifest),
        "--seconds",
        str(seconds),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s)
    if out.returncode != 0:
        raise RuntimeError(f"bare loop of {spec.cell_id} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def crosscheck(
    cfg: dict,
    loaders: list[str],
    tier: str,
    batch_size: int,
    precisions: list[str],
    rounds: int,
    manifest: Path,
    out_dir: Path,
    host=None,
    models: list[str] | None = None,
) -> list[dict]:
    """Per (model, loader, precision), each of `models` (None: the config's): `rounds` cells (real cell jobs, forked
    warm as in a pipeline run) and as many bare loops, alternating which goes first; one row each with both rates and
    cell/bare with its interval."""
    from loaderbench.engine.runner.runcell import run_cell

    rows = []
    models = models or config_models(cfg)
    configurations = [(m, lo, p) for m in models for lo in loaders for p in precisions if is_cell(lo, m)]
    with warmclient.serving():
        for model, lo, precision in configurations:
            base = cell_spec(cfg, cell_id(lo, tier, 1, batch_size, precision, "dp", 0, model), in_grid=False)
            cells, bares, reasons = [], [], []
            for r in range(rounds):
                spec = dataclasses.replace(base, seed=base.seed + r, repeat=r)
                order = ("cell", "bare") if r % 2 == 0 else ("bare", "cell")
                for what in order:
                    if what == "cell":
                        rec = run_cell(
                            spec,
                            manifest,
                            Path(out_dir) / "cells" / f"{spec.cell_id}.json",
                            Path(out_dir) / "telemetry" / f"{spec.cell_id}.csv",
                            host=host,
                            trace=Path(out_dir) / "traces" / f"{spec.cell_id}.trace.json",
                        )
                        if rec["status"] != "ok":
                            reasons.append(f"cell {rec['status']}: {rec.get('reason')}")
                        cells.append(rec)
                    else:
                        seconds = max(spec.window_min_s, spec.window_s or 0.0, _window_s(cells) or 0.0)
                        try:
                            bare = _bare_process(spec, manifest, seconds, cfg["cell_timeout_s"])
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            reasons.append(f"bare loop: {e}")
                            continue
                        bares.append(bare)
                        atomic_write_json(Path(out_dir) / "bare" / f"{spec.cell_id}.json", bare)
            rows.append(_row(lo, precision, batch_size, tier, cells, bares, reasons, model))
            # after every configuration: an interrupted crosscheck keeps what it measured
            atomic_write_json(
                Path(out_dir) / "crosscheck.json",
                {"tier": tier, "batch_size": batch_size, "rounds": rounds, "models": models, "rows": rows},
            )
    return rows


def _window_s(cells: list[dict]) -> float | None:
    ok = [c["metrics"]["time_s"] for c in cells if c["status"] == "ok"]
    return ok[-1] if ok else None


def _row(
    loader: str,
    precision: str,
    batch_size: int,
    tier: str,
    cells: list[dict],
    bares: list[dict],
    reasons: list[str],
    model: str = DEFAULT_MODEL,
) -> dict:
    ok = [c["metrics"] for c in cells if c["status"] == "ok"]
    row = {
        "model": model,
        "loader": loader,
        "precision": precision,
        "batch_size": batch_size,
        "tier": tier,
        "cell_samples_per_s": [m["samples_per_s"] for m in ok],
        "cell_halfwidth": [m["window"]["ci95_rel_halfwidth"] for m in ok],
        "bare_samples_per_s": [b["samples_per_s"] for b in bares],
        "bare_halfwidth": [b["halfwidth"] for b in bares],
        "reasons": reasons,
    }
    if reasons or len(ok) != len(bares) or not ok:
        row["status"] = "failed"
        return row
    pairs = [
        (m["samples_per_s"], b["samples_per_s"], m["window"]["ci95_rel_halfwidth"], b["halfwidth"])
        for m, b in zip(ok, bares, strict=True)
    ]
    row.update(status="ok", cell_over_bare=ratio(pairs).to_dict())
    return row


def render(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        # a row from before rows named their model trained the default
        head = f"  {r.get('model') or DEFAULT_MODEL:14s} {r['loader']:12s} {r['precision']:4s}"
        if r["status"] != "ok":
            lines.append(f"{head} failed: {'; '.join(r['reasons'])}")
            continue
        q = r["cell_over_bare"]
        verdict = (
            "harness costs the loader"
            if q["high"] < 1
            else "harness faster than bare?"
            if q["low"] > 1
            else "no measurable difference"
        )
        cells = ", ".join(f"{x:.0f}" for x in r["cell_samples_per_s"])
        bares = ", ".join(f"{x:.0f}" for x in r["bare_samples_per_s"])
        lines.append(
            f"{head} cell {cells} | bare {bares} Samples/s | cell/bare {q['value']:.3f} "
            f"[{q['low']:.3f}, {q['high']:.3f}] ({q['rounds']} rounds): {verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`python -m loaderbench.experiments.crosscheck`: one bare loop in this process; JSON on stdout."""
    p = argparse.ArgumentParser(prog="python -m loaderbench.experiments.crosscheck")
    p.add_argument("--spec", required=True)
    p.add_argument("--manifest", required=True, type=Path)
    p.add_argument("--seconds", type=float, required=True)
    a = p.parse_args(argv)
    out = bare_loop(CellSpec.from_dict(json.loads(a.spec)), a.manifest, a.seconds)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    from loaderbench.engine import placement
    from loaderbench.engine.process.entry import exit_now

    placement.remember_default_threads()  # a fresh process: torch's own count, unless the environment set one
    exit_now(main())
