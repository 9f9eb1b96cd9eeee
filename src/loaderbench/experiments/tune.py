"""`loaderbench tune`: one loader's settings searched on this host within a time budget, against the ceiling.

The cells train one model (the config's, or one named: `loaderbench tune --model`; the CLI tunes each of the
config's models in turn). Coordinate search from the config's settings: each knob in turn (worker or thread count, prefetch depth, DALI's
hardware-decoder share, torchvision's transport, and on a GPU the training step's stream priority and a captured
step), coarse values first, then the count's neighbours of the best. The knobs that measured the larger gains come
first (`DALI_ORDER`), and a knob that feeds the step faster (`FEEDING`) goes last while the step's batches are ready.
A round measures every live candidate once, in fresh processes, with the ceiling (`synthetic`, with the candidate's
step settings) beside it; a candidate whose interval against the incumbent lies below 1 after a round is dropped, and
a knob moves only to a value whose interval lies above 1. The report: the best setting with its interval against the
start and its AU, what limits it, the config lines to paste, and the knobs the budget did not reach.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import yaml

from loaderbench.core.cells import CAPTURED, CONFIG_KEY_OF, STEP_SETTINGS, cell_id, cell_spec, config_models
from loaderbench.core.config import ConfigError
from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL, LoaderRecord, loader_record, plugin_record
from loaderbench.core.uncertainty import Ratio, ratio
from loaderbench.engine.runner import warmclient
from loaderbench.report.diagnose import WAIT_SHARE  # a step waiting less than this share of itself had its batch
from loaderbench.report.verdict import tuned_fix

# The order the DALI loaders' knobs are searched in, by the gains measured on one H200 (MobileNetV2, fp16, batch 256,
# staged files; 2026-12-01 to 03): every JPEG to the hardware decoder bought dali-sc +6-20% (7,139 -> 7,788 samples/s
# in one run); the step on a high-priority stream +12-18% for mixed decoding and +2% for dali-cpu (a plain script);
# more threads or a deeper prefetch nothing measurable while batches were ready (data wait 2-6%); a captured step about
# +10% for dali-cpu and nothing for mixed decoding.
DALI_ORDER = ("dali_hw_decoder_load", "step_stream_priority", "dali_threads", "dali_prefetch", "compile")

# Knobs that deliver batches faster: no help to a step whose batches are ready (data wait under WAIT_SHARE)
FEEDING = ("workers", "prefetch_factor", "dali_threads", "dali_prefetch", "shard_readers")

# Knobs of the training step that need a CUDA device (engine.step.check_step_settings), with why
GPU_KNOBS = {
    "step_stream_priority": "a CUDA stream's priority: this host has no CUDA device",
    "compile": f"a captured step ({CAPTURED}: CUDA graphs): this host has no CUDA device",
}


def knobs(loader: str, spec, cpus: int, cuda: bool = False) -> dict[str, list]:
    """The settings `tune` searches for `loader` in the order it searches them, each with its coarse values (the
    config's own first); the step's knobs (GPU_KNOBS) only on a host with a CUDA device (`cuda`). A built-in loader's
    follow from its registry record (`_searched`); a plugin declares its own as its factory's `loaderbench_knobs`:
    names of these settings that it reads from the context."""
    counts = sorted({max(1, cpus // 4), max(1, cpus // 2), max(1, cpus - 1)})
    values = {
        "workers": counts,
        "prefetch_factor": [2, 4],
        "torchvision_transport": ["float32", "uint8"],
        "dali_threads": counts,
        "dali_prefetch": [2, 3],
        "dali_hw_decoder_load": [0.65, 1.0],
        "shard_readers": [1, 2, 0],
        "step_stream_priority": ["default", "high"],
        "compile": [False, CAPTURED],
    }
    if spec.loader_ref:
        from loaderbench.loaders.plugin import factory

        try:
            names = list(plugin_record(factory(spec.loader_ref)).knobs)
        except ValueError as e:
            raise ConfigError(f"plugin {spec.loader_ref}: {e}") from None
        if bad := [n for n in names if n not in values]:
            raise ConfigError(
                f"plugin {spec.loader_ref}: loaderbench_knobs names {', '.join(bad)}; it may name {', '.join(values)}"
            )
    else:
        names = _searched(loader_record(loader))
    if not names:
        raise ConfigError(
            f"--loader {loader}: it has no settings to tune (tunable: torchvision, opencv, nvjpeg, "
            "dali-cpu, dali-sc, dali-mc, and plugins that declare loaderbench_knobs)"
        )
    out = {name: list(values[name]) for name in names if cuda or name not in GPU_KNOBS}
    for name, vals in out.items():
        start = getattr(spec, name)
        if isinstance(start, int | float | str) and start != "auto" and start not in vals:
            vals.insert(0, start)
    return out


def _searched(record: LoaderRecord) -> list[str]:
    """A built-in loader's knobs from its record: its workers' or its DALI pipeline's (DALI's hardware decoder only for
    one that decodes on the GPU), its own (`knobs`), and the step's: a high-priority stream only beside device work
    of its own (mixed or GPU decoding, GPU augmentation), a captured step for any loader with a backlog."""
    if record.backlog == "workers":
        step = (["step_stream_priority"] if record.device_work else []) + ["compile"]
        return ["workers", "prefetch_factor", *record.knobs, *step]
    if record.backlog == "dali":
        return [n for n in DALI_ORDER if n != "dali_hw_decoder_load" or record.decodes == "gpu"] + list(record.knobs)
    return list(record.knobs)


def not_applicable(loader: str, spec, cpus: int, cuda: bool) -> dict[str, str]:
    """The knobs of `loader` left out of the search on this host, each with why (the step's, without a CUDA device)."""
    searched = knobs(loader, spec, cpus, cuda)
    return {name: GPU_KNOBS[name] for name in knobs(loader, spec, cpus, cuda=True) if name not in searched}


def cuda_host() -> bool:
    """Whether this host has a CUDA device, without starting CUDA in the searching process."""
    return Path("/dev/nvidiactl").exists()


def config_precision(cfg: dict) -> str:
    """The precision `tune` measures at unless told: the baseline's where the config measures it, else its first."""
    baseline = (cfg.get("baseline") or {}).get("precision")
    return baseline if baseline in cfg["precisions"] else cfg["precisions"][0]


def effective(spec, name: str, cpus: int):
    """The value a cell of `spec` runs knob `name` at on a host of `cpus` usable CPUs: `auto` resolved as the
    measuring process resolves it (one GPU, dp), anything else as it is."""
    from loaderbench.engine import placement
    from loaderbench.engine.step import resolve_workers

    value = getattr(spec, name)
    if value != "auto" or name not in ("workers", "dali_threads"):
        return value
    kind = "cuda" if cuda_host() else "cpu"
    place = placement.plan(frozenset(range(cpus)), spec.gpus) if placement.wanted(spec.placement, kind) else None
    if name == "workers":
        return resolve_workers(spec, place, usable=cpus)
    return max(1, len(place.others) if place else cpus - 1)  # loaders.dali's `auto`, one pipeline


class Tuner:
    """The search's state: every measured setting's rates by round, the ceiling's, and the time left."""

    def __init__(
        self,
        cfg: dict,
        loader: str,
        tier: str,
        batch: int,
        precision: str,
        manifest: Path,
        out: Path,
        budget_s: float,
        host=None,
        model: str = DEFAULT_MODEL,
    ):
        self.cfg, self.loader, self.tier, self.batch, self.precision = cfg, loader, tier, batch, precision
        self.model = model
        self.manifest, self.out, self.host = manifest, Path(out), host
        self.deadline = time.monotonic() + budget_s
        self.walls: list[float] = []
        self.runs: dict[str, dict[int, dict]] = {}  # setting key -> its records by round
        self.ceilings: dict[str, dict[int, dict]] = {}  # the step settings' key -> the ceiling's records by round
        self.rounds = 0

    def spec(self, loader: str, settings: dict, r: int):
        cid = cell_id(loader, self.tier, 1, self.batch, self.precision, "dp", r, self.model)
        base = cell_spec(self.cfg, cid, in_grid=False)
        return dataclasses.replace(base, **settings)

    def time_left(self) -> bool:
        """Whether another cell fits: its cost guessed as the slowest so far (30 s before the first)."""
        return time.monotonic() + (max(self.walls) if self.walls else 30.0) < self.deadline

    def measure(self, loader: str, settings: dict, r: int) -> dict:
        from loaderbench.engine.runner.runcell import run_cell

        spec = self.spec(loader, settings, r)
        folder = self.out / (ceiling_folder(settings) if loader == "synthetic" else key(settings))
        rec = run_cell(spec, self.manifest, folder / f"{spec.cell_id}.json", host=self.host)
        self.walls.append(rec.get("wall_s") or 0.0)
        return rec

    def round(self, candidates: list[dict]) -> list[dict]:
        """One round: the ceiling (of each step the candidates train with), then each candidate once; returns those
        measured before the budget ran out."""
        if not self.time_left():
            return []
        done = []
        for settings in candidates:
            step = step_settings(settings)
            # `none` trains nothing: no step to take a ceiling of (synthetic x none is no cell)
            if self.model != NO_MODEL and self.rounds not in (ceiling := self.ceilings.setdefault(key(step), {})):
                if not self.time_left():
                    break
                ceiling[self.rounds] = self.measure("synthetic", step, self.rounds)
            if not self.time_left():
                break
            self.runs.setdefault(key(settings), {})[self.rounds] = self.measure(self.loader, settings, self.rounds)
            done.append(settings)
        self.rounds += 1
        return done

    def wait_share(self, settings: dict) -> float | None:
        """The median share of its steps a setting's cells waited for data (None: none measured)."""
        ok = [r for r in self.runs.get(key(settings), {}).values() if r["status"] == "ok"]
        return statistics.median(r["metrics"]["data_wait_fraction"] for r in ok) if ok else None

    def against(self, a: dict, b: dict) -> Ratio | None:
        """a's rate over b's, paired by the round both ran in (each round's processes share the host's state)."""
        ra, rb = self.runs.get(key(a), {}), self.runs.get(key(b), {})
        pairs = [
            (ra[r]["metrics"]["samples_per_s"], rb[r]["metrics"]["samples_per_s"], _hw(ra[r]), _hw(rb[r]))
            for r in sorted(ra.keys() & rb.keys())
            if ra[r]["status"] == rb[r]["status"] == "ok"
        ]
        if not pairs or (len(pairs) == 1 and None in pairs[0][2:]):
            return None  # one round without the windows' intervals: nothing known of the noise
        return ratio(pairs)


def key(settings: dict) -> str:
    """A setting's folder name: its overrides, or `start` for the config's own."""
    return ",".join(f"{k}={v}" for k, v in sorted(settings.items())) or "start"


def step_settings(settings: dict) -> dict:
    """The settings of the training step among `settings`: the ceiling beside a candidate runs with them."""
    return {k: v for k, v in settings.items() if k in STEP_SETTINGS}


def ceiling_folder(step: dict) -> str:
    """Where the ceiling's records of the step settings `step` go."""
    return "ceiling" + (f",{key(step)}" if step else "")


def _hw(rec: dict) -> float | None:
    return rec["metrics"]["window"].get("ci95_rel_halfwidth")


def _better(t: Tuner, incumbent: dict, candidates: list[dict]) -> dict:
    """Two rounds at most: candidates clearly worse after the first are dropped; the best survivor whose interval
    lies above 1 against the incumbent wins, else the incumbent stays."""
    live = t.round([incumbent, *candidates])
    if incumbent not in live:
        return incumbent
    live = [c for c in live if c is not incumbent and not ((q := t.against(c, incumbent)) and q.high < 1.0)]
    if live:
        t.round([incumbent, *live])
    wins = [(q.value, c) for c in live if (q := t.against(c, incumbent)) and q.low > 1.0]
    return max(wins, key=lambda w: w[0])[1] if wins else incumbent


def _finer(values: list, best) -> list:
    """The counts halfway between the best coarse count and its neighbours (none for other knobs)."""
    if not isinstance(best, int) or isinstance(best, bool) or not all(isinstance(v, int) for v in values):
        return []
    ordered = sorted(set(values))
    i = ordered.index(best)
    near = [ordered[j] for j in (i - 1, i + 1) if 0 <= j < len(ordered)]
    return sorted({(best + n) // 2 for n in near} - set(ordered))


def tune(
    cfg: dict,
    loader: str,
    tier: str,
    batch: int,
    precision: str | None,
    budget_s: float,
    manifest: Path,
    out: Path,
    host=None,
    cpus: int | None = None,
    cuda: bool | None = None,
    model: str | None = None,
) -> dict:
    """Search `loader`'s settings at `precision` (None: the config's, `config_precision`) training `model` (None: the
    config's first) on a host with a CUDA device or not (`cuda`; None: this host, `cuda_host`); the report (also
    written to `out`/tune.json)."""
    cpus = cpus or len(os.sched_getaffinity(0))
    cuda = cuda_host() if cuda is None else cuda
    precision = precision or config_precision(cfg)
    model = model or config_models(cfg)[0]
    t = Tuner(cfg, loader, tier, batch, precision, manifest, out, budget_s, host, model)
    space = knobs(loader, t.spec(loader, {}, 0), cpus, cuda)
    with warmclient.serving():
        best, progress = _search(t, space, cpus)
        if best and t.against(best, {}) is None:
            # best won its last move against another setting than the config's own, in rounds without it: one more
            # round of the two side by side, budget permitting, so that its gain over the start is measured
            t.round([{}, best])
    progress["not_applicable"] = not_applicable(loader, t.spec(loader, {}, 0), cpus, cuda)
    report = _report(t, best, space, progress)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "tune.json").write_text(json.dumps(report, indent=2))
    return report


def _search(t: Tuner, space: dict, cpus: int) -> tuple[dict, dict]:
    """The knobs of `space` in turn while the budget lasts; a knob that feeds the step faster (FEEDING) is moved last
    while the best setting's batches are ready, and skipped if they still are when it comes round again. Returns (the
    best setting, how the search went: the knobs in the order searched, those moved last and those skipped with why,
    those the budget did not reach)."""
    best: dict = {}
    queue, order, reached, moved, skipped = list(space), [], [], {}, {}
    while queue and t.time_left():
        name = queue.pop(0)
        wait = t.wait_share(best)
        if name in FEEDING and wait is not None and wait < WAIT_SHARE:
            ready = (
                f"batches ready: the step waited {wait:.0%} of its time for data (under {WAIT_SHARE:.0%}), which "
                "more threads or a deeper prefetch cannot shorten"
            )
            if name in moved:
                skipped[name] = ready
            else:
                moved[name] = ready
                queue.append(name)
            continue
        order.append(name)
        best, tried = _search_knob(t, name, space[name], best, cpus)
        if tried is None:
            skipped[name] = "every value it takes runs as the start does on this host (`auto` resolved)"
        elif tried:
            reached.append(name)
    progress = {
        "order": order,
        "moved_last": moved,
        "skipped": skipped,
        "not_reached": [n for n in space if n not in reached and n not in skipped],
    }
    return best, progress


def _search_knob(t: Tuner, name: str, values: list, best: dict, cpus: int) -> tuple[dict, bool | None]:
    """Knob `name` searched from `best`: its coarse values, then the count's neighbours of the best. Returns (the best
    setting, whether a candidate was measured; None when no value differs from the start)."""
    loader = t.loader
    # a value the start already runs at (`auto` resolved on this host) is no candidate
    start = effective(t.spec(loader, best, 0), name, cpus)
    options = [
        {**best, name: v} for v in values if effective(t.spec(loader, {**best, name: v}, 0), name, cpus) != start
    ]
    if options:
        best = _better(t, best, options)
    current = best.get(name, start)
    if fine := [v for v in _finer([*values, current], current) if v != start]:
        options += [{**best, name: v} for v in fine]
        best = _better(t, best, options[-len(fine) :])
    if not options:
        return best, None
    return best, any(key(o) in t.runs for o in options)


def _report(t: Tuner, best: dict, space: dict, progress: dict) -> dict:
    """The best setting, its gain over the start, its AU against the ceiling of its step, what limits it, the config
    lines to paste, and how the search went (`_search`)."""
    ok = [r for r in t.runs.get(key(best), {}).values() if r["status"] == "ok"]
    ceilings = {
        k: [r["metrics"]["samples_per_s"] for _, r in sorted(recs.items()) if r["status"] == "ok"]
        for k, recs in t.ceilings.items()
    }
    ceiling = ceilings.get(key(step_settings(best)), [])
    rate = statistics.median(r["metrics"]["samples_per_s"] for r in ok) if ok else None
    wait = statistics.median(r["metrics"]["data_wait_fraction"] for r in ok) if ok else None
    au = rate / statistics.median(ceiling) if rate and ceiling else None
    gain = t.against(best, {}) if best else None
    snippet = {}
    for field, value in best.items():
        *parents, leaf = CONFIG_KEY_OF[field].split(".")
        node = snippet
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return {
        "loader": t.loader,
        "model": t.model,
        "tier": t.tier,
        "batch_size": t.batch,
        "precision": t.precision,
        "searched": {k: list(v) for k, v in space.items()},
        **progress,
        "rounds": t.rounds,
        "cells": len(t.walls),
        "best": best,
        "samples_per_s": rate,
        "gain": gain.to_dict() if gain else None,
        "fix": tuned_fix(t.loader, best, gain.to_dict() if gain else None),
        "au": au,
        "ceiling_samples_per_s": ceiling,  # the ceiling of the best setting's step, a rate a round
        "ceilings": ceilings,  # every step's ceiling measured (`start`: the config's step)
        "data_wait_fraction": wait,
        "limit": limit(wait, au),
        "snippet": yaml.safe_dump(snippet, sort_keys=False) if snippet else "",
        "why": why(ok, [r for r in t.ceilings.get(key(step_settings(best)), {}).values() if r["status"] == "ok"]),
        "measured": {
            k: {
                r: (rec["metrics"]["samples_per_s"] if rec["status"] == "ok" else rec["status"]) for r, rec in v.items()
            }
            for k, v in t.runs.items()
        },
    }


def limit(wait: float | None, au: float | None) -> str | None:
    """What limits the best setting, from its data wait and its AU.

    A captured step returns to the host at once and runs on the device while the host waits for the next batch: its
    wait is then the device's time, not the loader's, and a rate within WAIT_SHARE of the ceiling says so."""
    if wait is None:
        return None
    if wait <= WAIT_SHARE:
        return "the training step: batches are ready"
    if au is not None and au >= 1 - WAIT_SHARE:
        return (
            f"the training step: it runs at AU {au:.2f}; the host waits {wait:.0%} of a step for data while the "
            "device still runs the step"
        )
    return "the loader: the step still waits for data"


def usage(records: list[dict]) -> dict:
    """What a setting's cells used, medians over its processes: the step's time on the device (CUDA events around
    it; on a CPU its wall time), the GPU's busy share and its JPEG decoders', and the CPU cores busy."""

    def med(values):
        vals = [v for v in values if v is not None]
        return statistics.median(vals) if vals else None

    def gpu(r, field):
        return med([(g.get(field) or {}).get("mean") for g in (r.get("telemetry") or {}).get("gpus", [])])

    return {
        "step_device_ms": med([(r["metrics"].get("compute_ms") or {}).get("mean") for r in records]),
        "gpu_busy_pct": med([gpu(r, "util_pct") for r in records]),
        "jpeg_decoders_busy_pct": med([gpu(r, "jpg_util_pct") for r in records]),
        "cpu_cores_busy": med([(r.get("telemetry") or {}).get("cpu_cores_busy") for r in records]),
    }


def why(cells: list[dict], ceilings: list[dict]) -> dict:
    """What limits the best setting, measured: its usage beside the ceiling's (the same step on data already on the
    device) and how much longer the step takes on the device beside the loader than alone."""
    loader, alone = usage(cells), usage(ceilings)
    a, b = loader["step_device_ms"], alone["step_device_ms"]
    return {"loader": loader, "ceiling": alone, "step_slowdown": a / b if a and b else None}


def _why_lines(w: dict | None) -> list[str]:
    if not w:
        return []

    def fmt(u):
        parts = [
            f"step {u['step_device_ms']:.1f} ms on the device" if u["step_device_ms"] is not None else None,
            f"GPU busy {u['gpu_busy_pct']:.0f}%" if u["gpu_busy_pct"] is not None else None,
            f"JPEG decoders {u['jpeg_decoders_busy_pct']:.0f}%" if u["jpeg_decoders_busy_pct"] is not None else None,
            f"{u['cpu_cores_busy']:.1f} cores busy" if u["cpu_cores_busy"] is not None else None,
        ]
        return ", ".join(p for p in parts if p) or "not measured"

    lines = [f"used by the best: {fmt(w['loader'])}", f"used by the ceiling: {fmt(w['ceiling'])}"]
    if w["step_slowdown"]:
        lines.append(f"the step takes {w['step_slowdown']:.2f}x its time alone on the device beside this loader")
    return lines


def render(rep: dict) -> str:
    model = rep.get("model") or DEFAULT_MODEL  # a report from before it named its model trained the default
    lines = [
        (
            f"tune {rep['loader']} on {rep['tier']}, model {model}, batch {rep['batch_size']} {rep['precision']}: "
            f"{rep['cells']} cells in {rep['rounds']} rounds; Samples/s by setting and round:"
        )
    ]
    lines += [
        f"  {k:50s} " + ", ".join(f"r{r} {v if isinstance(v, str) else f'{v:.0f}'}" for r, v in vals.items())
        for k, vals in rep["measured"].items()
    ]
    for step, rates in (rep.get("ceilings") or {"start": rep["ceiling_samples_per_s"]}).items():
        if not rates:  # none measured (`none` has no ceiling, or the budget ended first)
            continue
        lines.append(
            f"  ceiling (synthetic{'' if step == 'start' else ', ' + step}): " + ", ".join(f"{v:.0f}" for v in rates)
        )
    au = (
        f"AU {rep['au']:.2f}"
        if rep["au"] is not None
        else "AU - (model none: the loader alone, no step to take a ceiling of)"
        if model == NO_MODEL
        else "AU - (no ceiling measured)"
    )
    if rep["best"]:
        g = rep["gain"]
        gain = (
            f"{g['value']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] the config's settings"
            if g
            else "each move faster than the setting it replaced; against the config's own, not measured in one round "
            "(the budget ended)"
        )
        lines.append(
            f"best: {key(rep['best'])}: {rep['samples_per_s']:.0f} samples/s, {gain}, {au}; limit: {rep['limit']}"
        )
        if rep.get("fix"):
            lines.append(f"best fix: {rep['fix']['what']}")
        lines.append("paste into the config:\n" + "\n".join(f"  {x}" for x in rep["snippet"].splitlines()))
    elif rep["samples_per_s"]:
        lines.append(
            f"best: the config's own settings ({rep['samples_per_s']:.0f} samples/s, {au}): no "
            f"tried setting was measurably faster; limit: {rep['limit']}"
        )
    else:
        lines.append("no setting was measured within the budget")
    return "\n".join(lines + _why_lines(rep.get("why")) + _search_lines(rep))


def _search_lines(rep: dict) -> list[str]:
    """How the search went: the order, the knobs moved last, skipped, not applicable here and not reached."""
    if "order" not in rep:  # a report from before the search said so
        return []
    lines = [f"search order: {', '.join(rep['order']) or 'none searched'}"]
    lines += [f"  moved last: {name}: {why}" for name, why in rep["moved_last"].items()]
    lines += [f"  skipped: {name}: {why}" for name, why in rep["skipped"].items()]
    lines += [f"  not applicable here: {name}: {why}" for name, why in rep["not_applicable"].items()]
    missed = rep["not_reached"]
    lines.append(
        f"not reached within the budget: {', '.join(missed)}" if missed else "every knob reached within the budget"
    )
    return lines
