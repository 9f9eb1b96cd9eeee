"""The what-if's grid: where each loader x model pair has its parts (the loader alone and the model's ceiling, measured
by the config's own parts), the parts that config key `whatif` adds to the grid (beside, ranks, checks) and the size of
the matrix the parts predict.

A pair's configurations are those at which both its parts are measured: the tiers of a part that measures the loader
alone, and the GPUs, batch sizes, precisions and parallel modes that part shares with a part measuring the model's
ceiling. The parts `whatif` adds are measured at those configurations, with the settings of the loader's part."""

from __future__ import annotations

import copy
import itertools
import re

from .cells import ConfigError, cell_parts, config_models, parse_cell_id, part_kind, part_models
from .registry import NO_MODEL, tierless

STEP_AXES = ("gpus", "batch_sizes", "precisions", "parallel")  # what a loader's part shares with a ceiling's
WHATIF = "whatif"  # a part's key naming the kind of what-if part it is (beside, ranks, check)


def own_parts(cfg: dict) -> list[dict]:
    """The config's own parts (or its grid), without those `whatif` added."""
    return [p for p in cfg["parts"] if not p.get(WHATIF)]


def alone_parts(cfg: dict) -> dict[str, list[dict]]:
    """Each loader measured alone (model none) -> the config's parts that measure it so, in their order."""
    out: dict[str, list[dict]] = {}
    for part in own_parts(cfg):
        if NO_MODEL in part_models(part):
            for loader in part["loaders"]:
                if not tierless(loader):
                    out.setdefault(loader, []).append(part)
    return out


def ceiling_parts(cfg: dict) -> dict[str, list[dict]]:
    """Each model whose ceiling (a loader reading no file: `synthetic`) is measured -> the parts that measure it."""
    out: dict[str, list[dict]] = {}
    for model in config_models({"parts": own_parts(cfg)}):
        for part in own_parts(cfg):
            if model != NO_MODEL and model in part_models(part) and any(tierless(lo) for lo in part["loaders"]):
                out.setdefault(model, []).append(part)
    return out


def _shared(alone: dict, ceiling: dict) -> dict | None:
    """The step axes a loader's part shares with a ceiling's part (in the loader part's order); None where one is
    empty."""
    shared = {k: [v for v in alone[k] if v in ceiling[k]] for k in STEP_AXES}
    return shared if all(shared.values()) else None


def pair_axes(cfg: dict, loader: str, model: str) -> list[tuple[dict, dict]]:
    """(the loader's part, the axes at which both parts of loader x model are measured) for each pair of the parts
    measuring them that share a configuration."""
    out = []
    for alone in alone_parts(cfg).get(loader, []):
        for ceiling in ceiling_parts(cfg).get(model, []):
            if shared := _shared(alone, ceiling):
                out.append((alone, {"tiers": list(alone["tiers"]), **shared}))
    return out


def matrix_configurations(cfg: dict) -> dict[tuple[str, str], list[tuple]]:
    """Each loader x model pair -> its configurations (tier, gpus, batch size, precision, parallel) with both parts."""
    out = {}
    for loader, model in itertools.product(alone_parts(cfg), ceiling_parts(cfg)):
        configs = []
        for _, axes in pair_axes(cfg, loader, model):
            configs += itertools.product(*(axes[k] for k in ("tiers", *STEP_AXES)))
        out[(loader, model)] = list(dict.fromkeys(configs))
    return out


def matrix_size(cfg: dict) -> dict:
    """The full matrix as cells: loaders x models x their configurations x the checks' repeats."""
    configs = matrix_configurations(cfg)
    repeats = (cfg.get(WHATIF) or {}).get("repeats") or cfg["repeats"]
    n = sum(len(c) for c in configs.values())
    return {
        "loaders": len(alone_parts(cfg)),
        "models": len(ceiling_parts(cfg)),
        "configurations": n,
        "repeats": repeats,
        "cells": n * repeats,
    }


def saving(cfg: dict) -> dict | None:
    """What the what-if saves (None without `whatif`): the full matrix's cells against the grid's, parts (each
    loader alone, each model's ceiling, beside, ranks) and training cells (the checks) counted apart."""
    if cfg.get(WHATIF) is None:
        return None
    kinds = dict.fromkeys(("alone", "ceiling", "beside", "ranks", "training"), 0)
    for cid in cell_parts(cfg):
        d = parse_cell_id(cid)
        kind = part_kind(cid) or ("alone" if d["model"] == NO_MODEL else None)
        kinds[kind or ("ceiling" if tierless(d["loader"]) else "training")] += 1
    matrix = matrix_size(cfg)
    measured = sum(kinds.values())
    return {"matrix": matrix, "measured": kinds, "measured_cells": measured, "saved": matrix["cells"] - measured}


def rank_entries(ranks: dict | list | None) -> list[dict]:
    """`whatif.ranks` as a list of entries: one object, a list of them, or none."""
    if ranks is None:
        return []
    return [ranks] if isinstance(ranks, dict) else list(ranks)


def matrix_gpus(cfg: dict) -> list[int]:
    """The GPU counts the matrix is predicted at: the config's own parts' and the rank parts' counts of ranks."""
    counts = {n for entry in rank_entries((cfg.get(WHATIF) or {}).get("ranks")) for n in entry.get("n") or []}
    return sorted({g for p in own_parts(cfg) for g in p["gpus"]} | counts)


def resolve_whatif(cfg: dict) -> None:
    """cfg["parts"] followed by the parts config key `whatif` adds (beside, ranks, then checks: `trim` leaves the
    checks out first) and `whatif`'s defaults resolved, in place; every bad key or value named."""
    w = cfg.get(WHATIF)
    if w is None or any(p.get(WHATIF) for p in cfg["parts"]):  # none asked, or added already (validated again)
        return
    alone, ceilings = alone_parts(cfg), ceiling_parts(cfg)
    if not alone or not ceilings:
        missing = "a loader alone (a part with models [none])" if not alone else "a model's ceiling (synthetic)"
        raise ConfigError(
            f"config key 'whatif': no part measures {missing}; the what-if predicts each loader x model from the "
            "loader alone and the model's ceiling: add a part that measures them"
        )
    _check_keys(w, alone, ceilings)
    w["reference_model"] = w["reference_model"] or next(m for m in config_models(cfg) if m in ceilings)
    w["repeats"] = w["repeats"] or cfg["repeats"]
    w["ranks"] = rank_entries(w["ranks"])
    for entry in w["ranks"]:
        entry["loaders"] = entry["loaders"] or list(alone)
    taken = {p["name"] for p in cfg["parts"]}
    added = _beside_parts(cfg, w["reference_model"], taken) if w["beside"] else []
    for entry in w["ranks"]:
        added += _rank_parts(cfg, entry, taken)
    for i, (loader, model, *own) in enumerate(w["checks"]):
        checks = [
            _derived(alone_part, axes, taken, f"check-{loader}-{model}", "check", loaders=[loader], models=[model])
            for alone_part, axes in pair_axes(cfg, loader, model)
        ]
        if not checks:
            raise ConfigError(f"config key 'whatif.checks[{i}]': {_no_shared(cfg, loader, model)}")
        for part in checks:
            part.update(
                repeats=own[0] if own else w["repeats"], note=f"{loader} training {model}: checks its prediction"
            )
        added += checks
    cfg["parts"] = [*cfg["parts"], *added]


def _check_keys(w: dict, alone: dict, ceilings: dict) -> None:
    """Every loader `whatif` names is measured alone and every model has its ceiling measured, named where not."""
    loaders = f"(measured alone: {', '.join(alone)})"
    models = f"(with a measured ceiling: {', '.join(ceilings)})"
    for i, (loader, model, *_) in enumerate(w["checks"]):
        if loader not in alone:
            raise ConfigError(
                f"config key 'whatif.checks[{i}]': loader {loader!r} is not measured alone by any part {loaders}; a "
                "check is held against the prediction from its parts: measure it alone (models [none]) or drop the pair"
            )
        if model not in ceilings:
            raise ConfigError(
                f"config key 'whatif.checks[{i}]': model {model!r} has no ceiling (synthetic) in any part {models}; "
                "a check is held against the prediction from its parts: measure its ceiling or drop the pair"
            )
    entries = rank_entries(w["ranks"])
    for j, entry in enumerate(entries):
        key = "whatif.ranks" if isinstance(w["ranks"], dict) else f"whatif.ranks[{j}]"
        for i, loader in enumerate(entry.get("loaders") or []):
            if loader not in alone:
                raise ConfigError(
                    f"config key '{key}.loaders[{i}]': {loader!r} is not a loader of the config {loaders}"
                )
    if w["reference_model"] is not None and w["reference_model"] not in ceilings:
        raise ConfigError(
            f"config key 'whatif.reference_model': {w['reference_model']!r} is not a model of the config {models}"
        )


def _beside_parts(cfg: dict, model: str, taken: set[str]) -> list[dict]:
    """One beside part per loader part: its loaders with `model` (the reference model), where they share a
    configuration with its ceiling; a loader that shares none is named."""
    parts, covered = [], set()
    for loader in alone_parts(cfg):
        for alone_part, axes in pair_axes(cfg, loader, model):
            if any(p["source"] == alone_part["name"] and p["axes"] == axes for p in parts):
                continue
            loaders = [lo for lo in alone_parts(cfg) if alone_part in alone_parts(cfg)[lo]]
            covered.update(loaders)
            parts.append({"source": alone_part["name"], "axes": axes, "loaders": loaders, "part": alone_part})
    if lacking := [lo for lo in alone_parts(cfg) if lo not in covered]:
        raise ConfigError(f"config key 'whatif.reference_model': {_no_shared(cfg, lacking[0], model)}")
    out = []
    for p in parts:
        part = _derived(p["part"], p["axes"], taken, "beside", "beside", loaders=p["loaders"], models=[model])
        part.update(beside=True, note=f"what each loader's consuming costs the step: beside {model}")
        out.append(part)
    return out


def _rank_parts(cfg: dict, ranks: dict, taken: set[str]) -> list[dict]:
    """Per count of ranks, per loader part: its loaders of the entry `ranks` (of `whatif.ranks`) alone at that many
    ranks on 1 GPU, `ranks.repeats` times where it says (else as often as the loader's part)."""
    out = []
    for n in ranks["n"]:
        seen = []
        for loader in ranks["loaders"]:
            for alone_part in alone_parts(cfg)[loader]:
                if alone_part["name"] in seen:
                    continue
                seen.append(alone_part["name"])
                loaders = [lo for lo in ranks["loaders"] if alone_part in alone_parts(cfg)[lo]]
                axes = {"tiers": alone_part["tiers"], "gpus": [1], "parallel": list(ranks["parallel"])}
                part = _derived(alone_part, axes, taken, f"ranks{n}", "ranks", loaders=loaders, models=[NO_MODEL])
                part.update(ranks=n, note=f"each loader alone at {n} ranks on this host")
                if ranks.get("repeats"):
                    part["repeats"] = ranks["repeats"]
                out.append(part)
    return out


def _derived(source: dict, axes: dict, taken: set[str], name: str, kind: str, **over) -> dict:
    """A part of kind `kind` made from the loader part `source`: its settings and repeats, `axes` and `over` on top,
    named `whatif-<name>` (made unique among `taken`, which it joins)."""
    base = "whatif-" + re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    unique = next(n for n in itertools.chain([base], (f"{base}-{i}" for i in itertools.count(2))) if n not in taken)
    taken.add(unique)
    part = copy.deepcopy(source)
    part.update(copy.deepcopy(axes), name=unique, **{WHATIF: kind}, **copy.deepcopy(over))
    return part


def _no_shared(cfg: dict, loader: str, model: str) -> str:
    """Why loader x model has no configuration with both parts: what each part measures."""

    def said(parts: list[dict]) -> str:
        return "; ".join(f"part {p['name']!r}: " + ", ".join(f"{k} {p[k]}" for k in STEP_AXES) for p in parts)

    return (
        f"{loader} alone ({said(alone_parts(cfg)[loader])}) and {model}'s ceiling ({said(ceiling_parts(cfg)[model])}) "
        "share no GPUs, batch size, precision and parallel mode: measure them at one configuration at least"
    )
