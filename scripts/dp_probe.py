"""Why stock nn.DataParallel is slow on several GPUs, and whether loaderbench's DataParallel fixes it (needs >= 2 GPUs).

The same MobileNetV2 step (amp, channels_last, per-GPU batch 256, global batch 256 x GPUs scattered from GPU 0) under:
stock `nn.DataParallel` (fresh threads per forward) with cudnn.benchmark on and off, loaderbench's `DataParallel`
(persistent replica threads), and one GPU alone. Hypothesis: cuDNN caches its execution plans per thread, so fresh
threads re-plan (or re-autotune) every convolution on every step. Prints ms per step; JSON to stdout's last line.
Usage: python3 scripts/dp_probe.py [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torchvision

sys.path.insert(0, "src")
from loaderbench.parallel import DataParallel  # noqa: E402


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
    out = {"gpus": n, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "per_gpu_batch": 256}  # fmt: skip
    torch.backends.cudnn.benchmark = True
    out["one_gpu_ms"] = timed(model(), 256, a.steps, 5)
    out["loaderbench_dp_ms"] = timed(DataParallel(model(), device_ids=ids), 256 * n, a.steps, 5)
    out["stock_dp_benchmark_on_ms"] = timed(torch.nn.DataParallel(model(), device_ids=ids), 256 * n, a.stock_steps, 1)
    torch.backends.cudnn.benchmark = False
    out["stock_dp_benchmark_off_ms"] = timed(torch.nn.DataParallel(model(), device_ids=ids), 256 * n, a.stock_steps, 1)
    out["loaderbench_dp_benchmark_off_ms"] = timed(DataParallel(model(), device_ids=ids), 256 * n, a.steps, 5)
    for k, v in out.items():
        if k.endswith("_ms"):
            print(f"{k:34s} {v:10.1f} ms/step", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
