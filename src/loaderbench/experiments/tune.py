"""`loaderbench tune`: one loader's settings searched on this host within a time budget, against the ceiling.

Coordinate search from the config's settings: each knob of the loader in turn (worker or thread count, prefetch
depth, DALI's hardware-decoder share, torchvision's transport), coarse values first, then the count's neighbours of
the best. A round measures every live candidate once, in fresh processes, with the ceiling (`synthetic`) beside it;
a candidate whose interval against the incumbent lies below 1 after a round is dropped, and a knob moves only to a
value whose interval lies above 1. The report: the best setting with its interval against the start and its AU,
what limits it, and the config lines to paste.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from pathlib import Path

import yaml

from loaderbench.core.cells import CONFIG_KEYS, cell_id, cell_spec
from loaderbench.core.config import ConfigError
from loaderbench.core.registry import BACKLOG
from loaderbench.core.uncertainty import Ratio, ratio
from loaderbench.engine.runner import warmclient
from loaderbench.report.diagnose import WAIT_SHARE  # a step waiting less than this share of itself had its batch


def knobs(loader: str, spec, cpus: int) -> dict[str, list]:
    """The settings `tune` searches for `loader`, each with its coarse values (the config's own first). A plugin
    declares its own as its factory's `loaderbench_knobs`: names of these settings that it reads from the context."""
    counts = sorted({max(1, cpus // 4), max(1, cpus // 2), max(1, cpus - 1)})
    values = {
        "workers": counts,
        "prefetch_factor": [2, 4],
        "torchvision_transport": ["float32", "uint8"],
        "dali_threads": counts,
        "dali_prefetch": [2, 3],
        "dali_hw_decoder_load": [0.65, 1.0],
        "shard_readers": [1, 2, 0],
    }
    kind = BACKLOG.get(loader)
    if kind == "workers":
        names = ["workers", "prefetch_factor"] + (["torchvision_transport"] if loader in ("torchvision", "wds") else [])
        names += ["shard_readers"] if loader == "wds" else []
    elif kind == "dali":
        names = ["dali_threads", "dali_prefetch"] + (["dali_hw_decoder_load"] if loader != "dali-cpu" else [])
    elif spec.loader_ref:
        from loaderbench.loaders.plugin import factory

        names = list(getattr(factory(spec.loader_ref), "loaderbench_knobs", ()))
        if bad := [n for n in names if n not in values]:
            raise ConfigError(
                f"plugin {spec.loader_ref}: loaderbench_knobs names {', '.join(bad)}; it may name {', '.join(values)}"
            )
    else:
        names = []
    if not names:
        raise ConfigError(
            f"--loader {loader}: it has no settings to tune (tunable: torchvision, opencv, nvjpeg, "
            "dali-cpu, dali-sc, dali-mc, and plugins that declare loaderbench_knobs)"
        )
    out = {name: list(values[name]) for name in names}
    for name, vals in out.items():
        start = getattr(spec, name)
        if isinstance(start, int | float | str) and start != "auto" and start not in vals:
            vals.insert(0, start)
    return out


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
    kind = "cuda" if Path("/dev/nvidiactl").exists() else "cpu"
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
    ):
        self.cfg, self.loader, self.tier, self.batch, self.precision = cfg, loader, tier, batch, precision
        self.manifest, self.out, self.host = manifest, Path(out), host
        self.deadline = time.monotonic() + budget_s
        self.walls: list[float] = []
        self.runs: dict[str, dict[int, dict]] = {}  # setting key -> its records by round
        self.ceiling: list[dict] = []
        self.rounds = 0

    def spec(self, loader: str, settings: dict, r: int):
        base = cell_spec(self.cfg, cell_id(loader, self.tier, 1, self.batch, self.precision, "dp", r), in_grid=False)
        return dataclasses.replace(base, **settings)

    def time_left(self) -> bool:
        """Whether another cell fits: its cost guessed as the slowest so far (30 s before the first)."""
        return time.monotonic() + (max(self.walls) if self.walls else 30.0) < self.deadline

    def measure(self, loader: str, settings: dict, r: int) -> dict:
        from loaderbench.engine.runner.runcell import run_cell

        spec = self.spec(loader, settings, r)
        folder = self.out / ("ceiling" if loader == "synthetic" else key(settings))
        rec = run_cell(spec, self.manifest, folder / f"{spec.cell_id}.json", host=self.host)
        self.walls.append(rec.get("wall_s") or 0.0)
        return rec

    def round(self, candidates: list[dict]) -> list[dict]:
        """One round: the ceiling, then each candidate once; returns those measured before the budget ran out."""
        if not self.time_left():
            return []
        self.ceiling.append(self.measure("synthetic", {}, self.rounds))
        done = []
        for settings in candidates:
            if not self.time_left():
                break
            self.runs.setdefault(key(settings), {})[self.rounds] = self.measure(self.loader, settings, self.rounds)
            done.append(settings)
        self.rounds += 1
        return done

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
) -> dict:
    """Search `loader`'s settings at `precision` (None: the config's, `config_precision`); the report (also written
    to `out`/tune.json)."""
    cpus = cpus or len(os.sched_getaffinity(0))
    precision = precision or config_precision(cfg)
    t = Tuner(cfg, loader, tier, batch, precision, manifest, out, budget_s, host)
    space = knobs(loader, t.spec(loader, {}, 0), cpus)
    best: dict = {}
    with warmclient.serving():
        for name, values in space.items():
            # a value the start already runs at (`auto` resolved on this host) is no candidate
            start = effective(t.spec(loader, best, 0), name, cpus)
            options = [
                {**best, name: v}
                for v in values
                if effective(t.spec(loader, {**best, name: v}, 0), name, cpus) != start
            ]
            if options:
                best = _better(t, best, options)
            current = best.get(name, start)
            if fine := [v for v in _finer([*values, current], current) if v != start]:
                best = _better(t, best, [{**best, name: v} for v in fine])
            if not t.time_left():
                break
        if best and t.against(best, {}) is None:
            # best won its last move against another setting than the config's own, in rounds without it: one more
            # round of the two side by side, budget permitting, so that its gain over the start is measured
            t.round([{}, best])
    report = _report(t, best, space)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "tune.json").write_text(json.dumps(report, indent=2))
    return report


def _report(t: Tuner, best: dict, space: dict) -> dict:
    """The best setting, its gain over the start, its AU, what limits it, the config lines to paste."""
    ok = [r for r in t.runs.get(key(best), {}).values() if r["status"] == "ok"]
    ceiling = [r["metrics"]["samples_per_s"] for r in t.ceiling if r["status"] == "ok"]
    rate = statistics.median(r["metrics"]["samples_per_s"] for r in ok) if ok else None
    wait = statistics.median(r["metrics"]["data_wait_fraction"] for r in ok) if ok else None
    gain = t.against(best, {}) if best else None
    snippet = {}
    for field, value in best.items():
        *parents, leaf = CONFIG_KEYS[field].split(".")
        node = snippet
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return {
        "loader": t.loader,
        "tier": t.tier,
        "batch_size": t.batch,
        "precision": t.precision,
        "searched": {k: list(v) for k, v in space.items()},
        "rounds": t.rounds,
        "cells": len(t.walls),
        "best": best,
        "samples_per_s": rate,
        "gain": gain.to_dict() if gain else None,
        "au": rate / statistics.median(ceiling) if rate and ceiling else None,
        "ceiling_samples_per_s": ceiling,
        "data_wait_fraction": wait,
        "limit": None
        if wait is None
        else (
            "the loader: the step still waits for data" if wait > WAIT_SHARE else "the training step: batches are ready"
        ),
        "snippet": yaml.safe_dump(snippet, sort_keys=False) if snippet else "",
        "measured": {
            k: {
                r: (rec["metrics"]["samples_per_s"] if rec["status"] == "ok" else rec["status"]) for r, rec in v.items()
            }
            for k, v in t.runs.items()
        },
    }


def render(rep: dict) -> str:
    lines = [
        (
            f"tune {rep['loader']} on {rep['tier']}, batch {rep['batch_size']} {rep['precision']}: {rep['cells']} "
            f"cells in {rep['rounds']} rounds; Samples/s by setting and round:"
        )
    ]
    lines += [
        f"  {k:50s} " + ", ".join(f"r{r} {v if isinstance(v, str) else f'{v:.0f}'}" for r, v in vals.items())
        for k, vals in rep["measured"].items()
    ]
    ceiling = ", ".join(f"{v:.0f}" for v in rep["ceiling_samples_per_s"])
    lines.append(f"  ceiling (synthetic): {ceiling}")
    if rep["best"]:
        g = rep["gain"]
        gain = (
            f"{g['value']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] the config's settings"
            if g
            else "each move faster than the setting it replaced; against the config's own, not measured in one round "
            "(the budget ended)"
        )
        lines.append(
            f"best: {key(rep['best'])}: {rep['samples_per_s']:.0f} samples/s, {gain}, AU {rep['au']:.2f}; "
            f"limit: {rep['limit']}"
        )
        lines.append("paste into the config:\n" + "\n".join(f"  {x}" for x in rep["snippet"].splitlines()))
    elif rep["samples_per_s"]:
        lines.append(
            f"best: the config's own settings ({rep['samples_per_s']:.0f} samples/s, AU {rep['au']:.2f}): no "
            f"tried setting was measurably faster; limit: {rep['limit']}"
        )
    else:
        lines.append("no setting was measured within the budget")
    return "\n".join(lines)
