"""The model of a training job's rate from its two sides, and the fit of its one parameter k.

A training job of loader X and model M runs two sides joined by a queue (docs/method.md, "Predicted samples/s"). The
loader side is the loader alone (its `none` cell: rate L, GPU busy share u_L, cores busy c_L), less the host cores the
step's own host work takes from it; the model side is M's ceiling (its `synthetic` cell: rate C, cores busy c_C), less
the GPU time the loader's own device work (GPU decoding, resizing) takes from the step:

    C_eff = 1 / (1/C + u_L/L)
    L_eff = min(L, pool / (c_L/L + e/C)),   pool = N - launch cores,  e = max(0, c_C - launch cores)
    P     = softmin_k(L_eff, C_eff) = (L_eff^-k + C_eff^-k)^(-1/k)

The loader and the step's host work beyond its launch cores share the pool of cores the cell's placement leaves
them: at rate P they need P * (c_L/L + e/C) cores; the loader keeps its rate alone while that fits, else the pool
sets it. m = 1 - L_eff/L is the share of the loader the step's host work takes: 0 when the step needs only its launch
core and the loader left cores idle, large on a CPU-only host, where the model's compute runs on the loader's cores.
k, the one fitted parameter, says how sharply the slower side dominates (how much the queue between them hides).
"""

from __future__ import annotations

import math
import statistics

import numpy as np

MISS = 0.10  # |measured/predicted - 1| above this: the row says which part of the model missed
# the loader's device work counts as a limit of its own where it adds more than this share to the step's GPU time
DEVICE_SHARE_NOTABLE = 0.10
K_GRID = (*np.geomspace(0.25, 64.0, 257), math.inf)  # the k the fit tries (inf: the hard minimum)

# which part sets the rate (`which_limit`)
LOADER = "loader"
CORES = "loader, on its share of the host's cores"
# the loader side binds, but the step's host work takes more of the shared cores than the loader does (the model's
# compute on a CPU-only host): the model, not the loader, sets the rate
MODEL_CORES = "model, its host work on the cores it shares with the loader"
MODEL = "model"
GPU_SHARED = "GPU shared with the loader's decoding"


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


def which_limit(
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
