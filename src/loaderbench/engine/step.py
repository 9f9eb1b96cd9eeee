"""The cell's training step and what its loader is built from: the device, cuDNN's settings, the dtypes, the
model with its loss and optimizer, the cold step's batch and the LoaderContext. Shared by the cell (`measure`), the
ceiling's and the crosscheck's bare loops, so that all three run the same step on the same loader."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from loaderbench.core.cells import CAPTURED, CellSpec, ConfigError

from . import placement


def available_devices() -> tuple[str, int]:
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.device_count()
    return "cpu", 1


def resolve_workers(
    spec: CellSpec, place: placement.Placement | None = None, ranks: int = 1, usable: int | None = None
) -> int:
    """`auto`: the CPUs left once the launching threads have theirs (every usable CPU but one when unpinned), shared
    among a ddp cell's `ranks`. `usable`: the usable CPUs (default this process's; `loaderbench plan` gives a host's)."""
    if spec.workers != "auto":
        return int(spec.workers)
    free = len(place.others) if place else max(1, (len(os.sched_getaffinity(0)) if usable is None else usable) - 1)
    return max(1, free // ranks) if free else 0


TORCH_BENCHMARK_LIMIT = 10  # torch.backends.cudnn.benchmark_limit's default


def configure_cudnn(spec: CellSpec) -> None:
    """cuDNN as the cell asks: autotuning on or off, and how many algorithms it tries (the cell and the bare loop)."""
    import torch

    torch.backends.cudnn.benchmark = spec.cudnn_benchmark
    # set every time (None: torch's default), so a process kept from another cell does not keep that cell's limit
    torch.backends.cudnn.benchmark_limit = (
        TORCH_BENCHMARK_LIMIT if spec.cudnn_benchmark_limit is None else spec.cudnn_benchmark_limit
    )


def dtypes(spec: CellSpec, kind: str):
    """(autocast dtype, dtype the loaders deliver) for this cell on device type `kind`."""
    import torch

    amp_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(
        spec.amp_dtype, torch.float16 if kind == "cuda" else torch.bfloat16
    )
    return amp_dtype, amp_dtype if spec.precision == "amp" and spec.input_dtype == "auto" else torch.float32


def training_step(spec: CellSpec, classes: int, device, wrap=None):
    """The cell's model (`spec.model`, built by `models.build_model`; channels_last, wrapped by `wrap`, compiled if
    asked), loss, SGD and AMP (autocast + GradScaler for float16). Returns (model, step); step(images, labels) runs one
    training step and returns its loss. For `none` (the loader alone) the model is None and the step does nothing but
    return a zero on the device: no optimizer, no wrap, so a window times the loader's delivery alone.

    A model that cannot be built, or whose first step fails (its output not (N, classes) logits, say), raises
    ModelError naming the model: the cell's failed record carries it as its reason."""
    import torch

    from loaderbench.models import ModelError, build_model, model_label

    num_classes = max(classes, 2)
    model = build_model(spec, spec.model_ref, num_classes, spec.crop_size)
    if model is None:
        return None, _no_step(device)
    check_step_settings(spec, device.type)
    who = model_label(spec.model, spec.model_ref)
    kind = device.type
    amp = spec.precision == "amp"
    amp_dtype, _ = dtypes(spec, kind)
    model = model.to(device)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if wrap is not None:
        model = wrap(model)
    model.train()
    criterion = torch.nn.CrossEntropyLoss()
    # fused: one kernel set for the update, and GradScaler passes it the overflow flag on the device instead of
    # reading it on the host mid-step (GradScaler.step's .item(): a synchronisation after which the GPU idles until
    # the host launches again: config/README.md, `optimizer.fused`)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=spec.lr,
        momentum=spec.momentum,
        weight_decay=spec.weight_decay,
        fused=spec.optimizer_fused or None,
    )
    captured = spec.compile == CAPTURED
    skips_before = _cudagraph_skips() if captured else 0
    if spec.compile:  # compiled by the first step (the cell's warm-up), outside the window
        model = torch.compile(model, mode=CAPTURED if captured else None)
    scaler = torch.amp.GradScaler(kind, enabled=amp and amp_dtype == torch.float16)

    def train(images, labels, check: bool = False):
        if captured:  # a new iteration: the graphs' outputs of the last step are no longer read
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(kind, dtype=amp_dtype, enabled=amp):
            out = model(images)
            if check:
                _check_output(out, labels.shape[0], num_classes, who)
            loss = criterion(out, labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    checked = [False]
    train, applied = _on_step_stream(spec, device, train, captured)

    def step(images, labels):
        if checked[0]:
            return train(images, labels)
        try:  # the first step: a model that breaks the contract fails naming itself
            loss = train(images, labels, check=True)
        except ModelError:
            raise
        except Exception as e:
            raise ModelError(f"{who} failed its first step: {type(e).__name__}: {e}") from e
        checked[0] = True
        if captured:  # compiled by now: torch.compile runs a graph it cannot capture as it is, and counts it
            applied["captured_step"] = _cudagraph_skips() == skips_before
        return loss

    step.optimizer = optimizer  # for the record (fused or not)
    step.applied = applied  # for the record: the step settings it runs with
    return model, step


def _on_step_stream(spec: CellSpec, device, train, captured: bool):
    """(`train` on the stream `spec.step_stream_priority` asks for, the step settings applied, for the record)."""
    applied = {"step_stream_priority": "default", "step_stream_cuda_priority": None, "captured_step": captured}
    if spec.step_stream_priority == "high":
        gpu_ids = list(range(device.index, device.index + spec.gpus)) if spec.parallel == "dp" else [device.index]
        train, priority = on_priority_streams(train, gpu_ids)
        applied.update(step_stream_priority="high", step_stream_cuda_priority=priority)
    return train, applied


def _cudagraph_skips() -> int:
    """The graphs torch.compile has run uncaptured in this process so far (a mutated input, a CPU tensor, ...)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


def check_step_settings(spec: CellSpec, kind: str) -> None:
    """Refuse the step settings a cell on device type `kind` cannot run, naming the config key: a high-priority stream
    and a captured step need a CUDA device; a captured step is not DataParallel over several GPUs (the config's
    validation refuses that grid already; a spec made otherwise, by a sweep say, is refused here)."""
    if kind != "cuda":
        if spec.step_stream_priority == "high":
            raise ConfigError(
                "config key 'step_stream_priority': high runs the step on a CUDA stream of the highest priority; "
                f"this cell runs on the {kind.upper()} (no CUDA device): use step_stream_priority default here"
            )
        if spec.compile == CAPTURED:
            raise ConfigError(
                f"config key 'compile': {CAPTURED} captures the step as CUDA graphs; this cell runs on the "
                f"{kind.upper()} (no CUDA device): use compile true or false here"
            )
    if spec.compile == CAPTURED and spec.parallel == "dp" and spec.gpus > 1:
        raise ConfigError(
            f"config key 'compile': {CAPTURED} captures the step on one device, but this cell runs DataParallel over "
            f"{spec.gpus} GPUs (replicas made every step, and dali-mc's batches come already scattered); use parallel "
            "ddp or one GPU for the captured step"
        )


def on_priority_streams(train, gpu_ids: list[int]):
    """(`train` run on a stream of the highest priority on each of `gpu_ids`, that priority). The step waits for what
    the loader queued on each device's current stream (its batch); the batch's memory is kept from reuse until the
    step has read it; what is queued on the current streams after the step (the window's end event, the next batch's
    copy) waits for the step's end, so that the cell's clocks and the loss stay those of the step."""
    import torch

    priority = min(torch.cuda.Stream.priority_range())  # CUDA: the lower the number, the higher the priority
    streams = {i: torch.cuda.Stream(device=i, priority=priority) for i in gpu_ids}

    def on_streams(images, labels, check: bool = False):
        current = {i: torch.cuda.current_stream(i) for i in streams}
        for i, s in streams.items():
            s.wait_stream(current[i])
        parts = images if isinstance(images, list | tuple) else [images]
        for t in [*parts, labels]:
            if t.is_cuda and t.device.index in streams:
                t.record_stream(streams[t.device.index])
        with contextlib.ExitStack() as on:
            for i in reversed(gpu_ids):  # the first GPU's entered last: it stays the current device
                on.enter_context(torch.cuda.stream(streams[i]))
            loss = train(images, labels, check)
        for i, s in streams.items():
            current[i].wait_stream(s)
        loss.record_stream(current[gpu_ids[0]])
        return loss

    return on_streams, streams[gpu_ids[0]].priority


def _check_output(out, n: int, num_classes: int, who: str) -> None:
    """Raise ModelError unless `out` is the (n, num_classes) logits a classifier's loss takes."""
    import torch

    from loaderbench.models import ModelError

    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (n, num_classes):
        what = f"a tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(f"{who} returned {what}; expected logits of shape ({n}, {num_classes})")


def _no_step(device):
    """The step of `none`: the batch is on the device already (the loader put it there); nothing runs on it."""
    import torch

    zero = torch.zeros((), device=device)

    def step(images, labels):
        return zero

    step.optimizer = None
    step.applied = {"step_stream_priority": "default", "step_stream_cuda_priority": None, "captured_step": False}
    return step


def cold_batch(ctx, classes: int):
    """A batch as the loader built from `ctx` delivers it - shape, dtype, memory format, devices - of random numbers,
    for the cold step: the global batch on the first GPU (dp), a rank's batch on its GPU (ddp), or, from a loader that
    hands DataParallel its batch pre-scattered (dali-mc under dp), one part per GPU on that GPU with the labels
    together on the first. Labels are int64 class indices."""
    import torch

    gen = torch.Generator().manual_seed(ctx.seed)  # not the global generator the model and the augmentations draw from

    def images(n, device):
        x = torch.randn(n, 3, ctx.crop_size, ctx.crop_size, generator=gen)
        return x.to(device, ctx.dtype, memory_format=ctx.memory_format)

    parts = ctx.gpus if ctx.info.get("prescattered") else 1
    n = ctx.batch_size // parts
    labels = torch.randint(0, max(classes, 1), (n * parts,), generator=gen).to(ctx.device)
    if parts > 1:
        return [images(n, torch.device(ctx.device.type, i)) for i in range(parts)], labels
    return images(n, ctx.device), labels


def loader_context(
    spec: CellSpec,
    data_root: Path,
    allowed: frozenset[str],
    device,
    place: placement.Placement | None,
    rank: int = 0,
    world: int = 1,
):
    """The LoaderContext a cell builds its loader from (the cell and the crosscheck's bare loop alike). dp: one process
    takes the global batch (DataParallel splits it; a ranks part's: its ranks' batches); ddp (`world` > 1): each rank
    loads its own share."""
    from loaderbench.loaders.common import LoaderContext

    _, input_dtype = dtypes(spec, device.type)
    return LoaderContext(
        data_root=data_root,
        allowed=allowed,
        batch_size=spec.batch_size if world > 1 else spec.batch_size * spec.gpus * spec.ranks,
        crop_size=spec.crop_size,
        workers=resolve_workers(spec, place, ranks=world),
        prefetch_factor=spec.prefetch_factor,
        seed=spec.seed,
        device=device,
        channels_last=spec.channels_last,
        gpus=spec.gpus,
        dtype=input_dtype,
        rank=rank,
        world=world,
        options={
            "threads": spec.dali_threads,
            "prefetch_queue_depth": spec.dali_prefetch,
            "hw_decoder_load": spec.dali_hw_decoder_load,
            "dont_use_mmap": spec.tier_kind == "emulated",
            "cpus": place.others if place else None,
            "transport": spec.torchvision_transport,
            "shard_readers": spec.shard_readers,
            "shard_read_mb": spec.shard_read_mb,
            "shuffle_buffer": spec.shuffle_buffer,
        },
    )
