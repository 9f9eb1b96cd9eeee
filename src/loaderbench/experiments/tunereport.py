"""`tune`'s report: the best setting, its gain and AU, what limits it and what it used; the report as text."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import yaml

from loaderbench.core.cells import CONFIG_KEY_OF
from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL
from loaderbench.core.uncertainty import DEFAULT_BETWEEN_NOISE, Z_95
from loaderbench.report.diagnose import WAIT_SHARE  # a step waiting less than this share of itself had its batch
from loaderbench.report.verdict import tuned_fix

from .tuneknobs import key, step_settings

if TYPE_CHECKING:
    from .tune import Tuner


def build_report(t: Tuner, best: dict, space: dict, progress: dict) -> dict:
    """The best setting, its gain over the start, its AU against the ceiling of its step, what limits it, the config
    lines to paste, and how the search went (`progress`)."""
    ok = [r for r in t.runs.get(key(best), {}).values() if r["status"] == "ok"]
    ceilings = {
        k: [r["metrics"]["samples_per_s"] for _, r in sorted(recs.items()) if r["status"] == "ok"]
        for k, recs in t.ceilings.items()
    }
    ceiling = ceilings.get(key(step_settings(best)), [])
    rate = statistics.median(r["metrics"]["samples_per_s"] for r in ok) if ok else None
    wait = statistics.median(r["metrics"]["data_wait_fraction"] for r in ok) if ok else None
    au = rate / statistics.median(ceiling) if rate and ceiling else None
    gain = t.against(best, {}) if best else None
    snippet = {}
    for field, value in best.items():
        *parents, leaf = CONFIG_KEY_OF[field].split(".")
        node = snippet
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return {
        "loader": t.loader,
        "model": t.model,
        "tier": t.tier,
        "batch_size": t.batch,
        "precision": t.precision,
        "searched": {k: list(v) for k, v in space.items()},
        **progress,
        "rounds": t.rounds,
        "cells": len(t.walls),
        "best": best,
        "samples_per_s": rate,
        "gain": gain.to_dict() if gain else None,
        "fix": tuned_fix(t.loader, best, gain.to_dict() if gain else None),
        "au": au,
        "ceiling_samples_per_s": ceiling,  # the ceiling of the best setting's step, a rate a round
        "ceilings": ceilings,  # every step's ceiling measured (`start`: the config's step)
        "data_wait_fraction": wait,
        "limit": limit(wait, au),
        "snippet": yaml.safe_dump(snippet, sort_keys=False) if snippet else "",
        "why": why(ok, [r for r in t.ceilings.get(key(step_settings(best)), {}).values() if r["status"] == "ok"]),
        "measured": {
            k: {
                r: (rec["metrics"]["samples_per_s"] if rec["status"] == "ok" else rec["status"]) for r, rec in v.items()
            }
            for k, v in t.runs.items()
        },
    }


def limit(wait: float | None, au: float | None) -> str | None:
    """What limits the best setting, from its data wait and its AU.

    A captured step returns to the host at once and runs on the device while the host waits for the next batch: its
    wait is then the device's time, not the loader's, and a rate within WAIT_SHARE of the ceiling says so."""
    if wait is None:
        return None
    if wait <= WAIT_SHARE:
        return "the training step: batches are ready"
    if au is not None and au >= 1 - WAIT_SHARE:
        return (
            f"the training step: it runs at AU {au:.2f}; the host waits {wait:.0%} of a step for data while the "
            "device still runs the step"
        )
    return "the loader: the step still waits for data"


def usage(records: list[dict]) -> dict:
    """What a setting's cells used, medians over its processes: the step's time on the device (CUDA events around
    it; on a CPU its wall time), the GPU's busy share and its JPEG decoders', and the CPU cores busy."""

    def med(values):
        vals = [v for v in values if v is not None]
        return statistics.median(vals) if vals else None

    def gpu(r, field):
        return med([(g.get(field) or {}).get("mean") for g in (r.get("telemetry") or {}).get("gpus", [])])

    return {
        "step_device_ms": med([(r["metrics"].get("compute_ms") or {}).get("mean") for r in records]),
        "gpu_busy_pct": med([gpu(r, "util_pct") for r in records]),
        "jpeg_decoders_busy_pct": med([gpu(r, "jpg_util_pct") for r in records]),
        "cpu_cores_busy": med([(r.get("telemetry") or {}).get("cpu_cores_busy") for r in records]),
    }


def why(cells: list[dict], ceilings: list[dict]) -> dict:
    """What limits the best setting, measured: its usage beside the ceiling's (the same step on data already on the
    device) and how much longer the step takes on the device beside the loader than alone."""
    loader, alone = usage(cells), usage(ceilings)
    a, b = loader["step_device_ms"], alone["step_device_ms"]
    return {"loader": loader, "ceiling": alone, "step_slowdown": a / b if a and b else None}


def _why_lines(w: dict | None) -> list[str]:
    if not w:
        return []

    def fmt(u):
        parts = [
            f"step {u['step_device_ms']:.1f} ms on the device" if u["step_device_ms"] is not None else None,
            f"GPU busy {u['gpu_busy_pct']:.0f}%" if u["gpu_busy_pct"] is not None else None,
            f"JPEG decoders {u['jpeg_decoders_busy_pct']:.0f}%" if u["jpeg_decoders_busy_pct"] is not None else None,
            f"{u['cpu_cores_busy']:.1f} cores busy" if u["cpu_cores_busy"] is not None else None,
        ]
        return ", ".join(p for p in parts if p) or "not measured"

    lines = [f"used by the best: {fmt(w['loader'])}", f"used by the ceiling: {fmt(w['ceiling'])}"]
    if w["step_slowdown"]:
        lines.append(f"the step takes {w['step_slowdown']:.2f}x its time alone on the device beside this loader")
        if w["step_slowdown"] < 1 - NOISE:
            lines.append(
                "  warning: faster beside the loader than alone, beyond the noise between processes: the ceiling's "
                "step was disturbed, or the two did not run the same step; trust neither this ratio nor the AU"
            )
    return lines


NOISE = Z_95 * DEFAULT_BETWEEN_NOISE  # two rates of one setting further apart than this moved beyond the noise


def ceiling_warning(rates: list[float]) -> str | None:
    """A ceiling that moved beyond the noise between rounds: the host was not steady, and every AU and gain against
    it is less certain than its interval says."""
    if len(rates) < 2 or min(rates) <= 0 or max(rates) / min(rates) - 1 <= NOISE:
        return None
    return (
        f"  warning: the ceiling moved {max(rates) / min(rates):.2f}x between rounds (beyond the {100 * NOISE:.1f}% "
        "noise between processes): the host was not steady; rerun tune on a quiet host before trusting AU or gains"
    )


def render(rep: dict) -> str:
    model = rep.get("model") or DEFAULT_MODEL  # a report from before it named its model trained the default
    lines = [
        (
            f"tune {rep['loader']} on {rep['tier']}, model {model}, batch {rep['batch_size']} {rep['precision']}: "
            f"{rep['cells']} cells in {rep['rounds']} rounds; Samples/s by setting and round:"
        )
    ]
    lines += [
        f"  {k:50s} " + ", ".join(f"r{r} {v if isinstance(v, str) else f'{v:.0f}'}" for r, v in vals.items())
        for k, vals in rep["measured"].items()
    ]
    for step, rates in (rep.get("ceilings") or {"start": rep["ceiling_samples_per_s"]}).items():
        if not rates:  # none measured (`none` has no ceiling, or the budget ended first)
            continue
        lines.append(
            f"  ceiling (synthetic{'' if step == 'start' else ', ' + step}): " + ", ".join(f"{v:.0f}" for v in rates)
        )
        if warning := ceiling_warning(rates):
            lines.append(warning)
    au = (
        f"AU {rep['au']:.2f}"
        if rep["au"] is not None
        else "AU - (model none: the loader alone, no step to take a ceiling of)"
        if model == NO_MODEL
        else "AU - (no ceiling measured)"
    )
    if rep["best"]:
        g = rep["gain"]
        gain = (
            f"{g['value']:.2f}x [{g['low']:.2f}, {g['high']:.2f}] the config's settings"
            if g
            else "each move faster than the setting it replaced; against the config's own, not measured in one round "
            "(the budget ended)"
        )
        lines.append(
            f"best: {key(rep['best'])}: {rep['samples_per_s']:.0f} samples/s, {gain}, {au}; limit: {rep['limit']}"
        )
        if rep.get("fix"):
            lines.append(f"best fix: {rep['fix']['what']}")
        lines.append("paste into the config:\n" + "\n".join(f"  {x}" for x in rep["snippet"].splitlines()))
    elif rep["samples_per_s"]:
        lines.append(
            f"best: the config's own settings ({rep['samples_per_s']:.0f} samples/s, {au}): no "
            f"tried setting was measurably faster; limit: {rep['limit']}"
        )
    else:
        lines.append("no setting was measured within the budget")
    return "\n".join(lines + _why_lines(rep.get("why")) + _search_lines(rep))


def _search_lines(rep: dict) -> list[str]:
    """How the search went: the order, the knobs moved last, skipped, not applicable here and not reached."""
    if "order" not in rep:  # a report from before the search said so
        return []
    lines = [f"search order: {', '.join(rep['order']) or 'none searched'}"]
    lines += [f"  moved last: {name}: {why}" for name, why in rep["moved_last"].items()]
    lines += [f"  skipped: {name}: {why}" for name, why in rep["skipped"].items()]
    lines += [f"  not applicable here: {name}: {why}" for name, why in rep["not_applicable"].items()]
    missed = rep["not_reached"]
    lines.append(
        f"not reached within the budget: {', '.join(missed)}" if missed else "every knob reached within the budget"
    )
    return lines
