"""A cell's trace in the Chrome trace-event JSON format, for Perfetto (ui.perfetto.dev) and chrome://tracing.

One process for the measuring process (rank 0): its phases (setup, warm-up, window, from the record's marks), its
steps on the host's clock (each step a slice, its wait for the batch and its step inside), and on a GPU the steps on
the device's clock (CUDA events), with what the device did between two steps (the batch's copy to it, or nothing).
One process for the runner's telemetry, as counters: CPU busy, memory, read MB/s, GPU busy and memory. Times are
microseconds from the cell's start (the record's `started_at`); the measuring process links its clock to the epoch
at the window's start (`t0_epoch`), the sampler stamps each sample in epoch seconds. A cell without steps (failed,
skipped) gets a trace of what it has: its phases so far and its telemetry. Details: docs/method.md, "The trace".
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from loaderbench.core.util import atomic_write_text

CELL_PID, TELEMETRY_PID = 1, 2
PHASES_TID, HOST_TID, DEVICE_TID = 1, 2, 3
PHASES = (  # name, the marks it lies between
    ("setup", "setup_start", "warmup_start"),
    ("warm-up", "warmup_start", "window_start"),
    ("window", "window_start", "window_end"),
)
# counter -> (series -> the telemetry column it reads); GPU columns are added per GPU (`_counters`)
COUNTERS = {
    "CPU busy %": {"mean of cores": "cpu_mean"},
    "memory MB": {"process tree RSS": "rss_mb"},
    "read MB/s": {"cell's read()": "proc_read_mb_s", "tier's block device": "disk_read_mb_s"},
}


def build(
    cell_id: str, status: str, origin: float, steps: dict | None, samples: dict | None, marks: dict | None
) -> dict:
    """The trace of a cell that started at `origin` (epoch seconds): `steps` from its measuring process
    (`measure.step_times`; None without), `samples` the telemetry timeline (None without), `marks` the record's."""
    us = lambda t: round((t - origin) * 1e6, 1)
    events = _names(cell_id, steps)
    events += _phases(marks or {}, us)
    if steps:
        events += _host_steps(steps, us)
        if "device_end" in steps["window"]:
            events += _device_steps(steps, us)
    events += _counters((samples or {}).get("rows") or [], us)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "cell": cell_id,
            "status": status,
            "origin_epoch_s": origin,
            "clock": "microseconds from the cell's start (record started_at); the window's start links the measuring "
            "process's clock to the epoch, the device's clock is 0 at the window's start event",
            "steps": "rank 0's warm-up and window steps; steps the window cut to whole bursts have counted: false",
        },
    }


def write(path: Path, trace: dict) -> None:
    """The trace written atomically (WriteError names the file)."""
    atomic_write_text(Path(path), json.dumps(trace, separators=(",", ":"), allow_nan=False))


def _meta(name: str, pid: int, tid: int | None, value) -> dict:
    """A metadata event: a process's or thread's name (`*_name`) or its place among the others (`*_sort_index`)."""
    key = "sort_index" if name.endswith("sort_index") else "name"
    event = {"name": name, "ph": "M", "pid": pid, "args": {key: value}}
    if tid is not None:
        event["tid"] = tid
    return event


def _names(cell_id: str, steps: dict | None) -> list[dict]:
    device = (steps or {}).get("device", "cpu")
    threads = [(PHASES_TID, "phases"), (HOST_TID, "steps (host clock)")]
    if steps and "device_end" in steps["window"]:
        threads.append((DEVICE_TID, f"steps on the device ({device}, CUDA events)"))
    return [
        _meta("process_name", CELL_PID, None, f"cell {cell_id} (measuring process, rank 0)"),
        _meta("process_sort_index", CELL_PID, None, 0),
        _meta("process_name", TELEMETRY_PID, None, "telemetry (the runner's sampler)"),
        _meta("process_sort_index", TELEMETRY_PID, None, 1),
        *(_meta("thread_name", CELL_PID, tid, name) for tid, name in threads),
        *(_meta("thread_sort_index", CELL_PID, tid, tid) for tid, _ in threads),
    ]


def _span(name: str, cat: str, ts: float, end: float, tid: int, args: dict | None = None) -> dict:
    event = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": round(max(end - ts, 0.0), 1), "pid": CELL_PID}
    event["tid"] = tid
    if args:
        event["args"] = args
    return event


def _phases(marks: dict, us) -> list[dict]:
    return [
        _span(name, "phase", us(marks[a]), us(marks[b]), PHASES_TID)
        for name, a, b in PHASES
        if marks.get(a) is not None and marks.get(b) is not None
    ]


def _host_steps(steps: dict, us) -> list[dict]:
    """Each step a slice (warm-up, then window), with its wait for the batch and the step inside it; children are cut
    from the parent's own rounded bounds, so they nest exactly."""
    t0, gpu = steps["t0_epoch"], steps.get("device") == "cuda"
    inner = "launch the step (host)" if gpu else "step"
    first, last = steps["window"].get("kept", [0, len(steps["window"]["end"])])
    out = []
    for phase, part in (("warm-up", steps["warmup"]), ("window", steps["window"])):
        for i, (s, w, e) in enumerate(zip(part["start"], part["wait"], part["end"], strict=True)):
            a, b = us(t0 + s), us(t0 + e)
            mid = min(us(t0 + s + w), b)
            counted = phase == "window" and first <= i < last
            args = {"step": i + 1, "phase": phase, "counted": counted}
            out.append(_span(f"{phase} step {i + 1}", phase, a, b, HOST_TID, args))
            out.append(_span("wait for the batch", "wait", a, mid, HOST_TID))
            out.append(_span(inner, "compute", mid, b, HOST_TID))
    return out


def _device_steps(steps: dict, us) -> list[dict]:
    """The window's steps on the device's clock; between two, what the device did before the step: the batch's copy
    to it (queued by the loader on the step's stream) or nothing, the two not told apart by these events."""
    t0, part = steps["t0_epoch"], steps["window"]
    out, prev = [], us(t0)
    for i, (s, e) in enumerate(zip(part["device_start"], part["device_end"], strict=True)):
        a, b = us(t0 + s), us(t0 + e)
        if a > prev:
            out.append(_span("before the step: copy to the device or idle", "device-gap", prev, a, DEVICE_TID))
        out.append(_span(f"step {i + 1} on the device", "device", a, b, DEVICE_TID, {"step": i + 1}))
        prev = b
    return out


def _counters(rows: list[dict], us) -> list[dict]:
    """Counter events from the telemetry samples: each counter a track, its finite values only (JSON has no NaN)."""
    gpus = sorted({k.split("_")[0] for r in rows for k in r if k.startswith("gpu") and k.endswith("_util")})
    counters = {
        **COUNTERS,
        "GPU busy %": {g: f"{g}_util" for g in gpus},
        "GPU memory MB": {g: f"{g}_mem_mb" for g in gpus},
        "GPU JPEG decoders busy %": {g: f"{g}_jpg_util" for g in gpus},
    }
    out = []
    for row in rows:
        for name, series in counters.items():
            args = {s: round(float(row[c]), 3) for s, c in series.items() if _finite(row.get(c))}
            if args:
                out.append({"name": name, "ph": "C", "ts": us(row["t"]), "pid": TELEMETRY_PID, "args": args})
    return out


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)
