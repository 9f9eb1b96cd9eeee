"""The generated dataset looks like ImageNet train images: natural content, sizes, shapes, determinism."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from PIL import Image

from loaderbench.data.dataset import DatasetParams, make_dataset, render_image


def test_generated_tree_statistics(small_dataset):
    root = small_dataset
    stats = json.loads((root.parent / "dataset.json").read_text())
    files = sorted(root.rglob("*.JPEG"))
    assert len(files) == stats["files"] == 24
    assert sorted(p.name for p in root.iterdir()) == ["class_0000", "class_0001", "class_0002"]
    assert all(len(list((root / c).iterdir())) == 8 for c in ("class_0000", "class_0001", "class_0002"))
    sizes_kb = np.array([f.stat().st_size for f in files]) / 1000
    widths, aspects = [], []
    for f in files:
        with Image.open(f) as im:
            assert im.format == "JPEG" and im.mode == "RGB"
            widths.append(im.width)
            aspects.append(im.width / im.height)
    assert 400 <= min(widths) and max(widths) <= 500
    assert 0.6 < min(aspects) and max(aspects) < 1.9 and np.median(aspects) > 1.2  # mostly landscape, like ImageNet
    assert stats["mean_file_kb"] == round(float(sizes_kb.mean()), 2)


def test_mean_file_size_is_imagenet_like_at_quality_90():
    params = DatasetParams(images=120, classes=4, seed=3, quality=90)
    sizes_kb = np.array([len(render_image(params, i)[1]) for i in range(params.images)]) / 1000
    assert 70 <= sizes_kb.mean() <= 120, sizes_kb.mean()


def test_content_is_natural_not_flat_and_not_noise():
    params = DatasetParams(images=10, classes=2, seed=5)
    for i in range(params.images):
        img = np.asarray(Image.open(__import__("io").BytesIO(render_image(params, i)[1])).convert("L"), dtype=float)
        assert img.std() > 15  # not a flat colour
        # neighbouring pixels correlate strongly in photos, not in noise
        corr = np.corrcoef(img[:, :-1].ravel(), img[:, 1:].ravel())[0, 1]
        assert corr > 0.5, corr  # pure noise gives about 0


def test_generation_is_deterministic_from_the_seed(tmp_path):
    def digest(out: Path) -> str:
        h = hashlib.sha256()
        for f in sorted(out.rglob("*.JPEG")):
            h.update(f.relative_to(out).as_posix().encode() + f.read_bytes())
        return h.hexdigest()

    a = make_dataset(DatasetParams(images=9, classes=3, seed=11), tmp_path / "a", jobs=1)
    b = make_dataset(DatasetParams(images=9, classes=3, seed=11), tmp_path / "b", jobs=2)
    make_dataset(DatasetParams(images=9, classes=3, seed=12), tmp_path / "c", jobs=2)
    assert a["total_bytes"] == b["total_bytes"]
    assert digest(tmp_path / "a") == digest(tmp_path / "b") != digest(tmp_path / "c")
