"""A study's cost before it runs: its cells per part, the run time each is predicted to take (`costmodel`), the
fixed costs (`fixedcosts`: dataset, staging, tier probes, the tables and figures) and the total, held against the
config's `budget_minutes`. `loaderbench plan` prints it, the workflow builds only the cells it keeps.

A cell measured already (an ok, skipped or failed record whose spec_hash is its current spec's, so Snakemake keeps
it) costs nothing from now on, and is always kept.

Budget: with `budget_minutes` set and the total over it, the plan is refused (`loaderbench plan` exits 2 and the
workflow does not start), or with `trim: true` cells are left out in `leave_out_order` until the prediction fits.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loaderbench.core.cells import cell_parts, cell_spec, parse_cell_id
from loaderbench.core.config import ConfigError
from loaderbench.core.layout import Layout
from loaderbench.core.records import STATUSES, spec_hash
from loaderbench.core.whatifgrid import saving

from .costmodel import KeptProcesses, predict
from .fixedcosts import FixedCost, dataset_size, fixed_costs
from .hostrecords import Host, measured_of, read_records, this_host


@dataclass
class CellPlan:
    cell: str
    part: str
    seconds: float  # from now on: 0 for a measured cell
    basis: str  # measured, record, host records, rules
    detail: str
    measured: bool = False
    left_out: bool = False


@dataclass
class PartPlan:
    name: str
    note: str
    cells: int
    measured: int
    to_run: int  # kept and not measured
    left_out: list[str]
    seconds: float  # the kept cells still to run
    bases: dict[str, int]  # basis -> cells still to run on it


@dataclass
class Plan:
    study: str
    host: Host
    parts: list[PartPlan]
    cells: list[CellPlan]  # in run order
    fixed: list[FixedCost]
    budget_s: float | None
    trim: bool
    full_s: float  # the whole grid, before any trimming
    total_s: float  # what is kept
    calibration: dict = field(default_factory=dict)  # records read, of this host, measured, unreadable
    whatif: dict | None = None  # with config key whatif: the cells it saves (core.whatifgrid.saving)

    @property
    def kept(self) -> list[str]:
        return [c.cell for c in self.cells if not c.left_out]

    @property
    def left_out(self) -> list[str]:
        return [c.cell for c in self.cells if c.left_out]

    @property
    def over_budget(self) -> bool:
        return self.budget_s is not None and self.total_s > self.budget_s

    @property
    def closing(self) -> bool:
        """budget_minutes 0 with trim: no cell is measured any more, the measured ones are tabulated."""
        return self.budget_s == 0 and self.trim

    @property
    def refused(self) -> bool:
        """Over budget: without trim, or with trim when even the cells that may go do not make it fit."""
        return self.over_budget and not self.closing

    def verdict(self) -> str:
        if self.budget_s is None:
            return "budget: none (config key budget_minutes not set)"
        budget = f"budget {duration(self.budget_s)} (budget_minutes: {self.budget_s / 60:g})"
        if self.closing:
            return (
                f"{budget} with trim: closing the study - {len(self.kept)} measured cell(s) tabulated, "
                f"{len(self.left_out)} not measured left out"
            )
        if self.left_out and not self.over_budget:
            return (
                f"{budget}: the whole study ({duration(self.full_s)}) is over it; trimmed (trim: true): "
                f"{len(self.left_out)} cell(s) left out, {duration(self.total_s)} kept, "
                f"{duration(self.budget_s - self.total_s)} to spare"
            )
        if not self.over_budget:
            return f"{budget}: fits, {duration(self.budget_s - self.total_s)} to spare"
        over = f"{budget}: REFUSED, {duration(self.total_s)} is over it by {duration(self.total_s - self.budget_s)}"
        if self.trim:
            return (
                f"{over} even with every cell that may go left out ({len(self.left_out)}; measured cells and the "
                "baseline's stay): raise budget_minutes or make the parts smaller"
            )
        return f"{over}; raise budget_minutes, make the grid smaller, or set trim: true to leave out the last cells"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["host"] = {**asdict(self.host), "kind": self.host.kind}
        d.update(
            kept=self.kept,
            left_out=self.left_out,
            over_budget=self.over_budget,
            refused=self.refused,
            verdict=self.verdict(),
        )
        return d

    def render(self, cells: bool = False) -> str:
        cal = self.calibration
        lines = [
            (
                f"plan of study {self.study}: {len(self.cells)} cells in {len(self.parts)} part(s), for "
                f"{self.host.label()}"
            ),
            f"records: {cal.get('read', 0)} read, {cal.get('same_host', 0)} of this host; "
            f"{cal.get('measured', 0)} of this study's cells measured already (cost nothing from now on)"
            + (f"; {len(cal['unreadable'])} unreadable, ignored" if cal.get("unreadable") else ""),
            "",
        ]
        rows = [("part", "cells", "measured", "to run", "left out", "predicted", "basis", "note")]
        for p in self.parts:
            basis = ", ".join(f"{n} {b}" for b, n in p.bases.items()) or "-"
            rows.append((p.name, p.cells, p.measured, p.to_run, len(p.left_out), duration(p.seconds), basis, p.note))
        lines += _table(rows)
        for p in self.parts:
            if p.left_out:
                lines.append(f"  left out of {p.name}: {', '.join(p.left_out)}")
        lines += whatif_lines(self.whatif)
        lines += ["", "fixed costs:"]
        lines += _table(
            [("", "predicted", "basis", "")]
            + [("  " + f.name, duration(f.seconds), f.basis, f.detail) for f in self.fixed]
        )
        cells_s = sum(p.seconds for p in self.parts)
        fixed_s = sum(f.seconds for f in self.fixed)
        lines += [
            "",
            f"total: {duration(self.total_s)} of run time (cells {duration(cells_s)}, fixed {duration(fixed_s)})",
            self.verdict(),
        ]
        if cells:
            lines += ["", "cells (run order):"]
            rows = [("cell", "part", "predicted", "basis", "")]
            for c in self.cells:
                mark = "left out" if c.left_out else ("measured" if c.measured else c.basis)
                rows.append((c.cell, c.part, duration(c.seconds), mark, c.detail))
            lines += _table(rows)
        return "\n".join(lines)


def whatif_lines(saving: dict | None) -> list[str]:
    """What the what-if saves, in words: the full loaders x models matrix against the parts and checks measured."""
    if saving is None:
        return []
    m, k = saving["matrix"], saving["measured"]
    parts = k["alone"] + k["ceiling"] + k["beside"] + k["ranks"]
    said = ", ".join(f"{k[x]} {x}" for x in ("alone", "ceiling", "beside", "ranks") if k[x])
    saved = saving["saved"]
    verdict = (
        f"saves {saved} cells ({100 * saved / m['cells']:.0f}% of the matrix)"
        if saved >= 0
        else f"measures {-saved} cells more than the matrix itself (the parts grow with loaders + models, the "
        "matrix with loaders x models)"
    )
    matrix = (
        f"what-if (config key whatif): the full matrix, {m['loaders']} loaders x {m['models']} models at the "
        f"configurations both parts of a pair share, is {m['configurations']} configurations x {m['repeats']} "
        f"repeat(s) = {m['cells']} cells"
    )
    measured = (
        f"  measured instead: {saving['measured_cells']} cells = {parts} of parts ({said or 'none'}) + "
        f"{k['training']} training (the checks); {verdict}"
    )
    return ["", matrix, measured]


def duration(seconds: float) -> str:
    s = round(seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def _table(rows) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    right = [all(isinstance(r[i], (int, float)) or _numberish(r[i]) for r in rows[1:]) for i in range(len(widths))]
    out = []
    for r in rows:
        cells = [
            str(v).rjust(w) if right[i] else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def _numberish(v) -> bool:
    return bool(re.fullmatch(r"[0-9.]+( s)?|\d+m \d+s|\d+h \d+m", str(v)))


# ---- the plan


def leave_out_order(cfg: dict, owner: dict[str, dict] | None = None) -> list[str]:
    """The order in which `trim` leaves cells out: the last part first (the parts' order is their priority), and
    within a part its cells in reverse run order. A part runs its repeats outermost, so its repeats > 0 go first
    (the highest first) - one measurement of each of its configurations stays longest - and among the repeat-0
    cells the last of its axes' product first: list each axis's values most important first."""
    owner = owner or cell_parts(cfg)
    order = []
    for part in reversed(cfg["parts"]):
        order += [c for c in reversed(list(owner)) if owner[c] is part]
    return order


def _baseline_cells(cfg: dict, cells) -> set[str]:
    """The baseline configuration's repeat-0 cell(s): every Speed is relative to it, so trimming never drops it."""
    b = cfg["baseline"]
    out = set()
    for cid in cells:
        d = parse_cell_id(cid)
        if (
            d["repeat"] == 0
            and all(d[k] == b[k] for k in ("loader", "tier", "gpus", "batch_size", "precision"))
            and d["parallel"] == b.get("parallel", "dp")
        ):
            out.add(cid)
    return out


def make_plan(cfg: dict, records_dirs, host: Host | None = None, host_dirs=(), results: str | Path = "results") -> Plan:
    """The plan of validated config `cfg` for `host` (default: this machine). `records_dirs`: the results' cell
    records (a record there whose spec_hash is the cell's current spec's means the cell is measured) and, those of
    `host`, calibration; `host_dirs`: more records for calibration only (`--host-from`). `results`: the results
    folder whose staging manifests, check and probes say what is done (paths relative to the project, as
    Snakemake's)."""
    host = host or this_host()
    layout = Layout(str(results))
    records, unreadable = read_records(records_dirs)
    extra, unreadable_extra = read_records(
        d for d in host_dirs if Path(d).resolve() not in {Path(r).resolve() for r in records_dirs}
    )
    mine = [m for r in records + extra if host.matches(r) and (m := measured_of(r))]
    done = {r["cell_id"]: r for r in records if r.get("status") in STATUSES}
    owner = cell_parts(cfg)
    images_bytes = dataset_size(cfg, layout)[1]
    cells = []
    keeper = KeptProcesses(bool((cfg.get("host") or {}).get("reuse_processes")) and host.kind == "gpu")
    for cid, part in owner.items():
        spec = cell_spec(cfg, cid)
        rec = done.get(cid)
        if rec and rec.get("spec_hash") == spec_hash(spec):
            cells.append(CellPlan(cid, part["name"], 0.0, "measured", f"{rec['status']} record kept", measured=True))
            continue
        kept = keeper.next(spec)
        seconds, basis, detail = predict(spec, host, mine, images_bytes, kept)
        if kept is not None:
            detail = f"kept process ({'its shapes ran' if kept else 'new shapes'}); {detail}"
        cells.append(CellPlan(cid, part["name"], seconds, basis, detail))
    fixed = fixed_costs(cfg, host, layout, [*records_dirs, *host_dirs])
    fixed_s = sum(f.seconds for f in fixed)
    full_s = fixed_s + sum(c.seconds for c in cells)
    budget_s = cfg["budget_minutes"] * 60 if cfg.get("budget_minutes") is not None else None
    total_s = full_s
    closing = budget_s == 0 and cfg.get("trim")
    if closing:  # budget 0: measure nothing more, tabulate what is measured (a study stopped at its deadline)
        for c in cells:
            if not c.measured:
                c.left_out = True
        total_s = fixed_s
    elif budget_s is not None and total_s > budget_s and cfg.get("trim"):
        by_id = {c.cell: c for c in cells}
        keep = _baseline_cells(cfg, by_id)
        for cid in leave_out_order(cfg, owner):
            if total_s <= budget_s:
                break
            c = by_id[cid]
            if c.measured or cid in keep:
                continue
            c.left_out = True
            total_s -= c.seconds
    parts = []
    for part in cfg["parts"]:
        mine_cells = [c for c in cells if c.part == part["name"]]
        running = [c for c in mine_cells if not c.left_out and not c.measured]
        parts.append(
            PartPlan(
                part["name"],
                part.get("note", ""),
                len(mine_cells),
                sum(c.measured for c in mine_cells),
                len(running),
                [c.cell for c in mine_cells if c.left_out],
                sum(c.seconds for c in running),
                dict(Counter(c.basis for c in running)),
            )
        )
    calibration = {
        "read": len(records) + len(extra),
        "same_host": len(mine),
        "measured": sum(c.measured for c in cells),
        "unreadable": unreadable + unreadable_extra,
    }
    return Plan(
        cfg["name"],
        host,
        parts,
        cells,
        fixed,
        budget_s,
        bool(cfg.get("trim")),
        full_s,
        total_s,
        calibration,
        saving(cfg),
    )


class PlanRefused(ConfigError):
    """The study is predicted over its budget_minutes (and trimming, if asked, cannot make it fit)."""


def workflow_cells(cfg: dict, results: Layout) -> list[str]:
    """The cells the workflow builds under `budget_minutes`: the plan's kept cells (this machine, the results' own
    records); PlanRefused with the plan's figures when it is over budget."""
    import sys

    plan = make_plan(cfg, [results.cells], results=results.root)
    if plan.refused:
        raise PlanRefused(
            f"the study is over its budget; `loaderbench plan --config ...` prints this too:\n{plan.render()}"
        )
    print(f"loaderbench: {plan.verdict()}", file=sys.stderr)
    return plan.kept
