"""What one cell of a study costs on a host, before it runs: overhead + warm-up + window, on the first basis that
applies: an ok record of the same host and configuration (`record`); records of the same host and the closest
measured configuration (`host records`: of the cell's model when there are some, else another model's rate scaled by
the models' relative compute, `models.relative_cost`); else the calibrated constants below (`rules`, MobileNetV2's,
scaled the same way). Kept dp processes (`host.reuse_processes`) are followed in run order (`KeptProcesses`); every
cell also costs Snakemake's job (JOB_S). `hostrecords` reads the host and what its records measured;
`loaderbench.plan.predict` adds the fixed costs and the budget. Details: docs/internals.md, "plan.costmodel".
"""

from __future__ import annotations

import math

from loaderbench.core.cells import CellSpec, configuration
from loaderbench.core.records import record_spec
from loaderbench.core.registry import DEFAULT_MODEL, loader_record, tierless
from loaderbench.engine.process.batchmeans import MIN_BATCHES
from loaderbench.models import relative_cost

from .hostrecords import Host, Measured, cost_key, median, same_configuration

# The rules (no record of the host), by host kind ("gpu" when it has a GPU, else "cpu"); docs/internals.md,
# "plan.costmodel: calibration", gives the records each constant was read from.
CELL_OVERHEAD_S = {"gpu": 10.0, "cpu": 2.0}  # process start, setup (cold step included), teardown, record
FIRST_STEP_S = {"gpu": 20.0, "cpu": 1.0}  # the first warm-up step with cuDNN autotuning
FIRST_STEP_UNTUNED_S = 5.0  # ... without it: cuDNN only plans
FIRST_STEP_AFTER_COLD_S = 0.2  # ... after the cold step, when the device is warm (its cost is in the overhead)
ASSUMED_SAMPLES_PER_S = {"gpu": 1000.0, "cpu": 100.0}  # warm-up rate without a record: below the slowest loader
PREFILL_SHARE = 0.5  # the share of the overhead in which a loader, started at build, fills its backlog
KEPT_OVERHEAD_S = {True: 1.5, False: 8.0}  # a kept dp process, by whether it ran the shapes (KeptProcesses)
JOB_S = 1.0  # Snakemake's own cost per cell job on top of the cell's wall (spawn, bookkeeping)
# Steps profiled after the window (`profile_steps`) run slower under the profiler, and their events are reduced after:
# a guess until records of the configuration exist (they replace it: their wall has it)
PROFILED_STEP_FACTOR, PROFILE_SUMMARY_S = 1.5, 2.0
# The closest measured configuration: these spec fields relaxed last to first (the tier first, the model last; of
# other loaders, one fed the same way - its registry record's backlog - first). Another model's records predict a
# cell only when none of its own model exist, their rate scaled by the models' compute (`_model_scale`).
NEIGHBOUR_FIELDS = ("model", "loader", "feed", "gpus", "batch_size", "precision", "parallel", "tier")


def _kept_overhead(
    spec: dict, fresh: list[Measured], kept: list[Measured], shapes_seen: bool
) -> tuple[float | None, str]:
    """The overhead of a cell measured by a kept process (warmstart's reuse): the median of records measured that way
    (of this loader when there are some), else that of `fresh` records less what a kept process skips - the start-up,
    and the cold step when the process already ran the cell's shapes (cuDNN keeps its plans)."""
    own = [m for m in kept if m.key("loader") == spec.get("loader")] or kept
    if own:
        return median(m.overhead_s for m in own), f"{len(own)} kept-process record(s)"
    skipped = [(m.startup_s or 0.0) + ((m.cold_step_s or 0.0) if shapes_seen else 0.0) for m in fresh]
    over = median(max(0.0, m.overhead_s - s) for m, s in zip(fresh, skipped, strict=True) if m.overhead_s is not None)
    what = "start-up and cold step" if shapes_seen else "start-up (new shapes: cuDNN plans again)"
    return over, f"fresh overhead less its {what}"


def _workers(spec: CellSpec, host: Host) -> int:
    """A worker-fed loader's DataLoader workers on `host`, as the cell will resolve them (its placement there)."""
    from loaderbench.engine.placement import for_cell
    from loaderbench.engine.step import resolve_workers

    place = for_cell(
        spec.placement, spec.gpus, "cuda" if host.kind == "gpu" else "cpu", cpus=frozenset(range(host.cpus_usable))
    )
    return resolve_workers(spec, place, ranks=spec.gpus if spec.parallel == "ddp" else 1, usable=host.cpus_usable)


def _backlog(spec: CellSpec, host: Host) -> tuple[int, int]:
    """(batches the loader prepares ahead, its burst: batches delivered at once) - see registry.LoaderRecord.backlog."""
    kind = loader_record(spec.loader).backlog
    if kind == "workers":
        w = _workers(spec, host)
        return w * spec.prefetch_factor, max(1, w)
    if kind == "dali":
        return spec.dali_prefetch, 1
    return 0, 1


def _io_rate(spec: CellSpec, host: Host, mean_bytes: float) -> float | None:
    """Samples/s an emulated tier's device model allows (whole-file reads); None for any other tier."""
    if not spec.device_model or tierless(spec.loader):
        return None
    from loaderbench.core.devices import DeviceModel, predict

    readers = _workers(spec, host) if loader_record(spec.loader).backlog == "workers" else max(1, host.cpus_usable - 1)
    return predict(DeviceModel.from_dict(spec.device_model), mean_bytes, readers)["files_per_s"]


def _runs_here(spec: CellSpec, host: Host) -> str | None:
    """Why the cell is skipped on `host` (`entry.run`: more GPUs than there are; dp with gpus > 1 on a CPU), else None."""
    have = len(host.gpu_models)
    if host.kind == "gpu" and spec.gpus > have:
        return f"skipped there: {spec.gpus} GPUs wanted, {have} present"
    if host.kind == "cpu" and spec.gpus > 1 and spec.parallel == "dp":
        return "skipped there: dp over several GPUs needs GPUs"
    return None


def _first_step_s(spec: CellSpec, host: Host) -> float:
    """The rules' first step: cuDNN's autotuning is most of it on a GPU, unless a cold step took it (in setup)."""
    if host.kind == "gpu" and spec.cold_step_on("cuda"):
        return FIRST_STEP_AFTER_COLD_S
    return FIRST_STEP_UNTUNED_S if host.kind == "gpu" and not spec.cudnn_benchmark else FIRST_STEP_S[host.kind]


def _warmup(
    spec: CellSpec, backlog: int, overhead: float, first: float, step_s: float, compute_s: float | None
) -> tuple[int, float]:
    """(steps, seconds) of the warm-up (window.warm_up): at least `warmup_steps`, then until a step waits for its
    batch, at most the backlog + 2. The loader starts at build and fills its backlog during setup, at its own rate
    (PREFILL_SHARE of the overhead); those batches are there at once and cost a step's compute alone (`compute_s`,
    the step itself when unknown); the first step that finds none waits a whole step."""
    ready = min(backlog, int(PREFILL_SHARE * overhead / step_s)) if step_s > 0 else backlog
    steps = min(max(spec.warmup_steps, ready + 1), max(spec.warmup_steps, backlog + 2))
    fast = max(0, min(ready, steps) - 1)  # steps 2..n served from the prefilled backlog
    compute = step_s if compute_s is None else min(compute_s, step_s)
    return steps, first + fast * compute + (steps - 1 - fast) * step_s


def _model_scale(spec: CellSpec, measured: str, kind: str) -> tuple[float | None, str]:
    """(compute factor, what was done) to predict a cell of `spec.model` from records of model `measured`: the
    models' relative compute on a host of `kind` (`models.relative_cost`); None where one is unknown (a plugin model) or `measured` ran
    none (the loader alone says nothing of a model's compute): the records' rate is then taken as it is."""
    if spec.model == measured:
        return 1.0, ""
    new, old = relative_cost(spec.model, kind), relative_cost(measured, kind)
    if new is None or old is None or old == 0:
        why = f"{spec.model if new is None else measured}'s compute unknown" if new is None or old is None else ""
        return None, f"{measured}'s rate as it is ({why or measured + ' runs no model'})"
    return new / old, f"{measured}'s rate for {new / old:.3g} x its compute ({spec.model})"


def _or_one(factor: float | None) -> float:
    return 1.0 if factor is None else factor


def _model_rate(spec: CellSpec, m: Measured, factor: float | None) -> float:
    """The rate record `m` predicts for a cell whose step computes `factor` x what m's did. The ceiling
    (`synthetic`) is its model's compute alone: m's rate / factor. A loader's cell runs the loader and the model side
    by side: at most m's rate (the loader's) and at most the model's own pace, m's compute per step x factor; m
    without its compute: m's rate / factor for a costlier model, else m's rate."""
    rate = m.samples_per_s
    if factor is None or factor == 1.0:
        return rate
    if tierless(spec.loader):
        return rate / factor
    if m.compute_s and m.global_batch and factor > 0:
        return min(rate, m.global_batch / (m.compute_s * factor))
    return rate / factor if factor > 1.0 else rate


def _values(measured: list[Measured], *field_names: str, only: list[str]) -> list[str]:
    """The values the records `measured` hold of those of `field_names` in `only`, each once."""
    return [str(v) for f in field_names if f in only for v in dict.fromkeys(m.key(f) for m in measured)]


def _cell_seconds(
    spec: CellSpec,
    host: Host,
    overhead: float,
    first: float,
    step_s: float,
    window_hint: float | None,
    io_bound: bool,
    compute_s: float | None = None,
) -> tuple[float, str]:
    """overhead + warm-up + window + Snakemake's job, and how the window was predicted."""
    backlog, burst = _backlog(spec, host)
    warm_steps, warmup = _warmup(spec, backlog, overhead, first, step_s, compute_s)
    if spec.window_steps:
        window, how = spec.window_steps * step_s, f"{spec.window_steps} steps"
    elif spec.window_s:
        window, how = spec.window_s, "fixed"
    else:
        # the adaptive rule needs MIN_BATCHES batch means of whole bursts and min_seconds before it may stop; at
        # max_seconds the step in flight still finishes
        longest = spec.window_max_s + step_s
        shortest = min(longest, max(spec.window_min_s, MIN_BATCHES * burst * step_s))
        if window_hint is not None:
            window, how = min(longest, max(shortest, window_hint)), "as measured"
        elif io_bound:
            window, how = shortest, "I/O-bound: known after its first batches"
        else:
            window, how = longest, "at its maximum (rate unknown)"
    detail = f"overhead {overhead:.1f} + warm-up {warm_steps} steps {warmup:.1f} + window {window:.1f} s ({how})"
    profiled = spec.profile_steps * step_s * PROFILED_STEP_FACTOR + PROFILE_SUMMARY_S if spec.profile_steps else 0.0
    if profiled:
        detail += f" + {spec.profile_steps} profiled steps {profiled:.1f} s"
    return overhead + warmup + window + profiled + JOB_S, detail


def predict(
    spec: CellSpec, host: Host, mine: list[Measured], mean_bytes: float, kept: bool | None = None
) -> tuple[float, str, str]:
    """(seconds, basis, detail) of one cell still to run on `host`, whose ok records are `mine`. `kept`: the cell
    will be measured by a process kept from the cell before it (True: one that ran its shapes; False: new shapes);
    None: by a process of its own. Records of the other kind count only for what they share (rate, window)."""
    d = record_spec(spec)  # as the records in `mine` keep theirs
    fresh = [m for m in mine if not m.kept]
    reused = [m for m in mine if m.kept]
    same = [m for m in mine if same_configuration(m.spec, d)]
    if same:
        return _from_own_records(d, same, reused, kept)
    skip = _runs_here(spec, host)
    if skip:
        over = median(m.overhead_s for m in mine) or CELL_OVERHEAD_S[host.kind]
        return over + JOB_S, "host records" if mine else "rules", skip
    io = _io_rate(spec, host, mean_bytes)
    gb = spec.batch_size * spec.gpus
    rated = [m for m in mine if m.samples_per_s]
    if rated:
        want = {f: cost_key(d, f) for f in NEIGHBOUR_FIELDS}
        nearest = min(tuple(m.key(f) != want[f] for f in NEIGHBOUR_FIELDS) for m in rated)
        near = [m for m in rated if tuple(m.key(f) != want[f] for f in NEIGHBOUR_FIELDS) == nearest]
        # another model's records (none of this one's): each scaled by the models' compute
        scales = {model: _model_scale(spec, model, host.kind) for model in sorted({m.key("model") for m in near})}
        rate = median(_model_rate(spec, m, scales[m.key("model")][0]) for m in near)
        io_bound = io is not None and io < rate  # the neighbour read a faster tier than this emulated one
        rate = io if io_bound else rate
        same_loader = not (nearest[0] or nearest[1])  # this model and this loader
        # the neighbour's own overhead, first step and window when it ran this loader, else the host's; a kept
        # process's cell: the overhead of cells measured that way
        pool = [m for m in (near if same_loader else mine) if not m.kept] or (fresh or mine)
        overhead = median(m.overhead_s for m in pool)
        if kept is not None:
            over = _kept_overhead(d, pool, reused, kept)[0]
            overhead = overhead if over is None else over
        first = median(m.first_step_s for m in (near if same_loader else mine))
        # a window that never settled says only that this one runs to its own maximum
        hint = (
            median(math.inf if m.unsettled else m.window_s for m in near if m.adaptive)
            if same_loader and not io_bound
            else None
        )
        # the neighbours' compute per step, for this cell's global batch
        compute = median(
            m.compute_s * gb / m.global_batch * _or_one(scales[m.key("model")][0])
            for m in near
            if m.compute_s and m.global_batch
        )
        seconds, detail = _cell_seconds(
            spec,
            host,
            CELL_OVERHEAD_S[host.kind] if overhead is None else overhead,
            _first_step_s(spec, host) if first is None else first,
            gb / rate,
            hint,
            io_bound,
            compute,
        )
        relaxed = [f for f, differs in zip(NEIGHBOUR_FIELDS, nearest, strict=True) if differs and f != "feed"]
        like = (
            f"{len(near)} record(s) of this configuration (other settings)"
            if not relaxed
            else f"{len(near)} record(s) of another {', '.join(relaxed)}"
            + (f" ({', '.join(_values(near, 'model', 'loader', only=relaxed))})" if nearest[0] or nearest[1] else "")
        )
        scaled = "; ".join(what for _, what in scales.values() if what)
        like += f": {scaled}" if scaled else ""
        return seconds, "host records", f"{rate:.0f} samples/s from {like}; {detail}"
    return _from_rules(spec, host, io, gb, kept)


def _from_own_records(d: dict, same: list[Measured], reused: list[Measured], kept: bool | None) -> tuple:
    """(seconds, basis, detail) from records of this very configuration: their wall time, a kept process's start
    left out or put in (`kept`, as `predict` takes it)."""
    own = [m for m in same if m.kept == (kept is not None)]
    if own:
        wall = median(m.wall_s for m in own)
        return wall + JOB_S, "record", f"wall {wall:.1f} s of {len(own)} record(s) of this configuration"
    if kept is None:
        wall = median(m.wall_s for m in same)  # only kept-process records: the start they skipped is missing
        return wall + JOB_S, "record", f"wall {wall:.1f} s of {len(same)} kept-process record(s)"
    over, how = _kept_overhead(d, same, reused, kept)
    wall = median(m.wall_s for m in same)
    if over is not None:
        wall = median(m.wall_s - m.overhead_s + over for m in same if m.overhead_s is not None) or wall
    return wall + JOB_S, "record", f"wall {wall:.1f} s: {len(same)} record(s) of this configuration, {how}"


def _from_rules(spec: CellSpec, host: Host, io: float | None, gb: int, kept: bool | None) -> tuple:
    """(seconds, basis, detail) with no record of the host that ran: the calibrated constants (MobileNetV2's, a
    costlier model's step slower by its compute), the tier's device model where it is slower."""
    factor, _ = _model_scale(spec, DEFAULT_MODEL, host.kind)
    slower = factor is not None and factor > 1.0
    assumed = ASSUMED_SAMPLES_PER_S[host.kind] / (factor if slower else 1.0)
    io_bound = io is not None and io < assumed
    rate = io if io_bound else assumed
    overhead = CELL_OVERHEAD_S[host.kind] if kept is None else KEPT_OVERHEAD_S[kept]
    seconds, detail = _cell_seconds(spec, host, overhead, _first_step_s(spec, host), gb / rate, None, io_bound)
    why = (
        f"{rate:.0f} samples/s the device model allows"
        if io_bound
        else f"{rate:.0f} samples/s assumed"
        + (f" ({DEFAULT_MODEL}'s for {factor:.3g} x its compute: {spec.model})" if slower else "")
    )
    return seconds, "rules", f"{why}; {detail}"


def _shapes(spec: dict) -> tuple:
    """What cuDNN plans a cell's convolutions for: a kept process that ran these has its plans."""
    return tuple(
        spec.get(k)
        for k in (
            "model",
            "batch_size",
            "gpus",
            "precision",
            "amp_dtype",
            "channels_last",
            "crop_size",
            "compile",
            "cudnn_benchmark",
        )
    )


class KeptProcesses:
    """Which cells a kept process will measure (warmstart's reuse, on a GPU host), in the order they run: a dp cell
    after a dp cell, of a configuration that process has not measured (cell jobs share one environment: the workflow
    sets no CUDA_VISIBLE_DEVICES per cell, and a dp cell uses the first GPUs it sees); any other cell starts anew."""

    def __init__(self, on: bool):
        self.on = on
        self.idle = False  # a dp process waits for the next cell
        self.configs: set[str] = set()
        self.shapes: set[tuple] = set()

    def next(self, spec: CellSpec) -> bool | None:
        """None: the cell gets a process of its own; else whether the kept process ran its shapes."""
        if not self.on or spec.parallel != "dp":
            self.idle = False
            return None
        config = configuration(spec.cell_id)
        kept = self.idle and config not in self.configs
        if not kept:
            self.idle, self.configs, self.shapes = True, set(), set()
        shapes = _shapes(spec.to_dict())
        seen = shapes in self.shapes
        self.configs.add(config)
        self.shapes.add(shapes)
        return seen if kept else None
