"""Where a fresh process's first training step goes on a GPU, and how much a DataLoader's main process can ingest.

Purpose: the per-cell overhead. Each variant runs in its own process (or a fork of one that imported torch, as the
warm-start server's children are), twice, and prints one JSON line: `plain` (imports, CUDA, model, the first step in
timed parts), `preload` (the lazily loaded CUDA libraries dlopen()ed first), `fork`, `fork-preload`, `fp32`,
`profile` (torch.profiler around the first step), `ingest` (what one main process takes in from DataLoader workers).
Command: python benchmarks/cold_step.py [VARIANT ...] > probe.jsonl
Written up in docs/results/2026-11-30-h200/cold-step-probe/README.md.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import sys
import time


def lazy_libraries() -> list[str]:
    """The CUDA libraries of the torch wheel that are dlopen()ed only at their first use."""
    import torch

    roots = [os.path.dirname(os.path.dirname(torch.__file__))]
    names = ("libcudnn", "libcublas", "libnvrtc", "libnvJitLink")
    found = []
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "lib*.so*"))):
            if os.path.basename(path).startswith(names):
                found.append(path)
    return found


def preload() -> dict:
    t = time.perf_counter()
    loaded, failed = [], []
    for path in lazy_libraries():
        try:
            ctypes.CDLL(path)
            loaded.append(os.path.basename(path))
        except OSError as e:
            failed.append(f"{os.path.basename(path)}: {e}")
    return {"preload_s": round(time.perf_counter() - t, 3), "loaded": loaded, "failed": failed}


def first_steps(precision: str = "amp", profile: bool = False) -> dict:
    import torch
    import torchvision

    out = {}
    t = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    out["cuda_init_s"] = time.perf_counter() - t
    t = time.perf_counter()
    model = torchvision.models.mobilenet_v2(num_classes=100).cuda().to(memory_format=torch.channels_last).train()
    criterion = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)
    amp = precision == "amp"
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    dtype = torch.float16 if amp else torch.float32
    x = torch.randn(256, 3, 224, 224, device="cuda").to(dtype, memory_format=torch.channels_last)
    y = torch.randint(0, 100, (256,), device="cuda")
    torch.cuda.synchronize()
    out["model_s"] = time.perf_counter() - t

    def parts() -> dict:
        times = {}
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = criterion(model(x), y)
        torch.cuda.synchronize()
        times["fwd"] = time.perf_counter() - t
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        torch.cuda.synchronize()
        times["bwd"] = time.perf_counter() - t
        t = time.perf_counter()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        times["opt"] = time.perf_counter() - t
        return {k: round(v, 4) for k, v in times.items()}

    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as prof

        with prof(activities=[ProfilerActivity.CPU]) as p:
            out["step1"] = parts()
        rows = sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:30]
        out["top_self_cpu"] = [[e.key, e.count, round(e.self_cpu_time_total / 1e6, 3)] for e in rows]
    else:
        out["step1"] = parts()
    out["step1_s"] = round(sum(out["step1"].values()), 3)
    out["next_steps_s"] = [round(sum(parts().values()), 4) for _ in range(4)]
    out["cuda_init_s"] = round(out["cuda_init_s"], 3)
    out["model_s"] = round(out["model_s"], 3)
    return out


def child(variant: str) -> dict:
    t0 = time.perf_counter()
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    out = {"import_s": round(time.perf_counter() - t0, 3)}
    if variant == "preload":
        out.update(preload())
    out.update(first_steps("fp32" if variant == "fp32" else "amp", profile=variant == "profile"))
    return out


def forked(with_preload: bool) -> dict:
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    pre = preload() if with_preload else {}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = first_steps()
        except Exception as e:  # noqa: BLE001 - a probe reports what broke
            res = {"error": repr(e)}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    res = json.loads(data)
    res.update({k: v for k, v in pre.items() if k != "loaded"})
    return res


class Filled:
    """A dataset whose items are only a fill of the batch's layout: the transport, not the decode, is measured."""

    def __init__(self, dtype, n=10_000_000):
        self.dtype, self.n = dtype, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        return torch.full((3, 224, 224), i % 200, dtype=self.dtype), i % 100


def ingest(batch: int, workers: int, dtype_name: str, seconds: float = 6.0) -> dict:
    import torch

    dtype = {"float32": torch.float32, "uint8": torch.uint8}[dtype_name]
    loader = torch.utils.data.DataLoader(
        Filled(dtype),
        batch_size=batch,
        num_workers=workers,
        pin_memory=True,
        persistent_workers=True,
        prefetch_factor=2,
        drop_last=True,
    )
    it = iter(loader)
    for _ in range(workers * 2 + 2):
        next(it)
    torch.cuda.synchronize()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        x, _y = next(it)
        x = x.cuda(non_blocking=True)
        n += 1
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    mb = n * x.numel() * x.element_size() / 1e6
    return {
        "batch": batch,
        "workers": workers,
        "dtype": dtype_name,
        "samples_per_s": round(n * batch / dt),
        "mb_per_s": round(mb / dt),
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1])))
        return 0
    if argv and argv[0] == "--fork":
        print(json.dumps(forked(argv[1] == "preload")))
        return 0
    if argv and argv[0] == "--ingest":
        print(json.dumps(ingest(int(argv[1]), int(argv[2]), argv[3])))
        return 0
    import subprocess

    variants = argv or ["plain", "preload", "fork", "fork-preload", "fp32", "profile", "ingest"]
    for rep in range(2):
        for v in variants:
            if v == "ingest":
                if rep:
                    continue
                cmds = [
                    ["--ingest", str(b), str(w), d]
                    for b, w, d in [(256, 15, "float32"), (512, 15, "float32"), (512, 15, "uint8"), (256, 4, "float32")]
                ]
            elif v.startswith("fork"):
                cmds = [["--fork", "preload" if v == "fork-preload" else "none"]]
            elif v == "profile" and rep:
                continue
            else:
                cmds = [["--child", v]]
            for c in cmds:
                t = time.perf_counter()
                p = subprocess.run([sys.executable, __file__, *c], capture_output=True, text=True, check=False)
                line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else None
                rec = json.loads(line) if line else {"error": p.stderr[-2000:]}
                rec.update(variant=v, rep=rep, args=c, process_s=round(time.perf_counter() - t, 2))
                print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
