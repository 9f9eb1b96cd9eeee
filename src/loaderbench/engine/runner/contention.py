"""Contention during a cell's window: what else ran on the host while the cell was timed.

A light sampler thread in the cell runner (1 Hz, independent of `telemetry_hz`, so it runs with telemetry off too)
records per sample the host's busy CPU time (/proc/stat) and the CPU time of the cell's process tree (the runner,
its ranks, their loader workers, an emulated tier's FUSE server: every descendant of the runner, and the ranks the
warm-start server forked for it with their workers), and, on a GPU host,
NVML's compute and graphics processes on the cell's GPUs. `summarize()` keeps the window (the training process's
`marks.window_start` .. `window_end`): foreign CPU = (host busy - the tree's CPU time - the run's own work) / window
seconds, in cores, with the counters interpolated to the window's edges; foreign GPU processes = those whose pid is
not in the tree.

The run's own work is what the project runs beside a cell: the processes above the runner (the Snakemake that
started it, `loaderbench run`) and every process that names this run (`LOADERBENCH_RUN_ID` in the environment it
started with: the warm-start server, a FUSE server of an emulated tier, another job of the run). It is recorded apart
(`own_cpu_cores`, and the processes that used most of it) and does not make a cell contended: another measurement
cannot run beside a cell (the bench slot and the host lock keep them apart), so what remains is the pipeline's own
book-keeping, which every cell of a run pays alike.
"""

from __future__ import annotations

import itertools
import os
import time

from loaderbench.core import records
from loaderbench.core.provenance import RUN_ID_ENV
from loaderbench.core.util import BackgroundSampler

CLK_TCK = os.sysconf("SC_CLK_TCK")


def host_cpu_s() -> dict:
    """CPU seconds of the whole host since boot (all cores): `busy` (user, nice, system, irq, softirq, steal), and of
    it `irq` (hardware and soft interrupts: no process's time, mostly serving the devices in use) and `steal` (taken
    by the hypervisor for other guests)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu"
    v = [int(x) for x in fields[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = v[:7]
    steal = v[7] if len(v) > 7 else 0
    return {
        "busy": (user + nice + system + irq + softirq + steal) / CLK_TCK,
        "irq": (irq + softirq) / CLK_TCK,
        "steal": steal / CLK_TCK,
    }


def other_processes_cpu_s(tree: set[int], names: dict[int, str]) -> dict[int, float]:
    """CPU seconds so far of every process outside `tree` (kernel threads included); their names go to `names`."""
    import psutil

    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        if p.pid in tree or p.info["cpu_times"] is None:
            continue
        out[p.pid] = p.info["cpu_times"].user + p.info["cpu_times"].system
        if p.pid not in names:  # once a process: reading its command line every second costs the cell's sampler
            names[p.pid] = _described(p)
    return out


def _described(p) -> str:
    """A process as the breakdown names it: its name, and for an interpreter the module or script it runs."""
    name = p.info.get("name") or "?"
    try:
        args = p.cmdline()
    except Exception:  # gone, or another user's
        return name
    if name.startswith("python") and len(args) > 1:
        what = args[args.index("-m") + 1] if "-m" in args[:-1] else os.path.basename(args[1])
        return f"{name} {what}"
    return name


def own_work(pid: int, run_id: str | None, ancestors: set[int]) -> bool:
    """Whether process `pid` is the run's own work: above the runner (`ancestors`), or started with this run's id."""
    import psutil

    if pid in ancestors:
        return True
    if not run_id:
        return False
    try:
        return psutil.Process(pid).environ().get(RUN_ID_ENV) == run_id
    except Exception:  # gone, or another user's
        return False


def foreign_gpu_processes(nv, handles: list, indices: list[int], tree: set[int]) -> list[dict]:
    """NVML's running compute and graphics processes on the cell's GPUs whose pid is not in `tree`."""
    out, seen = [], set()
    for handle, index in zip(handles, indices, strict=True):
        procs = []
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs += list(getattr(nv, call)(handle))
            except Exception:
                pass
        for p in procs:
            if p.pid in tree or (p.pid, index) in seen:
                continue
            seen.add((p.pid, index))
            used = getattr(p, "usedGpuMemory", None)
            out.append(
                {
                    "pid": p.pid,
                    "name": _name(p.pid),
                    "gpu": index,
                    "used_mb": round(used / 2**20, 1) if isinstance(used, int) else None,
                }
            )
    return out


def _name(pid: int) -> str | None:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:  # another PID namespace (a container), or gone
        return None


class Sampler(BackgroundSampler):
    """1 Hz samples of host CPU busy time, the runner's tree CPU time and foreign GPU processes."""

    thread_name = "loaderbench-contention"

    def __init__(self, gpus: int, hz: float = 1.0, root: int | None = None):
        super().__init__()
        self.gpus = gpus
        self.period = 1.0 / hz
        self.root = root or os.getpid()
        self.roots: list[int] = []  # more trees measured as the cell's own (its warm-started processes)
        self.gpu_note = None
        self._cpu: dict[int, float] = {}  # pid -> last CPU seconds (a process that exited keeps its last value)
        self._procs: dict = {}
        self.names: dict[int, str] = {}  # pid -> name of the processes outside the tree
        self.run_id = os.environ.get(RUN_ID_ENV)
        self.own: dict[int, bool] = {}  # pid -> whether it is the run's own work (decided once per process)
        self._own_cpu: dict[int, float] = {}  # pid -> last CPU seconds of the run's own processes outside the tree

    def result(self) -> dict:
        own = sorted(pid for pid, mine in self.own.items() if mine)
        return {"rows": self.rows, "gpu": self.gpu_note, "names": self.names, "own": own}

    def _ancestors(self) -> set[int]:
        import psutil

        try:
            return {p.pid for p in psutil.Process(self.root).parents()}
        except psutil.Error:
            return set()

    def _own_cpu_s(self, others: dict[int, float], ancestors: set[int]) -> float:
        """CPU seconds so far of the run's own processes outside the tree (one that exited keeps its last value)."""
        for pid, cpu in others.items():
            if pid not in self.own:
                self.own[pid] = own_work(pid, self.run_id, ancestors)
            if self.own[pid]:
                self._own_cpu[pid] = cpu
        return sum(self._own_cpu.values())

    def _tree_cpu_s(self) -> tuple[float, set[int]]:
        import psutil

        members = []
        for pid in (self.root, *self.roots):  # the runner, and the processes forked for it by the warm-start server
            try:
                top = self._procs.get(pid) or self._procs.setdefault(pid, psutil.Process(pid))
                members += [top, *top.children(recursive=True)]
            except psutil.Error:
                pass
        pids = set()
        for p in members:
            p = self._procs.setdefault(p.pid, p)
            try:
                t = p.cpu_times()
                self._cpu[p.pid] = t.user + t.system
                pids.add(p.pid)
            except psutil.Error:
                pass
        return sum(self._cpu.values()), pids

    def _run(self) -> None:
        from .telemetry import Nvml

        nvml = Nvml(self.gpus)
        if not nvml.handles:
            self.gpu_note = f"no NVML ({nvml.reason})" if self.gpus > 0 else "no NVML (the cell uses no GPU)"
        else:
            self.gpu_note = f"NVML, GPUs {nvml.indices}"
        next_t = time.monotonic()
        ancestors = self._ancestors()
        while True:
            tree_s, pids = self._tree_cpu_s()
            host = host_cpu_s()
            others = other_processes_cpu_s(pids, self.names)
            row = {
                "t": time.time(),
                "host_busy_s": host["busy"],
                "tree_cpu_s": tree_s,
                "own_cpu_s": self._own_cpu_s(others, ancestors),
                "tree_pids": sorted(pids),
                "host_irq_s": host["irq"],
                "host_steal_s": host["steal"],
                "others": others,
            }
            if nvml.handles:
                row["gpu_foreign"] = foreign_gpu_processes(nvml.nv, nvml.handles, nvml.indices, pids)
            self.rows.append(row)
            if self._stop.is_set():
                break  # the last sample is taken at stop, after the window has ended
            next_t += self.period
            self._stop.wait(max(0.0, next_t - time.monotonic()))
        nvml.close()


def _at(rows: list[dict], key: str, t: float) -> float:
    """A cumulative counter linearly interpolated to time t (clamped to the samples' span)."""
    if t <= rows[0]["t"]:
        return rows[0][key]
    for a, b in itertools.pairwise(rows):
        if a["t"] <= t <= b["t"]:
            f = (t - a["t"]) / max(b["t"] - a["t"], 1e-9)
            return a[key] + f * (b[key] - a[key])
    return rows[-1][key]


def summarize(samples: dict, marks: dict | None, cpu_cores: float, gpu_processes: int = 0) -> dict:
    """record["contention"]: foreign CPU cores and GPU processes over the window, the thresholds, and whether the
    cell was contended (foreign CPU over `cpu_cores`, or more than `gpu_processes` foreign GPU processes)."""
    rows = samples.get("rows") or []
    out = {
        "foreign_cpu_cores": None,
        "foreign_gpu_processes": [],
        "gpu": samples.get("gpu"),
        "thresholds": {"cpu_cores": cpu_cores, "gpu_processes": gpu_processes},
        "contended": False,
        "samples": 0,
    }
    ws, we = (marks or {}).get("window_start"), (marks or {}).get("window_end")
    if ws is None or we is None or len(rows) < 2 or we <= ws:
        out["note"] = "no measuring window" if ws is None or we is None else "too few samples"
        return out
    inside = [r for r in rows if ws <= r["t"] <= we]
    out["samples"] = len(inside)
    host, cell, own, basis = _cores(rows, ws, we)
    out["basis"] = basis
    out["host_cpu_cores"] = round(host, 3)
    out["cell_cpu_cores"] = round(cell, 3)
    out["own_cpu_cores"] = round(max(0.0, own), 3)
    out["foreign_cpu_cores"] = round(max(0.0, host - cell - max(0.0, own)), 3)
    out["foreign_breakdown"] = _breakdown(rows, ws, we, samples.get("names") or {}, set(samples.get("own") or ()))
    # GPU processes seen by a sample in the window (or the nearest one after it when the window is under a second)
    near = inside or [min((r for r in rows if r["t"] >= ws), key=lambda r: r["t"], default=rows[-1])]
    gpu: dict = {}
    for r in near:
        for p in r.get("gpu_foreign") or []:
            key = (p["pid"], p["gpu"])
            if key not in gpu or (p.get("used_mb") or 0) > (gpu[key].get("used_mb") or 0):
                gpu[key] = p
    out["foreign_gpu_processes"] = sorted(gpu.values(), key=lambda p: (p["gpu"], p["pid"]))
    out["contended"] = out["foreign_cpu_cores"] > cpu_cores or len(gpu) > gpu_processes
    return out


COUNTERS = ("host_busy_s", "tree_cpu_s", "own_cpu_s")


def _cores(rows: list[dict], ws: float, we: float) -> tuple[float, float, float, str]:
    """The host's, the cell's and the run's own CPU cores over the window. Only the sample intervals in which the
    cell kept the same processes count: a process's CPU is read once a sample, so one that exits (the loader's
    workers and the ranks, right after the window) takes its CPU since the last sample with it, and one that starts
    brings all its CPU since it started; either would be foreign CPU that is the cell's. Where such intervals cover
    too little of the window, the counters are interpolated to its edges."""
    span = we - ws
    sums, steady = dict.fromkeys(COUNTERS, 0.0), 0.0
    for a, b in itertools.pairwise(rows):
        lo, hi = max(a["t"], ws), min(b["t"], we)
        if hi <= lo or "tree_pids" not in a or a["tree_pids"] != b.get("tree_pids"):
            continue
        share = (hi - lo) / max(b["t"] - a["t"], 1e-9)
        for k in COUNTERS:
            sums[k] += share * (b.get(k, 0.0) - a.get(k, 0.0))
        steady += hi - lo
    if steady >= 0.5 * span:
        basis = f"the {steady:.1f} s of the {span:.1f}-s window in which the cell kept the same processes"
        return (*(sums[k] / steady for k in COUNTERS), basis)
    at = {k: (_at(rows, k, we) - _at(rows, k, ws)) / span if k in rows[0] else 0.0 for k in COUNTERS}
    return (*at.values(), "the counters interpolated to the window's edges")


def _breakdown(rows: list[dict], ws: float, we: float, names: dict, own: set[int] = frozenset()) -> dict:
    """Where the window's foreign CPU went, in cores: interrupts (no process's time), the hypervisor's steal, and the
    processes outside the cell's tree that used the most (kernel threads included), from the samples around it; the
    run's own processes (`own`) apart, as `own_processes`."""
    span = we - ws
    out = {
        k: round((_at(rows, f"host_{k}_s", we) - _at(rows, f"host_{k}_s", ws)) / span, 3)
        for k in ("irq", "steal")
        if all(f"host_{k}_s" in r for r in rows)
    }
    before = [r for r in rows if r["t"] <= ws and "others" in r]
    after = [r for r in rows if r["t"] >= we and "others" in r]
    if before and after:
        a, b = before[-1], after[0]
        used = {pid: (cpu - a["others"].get(pid, cpu)) / (b["t"] - a["t"]) for pid, cpu in b["others"].items()}
        for key, mine in (("processes", False), ("own_processes", True)):
            top = sorted(((c, pid) for pid, c in used.items() if c >= 0.05 and (pid in own) == mine), reverse=True)
            out[key] = [{"pid": pid, "name": names.get(pid, "?"), "cores": round(c, 3)} for c, pid in top[:5]]
    return out


def warning(c: dict) -> dict | None:
    """The record's warning (code `contended`) when the window was contended."""
    if not c.get("contended"):
        return None
    parts = []
    if c["foreign_cpu_cores"] is not None and c["foreign_cpu_cores"] > c["thresholds"]["cpu_cores"]:
        parts.append(
            f"other processes used {c['foreign_cpu_cores']:.2f} CPU cores during the window (threshold "
            f"host.contention_cpu_cores = {c['thresholds']['cpu_cores']:g})" + _who(c.get("foreign_breakdown"))
        )
    if c["foreign_gpu_processes"]:
        procs = ", ".join(
            f"pid {p['pid']} ({p['name'] or '?'}) on GPU {p['gpu']}"
            + (f" with {p['used_mb']:.0f} MB" if p.get("used_mb") is not None else "")
            for p in c["foreign_gpu_processes"]
        )
        parts.append(f"foreign GPU processes: {procs}")
    return records.warning(
        "contended",
        "; ".join(parts) + "; the throughput is not the cell's alone: rerun it on a "
        "quiet host (`make respread` reruns contended configurations)",
    )


def _who(b: dict | None) -> str:
    """ ", of which interrupts 0.80 and steal 0.00; most: kworker/3:1 (pid 120) 0.60" for the warning."""
    if not b:
        return ""
    text = f", of which interrupts {b['irq']:.2f} and steal {b['steal']:.2f}" if "irq" in b and "steal" in b else ""
    if b.get("processes"):
        text += "; most: " + ", ".join(f"{p['name']} (pid {p['pid']}) {p['cores']:.2f}" for p in b["processes"][:3])
    return text
