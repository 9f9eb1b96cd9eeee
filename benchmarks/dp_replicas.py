"""DataParallel on 2 GPUs: whether keeping the replicas' module objects (`parallel.ReplicaCache`, what loaderbench's
DataParallel does) computes the same steps as `torch.nn.parallel.replicate` every step, and what it saves.

Purpose: the dp engine. The cell's own step (`loaderbench.engine.step.training_step`) wrapped in loaderbench's
DataParallel on synthetic data on GPU 0, `fresh` against `cached` from the same weights and batches: their losses and
weights after --check-steps steps, then --steps steps of each in alternating rounds; one JSON line.
Command: python3 benchmarks/dp_replicas.py --batch 256 --precision amp --profile dp-profile.txt
Written up in docs/method.md ("DataParallel").
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import torch

sys.path.insert(0, "src")
from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.engine.process import parallel
from loaderbench.engine.step import configure_cudnn, dtypes, training_step


class Fresh(parallel.DataParallel):
    """loaderbench's DataParallel with torch's replicate on every step (what `ReplicaCache` replaces), as it ran
    before commit 2e9211b."""

    def replicate(self, module, device_ids):
        return torch.nn.parallel.replicate(module, device_ids, not torch.is_grad_enabled())


def main() -> None:
    a = _parse_args()
    gpus = torch.cuda.device_count()
    if gpus < 2:
        sys.exit(f"needs 2 GPUs, found {gpus}")
    cfg = validate_config(
        {
            "storage": {"ram": "/dev/shm"},
            "precisions": [a.precision],
            "batch_sizes": [a.batch],
            "gpus": [2],
            "cudnn_benchmark": False,
        }
    )
    spec = cell_spec(cfg, f"synthetic_ram_g2_b{a.batch}_{a.precision}_dp_r0", in_grid=False)
    device = torch.device("cuda:0")
    configure_cudnn(spec)
    _, input_dtype = dtypes(spec, "cuda")
    torch.manual_seed(0)
    xs = [
        torch.randn(2 * a.batch, 3, 224, 224, device=device).to(input_dtype, memory_format=torch.channels_last)
        for _ in range(a.check_steps)
    ]
    ys = [torch.randint(0, 100, (2 * a.batch,), device=device) for _ in range(a.check_steps)]
    runs = _check_runs(spec, device, xs, ys)
    diff = max(
        float((f - c).abs().max() / (f.abs().max() + 1e-12))
        for f, c in zip(runs["fresh"]["weights"], runs["cached"]["weights"], strict=True)
    )
    x, y = xs[0], ys[0]
    times = _step_times(runs, x, y, a.rounds, a.steps)
    if a.profile:  # where a fresh-replica step's host and GPU time go
        _profile(runs["fresh"]["step"], x, y, a.profile)
    print(
        json.dumps(
            {
                "batch_per_gpu": a.batch,
                "precision": a.precision,
                "gpus": 2,
                "losses": {n: [round(v, 5) for v in r["losses"]] for n, r in runs.items()},
                "max_rel_weight_diff": diff,
                "same_steps": diff < 1e-2,
                "step_ms": {n: [round(v, 2) for v in t] for n, t in times.items()},
                "samples_per_s": {n: round(2 * a.batch * 1000 / min(t), 1) for n, t in times.items()},
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )


def _parse_args() -> argparse.Namespace:
    """The command line's options."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256, help="per GPU")
    ap.add_argument("--precision", choices=("fp32", "amp"), default="amp")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check-steps", type=int, default=3)
    ap.add_argument("--profile", help="write torch.profiler tables of 5 fresh-replica steps to this file")
    return ap.parse_args()


def _check_runs(spec, device: torch.device, xs: list, ys: list) -> dict:
    """`fresh` and `cached` from the same weights, each after a step per batch: its model, step, losses and weights."""
    base = None
    runs = {}
    for name, cls in (("fresh", Fresh), ("cached", parallel.DataParallel)):
        torch.manual_seed(0)
        model, step = training_step(spec, 100, device, wrap=lambda m, cls=cls: cls(m, device_ids=[0, 1]))
        if base is None:
            base = copy.deepcopy(model.module.state_dict())
        model.module.load_state_dict(base)
        losses = [float(step(x, y).float().item()) for x, y in zip(xs, ys, strict=True)]
        runs[name] = {
            "model": model,
            "step": step,
            "losses": losses,
            "weights": [p.detach().float().clone() for p in model.module.parameters()],
        }
    return runs


def _step_times(runs: dict, x, y, rounds: int, steps: int) -> dict[str, list[float]]:
    """Each run's ms per step, one value per round: `steps` steps after 3 unmeasured, the runs alternating."""
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            for _ in range(3):
                run["step"](x, y)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(steps):
                run["step"](x, y)
            torch.cuda.synchronize()
            times[name].append(1000 * (time.perf_counter() - t) / steps)
    return times


def _profile(step, x, y, path: str) -> None:
    """torch.profiler's tables of 5 steps, by host time and by GPU time, written to `path`."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step(x, y)
        torch.cuda.synchronize()
    table = prof.key_averages()
    with open(path, "w") as f:
        f.write("by host time (self):\n" + table.table(sort_by="self_cpu_time_total", row_limit=30) + "\n")
        f.write("by GPU time:\n" + table.table(sort_by="cuda_time_total", row_limit=30) + "\n")


if __name__ == "__main__":
    main()
