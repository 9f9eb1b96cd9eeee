"""The compute ceiling, checked: the `synthetic` cell (the full harness) against a bare training loop over the same
tensors, and what the input's layout and dtype cost the model's step.

The bare loop is the model, loss, backward and optimizer step in a plain `for` loop - no iterator, no per-step
clocks or CUDA events, no bookkeeping - timed between two device synchronisations. Its Samples/s over the synthetic
cell's is the harness overhead. Rounds alternate between the two so machine drift hits both.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from pathlib import Path

from .config import CellSpec
from .staged import Staged


def bare_loop(spec: CellSpec, classes: int, steps: int, warmup: int, device, images=None) -> float:
    """Samples/s of the plain loop over one device-resident batch (the synthetic loader's tensors)."""
    import torch

    from .train import dtypes, training_step

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    _, step = training_step(spec, classes, device)
    _, dtype = dtypes(spec, device.type)
    gen = torch.Generator().manual_seed(spec.seed)
    if images is None:
        fmt = torch.channels_last if spec.channels_last else torch.contiguous_format
        images = torch.randn(spec.batch_size, 3, spec.crop_size, spec.crop_size, generator=gen)
        images = images.to(device, dtype, memory_format=fmt)
    labels = torch.randint(0, classes, (spec.batch_size,), generator=gen).to(device)
    for _ in range(warmup):
        step(images, labels)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(images, labels)
    sync()
    return steps * spec.batch_size / (time.perf_counter() - t0)


def input_variants(spec: CellSpec, classes: int, steps: int, warmup: int, device) -> dict[str, float]:
    """ms per step of the same model fed the same values in different layouts and dtypes (bare loop)."""
    import torch

    x = torch.randn(spec.batch_size, 3, spec.crop_size, spec.crop_size, generator=torch.Generator().manual_seed(0))
    x = x.to(device)
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    variants = {
        "float32 NCHW-contiguous": x.contiguous(),
        "float32 channels_last": x.to(memory_format=torch.channels_last),
        f"{str(amp_dtype)[6:]} channels_last": x.to(amp_dtype, memory_format=torch.channels_last),
        f"{str(amp_dtype)[6:]} NCHW-contiguous": x.to(amp_dtype),
    }
    out = {}
    for name, images in variants.items():
        sps = bare_loop(spec, classes, steps, warmup, device, images=images)
        out[name] = 1000.0 * spec.batch_size / sps
    return out


def ceiling(spec: CellSpec, manifest: Path, rounds: int, variant_steps: int) -> dict:
    """Alternate synthetic cells (train.measure) and bare loops of as many steps; report both and their ratio."""
    import torch

    from .train import measure

    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    man = json.loads(Path(manifest).read_text())
    staged = Staged.from_manifest(man)
    allowed, classes = staged.allowed, len(staged.classes)
    spec = dataclasses.replace(spec, loader="synthetic")
    synthetic, bare, steps, phases = [], [], [], []
    for r in range(rounds):
        m = measure(dataclasses.replace(spec, seed=spec.seed + r), staged.root, allowed)
        synthetic.append(m["samples_per_s"])
        steps.append(m["steps"])
        phases.append({"setup_s": m["setup_s"], "warmup_s": m["warmup_s"], "warmup_steps": m["warmup_steps"]})
        bare.append(bare_loop(spec, classes, m["steps"], m["warmup_steps"], device))
    result = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "channels_last": spec.channels_last,
        "compile": spec.compile,
        "rounds": rounds,
        "window": {"seconds": spec.window_s, "steps": spec.window_steps},
        "steps": steps,
        "synthetic_phases": phases,
        "synthetic_samples_per_s": synthetic,
        "bare_samples_per_s": bare,
        "synthetic_over_bare": statistics.median(s / b for s, b in zip(synthetic, bare)),
    }
    if variant_steps:
        result["input_variants_ms_per_step"] = input_variants(
            dataclasses.replace(spec, precision="amp"), classes, variant_steps, 10, device
        )
    return result
