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

from loaderbench.core.cells import cell_id, cell_spec, config_models
from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL
from loaderbench.core.uncertainty import Ratio, ratio
from loaderbench.engine.runner import warmclient
from loaderbench.report.diagnose import WAIT_SHARE  # a step waiting less than this share of itself had its batch

from .tuneknobs import FEEDING, ceiling_folder, cuda_host, effective, key, knobs, not_applicable, step_settings
from .tunereport import build_report


def config_precision(cfg: dict) -> str:
    """The precision `tune` measures at unless told: the baseline's where the config measures it, else its first."""
    baseline = (cfg.get("baseline") or {}).get("precision")
    return baseline if baseline in cfg["precisions"] else cfg["precisions"][0]


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
    report = build_report(t, best, space, progress)
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
            skipped[name] = (
                f"not searched: each value {name} can take comes out, once `auto` is resolved on this host, the same as "
                "the starting setting's, so there is nothing to compare"
            )
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
