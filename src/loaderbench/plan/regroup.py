"""What a run must measure again so that its cells compare with those it measured (`core.comparable`).

Speed, GPU Efficiency and AU divide each model's cells by others of that model (its baseline cell, its 1-GPU cells,
its ceiling). Where a run measured some of a model's cells on a boot, code or stack other than the rest were
measured on (after a reboot, a code or library change), the two sets do not compare: every other cell of that model
in the grid is measured again, once, in the same invocation. On the same boot, code and stack (a resume, a rerun of
one cell, a respread) every record compares and nothing is measured again.
"""

from __future__ import annotations

from collections.abc import Iterable

from loaderbench.core.comparable import group_of
from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL


def _model(record: dict) -> str:
    return (record.get("spec") or {}).get("model") or DEFAULT_MODEL


def stale_cells(records: Iterable[dict], run_id: str, grid: Iterable[str]) -> dict[str, str]:
    """The cells of `grid` to measure again, each with why: the ok records of a model that run `run_id` measured,
    whose comparison group is not that of the newest record `run_id` wrote for the model."""
    wanted = set(grid)
    records = [r for r in records if r.get("cell_id") in wanted]
    now: dict[str, dict] = {}
    for r in records:
        if (r.get("provenance") or {}).get("run_id") == run_id and r.get("status") == "ok":
            m = _model(r)
            if m != NO_MODEL and (m not in now or str(r.get("finished_at")) > str(now[m].get("finished_at"))):
                now[m] = r
    current = {m: group_of(r) for m, r in now.items()}
    out = {}
    for r in records:
        m = _model(r)
        if r.get("status") == "ok" and m in current and group_of(r) != current[m]:
            out[r["cell_id"]] = f"measured as {group_of(r)}; this run measures as {current[m]}"
    return out
