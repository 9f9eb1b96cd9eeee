"""What the telemetry sampler costs a training loop: rounds with and without it, alternating.

Purpose: the engine's own cost. The training loop runs here; in the "on" rounds a separate process runs
`loaderbench.engine.runner.telemetry.Sampler` on this process at the given rate, as a cell's runner does. Prints each
round's samples/s and the median overhead. Needs only torch, torchvision, numpy, psutil (nvidia-ml-py for GPUs).
Command: PYTHONPATH=src python3 benchmarks/telemetry_overhead.py --batch 256 --amp --rounds 6 --seconds 8
Written up in docs/results/2026-11-29-h200x1/telemetry-probe/README.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path


def sample_forever(pid: int, hz: float, gpus: int, stop, out) -> None:
    from loaderbench.engine.runner.telemetry import Sampler

    s = Sampler(hz, [pid], Path("/dev/shm"), gpus).start()
    stop.wait()
    t = s.stop()
    out.put(
        {
            "samples": len(t["rows"]),
            "cpu_s": t["meta"].get("sampler_cpu_s"),
            "cost_ms": t["meta"].get("sample_cost_ms"),
            "gpu_reason": t["meta"].get("gpu_reason"),
        }
    )


def _training_step(a):
    """(step, sync, device, whether it is CUDA): a bare MobileNetV2 step on one synthetic batch."""
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.mobilenet_v2(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    dtype = torch.float16 if cuda else torch.bfloat16
    scaler = torch.amp.GradScaler(dev.type, enabled=a.amp and cuda)
    x = torch.randn(a.batch, 3, a.crop, a.crop, device=dev).to(memory_format=torch.channels_last)
    if a.amp:
        x = x.to(dtype)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        with torch.autocast(dev.type, dtype=dtype, enabled=a.amp):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    return step, sync, dev, cuda


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--rounds", type=int, default=6, help="pairs of (off, on) rounds")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--hz", type=float, default=10.0)
    a = p.parse_args()

    import torch

    step, sync, dev, cuda = _training_step(a)
    t = time.perf_counter()
    for _ in range(30):  # warm-up: cudnn autotune, allocator
        step()
    sync()
    print(
        f"warm-up {time.perf_counter() - t:.1f} s on {dev} ({torch.cuda.get_device_name() if cuda else 'CPU'})",
        file=sys.stderr,
    )

    ctx = mp.get_context("spawn")
    rates = {"off": [], "on": []}
    sampler_info = []
    for r in range(a.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):  # ABBA order: drifts cancel
            proc = None
            if mode == "on":
                stop, out = ctx.Event(), ctx.Queue()
                proc = ctx.Process(target=sample_forever, args=(os.getpid(), a.hz, 1 if cuda else 0, stop, out))
                proc.start()
                time.sleep(1.0)  # sampler started (NVML init) before the clock
            sync()
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < a.seconds:
                step()
                steps += 1
            sync()
            rate = steps * a.batch / (time.perf_counter() - t0)
            rates[mode].append(rate)
            if proc:
                stop.set()
                sampler_info.append(out.get(timeout=30))
                proc.join()
            print(f"round {r} {mode:>3}: {rate:.1f} samples/s", file=sys.stderr, flush=True)
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    pairs = [1 - b / a_ for a_, b in zip(rates["off"], rates["on"], strict=True)]
    result = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "batch": a.batch,
        "amp": a.amp,
        "hz": a.hz,
        "seconds_per_round": a.seconds,
        "off": rates["off"],
        "on": rates["on"],
        "median_off": off,
        "median_on": on,
        "overhead_median": 1 - on / off,
        "overhead_per_pair": pairs,
        "sampler": sampler_info,
    }
    print(json.dumps(result, indent=2))
    print(
        f"telemetry overhead: {100 * (1 - on / off):+.2f}% (median on {on:.1f} vs off {off:.1f} samples/s; "
        f"pairs {', '.join(f'{100 * v:+.2f}%' for v in pairs)})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
