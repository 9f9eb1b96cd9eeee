"""The probe `loaderbench watch` injects into every Python process of a watched command (standard library only).

It patches `torch.utils.data.dataloader._BaseDataLoaderIter.__next__` and, only once the module is imported,
`nvidia.dali.plugin.pytorch.DALIGenericIterator.__next__`, through an import hook: a process that never imports them
pays nothing. Per batch it appends one line `b <start> <end> <samples>` (perf_counter seconds) to a buffer, written
to `<LOADERBENCH_WATCH_DIR>/probe-<pid>.log` every FLUSH_BATCHES batches, at exit, and by a daemon thread every
FLUSH_S seconds (a script that hangs after its last batch still has it on disk when the watch stops it; a process
killed outright loses at most FLUSH_S of lines). The file is made at the first batch. Its own bookkeeping per batch
is timed (its file's opening, once, left out) and written as `o <seconds> <batches>`.
"""

from __future__ import annotations

import atexit
import importlib.abc
import json
import os
import sys
import threading
import time

DIR_ENV = "LOADERBENCH_WATCH_DIR"
FLUSH_BATCHES = 64
FLUSH_S = 0.5
DATALOADER = "torch.utils.data.dataloader"
DALI = "nvidia.dali.plugin.pytorch"
AUTOCAST = "torch.amp.autocast_mode"
MODELS = "torchvision.models"


def batch_size(batch, depth: int = 0) -> int | None:
    """The first tensor's dim 0, looked for through tuples, lists and dicts; None without one."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape):
        return int(shape[0])
    if depth > 4:
        return None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else ()
    for item in items:
        n = batch_size(item, depth + 1)
        if n is not None:
            return n
    return None


class Log:
    """This process's lines, buffered and written in bulk."""

    def __init__(self, folder: str):
        self.folder = folder
        self.pid = None
        self.file = None
        self.lines: list[str] = []
        self.last_flush = time.perf_counter()
        self.prev_iter = None
        self.cost_s = 0.0
        self.batches = 0
        self.lock = threading.Lock()

    def open(self) -> None:
        """The file of this process (a forked child gets its own, its own lock and flusher), headed by who wrote it."""
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.file = open(os.path.join(self.folder, f"probe-{self.pid}.log"), "a", buffering=1 << 16)  # noqa: SIM115 - open for the process's life
        env = os.environ
        head = {
            "pid": self.pid,
            "rank": env.get("RANK"),
            "local_rank": env.get("LOCAL_RANK"),
            "world_size": env.get("WORLD_SIZE"),
            "argv": sys.argv[:8],
            "epoch_minus_perf": time.time() - time.perf_counter(),
        }
        self.lines = [f"h {json.dumps(head)}\n"]
        self.cost_s, self.batches = 0.0, 0
        threading.Thread(target=self.flusher, args=(self.pid,), name="loaderbench-watch-probe", daemon=True).start()

    def flusher(self, pid: int) -> None:
        """Every FLUSH_S: write what waits since the last write, if that is FLUSH_S old."""
        while self.pid == pid:
            time.sleep(FLUSH_S)
            if self.lines and time.perf_counter() - self.last_flush >= FLUSH_S:
                self.flush()

    def iterator(self, it, kind: str) -> None:
        """A line for each new iterator: its kind, workers and dataset, what a grid config would take from it."""
        dataset = getattr(it, "_dataset", None)
        info = {
            "kind": kind,
            "workers": getattr(it, "_num_workers", None),
            "dataset": type(dataset).__name__ if dataset is not None else None,
            "root": str(getattr(dataset, "root", "")) or None,
            "pin_memory": getattr(it, "_pin_memory", None),
            # which iterable, one over all its epochs' iterators: a DataLoader's Dataset, a DALI iterator's first
            # pipeline, else the iterator itself
            "object": id(_source(it, dataset)),
        }
        self.lines.append(f"i {json.dumps(info)}\n")

    def batch(self, it, kind: str, t0: float, t1: float, batch) -> None:
        """One batch's line; its cost counted from `t1`, the delivery (the file's opening, once, left out)."""
        if self.pid != os.getpid():
            self.open()
            t1_cost = time.perf_counter()
        else:
            t1_cost = t1
        with self.lock:
            if it is not self.prev_iter:
                self.prev_iter = it
                self.iterator(it, kind)
            self.lines.append(f"b {t0:.6f} {t1:.6f} {batch_size(batch) or 0}\n")
            self.batches += 1
            self.cost_s += time.perf_counter() - t1_cost
        if len(self.lines) >= FLUSH_BATCHES:
            self.flush()

    def note(self, line: str) -> None:
        if self.pid != os.getpid():
            self.open()
        with self.lock:
            self.lines.append(line)

    def flush(self) -> None:
        """Write the lines so far and the probe's cost so far (the write's own time counted in it)."""
        if self.file is None or self.pid != os.getpid():
            return
        t = time.perf_counter()
        with self.lock:
            lines, self.lines = self.lines, []
            lines.append(f"o {self.cost_s:.6f} {self.batches}\n")
            self.file.write("".join(lines))
            self.file.flush()
            self.last_flush = end = time.perf_counter()
            self.cost_s += end - t


def _source(it, dataset):
    """What stays the same over the epochs of one iterable: its Dataset, else its first DALI pipeline, else itself."""
    if dataset is not None:
        return dataset
    pipes = getattr(it, "_pipes", None)
    return pipes[0] if isinstance(pipes, (list, tuple)) and pipes else it


def patch_next(cls, kind: str, log: Log) -> None:
    """`cls.__next__` timed: the wait for the batch, its end, its samples."""
    original = cls.__next__
    if getattr(original, "_loaderbench_watch", False):
        return
    clock = time.perf_counter

    def __next__(self):
        t0 = clock()
        batch = original(self)
        log.batch(self, kind, t0, clock(), batch)
        return batch

    __next__._loaderbench_watch = True
    cls.__next__ = __next__


def patch_autocast(module, log: Log) -> None:
    """Say once that an enabled autocast was entered (the script trains in mixed precision)."""
    cls = module.autocast
    original = cls.__enter__
    seen = []

    def __enter__(self):
        if not seen and getattr(self, "_enabled", False):
            seen.append(1)
            log.note(f"a {getattr(self, 'fast_dtype', '')}\n")
        return original(self)

    cls.__enter__ = __enter__


def patch_models(module, log: Log) -> None:
    """Wrap torchvision's classification builders (`resnet50`, ...) so that the first one called is named once: the
    model a grid would train. Names bound by `from torchvision.models import x` after the import get the wrapper."""
    try:
        names = module.list_models(module=module)
    except (AttributeError, TypeError):  # a torchvision before its model registry
        return
    seen = []

    def wrap(name, build):
        def builder(*args, **kwargs):
            if not seen:
                seen.append(name)
                log.note(f"m {name}\n")
            return build(*args, **kwargs)

        builder.__name__, builder.__doc__, builder.__wrapped__ = build.__name__, build.__doc__, build
        return builder

    for name in names:
        build = getattr(module, name, None)
        if callable(build):
            setattr(module, name, wrap(name, build))


class _Loader(importlib.abc.Loader):
    """Runs a module's own loader, then patches the module."""

    def __init__(self, inner, after):
        self.inner, self.after = inner, after

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.after(module)


class Hook(importlib.abc.MetaPathFinder):
    """Patches the modules of `patches` (name -> function of the module) as they are imported."""

    def __init__(self, patches: dict):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader, self.patches.pop(name))
                return spec
            if spec is not None:
                return None
        return None


def install() -> None:
    """Install the hooks where the watch asked for them (its folder in the environment); else do nothing."""
    folder = os.environ.get(DIR_ENV)
    if not folder or not os.path.isdir(folder):
        return
    log = Log(folder)
    patches = {
        DATALOADER: lambda m: patch_next(m._BaseDataLoaderIter, "torch", log),
        DALI: lambda m: patch_next(m.DALIGenericIterator, "dali", log),
        AUTOCAST: lambda m: patch_autocast(m, log),
        MODELS: lambda m: patch_models(m, log),
    }
    for name in list(patches):
        if name in sys.modules:
            patches.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, Hook(patches))
    atexit.register(log.flush)
