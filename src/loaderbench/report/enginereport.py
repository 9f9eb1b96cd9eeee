"""What the measuring engine costs and how far its numbers can be trusted, from a folder of cell records: per-cell
overhead (wall minus window) and where it went, how well each window knew its rate, dp against ddp, and the spread
of repeats measured in separate processes. `loaderbench engine-report` prints it; the benchmarks of the engine are
read off this report, never asserted in tests."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import defaultdict
from pathlib import Path

from loaderbench.core.cells import CellSpec, parse_cell_id
from loaderbench.core.records import is_record, upgrade, warnings_of

PHASES = ("before_process", "startup", "setup", "warmup", "teardown", "close")


def load(cells_dir: Path) -> list[dict]:
    """The cell records in `cells_dir` and its subfolders (a sweep keeps one folder per variant), each brought up to
    date (`records.upgrade`); superseded ones and other JSON files (a sweep's summary) left out."""
    found = (json.loads(p.read_text()) for p in sorted(Path(cells_dir).rglob("*.json")) if "superseded" not in p.parts)
    return [upgrade(r) for r in found if is_record(r)]


# spec fields that name a cell or vary with its repeat, not a setting: never what sets configurations apart
_NOT_SETTINGS = {f.name for f in dataclasses.fields(CellSpec) if f.metadata.get("fixed")} | {"parallel", "seed"}
# settings named by a short tag when not the seed recipe's (always, so such cells are never pooled with the recipe's)
_TAGS = {"torchvision_transport": lambda v: v, "optimizer_fused": lambda v: "fused" if v else None}


def _config_keys(records: list[dict]) -> list[tuple]:
    """Each record's configuration: (loader, tier, gpus, batch, precision, parallel), the loader named with its
    transport and a fused optimizer when not the defaults ("torchvision[uint8]", "synthetic[fused]"), and with every
    other setting its spec gives a value that differs between records of the same cell ("dali-cpu[dali_threads=8]",
    a sweep's variants), so that such cells are never compared with or pooled into each other. A setting that only
    some records have (added since the others were written) sets them apart only where it takes two values: a record
    without it then stands apart from both."""
    ids = [parse_cell_id(r["cell_id"]) for r in records]
    specs = [r.get("spec") or {} for r in records]
    same_cell: dict[tuple, list[int]] = defaultdict(list)
    for i, d in enumerate(ids):
        same_cell[(d["loader"], d["tier"], d["gpus"], d["batch_size"], d["precision"])].append(i)
    keys: list[tuple] = [()] * len(records)
    for members in same_cell.values():
        named = set.union(*(set(specs[i]) for i in members)) - _NOT_SETTINGS - set(_TAGS)
        varying = sorted(
            k for k in named if len({json.dumps(specs[i][k], sort_keys=True) for i in members if k in specs[i]}) > 1
        )
        for i in members:
            d, spec = ids[i], specs[i]
            tags = [t for k, tag in _TAGS.items() if (t := tag(spec.get(k)))]
            tags += [f"{k}={spec[k]}" for k in varying if k in spec]
            loader = f"{d['loader']}[{','.join(tags)}]" if tags else d["loader"]
            keys[i] = (loader, d["tier"], d["gpus"], d["batch_size"], d["precision"], d["parallel"])
    return keys


def report(records: list[dict], ceiling: dict | None = None) -> dict:
    """The engine report of `records` (and the ceiling's crosscheck, when given), as `render` prints it."""
    ok = [r for r in records if r["status"] == "ok" and r.get("phases_s")]
    overhead = [r["phases_s"]["overhead"] for r in ok]
    out: dict = {"cells": len(records), "ok": len(ok), "status": dict(_count(r["status"] for r in records))}
    if overhead:
        out["overhead_s"] = {"median": statistics.median(overhead), "min": min(overhead), "max": max(overhead)}
        out["phase_median_s"] = {p: statistics.median(r["phases_s"].get(p, 0.0) for r in ok) for p in PHASES}
        out["window_median_s"] = statistics.median(r["metrics"]["time_s"] for r in ok)
        out["wall_total_s"] = sum(r["phases_s"]["wall"] for r in ok)
    windows = [r["metrics"].get("window") or {} for r in ok]
    adaptive = [w for w in windows if w.get("mode") == "adaptive"]
    if adaptive:
        known = [w["ci95_rel_halfwidth"] for w in adaptive if w.get("ci95_rel_halfwidth") is not None]
        out["adaptive"] = {
            "cells": len(adaptive),
            "converged": sum(bool(w.get("converged")) for w in adaptive),
            "ci95_median": statistics.median(known) if known else None,
        }
    out.update(_repeats_and_dp(ok))
    cold: dict[str, list[float]] = defaultdict(list)
    for r in ok:
        if r["metrics"].get("cold_step_s") is not None:
            cold[parse_cell_id(r["cell_id"])["loader"]].append(r["metrics"]["cold_step_s"])
    if cold:  # the device's cold start, paid in setup while the loader starts (CellSpec.cold_step_on)
        out["cold_step_median_s"] = {loader: statistics.median(v) for loader, v in sorted(cold.items())}
    starts = [s for r in records for s in r.get("process_start") or []]
    if starts:  # warm (forked by the run's warm-start server) or plain, and why plain
        out["process_starts"] = {
            "warm": sum(bool(s["warm"]) for s in starts),
            "reused": sum(bool(s.get("reused")) for s in starts),
            "plain": dict(_count(s["how"] for s in starts if not s["warm"])),
        }
    cuts = [w["whole_bursts"] for w in windows if w.get("whole_bursts")]
    if cuts:  # worker-fed windows cut to whole bursts (window.whole_bursts)
        cut = [c for c in cuts if c.get("cut_head_steps") or c.get("cut_tail_steps")]
        out["whole_bursts"] = {
            "windows": len(cuts),
            "cut": len(cut),
            "cut_head_steps": sorted(c.get("cut_head_steps", 0) for c in cut),
            "cut_tail_steps": sorted(c.get("cut_tail_steps", 0) for c in cut),
        }
    out["profiles"] = [_profile_line(r) for r in ok if r["metrics"].get("profile")]
    warned = defaultdict(int)
    for r in ok:
        for w in warnings_of(r["metrics"]):
            warned[w["code"]] += 1
    out["warnings"] = dict(warned)
    if ceiling:
        out["ceiling"] = {
            k: ceiling[k]
            for k in ("synthetic_samples_per_s", "bare_samples_per_s", "synthetic_over_bare", "placement")
            if k in ceiling
        }
    return out


def _repeats_and_dp(ok: list[dict]) -> dict:
    """The repeats of each configuration with their spread and steal, the foreign CPU, and dp over ddp by config."""
    by_config: dict[tuple, list[float]] = defaultdict(list)
    steal_of: dict[tuple, list[float | None]] = defaultdict(list)
    for r, k in zip(ok, _config_keys(ok), strict=True):
        by_config[k].append(r["metrics"]["samples_per_s"])
        steal_of[k].append(_foreign(r).get("steal"))
    median = {k: statistics.median(v) for k, v in by_config.items()}
    repeats = [
        {
            "config": "_".join(map(str, k)),
            "n": len(v),
            "median": statistics.median(v),
            "spread": (max(v) - min(v)) / statistics.median(v),
            "samples_per_s": v,
            "steal_cores": steal_of[k],
        }
        for k, v in sorted(by_config.items())
        if len(v) > 1
    ]
    foreign_cpu = _foreign_summary(ok)
    dp_over_ddp = [
        {
            "config": "_".join(map(str, k[:5])),
            "dp": sps,
            "ddp": median[(*k[:5], "ddp")],
            "ratio": sps / median[(*k[:5], "ddp")],
        }
        for k, sps in sorted(median.items())
        if k[5] == "dp" and (*k[:5], "ddp") in median
    ]
    return {"repeats": repeats, "foreign_cpu": foreign_cpu, "dp_over_ddp": dp_over_ddp}


def _profile_line(record: dict) -> dict:
    """A profiled cell's GPU time per step on its first GPU (stepprofile): the span, the busy time, the training
    stream's kernels and idle time, other streams' kernels and how much of them ran under the training stream's."""
    prof = record["metrics"]["profile"][0]
    out = {"cell": record["cell_id"], "samples_per_s": record["metrics"]["samples_per_s"]}
    if prof.get("error"):
        return {**out, "error": prof["error"]}
    gpus = prof.get("gpus") or {}
    if gpus:
        g = gpus[min(gpus)]
        streams = g["streams"].values()
        out.update(
            span_ms=g["span_ms"],
            busy_ms=g["busy_ms"],
            main_idle_ms=g["main_idle_ms"],
            overlap_ms=g["overlap_ms"],
            main_kernel_ms=sum(x["kernel_ms"] for x in streams if x["role"] == "main"),
            other_kernel_ms=sum(x["kernel_ms"] for x in streams if x["role"] == "other"),
            copy_ms=sum(x["copy_ms"] for x in streams),
        )
    return out


def _foreign(record: dict) -> dict:
    """The foreign CPU of a record's window, in cores: in all, and split (records since the split) into interrupts,
    hypervisor steal and processes outside the cell's tree."""
    c = record.get("contention") or {}
    out = {"all": c.get("foreign_cpu_cores"), "contended": bool(c.get("contended"))}
    b = c.get("foreign_breakdown")
    if b:
        out.update(irq=b.get("irq"), steal=b.get("steal"), processes=sum(p["cores"] for p in b.get("processes") or []))
    return out


def _foreign_summary(records: list[dict]) -> dict | None:
    """How much CPU outside the cell ran during the windows, and what it was: a spread between repeats or a
    `contended` flag is read against it (hypervisor steal counts: a virtual host's neighbours)."""
    f = [_foreign(r) for r in records if (r.get("contention") or {}).get("foreign_cpu_cores") is not None]
    if not f:
        return None
    split = [x for x in f if "steal" in x]
    out = {
        "cells": len(f),
        "contended": sum(x["contended"] for x in f),
        "median_cores": statistics.median(x["all"] for x in f),
        "split_cells": len(split),
    }
    if split:
        out["median_split_cores"] = {
            k: statistics.median(x[k] or 0.0 for x in split) for k in ("irq", "steal", "processes")
        }
    return out


def _count(items):
    counts: dict = defaultdict(int)
    for i in items:
        counts[i] += 1
    return counts


def render(rep: dict) -> str:
    lines = [f"{rep['cells']} cell records: " + ", ".join(f"{n} {s}" for s, n in sorted(rep["status"].items()))]
    if "overhead_s" in rep:
        o = rep["overhead_s"]
        lines.append(
            f"per-cell overhead (wall - window): median {o['median']:.1f} s (min {o['min']:.1f}, max "
            f"{o['max']:.1f}); median window {rep['window_median_s']:.1f} s; {rep['wall_total_s'] / 60:.1f} "
            "min of cell wall time in all"
        )
        lines.append("  median per phase: " + ", ".join(f"{p} {v:.2f} s" for p, v in rep["phase_median_s"].items()))
    if "cold_step_median_s" in rep:
        lines.append(
            "  cold step (in setup), median by loader: "
            + ", ".join(f"{loader} {v:.1f} s" for loader, v in rep["cold_step_median_s"].items())
        )
    if "process_starts" in rep:
        p = rep["process_starts"]
        kept = f" ({p['reused']} of them kept from a cell before)" if p.get("reused") else ""
        lines.append(
            f"measuring processes: {p['warm']} forked warm{kept}, {sum(p['plain'].values())} started plainly"
            + "".join(f"\n  {n} plain: {how}" for how, n in sorted(p["plain"].items()))
        )
    if "adaptive" in rep:
        a = rep["adaptive"]
        ci = f"+-{100 * a['ci95_median']:.2f}%" if a["ci95_median"] is not None else "unknown (too few steps)"
        lines.append(f"adaptive windows: {a['converged']} of {a['cells']} reached their precision; median 95% CI {ci}")
    for d in rep["dp_over_ddp"]:
        lines.append(f"dp / ddp  {d['config']:40s} {d['dp']:9.1f} / {d['ddp']:9.1f} = {d['ratio']:.3f}")
    for r in rep["repeats"]:
        steal = ", ".join("?" if s is None else f"{s:.2f}" for s in r["steal_cores"])
        lines.append(
            f"repeats   {r['config']:40s} n={r['n']}  median {r['median']:9.1f}  spread {100 * r['spread']:.2f}%"
            f"  ({', '.join(f'{x:.0f}' for x in r['samples_per_s'])}; steal {steal} cores)"
        )
    if rep.get("foreign_cpu"):
        f = rep["foreign_cpu"]
        text = (
            f"foreign CPU during windows: median {f['median_cores']:.2f} cores over {f['cells']} cells, "
            f"{f['contended']} contended"
        )
        if "median_split_cores" in f:
            m = f["median_split_cores"]
            text += (
                f"; in the {f['split_cells']} cells that split it, median steal {m['steal']:.2f}, interrupts "
                f"{m['irq']:.2f}, other processes {m['processes']:.2f} cores"
            )
        lines.append(text)
    if rep.get("whole_bursts"):
        b = rep["whole_bursts"]
        lines.append(
            f"whole bursts: {b['cut']} of {b['windows']} worker-fed windows cut (steps cut at the start "
            f"{b['cut_head_steps']}, at the end {b['cut_tail_steps']})"
        )
    for p in rep.get("profiles", []):
        text = f"profile   {p['cell']:40s} {p['samples_per_s']:9.1f}/s"
        if "span_ms" in p:
            text += (
                f": per step {p['span_ms']:.1f} ms on GPU, busy {p['busy_ms']:.1f}; training stream kernels "
                f"{p['main_kernel_ms']:.1f}, idle {p['main_idle_ms']:.1f}; other streams' kernels "
                f"{p['other_kernel_ms']:.1f} ({p['overlap_ms']:.1f} under the training stream's); copies "
                f"{p['copy_ms']:.1f}"
            )
        elif "error" in p:
            text += f": the profile failed ({p['error']})"
        else:
            text += ": no GPU activity (a CPU device)"
        lines.append(text)
    for w, n in sorted(rep["warnings"].items()):
        lines.append(f"warning   {n} cell(s): {w}")
    if "ceiling" in rep:
        c = rep["ceiling"]
        lines.append(
            f"ceiling   synthetic / bare loop = {c['synthetic_over_bare']:.4f} (synthetic "
            f"{', '.join(f'{x:.0f}' for x in c['synthetic_samples_per_s'])}; bare "
            f"{', '.join(f'{x:.0f}' for x in c['bare_samples_per_s'])}); placement {json.dumps(c.get('placement'))}"
        )
    return "\n".join(lines)
