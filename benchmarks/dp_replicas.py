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
from loaderbench.engine import parallel  # noqa: E402
from loaderbench.engine.step import configure_cudnn, dtypes, training_step  # noqa: E402


class Fresh(parallel.DataParallel):
    """loaderbench's DataParallel with torch's replicate on every step (what `ReplicaCache` replaces), as it ran
    before commit 2e9211b."""

    def replicate(self, module, device_ids):
        return torch.nn.parallel.replicate(module, device_ids, not torch.is_grad_enabled())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256, help="per GPU")
    ap.add_argument("--precision", choices=("fp32", "amp"), default="amp")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check-steps", type=int, default=3)
    ap.add_argument("--profile", help="write torch.profiler tables of 5 fresh-replica steps to this file")
    a = ap.parse_args()
    gpus = torch.cuda.device_count()
    if gpus < 2:
        sys.exit(f"needs 2 GPUs, found {gpus}")
    cfg = validate_config({"storage": {"ram": "/dev/shm"}, "precisions": [a.precision], "batch_sizes": [a.batch],
                           "gpus": [2], "cudnn_benchmark": False})  # fmt: skip
    spec = cell_spec(cfg, f"synthetic_ram_g2_b{a.batch}_{a.precision}_dp_r0", in_grid=False)
    device = torch.device("cuda:0")
    configure_cudnn(spec)
    _, input_dtype = dtypes(spec, "cuda")
    torch.manual_seed(0)
    xs = [torch.randn(2 * a.batch, 3, 224, 224, device=device).to(input_dtype, memory_format=torch.channels_last)
          for _ in range(a.check_steps)]  # fmt: skip
    ys = [torch.randint(0, 100, (2 * a.batch,), device=device) for _ in range(a.check_steps)]
    base = None
    runs = {}
    for name, cls in (("fresh", Fresh), ("cached", parallel.DataParallel)):
        torch.manual_seed(0)
        model, step = training_step(spec, 100, device, wrap=lambda m, cls=cls: cls(m, device_ids=[0, 1]))
        if base is None:
            base = copy.deepcopy(model.module.state_dict())
        model.module.load_state_dict(base)
        losses = [float(step(x, y).float().item()) for x, y in zip(xs, ys)]
        runs[name] = {"model": model, "step": step, "losses": losses,
                      "weights": [p.detach().float().clone() for p in model.module.parameters()]}  # fmt: skip
    diff = max(float((f - c).abs().max() / (f.abs().max() + 1e-12))
               for f, c in zip(runs["fresh"]["weights"], runs["cached"]["weights"]))  # fmt: skip
    times = {name: [] for name in runs}
    x, y = xs[0], ys[0]
    for _ in range(a.rounds):
        for name, run in runs.items():
            for _ in range(3):
                run["step"](x, y)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.steps):
                run["step"](x, y)
            torch.cuda.synchronize()
            times[name].append(1000 * (time.perf_counter() - t) / a.steps)
    if a.profile:  # where a fresh-replica step's host and GPU time go
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                runs["fresh"]["step"](x, y)
            torch.cuda.synchronize()
        table = prof.key_averages()
        with open(a.profile, "w") as f:
            f.write("by host time (self):\n" + table.table(sort_by="self_cpu_time_total", row_limit=30) + "\n")
            f.write("by GPU time:\n" + table.table(sort_by="cuda_time_total", row_limit=30) + "\n")
    print(json.dumps({
        "batch_per_gpu": a.batch, "precision": a.precision, "gpus": 2,
        "losses": {n: [round(v, 5) for v in r["losses"]] for n, r in runs.items()},
        "max_rel_weight_diff": diff, "same_steps": diff < 1e-2,
        "step_ms": {n: [round(v, 2) for v in t] for n, t in times.items()},
        "samples_per_s": {n: round(2 * a.batch * 1000 / min(t), 1) for n, t in times.items()},
        "torch": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
