"""The matrix: every loader x model x GPU count at each tier, batch and precision its parts cover, one row each,
predicted from its parts (`parts`, `terms`), with its interval (`intervals`); a row whose training cell the records
hold is `measured` (its error beside), the others `predicted`, and at a GPU count with no check `predicted,
unchecked`. df.attrs holds the scores (`scoring`), the model spread, the coverage and the width."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loaderbench.core.cells import cell_id, configuration
from loaderbench.core.registry import NO_MODEL
from loaderbench.core.util import stable_hash

from .carried import CARRIED_FROM, carry
from .intervals import MEASURED, coverage, widen
from .measured import CEILING, Configuration, Index, by_run, configurations
from .parts import AT, Found, n_gpu, one_gpu
from .ratios import kept_ceiling_ratios
from .scoring import model_spread, scores, spread_of

PREDICTED = "predicted"  # no training cell of the row in the records
UNCHECKED = "predicted, unchecked"  # n > 1 GPUs where the records hold no check at that GPU count and mode
MODES = ("ddp", "dp")  # the parallel modes of an n-GPU row

MATRIX_COLUMNS = [
    "configuration",
    "status",
    "class",
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
    "predicted",
    "predicted_lo",
    "predicted_hi",
    "error",
    "naive",
    "naive_error",
    "loader_part",
    "ceiling",
    "loader_side",
    "gpu_side",
    "consuming_side",
    "consuming_ms",
    "parts_lo",
    "parts_hi",
    "widening",
    "widened_by",
    "loader_basis",
    "step_basis",
    "consuming_basis",
    "lacks",
    "host_cores",
    "run",
]


def matrix(
    records: list[dict], gpus=(1, 2, 4), ratios: dict | None = None, parts_from: list[dict] | None = None
) -> pd.DataFrame:
    """One row per loader x model x GPU count (1 as the loader-alone cells cover, each n > 1 under ddp and dp) in each
    run of `records`; measured rows first. `ratios`: the n-GPU ceiling ratios (default: MobileNetV2's, read from the
    records kept under docs/results). `parts_from`: records of another host whose loader parts stand in for the runs'
    own, carried by the cores rule (`carried`); then only the rows whose loader side was carried are kept. df.attrs:
    scores (per class, as records), model_spread, spread, coverage (and left_out: the rows not carried)."""
    more = sorted(int(n) for n in gpus if int(n) > 1)
    if more and ratios is None:
        ratios = kept_ceiling_ratios()
    configs = configurations(records)
    if parts_from is not None:
        configs = carry(configurations(parts_from), configs)
    rows = []
    for mine in by_run(configs).values():
        index = Index(mine)
        if 1 in gpus:
            rows += _one_gpu_rows(index)
        if more:
            rows += _n_gpu_rows(index, more, ratios or {})
    df = pd.DataFrame(rows, columns=MATRIX_COLUMNS)
    left_out = 0
    if parts_from is not None:
        carried = df["loader_basis"].str.contains(CARRIED_FROM, regex=False)
        left_out, df = int((~carried).sum()), df[carried].reset_index(drop=True)
    checked = {(g, p) for g, p, s in zip(df["gpus"], df["parallel"], df["status"], strict=True) if s == MEASURED}
    df.loc[[s != MEASURED and g > 1 and (g, p) not in checked for g, p, s in _keys(df)], "status"] = UNCHECKED
    widen(df)
    order = df["status"].map({MEASURED: 0, PREDICTED: 1, UNCHECKED: 2})
    df = df.assign(_order=order).sort_values(["_order", "gpus", "configuration"], kind="stable")
    df = df.drop(columns="_order").reset_index(drop=True)
    per_model = model_spread(df)
    df.attrs.update(
        scores=scores(df).to_dict("records"),
        model_spread=per_model,
        spread=spread_of(per_model),
        coverage=coverage(df),
        consuming_unknown=int(df["consuming_side"].isna().sum()),
        left_out=left_out,
    )
    return df


def _keys(df: pd.DataFrame):
    return zip(df["gpus"], df["parallel"], df["status"], strict=True)


def _one_gpu_rows(index: Index) -> list[dict]:
    """Each loader-alone cell at 1 GPU x each model whose 1-GPU ceiling the run holds at its batch and precision."""
    rows = []
    for alone in index.configs:
        if alone.model != NO_MODEL or alone.spec["gpus"] != 1 or alone.is_part:
            continue
        same = alone.fields("batch_size", "precision", "parallel")
        for model in _models(index, alone, parallel=same["parallel"]):
            ceil = index.find(of=alone, loader=CEILING, model=model, gpus=1, **same)
            check = index.find(of=alone, loader=alone.loader, model=model, gpus=1, **alone.fields(*AT, "parallel"))
            rows.append(_row(alone, model, 1, same["parallel"], one_gpu(index, alone, ceil), check))
    return rows


def _n_gpu_rows(index: Index, more: list[int], ratios: dict) -> list[dict]:
    """Each loader of the run at n GPUs under ddp and dp x each model with a 1-GPU ceiling at its batch and precision:
    from its loader-alone cell where the run has one, else from its 1-GPU training cells."""
    reps: dict[tuple, Configuration] = {}
    for c in index.configs:
        if c.spec["gpus"] != 1 or c.loader == CEILING or c.is_part or c.device == "cpu":
            continue
        key = (c.loader, *c.key(*AT), stable_hash(c.settings))
        if c.model == NO_MODEL or key not in reps:
            reps[key] = c  # the loader alone where the run has it
    rows = []
    for rep in reps.values():
        for model in _models(index, rep):
            for n in more:
                for mode in MODES:
                    found = n_gpu(index, rep, model, n, mode, ratios)
                    at = rep.fields(*AT)
                    check = index.find(of=rep, loader=rep.loader, model=model, gpus=n, parallel=mode, **at)
                    rows.append(_row(rep, model, n, mode, found, check))
    return rows


def _models(index: Index, rep: Configuration, **same) -> list[str]:
    """The models whose 1-GPU ceiling the run holds at `rep`'s batch and precision (and `same`), in the run's order."""
    want = {**rep.fields("batch_size", "precision"), **same}
    ceilings = [c for c in index.configs if c.loader == CEILING and c.spec["gpus"] == 1 and not c.is_part]
    return list(dict.fromkeys(c.model for c in ceilings if c.fields(*want) == want))


def _row(rep: Configuration, model: str, n: int, mode: str, found: Found, check: Configuration | None) -> dict:
    """The row of `rep`'s loader and `model` at n GPUs under `mode`, beside its training cell where measured."""
    spec, s = rep.spec, found.sides
    name = configuration(cell_id(rep.loader, spec["tier"], n, spec["batch_size"], spec["precision"], mode, 0, model))
    if rep.settings:
        name += " [" + ", ".join(f"{f}={v}" for f, v in rep.settings.items()) + "]"
    terms = s.terms() if s else {}
    predicted = s.predicted() if s else math.nan
    measured = check.rate if check else math.nan
    naive = s.naive if s else math.nan
    return {
        "configuration": check.name if check else name,
        "status": MEASURED if check else PREDICTED,
        "class": s.klass if s else "",
        "model": model,
        "loader": rep.loader,
        **rep.fields(*AT),
        "gpus": n,
        "parallel": mode,
        "measured": measured,
        "measured_lo": check.lo if check else math.nan,
        "measured_hi": check.hi if check else math.nan,
        "predicted": predicted,
        "error": measured / predicted - 1 if check and s else math.nan,
        "naive": naive,
        "naive_error": measured / naive - 1 if check and s else math.nan,
        "loader_part": found.loader_part,
        "ceiling": found.ceiling,
        "loader_side": terms.get("loader", math.nan),
        "gpu_side": terms.get("gpu", math.nan),
        "consuming_side": s.consuming if s and s.consuming is not None else math.nan,
        "consuming_ms": found.consuming_ms,
        "parts_lo": s.predicted(-1) if s else math.nan,
        "parts_hi": s.predicted(+1) if s else math.nan,
        "loader_basis": found.basis.get("loader", ""),
        "step_basis": found.basis.get("step", ""),
        "consuming_basis": found.basis.get("consuming", ""),
        "lacks": "; ".join(dict.fromkeys(found.lacks)),
        "host_cores": rep.host_cores,
        "run": rep.run,
    }


def predict(records: list[dict]) -> pd.DataFrame:
    """The measured 1-GPU rows in the form the cells table joins them (report.aggregate): configuration, predicted,
    error, role (every row a check: nothing is fitted) and limited_by (the row's class)."""
    df = matrix(records, gpus=(1,))
    rows = df[df["status"] == MEASURED]
    return pd.DataFrame(
        {
            "configuration": rows["configuration"],
            "predicted": rows["predicted"],
            "error": rows["error"],
            "role": np.where(rows["predicted"].notna(), "check", ""),
            "limited_by": rows["class"],
        }
    )
