"""The three terms of a training job's rate, the one that binds (the row's class) and the naive minimum.

Per step of global batch B a job of loader X and model M runs three things at once, joined by queues, and the
slowest sets the rate (docs/method.md, "Predicted samples/s"):

    loader side      L_eff = min(L, pool / (c_L/L + e/C))        the loader on the cores it shares with the step
    GPU side         C_eff = 1 / (1/C + d)                       the step on GPUs that also run the loader's device work
    consuming        K     = B / t_cons                          the one main thread's work per step
    P = min(L_eff, C_eff, K),  naive = min(L, C)

with t_cons(X, M) = a(M) + max(0, T_beside(X) - h(M0)) and T_beside(X) = s + max(0, m - h(M0)): s is X's beside
part's step call on the host (`host_step_ms`), m its main thread's CPU time per step (`main_cpu_ms`), h(.) a ceiling's
step call on the host and M0 the beside part's model. a(M) is model M's host side: its step call h(M) where its
ceiling left the GPU idle part of the time (GPU share under GPU_BOUND: the host set the step's pace), else its main
thread's CPU time c(M) (the step call waited for the GPU, which the GPU side holds). The loader's consuming work adds
to the host side. Nothing is fitted.

Where the ceiling kept its GPU busy its host side is known only to lie between c(M) and h(M): the step call hides
how long the host took to launch the step behind its wait for the GPU, and the main thread's CPU time is not that
launch time (it leaves out the launches' waits, and counts a spinning wait for the GPU). A launch part measures it:
M's ceiling at a batch small enough that the host set its pace. The prediction takes that launch time where the run
has one, else c(M); the interval's low end takes h(M), where the loader's consuming work beside the step turns a
GPU-paced step host-paced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# the classes: which term binds, read from the parts alone
LOADER = "loader"  # the loader side, its share of the host's cores included
GPU_SHARED = "gpu-shared"  # the GPU side, where the loader's device work adds a notable share to the step's GPU time
MODEL = "model"  # the GPU side otherwise: the model's own step
CONSUMING = "consuming process"  # the main thread's consuming of the batches and the step's launches, one after other
CLASSES = (LOADER, GPU_SHARED, MODEL, CONSUMING)
# the loader's device work names the GPU side `gpu-shared` where it adds more than this share to the step's GPU time
DEVICE_SHARE_NOTABLE = 0.10
# a ceiling whose GPU was busy at least this share of its window was paced by its GPU: its step call waited for it
GPU_BOUND = 0.95


@dataclass(frozen=True)
class Sides:
    """One row's parts as its three terms take them: rates in samples/s, each with its relative 95% half-width."""

    loader: float  # the loader before it shares the cores: L, a rank part's rate, or pipelines x L
    loader_hw: float
    cores_cap: float  # the rate the pool of cores it shares with the step's host work allows it (inf: not binding)
    step: float  # the step alone on the row's GPUs: the ceiling C, or C_n at n GPUs
    step_hw: float
    device_s: float  # the loader's GPU seconds per sample on the GPU that carries the most of it
    consuming: float | None = None  # B / t_cons; None: unknown (no beside part, or its host times unknown)
    consuming_hw: float = 0.0
    consuming_low: float | None = None  # B / t_cons with the host side at its longest, h(M); None: as `consuming`

    def terms(self, end: int = 0) -> dict[str, float]:
        """The three terms with every part at its interval's low end (end -1), its value (0) or its high end (+1);
        an unknown consuming term is inf (it binds nowhere); at the low end the consuming term takes the host side at
        its longest."""
        loader = min(_at(self.loader, self.loader_hw, end), self.cores_cap)
        gpu = ceiling_eff(_at(self.step, self.step_hw, end), self.device_s)
        low = self.consuming_low if end < 0 and self.consuming_low is not None else self.consuming
        consuming = math.inf if low is None else _at(low, self.consuming_hw, end)
        return {"loader": loader, "gpu": gpu, "consuming": consuming}

    def predicted(self, end: int = 0) -> float:
        return min(self.terms(end).values())

    @property
    def naive(self) -> float:
        """min(L, C): the loader and the step alone, no sharing and no consuming process."""
        return min(self.loader, self.step)

    @property
    def klass(self) -> str:
        """The term that binds at the parts' values (a tie goes to the loader, then the GPU)."""
        t = self.terms()
        side = min(t, key=t.get)
        if side == "loader":
            return LOADER
        if side == "consuming":
            return CONSUMING
        return GPU_SHARED if self.device_s > DEVICE_SHARE_NOTABLE / self.step else MODEL


def _at(rate: float, halfwidth: float, end: int) -> float:
    return rate * (1 + halfwidth) ** end


def ceiling_eff(ceiling: float, device_s: float) -> float:
    """The step's rate on a GPU that also runs d seconds a sample of the loader's device work: 1 / (1/C + d)."""
    return 1.0 / (1.0 / ceiling + device_s)


def cores_cap(pool: float | None, loader_core_s: float | None, step_core_s: float) -> float:
    """pool / (c_L/L + e/C): the rate at which the loader's and the step's host work (beyond its launch cores), in
    core-seconds a sample, fill the pool of cores they share; inf where the pool or the loader's cores are unknown."""
    if pool is None or loader_core_s is None:
        return math.inf
    need = loader_core_s + step_core_s
    return math.inf if need <= 0 else pool / need


def beside_ms(host_step_ms: float, main_cpu_ms: float, reference_host_ms: float) -> float:
    """T_beside: the main thread's time per step beside the loader - the step call's wall time there, plus the main
    thread's CPU time outside it (its CPU time per step less what the step takes on it alone, the reference model's
    ceiling's step call)."""
    return host_step_ms + max(0.0, main_cpu_ms - reference_host_ms)


def host_side_ms(
    host_ms: float, cpu_ms: float | None, gpu_share: float | None, launch_ms: float | None = None
) -> tuple[float | None, str]:
    """a(M), a ceiling's host side a step, and which it is ("step call", "launch" or "cpu"): its step call where its GPU idled part
    of the window (the host set the pace); else its launch time where a launch part measured it (no longer than the
    step call), else its main thread's CPU time (the step call waited for the GPU); None where that is unknown."""
    if gpu_share is not None and gpu_share < GPU_BOUND:
        return host_ms, "step call"
    if launch_ms is not None:
        return min(launch_ms, host_ms), "launch"
    return cpu_ms, "cpu"


def consuming_ms(beside: float, model_host_side_ms: float, reference_host_ms: float) -> float:
    """t_cons(X, M) = a(M) + max(0, T_beside(X) - h(M0)): model M's host side plus the loader's consuming work, what
    the beside part's main thread spent beyond the reference model's step alone."""
    return model_host_side_ms + max(0.0, beside - reference_host_ms)
