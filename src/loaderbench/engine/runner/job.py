"""What one cell job holds: its inputs, its measuring processes' scratch files, and what was measured around them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loaderbench.core.cells import CellSpec

from ..watchdog import StallRule, heartbeat_path, stacks_path
from . import hostlock


@dataclass(frozen=True)
class CellJob:
    """One cell job's inputs, fixed before it starts."""

    spec: CellSpec
    manifest: Path
    out: Path
    timeline: Path | None
    label: str  # "[3/26] " before the progress lines, or ""
    host: hostlock.HostSettings
    timeout_s: float
    stall: StallRule
    trace: Path | None = None


@dataclass(frozen=True)
class Scratch:
    """The measuring processes' files beside the record: the order, the outcome (rank 0's; `<outcome>.rank<N>` for a
    failed rank N), heartbeats, stacks, and ddp's rendezvous."""

    order: Path
    outcome: Path
    beats: list[Path]
    stacks: list[Path]
    rendezvous: Path

    @classmethod
    def beside(cls, out: Path, ranks: int) -> Scratch:
        """The scratch files of a cell whose record is `out`, left over ones removed."""
        partial = out.parent / f".{out.name}.child"
        # ddp's ranks meet through a file (torch's FileStore), not a TCP port picked here and bound later by rank 0:
        # between the two, another process on the host could take the port
        scratch = cls(
            partial.with_name(f"{partial.name}.order"),
            partial,
            [heartbeat_path(partial, r) for r in range(ranks)],
            [stacks_path(partial, r) for r in range(ranks)],
            partial.with_name(f"{partial.name}.rendezvous").resolve(),
        )
        scratch.remove()
        return scratch

    def rank_outcome(self, rank: int) -> Path:
        """Where rank `rank` writes its outcome."""
        return self.outcome if rank == 0 else self.outcome.with_name(f"{self.outcome.name}.rank{rank}")

    def remove(self) -> None:
        """Remove every scratch file there is."""
        ranks = range(len(self.beats))
        for p in (self.order, *map(self.rank_outcome, ranks), *self.beats, *self.stacks, self.rendezvous):
            p.unlink(missing_ok=True)


@dataclass
class Around:
    """What the runner saw and measured around the measuring processes."""

    started: float
    tier: dict
    process_start: list = field(default_factory=list)  # per rank: pid, warm or not, how
    samples: dict | None = None  # telemetry
    contention: dict | None = None  # contention's samples
    stacks: dict = field(default_factory=dict)  # a stalled rank's Python stacks
    spawned: float | None = None
    exited: float | None = None
