"""Resource telemetry through a cell: GPU, CPU, disk and memory sampled at about 10 Hz.

The sampler is a thread of the cell runner, not of the training process, so it never holds the training's GIL; its
own CPU time is recorded. Per sample: per GPU (NVML) utilisation, memory and PCIe MB/s (PCIe read by a second thread,
one GPU a second: NVML blocks ~20 ms a read); CPU % per core; the tier's block-device MB/s and the cell's own read()
MB/s; the process tree's RSS. Without NVML there are no GPU columns and `gpu_reason` says why.
Details: docs/internals.md, "engine.telemetry".
"""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from pathlib import Path

import numpy as np

from loaderbench.core.provenance import filesystem_of
from loaderbench.core.util import BackgroundSampler, atomic_write_text

PCIE_NOTE = "NVML PCIe throughput (a 20 ms counter window), read by its own thread: one GPU per second, in turn"
PCIE_PERIOD_S = 1.0


def block_device_of(path: Path) -> tuple[str | None, str]:
    """(psutil disk name, explanation) of the block device holding `path`; name None when there is none."""
    try:
        st = os.stat(path)
    except OSError as e:
        return None, f"cannot stat {path}: {e.strerror}"
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    link = Path(f"/sys/dev/block/{major}:{minor}")
    if link.exists():
        return link.resolve().name, f"block device {major}:{minor}"
    fs = filesystem_of(path)["fstype"]
    return None, f"no block device behind {path} ({fs or 'unknown'} filesystem, device {major}:{minor})"


class Nvml:
    """NVML handles for the physical GPUs a cell uses; `reason` is set when NVML is unusable."""

    def __init__(self, gpus: int):
        self.reason = None
        self.handles: list = []
        self.indices: list[int] = []
        if gpus <= 0:
            self.reason = "the cell uses no GPU"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as e:  # no nvidia-ml-py, no driver (CPU machines)
            self.reason = f"NVML unavailable: {type(e).__name__}: {e}"
            return
        self.nv = pynvml
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = list(range(gpus))
        if visible:
            try:
                ids = [int(v) for v in visible.split(",")[:gpus]]
            except ValueError:  # UUIDs: NVML's order is not CUDA's; use the first cards as the fallback
                pass
        try:
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in ids]
            self.indices = ids
        except Exception as e:
            self.reason = f"NVML cannot open GPUs {ids}: {e}"
            self.handles = []

    def sample(self) -> dict:
        out = {}
        nv = self.nv
        for k, h in enumerate(self.handles):
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h)
                out[f"gpu{k}_util"] = float(util.gpu)
                out[f"gpu{k}_mem_mb"] = nv.nvmlDeviceGetMemoryInfo(h).used / 2**20
            except Exception:
                out[f"gpu{k}_util"] = out[f"gpu{k}_mem_mb"] = float("nan")
            try:  # the hardware JPEG decoders' busy share (nvJPEG's hardware path: DALI's mixed decoding)
                out[f"gpu{k}_jpg_util"] = float(nv.nvmlDeviceGetJpgUtilization(h)[0])
            except Exception:  # no such engine, or an NVML without the call
                pass
            try:  # the SM clock and why it is below its maximum: a slower GPU moves every rate measured on it
                out[f"gpu{k}_sm_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                reasons = (
                    getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
                    or nv.nvmlDeviceGetCurrentClocksThrottleReasons
                )
                out[f"gpu{k}_clock_reasons"] = int(reasons(h))
            except Exception:
                pass
        return out

    def pcie(self, k: int) -> dict:
        """GPU k's PCIe RX/TX in MB/s (NVML reports KB/s over its 20 ms window; the call blocks that long)."""
        nv, h = self.nv, self.handles[k]
        try:
            return {
                f"gpu{k}_pcie_rx_mb_s": nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) / 1e3,
                f"gpu{k}_pcie_tx_mb_s": nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) / 1e3,
            }
        except Exception:
            return {}

    def close(self) -> None:
        if self.handles or not self.reason:
            try:
                self.nv.nvmlShutdown()
            except Exception:
                pass


class Sampler(BackgroundSampler):
    """Samples the machine and a process tree at `hz` in a background thread; `stop()` returns the timeline."""

    thread_name = "loaderbench-telemetry"

    def __init__(self, hz: float, pids: list[int], tier_path: Path | None, gpus: int):
        super().__init__()
        self.hz = hz
        self.pids = pids
        self.tier_path = tier_path
        self.gpus = gpus
        self.meta: dict = {}
        self._cpu_s = 0.0
        self._cost_s: list[float] = []
        self._read: dict[int, int] = {}
        self._live: set[int] = set()
        self._pcie_latest: dict = {}
        self._scans = 0

    def result(self) -> dict:
        return {"meta": self.meta, "rows": self.rows}

    def _run(self) -> None:
        import psutil

        nvml = Nvml(self.gpus)
        disk, disk_note = block_device_of(self.tier_path) if self.tier_path else (None, "no tier path")
        self.meta = {
            "hz_target": self.hz,
            "gpus": nvml.indices,
            "gpu_reason": nvml.reason,
            "pcie": PCIE_NOTE if nvml.handles else None,
            "disk": disk,
            "disk_note": disk_note,
            "cores": psutil.cpu_count(),
        }
        if nvml.handles:
            threading.Thread(target=self._pcie_loop, args=(nvml,), name="loaderbench-pcie", daemon=True).start()
        procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(percpu=True)  # starts the per-core interval
        prev = None
        cpu0 = time.thread_time()
        period = 1.0 / self.hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            t_begin = time.perf_counter()
            now = time.time()
            row = {"t": now}
            cores = psutil.cpu_percent(percpu=True)
            row["cpu_mean"] = float(np.mean(cores)) if cores else float("nan")
            for i, c in enumerate(cores):
                row[f"cpu{i}"] = c
            rss, read = self._tree(procs)
            row["rss_mb"] = rss / 2**20
            disk_bytes = None
            if disk:
                try:
                    disk_bytes = psutil.disk_io_counters(perdisk=True)[disk].read_bytes
                except (KeyError, AttributeError):
                    disk_bytes = None
            if prev is not None:
                dt = max(now - prev[0], 1e-6)
                row["proc_read_mb_s"] = max(read - prev[1], 0) / dt / 1e6
                if disk_bytes is not None and prev[2] is not None:
                    row["disk_read_mb_s"] = max(disk_bytes - prev[2], 0) / dt / 1e6
            prev = (now, read, disk_bytes)
            if nvml.handles:
                row.update(nvml.sample())
                row.update(self._pcie_latest)
                self._pcie_latest = {}  # each PCIe reading appears once in the timeline
            self.rows.append(row)
            self._cost_s.append(time.perf_counter() - t_begin)
            next_t += period
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        nvml.close()
        self.meta["sampler_cpu_s"] = time.thread_time() - cpu0
        self.meta["sample_cost_ms"] = float(1000 * np.mean(self._cost_s)) if self._cost_s else None

    def _pcie_loop(self, nvml: Nvml) -> None:
        turn = 0
        while not self._stop.wait(PCIE_PERIOD_S):
            self._pcie_latest = {**self._pcie_latest, **nvml.pcie(turn % len(nvml.handles))}
            turn += 1

    def _tree(self, procs: dict) -> tuple[int, int]:
        """RSS and cumulative read() bytes of the root processes and all their descendants (children that
        already exited keep their last read count, so the rate never goes negative)."""
        import psutil

        if self._scans % 10 == 0:  # listing descendants scans /proc: once a second, not every sample
            live: set[int] = set()
            for pid in self.pids:
                try:
                    root = procs.get(pid) or procs.setdefault(pid, psutil.Process(pid))
                    live.add(pid)
                    for c in root.children(recursive=True):
                        procs.setdefault(c.pid, c)
                        live.add(c.pid)
                except psutil.Error:
                    pass
            self._live = live
        self._scans += 1
        live = self._live
        rss = 0
        for pid in live:
            try:
                rss += procs[pid].memory_info().rss
                self._read[pid] = procs[pid].io_counters().read_chars
            except (psutil.Error, AttributeError):  # exited meanwhile; no io_counters on this platform
                pass
        return rss, sum(self._read.values())


def phases(t: float, marks: dict | None) -> str:
    """Which part of the cell a timestamp falls in, from the training process's marks (epoch seconds)."""
    if not marks:
        return ""
    if marks.get("window_end") is not None and t > marks["window_end"]:
        return "teardown"
    for name in ("window", "warmup", "setup"):
        start = marks.get(f"{name}_start")
        if start is not None and t >= start:
            return name
    return "startup"


def to_csv(timeline: dict, marks: dict | None) -> str:
    rows = timeline["rows"]
    cols: list[str] = ["t", "s", "phase"]
    for r in rows:
        cols += [k for k in r if k not in cols]
    t0 = rows[0]["t"] if rows else 0.0
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "s": round(r["t"] - t0, 3), "phase": phases(r["t"], marks)})
    return buf.getvalue()


def write_timeline(path: Path, timeline: dict, marks: dict | None) -> None:
    atomic_write_text(path, to_csv(timeline, marks))


# NVML's clock event reasons (nvmlClocksEventReason*): why a GPU's clock was held below its maximum
CLOCK_REASONS = {
    0x1: "idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


def clock_reasons(rows: list[dict], key: str) -> list[str] | None:
    """The reasons any sample in `rows` gave for GPU clocks below their maximum (None: not sampled)."""
    seen = [int(r[key]) for r in rows if r.get(key) is not None and r[key] == r[key]]
    if not seen:
        return None
    bits = 0
    for v in seen:
        bits |= v
    names = [name for bit, name in CLOCK_REASONS.items() if bits & bit]
    return names + ([f"other (0x{bits:x})"] if bits & ~0x1FF else [])


def summarize(timeline: dict, marks: dict | None) -> dict:
    """Window statistics (the timed window only; the whole run when there are no marks) for the cell record."""
    meta = timeline["meta"]
    rows = timeline["rows"]
    if marks and marks.get("window_start") is not None:
        lo, hi = marks["window_start"], marks.get("window_end") or float("inf")
        rows = [r for r in rows if lo <= r["t"] <= hi]
    out = {
        "samples": len(rows),
        "hz_target": meta.get("hz_target"),
        "hz": (len(rows) - 1) / max(rows[-1]["t"] - rows[0]["t"], 1e-9) if len(rows) >= 2 else None,
        "sampler_cpu_s": meta.get("sampler_cpu_s"),
        "sample_cost_ms": meta.get("sample_cost_ms"),
        "gpu_reason": meta.get("gpu_reason"),
        "pcie": meta.get("pcie"),
        "disk": meta.get("disk"),
        "disk_note": meta.get("disk_note"),
    }

    def stats(key: str) -> dict | None:
        vals = np.array([r[key] for r in rows if r.get(key) is not None and r[key] == r[key]], dtype=float)
        if vals.size == 0:
            return None
        return {"mean": float(vals.mean()), "p50": float(np.median(vals)), "max": float(vals.max())}

    cores = [f"cpu{i}" for i in range(meta.get("cores") or 0)]
    out["cpu_mean_pct"] = stats("cpu_mean")
    out["cpu_per_core_mean_pct"] = [(stats(k) or {}).get("mean") for k in cores]
    busy = [v for v in out["cpu_per_core_mean_pct"] if v is not None]
    out["cpu_cores_busy"] = float(sum(busy) / 100) if busy else None
    for key in ("rss_mb", "proc_read_mb_s", "disk_read_mb_s"):
        out[key] = stats(key)
    out["gpus"] = [
        {
            "index": index,
            "util_pct": stats(f"gpu{k}_util"),
            "jpg_util_pct": stats(f"gpu{k}_jpg_util"),
            "mem_mb": stats(f"gpu{k}_mem_mb"),
            "pcie_rx_mb_s": stats(f"gpu{k}_pcie_rx_mb_s"),
            "pcie_tx_mb_s": stats(f"gpu{k}_pcie_tx_mb_s"),
            "sm_mhz": stats(f"gpu{k}_sm_mhz"),
            "clock_reasons": clock_reasons(rows, f"gpu{k}_clock_reasons"),
        }
        for k, index in enumerate(meta.get("gpus") or [])
    ]
    return out
