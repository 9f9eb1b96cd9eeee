"""Where a cell's steps spend the device's time: `profile_steps` more steps after the window, under torch.profiler.

CUPTI's activity records are reduced to a few figures per GPU and step: busy time, kernel/copy time per stream (the
training step's `main` stream against a loader's `other` streams), the main stream's idle time, other streams'
kernels overlapping it, the top kernels, and the host's CUDA runtime calls. Without a GPU the profile has host
operators only, and says so. Details: docs/internals.md, "engine.stepprofile".
"""

from __future__ import annotations

import re
import time
import traceback
from collections import defaultdict

TOP = 8


def run(step, batches, steps: int, sync, device_type: str, beat=None) -> dict:
    """Run `steps` training steps under torch.profiler and summarise them (`summarize`); `beat(seconds)` after each
    step (the watchdog's heartbeat). A profile that fails says why ({"error": ...}): the cell's window is measured
    already, and stays its record."""
    try:
        return _run(step, batches, steps, sync, device_type, beat)
    except Exception as e:  # noqa: BLE001 - any failure of the profiler or the reduction; the window stands
        return {"steps": steps, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=4)}


def _run(step, batches, steps: int, sync, device_type: str, beat) -> dict:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    sync()
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            t = time.perf_counter()
            step(*next(batches))
            if beat is not None:
                beat(time.perf_counter() - t)
        sync()
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    events = [_event(e) for e in prof.profiler.kineto_results.events()]
    out = summarize(events, steps)
    out.update(wall_s=round(wall, 4), summarize_s=round(time.perf_counter() - t1, 3))
    return out


def _event(e) -> dict:
    # activity_type() is newer than torch 2.11 (the GPU host's): without it, the kind is told from the name (_kind);
    # older builds time events in microseconds
    kind = e.activity_type() if hasattr(e, "activity_type") else None
    start = e.start_ns() if hasattr(e, "start_ns") else 1000 * e.start_us()
    length = e.duration_ns() if hasattr(e, "duration_ns") else 1000 * e.duration_us()
    return {
        "name": e.name(),
        "kind": None if kind is None else str(kind),
        "gpu": str(e.device_type()).endswith("CUDA"),
        "device": e.device_index(),
        "stream": getattr(e, "device_resource_id", lambda: 0)(),
        "start": start,
        "end": start + length,
    }


RUNTIME = re.compile(r"^cu(da)?[A-Z]")  # cudaLaunchKernel, cudaStreamSynchronize, cuLaunchKernelEx, ...


def _kind(ev: dict) -> str:
    """kernel, copy or memset (GPU); runtime (a CUDA runtime or driver call on the host); op (anything else)."""
    if ev["gpu"]:
        name = ev["name"].lower()
        return (
            "copy"
            if ev["kind"] == "gpu_memcpy" or name.startswith("memcpy")
            else "memset"
            if ev["kind"] == "gpu_memset" or name.startswith("memset")
            else "kernel"
        )
    if ev["kind"] is None:
        return "runtime" if RUNTIME.match(ev["name"]) else "op"
    return "runtime" if ev["kind"] in ("cuda_runtime", "cuda_driver") else "op"


def union_ns(intervals) -> int:
    """Total length of the union of (start, end) intervals."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def overlap_ns(a, b) -> int:
    """Length of the intersection of the unions of interval lists `a` and `b`."""
    return union_ns(a) + union_ns(b) - union_ns(list(a) + list(b))


def summarize(events: list[dict], steps: int) -> dict:
    """The profile's figures (module docstring) from events as `_event` makes them, per step of `steps`."""
    per = 1e6 * max(1, steps)  # ns -> ms per step
    gpu = [e for e in events if e["gpu"] and e["end"] > e["start"]]
    out = {"steps": steps, "gpus": {}}
    by_device = defaultdict(list)
    for e in gpu:
        by_device[e["device"]].append(e)
    for device, evs in sorted(by_device.items()):
        span = max(e["end"] for e in evs) - min(e["start"] for e in evs)
        streams = defaultdict(lambda: {"kernel": [], "copy": [], "memset": []})
        names = defaultdict(lambda: [0, 0, None])  # name -> [ns, calls, stream]
        for e in evs:
            k = _kind(e)
            streams[e["stream"]][k].append((e["start"], e["end"]))
            if k == "kernel":
                n = names[e["name"]]
                n[0] += e["end"] - e["start"]
                n[1] += 1
                n[2] = e["stream"]
        kernel_ns = {s: union_ns(v["kernel"]) for s, v in streams.items()}
        main = max(kernel_ns, key=kernel_ns.get) if kernel_ns else None
        main_all = [iv for k in ("kernel", "copy", "memset") for iv in streams[main][k]] if main is not None else []
        others = [iv for s, v in streams.items() if s != main for iv in v["kernel"]]
        out["gpus"][str(device)] = {
            "span_ms": round(span / per, 3),
            "busy_ms": round(union_ns((e["start"], e["end"]) for e in evs) / per, 3),
            "main_stream": main,
            "main_idle_ms": round((span - union_ns(main_all)) / per, 3),
            "overlap_ms": round(overlap_ns(streams[main]["kernel"], others) / per, 3) if main is not None else 0.0,
            "streams": {
                str(s): {
                    "role": "main" if s == main else "other",
                    **{f"{k}_ms": round(union_ns(v[k]) / per, 3) for k in ("kernel", "copy", "memset")},
                    "kernels_per_step": round(len(v["kernel"]) / max(1, steps), 1),
                }
                for s, v in sorted(streams.items(), key=lambda kv: -kernel_ns[kv[0]])
            },
            "top_kernels": [
                {
                    "name": name[:100],
                    "stream": "main" if st == main else "other",
                    "ms": round(ns / per, 3),
                    "calls": round(calls / max(1, steps), 1),
                }
                for name, (ns, calls, st) in sorted(names.items(), key=lambda kv: -kv[1][0])[:TOP]
            ],
        }
    host = defaultdict(lambda: [0, 0])
    for e in events:
        if not e["gpu"] and _kind(e) == "runtime":
            h = host[e["name"]]
            h[0] += e["end"] - e["start"]
            h[1] += 1
    out["host_runtime"] = [
        {"name": n, "ms": round(ns / per, 3), "calls": round(c / max(1, steps), 1)}
        for n, (ns, c) in sorted(host.items(), key=lambda kv: -kv[1][0])[:TOP]
    ]
    if not gpu:
        ops = defaultdict(int)
        for e in events:
            if _kind(e) == "op":
                ops[e["name"]] += e["end"] - e["start"]
        out["note"] = "no GPU activity (a CPU device): host operators only, inclusive of the operators they call"
        out["host_ops"] = [
            {"name": n, "ms": round(ns / per, 3)} for n, ns in sorted(ops.items(), key=lambda kv: -kv[1])[:TOP]
        ]
    return out
