"""What `tune` searches: each loader's knobs and their values on this host, and a setting's name."""

from __future__ import annotations

from pathlib import Path

from loaderbench.core.cells import CAPTURED, STEP_SETTINGS
from loaderbench.core.config import ConfigError
from loaderbench.core.registry import LoaderRecord, loader_record, plugin_record

# The order the DALI loaders' knobs are searched in, by the gains measured on one H200 (MobileNetV2, fp16, batch 256,
# staged files; 2026-12-01 to 03): every JPEG to the hardware decoder bought dali-sc +6-20% (7,139 -> 7,788 samples/s
# in one run); the step on a high-priority stream +12-18% for mixed decoding and +2% for dali-cpu (a plain script);
# more threads or a deeper prefetch nothing measurable while batches were ready (data wait 2-6%); a captured step about
# +10% for dali-cpu and nothing for mixed decoding.
DALI_ORDER = ("dali_hw_decoder_load", "step_stream_priority", "dali_threads", "dali_prefetch", "compile")

# Knobs that deliver batches faster: no help to a step whose batches are ready (data wait under WAIT_SHARE)
FEEDING = ("workers", "prefetch_factor", "dali_threads", "dali_prefetch", "shard_readers")

# Knobs of the training step that need a CUDA device (engine.step.check_step_settings), with why
GPU_KNOBS = {
    "step_stream_priority": "a CUDA stream's priority: this host has no CUDA device",
    "compile": f"a captured step ({CAPTURED}: CUDA graphs): this host has no CUDA device",
}


def knobs(loader: str, spec, cpus: int, cuda: bool = False) -> dict[str, list]:
    """The settings `tune` searches for `loader` in the order it searches them, each with its coarse values (the
    config's own first); the step's knobs (GPU_KNOBS) only on a host with a CUDA device (`cuda`). A built-in loader's
    follow from its registry record (`_searched`); a plugin declares its own as its factory's `loaderbench_knobs`:
    names of these settings that it reads from the context."""
    counts = sorted({max(1, cpus // 4), max(1, cpus // 2), max(1, cpus - 1)})
    values = {
        "workers": counts,
        "prefetch_factor": [2, 4],
        "torchvision_transport": ["float32", "uint8"],
        "dali_threads": counts,
        "dali_prefetch": [2, 3],
        "dali_hw_decoder_load": [0.65, 1.0],
        "shard_readers": [1, 2, 0],
        "step_stream_priority": ["default", "high"],
        "compile": [False, CAPTURED],
    }
    if spec.loader_ref:
        from loaderbench.loaders.plugin import factory

        try:
            names = list(plugin_record(factory(spec.loader_ref)).knobs)
        except ValueError as e:
            raise ConfigError(f"plugin {spec.loader_ref}: {e}") from None
        if bad := [n for n in names if n not in values]:
            raise ConfigError(
                f"plugin {spec.loader_ref}: loaderbench_knobs names {', '.join(bad)}; it may name {', '.join(values)}"
            )
    else:
        names = _searched(loader_record(loader))
    if not names:
        raise ConfigError(
            f"--loader {loader}: it has no settings to tune (tunable: torchvision, opencv, nvjpeg, "
            "dali-cpu, dali-sc, dali-mc, and plugins that declare loaderbench_knobs)"
        )
    out = {name: list(values[name]) for name in names if cuda or name not in GPU_KNOBS}
    for name, vals in out.items():
        start = getattr(spec, name)
        if isinstance(start, int | float | str) and start != "auto" and start not in vals:
            vals.insert(0, start)
    return out


def _searched(record: LoaderRecord) -> list[str]:
    """A built-in loader's knobs from its record: its workers' or its DALI pipeline's (DALI's hardware decoder only for
    one that decodes on the GPU), its own (`knobs`), and the step's: a high-priority stream only beside device work
    of its own (mixed or GPU decoding, GPU augmentation), a captured step for any loader with a backlog."""
    if record.backlog == "workers":
        step = (["step_stream_priority"] if record.device_work else []) + ["compile"]
        return ["workers", "prefetch_factor", *record.knobs, *step]
    if record.backlog == "dali":
        return [n for n in DALI_ORDER if n != "dali_hw_decoder_load" or record.decodes == "gpu"] + list(record.knobs)
    return list(record.knobs)


def not_applicable(loader: str, spec, cpus: int, cuda: bool) -> dict[str, str]:
    """The knobs of `loader` left out of the search on this host, each with why (the step's, without a CUDA device)."""
    searched = knobs(loader, spec, cpus, cuda)
    return {name: GPU_KNOBS[name] for name in knobs(loader, spec, cpus, cuda=True) if name not in searched}


def cuda_host() -> bool:
    """Whether this host has a CUDA device, without starting CUDA in the searching process."""
    return Path("/dev/nvidiactl").exists()


def effective(spec, name: str, cpus: int):
    """The value a cell of `spec` runs knob `name` at on a host of `cpus` usable CPUs: `auto` resolved as the
    measuring process resolves it (one GPU, dp), anything else as it is."""
    from loaderbench.engine import placement
    from loaderbench.engine.step import resolve_workers

    value = getattr(spec, name)
    if value != "auto" or name not in ("workers", "dali_threads"):
        return value
    kind = "cuda" if cuda_host() else "cpu"
    place = placement.plan(frozenset(range(cpus)), spec.gpus) if placement.wanted(spec.placement, kind) else None
    if name == "workers":
        return resolve_workers(spec, place, usable=cpus)
    return max(1, len(place.others) if place else cpus - 1)  # loaders.dali's `auto`, one pipeline


def key(settings: dict) -> str:
    """A setting's folder name: its overrides, or `start` for the config's own."""
    return ",".join(f"{k}={v}" for k, v in sorted(settings.items())) or "start"


def step_settings(settings: dict) -> dict:
    """The settings of the training step among `settings`: the ceiling beside a candidate runs with them."""
    return {k: v for k, v in settings.items() if k in STEP_SETTINGS}


def ceiling_folder(step: dict) -> str:
    """Where the ceiling's records of the step settings `step` go."""
    return "ceiling" + (f",{key(step)}" if step else "")
