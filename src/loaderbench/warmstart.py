"""Warm starts for the measuring processes: a fork server that has already imported torch, torchvision, OpenCV and
loaderbench's training code, and forks one fresh process per cell (per rank under ddp) on request.

Why: on the H200 host a measuring process spent 4-5 s starting (interpreter, `import torch`) and about 4 more in
its setup importing torchvision (which imports torch._dynamo) - a third of a cell's overhead, paid by every cell.
A forked process starts with those modules in memory; what the cell measures is unchanged: the child is still a
fresh process (its own CUDA context, cuDNN handles, loader workers, random state), the server never touches CUDA
(a fork after CUDA's initialisation would not be usable), and repeats still run in separate processes.

Lifecycle: Snakemake's `onstart` starts one server per run (`start_server`) as its own child, which dies with it
(PR_SET_PDEATHSIG), and names its socket in LOADERBENCH_WARM_SOCKET for the cell jobs. The server's command line
is `python -m loaderbench.warmstart SOCKET`; a child rewrites its own to `python -m loaderbench.train --cell ID ...`,
so that `ps` (and whatever looks for measuring processes) sees it as what it is.
A cell runner asks for a process (`spawn`), gets its pid, and keeps the connection open: when the runner goes
away (killed, even by SIGKILL) the server sees the connection close and kills the child with its loader workers;
when the child exits the server sends its exit status. The child dies with the server too (PR_SET_PDEATHSIG).

A runner falls back to starting `python -m loaderbench.train` itself, and says why in the record
(`process_start`), when there is no server, when it cannot be reached, or when it was started from other code,
another interpreter or another mount namespace (a container job: the runner's mounts would not be the child's)
- `key()` compares them.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .util import die_with_parent, kill_tree

ENV_SOCKET = "LOADERBENCH_WARM_SOCKET"
PRELOAD = ("torch", "torchvision", "torchvision.models", "numpy", "PIL.Image", "cv2", "psutil",
           "loaderbench.train", "loaderbench.window", "loaderbench.summary")  # fmt: skip
# environment that changes what an import does: a server started under other values is not used
_IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD")
_MAX_MESSAGE = 1 << 20
_TITLE_ROOM = 240
_PACKAGE = Path(__file__).resolve().parent


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
    return any(v in os.environ for v in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"))


# ----------------------------------------------------------------------------------------------------- the server


def start_server(directory: str | os.PathLike | None = None) -> Path | None:
    """Start a warm-start server as a child of this process (dying with it) and export its socket to the jobs this
    process starts. Returns the socket path, or None where warm starts cannot apply (inside a container). A server
    already named in LOADERBENCH_WARM_SOCKET that serves this code is used instead: a driver that runs Snakemake
    several times (scripts/gpu-study.sh, a part at a time) starts one for all of them."""
    if in_container():
        return None
    if os.environ.get(ENV_SOCKET) and serves_this_code(os.environ[ENV_SOCKET]):
        return Path(os.environ[ENV_SOCKET])
    base = Path(directory) if directory else Path(tempfile.gettempdir()) / f"loaderbench-warm-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = base / f"{os.getpid()}.sock"  # short: a socket path has at most 107 bytes
    path.unlink(missing_ok=True)
    subprocess.Popen([sys.executable, "-m", "loaderbench.warmstart", str(path)], stdin=subprocess.DEVNULL,
                     preexec_fn=die_with_parent, close_fds=True)  # fmt: skip
    os.environ[ENV_SOCKET] = str(path)
    return path


def serve(path: str | os.PathLike) -> int:
    """The server's loop (the process `start_server` starts): bind, import, then fork a process per request."""
    path = Path(path)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    path.unlink(missing_ok=True)
    listener.bind(str(path))  # bound before the imports: a runner that connects early waits for them
    listener.listen(64)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; Snakemake decides, we die with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.perf_counter()
    own_key = key()  # before the imports: OpenCV's adds to LD_LIBRARY_PATH
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # an optional module (OpenCV): the child imports what it needs itself
            pass
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        print("loaderbench warm start: CUDA was initialised while importing; not serving", file=sys.stderr)
        return 1
    print(f"loaderbench warm start: ready in {time.perf_counter() - started:.1f} s (pid {os.getpid()}, {path})",
          file=sys.stderr, flush=True)  # fmt: skip
    children: dict[int, socket.socket | None] = {}  # child pid -> its runner's connection (None: runner gone)
    waiting: list[socket.socket] = []  # connections whose request has not come yet
    try:
        while os.getppid() == parent:
            busy = [*waiting, *(c for c in children.values() if c is not None)]
            ready, _, _ = select.select([listener, *busy], [], [], 0.2)
            for conn in ready:
                if conn is listener:
                    waiting.append(listener.accept()[0])
                elif conn in waiting:
                    waiting.remove(conn)
                    pid = _handle_request(conn, own_key, listener, busy)
                    if pid:
                        children[pid] = conn
                    else:
                        conn.close()
                else:  # a runner's connection closed (or spoke out of turn): its process must not outlive it
                    pid = next(p for p, c in children.items() if c is conn)
                    kill_tree(pid)
                    conn.close()
                    children[pid] = None
            _reap(children)
    finally:
        for pid in list(children):
            kill_tree(pid)
        path.unlink(missing_ok=True)
    return 0


def _handle_request(conn: socket.socket, own_key: str, listener, others: list) -> int | None:
    try:
        data, fds, _, _ = socket.recv_fds(conn, _MAX_MESSAGE, 3)
        request = json.loads(data)
    except (OSError, ValueError):
        return None
    if request.get("ping"):  # `serves_this_code`
        _send(conn, {"same_code": request.get("key") == own_key})
        return None
    if request.get("key") != own_key or len(fds) != 3:
        _send(conn, {"error": f"server key {own_key} differs from the runner's {request.get('key')} (other code, "
                              "interpreter, environment or mount namespace)"})  # fmt: skip
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            for c in others:
                c.close()
            _child(conn, request, fds)  # never returns
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid


def _child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked process: become the measuring process the runner asked for, then run it."""
    conn.close()
    die_with_parent()  # with the server (itself dying with Snakemake)
    for sig, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL),
                         (signal.SIGCHLD, signal.SIG_DFL)):  # fmt: skip
        signal.signal(sig, handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _watch_runner(int(request["runner"]))
    import random

    random.seed()
    import torch

    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # read by torch at its first parallel region, here by hand
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    sys.argv = ["-m loaderbench.train", *request["args"]]
    _set_cmdline(f"{sys.executable} -m loaderbench.train --cell {request.get('title', '?')} (forked by the "
                 f"warm-start server {os.getppid()})")  # fmt: skip
    from . import train

    try:
        code = train.main(request["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    train._exit_now(code)


def _set_cmdline(text: str) -> None:
    """Rewrite this process's command line as `ps` and /proc/PID/cmdline show it: the kernel reads it from the
    argument area of the process's memory (arg_start..arg_end in /proc/self/stat), overwritten here in place, as
    setproctitle does. Arguments are separated by NULs; what does not fit is cut."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49 of proc(5)
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    data = text.replace(" ", "\0").encode()[: size - 1]
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)


def _watch_runner(pid: int) -> None:
    """A thread that ends this process (and its loader workers) when the runner that asked for it is gone - the
    server does the same when it sees the runner's connection close; this covers a server that is gone too."""
    import threading

    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return

    def watch():
        select.select([fd], [], [])
        kill_tree(os.getpid())

    threading.Thread(target=watch, name="loaderbench-runner-watch", daemon=True).start()


def _reap(children: dict[int, socket.socket | None]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if (conn := children.pop(pid, None)) is not None:
            _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
            conn.close()


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.send(json.dumps(message).encode())
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------------- the runner


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


def serves_this_code(path: str | os.PathLike, wait_s: float = 180.0, bind_s: float = 10.0) -> bool:
    """Whether a server answers at `path` (after its imports, within `wait_s`) and would fork this code. A server
    just started may take `bind_s` to open its socket."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        deadline = time.monotonic() + bind_s
        while True:
            try:
                conn.connect(str(path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
        return bool(_ask(conn, {"ping": True, "key": key()}, wait_s).get("same_code"))
    except (OSError, ValueError):
        return False
    finally:
        conn.close()


def spawn(args: list[str], env: dict, title: str, wait_s: float = 180.0) -> tuple[WarmProcess | None, str]:
    """Ask the run's server (LOADERBENCH_WARM_SOCKET) for a measuring process running
    `python -m loaderbench.train ARGS` with `env`, this process's cwd and standard streams (`title`: the cell, for its
    command line). Returns (process, how it started) or (None, why not) - the caller then starts the process
    itself. `wait_s` bounds the wait for a server still importing."""
    path = os.environ.get(ENV_SOCKET)
    if not path:
        return None, f"no warm-start server ({ENV_SOCKET} unset)"
    if in_container():
        return None, "inside a container (the server runs outside its mounts)"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        request = {"args": args, "env": env, "cwd": os.getcwd(), "runner": os.getpid(), "key": key(env),
                   "title": title}
        reply = _ask(conn, request, wait_s, fds=(0, 1, 2))
    except (OSError, ValueError) as e:
        conn.close()
        return None, f"warm-start server {path} not usable ({type(e).__name__}: {e})"
    if "pid" not in reply:
        conn.close()
        return None, f"warm-start server {path} refused: {reply.get('error') or 'it closed the connection'}"
    return WarmProcess(conn, int(reply["pid"])), f"forked by the warm-start server ({path})"


def _ask(conn: socket.socket, message: dict, wait_s: float, fds: tuple[int, ...] = ()) -> dict:
    """Send the server `message` (with `fds`, passed as SCM_RIGHTS) and return its reply, or an error after
    `wait_s`."""
    socket.send_fds(conn, [json.dumps(message).encode()], list(fds))
    ready, _, _ = select.select([conn], [], [], wait_s)
    return json.loads(conn.recv(_MAX_MESSAGE) or b"{}") if ready else {"error": f"no reply in {wait_s:g} s"}


if __name__ == "__main__":  # python -m loaderbench.warmstart SOCKET
    if len(sys.argv) == 2:
        # once more with room for the children's command lines (`_set_cmdline` writes them over this one's)
        os.execv(sys.executable, [sys.executable, "-m", "loaderbench.warmstart", sys.argv[1], " " * _TITLE_ROOM])
    sys.exit(serve(sys.argv[1]))
