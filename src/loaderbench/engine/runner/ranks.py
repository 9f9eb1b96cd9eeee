"""The cell's measuring processes: started (one per ddp rank, warm where the server can) and watched to their end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from loaderbench.core.cells import CellSpec, configuration
from loaderbench.core.util import die_with_parent, kill_tree

from ..contract import ENTRY_MODULE
from ..watchdog import Beat, StallRule, describe, read, request_stacks
from . import warmclient


def spawn_ranks(
    spec: CellSpec, args: list[str], rendezvous: Path, contention, procs: list, process_start: list
) -> None:
    """Start the cell's measuring processes - ddp: one per GPU (rank), as torchrun would; a ranks part's n on its one
    device - forked warm where the server can, else plainly; each appended to `procs` as it starts."""
    ranks = spec.processes
    for rank in range(ranks):
        env = dict(os.environ)
        if spec.parallel == "ddp":
            env.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(ranks),
                LOCAL_WORLD_SIZE=str(ranks),
                LOADERBENCH_RENDEZVOUS=str(rendezvous),
            )
            # the ranks share the CPUs: split torch's intra-op threads among them as torchrun does (without it,
            # ranks on few cores spin against each other)
            env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // ranks)))
        # a dp cell (one process) may be measured by a process the server kept from a cell of another
        # configuration (host.reuse_processes; warmstart): the cell id but for its repeat
        config = configuration(spec.cell_id) if spec.parallel == "dp" else None
        proc, how, reused = warmclient.spawn(
            args, env, spec.cell_id + (f" --rank {rank}" if spec.parallel == "ddp" else ""), reuse_config=config
        )
        if proc is not None and contention is not None:
            contention.roots.append(proc.pid)  # not the runner's child, but measured as its own
        procs.append(
            proc
            or subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, *args],
                preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
                env=env,
            )
        )
        process_start.append(
            {"rank": rank, "pid": procs[-1].pid, "warm": proc is not None, "how": how, "reused": reused}
        )


def wait_all(
    procs: list[subprocess.Popen],
    timeout_s: float,
    beats: list[Path],
    stacks: list[Path],
    stall: StallRule,
    grace_s: float = 60.0,
) -> tuple[int | None, str | None, int | None, dict]:
    """Wait for every rank. The first rank to fail, a stall (no heartbeat for the stall rule's limit) or a hang past
    the timeout stops them all: ranks block in collectives for their peers, so one failure would otherwise hang the
    rest until the timeout. When one rank finishes, the others get `grace_s` to finish too. A stall or a timeout
    first collects every rank's Python stacks. Returns (exit status, reason, rank, stacks) of the first process
    that exited non-zero or by a signal (rank None when none did)."""
    start = time.monotonic()
    deadline = start + timeout_s
    first_done = None
    next_beat_check = start + 0.5
    who = (lambda r: f"rank {r} ") if len(procs) > 1 else (lambda r: "")

    def stop(reason: str, rank: int | None, with_stacks: bool):
        dump = request_stacks([p.pid for p in procs if p.poll() is None], stacks) if with_stacks else {}
        for p in procs:
            kill_and_wait(p)
        return None, reason, rank, dump

    while True:
        codes = [p.poll() for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            rank, code = bad[0]
            for p in procs:
                kill_and_wait(p)
            return code, who(rank) + _exit_reason(code), rank, {}
        if all(c == 0 for c in codes):
            return 0, None, None, {}
        now = time.monotonic()
        if first_done is None and any(c == 0 for c in codes):
            first_done = now
        if now > deadline:
            return stop(f"timed out after {timeout_s:g} s (cell_timeout_s)", None, True)
        if first_done is not None and now - first_done > grace_s:
            return stop(
                f"ranks still running {grace_s:g} s after another finished (a collective without its peers)", None, True
            )
        if now >= next_beat_check:
            next_beat_check = now + 0.5
            for rank, path in enumerate(beats):
                if codes[rank] is not None:
                    continue
                # before its first beat a process is starting up (interpreter, imports) since the runner started it
                beat = read(path) or Beat(0, "startup", start, None)
                idle = stall.stalled(beat, now)
                if idle is not None:
                    return stop(describe(beat, idle, rank if len(procs) > 1 else None), rank, True)
        time.sleep(0.1)


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name
        hint = " (SIGKILL: often the kernel's OOM killer)" if -rc == signal.SIGKILL else ""
        return f"measurement process killed by {name}{hint}"
    return f"measurement process exited with status {rc}"


def kill_and_wait(proc) -> None:
    """Kill a measuring process with its children (loader workers) and reap it."""
    kill_tree(proc.pid)
    proc.wait()
