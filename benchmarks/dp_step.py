"""Why stock nn.DataParallel is slow on several GPUs, and whether loaderbench's DataParallel fixes it (needs >= 2 GPUs).

Purpose: the dp engine. The same MobileNetV2 step (amp, channels_last, per-GPU batch 256, scattered from GPU 0) under
stock `nn.DataParallel` (fresh threads per forward) with cudnn.benchmark on and off, loaderbench's `DataParallel`
(persistent replica threads) and one GPU alone: cuDNN caches its plans per thread, so fresh threads re-plan every
convolution on every step. Prints ms per step; JSON on stdout's last line.
Command: python3 benchmarks/dp_step.py [--steps 20]
Written up in docs/results/2026-11-30-h200x2/engine/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torchvision

sys.path.insert(0, "src")
from loaderbench.engine.process.parallel import DataParallel


def timed(model, batch: int, steps: int, warmup: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    x = torch.randn(batch, 3, 224, 224, device="cuda:0").to(torch.float16, memory_format=torch.channels_last)
    y = torch.randint(0, 100, (batch,), device="cuda:0")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0) / steps


def phases(dp, batch: int, steps: int) -> dict:
    """Milliseconds of each part of a DataParallel step (device synchronised around each part, so they add up to
    more than an unsynchronised step)."""
    opt = torch.optim.SGD(dp.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device="cuda:0").to(torch.float16, memory_format=torch.channels_last)
    y = torch.randint(0, 100, (batch,), device="cuda:0")
    acc: dict = {}

    def mark(name, t0):
        torch.cuda.synchronize()
        acc[name] = acc.get(name, 0.0) + time.perf_counter() - t0
        return time.perf_counter()

    for i in range(steps + 3):
        if i == 3:
            acc.clear()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            inputs, kwargs = dp.scatter((x,), {}, dp.device_ids)
            t = mark("scatter", t)
            replicas = dp.replicate(dp.module, dp.device_ids[: len(inputs)])
            t = mark("replicate", t)
            outs = dp.parallel_apply(replicas, inputs, kwargs)
            t = mark("forward", t)
            loss = torch.nn.functional.cross_entropy(dp.gather(outs, dp.output_device), y)
            t = mark("gather_loss", t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t = mark("backward", t)
        opt.step()
        mark("optimizer", t)
    return {k: 1000 * v / steps for k, v in acc.items()}


def model():
    return torchvision.models.mobilenet_v2(num_classes=100).cuda().to(memory_format=torch.channels_last).train()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--stock-steps", type=int, default=3)
    a = p.parse_args()
    n = torch.cuda.device_count()
    if n < 2:
        raise SystemExit(f"needs 2 GPUs, this host has {n}")
    ids = list(range(n))
    out = {
        "gpus": n,
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "per_gpu_batch": 256,
    }
    torch.backends.cudnn.benchmark = True
    out["one_gpu_ms"] = timed(model(), 256, a.steps, 5)
    out["loaderbench_dp_ms"] = timed(DataParallel(model(), device_ids=ids), 256 * n, a.steps, 5)
    out["dp_phase_ms"] = phases(DataParallel(model(), device_ids=ids), 256 * n, 10)
    out["stock_dp_benchmark_on_ms"] = timed(torch.nn.DataParallel(model(), device_ids=ids), 256 * n, a.stock_steps, 1)
    torch.backends.cudnn.benchmark = False
    out["stock_dp_benchmark_off_ms"] = timed(torch.nn.DataParallel(model(), device_ids=ids), 256 * n, a.stock_steps, 1)
    out["loaderbench_dp_benchmark_off_ms"] = timed(DataParallel(model(), device_ids=ids), 256 * n, a.steps, 5)
    for k, v in out.items():
        if k.endswith("_ms") and not isinstance(v, dict):
            print(f"{k:34s} {v:10.1f} ms/step", file=sys.stderr)
    print(
        "dp phases (ms, synchronised): " + ", ".join(f"{k} {v:.1f}" for k, v in out["dp_phase_ms"].items()),
        file=sys.stderr,
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
