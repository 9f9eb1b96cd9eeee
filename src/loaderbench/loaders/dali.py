"""NVIDIA DALI pipelines shared by `dali-sc`, `dali-mc` and `dali-cpu`.

The same augmentation as every loader: RandomResizedCrop (area 0.08-1, aspect 3/4-4/3, fused into the decoder as
`decoders.image_random_crop`), resize to the crop size (linear, antialiased), random horizontal mirror, ImageNet
mean/std - all in `crop_mirror_normalize`, which also writes the layout (HWC for channels_last, viewed as NCHW without a
copy) and dtype (float16 for amp) the model takes. Decoding is `mixed` (nvJPEG on the GPU, with the hardware decoder taking
`hw_decoder_load` of the images) or `cpu`. Without a GPU every operator runs on the CPU (`device_id=None`), so the
same pipelines are tested on CPU-only machines.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import torch

from .common import CROP_RATIO, CROP_SCALE, IMAGENET_MEAN, IMAGENET_STD, LoaderContext, forever


def _settings(ctx: LoaderContext) -> tuple[int, float]:
    """(prefetch_queue_depth, hw_decoder_load) from the config's dali.* (DALI's own defaults otherwise)."""
    return int(ctx.options.get("prefetch_queue_depth", 2)), float(ctx.options.get("hw_decoder_load", 0.65))


def _threads(ctx: LoaderContext, pipelines: int) -> int:
    threads = ctx.options.get("threads", "auto")
    if threads == "auto":  # the CPUs off the launch cores when the cell places its threads, else all but one
        cpus = ctx.options.get("cpus")
        return max(1, (len(cpus) if cpus else len(os.sched_getaffinity(0)) - 1) // pipelines)
    return int(threads)


def pipeline(
    ctx: LoaderContext,
    *,
    decode: str,
    batch_size: int,
    device_id: int | None,
    shard_id: int,
    num_shards: int,
    threads: int,
    fixed_crop: tuple[int, int, int, int, bool] | None = None,
    shards: list[tuple[str, str]] | None = None,
):
    """Build one DALI pipeline. decode: 'mixed' (GPU decode) or 'cpu' (CPU decode, GPU augment when there is a GPU).

    fixed_crop=(top, left, height, width, mirror) replaces the random crop and flip (deterministic mode, for the
    parity test that holds every loader against torchvision). shards: (tar, index) pairs to read with
    `readers.webdataset` instead of the staged files.
    """
    from nvidia.dali import pipeline_def

    if shards is None:
        samples, _ = ctx.samples()
        random.Random(ctx.seed).shuffle(samples)  # the first epoch in random order too, not the folders' order
    on_gpu = device_id is not None
    decoder_device = decode if on_gpu else "cpu"
    depth, _ = _settings(ctx)

    @pipeline_def
    def train():
        if shards is None:
            jpegs, labels = _read_files(ctx, samples, shard_id, num_shards)
        else:
            jpegs, labels = _read_shards(ctx, shards, fixed_crop is None, shard_id, num_shards)
        images, mirror = _decode(ctx, jpegs, decoder_device, fixed_crop)
        if on_gpu and decoder_device == "cpu":
            images = images.gpu()
        images = _augment(ctx, images, mirror)
        if on_gpu:
            labels = labels.gpu()
        return images, labels

    pipe = train(
        batch_size=batch_size,
        num_threads=threads,
        device_id=device_id,
        prefetch_queue_depth=depth,
        seed=ctx.seed + shard_id,
    )
    pipe.build()
    return pipe


def _read_files(ctx: LoaderContext, samples: list, shard_id: int, num_shards: int):
    """The staged files of `samples` (path, label) read by `readers.file`, reshuffled every epoch: (jpegs, labels)."""
    from nvidia.dali import fn

    # A global shuffle of the whole file list every epoch, as the other loaders' samplers do, seeded by the
    # cell (one seed for every pipeline, so the shards stay disjoint). Not `random_shuffle`: it draws from a
    # buffer of `initial_fill` (1024) files that it fills before the first batch - 10 s of setup on an HDD.
    return fn.readers.file(
        files=[p for p, _ in samples],
        labels=[y for _, y in samples],
        shuffle_after_epoch=True,
        shuffle_after_epoch_seed=ctx.seed,
        shard_id=shard_id,
        num_shards=num_shards,
        name="Reader",
        # read() instead of mmap on an emulated tier: FUSE serves mmap from the page cache even with direct_io,
        # so after one pass DALI would read RAM while the other loaders pay the device (a real disk pays both)
        dont_use_mmap=bool(ctx.options.get("dont_use_mmap")),
    )


def _read_shards(ctx: LoaderContext, shards: list[tuple[str, str]], shuffle: bool, shard_id: int, num_shards: int):
    """The (tar, index) WebDataset shards read by `readers.webdataset`, each front to back: (jpegs, labels)."""
    from nvidia.dali import fn, types

    # Each shard read front to back; samples are shuffled in a buffer (the shards were shuffled when written).
    # Not shuffle_after_epoch: its global order would read the shards at random offsets, a positioning each.
    return fn.readers.webdataset(
        paths=[str(t) for t, _ in shards],
        index_paths=[str(i) for _, i in shards],
        ext=["jpg", "label"],
        dtypes=[types.UINT8, types.INT32],
        missing_component_behavior="error",
        random_shuffle=shuffle,
        initial_fill=int(ctx.options.get("shuffle_buffer", 1000)),
        shard_id=shard_id,
        num_shards=num_shards,
        name="Reader",
        dont_use_mmap=bool(ctx.options.get("dont_use_mmap")),
    )


def _decode(ctx: LoaderContext, jpegs, decoder_device: str, fixed_crop: tuple[int, int, int, int, bool] | None):
    """(images, mirror): the random crop fused into the decoder and a coin flip, or `fixed_crop`'s crop and flip."""
    from nvidia.dali import fn, types

    _, hw_load = _settings(ctx)
    hw = {"hw_decoder_load": hw_load} if decoder_device == "mixed" else {}
    if fixed_crop is None:
        images = fn.decoders.image_random_crop(
            jpegs,
            device=decoder_device,
            output_type=types.RGB,
            random_area=list(CROP_SCALE),
            random_aspect_ratio=list(CROP_RATIO),
            num_attempts=10,
            **hw,
        )
        return images, fn.random.coin_flip(probability=0.5)
    top, left, h, w, mirror = fixed_crop
    images = fn.decoders.image_slice(
        jpegs,
        device=decoder_device,
        output_type=types.RGB,
        start=[left, top],
        shape=[w, h],
        axis_names="WH",
        **hw,
    )
    return images, int(mirror)


def _augment(ctx: LoaderContext, images, mirror):
    """The decoded crops resized to the crop size, mirrored, normalized and laid out in the model's dtype."""
    from nvidia.dali import fn, types

    images = fn.resize(
        images, resize_x=ctx.crop_size, resize_y=ctx.crop_size, interp_type=types.INTERP_LINEAR, antialias=True
    )
    return fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT16 if ctx.dtype == torch.float16 else types.FLOAT,
        output_layout="HWC" if ctx.channels_last else "CHW",
        mean=[255 * m for m in IMAGENET_MEAN],
        std=[255 * s for s in IMAGENET_STD],
        mirror=mirror,
    )


def build(ctx: LoaderContext, decode: str, per_gpu: bool, shards: bool = False):
    """decode: 'mixed' or 'cpu'. per_gpu: one pipeline per GPU, each on its own shard (multi card), else one pipeline
    for the whole batch (single card). shards: read the tier's WebDataset shards instead of its files.

    dp: per_gpu with several GPUs builds one pipeline per GPU and hands DataParallel one batch per GPU, already on
    its GPU (no scatter); single card builds the global batch on GPU 0 and DataParallel scatters it.
    ddp: per_gpu builds this rank's pipeline on this rank's GPU and shard; single card runs the only pipeline on
    rank 0 (batch for all ranks) and scatters each rank its slice.
    """
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    on_gpu = ctx.device.type == "cuda"
    depth, hw_load = _settings(ctx)
    mixed = on_gpu and decode == "mixed"
    ddp = ctx.world > 1
    pipes_here, shard, n_shards, batch, devices, threads = _layout(ctx, per_gpu, on_gpu)
    ctx.info.update(
        decoder="mixed" if mixed else "cpu",
        file_access="read()" if ctx.options.get("dont_use_mmap") else "mmap",
        augment_device="gpu" if on_gpu else "cpu",
        threads=threads,
        prefetch_queue_depth=depth,
        prefetch_batches=depth,
        hw_decoder_load=hw_load if mixed else None,
        pipelines=pipes_here if not ddp else (ctx.world if per_gpu else 1),
        pipeline_batch=batch,
        sharding=f"shard {shard} of {n_shards}"
        if ddp and per_gpu
        else (
            "scatter from rank 0" if ddp else f"{n_shards} shard(s), one per GPU" if n_shards > 1 else "one pipeline"
        ),
        prescattered=not ddp and pipes_here > 1,
    )
    tars = ctx.shards()[0] if shards else None
    if tars is not None:
        ctx.info.update(shards=len(tars), shuffle_buffer=int(ctx.options.get("shuffle_buffer", 1000)))
    source = None
    if pipes_here:
        pipes = [
            pipeline(
                ctx,
                decode=decode,
                batch_size=batch,
                device_id=dev,
                shard_id=shard + i,
                num_shards=n_shards,
                threads=threads,
                shards=tars,
            )
            for i, dev in enumerate(devices)
        ]
        iterator = DALIGenericIterator(
            pipes, ["images", "labels"], reader_name="Reader", last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
        )
        source = forever(iterator, lambda outs: _convert(ctx, outs))
    if ddp and not per_gpu:
        return scatter_from_main(
            source, ctx.rank, ctx.device, ctx.batch_size, ctx.crop_size, ctx.dtype, ctx.channels_last
        )
    return source


def _layout(ctx: LoaderContext, per_gpu: bool, on_gpu: bool) -> tuple[int, int, int, int, list, int]:
    """(pipelines in this process, first shard id, shards, batch per pipeline, their devices, threads per pipeline)."""
    if ctx.world > 1:  # ddp
        pipes_here = 1 if (per_gpu or ctx.rank == 0) else 0
        shard, n_shards = (ctx.rank, ctx.world) if per_gpu else (0, 1)
        batch = ctx.batch_size if per_gpu else ctx.batch_size * ctx.world
        devices = [ctx.device.index or 0] if on_gpu else [None]
        threads = _threads(ctx, ctx.world if per_gpu else 1)
    else:
        pipes_here = ctx.gpus if (per_gpu and on_gpu) else 1
        shard, n_shards = 0, pipes_here
        batch = ctx.batch_size // pipes_here
        devices = list(range(pipes_here)) if on_gpu else [None]
        threads = _threads(ctx, pipes_here)
    return pipes_here, shard, n_shards, batch, devices, threads


def _to_torch(ctx: LoaderContext, images, device):
    """A DALI batch of images as the model's tensor on `device`."""
    if ctx.channels_last:  # NHWC from DALI viewed as NCHW: channels_last strides, no copy
        images = images.permute(0, 3, 1, 2)
    # float16 comes out of DALI as asked; bfloat16 (no DALI type) is the one case cast here
    return images.to(device, ctx.dtype, non_blocking=True)


def _convert(ctx: LoaderContext, outs):
    """The iterator's outputs as (images, labels); several pipelines give one batch per GPU."""
    if len(outs) > 1:  # one batch per GPU for DataParallel(prescattered=True); labels gathered where the loss is
        parts = [_to_torch(ctx, o["images"], o["images"].device) for o in outs]
        labels = torch.cat([o["labels"].view(-1).long().to(ctx.device) for o in outs])
        return parts, labels
    return _to_torch(ctx, outs[0]["images"], ctx.device), outs[0]["labels"].view(-1).long().to(ctx.device)


def scatter_from_main(
    source: Iterator | None,
    rank: int,
    device: torch.device,
    per_rank: int,
    crop: int,
    dtype: torch.dtype,
    channels_last: bool,
) -> Iterator:
    """dali-sc under ddp: rank 0 produces the batch for all ranks (`source`, None elsewhere) and scatters each rank
    its slice over the default group (NCCL on GPUs)."""
    import torch.distributed as dist

    fmt = torch.channels_last if channels_last else torch.contiguous_format
    while True:
        images = torch.empty((per_rank, 3, crop, crop), dtype=dtype, device=device, memory_format=fmt)
        labels = torch.empty((per_rank,), dtype=torch.int64, device=device)
        img_parts = lab_parts = None
        if rank == 0:
            batch_images, batch_labels = next(source)
            img_parts = [p.contiguous(memory_format=fmt) for p in batch_images.split(per_rank)]
            lab_parts = [p.contiguous() for p in batch_labels.split(per_rank)]
        dist.scatter(images, img_parts, src=0)
        dist.scatter(labels, lab_parts, src=0)
        yield images, labels
