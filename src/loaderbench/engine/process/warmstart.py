"""Warm starts for the measuring processes: a fork server that has imported torch, torchvision, OpenCV and the
training code, and forks one fresh process per cell (per rank under ddp) on request.

The child is still fresh (its own CUDA context, loader workers, random state; the server never touches CUDA) and
renames itself `python -m loaderbench.engine.process.entry --cell ID`; it dies with its runner and with the server.
With `host.reuse_processes` a dp cell's process is kept for the next dp cell of another configuration. A runner that cannot
use the server starts the process itself and says why in `process_start`. Details: docs/internals.md,
"engine.warmstart".
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

from loaderbench.core.util import die_with_parent, kill_tree, stable_hash

from .. import placement
from ..contract import ENTRY_MODULE, MAX_MESSAGE, key

PRELOAD = (
    "torch",
    "torchvision",
    "torchvision.models",
    "numpy",
    "PIL.Image",
    "cv2",
    "psutil",
    ENTRY_MODULE,
    "loaderbench.engine.process.window",
    "loaderbench.engine.process.metrics",
)
_TITLE_ROOM = 240


# ----------------------------------------------------------------------------------------------------- the server


class _Kid:
    """A process the server forked: the runner it measures for (None: that runner is gone, or it waits idle), and
    for a reusable one its control socket, the environment it was made for and the configurations it measured."""

    def __init__(
        self, pid: int, conn: socket.socket, ctl: socket.socket | None, signature: str | None, config: str | None
    ):
        self.pid, self.conn, self.ctl, self.signature = pid, conn, ctl, signature
        self.served = {config}  # one configuration a cell: how many cells it measured, too

    @property
    def idle(self) -> bool:
        return self.conn is None and self.ctl is not None


def serve(path: str | os.PathLike, reuse: bool = False) -> int:
    """The server's loop (the process `start_server` starts): bind, import, then fork a process per request (or,
    with `reuse`, hand a dp cell to an idle process of the same environment). Its socket is removed when it ends:
    stopped, or its parent (Snakemake) gone."""
    path = Path(path)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; Snakemake decides, we die with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    _term_with_parent()  # set after the handler: the parent's death ends this process through `finally` below
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    kids: dict[int, _Kid] = {}
    bound = None  # the inode of the socket this server made: a later server's socket at the same path is not removed
    try:
        path.unlink(missing_ok=True)
        listener.bind(str(path))  # bound before the imports: a runner that connects early waits for them
        bound = path.stat().st_ino
        listener.listen(64)
        started = time.perf_counter()
        own_key = key()  # before the imports: OpenCV's adds to LD_LIBRARY_PATH
        for name in placement.THREAD_ENV:  # torch picks its own thread count, noted for the children (`entry`)
            os.environ.pop(name, None)
        for name in PRELOAD:
            try:
                __import__(name)
            except ImportError:  # an optional module (OpenCV): the child imports what it needs itself
                pass
        if "torch" in sys.modules:
            if sys.modules["torch"].cuda.is_initialized():
                print("loaderbench warm start: CUDA was initialised while importing; not serving", file=sys.stderr)
                return 1
            placement.remember_default_threads()
        print(
            f"loaderbench warm start: ready in {time.perf_counter() - started:.1f} s (pid {os.getpid()}, {path}"
            f"{', reusing dp processes' if reuse else ''})",
            file=sys.stderr,
            flush=True,
        )
        _loop(listener, own_key, reuse, kids, parent)
    finally:
        for pid in list(kids):
            kill_tree(pid)
        listener.close()
        if bound is not None and _inode(path) == bound:
            path.unlink(missing_ok=True)
    return 0


def _loop(listener: socket.socket, own_key: str, reuse: bool, kids: dict[int, _Kid], parent: int) -> None:
    """Accept requests and watch the processes until the parent is gone."""
    waiting: list[socket.socket] = []  # connections whose request has not come yet
    while os.getppid() == parent:
        conns = {k.conn: k for k in kids.values() if k.conn is not None}
        ctls = {k.ctl: k for k in kids.values() if k.ctl is not None}
        ready, _, _ = select.select([listener, *waiting, *conns, *ctls], [], [], 0.2)
        for sock in ready:
            if sock is listener:
                waiting.append(listener.accept()[0])
            elif sock in waiting:
                waiting.remove(sock)
                kid = _handle_request(sock, own_key, reuse, kids, [listener, *waiting])
                if kid is None:
                    sock.close()
            elif sock in ctls:  # a kept process finished its cell (or died: _reap tells its runner)
                if ctls[sock].ctl is sock:  # not let go of earlier in this round
                    _cell_done(ctls[sock], kids)
            elif sock in conns and conns[sock].conn is sock:  # a runner's connection closed (or spoke out of
                kid = conns[sock]  # turn): its process must not outlive it
                kill_tree(kid.pid)
                sock.close()
                kid.conn = None
                if kid.ctl is not None:
                    kid.ctl.close()
                    kid.ctl = None
        _reap(kids)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _term_with_parent() -> None:
    """SIGTERM to this process when its parent dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG): the server then
    cleans up as when it is stopped."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def _handle_request(conn: socket.socket, own_key: str, reuse: bool, kids: dict[int, _Kid], others: list) -> _Kid | None:
    """Serve one request on `conn`: a ping, or a process - a kept one, or one forked now (which closes `others`, the
    server's sockets besides its processes', and those)."""
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
        request = json.loads(data)
    except (OSError, ValueError):
        return None
    if request.get("ping"):  # `serves_this_code`
        _send(conn, {"same_code": request.get("key") == own_key, "reuse": reuse})
        return None
    if request.get("key") != own_key or len(fds) != 3:
        _send(
            conn,
            {
                "error": f"server key {own_key} differs from the runner's {request.get('key')} (other code, "
                "interpreter, environment or mount namespace)"
            },
        )
        for fd in fds:
            os.close(fd)
        return None
    reusable = reuse and bool(request.get("reusable"))
    signature = _signature(request) if reusable else None
    config = request.get("config")
    for kid in kids.values():
        if kid.idle and signature is not None and kid.signature == signature and config not in kid.served:
            try:  # hand the cell to the kept process
                socket.send_fds(kid.ctl, [json.dumps(request).encode()], fds)
            except OSError:
                break
            for fd in fds:
                os.close(fd)
            kid.conn = conn
            kid.served.add(config)
            _send(conn, {"pid": kid.pid, "reused": len(kid.served) - 1})
            return kid
    _kill_idle(kids)  # no process but the new one on the devices
    sys.stdout.flush()
    sys.stderr.flush()
    ctl, child_ctl = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) if reusable else (None, None)
    pid = os.fork()
    if pid == 0:
        try:
            for c in [*others, *(k.conn for k in kids.values() if k.conn), *(k.ctl for k in kids.values() if k.ctl)]:
                c.close()
            if ctl is not None:
                ctl.close()
            _child(conn, request, fds, child_ctl)  # never returns
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    if child_ctl is not None:
        child_ctl.close()
    _send(conn, {"pid": pid, "reused": 0})
    kids[pid] = _Kid(pid, conn, ctl, signature, config)
    return kids[pid]


def _signature(request: dict) -> str:
    """What a kept process must share with a cell to measure it: the environment (CUDA_VISIBLE_DEVICES, threads, the
    import paths) and the working directory it was started with."""
    return stable_hash([request["env"], request["cwd"]])


def _cell_done(kid: _Kid, kids: dict[int, _Kid]) -> None:
    """A kept process says its cell ended ({"done": returncode}) and it waits for the next: tell its runner."""
    try:
        message = json.loads(kid.ctl.recv(4096) or b"{}")
    except (OSError, ValueError):
        message = {}
    if "done" not in message:  # it died: its runner hears from _reap
        kid.ctl.close()
        kid.ctl = None
        return
    if kid.conn is not None:
        _send(kid.conn, {"returncode": message["done"]})
        kid.conn.close()
        kid.conn = None
    _kill_idle(kids, keep=kid.pid)  # at most one process waits


def _kill_idle(kids: dict[int, _Kid], keep: int | None = None) -> None:
    for kid in [k for k in kids.values() if k.idle and k.pid != keep]:
        kid.ctl.close()
        kid.ctl = None
        kill_tree(kid.pid)
        try:
            os.waitpid(kid.pid, 0)  # gone before the next process starts on its devices
        except ChildProcessError:
            pass
        kids.pop(kid.pid, None)


_RUNNER = [None]  # the pid of the runner this process now measures for (a kept process: None between cells)


def _child(conn: socket.socket, request: dict, fds: list[int], ctl: socket.socket | None) -> None:
    """In the forked process: become the measuring process the runner asked for, then run it; a kept one (`ctl`)
    then waits for its next cell there."""
    conn.close()
    die_with_parent()  # with the server (itself dying with Snakemake)
    for sig, handler in (
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGTERM, signal.SIG_DFL),
        (signal.SIGCHLD, signal.SIG_DFL),
    ):
        signal.signal(sig, handler)
    cpus = os.sched_getaffinity(0)
    from . import entry

    entry.forget_inherited_mp_tempdir()
    while True:
        code = _run_cell(request, fds)
        if ctl is None or code != 0 or entry.LAST_STATUS[0] != "ok":
            entry.exit_now(code)  # a failed cell's process is not kept: its state is not known
        _RUNNER[0] = None
        devnull = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):  # the finished job's streams: its log must see their end
            os.dup2(devnull, target)
        os.close(devnull)
        try:
            ctl.send(json.dumps({"done": code}).encode())  # the runner has its cell; what follows is this process's
            entry.reset_for_next_cell(cpus)  # a next cell handed over meanwhile waits for it (its start-up phase)
            data, fds, _, _ = socket.recv_fds(ctl, MAX_MESSAGE, 3)
            entry.CELL_START[0] = time.time()
            request = json.loads(data)
        except (OSError, ValueError):
            data = b""
        except BaseException:  # not fit for another cell: the server reaps it, no runner waits on it
            entry.exit_now(0)
        if not data or len(fds) != 3:
            entry.exit_now(0)  # the server let go of this process


def _run_cell(request: dict, fds: list[int]) -> int:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    _RUNNER[0] = int(request["runner"])
    _watch_runner(_RUNNER[0])
    import random

    random.seed()
    sys.argv = [f"-m {ENTRY_MODULE}", *request["args"]]
    _set_cmdline(
        f"{sys.executable} -m {ENTRY_MODULE} --cell {request.get('title', '?')} (forked by the "
        f"warm-start server {os.getppid()})"
    )
    from . import entry

    try:
        return entry.main(request["args"])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


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
        os.close(fd)
        if _RUNNER[0] == pid:  # gone while this process measured for it (a kept process between cells: not)
            kill_tree(os.getpid())

    threading.Thread(target=watch, name="loaderbench-runner-watch", daemon=True).start()


def _reap(kids: dict[int, _Kid]) -> None:
    while kids:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        kid = kids.pop(pid, None)
        if kid is None:
            continue
        if kid.ctl is not None:
            kid.ctl.close()
        if kid.conn is not None:
            _send(kid.conn, {"returncode": os.waitstatus_to_exitcode(status)})
            kid.conn.close()


def _send(conn: socket.socket, message: dict) -> None:
    try:
        conn.send(json.dumps(message).encode())
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------------- the runner


if __name__ == "__main__":  # python -m loaderbench.engine.process.warmstart SOCKET [--reuse]
    words = [w for w in sys.argv[1:] if w.strip()]
    if len(words) == len(sys.argv) - 1:
        # once more with room for the children's command lines (`_set_cmdline` writes them over this one's)
        os.execv(
            sys.executable, [sys.executable, "-m", "loaderbench.engine.process.warmstart", *words, " " * _TITLE_ROOM]
        )
    sys.exit(serve(words[0], reuse="--reuse" in words[1:]))
