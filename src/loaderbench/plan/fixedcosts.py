"""What a study costs beside its cells: making and checking the dataset, staging it onto each tier, the tier probes
and the workflow's own jobs (start, aggregate, figures, bundle) - each done already (0 s), as the last generation's
record or a host's records measured it, or by the rules below."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from loaderbench.core.layout import DATASETS, LOGS, Layout

from .hostrecords import Host

# Dataset generation and the check, per image and CPU core (calibrated on a 30-CPU GPU host).
GENERATE_CORE_S_PER_IMAGE = 0.045
CHECK_CORE_S_PER_IMAGE = 0.008
STAGE_MB_S = 300.0  # copying onto a tier (tmpfs is faster, disks slower)
MEAN_FILE_BYTES = 110e3  # a generated ImageNet-like JPEG, when no staging manifest, check or dataset.json says
# Snakemake's start and the jobs after the cells: aggregate, diagnose, figures, bundle.
WORKFLOW_S = {"gpu": 15.0, "cpu": 40.0}
# What the last `loaderbench make-dataset` in this project generated and how long it took, beside its log: the next
# generation on this host is predicted from it
GENERATION_RECORD = f"{LOGS}/make_dataset.json"


@dataclass
class FixedCost:
    name: str
    seconds: float
    basis: str  # done, log, host records, rules
    detail: str


# ---- fixed costs


def dataset_size(cfg: dict, results: Layout) -> tuple[int | None, float, str]:
    """(images, mean file bytes, where from): a staging manifest, the check, the generated dataset's stats, the
    config (a generated dataset's image count) or a walk of a real source."""
    for tier in cfg["tiers"]:
        m = _json(results.manifest(tier))
        if m and m.get("dataset") == cfg["dataset"]["name"] and m.get("counts", {}).get("files"):
            c = m["counts"]
            return c["files"], c["bytes"] / c["files"], results.manifest(tier)
    ds = cfg["dataset"]
    check = _json(results.check)
    if check and check.get("files"):
        sizes = [f["size"] for f in check["files"] if f.get("size")]
        if sizes:
            return len(check["files"]), sum(sizes) / len(sizes), results.check
    if ds["source"] == "generated":
        stats = _json(Path(DATASETS, ds["name"], "dataset.json"))
        if stats and stats.get("files"):
            return stats["files"], stats["total_bytes"] / stats["files"], f"{DATASETS}/{ds['name']}/dataset.json"
        return ds["images"], MEAN_FILE_BYTES, "config (mean file size assumed)"
    n, size = 0, 0
    for p in Path(ds["path"]).rglob("*"):
        if p.is_file():
            n, size = n + 1, size + p.stat().st_size
    return n, (size / n if n else MEAN_FILE_BYTES), ds["path"]


def _json(path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _measured_probe(tier: str, kind: str, dirs) -> tuple[float, str] | None:
    """Seconds an earlier probe of `tier` took, from a results folder beside a records folder (probe/<tier>.json) or
    a bundle's tables/tier_probe.csv."""
    for d in dirs:
        base = Path(d).parent
        p = _json(base / "probe" / f"{tier}.json")
        if p and p.get("kind") == kind and p.get("runs"):
            return sum(r["seconds"] for r in p["runs"]), str(base / "probe" / f"{tier}.json")
        table = base / "tables" / "tier_probe.csv"
        if table.is_file():
            with table.open() as f:
                rows = [r for r in csv.DictReader(f) if r.get("Tier") == tier and r.get("Kind") == kind]
            try:
                seconds = sum(float(r["Files"]) / float(r["Files/s"]) for r in rows)
            except (KeyError, ValueError, ZeroDivisionError):
                continue
            if rows:
                return seconds, str(table)
    return None


def fixed_costs(cfg: dict, host: Host, results: Layout, host_dirs) -> list[FixedCost]:
    """Each fixed cost of the study in the order the workflow pays it: dataset, check, staging, probes, workflow."""
    out = []
    ds = cfg["dataset"]
    images, mean_bytes, size_from = dataset_size(cfg, results)
    cores = max(1, host.cpus_usable)
    if ds["source"] == "generated":
        out.append(_generate_cost(ds, cores))
    check = _json(results.check)
    if check and check.get("files"):
        out.append(FixedCost("check dataset", 0.0, "done", results.check))
    else:
        s = (images or 0) * CHECK_CORE_S_PER_IMAGE / cores
        out.append(FixedCost("check dataset", s, "rules", f"{CHECK_CORE_S_PER_IMAGE} CPU-s per image on {cores} CPUs"))
    mb = (images or 0) * mean_bytes / 1e6
    for tier in cfg["tiers"]:
        m = _json(results.manifest(tier))
        if m and m.get("dataset") == ds["name"]:
            out.append(FixedCost(f"stage {tier}", 0.0, "done", results.manifest(tier)))
        else:
            out.append(
                FixedCost(
                    f"stage {tier}",
                    mb / STAGE_MB_S,
                    "rules",
                    f"{mb:.0f} MB ({images} files, mean {mean_bytes / 1e3:.0f} KB from {size_from}) "
                    f"at {STAGE_MB_S:g} MB/s",
                )
            )
    for tier in cfg["tiers"]:
        out.append(_probe_cost(cfg, tier, results, host_dirs, images, mean_bytes))
    out.append(FixedCost("workflow: start, aggregate, figures, bundle", WORKFLOW_S[host.kind], "rules", ""))
    return out


def _generate_cost(ds: dict, cores: int) -> FixedCost:
    """Generating the dataset: done, as long as the last generation took (GENERATION_RECORD), or by the rule per
    image."""
    name = f"generate dataset ({ds['images']} images)"
    if Path(DATASETS, ds["name"], "dataset.json").is_file():
        return FixedCost(name, 0.0, "done", f"{DATASETS}/{ds['name']}")
    last = _json(GENERATION_RECORD)
    if last and last.get("images") and isinstance(last.get("seconds"), (int, float)):
        s = last["seconds"] * ds["images"] / last["images"]
        return FixedCost(name, s, "log", f"{last['seconds']:.1f} s for {last['images']} images in {GENERATION_RECORD}")
    s = ds["images"] * GENERATE_CORE_S_PER_IMAGE / cores
    return FixedCost(name, s, "rules", f"{GENERATE_CORE_S_PER_IMAGE} CPU-s per image on {cores} CPUs")


def _probe_cost(cfg: dict, tier: str, results: Layout, host_dirs, images: int | None, mean_bytes: float) -> FixedCost:
    """Probing `tier`: done, as an earlier probe took, at an emulated tier's model rate, or the probe's time limit."""
    probe = cfg["probe"]
    t = cfg["storage"][tier]
    name = f"probe {tier} (readers {', '.join(map(str, probe['readers']))})"
    if _json(results.probe(tier)):
        return FixedCost(name, 0.0, "done", results.probe(tier))
    earlier = _measured_probe(tier, t["kind"], host_dirs)
    if earlier:
        return FixedCost(name, earlier[0], "host records", f"as measured: {earlier[1]}")
    files = min(images or 0, probe["max_files"]) if probe["max_files"] else (images or 0)
    if t["kind"] == "emulated" and files:
        from loaderbench.core.devices import DeviceModel, predict

        model = DeviceModel.from_dict(t["model"])
        s = sum(
            min(probe["max_seconds"], files / predict(model, mean_bytes, r)["files_per_s"]) for r in probe["readers"]
        )
        return FixedCost(
            name,
            s,
            "rules",
            f"{files} files at the {model.name} model's rate, at most {probe['max_seconds']:g} s per reader count",
        )
    s = len(probe["readers"]) * probe["max_seconds"]
    return FixedCost(name, s, "rules", f"at most {probe['max_seconds']:g} s per reader count")


def record_generation(images: int, seconds: float, path: str | Path = GENERATION_RECORD) -> None:
    """Write GENERATION_RECORD: `images` generated in `seconds` (the planner's basis for the next generation)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"images": images, "seconds": round(seconds, 3)}) + "\n")
