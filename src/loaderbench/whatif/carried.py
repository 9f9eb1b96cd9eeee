"""Loader parts of one host carried to another: the rule that predicts a host's cells from the loader parts another
host measured (its loader alone, rank and beside parts) and the host's own ceilings.

The cores rule, fixed before it is scored: a part whose processes kept its pool of cores busy (cores busy at least
CORES_BOUND of the host's cores less the part's launch cores) was bound by the cores, and delivers pool_to / pool_from
times its rate on the other host, its core-seconds and GPU seconds a sample unchanged; a part that left cores idle
(bound by its main thread, a GPU decoder or a read rate) delivers its own rate. A beside part's main-thread times are
carried unchanged (one thread: the clock, not the cores, sets them), with its own host's ceilings' times: the
reference model's step call, and the model's host side where the run's ceiling does not hold it. The half-widths are the parts' own."""

from __future__ import annotations

import copy
from dataclasses import replace

from loaderbench.core.registry import NO_MODEL

from .measured import CEILING, Configuration, by_run, field_of

CORES_BOUND = 0.85  # a part kept its pool busy at or above this share of it: the cores bound it
KEY = ("loader", "model", "tier", "batch_size", "precision", "parallel", "gpus", "beside", "ranks")
CARRIED_FROM = "carried from"  # how a side's basis begins to say where its carried part came from


def is_loader_part(c: Configuration) -> bool:
    """The loader alone (model none), one of its rank parts or its beside part."""
    return c.loader != CEILING and (c.model == NO_MODEL or bool(c.spec.get("beside")))


def carry(parts: list[Configuration], into: list[Configuration]) -> list[Configuration]:
    """`into` with, in each of its runs, the loader parts of `parts` that run does not measure itself, carried by
    the cores rule to the run's host (the first run of `parts` that holds a part gives it)."""
    out = list(into)
    given = [c for run in by_run(parts).values() for c in run if is_loader_part(c)]
    times = _ceiling_times(parts)
    for run, mine in by_run(into).items():
        have = {c.key(*KEY) for c in mine}
        cores = next((c.host_cores for c in mine if c.host_cores), None)
        for part in given:
            if part.key(*KEY) not in have and cores:
                have.add(part.key(*KEY))
                out.append(_carried(part, run, cores, times.get(part.run, {})))
    return out


def _carried(part: Configuration, run: str, cores: int, times: dict[tuple, tuple]) -> Configuration:
    """`part` as run `run` on a host of `cores` cores would measure it, by the cores rule."""
    scale, why = cores_scale(part, cores)
    c = replace(
        part,
        run=run,
        rates=[r * scale for r in part.rates],
        cores_busy=part.cores_busy * scale if part.cores_busy is not None else None,
        gpu_share=min(1.0, part.gpu_share * scale) if part.gpu_share is not None else None,
        host_cores=cores,
        spec=copy.deepcopy(part.spec),
    )
    c.carried = f"{CARRIED_FROM} the {part.host_cores}-core host of run '{part.run}': {why}"
    c.reference_times = times
    return c


def cores_scale(part: Configuration, cores: int) -> tuple[float, str]:
    """The factor the cores rule applies to `part` on a host of `cores` cores, and why."""
    if part.spec.get("beside"):
        return 1.0, "its main thread's times as measured"
    if part.host_cores is None or part.cores_busy is None:
        return 1.0, "its own rate (its host's cores or its cores busy unknown)"
    pool_from, pool_to = part.host_cores - part.launch, cores - part.launch
    if part.cores_busy < CORES_BOUND * pool_from:
        return 1.0, f"its own rate (it kept {part.cores_busy:.1f} of {pool_from} cores busy: not cores-bound)"
    return pool_to / pool_from, f"x {pool_to}/{pool_from} cores (it kept {part.cores_busy:.1f} of {pool_from} busy)"


def _ceiling_times(parts: list[Configuration]) -> dict[str, dict[tuple, tuple]]:
    """Each run of `parts` -> its 1-GPU ceilings' (host_step_ms, main_cpu_ms, GPU share) by (model, batch size,
    precision), where the records hold the host time."""
    out: dict[str, dict[tuple, tuple]] = {}
    for c in parts:
        if c.loader == CEILING and field_of(c.spec, "gpus") == 1 and c.host_step_ms:
            out.setdefault(c.run, {})[c.key("model", "batch_size", "precision")] = (
                c.host_step_ms,
                c.main_cpu_ms,
                c.gpu_share,
            )
    return out
