"""Each row's parts found in its run, and its three sides made of them: at 1 GPU the loader alone and the model's
ceiling; at n GPUs the loader's rank part (else its loader-alone cell by today's rule, else its 1-GPU training cells,
labelled), the measured n-GPU ceiling (else MobileNetV2's measured ratio, labelled); the beside part for the consuming
process at any GPU count."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loaderbench.core.registry import NO_MODEL, loader_record
from loaderbench.core.uncertainty import quotient

from .measured import CEILING, Configuration, Index
from .ratios import RATIO_GPUS, CeilingRatio, ratio_for
from .terms import GPU_BOUND, Sides, beside_ms, consuming_ms, cores_cap, host_side_ms

AT = ("tier", "batch_size", "precision")  # the fields a loader's part and its row share


@dataclass
class Found:
    """A row's sides (None where a part it needs is missing), what each was taken from, and what the records lack."""

    sides: Sides | None = None
    loader_part: float = math.nan  # the loader part's own rate (samples/s)
    ceiling: float = math.nan  # the model's 1-GPU ceiling (samples/s)
    consuming_ms: float = math.nan  # t_cons: the model's host side a step plus the loader's consuming work
    basis: dict[str, str] = field(default_factory=dict)  # loader, step, consuming: what each side was taken from
    lacks: list[str] = field(default_factory=list)


def one_gpu(index: Index, alone: Configuration, ceil: Configuration) -> Found:
    """A 1-GPU row: loader X alone (its `none` cell) and model M's ceiling, the beside part for the consuming term."""
    found = Found(loader_part=alone.rate, ceiling=ceil.rate)
    found.basis = {"loader": _told("the loader alone", alone), "step": "the 1-GPU ceiling"}
    loader_core_s, device_s = _alone(alone, found.lacks)
    pool = alone.host_cores - alone.launch if alone.host_cores else None
    cap = cores_cap(pool, loader_core_s, _step_core_s(ceil, found.lacks))
    consuming, low, hw = _consuming(index, alone, ceil.model, 1, alone.spec.get("parallel", "dp"), found)
    found.sides = Sides(alone.rate, alone.halfwidth, cap, ceil.rate, ceil.halfwidth, device_s, consuming, hw, low)
    return found


def n_gpu(index: Index, rep: Configuration, model: str, n: int, mode: str, ratios: dict) -> Found:
    """An n-GPU row of loader `rep.loader` (its loader-alone cell, or one of its 1-GPU training cells where the run
    has none) and `model`, under `mode`."""
    found = Found()
    at = rep.fields("batch_size", "precision")
    ceil = index.find(of=rep, loader=CEILING, model=model, gpus=1, parallel=mode, **at)
    if ceil is None:
        ceil = index.find(of=rep, loader=CEILING, model=model, gpus=1, **at)
        if ceil is not None:
            found.lacks.append(f"a 1-GPU {mode} ceiling (the {ceil.spec.get('parallel', 'dp')} one used)")
    if ceil is None:
        found.lacks.append(f"a 1-GPU ceiling of {model} at batch {at['batch_size']}, {at['precision']}")
        return found
    found.ceiling = ceil.rate
    step = _step_at(index, rep, ceil, n, mode, ratios, found)
    if step is None:
        return found
    pipelines = _pipelines(rep.loader, mode, n)
    loader = _loader_at(index, rep, n, mode, pipelines, found)
    if loader is None:
        return found
    rate, hw, loader_core_s, device_s = loader
    found.loader_part = rate
    pool = rep.host_cores - (n if rep.launch else 0) if rep.host_cores else None
    if pool is None:
        found.lacks.append("the host's cores (provenance.host.cpus_usable)")
    cap = cores_cap(pool, loader_core_s, _step_core_s(ceil, found.lacks))
    consuming, low, c_hw = _consuming(index, rep, model, n, mode, found)
    spread = n if pipelines == n else 1  # each GPU decodes its own share, or one pipeline's work lands on one GPU
    found.sides = Sides(rate, hw, cap, step[0], step[1], device_s / spread, consuming, c_hw, low)
    return found


def _alone(alone: Configuration, lacks: list) -> tuple[float | None, float]:
    """A loader-alone part's core-seconds and GPU seconds a sample (None, 0 where its telemetry does not say)."""
    if alone.cores_busy is None:
        lacks.append("the loader part's cores busy (the cores' share not checked)")
    if alone.gpu_share is None:
        lacks.append("the loader part's GPU telemetry (its device work taken as none)")
    core_s = alone.cores_busy / alone.rate if alone.cores_busy is not None else None
    return core_s, (alone.gpu_share or 0.0) / alone.rate


def _step_core_s(ceil: Configuration, lacks: list) -> float:
    """e/C: the step's host core-seconds a sample beyond its launch cores (0 where its cores busy are unknown)."""
    if ceil.cores_busy is None:
        lacks.append("the ceiling's cores busy (its host work taken as its launch cores only)")
        return 0.0
    return max(0.0, ceil.cores_busy - ceil.launch) / ceil.rate


def _step_at(index: Index, rep: Configuration, ceil: Configuration, n: int, mode: str, ratios: dict, found: Found):
    """The step alone on n GPUs (rate, half-width): the n-GPU ceiling the run measured, else C x MobileNetV2's
    measured 2-GPU/1-GPU ratio in the mode (its per-GPU share carried to n other than 2); None where neither is."""
    at = rep.fields("batch_size", "precision")
    measured = index.find(of=rep, loader=CEILING, model=ceil.model, gpus=n, parallel=mode, **at)
    if measured is not None:
        found.basis["step"] = f"the {n}-GPU {mode} ceiling"
        return measured.rate, measured.halfwidth
    r: CeilingRatio | None = ratio_for(ratios, mode, at["batch_size"], at["precision"])
    if r is None:
        found.lacks.append(f"a {n}-GPU {mode} ceiling, or MobileNetV2's measured {RATIO_GPUS}-GPU/1-GPU {mode} ratio")
        return None
    carried = "" if n == RATIO_GPUS else f" x {n}/{RATIO_GPUS} (its per-GPU share carried to {n} GPUs)"
    found.basis["step"] = f"the 1-GPU ceiling x {r.label()}{carried}"
    hw = math.expm1(math.hypot(math.log1p(ceil.halfwidth), math.log1p(r.value.halfwidth)))
    return ceil.rate * r.value.value * n / RATIO_GPUS, hw


def _pipelines(loader: str, mode: str, n: int) -> int:
    """How many of the loader's pipelines feed n GPUs, as its record says: under ddp one per rank or one on rank 0,
    under dp one per GPU or one."""
    record = loader_record(loader)
    if mode == "ddp":
        return 1 if record.ddp == "rank0" else n
    return n if record.dp == "per_gpu" else 1


def _loader_at(index: Index, rep: Configuration, n: int, mode: str, pipelines: int, found: Found):
    """The loader side at n GPUs (rate, half-width, core-seconds and GPU seconds a sample): its rank part, else its
    loader-alone cell by today's rule (pipelines x L), else inferred from its 1-GPU training cells."""
    at = rep.fields(*AT)
    ranks = index.find(of=rep, loader=rep.loader, model=NO_MODEL, gpus=1, ranks=n, parallel=mode, **at)
    if ranks is not None:
        found.basis["loader"] = _told(f"the loader's {n}-rank {mode} part", ranks)
        return (ranks.rate, ranks.halfwidth, *_alone(ranks, found.lacks))
    alone = index.find(of=rep, loader=rep.loader, model=NO_MODEL, gpus=1, **at)
    if alone is not None:
        found.basis["loader"] = _told(f"today's rule, no rank part: {pipelines} pipeline(s) x the loader alone", alone)
        core_s, device_s = _alone(alone, found.lacks)
        return pipelines * alone.rate, alone.halfwidth, core_s, device_s
    return _inferred(index, rep, mode, pipelines, found)


def _inferred(index: Index, rep: Configuration, mode: str, pipelines: int, found: Found):
    """The loader side from its 1-GPU training cells where the run has no loader-alone cell: the fastest cell below
    its ceiling beyond noise gives L (the slower side of a hard minimum); none below: it keeps up, its rate unknown."""
    at = rep.fields(*AT)
    trained = [
        c
        for c in index.configs
        if c.loader == rep.loader and c.fields(*AT) == at and c.spec["gpus"] == 1 and c.settings == rep.settings
        if c.model != NO_MODEL and not c.spec.get("beside") and c.spec.get("ranks", 1) == 1
    ]
    trained = [c for c in trained if c.spec.get("parallel", "dp") == mode] or trained
    bound = []
    for c in trained:
        ceil = index.find(of=c, loader=CEILING, gpus=1, **c.fields("model", "batch_size", "precision", "parallel"))
        if ceil is not None and quotient(c.rate, c.halfwidth, ceil.rate, ceil.halfwidth).high < 1:
            share = max(0.0, (c.cores_busy or 0.0) / c.rate - (ceil.cores_busy or 0.0) / ceil.rate)
            bound.append((c, share if c.cores_busy is not None else None))
    device = ", its own device work unknown, taken as none" if loader_record(rep.loader).device_work else ""
    found.lacks.append(f"a loader-alone cell (the loader side inferred from its 1-GPU training cells{device})")
    if not bound:
        found.basis["loader"] = "its 1-GPU training cells, each within noise of its ceiling: it keeps up, rate unknown"
        return math.inf, 0.0, None, 0.0
    c, core_s = max(bound, key=lambda b: b[0].rate)
    found.basis["loader"] = f"{pipelines} pipeline(s) x its fastest 1-GPU training cell below its ceiling"
    return pipelines * c.rate, c.halfwidth, core_s, 0.0


def _consuming(index: Index, rep: Configuration, model: str, n: int, mode: str, found: Found):
    """The consuming term (samples/s), again with `model`'s host side at its longest (the interval's low end), and its
    half-width: `model`'s own main-thread work plus the loader's consuming work from its beside part; (None, None, 0)
    where it is unknown, said in `lacks`."""
    at = rep.fields(*AT)
    beside = index.find(of=rep, loader=rep.loader, gpus=1, beside=True, **at)
    if beside is None:
        found.lacks.append("a beside part of the loader (the consuming process's term unknown)")
        return None, None, 0.0
    h0, am, am_longest, host_side = _main_thread_ms(index, rep, beside, model)
    known = {
        "the beside part's host_step_ms": beside.host_step_ms,
        "the beside part's main_cpu_ms": beside.main_cpu_ms,
        f"{beside.model}'s ceiling's host_step_ms": h0,
        f"{model}'s ceiling's host side (host_step_ms, main_cpu_ms, GPU share)": am,
    }
    missing = [name for name, v in known.items() if not v]
    if missing:
        found.lacks.append(f"{', '.join(missing)} (the consuming process's term unknown)")
        return None, None, 0.0
    t_beside = beside_ms(beside.host_step_ms, beside.main_cpu_ms, h0)
    t_ms = consuming_ms(t_beside, am, h0)
    t_longest = consuming_ms(t_beside, max(am, am_longest), h0)
    per_step = rep.spec["batch_size"] * (n if mode == "ddp" else 1)  # ddp: a main thread per rank; dp: one for all
    found.consuming_ms = t_ms
    found.basis["consuming"] = _told(
        f"{model}'s host side, {host_side}, + the loader's consuming work beside {beside.model}", beside
    )
    if n > 1:
        found.basis["consuming"] += (
            f", {n} ranks' main threads" if mode == "ddp" else f", one main thread for {n} GPUs' batches"
        )
    return 1000.0 * per_step / t_ms, 1000.0 * per_step / t_longest, beside.halfwidth


def _main_thread_ms(index: Index, rep: Configuration, beside: Configuration, model: str) -> tuple:
    """h(M0), the beside part's model's 1-GPU ceiling's host time, a(M), `model`'s ceiling's host side a step
    (`terms.host_side_ms`, with its launch part where the run has one), h(M), the longest that host side can be, and
    what a(M) was read from: the run's; for a beside part carried from another host, h(M0) of that host where it
    holds it (one host's times with its beside part), and a(M), h(M) of that host where the run's ceiling does not
    give them. None where unknown."""
    at = rep.fields("batch_size", "precision")

    def run_ceiling(m: str) -> Configuration | None:
        return index.find(of=rep, loader=CEILING, model=m, gpus=1, **at)

    own = beside.reference_times if beside.carried else {}
    h_own = own.get((beside.model, at["batch_size"], at["precision"]), (None,))[0]
    ref = run_ceiling(beside.model)
    h0 = h_own or (ref.host_step_ms if ref else None)
    ceiling = run_ceiling(model)
    if ceiling and ceiling.host_step_ms:
        times = (ceiling.host_step_ms, ceiling.main_cpu_ms, ceiling.gpu_share)
        launch = _launch_part(index, rep, model)
    else:
        times, launch = own.get((model, at["batch_size"], at["precision"])), None
    if not times:
        return h0, None, None, ""
    am, which = host_side_ms(*times, launch_ms=launch.host_step_ms if launch else None)
    if which == "launch":
        basis = f"its launch time (its ceiling at batch {launch.spec['batch_size']}, host-paced)"
    elif which == "step call":
        basis = "its step call (the host set its pace)"
    else:
        basis = "its main thread's CPU time (its GPU was busy; no launch part)"
    return h0, am, times[0], basis


def _launch_part(index: Index, rep: Configuration, model: str) -> Configuration | None:
    """`model`'s ceiling at the smallest batch below the row's where the host set its pace (GPU share under
    GPU_BOUND): its step call is the host's launch time a step, which a GPU-paced ceiling hides. None where the run
    has none."""
    batch, precision = rep.spec["batch_size"], rep.spec["precision"]
    small = [
        c
        for c in index.configs
        if c.loader == CEILING and c.model == model and c.spec["gpus"] == 1 and not c.is_part
        if c.spec["precision"] == precision and c.spec["batch_size"] < batch and c.host_step_ms
        if c.gpu_share is not None and c.gpu_share < GPU_BOUND
    ]
    return min(small, key=lambda c: c.spec["batch_size"]) if small else None


def _told(basis: str, part: Configuration) -> str:
    """A side's basis, with where its part came from when it was carried from another host."""
    return f"{basis}, {part.carried}" if part.carried else basis
