"""The compute ceiling, checked: the `synthetic` cell (a real cell job: runner, telemetry, heartbeat, placement) against
a bare training loop of the same step in a fresh process with the same thread placement, and what the input's layout
and dtype cost the model's step.

The bare loop is the model, loss, backward and optimizer step in a plain `for` loop - no iterator, no per-step clocks
or CUDA events, no bookkeeping - timed between two device synchronisations, its launching thread on the cell's first
launch core and every other thread on the rest. Its Samples/s over the synthetic cell's is the harness overhead (the
cell's AU denominators stand or fall with it). Rounds alternate between the two so machine drift hits both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.data.manifest import Staged
from loaderbench.engine import placement


def bare_loop(spec: CellSpec, classes: int, steps: int, warmup: int, device, images=None) -> float:
    """Samples/s of the plain loop over one device-resident batch (the synthetic loader's tensors)."""
    import torch

    from loaderbench.engine.step import configure_cudnn, dtypes, training_step

    if device.type == "cuda":
        configure_cudnn(spec)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    _, step = training_step(spec, classes, device)
    _, dtype = dtypes(spec, device.type)
    gen = torch.Generator().manual_seed(spec.seed)
    if images is None:
        fmt = torch.channels_last if spec.channels_last else torch.contiguous_format
        images = torch.randn(spec.batch_size, 3, spec.crop_size, spec.crop_size, generator=gen)
        images = images.to(device, dtype, memory_format=fmt)
    labels = torch.randint(0, classes, (spec.batch_size,), generator=gen).to(device)
    for _ in range(max(1, warmup)):
        step(images, labels)
    sync()
    place = placement.for_cell(spec.placement, spec.gpus, device.type)
    if place is not None:  # as a cell places its threads: this one on the launch core, the rest off it
        placement.pin_process_tree(os.getpid(), place.others, {threading.get_native_id(): place.launch[0]})
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


def _bare_process(spec: CellSpec, classes: int, steps: int, warmup: int, variant_steps: int = 0) -> dict:
    """The bare loop in a fresh process (as a cell gets one): its Samples/s, and the input variants if asked."""
    cmd = [
        sys.executable,
        "-m",
        "loaderbench.experiments.ceiling",
        "--spec",
        json.dumps(spec.to_dict()),
        "--classes",
        str(classes),
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--variant-steps",
        str(variant_steps),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bare loop failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ceiling(
    spec: CellSpec,
    manifest: Path,
    rounds: int,
    variant_steps: int,
    out_dir: Path,
    timeout_s: float | None = None,
    host=None,
) -> dict:
    """Alternate synthetic cells (real cell jobs) and bare loops of as many steps; report both and their ratio."""
    from loaderbench.engine.runner.runcell import run_cell

    man = json.loads(Path(manifest).read_text())
    classes = len(Staged.from_manifest(man).classes)
    spec = dataclasses.replace(spec, loader="synthetic")
    synthetic, bare, steps, phases, placements = [], [], [], [], []
    device = None
    for r in range(rounds):
        s = dataclasses.replace(spec, seed=spec.seed + r, repeat=r)
        rec = run_cell(s, manifest, Path(out_dir) / f"{s.cell_id}.json", timeout_s=timeout_s, host=host)
        if rec["status"] != "ok":
            raise RuntimeError(f"synthetic cell {s.cell_id} {rec['status']}: {rec.get('reason')}")
        m = rec["metrics"]
        device = (rec["provenance"]["host"]["gpu_models"] or ["cpu"])[0] if m["device"]["type"] == "cuda" else "cpu"
        synthetic.append(m["samples_per_s"])
        steps.append(m["steps"])
        phases.append({k: m[k] for k in ("setup_s", "first_step_s", "warmup_s", "warmup_steps")})
        placements.append(m["placement"])
        b = _bare_process(s, classes, m["steps"], m["warmup_steps"])
        bare.append(b["samples_per_s"])
    result = {
        "device": device,
        "model": spec.model,
        "batch_size": spec.batch_size,
        "precision": spec.precision,
        "channels_last": spec.channels_last,
        "compile": spec.compile,
        "cudnn_benchmark": spec.cudnn_benchmark,
        "cudnn_benchmark_limit": spec.cudnn_benchmark_limit,
        "placement": placements[0] if placements else None,
        "rounds": rounds,
        "window": {"seconds": spec.window_s, "steps": spec.window_steps, "max_seconds": spec.window_max_s},
        "steps": steps,
        "synthetic_phases": phases,
        "synthetic_samples_per_s": synthetic,
        "bare_samples_per_s": bare,
        "synthetic_over_bare": statistics.median(s / b for s, b in zip(synthetic, bare, strict=True)),
    }
    if variant_steps:
        amp = dataclasses.replace(spec, precision="amp")
        result["input_variants_ms_per_step"] = _bare_process(amp, classes, 0, 10, variant_steps)["variants"]
    return result


def main(argv: list[str] | None = None) -> int:
    """`python -m loaderbench.experiments.ceiling`: one bare loop (and the input variants) in this process; JSON on stdout."""
    import torch

    p = argparse.ArgumentParser(prog="python -m loaderbench.experiments.ceiling")
    p.add_argument("--spec", required=True)
    p.add_argument("--classes", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--variant-steps", type=int, default=0)
    a = p.parse_args(argv)
    spec = CellSpec.from_dict(json.loads(a.spec))
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    out = {"intra_op_threads": placement.set_intra_op_threads("dp", 1)}  # the cell's threads, not OMP_NUM_THREADS
    if a.steps:
        out["samples_per_s"] = bare_loop(spec, a.classes, a.steps, a.warmup, device)
    if a.variant_steps:
        out["variants"] = input_variants(spec, a.classes, a.variant_steps, a.warmup, device)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    placement.remember_default_threads()  # a fresh process: torch's own count, unless the environment set one
    sys.exit(main())
