"""What the runner (`engine.runner`) and a measuring process (`engine.process`) exchange, and nothing else.

The runner hands each process an `Order` (a file beside the record, named on its command line), the process hands
back an `Outcome` (a file the runner reads once the process has exited). Warm starts add a socket protocol: the
server's address (`ENV_SOCKET`), the largest message on it, and the `key` a forked process shares with its server.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.records import STATUSES
from loaderbench.core.util import atomic_write_json

ENTRY_MODULE = "loaderbench.engine.process.entry"  # the measuring process: `python -m ENTRY_MODULE --order FILE`


@dataclass(frozen=True)
class Order:
    """One measuring process's task: the cell, its staged files, where the outcome goes, the cell's time limit."""

    spec: CellSpec
    manifest: Path
    out: Path
    timeout_s: float

    def write(self, path: Path) -> list[str]:
        """Write the order to `path`; returns the process's arguments that name it."""
        atomic_write_json(
            path,
            {
                "spec": self.spec.to_dict(),
                "manifest": str(self.manifest),
                "out": str(self.out),
                "timeout_s": self.timeout_s,
            },
        )
        return ["--order", str(path)]

    @classmethod
    def read(cls, path: Path) -> Order:
        d = json.loads(Path(path).read_text())
        return cls(CellSpec.from_dict(d["spec"]), Path(d["manifest"]), Path(d["out"]), float(d["timeout_s"]))


@dataclass
class Outcome:
    """What a measuring process reports (or the runner concludes when it could not): the status, its reason, the
    metrics, a traceback, CUDA/cuDNN as the process loaded them, and the times of its steps for the cell's trace
    (`measure.step_times`; not part of the record); a failed process's phase marks so far (`marks`: an ok one's are in
    its metrics)."""

    status: str
    reason: str | None = None
    metrics: dict | None = None
    detail: str | None = None
    runtime: dict | None = None
    steps: dict | None = None
    marks: dict | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"outcome status {self.status!r} is not one of {STATUSES}")

    def write(self, path: Path) -> None:
        atomic_write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> Outcome | None:
        """The outcome written at `path`, or None where the process wrote none."""
        if not Path(path).is_file():
            return None
        return cls(**json.loads(Path(path).read_text()))


# ---------------------------------------------------------------------------------------------- warm-start protocol

ENV_SOCKET = "LOADERBENCH_WARM_SOCKET"
MAX_MESSAGE = 1 << 20  # the most bytes one message on the server's socket holds (requests and replies)
# environment that changes what an import does: a server started under other values is not used
_IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD")
_PACKAGE = Path(__file__).resolve().parents[1]  # the whole loaderbench package


def key(env: dict | None = None) -> str:
    """What a forked process shares with its server: interpreter, loaderbench's code (files, sizes, mtimes), the
    import-relevant environment, user and mount namespace. Equal keys: a warm process runs what an exec would."""
    env = os.environ if env is None else env
    h = hashlib.sha256()
    h.update(f"{sys.executable}\0{sys.version}\0{os.getuid()}\0{_mount_namespace()}\0".encode())
    for name in _IMPORT_ENV:
        h.update(f"{name}={env.get(name, '')}\0".encode())
    for path in sorted(_PACKAGE.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(_PACKAGE)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:20]


def _mount_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/mnt")
    except OSError:
        return "?"


def in_container() -> bool:
    from loaderbench.core.provenance import CONTAINER_ENV, CONTAINER_IMAGE_ENV

    return any(v in os.environ for v in (*CONTAINER_ENV, CONTAINER_IMAGE_ENV))
