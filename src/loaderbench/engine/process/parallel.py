"""How a cell spreads over its GPUs: `dp` (one process, nn.DataParallel, as the seed ran it) or `ddp` (one process
per GPU started by the cell runner, DistributedDataParallel; NCCL on GPUs, gloo on the CPU).

On a CPU-only host a `ddp` cell with gpus=N runs N gloo processes on the CPU - the same code path as N GPUs, so CI
exercises it; a `dp` cell with gpus > 1 needs GPUs and is skipped there.
"""

from __future__ import annotations

import datetime
import functools
import os
import threading
from contextlib import nullcontext
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Dist:
    """This process's place in the cell: rank, world size and the device it trains on."""

    mode: str  # dp | ddp
    rank: int
    world: int
    local_rank: int
    device: torch.device
    ctrl: object = None  # a gloo group for host-side agreement (stop flags, gathering results); None when world == 1
    backend: str | None = None  # ddp's process group: nccl on GPUs, gloo on the CPU or with every rank on one GPU

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def start(mode: str, processes: int, timeout_s: float, one_device: bool = False) -> Dist:
    """Join the cell's process group (ddp) or describe the single dp process; picks this process's device: its local
    rank's GPU, or with `one_device` (a ranks part) the first for every rank, whose group is then gloo's (NCCL takes
    one rank a GPU; the ranks part runs no collective on the device)."""
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if mode == "dp":
        return Dist("dp", 0, 1, 0, torch.device("cuda:0" if cuda else "cpu"))
    rank, world = env_rank(), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    if world != processes:
        raise RuntimeError(f"ddp cell of {processes} processes started with WORLD_SIZE={world}")
    device = torch.device(f"cuda:{0 if one_device else local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    nccl = cuda and not one_device
    timeout = datetime.timedelta(seconds=max(60.0, timeout_s))
    # the cell runner's rendezvous file (runcell), else torchrun's environment (MASTER_ADDR, MASTER_PORT)
    where = os.environ.get("LOADERBENCH_RENDEZVOUS")
    dist.init_process_group(
        "nccl" if nccl else "gloo",
        init_method=f"file://{where}" if where else "env://",
        rank=rank,
        world_size=world,
        timeout=timeout,
        device_id=device if nccl else None,
    )
    ctrl = dist.new_group(backend="gloo", timeout=timeout) if nccl else dist.group.WORLD
    return Dist("ddp", rank, world, local, device, ctrl, "nccl" if nccl else "gloo")


def stop(d: Dist) -> None:
    import torch.distributed as dist

    if d.mode == "ddp" and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: torch.nn.Module, d: Dist, gpus: int, prescattered: bool) -> torch.nn.Module:
    """DataParallel over `gpus` devices (dp; inputs already split per GPU when `prescattered`) or DDP (ddp)."""
    if d.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda" else None)
    ids = list(range(gpus)) if d.device.type == "cuda" else None
    return DataParallel(model, device_ids=ids, prescattered=prescattered)


class DataParallel(torch.nn.DataParallel):
    """`nn.DataParallel` with its semantics (one process; the batch scattered from the first GPU, or handed over
    pre-scattered; replicas made every step; outputs gathered on the first GPU) and two changes:

    - each replica runs on a thread that lives as long as the model (replica 0 on the calling thread) instead of a
      fresh thread per step. cuDNN keeps its handles and execution plans per thread, so stock DataParallel, which
      starts new threads on every forward, plans (or autotunes) every convolution again on every step (seconds a
      step on 2 GPUs; benchmarks/dp_step.py).
    - `prescattered`: fed one batch per GPU, each already on its GPU (dali-mc's pipelines), there is no scatter. The
      seed overrode DataParallel's forward the same way; labels then arrive concatenated on the first GPU.
    - the replicas' module objects are kept between steps (`ReplicaCache`); every step still broadcasts the
      parameters and buffers from the first GPU and hands the fresh copies to them, as `replicate` does: the same
      losses and weights as torch's `replicate`, in less time a step (benchmarks/dp_replicas.py).
    """

    def __init__(self, module, device_ids=None, prescattered: bool = False):
        super().__init__(module, device_ids=device_ids)
        self.prescattered = prescattered
        self._threads = replica_threads(len(self.device_ids)) if self.device_ids and len(self.device_ids) > 1 else None
        self._replicas = ReplicaCache()

    def replicate(self, module, device_ids):
        return self._replicas.replicate(module, device_ids, not torch.is_grad_enabled())

    def forward(self, *inputs, **kwargs):
        parts = inputs[0] if len(inputs) == 1 else None
        if not (self.prescattered and isinstance(parts, (list, tuple))):
            return super().forward(*inputs, **kwargs)
        if not self.device_ids:
            return self.module(torch.cat(list(parts)))
        replicas = self.replicate(self.module, self.device_ids[: len(parts)])
        outputs = self.parallel_apply(replicas, [(p,) for p in parts], [{} for _ in parts])
        return self.gather(outputs, self.output_device)

    def parallel_apply(self, replicas, inputs, kwargs):
        if self._threads is None or len(replicas) == 1:
            return super().parallel_apply(replicas, inputs, kwargs)
        return self._threads.apply(replicas, inputs, kwargs, self.device_ids[: len(replicas)])


class ReplicaCache:
    """`torch.nn.parallel.replicate` with the replicas' module objects kept between calls.

    `replicate` makes, on every call, a shallow copy of every submodule per device (about 150 for MobileNetV2) and
    sets every parameter and buffer on them through `Module.__setattr__`; only the tensors change from call to
    call. Here the first call (and any call after the module changed: other parameters, train/eval, devices) runs
    `replicate` itself and keeps its replicas; later calls broadcast the tensors exactly as it does
    (`_broadcast_coalesced_reshape`: parameters through the autograd `Broadcast`, buffers that need no gradient
    detached) and put them where `replicate` puts them (a parameter in the replica's `__dict__` and
    `_former_parameters`, a buffer in its `_buffers`)."""

    def __init__(self):
        self.key = None
        self.modules: list[list[torch.nn.Module]] = []  # per device, the replica of each of the module's submodules
        self.slots: list[tuple[int, str, str, int]] = []  # where each broadcast tensor goes (`_slots`)

    def replicate(self, network: torch.nn.Module, devices, detach: bool) -> list:
        from torch.nn.parallel.replicate import _broadcast_coalesced_reshape, replicate

        modules = list(network.modules())
        params = list(network.parameters())
        buffers = list(network.buffers())
        key = (
            tuple(devices),
            detach,
            tuple(m.training for m in modules),
            tuple(map(id, params)),
            tuple(map(id, buffers)),
        )
        if key != self.key:
            roots = replicate(network, devices, detach)
            self.modules = [list(r.modules()) for r in roots]
            self.key = key
            self.slots = self._slots(modules, params, buffers, detach)
            return roots
        rg, not_rg = _split_buffers(buffers, detach)
        copies = {
            "param": _broadcast_coalesced_reshape(params, devices, detach),
            "rg": _broadcast_coalesced_reshape(rg, devices, detach=detach),
            "not_rg": _broadcast_coalesced_reshape(not_rg, devices, detach=True),
        }
        for j, replicas in enumerate(self.modules):
            for i, name, kind, idx in self.slots:
                replica, tensor = replicas[i], copies[kind][j][idx]
                if kind == "param":
                    replica.__dict__[name] = tensor
                    replica._former_parameters[name] = tensor
                else:
                    replica._buffers[name] = tensor
        return [replicas[0] for replicas in self.modules]

    @staticmethod
    def _slots(modules, params, buffers, detach: bool) -> list[tuple[int, str, str, int]]:
        """(submodule index, attribute, which broadcast, index in it) for every parameter and buffer."""
        at_param = {id(p): i for i, p in enumerate(params)}
        rg, not_rg = _split_buffers(buffers, detach)
        at_rg = {id(b): i for i, b in enumerate(rg)}
        at_not_rg = {id(b): i for i, b in enumerate(not_rg)}
        slots = []
        for i, m in enumerate(modules):
            slots += [(i, name, "param", at_param[id(p)]) for name, p in m._parameters.items() if p is not None]
            for name, b in m._buffers.items():
                if b is not None:
                    slots.append(
                        (i, name, "rg", at_rg[id(b)]) if id(b) in at_rg else (i, name, "not_rg", at_not_rg[id(b)])
                    )
        return slots


def _split_buffers(buffers: list, detach: bool) -> tuple[list, list]:
    """The buffers `replicate` broadcasts through autograd (they need a gradient and the call is not detached) and
    the others, each in module order."""
    rg = [b for b in buffers if b.requires_grad and not detach]
    return rg, [b for b in buffers if not (b.requires_grad and not detach)]


@functools.cache
def replica_threads(replicas: int) -> ReplicaThreads:
    """The process's replica threads: one set for every model of the process, so that a process kept for another
    cell (warmstart's reuse) finds cuDNN's plans, which it keeps per thread, already made on them."""
    return ReplicaThreads(replicas)


class ReplicaThreads:
    """One long-lived thread per replica after the first (which runs on the caller's thread)."""

    def __init__(self, replicas: int):
        from concurrent.futures import ThreadPoolExecutor

        self.pools = [ThreadPoolExecutor(1, thread_name_prefix=f"dp-replica{i}") for i in range(1, replicas)]
        self.native_ids = [p.submit(threading.get_native_id).result() for p in self.pools]

    def apply(self, modules, inputs, kwargs, devices) -> list:
        # the thread-local state stock parallel_apply carries over: grad mode, autocast (with its dtype)
        grad = torch.is_grad_enabled()
        autocast = torch.is_autocast_enabled("cuda")
        dtype = torch.get_autocast_dtype("cuda")

        def run(module, args, kw, device):
            device = torch.device(device) if device is not None else None
            dev_ctx = torch.cuda.device(device) if device is not None and device.type == "cuda" else nullcontext()
            stream = (
                torch.cuda.stream(torch.cuda.current_stream(device))
                if device is not None and device.type == "cuda"
                else nullcontext()
            )
            with torch.set_grad_enabled(grad), dev_ctx, stream, torch.autocast("cuda", dtype=dtype, enabled=autocast):
                return module(*args, **kw)

        futures = [
            pool.submit(run, m, a, k, d)
            for pool, m, a, k, d in zip(self.pools, modules[1:], inputs[1:], kwargs[1:], devices[1:], strict=False)
        ]
        first = run(modules[0], inputs[0], kwargs[0], devices[0])
        return [first, *(f.result() for f in futures)]


def launch_threads(model) -> list[int]:
    """Native ids of the threads besides the main one that launch GPU work for `model` (dp's replica threads)."""
    inner = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    threads = getattr(inner, "_threads", None)
    return list(threads.native_ids) if threads else []


def agree_max(d: Dist, value: int) -> int:
    """The largest of every rank's `value` (host-side, over the gloo control group)."""
    if d.world == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=d.ctrl)
    return int(t.item())


def gather(d: Dist, obj) -> list:
    """Every rank's `obj`, in rank order, on every rank."""
    if d.world == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * d.world
    dist.all_gather_object(out, obj, group=d.ctrl)
    return out
