"""Each cell's rate predicted from its parts: the loader alone, the model's ceiling, and the host they share.

The model (docs/method.md, "Predicted samples/s"): a training job of loader X and model M runs two sides joined by a
queue. The loader side is the loader alone (its `none` cell: rate L, GPU busy share u_L, cores busy c_L), less the
host cores the step's own host work takes from it; the model side is M's ceiling (its `synthetic` cell: rate C,
cores busy c_C), less the GPU time the loader's own device work (GPU decoding, resizing) takes from the step:

    C_eff = 1 / (1/C + u_L/L)
    L_eff = min(L, pool / (c_L/L + e/C)),   pool = N - launch cores,  e = max(0, c_C - launch cores)
    P     = softmin_k(L_eff, C_eff) = (L_eff^-k + C_eff^-k)^(-1/k)

The loader and the step's host work beyond its launch cores share the pool of cores the cell's placement leaves
them: at rate P they need P * (c_L/L + e/C) cores; the loader keeps its rate alone while that fits, else the pool
sets it. m = 1 - L_eff/L is the share of the loader the step's host work takes: 0 when the step needs only its launch
core and the loader left cores idle, large on a CPU-only host, where the model's compute runs on the loader's cores.
k, the one fitted parameter, says how sharply the slower side dominates (how much the queue between them hides).

`predict` fits k on one model's cells and checks it on the others'; `scale` predicts n-GPU rates (dp and ddp) from
one GPU's cells and the host's cores.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from loaderbench.core.cells import configuration
from loaderbench.core.comparable import group_of
from loaderbench.core.registry import loader_record
from loaderbench.core.uncertainty import between_noise, quotient, repeats_halfwidth, widened
from loaderbench.core.util import stable_hash

from .columns import DEFAULT_MODEL, LOADER_ALONE

CEILING = "synthetic"  # the loader whose cell is a model's compute ceiling
MISS = 0.10  # |measured/predicted - 1| above this: the row says which part of the model missed
# the loader's device work counts as a limit of its own where it adds more than this share to the step's GPU time
DEVICE_SHARE_NOTABLE = 0.10
K_GRID = (*np.geomspace(0.25, 64.0, 257), math.inf)  # the k the fit tries (inf: the hard minimum)

# How a loader's pipelines feed several GPUs, as its registry record says (`dp`, `ddp`): under ddp every rank runs its
# own loader on its own cores and GPU, or one pipeline on rank 0 makes the batch of every rank; under dp one process
# feeds every GPU, with one pipeline per GPU in it or one pipeline. A single pipeline's device work (the record's
# `device_work`: decoding or augmenting on the GPU) runs on the first GPU.

LOADER = "loader"
CORES = "loader, on its share of the host's cores"
# the loader side binds, but the step's host work takes more of the shared cores than the loader does (the model's
# compute on a CPU-only host): the model, not the loader, sets the rate
MODEL_CORES = "model, its host work on the cores it shares with the loader"
MODEL = "model"
GPU_SHARED = "GPU shared with the loader's decoding"

PREDICT_COLUMNS = [
    "configuration",
    "model",
    "loader",
    "tier",
    "gpus",
    "batch_size",
    "precision",
    "parallel",
    "measured",
    "measured_lo",
    "measured_hi",
    "loader_alone",
    "ceiling",
    "predicted",
    "error",
    "limited_by",
    "role",
    "missed",
    "loader_eff",
    "ceiling_eff",
    "loader_gpu_share",
    "cores_taken",
    "host_cores",
    "lacks",
    "run",
]

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


# ---------------------------------------------------------------------------------------------- the arithmetic


def softmin(a: float, b: float, k: float) -> float:
    """(a^-k + b^-k)^(-1/k): the slower of two sides joined by a queue; k = inf is the hard minimum."""
    lo, hi = min(a, b), max(a, b)
    if math.isinf(k) or math.isinf(hi):
        return lo
    return lo * (1.0 + (lo / hi) ** k) ** (-1.0 / k)


def inverse_softmin(p: float, c: float, k: float) -> float:
    """The side l with softmin(l, c, k) = p; inf where p >= c (the other side alone explains p)."""
    if p >= c:
        return math.inf
    if math.isinf(k):
        return p
    return p * (1.0 - (p / c) ** k) ** (-1.0 / k)


def ceiling_eff(ceiling: float, loader_gpu_share: float, loader_alone: float) -> float:
    """The model's rate on a GPU that also runs the loader's own device work: 1 / (1/C + u_L/L)."""
    return 1.0 / (1.0 / ceiling + loader_gpu_share / loader_alone)


def loader_eff(
    loader_alone: float, loader_cores: float | None, pool: float, step_cores: float, ceiling: float
) -> float:
    """The loader's rate beside the step: min(L, pool / (c_L/L + e/C)) - the loader's and the step's host work
    (beyond its launch cores) in core-seconds per sample, on the `pool` of cores they share; L where the loader's
    cores busy are unknown."""
    if loader_cores is None:
        return loader_alone
    need = loader_cores / loader_alone + step_cores / ceiling
    return loader_alone if need <= 0 else min(loader_alone, pool / need)


def fit_k(pairs: list[tuple[float, float, float]]) -> float:
    """The k of K_GRID minimising the median |measured/P - 1| over (measured, L_eff, C_eff); the smallest on a tie."""
    if not pairs:
        raise ValueError("no cells to fit k on")
    best, best_err = K_GRID[0], math.inf
    for k in K_GRID:
        err = statistics.median(abs(m / softmin(lo, c, k) - 1) for m, lo, c in pairs)
        if err < best_err - 1e-12:
            best, best_err = k, err
    return float(best)


# ---------------------------------------------------------------------------------------------- the records


@dataclass
class Config:
    """One configuration of one run: the median over its ok repeats, and what its telemetry says."""

    run: str
    name: str  # the cell id without its repeat (and the settings that tell variants of one id apart)
    spec: dict
    settings: dict  # the spec fields that differ between records of one cell id (a sweep's variant), else {}
    rates: list[float]
    halfwidth: float
    gpu_share: float | None  # mean NVML busy / 100 over its GPUs; 0 on a CPU device; None where not sampled
    cores_busy: float | None
    launch: int  # launch cores its placement reserved
    host_cores: int | None
    device: str | None
    host_gpus: int | None = None  # GPUs on the run's host
    records: list[dict] = field(repr=False, default_factory=list)

    @property
    def rate(self) -> float:
        return float(statistics.median(self.rates))

    @property
    def lo(self) -> float:
        return self.rate / (1 + self.halfwidth)

    @property
    def hi(self) -> float:
        return self.rate * (1 + self.halfwidth)

    @property
    def model(self) -> str:
        return model_of(self.spec)

    @property
    def loader(self) -> str:
        return self.spec["loader"]

    def key(self, *names: str) -> tuple:
        return tuple(field_of(self.spec, n) for n in names)


def model_of(spec: dict) -> str:
    """A spec's model (records made before models were an axis trained MobileNetV2)."""
    return spec.get("model") or DEFAULT_MODEL


def field_of(spec: dict, name: str):
    """A spec's field as configurations are matched on it (a record made before a field existed: its default)."""
    if name == "model":
        return model_of(spec)
    return spec.get("parallel", "dp") if name == "parallel" else spec.get(name)


def host_cores(record: dict) -> int | None:
    """The host's cores as the cell saw them: its placement's launch and other cores, else the usable CPUs (a cell's
    own affinity leaves out the launch cores its placement reserved: 31 of 32 with one GPU, 30 with two)."""
    place = (record.get("metrics") or {}).get("placement")
    if isinstance(place, dict) and place.get("other_cores") is not None:
        return len(place.get("launch_cores") or []) + len(place["other_cores"])
    return _host(record).get("cpus_usable")


def _host(record: dict) -> dict:
    return (record.get("provenance") or {}).get("host") or {}


def _launch_cores(record: dict) -> int:
    place = (record.get("metrics") or {}).get("placement")
    return len(place.get("launch_cores") or []) if isinstance(place, dict) else 0


def _gpu_share(record: dict) -> float | None:
    m, tel = record.get("metrics") or {}, record.get("telemetry") or {}
    if ((m.get("device") or {}).get("type")) == "cpu":
        return 0.0
    utils = [(g.get("util_pct") or {}).get("mean") for g in tel.get("gpus") or []]
    utils = [u for u in utils if u is not None]
    return float(np.mean(utils)) / 100 if utils else None


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


def configurations(records: list[dict]) -> list[Config]:
    """The ok records as configurations: grouped by comparison group (`core.comparable`) and cell id without its
    repeat, and apart where records of one id were made with different settings (a sweep's variants: the name says
    which)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("status") == "ok" and (r.get("metrics") or {}).get("samples_per_s"):
            groups[(group_of(r), configuration(r["cell_id"]))].append(r)
    out = []
    for (run, name), recs in groups.items():
        variants: dict[str, list[dict]] = defaultdict(list)
        for r in recs:
            variants[stable_hash(_settings(r["spec"]))].append(r)
        differing = _differing([_settings(v[0]["spec"]) for v in variants.values()])
        for vrecs in variants.values():
            spec = vrecs[0]["spec"]
            settings = {f: spec.get(f) for f in differing}
            label = name + (" [" + ", ".join(f"{f}={v}" for f, v in settings.items()) + "]" if settings else "")
            rates = [float(r["metrics"]["samples_per_s"]) for r in vrecs]
            out.append(
                Config(
                    run=run,
                    name=label,
                    spec=spec,
                    settings=settings,
                    rates=rates,
                    halfwidth=math.nan,
                    gpu_share=_median([_gpu_share(r) for r in vrecs]),
                    cores_busy=_median([(r.get("telemetry") or {}).get("cpu_cores_busy") for r in vrecs]),
                    launch=max(_launch_cores(r) for r in vrecs),
                    host_cores=None,
                    device=((vrecs[0].get("metrics") or {}).get("device") or {}).get("type"),
                    records=vrecs,
                )
            )
    for run in {c.run for c in out}:
        mine = [c for c in out if c.run == run]
        noise = between_noise([c.rates for c in mine])
        cores = [n for c in mine for n in (host_cores(r) for r in c.records) if n]
        gpus = [len(h["gpu_models"]) for c in mine for h in (_host(r) for r in c.records) if "gpu_models" in h]
        for c in mine:
            c.host_cores = max(cores) if cores else None
            c.host_gpus = max(gpus) if gpus else None
            if len(c.rates) > 1:
                c.halfwidth = repeats_halfwidth(c.rates)
            else:
                window = ((c.records[0].get("metrics") or {}).get("window") or {}).get("ci95_rel_halfwidth")
                c.halfwidth = widened(window or 0.0, noise)
    return out


def _settings(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("repeat", "seed")}


def _differing(settings: list[dict]) -> list[str]:
    keys = sorted(set().union(*settings)) if settings else []
    return [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]


class _Index:
    """The configurations of one run, found by their parts' fields (a variant matched on its differing settings)."""

    def __init__(self, configs: list[Config]):
        self.configs = configs

    def find(self, of: Config | None = None, **want) -> Config | None:
        hits = [c for c in self.configs if all(field_of(c.spec, k) == v for k, v in want.items())]
        if of is not None and len(hits) > 1:
            same = [c for c in hits if all(of.spec.get(f) == v for f, v in c.settings.items())]
            hits = same or hits
        return max(hits, key=lambda c: c.rate) if hits else None


# ---------------------------------------------------------------------------------------------- 1 GPU and beyond


def predict(records: list[dict], fit_model: str | None = None) -> pd.DataFrame:
    """One row per training configuration (not synthetic, not the loader alone) whose run has both its parts - its
    loader-alone cell and its model's ceiling - with the measured and predicted rates; k is fitted on `fit_model`'s
    cells (default: the model with the most rows) and checked on the other models'. df.attrs: k, fit_model."""
    configs = configurations(records)
    by_run: dict[str, list[Config]] = defaultdict(list)
    for c in configs:
        by_run[c.run].append(c)
    rows = []
    for mine in by_run.values():
        index = _Index(mine)
        for c in mine:
            if c.loader == CEILING or c.model == LOADER_ALONE:
                continue
            alone = index.find(
                of=c, model=LOADER_ALONE, **_fields(c, "loader", "tier", "gpus", "batch_size", "precision", "parallel")
            )
            ceil = index.find(
                of=c, loader=CEILING, **_fields(c, "model", "gpus", "batch_size", "precision", "parallel")
            )
            if alone is None or ceil is None:
                continue
            rows.append(_parts_row(c, alone, ceil))
    df = pd.DataFrame(rows, columns=PREDICT_COLUMNS)
    df.attrs.update(k=None, fit_model=None)
    if df.empty:
        return df
    models = Counter(df["model"])
    if fit_model is None:
        most = max(models.values())
        tied = sorted(m for m, n in models.items() if n == most)
        fit_model = DEFAULT_MODEL if DEFAULT_MODEL in tied else tied[0]
    elif fit_model not in models:
        raise ValueError(
            f"fit model {fit_model!r} has no cell with both its parts (models that have: {', '.join(sorted(models))})"
        )
    fit = df["model"] == fit_model
    k = fit_k([(r.measured, r.loader_eff, r.ceiling_eff) for r in df[fit].itertuples()])
    df["role"] = np.where(fit, "fit", "check")
    df["predicted"] = [softmin(le, ce, k) for le, ce in zip(df["loader_eff"], df["ceiling_eff"])]
    df["error"] = df["measured"] / df["predicted"] - 1
    df["missed"] = [_missed_parts(r) for r in df.itertuples()]
    df.attrs.update(k=k, fit_model=fit_model)
    return df


def _fields(c: Config, *names: str) -> dict:
    return dict(zip(names, c.key(*names)))


def _parts_row(c: Config, alone: Config, ceil: Config) -> dict:
    lacks = []
    n = c.host_cores
    pool = (n - alone.launch) if n else None
    step_cores = max(0.0, ceil.cores_busy - ceil.launch) if ceil.cores_busy is not None else 0.0
    if ceil.cores_busy is None:
        lacks.append("the ceiling cell's cores busy (its host work taken as its launch cores only)")
    if alone.cores_busy is None or pool is None:
        lacks.append("the loader-alone cell's cores busy or the host's cores (the cores' share not checked)")
        l_eff = alone.rate
    else:
        l_eff = loader_eff(alone.rate, alone.cores_busy, pool, step_cores, ceil.rate)
    u = alone.gpu_share
    if u is None:
        lacks.append("the loader-alone cell's GPU telemetry (its GPU share taken as 0)")
        u = 0.0
    c_eff = ceiling_eff(ceil.rate, u, alone.rate)
    step_most = alone.cores_busy is not None and step_cores / ceil.rate > alone.cores_busy / alone.rate
    limited = _limit(l_eff, c_eff, ceil.rate, u / alone.rate, l_eff < alone.rate * (1 - MISS), step_most)
    return {
        **_describe(c),
        "measured": c.rate,
        "measured_lo": c.lo,
        "measured_hi": c.hi,
        "loader_alone": alone.rate,
        "ceiling": ceil.rate,
        "predicted": math.nan,
        "error": math.nan,
        "limited_by": limited,
        "role": "",
        "missed": "",
        "loader_eff": l_eff,
        "ceiling_eff": c_eff,
        "loader_gpu_share": u,
        "cores_taken": 1 - l_eff / alone.rate,
        "host_cores": n,
        "lacks": "; ".join(lacks),
        "run": c.run,
    }


def _describe(c: Config) -> dict:
    return {
        "configuration": c.name,
        "model": c.model,
        "loader": c.loader,
        "tier": c.spec["tier"],
        "gpus": c.spec["gpus"],
        "batch_size": c.spec["batch_size"],
        "precision": c.spec["precision"],
        "parallel": c.spec.get("parallel", "dp"),
    }


def _limit(
    loader_side: float,
    gpu_side: float,
    ceiling: float,
    device_s_per_sample: float,
    cores_bound: bool,
    step_takes_most: bool = False,
) -> str:
    """Which part sets the rate: the slower side; on the loader side cut by the shared cores, whose work takes more of
    them (the step's: the model sets the rate); on the GPU side whether the loader's device work counts."""
    if loader_side <= gpu_side:
        if cores_bound:
            return MODEL_CORES if step_takes_most else CORES
        return LOADER
    return GPU_SHARED if device_s_per_sample > DEVICE_SHARE_NOTABLE / ceiling else MODEL


def _within(row) -> str:
    return (
        " (the prediction lies within the cell's interval)"
        if row.measured_lo <= row.predicted <= row.measured_hi
        else ""
    )


def _missed_parts(row) -> str:
    """Where a 1-GPU prediction misses by more than MISS, which part of the model missed."""
    if not abs(row.error) > MISS:
        return ""
    pct = f"{100 * abs(row.error):.0f}%"
    if row.error < 0:
        return (
            f"measured {pct} below, so below both parts: sharing stronger than modelled (the loader and the step "
            f"contend for what the model does not count - memory bandwidth, PCIe, the launch core - or the queue "
            f"hides less than k says){_within(row)}"
        )
    if row.measured > row.loader_alone:
        return f"measured {pct} above, above the loader-alone cell: the loader-alone cell understates the loader{_within(row)}"
    if row.measured > row.ceiling:
        return f"measured {pct} above, above the ceiling: the ceiling cell understates the model{_within(row)}"
    return (
        f"measured {pct} above, between the prediction and both parts: sharing weaker than modelled (the loader's "
        f"GPU share or the step's host cores cost less than taken) or the queue hides more than k says{_within(row)}"
    )


def score(df: pd.DataFrame, model: str | None = None) -> float:
    """The median |error| of the check cells (of `model`, default every model but the fit one); refused on the fit
    model's cells, whose error only says how well k was fitted."""
    fit_model = df.attrs.get("fit_model")
    if model is not None and model == fit_model:
        raise ValueError(
            f"k was fitted on {model}'s cells: their error says how well it was fitted, not how well the model "
            "predicts; score another model's cells"
        )
    rows = df[(df["role"] == "check") & ((df["model"] == model) if model is not None else True)]
    if rows.empty:
        raise ValueError(f"no check cells{f' of model {model}' if model else ''} to score (fitted on {fit_model})")
    return float(rows["error"].abs().median())


def fit_error(df: pd.DataFrame) -> float:
    """The median |error| of the cells k was fitted on: how well it fits, not a check."""
    rows = df[df["role"] == "fit"]
    return float(rows["error"].abs().median()) if len(rows) else math.nan


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
    configs = configurations(records)
    by_run: dict[str, list[Config]] = defaultdict(list)
    for c in configs:
        by_run[c.run].append(c)
    rows = []
    for mine in by_run.values():
        index = _Index(mine)
        singles: dict[tuple, dict[str, Config]] = defaultdict(dict)
        for c in mine:
            if c.spec["gpus"] == 1 and c.loader != CEILING and c.model != LOADER_ALONE and c.device != "cpu":
                key = (*c.key("loader", "tier", "batch_size", "precision"), c.model, stable_hash(c.settings))
                singles[key][c.spec.get("parallel", "dp")] = c
        for modes in singles.values():
            for mode in ("ddp", "dp"):
                for n in gpus:
                    rows.append(_scale_row(index, modes, mode, int(n), k))
    df = pd.DataFrame(rows, columns=SCALE_COLUMNS)
    df.attrs.update(k=k, k_basis=basis)
    return df


def _scale_row(index: _Index, modes: dict[str, Config], mode: str, n: int, k: float) -> dict:
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
        of=base, model=LOADER_ALONE, gpus=1, **_fields(base, "loader", "tier", "batch_size", "precision", "parallel")
    )
    measured = index.find(
        of=base, model=base.model, gpus=n, parallel=mode, **_fields(base, "loader", "tier", "batch_size", "precision")
    )
    ceil_n = index.find(
        of=base, loader=CEILING, model=base.model, gpus=n, parallel=mode, **_fields(base, "batch_size", "precision")
    )
    row = {
        **_describe(base),
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
        limited_by=_limit(
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


def _one_gpu_ceiling(index: _Index, base: Config, mode: str, lacks: list) -> Config | None:
    """The model's 1-GPU ceiling at the loader cell's batch and precision, in `mode` where measured, else the other
    mode's (said in `lacks`)."""
    ceil = index.find(
        of=base, loader=CEILING, model=base.model, gpus=1, **_fields(base, "batch_size", "precision"), parallel=mode
    )
    if ceil is None:
        ceil = index.find(of=base, loader=CEILING, model=base.model, gpus=1, **_fields(base, "batch_size", "precision"))
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
    base: Config, ceil: Config, alone: Config | None, step_cores: float, k: float, lacks: list, notes: list
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


# ---------------------------------------------------------------------------------------------- printing


def render_predict(df: pd.DataFrame) -> str:
    """The 1-GPU table (every configuration with both parts) and its median |error| over fit and check cells."""
    if df.empty:
        return (
            "predicted vs measured: no configuration has both its parts (a loader-alone `none` cell and its "
            "model's `synthetic` ceiling, in one run)"
        )
    k = df.attrs["k"]
    lines = [
        (
            f"predicted vs measured (k = {_k(k)}, fitted on {df.attrs['fit_model']}'s "
            f"{int((df['role'] == 'fit').sum())} cells; checked on {int((df['role'] == 'check').sum())} cells of "
            "other models)"
        ),
        _table(
            df,
            [
                "configuration",
                "role",
                "measured",
                "loader_alone",
                "ceiling",
                "predicted",
                "error",
                "limited_by",
            ],
        ),
        f"median |error|: fit {_pct(fit_error(df))} (how well k fits, not a check)",
    ]
    try:
        lines[-1] += f"; check {_pct(score(df))}"
    except ValueError as e:
        lines[-1] += f"; check: none ({e})"
    # in full, below the table: a column would cut them
    lines += [f"  {r.configuration} ({r.role}): {r.missed}" for r in df.itertuples() if r.missed]
    return "\n".join(lines)


def render_scale(df: pd.DataFrame, csv: str | None = None) -> str:
    """The n-GPU predictions the run measured (with their errors and median |error|); `csv`: where the predicted rows
    were written, if they were."""
    measured = df[df["measured"].notna()] if not df.empty else df
    head = f"n-GPU predicted from the 1-GPU cells (k = {_k(df.attrs.get('k'))}: {df.attrs.get('k_basis', '')})"
    if measured.empty:
        if df.empty:
            return head + "\n  no 1-GPU training cell on a GPU to predict from"
        where = f"in {csv}" if csv else "not shown: --out writes them"
        return head + f"\n  no n-GPU cell measured to compare with ({len(df)} predicted rows {where})"
    lines = [
        head,
        _table(
            measured,
            [
                "configuration",
                "loader_1gpu",
                "ceiling_1gpu",
                "loader_side",
                "gpu_side",
                "predicted",
                "measured",
                "error",
                "ceiling_measured",
                "limited_by",
            ],
        ),
        (
            f"median |error| over the {int(measured['error'].notna().sum())} measured n-GPU cells: "
            f"{_pct(measured['error'].abs().median())}"
        ),
    ]
    for r in measured.itertuples():
        extra = "; ".join(x for x in (r.missed, r.note, f"lacks {r.lacks}" if r.lacks else "") if x)
        if extra:
            lines.append(f"  {r.configuration}: {extra}")
    return "\n".join(lines)


def _k(k) -> str:
    return "-" if k is None else ("inf" if math.isinf(k) else f"{k:.3g}")


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _rate(v: float) -> str:
    """A rate in samples/s: whole numbers from 100, three significant digits below (a CPU host's 1.37, not 1)."""
    if pd.isna(v):
        return "-"
    if np.isinf(v):
        return "inf"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _table(df: pd.DataFrame, cols: list[str]) -> str:
    t = df[cols].copy()
    for c in cols:
        if c == "error":
            t[c] = [f"{100 * v:+.1f}%" if pd.notna(v) else "-" for v in t[c]]
        elif pd.api.types.is_float_dtype(t[c]):
            t[c] = [_rate(v) for v in t[c]]
    return t.to_string(index=False)
