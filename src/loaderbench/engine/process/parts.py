"""The what-if's part cells inside the measuring process (`core.cells.part_kind`): a `beside` part's step - the
cell's model on one device-resident synthetic batch, the loader's batch fetched as in training and discarded - and a
`ranks` part's loaders: under dp, n GPUs' worth of batches made by one process for its one device (under ddp each
of the n processes builds its own loader as a rank of an n-GPU cell does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from loaderbench.core.cells import CellSpec, ConfigError
from loaderbench.core.registry import LoaderRecord, loader_record, plugin_record


def loader_facts(spec: CellSpec) -> LoaderRecord:
    """The facts of the cell's loader: a plugin's as its factory declares them, a built-in's registry record."""
    if spec.loader_ref:
        from loaderbench.loaders.plugin import factory

        return plugin_record(factory(spec.loader_ref))
    return loader_record(spec.loader)


def beside_step(step, ctx):
    """`step` run on one synthetic batch made once on the device as the `synthetic` loader makes it (the cell's batch
    size, crop, dtype, layout and device), whatever batch it is handed: the batch the loader delivered was fetched as
    training fetches it (its transport, pinning and copy queued) and is dropped. The first batch handed over is held
    to the synthetic one's shape and dtype, so that the step trains on what training would."""
    from loaderbench.loaders import synthetic

    images, labels = next(synthetic.build(replace(ctx, info={})))  # its own info: the loader's stays the record's
    checked = [False]

    def stepped(delivered_images, delivered_labels):
        if not checked[0]:
            _check_form(delivered_images, images)
            checked[0] = True
        return step(images, labels)

    stepped.optimizer = step.optimizer  # for the record, as the step it stands for
    stepped.applied = step.applied
    return stepped


def _check_form(delivered, synthetic) -> None:
    """ConfigError unless the loader's images have the synthetic batch's shape and dtype."""
    got = [(tuple(t.shape), t.dtype) for t in (delivered if isinstance(delivered, list | tuple) else [delivered])]
    want = (tuple(synthetic.shape), synthetic.dtype)
    if got != [want]:
        raise ConfigError(
            f"beside: the loader delivered images of {got}, the synthetic batch the step trains on is {want}; a beside "
            "part needs the loader's batch in one piece on the device (one GPU, no pre-scattered parts)"
        )


def check_ranks(spec: CellSpec, facts: LoaderRecord) -> None:
    """A ranks part under ddp runs each rank's own loader: refused (naming the loader) for one whose pipeline runs on
    rank 0 for every rank, which scatters over the device's collectives."""
    if spec.ranks > 1 and spec.parallel == "ddp" and facts.ddp == "rank0":
        raise ConfigError(
            f"loader {spec.loader!r} runs one pipeline on rank 0 for every rank under ddp (its ddp: rank0), which "
            f"needs a GPU per rank; measure its ranks part under dp, where one process makes the {spec.ranks} batches"
        )


def dp_rank_batches(spec: CellSpec, facts: LoaderRecord, build: Callable, context: Callable) -> tuple[object, Iterator]:
    """(the context the record reads, the batches) of a ranks part under dp: one process making `spec.ranks` GPUs'
    worth of batches a step for its one device - `spec.ranks` pipelines, each a rank's share (`context(rank, world)`),
    where the loader builds one per GPU under dp (`dp: per_gpu`), their batches handed over together as a
    pre-scattered batch is; else one pipeline of the whole batch (`context(0, 1)`: batch x ranks)."""
    if facts.dp != "per_gpu":
        ctx = context(0, 1)
        ctx.info.update(pipelines=1)
        return ctx, build(ctx)
    ctxs = [context(rank, spec.ranks) for rank in range(spec.ranks)]
    pipelines = [build(ctx) for ctx in ctxs]
    ctxs[0].info.update(pipelines=spec.ranks)
    return ctxs[0], _together(pipelines)


def _together(pipelines: list[Iterator]) -> Iterator:
    """A batch from each pipeline a step: their images as parts, their labels in one tensor."""
    import torch

    while True:
        batches = [next(p) for p in pipelines]
        yield [b[0] for b in batches], torch.cat([b[1] for b in batches])
