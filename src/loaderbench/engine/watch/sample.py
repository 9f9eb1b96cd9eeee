"""What the watch samples beside a watched command: CPU of its process tree (each process and its main thread), the
host's cores, memory, every block device's reads and, where NVML answers, the GPUs.

Rows use the telemetry timeline's columns (`runner.telemetry`: cpu_mean, rss_mb, disk_read_mb_s, gpu<k>_util,
gpu<k>_mem_mb), so the cells' trace draws them as counters; `pids` holds each process's cumulative CPU seconds
(process and main thread) per sample, from /proc/<pid>/stat and /proc/<pid>/task/<pid>/stat.
"""

from __future__ import annotations

import os
import time

from loaderbench.core.util import BackgroundSampler

from ..runner.telemetry import Nvml, block_device_of

HZ = 5.0
TICK_S = os.sysconf("SC_CLK_TCK")


def stat_cpu_s(path: str) -> float | None:
    """utime + stime of a /proc stat file, seconds; None where it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK_S


def visible_gpus() -> tuple[int, str | None]:
    """The GPUs NVML sees (CUDA_VISIBLE_DEVICES's count where set), and why none where NVML cannot answer."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - no library, no driver: GPU columns are null, and the reason says so
        return 0, f"NVML unavailable: {type(e).__name__}: {e}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([v for v in visible.split(",") if v.strip()]))
    return count, None if count else "NVML sees no GPU"


class Sampler(BackgroundSampler):
    """Samples the tree under `root_pid` at HZ until stopped; `result()` is {meta, rows, pids}."""

    thread_name = "loaderbench-watch-sampler"

    def __init__(self, root_pid: int, hz: float = HZ):
        super().__init__()
        self.root_pid, self.hz = root_pid, hz
        self.pids: dict[int, list[tuple[float, float | None, float | None]]] = {}
        self.disks: list[tuple[float, dict]] = []
        self.meta: dict = {}

    def result(self) -> dict:
        return {"meta": self.meta, "rows": self.rows, "pids": self.pids, "disks": self.disks}

    def _run(self) -> None:
        import psutil

        gpus, reason = visible_gpus()
        nvml = Nvml(gpus) if gpus else None
        self.meta = {"hz_target": self.hz, "cores": psutil.cpu_count(), "gpus": nvml.indices if nvml else []}
        self.meta["gpu_reason"] = reason or (nvml.reason if nvml else None)
        psutil.cpu_percent()
        tree: set[int] = {self.root_pid}
        scans = 0
        period = 1.0 / self.hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            if scans % 5 == 0:
                tree = self._tree(psutil) or tree
            scans += 1
            now = time.time()
            row = {"t": now, "cpu_mean": psutil.cpu_percent(), "rss_mb": self._rss(psutil, tree)}
            for pid in tree:
                self.pids.setdefault(pid, []).append(
                    (now, stat_cpu_s(f"/proc/{pid}/stat"), stat_cpu_s(f"/proc/{pid}/task/{pid}/stat"))
                )
            disks = psutil.disk_io_counters(perdisk=True) or {}
            self.disks.append((now, {name: c.read_bytes for name, c in disks.items()}))
            if nvml is not None and nvml.handles:
                row.update(nvml.sample())
            self.rows.append(row)
            next_t += period
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        if nvml is not None:
            nvml.close()

    def _tree(self, psutil) -> set[int]:
        try:
            root = psutil.Process(self.root_pid)
            return {self.root_pid, *(c.pid for c in root.children(recursive=True))}
        except psutil.Error:
            return set()

    @staticmethod
    def _rss(psutil, tree: set[int]) -> float:
        total = 0
        for pid in tree:
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20


def add_disk_rates(timeline: dict, path: str | None) -> tuple[str | None, str]:
    """Put the read rate of the block device holding `path` into the timeline's rows (`disk_read_mb_s`); returns that
    device's name (None where there is none) and a note saying which or why not."""
    if not path:
        return None, "no dataset folder seen (no ImageFolder-like dataset with a root)"
    disk, note = block_device_of(path)
    disks = timeline.get("disks") or []
    if disk is None or not disks or disk not in disks[0][1]:
        return None, note if disk is None else f"{note}: {disk} is not in /proc/diskstats"
    rows = timeline["rows"]
    for (t0, a), (t1, b), row in zip(disks, disks[1:], rows[1:], strict=False):
        row["disk_read_mb_s"] = max(b[disk] - a[disk], 0) / max(t1 - t0, 1e-6) / 1e6
    return disk, note


def cores_busy(series: list[tuple], lo: float, hi: float, column: int) -> float | None:
    """Mean cores busy between epoch seconds lo and hi from (t, process s, main-thread s) samples; None if unknown."""
    pts = [(s[0], s[column]) for s in series if s[column] is not None and lo <= s[0] <= hi]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])
