"""The host a plan is for, and what its cell records say of a cell's cost (`Measured`, one ok record's figures)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from loaderbench.core.config import ConfigError
from loaderbench.core.records import CorruptRecord, read_record
from loaderbench.core.registry import DEFAULT_MODEL, loader_record

# Spec fields that do not change what a cell costs: a record with the rest equal is the same configuration.
# cold_step moves the device's cold start from the first warm-up step into setup, overlapped with the loader's
# start-up: a cell costs about what it did without it, or less (and records from before it have no cold_step).
# optimizer_fused changes how fast a step runs, not how long a cell takes (its window is seconds, its overhead the
# process's): the unfused records of a host predict its fused cells.
NOT_COST = ("repeat", "seed", "tier_path", "read_path", "dataset", "cold_step", "optimizer_fused")


@dataclass(frozen=True)
class Host:
    """The machine a plan is for, as records name it: its GPU models and usable CPUs."""

    gpu_models: tuple[str, ...]
    cpus_usable: int
    source: str = "this machine"

    @property
    def kind(self) -> str:
        return "gpu" if self.gpu_models else "cpu"

    def matches(self, record: dict) -> bool:
        """The record's host is this one: the same GPU models, and its usable CPUs within one per GPU of ours - the
        cells of one host can say 31 (1 GPU) or 30 (2 GPUs): the affinity a cell's runner reads can lose a core
        per GPU to the cell's placement."""
        h = (record.get("provenance") or {}).get("host") or {}
        cpus = h.get("cpus_usable")
        return (
            tuple(h.get("gpu_models") or ()) == self.gpu_models
            and cpus is not None
            and abs(cpus - self.cpus_usable) <= len(self.gpu_models)
        )

    def label(self) -> str:
        gpus = Counter(self.gpu_models)
        what = ", ".join(f"{n} x {m}" for m, n in gpus.items()) if gpus else "no GPU"
        return f"{what}, {self.cpus_usable} usable CPUs ({self.source})"


def this_host() -> Host:
    """This machine, read as a cell's provenance reads it."""
    from loaderbench.core.provenance import host

    h = host()
    return Host(tuple(h["gpu_models"]), h["cpus_usable"])


def read_records(dirs) -> tuple[list[dict], list[str]]:
    """The readable cell records directly in `dirs` (not their corrupt/ or superseded/), and the unreadable ones'
    paths (left where they are: the workflow sets them aside)."""
    records, unreadable = [], []
    for d in dirs:
        for p in sorted(Path(d).glob("*.json")):
            try:
                records.append(read_record(p))
            except CorruptRecord:
                unreadable.append(str(p))
    return records, unreadable


def host_of_records(directory: str | Path) -> Host:
    """The host most of the records in `directory` came from (`--host-from`: plan for that machine)."""
    records, _ = read_records([directory])
    hosts = [h for h in ((r.get("provenance") or {}).get("host") for r in records) if h and h.get("cpus_usable")]
    if not hosts:
        raise ConfigError(
            f"--host-from {directory}: no cell record with its host's provenance there "
            "(point it at a folder of <cell>.json records, e.g. results/cells or a bundle's cells/)"
        )
    gpus = Counter(tuple(h.get("gpu_models") or ()) for h in hosts).most_common(1)[0][0]
    cpus = max(h["cpus_usable"] for h in hosts if tuple(h.get("gpu_models") or ()) == gpus)  # see Host.matches
    return Host(gpus, cpus, f"the host of the records in {directory}")


@dataclass(frozen=True)
class Measured:
    """The cost figures of one ok record."""

    spec: dict
    wall_s: float
    window_s: float | None
    warmup_s: float | None
    first_step_s: float | None
    samples_per_s: float | None
    adaptive: bool
    compute_s: float | None = None  # a step's compute alone (no wait for data), mean
    global_batch: int | None = None
    kept: bool = False  # measured by a process kept from an earlier cell (warmstart's reuse)
    startup_s: float | None = None  # interpreter and imports (a kept process skips them)
    cold_step_s: float | None = None  # CUDA's start and cuDNN's plans (a kept process skips them for shapes it ran)
    unsettled: bool = False  # an adaptive window that reached its maximum unconverged: a longer one runs longer

    @property
    def overhead_s(self) -> float | None:
        """Its wall time but for the window and the warm-up: start-up, setup, teardown, the record."""
        if self.window_s is None or self.warmup_s is None:
            return None
        return max(0.0, self.wall_s - self.window_s - self.warmup_s)

    def key(self, field_name: str):
        """This record's spec's value of `field_name` (`cost_key`)."""
        return cost_key(self.spec, field_name)


def cost_key(spec: dict, field_name: str):
    """A spec's value of `field_name` as costs compare it (`feed`: its loader's backlog kind), filled in for a record
    from before the field."""
    if field_name == "feed":
        return loader_record(spec.get("loader")).backlog
    if field_name == "model":
        return spec.get("model", DEFAULT_MODEL)  # records before models were an axis trained MobileNetV2
    return spec.get(field_name, "dp" if field_name == "parallel" else None)  # records before ddp were dp


def measured_of(record: dict) -> Measured | None:
    """The cost figures of `record`; None unless it is ok and has its wall time."""
    if record.get("status") != "ok" or not record.get("wall_s"):
        return None
    m = record.get("metrics") or {}
    phases = record.get("phases_s") or {}
    window = m.get("time_s", phases.get("window"))
    warmup = m.get("warmup_s", phases.get("warmup"))
    first = m.get("first_step_s")
    if first is None and warmup is not None and m.get("step_ms") and m.get("warmup_steps"):
        first = max(0.0, warmup - (m["warmup_steps"] - 1) * m["step_ms"] / 1e3)  # a record from before first_step_s
    mode = (m.get("window") or {}).get("mode")
    compute = (m.get("compute_ms") or {}).get("mean")
    starts = record.get("process_start") or []
    unsettled = (m.get("window") or {}).get("converged") is False
    return Measured(
        record["spec"],
        float(record["wall_s"]),
        window,
        warmup,
        first,
        m.get("samples_per_s"),
        mode == "adaptive" or (mode is None and record["spec"].get("window_max_s") is not None),
        None if compute is None else compute / 1e3,
        m.get("global_batch"),
        bool(starts) and all(s.get("reused") for s in starts),
        m.get("startup_s"),
        m.get("cold_step_s"),
        unsettled,
    )


def same_configuration(a: dict, b: dict) -> bool:
    """Whether two specs cost the same: equal but for the fields of NOT_COST."""
    return all(a.get(k) == b.get(k) for k in set(a) | set(b) if k not in NOT_COST)


def median(values) -> float | None:
    """The median of those of `values` that are not None; None when none are."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
