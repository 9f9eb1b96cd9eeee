"""Deterministic ImageNet-like JPEG class-folder tree from scikit-image's sample photos."""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from loaderbench.core.util import atomic_write_text, progress

# Natural photographs shipped inside scikit-image (no download needed).
SOURCE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina")
# ImageNet train images are mostly 500 px wide landscape 4:3, with portraits and squares (aspect = w / h).
ASPECTS = (4 / 3, 3 / 4, 1.0, 3 / 2, 2 / 3, 16 / 9)
ASPECT_WEIGHTS = (0.55, 0.12, 0.12, 0.12, 0.05, 0.04)


@dataclass(frozen=True)
class DatasetParams:
    images: int
    classes: int
    seed: int = 0
    quality: int = 90
    min_width: int = 400
    max_width: int = 500
    noise_sigma: float = 8.0


_photos: list[np.ndarray] | None = None


def _load_photos() -> list[np.ndarray]:
    global _photos
    if _photos is None:
        import skimage.data

        _photos = [np.ascontiguousarray(getattr(skimage.data, n)()[..., :3]) for n in SOURCE_PHOTOS]
    return _photos


def render_image(params: DatasetParams, index: int) -> tuple[int, bytes]:
    """Return (class index, JPEG bytes) of image `index`; a pure function of (params, index)."""
    rng = np.random.default_rng([params.seed, index])
    photos = _load_photos()
    label = index % params.classes
    # Each class prefers one source photo, so classes differ in content as well as in name.
    src = photos[label % len(photos)] if rng.random() < 0.7 else photos[rng.integers(len(photos))]
    aspect = float(rng.choice(ASPECTS, p=ASPECT_WEIGHTS)) * float(rng.uniform(0.95, 1.05))
    width = int(rng.integers(params.min_width, params.max_width + 1))
    height = max(64, round(width / aspect))
    # Crop a random window of the source with the target aspect, covering 25-100 % of its area.
    sh, sw = src.shape[:2]
    area = rng.uniform(0.25, 1.0) * sh * sw
    cw = int(min(sw, round(np.sqrt(area * aspect))))
    ch = int(min(sh, round(cw / aspect)))
    cw = max(16, min(cw, sw))
    ch = max(16, min(ch, sh))
    y0 = int(rng.integers(0, sh - ch + 1))
    x0 = int(rng.integers(0, sw - cw + 1))
    img = Image.fromarray(src[y0 : y0 + ch, x0 : x0 + cw]).resize((width, height), Image.BICUBIC)
    # In-camera style sharpening restores the fine detail that upscaling the small sources blurs away.
    img = img.filter(ImageFilter.UnsharpMask(radius=2, percent=int(rng.integers(200, 400)), threshold=0))
    arr = np.asarray(img, dtype=np.float32)
    if rng.random() < 0.5:
        arr = arr[:, ::-1]
    # Photometric jitter (per-channel gain, gamma) and sensor-like noise.
    gain = rng.uniform(0.8, 1.2, size=3).astype(np.float32)
    gamma = float(rng.uniform(0.8, 1.25))
    arr = 255.0 * np.clip(arr * gain / 255.0, 0, 1) ** gamma
    arr += rng.normal(0.0, params.noise_sigma, size=arr.shape).astype(np.float32)
    out = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    out.save(buf, format="JPEG", quality=params.quality)
    return label, buf.getvalue()


def _render_to(args: tuple[DatasetParams, int, str]) -> int:
    params, index, root = args
    label, data = render_image(params, index)
    path = Path(root) / f"class_{label:04d}" / f"img_{index:08d}.JPEG"
    path.write_bytes(data)
    return len(data)


def make_dataset(params: DatasetParams, out: Path, jobs: int | None = None) -> dict:
    """Write `out/train/class_NNNN/img_NNNNNNNN.JPEG` and `out/dataset.json`; returns the stats."""
    if params.images < 1 or params.classes < 1:
        raise ValueError("dataset.images and dataset.classes must be positive integers")
    if params.classes > params.images:
        raise ValueError(f"dataset.classes ({params.classes}) exceeds dataset.images ({params.images})")
    train = out / "train"
    for c in range(params.classes):
        (train / f"class_{c:04d}").mkdir(parents=True, exist_ok=True)
    jobs = jobs or len(os.sched_getaffinity(0))
    work = [(params, i, str(train)) for i in range(params.images)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        sizes = list(progress(pool.map(_render_to, work, chunksize=16), total=len(work), label="make-dataset"))
    sizes_kb = np.asarray(sizes) / 1000.0
    stats = {
        "params": asdict(params),
        "generator": "loaderbench.data.dataset (scikit-image sample photos: " + ", ".join(SOURCE_PHOTOS) + ")",
        "files": len(sizes),
        "total_bytes": int(np.sum(sizes)),
        "mean_file_kb": round(float(sizes_kb.mean()), 2),
        "median_file_kb": round(float(np.median(sizes_kb)), 2),
    }
    atomic_write_text(out / "dataset.json", json.dumps(stats, indent=2))
    return stats
