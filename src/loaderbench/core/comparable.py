"""Which cell records may be divided by which: the one definition that the tables (Speed, GPU Efficiency, AU), the
diagnosis and verdict (a fix against its reference), the predictions (parts of one group) and the documents' claims
use.

Two records compare when they were measured on one boot of one machine, by the same loaderbench code, with the same
software stack (library versions, driver, container image), on the same dataset. Not part of it:
- the invocation (`provenance.run_id`): a resume after Ctrl-C, a rerun of one cell or a respread on the same boot
  with the same code measures the same machine with the same code; the noise between processes is in every interval
  already (repeats run in separate processes; a single window is widened by the noise between processes);
- the config: a cell's spec is its identity (a changed spec re-measures the cell), so a cell kept through a grid edit
  measured the same thing; the rest of the grid is not what it measured.
A reboot can put another machine behind the same name (a cloud VM, a container's host name) and resets the state a
rate depends on; a code change can move every rate (the harness once cost a loader 1.58x); a library update changes
what a loader or the step does. Records that say none of this (made before it was recorded) fall back to their run.
"""

from __future__ import annotations

from loaderbench.core.util import stable_hash

SEVERAL = "several: "  # a configuration whose repeats come from several groups: divided by nothing


def group_of(record: dict) -> str:
    """The comparison group of a cell record, as a short readable key: `host boot xxxxxxxx, code xxxxxxxx, stack
    xxxxxxxx, data NAME`; a record without its boot or code: its run (`run <id>`, or the host it names)."""
    prov = record.get("provenance") or {}
    host = prov.get("host") or {}
    code = prov.get("code_sha256") or (prov.get("git") or {}).get("commit")
    if not host.get("boot_id") or not code:
        if prov.get("run_id"):
            return f"run {prov['run_id']}"
        boot = f", boot {host['boot_id']}" if host.get("boot_id") else ""
        return f"unnamed ({host.get('hostname') or 'unknown host'}{boot})"
    stack = stable_hash(
        {"versions": prov.get("versions") or {}, "container": (prov.get("container") or {}).get("image")}
    )
    dataset = (record.get("spec") or {}).get("dataset") or "unknown"
    return (
        f"{host.get('hostname') or 'unknown host'} boot {str(host['boot_id'])[:8]}, code {str(code)[:8]}, "
        f"stack {stack[:8]}, data {dataset}"
    )


def one_group(groups) -> str | None:
    """The one group of several records' `groups` (a configuration's repeats), `SEVERAL ...` where they differ, None
    where none is known."""
    known = sorted({g for g in groups if isinstance(g, str) and g})
    if not known:
        return None
    return known[0] if len(known) == 1 else SEVERAL + "; ".join(known)


def divisible(group, divisor_group) -> str | None:
    """Why a row of `group` may not be divided by one of `divisor_group`, or None where it may."""
    if not isinstance(group, str) or group.startswith(SEVERAL):
        return "its repeats come from several boots, codes or stacks"
    if not isinstance(divisor_group, str) or divisor_group.startswith(SEVERAL):
        return "its divisor's repeats come from several boots, codes or stacks"
    if group != divisor_group:
        return "measured on another boot, code, stack or dataset"
    return None
