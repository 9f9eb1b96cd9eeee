"""The cell runner's side of warm starts: start a fork server (`warmstart`) for a run, check that one serves this
code, and ask it for a measuring process (`spawn`), which the runner then holds like a Popen (`WarmProcess`)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loaderbench.core.util import die_with_parent

from ..contract import ENV_SOCKET, MAX_MESSAGE, in_container, key


def start_server(directory: str | os.PathLike | None = None, reuse: bool = False) -> Path | None:
    """Start a warm-start server as a child of this process (ending with it, its socket removed) and export its socket
    to the jobs this process starts. Returns the socket path, or None where warm starts cannot apply (inside a
    container). A server already named in LOADERBENCH_WARM_SOCKET that serves this code, with the same `reuse`, is
    used instead: a driver that runs Snakemake several times (dev/gpu-study.sh, a part at a time) starts one for all
    of them."""
    if in_container():
        return None
    return _named_server(reuse) or _launch(directory, reuse)[1]


@contextlib.contextmanager
def serving(reuse: bool = False):
    """A warm-start server for the cells this process runs one after another itself (`loaderbench sweep`), stopped when they are done, and the
    environment as it was. A server already named in LOADERBENCH_WARM_SOCKET that serves this code with the same
    `reuse` is used as it is, and left running."""
    if in_container() or _named_server(reuse):
        yield
        return
    before = os.environ.get(ENV_SOCKET)
    proc, path = _launch(None, reuse)
    try:
        # the first cell waits for the imports as it would anyway; a cell asks without waiting for the socket
        serves_this_code(path, reuse=reuse)
        yield
    finally:
        proc.terminate()  # SIGTERM: the server exits, and its idle children die with it (PR_SET_PDEATHSIG)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        path.unlink(missing_ok=True)
        if before is None:
            os.environ.pop(ENV_SOCKET, None)
        else:
            os.environ[ENV_SOCKET] = before


def _named_server(reuse: bool) -> Path | None:
    """The server named in LOADERBENCH_WARM_SOCKET, if it answers, serves this code and keeps dp processes as
    `reuse` asks (a driver's, used by every run it starts)."""
    path = os.environ.get(ENV_SOCKET)
    return Path(path) if path and serves_this_code(path, reuse=reuse) else None


def _launch(directory: str | os.PathLike | None, reuse: bool) -> tuple[subprocess.Popen, Path]:
    """Start a server on `<directory>/<this pid>.sock` (default /tmp/loaderbench-warm-<uid>), once the sockets that
    dead servers left there are removed."""
    base = Path(directory) if directory else Path(tempfile.gettempdir()) / f"loaderbench-warm-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    remove_stale_sockets(base)
    path = base / f"{os.getpid()}.sock"  # short: a socket path has at most 107 bytes
    path.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderbench.engine.process.warmstart", str(path), *(["--reuse"] if reuse else [])],
        stdin=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - prctl only
        close_fds=True,
    )
    os.environ[ENV_SOCKET] = str(path)
    return proc, path


def remove_stale_sockets(base: Path, settle_s: float = 10.0) -> list[Path]:
    """Remove the server sockets in `base` that no server listens on any more (a server killed before it could
    remove its own): those refusing a connection whose starter (the pid in the name) is gone or that are older than
    `settle_s` (a server binds and listens in one go). Returns the removed paths."""
    removed = []
    for path in sorted(base.glob("*.sock")):
        try:
            st = path.lstat()
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode) or not _refused(path):
            continue
        starter_gone = path.stem.isdigit() and not _running(int(path.stem))
        if starter_gone or time.time() - st.st_mtime > settle_s:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _refused(path: Path) -> bool:
    """Whether nothing listens on the socket at `path`."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.settimeout(1.0)  # a live server with a full backlog: a connect that waits
    try:
        conn.connect(str(path))
        return False
    except ConnectionRefusedError:
        return True
    except OSError:  # not ours to judge (permissions, another socket type): left alone
        return False
    finally:
        conn.close()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class WarmProcess:
    """A measuring process forked by the server, seen by its runner as the subset of `subprocess.Popen` it uses:
    `pid`, `poll()`, `wait()`, `kill()`, `returncode`."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid, self.returncode = conn, pid, None
        self.server_gone = False  # the server died first (with Snakemake, as a rule), and the process with it

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                data = self.conn.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                data = b""
            # no message and a closed connection: the server died, and its children with it (PR_SET_PDEATHSIG)
            self.server_gone = not data
            self.returncode = json.loads(data)["returncode"] if data else -signal.SIGKILL
            self.conn.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"warm process {self.pid}", timeout)
            select.select([self.conn], [], [], 0.2)
        return self.returncode

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def serves_this_code(
    path: str | os.PathLike, wait_s: float = 180.0, bind_s: float = 10.0, reuse: bool | None = None
) -> bool:
    """Whether a server answers at `path` (after its imports, within `wait_s`) and would fork this code (and, given
    `reuse`, keeps dp processes or not as asked). A server just started may take `bind_s` to open its socket."""
    try:
        conn = _connect(path, bind_s)
    except OSError:
        return False
    try:
        reply = _ask(conn, {"ping": True, "key": key()}, wait_s)
        return bool(reply.get("same_code")) and (reuse is None or bool(reply.get("reuse")) == reuse)
    except (OSError, ValueError):
        return False
    finally:
        conn.close()


def _connect(path: str | os.PathLike, bind_s: float = 10.0) -> socket.socket:
    """A connection to the server at `path`, waiting up to `bind_s` for a server just started to open its socket."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    deadline = time.monotonic() + bind_s
    while True:
        try:
            conn.connect(str(path))
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(0.05)


def spawn(
    args: list[str], env: dict, title: str, wait_s: float = 180.0, reuse_config: str | None = None
) -> tuple[WarmProcess | None, str, int]:
    """Ask the run's server (LOADERBENCH_WARM_SOCKET) for a measuring process running
    `python -m loaderbench.engine.process.entry ARGS` with `env`, this process's cwd and standard streams (`title`: the cell, for its
    command line). `reuse_config` (a dp cell: its configuration, the cell id but for its repeat) lets a server that
    keeps processes hand it to one of its kept processes. Returns (process, how it started, cells that process
    measured before this one) or (None, why not, 0) - the caller then starts the process itself. `wait_s` bounds the
    wait for a server still importing."""
    path = os.environ.get(ENV_SOCKET)
    if not path:
        return None, f"no warm-start server ({ENV_SOCKET} unset)", 0
    if in_container():
        return None, "inside a container (the server runs outside its mounts)", 0
    try:
        conn = _connect(path, bind_s=0.0)  # no wait: a server that is not there costs every cell the wait
    except OSError as e:
        return None, f"warm-start server {path} not usable ({type(e).__name__}: {e})", 0
    try:
        request = {
            "args": args,
            "env": env,
            "cwd": os.getcwd(),
            "runner": os.getpid(),
            "key": key(env),
            "title": title,
            "reusable": reuse_config is not None,
            "config": reuse_config,
        }
        reply = _ask(conn, request, wait_s, fds=(0, 1, 2))
    except (OSError, ValueError) as e:
        conn.close()
        return None, f"warm-start server {path} not usable ({type(e).__name__}: {e})", 0
    if "pid" not in reply:
        conn.close()
        return None, f"warm-start server {path} refused: {reply.get('error') or 'it closed the connection'}", 0
    reused = int(reply.get("reused", 0))
    how = (
        f"kept by the warm-start server ({path}) after {reused} cell(s) of other configurations"
        if reused
        else f"forked by the warm-start server ({path})"
    )
    return WarmProcess(conn, int(reply["pid"])), how, reused


def _ask(conn: socket.socket, message: dict, wait_s: float, fds: tuple[int, ...] = ()) -> dict:
    """Send the server `message` (with `fds`, passed as SCM_RIGHTS) and return its reply, or an error after
    `wait_s`."""
    socket.send_fds(conn, [json.dumps(message).encode()], list(fds))
    ready, _, _ = select.select([conn], [], [], wait_s)
    return json.loads(conn.recv(MAX_MESSAGE) or b"{}") if ready else {"error": f"no reply in {wait_s:g} s"}
