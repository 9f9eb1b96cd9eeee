"""Each 1-GPU training configuration's rate predicted at n GPUs (dp and ddp) from its run's 1-GPU cells and the
host's cores, beside the n-GPU cell where the run measured one.

How a loader's pipelines feed several GPUs, as its registry record says (`dp`, `ddp`): under ddp every rank runs its
own loader on its own cores and GPU, or one pipeline on rank 0 makes the batch of every rank; under dp one process
feeds every GPU, with one pipeline per GPU in it or one pipeline. A single pipeline's device work (the record's
`device_work`: decoding or augmenting on the GPU) runs on the first GPU.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pandas as pd

from loaderbench.core.registry import NO_MODEL, loader_record
from loaderbench.core.uncertainty import quotient
from loaderbench.core.util import stable_hash

from .measured import CEILING, Configuration, Index, by_run, configurations
from .model import CORES, LOADER, MISS, MODEL_CORES, inverse_softmin, loader_eff, softmin, which_limit
from .onegpu import predict

SCALE_COLUMNS = [
    "configuration",
    "kind",
    "from_cell",
    "model",
    "loader",
    "tier",
    "gpus",
    "batch_size",
    "precision",
    "parallel",
    "loader_1gpu",
    "ceiling_1gpu",
    "loader_eff_1gpu",
    "loader_side",
    "gpu_side",
    "predicted",
    "limited_by",
    "measured",
    "measured_lo",
    "measured_hi",
    "error",
    "ceiling_measured",
    "missed",
    "note",
    "lacks",
    "host_cores",
    "run",
]


def scale(records: list[dict], gpus=(2, 4), k: float | None = None, fit_model: str | None = None) -> pd.DataFrame:
    """Each 1-GPU training configuration's rate predicted at each n of `gpus` under ddp and dp, from its run's 1-GPU
    cells and the host's cores, beside the n-GPU cell where the run measured one. k: given, else fitted by `predict`
    where the run has loader-alone cells, else inf (the hard minimum). df.attrs: k, k_basis."""
    if k is None:
        fitted = predict(records, fit_model)
        k = fitted.attrs["k"] if fitted.attrs.get("k") is not None else math.inf
        basis = (
            f"fitted on {fitted.attrs['fit_model']}'s 1-GPU cells and their parts"
            if fitted.attrs.get("k") is not None
            else "not fitted (no loader-alone cells): the hard minimum, the slower side alone sets the rate"
        )
    else:
        basis = "given"
    rows = []
    for mine in by_run(configurations(records)).values():
        index = Index(mine)
        singles: dict[tuple, dict[str, Configuration]] = defaultdict(dict)
        for c in mine:
            if c.spec["gpus"] == 1 and c.loader != CEILING and c.model != NO_MODEL and c.device != "cpu":
                key = (*c.key("loader", "tier", "batch_size", "precision"), c.model, stable_hash(c.settings))
                singles[key][c.spec.get("parallel", "dp")] = c
        for modes in singles.values():
            for mode in ("ddp", "dp"):
                for n in gpus:
                    rows.append(_scale_row(index, modes, mode, int(n), k))
    df = pd.DataFrame(rows, columns=SCALE_COLUMNS)
    df.attrs.update(k=k, k_basis=basis)
    return df


def _scale_row(index: Index, modes: dict[str, Configuration], mode: str, n: int, k: float) -> dict:
    other = "dp" if mode == "ddp" else "ddp"
    base = modes.get(mode) or modes[other]
    lacks, notes = [], []
    if base.host_gpus is not None and n > base.host_gpus:
        notes.append(f"the run's host has {base.host_gpus} GPUs: this is a host like it with {n}")
    if mode not in modes:
        lacks.append(f"a 1-GPU {mode} cell of the loader (its {other} cell used)")
    spec = base.spec
    ceil = _one_gpu_ceiling(index, base, mode, lacks)
    alone = index.find(
        of=base, model=NO_MODEL, gpus=1, **base.fields("loader", "tier", "batch_size", "precision", "parallel")
    )
    measured = index.find(
        of=base, model=base.model, gpus=n, parallel=mode, **base.fields("loader", "tier", "batch_size", "precision")
    )
    ceil_n = index.find(
        of=base, loader=CEILING, model=base.model, gpus=n, parallel=mode, **base.fields("batch_size", "precision")
    )
    row = {
        **base.describe(),
        "configuration": measured.name if measured else _n_gpu_name(base.name, n, mode),
        "kind": "predicted",
        "from_cell": base.name,
        "gpus": n,
        "parallel": mode,
        "loader_1gpu": base.rate,
        "ceiling_1gpu": ceil.rate if ceil else math.nan,
        "measured": measured.rate if measured else math.nan,
        "measured_lo": measured.lo if measured else math.nan,
        "measured_hi": measured.hi if measured else math.nan,
        "ceiling_measured": ceil_n.rate if ceil_n else math.nan,
        "host_cores": base.host_cores,
        "run": base.run,
        **dict.fromkeys(["loader_eff_1gpu", "loader_side", "gpu_side", "predicted", "error"], math.nan),
        "limited_by": "",
        "missed": "",
    }
    if ceil is None:
        lacks.append(
            f"a 1-GPU ceiling (the synthetic cell of {base.model} at batch {spec['batch_size']}, {spec['precision']})"
        )
        return {**row, "lacks": "; ".join(lacks), "note": ""}
    step_cores = max(0.0, ceil.cores_busy - ceil.launch) if ceil.cores_busy is not None else 0.0
    cap, u, rate_alone, loader_cores, l_eff1 = _loader_at_one_gpu(base, ceil, alone, step_cores, k, lacks, notes)
    if loader_cores is None and math.isfinite(cap):
        lacks.append("cores busy of the loader (the cores' share not checked)")
    pipelines = _pipelines(base.loader, mode, n)
    launch_n = n if base.launch else 0
    pool = (base.host_cores - launch_n) if base.host_cores else None
    if pool is None:
        lacks.append("the host's cores (provenance.host.cpus_usable)")
    loader_side = (
        loader_eff(pipelines * cap, pipelines * loader_cores, pool, step_cores, ceil.rate)
        if loader_cores is not None and pool is not None and math.isfinite(cap)
        else pipelines * cap
    )
    device = u / rate_alone  # the loader's GPU seconds per sample
    gpu_side, step_gpu = _gpu_side(pipelines, n, ceil.rate, device)
    predicted = softmin(loader_side, gpu_side, k)
    row.update(
        loader_eff_1gpu=l_eff1,
        loader_side=loader_side,
        gpu_side=gpu_side,
        predicted=predicted,
        limited_by=which_limit(
            loader_side,
            gpu_side,
            step_gpu,
            device,
            loader_side < pipelines * cap * (1 - MISS),
            loader_cores is not None and step_cores / ceil.rate > loader_cores / cap,
        ),
        error=row["measured"] / predicted - 1 if measured else math.nan,
    )
    row.update(lacks="; ".join(lacks), note="; ".join(notes))
    row["missed"] = _missed_scale(row, mode, n, k)
    return row


def _one_gpu_ceiling(index: Index, base: Configuration, mode: str, lacks: list) -> Configuration | None:
    """The model's 1-GPU ceiling at the loader cell's batch and precision, in `mode` where measured, else the other
    mode's (said in `lacks`)."""
    ceil = index.find(
        of=base, loader=CEILING, model=base.model, gpus=1, **base.fields("batch_size", "precision"), parallel=mode
    )
    if ceil is None:
        ceil = index.find(of=base, loader=CEILING, model=base.model, gpus=1, **base.fields("batch_size", "precision"))
        if ceil is not None:
            lacks.append(f"a 1-GPU {mode} ceiling (the {ceil.spec.get('parallel', 'dp')} one used)")
    return ceil


def _gpu_side(pipelines: int, n: int, ceiling: float, device_s: float) -> tuple[float, float]:
    """The n-GPU rate the GPUs allow, and the step's rate on the GPU that carries the loader's device work."""
    if pipelines == n:  # each GPU decodes its own share
        return n / (1 / ceiling + device_s), ceiling
    # one pipeline: its device work on the first GPU, beside that GPU's 1/n of the step
    return 1 / (1 / (n * ceiling) + device_s), n * ceiling


def _loader_at_one_gpu(
    base: Configuration,
    ceil: Configuration,
    alone: Configuration | None,
    step_cores: float,
    k: float,
    lacks: list,
    notes: list,
) -> tuple:
    """The loader's side at one GPU: (its rate cap, its GPU busy share alone, its rate alone, its cores busy, its
    effective rate beside the step) - from its loader-alone cell, else inferred from its 1-GPU cell by inverting the
    soft-min (what that leaves unknown goes to `lacks`, a loader that keeps up to `notes`)."""
    if alone is not None:  # the loader measured alone: its rate, cores and GPU share
        cap, u, rate_alone = alone.rate, alone.gpu_share or 0.0, alone.rate
        if alone.gpu_share is None:
            lacks.append("the loader-alone cell's GPU telemetry (its GPU share taken as 0)")
        loader_cores = alone.cores_busy
        l_eff1 = (
            loader_eff(alone.rate, alone.cores_busy, base.host_cores - alone.launch, step_cores, ceil.rate)
            if base.host_cores and alone.cores_busy is not None
            else alone.rate
        )
    else:  # inferred from the 1-GPU cell: invert the softmin, the loader's device work unknown
        lacks.append(
            "loader-alone cells (the loader's rate inferred from its 1-GPU cell"
            + ("; its own GPU work unknown, taken as none)" if loader_record(base.loader).device_work else ")")
        )
        u, rate_alone = 0.0, 1.0
        if quotient(base.rate, base.halfwidth, ceil.rate, ceil.halfwidth).high >= 1:
            l_eff1 = math.inf
            notes.append(
                f"the loader is not limiting at 1 GPU ({base.rate:.0f} within noise of the ceiling {ceil.rate:.0f}): "
                "its rate alone is unknown, taken to keep up"
            )
        else:
            l_eff1 = inverse_softmin(base.rate, ceil.rate, k)
        cap = l_eff1
        loader_cores = None
        if base.cores_busy is not None and math.isfinite(l_eff1):
            per_sample = max(0.0, base.cores_busy / base.rate - (ceil.cores_busy or 0.0) / ceil.rate)
            loader_cores = per_sample * l_eff1  # its cores busy at its own rate
    return cap, u, rate_alone, loader_cores, l_eff1


def _pipelines(loader: str, mode: str, n: int) -> int:
    """How many of the loader's pipelines feed n GPUs, as its record says: under ddp one per rank or one on rank 0,
    under dp one per GPU or one."""
    record = loader_record(loader)
    if mode == "ddp":
        return 1 if record.ddp == "rank0" else n
    return n if record.dp == "per_gpu" else 1


N_GPU_ID = re.compile(r"_g1_(b\d+_(?:fp32|amp))_(?:dp|ddp)")


def _n_gpu_name(name: str, n: int, mode: str) -> str:
    return N_GPU_ID.sub(lambda m: f"_g{n}_{m.group(1)}_{mode}", name, count=1)


def _missed_scale(row: dict, mode: str, n: int, k: float) -> str:
    """Where an n-GPU prediction misses by more than MISS, which part of the model missed: the step's own scaling
    where the run measured the n-GPU ceiling and it lies below the modelled GPU side (and with it in place of that
    side the prediction comes within MISS, nothing else is named), else the loader's side or the GPU side."""
    err = row["error"]
    if not abs(err) > MISS:
        return ""
    why = []
    cm, gpu_side, loader_side = row["ceiling_measured"], row["gpu_side"], row["loader_side"]
    with_cm = softmin(loader_side, cm, k) if pd.notna(cm) else math.nan
    if pd.notna(cm) and cm < gpu_side * (1 - MISS) and with_cm < row["predicted"] * (1 - MISS / 2):
        what = "DataParallel's replicate, scatter and gather" if mode == "dp" else "the gradient all-reduce"
        why.append(
            f"the step itself scales worse than modelled: the {n}-GPU ceiling measured {cm:.0f}, "
            f"{100 * (1 - cm / gpu_side):.0f}% below the modelled GPU side {gpu_side:.0f} ({what}); with it the "
            f"prediction is {with_cm:.0f} ({100 * (row['measured'] / with_cm - 1):+.0f}%)"
        )
        if abs(row["measured"] / with_cm - 1) <= MISS:
            return _missed_text(row, why)
    loader_bound = row["limited_by"] in (LOADER, CORES, MODEL_CORES)
    if err < 0 and math.isinf(row["loader_eff_1gpu"]):
        why.append(
            "the loader, not limiting at 1 GPU and so taken to keep up, limits here: its rate alone is unknown "
            "(a loader-alone cell would say it)"
        )
    elif err < 0 and loader_bound:
        shared = "memory bandwidth, the tier's read rate, PCIe" + (
            ", the one process's main thread" if mode == "dp" else ""
        )
        why.append(
            f"the loader scales worse than its cores allow: its pipelines contend for what the model does not count ({shared})"
        )
    elif err > 0 and loader_bound:
        why.append(
            "the loader scales better than its 1-GPU cell implies: a per-process limit (one main thread, the GIL) "
            "that more processes lift, or the 1-GPU cell ran slow"
            + (
                "; or its GPU work shared one GPU with the whole step at 1 GPU and shares it with 1/n of the step "
                "here (a loader-alone cell would say how much GPU it takes)"
                if loader_record(row["loader"]).device_work and "loader-alone" in row["lacks"]
                else ""
            )
        )
    elif err > 0:
        why.append("measured above the modelled GPU side: the 1-GPU ceiling understates the step at n GPUs")
    elif not why:
        why.append("measured below the modelled GPU side: the step and the loader share the GPUs more than modelled")
    return _missed_text(row, why)


def _missed_text(row: dict, why: list[str]) -> str:
    err = row["error"]
    within = row["measured_lo"] <= row["predicted"] <= row["measured_hi"]
    return (
        f"measured {100 * abs(err):.0f}% {'below' if err < 0 else 'above'}: "
        + "; ".join(why)
        + (" (the prediction lies within the cell's interval)" if within else "")
    )
