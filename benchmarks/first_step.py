"""Where a GPU cell's first training step goes, and what cuDNN's autotuning buys (per-cell overhead).

Purpose: the per-cell overhead. One fresh process per call, as a cell: the cell's own step
(`loaderbench.engine.step.training_step`) on synthetic data on the GPU; times the imports, the CUDA context, the
model, the first step (autotuning, cuDNN plans, lazy kernel loading), then `--steps` steps; one JSON line.
Command: for b in 1 0; do python3 benchmarks/first_step.py --benchmark $b --batch 256 --precision amp; done
Written up in docs/method.md (cuDNN autotuning off by default) and config/README.md (`cudnn_benchmark`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

T0 = time.perf_counter()
import torch

sys.path.insert(0, "src")
from loaderbench.core.cells import cell_spec
from loaderbench.core.config import validate_config
from loaderbench.engine.step import dtypes, training_step

T_IMPORT = time.perf_counter() - T0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", type=int, choices=(0, 1), default=1, help="torch.backends.cudnn.benchmark")
    ap.add_argument("--limit", type=int, default=None, help="torch.backends.cudnn.benchmark_limit (default: torch's)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=("fp32", "amp"), default="amp")
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    cfg = validate_config({"storage": {"ram": "/dev/shm"}, "precisions": [a.precision], "batch_sizes": [a.batch]})
    spec = cell_spec(cfg, f"synthetic_ram_g1_b{a.batch}_{a.precision}_dp_r0", in_grid=False)
    t = time.perf_counter()
    device = torch.device("cuda:0")
    torch.cuda.init()
    torch.zeros(1, device=device)
    t_cuda = time.perf_counter() - t
    torch.backends.cudnn.benchmark = bool(a.benchmark)
    if a.limit is not None:
        torch.backends.cudnn.benchmark_limit = a.limit
    t = time.perf_counter()
    _, step = training_step(spec, 1000, device)
    t_model = time.perf_counter() - t
    _, input_dtype = dtypes(spec, "cuda")
    x = torch.randn(a.batch, 3, 224, 224, device=device).to(input_dtype, memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=device)
    t = time.perf_counter()
    step(x, y)
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    for _ in range(3):
        step(x, y)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(a.steps):
        step(x, y)
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - t) / a.steps
    print(
        json.dumps(
            {
                "benchmark": bool(a.benchmark),
                "limit": torch.backends.cudnn.benchmark_limit,
                "batch": a.batch,
                "precision": a.precision,
                "import_s": round(T_IMPORT, 2),
                "cuda_init_s": round(t_cuda, 2),
                "model_s": round(t_model, 2),
                "first_step_s": round(first, 2),
                "step_ms": round(1000 * per_step, 2),
                "samples_per_s": round(a.batch / per_step, 1),
                "process_s": round(time.perf_counter() - T0, 2),
                "cudnn": torch.backends.cudnn.version(),
                "torch": torch.__version__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
