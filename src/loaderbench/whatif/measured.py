"""The parts a prediction is made of, read from cell records: each configuration's median rate over its ok
repeats with its interval, its GPU share, cores busy, host times and host, and the configurations of one run found by
field."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from loaderbench.core.cells import configuration
from loaderbench.core.comparable import group_of
from loaderbench.core.registry import DEFAULT_MODEL
from loaderbench.core.uncertainty import between_noise, repeats_halfwidth, widened
from loaderbench.core.util import stable_hash

CEILING = "synthetic"  # the loader whose cell is a model's compute ceiling


@dataclass
class Configuration:
    """One configuration of one run: the median over its ok repeats, and what its telemetry says."""

    run: str
    name: str  # the cell id without its repeat (and the settings that tell variants of one id apart)
    spec: dict
    settings: dict  # the spec fields that differ between records of one cell id (a sweep's variant), else {}
    rates: list[float]
    halfwidth: float
    gpu_share: float | None  # mean NVML busy / 100 over its GPUs; 0 on a CPU device; None where not sampled
    cores_busy: float | None
    launch: int  # launch cores its placement reserved
    host_cores: int | None
    device: str | None
    host_gpus: int | None = None  # GPUs on the run's host
    records: list[dict] = field(repr=False, default_factory=list)
    carried: str = ""  # a loader part of another host carried here (`carried`): from where, and by what rule
    # carried: its host's 1-GPU ceilings' (host_step_ms, main_cpu_ms, GPU share) by (model, batch size, precision)
    reference_times: dict = field(repr=False, default_factory=dict)

    @property
    def rate(self) -> float:
        return float(statistics.median(self.rates))

    @property
    def lo(self) -> float:
        return self.rate / (1 + self.halfwidth)

    @property
    def hi(self) -> float:
        return self.rate * (1 + self.halfwidth)

    @property
    def model(self) -> str:
        return model_of(self.spec)

    @property
    def is_part(self) -> bool:
        """A beside or rank part: never a row's training cell, never its loader-alone cell."""
        return bool(self.spec.get("beside")) or int(self.spec.get("ranks") or 1) != 1

    @property
    def host_step_ms(self) -> float | None:
        """The step call's wall time on the host (`metrics.host_step_ms`, its mean), median over the repeats; None
        where the records do not hold it (never 0)."""
        return _median([_mean_of((r.get("metrics") or {}).get("host_step_ms")) for r in self.records])

    @property
    def main_cpu_ms(self) -> float | None:
        """The main thread's CPU time per step (`metrics.main_cpu_ms`), median over the repeats; None where unknown."""
        return _median([_mean_of((r.get("metrics") or {}).get("main_cpu_ms")) for r in self.records])

    @property
    def loader(self) -> str:
        return self.spec["loader"]

    def key(self, *names: str) -> tuple:
        return tuple(field_of(self.spec, n) for n in names)

    def fields(self, *names: str) -> dict:
        """The spec's fields `names`, as configurations are matched on them (`Index.find`)."""
        return dict(zip(names, self.key(*names), strict=True))


def model_of(spec: dict) -> str:
    """A spec's model (records made before models were an axis trained MobileNetV2)."""
    return spec.get("model") or DEFAULT_MODEL


# the fields of parts added after records were first kept, and the value a record without them has
PART_DEFAULTS = {"parallel": "dp", "beside": False, "ranks": 1}


def field_of(spec: dict, name: str):
    """A spec's field as configurations are matched on it (a record made before a field existed: its default)."""
    if name == "model":
        return model_of(spec)
    return spec.get(name, PART_DEFAULTS.get(name))


def _mean_of(value) -> float | None:
    """A metric's mean: the number itself, or a summary's `mean`."""
    if isinstance(value, dict):
        value = value.get("mean")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def host_cores(record: dict) -> int | None:
    """The host's cores as the cell saw them: its placement's launch and other cores, else the usable CPUs (a cell's
    own affinity leaves out the launch cores its placement reserved: 31 of 32 with one GPU, 30 with two)."""
    place = (record.get("metrics") or {}).get("placement")
    if isinstance(place, dict) and place.get("other_cores") is not None:
        return len(place.get("launch_cores") or []) + len(place["other_cores"])
    return _host(record).get("cpus_usable")


def _host(record: dict) -> dict:
    return (record.get("provenance") or {}).get("host") or {}


def _launch_cores(record: dict) -> int:
    place = (record.get("metrics") or {}).get("placement")
    return len(place.get("launch_cores") or []) if isinstance(place, dict) else 0


def _gpu_share(record: dict) -> float | None:
    m, tel = record.get("metrics") or {}, record.get("telemetry") or {}
    if ((m.get("device") or {}).get("type")) == "cpu":
        return 0.0
    utils = [(g.get("util_pct") or {}).get("mean") for g in tel.get("gpus") or []]
    utils = [u for u in utils if u is not None]
    return float(np.mean(utils)) / 100 if utils else None


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return float(statistics.median(vals)) if vals else None


def measurement(record: dict) -> tuple:
    """What names one measurement: the same record kept in two places (a run's cells and its bundle's copy) is one."""
    return (record.get("cell_id"), record.get("spec_hash"), record.get("started_at"), record.get("finished_at"))


def configurations(records: list[dict]) -> list[Configuration]:
    """The ok records as configurations: grouped by comparison group (`core.comparable`) and cell id without its
    repeat, and apart where records of one id were made with different settings (a sweep's variants: the name says
    which)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("status") == "ok" and (r.get("metrics") or {}).get("samples_per_s"):
            groups[(group_of(r), configuration(r["cell_id"]))].append(r)
    out = []
    for (run, name), recs in groups.items():
        variants: dict[str, list[dict]] = defaultdict(list)
        for r in recs:
            variants[stable_hash(_settings(r["spec"]))].append(r)
        differing = _differing([_settings(v[0]["spec"]) for v in variants.values()])
        for vrecs in variants.values():
            spec = vrecs[0]["spec"]
            settings = {f: spec.get(f) for f in differing}
            label = name + (" [" + ", ".join(f"{f}={v}" for f, v in settings.items()) + "]" if settings else "")
            rates = [float(r["metrics"]["samples_per_s"]) for r in vrecs]
            out.append(
                Configuration(
                    run=run,
                    name=label,
                    spec=spec,
                    settings=settings,
                    rates=rates,
                    halfwidth=math.nan,
                    gpu_share=_median([_gpu_share(r) for r in vrecs]),
                    cores_busy=_median([(r.get("telemetry") or {}).get("cpu_cores_busy") for r in vrecs]),
                    launch=max(_launch_cores(r) for r in vrecs),
                    host_cores=None,
                    device=((vrecs[0].get("metrics") or {}).get("device") or {}).get("type"),
                    records=vrecs,
                )
            )
    for run in {c.run for c in out}:
        mine = [c for c in out if c.run == run]
        noise = between_noise([c.rates for c in mine])
        cores = [n for c in mine for n in (host_cores(r) for r in c.records) if n]
        gpus = [len(h["gpu_models"]) for c in mine for h in (_host(r) for r in c.records) if "gpu_models" in h]
        for c in mine:
            c.host_cores = max(cores) if cores else None
            c.host_gpus = max(gpus) if gpus else None
            if len(c.rates) > 1:
                c.halfwidth = repeats_halfwidth(c.rates)
            else:
                window = ((c.records[0].get("metrics") or {}).get("window") or {}).get("ci95_rel_halfwidth")
                c.halfwidth = widened(window or 0.0, noise)
    return out


def _settings(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("repeat", "seed")}


def _differing(settings: list[dict]) -> list[str]:
    keys = sorted(set().union(*settings)) if settings else []
    return [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]


class Index:
    """The configurations of one run, found by their parts' fields (a variant matched on its differing settings)."""

    def __init__(self, configs: list[Configuration]):
        self.configs = configs

    def find(self, of: Configuration | None = None, **want) -> Configuration | None:
        """The configuration with the fields `want` (neither a beside nor a rank part unless asked for), the variant
        of `of`'s settings where several match, else the fastest."""
        want = {"beside": False, "ranks": 1, **want}
        hits = [c for c in self.configs if all(field_of(c.spec, k) == v for k, v in want.items())]
        if of is not None and len(hits) > 1:
            same = [c for c in hits if all(of.spec.get(f) == v for f, v in c.settings.items())]
            hits = same or hits
        return max(hits, key=lambda c: c.rate) if hits else None


def by_run(configs: list[Configuration]) -> dict[str, list[Configuration]]:
    """The configurations of each run (comparison group), in the order they come."""
    runs: dict[str, list[Configuration]] = defaultdict(list)
    for c in configs:
        runs[c.run].append(c)
    return runs
