"""Parity: every image loader, in deterministic mode (crop and flip given), produces what torchvision produces.

Tolerance: the loaders resize with different kernels (PIL antialiased bilinear; OpenCV INTER_AREA when shrinking,
INTER_LINEAR when enlarging; DALI linear with antialiasing) and decode with different IDCTs, so pixels differ by a
few grey levels. Stated bound, in normalised units (1 grey level ~ 0.017): mean absolute difference <= 0.05
(about 3 levels) and 99th percentile <= 0.3. A loader that crops the wrong window, forgets the flip, swaps
channels or normalises differently misses these bounds by an order of magnitude (checked below).
`synthetic` has no image and is exempt.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from loaderbench.loaders.common import LoaderContext, normalize_uint8_nhwc
from loaderbench.loaders.opencv_loader import augment
from loaderbench.loaders.torchvision_loader import fixed_transform

MEAN_TOL, P99_TOL = 0.05, 0.3
CASES = [  # (top, left, height, width, flip): a shrinking crop, an enlarging crop, an off-centre tall one
    (20, 40, 300, 360, False),
    (100, 120, 150, 130, True),
    (5, 300, 330, 150, True),
]


@pytest.fixture(scope="module")
def image_path(small_dataset) -> Path:
    return sorted(small_dataset.rglob("*.JPEG"))[3]


def reference(path: Path, case, size=224) -> torch.Tensor:
    return fixed_transform(size, *case)(Image.open(path).convert("RGB"))


def opencv_output(path: Path, case, size=224) -> torch.Tensor:
    rgb = torch.from_numpy(augment(cv2.imread(str(path), cv2.IMREAD_COLOR), size, fixed_crop=case))
    return normalize_uint8_nhwc(rgb[None], channels_last=False)[0]


def dali_output(path: Path, case, decode: str, size=224) -> torch.Tensor:
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    from loaderbench.loaders.dali import pipeline

    ctx = LoaderContext(
        data_root=path.parent.parent,
        allowed=frozenset([str(path.relative_to(path.parent.parent))]),
        batch_size=1,
        crop_size=size,
        workers=0,
        prefetch_factor=1,
        seed=0,
        device=torch.device("cpu"),
        channels_last=False,
    )
    pipe = pipeline(
        ctx, decode=decode, batch_size=1, device_id=None, shard_id=0, num_shards=1, threads=1, fixed_crop=case
    )
    out = next(iter(DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader")))[0]
    assert int(out["labels"].item()) == 0  # same label as ImageFolder gives this file (class_0000)
    return out["images"][0]


def one_shard(path: Path) -> tuple[Path, Path]:
    """`path` staged alone as a WebDataset shard (tar and DALI index), as staging writes them."""
    from loaderbench.data.shards import stage_shards

    root, folder = path.parent.parent, path.parent.parent.parent / f"shard-of-{path.stem}"
    files = [{"path": str(path.relative_to(root)), "size": path.stat().st_size, "sha256": path.stem}]
    listed = stage_shards(root, folder, files, size_mb=64, min_shards=1, seed=0)
    return folder / listed["files"][0]["path"], folder / listed["files"][0]["index"]


def wds_output(path: Path, case, size=224) -> torch.Tensor:
    """The wds loader's decode of the shard's bytes, then the crop and flip given."""
    import tarfile

    from loaderbench.loaders.wds_loader import decode_image

    tar, _ = one_shard(path)
    with tarfile.open(tar) as t:
        data = next(t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".jpg"))
    return fixed_transform(size, *case)(decode_image(data))


def dali_wds_output(path: Path, case, size=224) -> torch.Tensor:
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    from loaderbench.loaders.dali import pipeline

    ctx = LoaderContext(
        data_root=path.parent.parent,
        allowed=frozenset(),
        batch_size=1,
        crop_size=size,
        workers=0,
        prefetch_factor=1,
        seed=0,
        device=torch.device("cpu"),
        channels_last=False,
    )
    pipe = pipeline(
        ctx,
        decode="mixed",
        batch_size=1,
        device_id=None,
        shard_id=0,
        num_shards=1,
        threads=1,
        fixed_crop=case,
        shards=[one_shard(path)],
    )
    out = next(iter(DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader")))[0]
    assert int(out["labels"].item()) == 0  # the label staging wrote into the shard (class_0000)
    return out["images"][0]


def diff(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    assert a.shape == b.shape == (3, 224, 224), (a.shape, b.shape)
    d = (a.float() - b.float()).abs()
    return float(d.mean()), float(torch.quantile(d.flatten(), 0.99))


def nvjpeg_output(path: Path, case, size=224, library="torchcodec") -> torch.Tensor:
    from loaderbench.loaders.nvjpeg import augment as gpu_augment
    from loaderbench.loaders.nvjpeg import collate, decode, jpeg_decoder

    payload = np.fromfile(path, dtype=np.uint8)
    buffer, meta, _, _ = collate([(payload, 0, case)])
    if library == "torchcodec" and (why := torchcodec_missing()):
        pytest.skip(why)
    name, decoder = jpeg_decoder(library)
    assert name.startswith(library), f"{library} did not load: {name}"
    images = decode(buffer, meta, torch.device("cpu"), decoder)  # the GPU code path, on the CPU device here
    return gpu_augment(images, torch.tensor([case]), size, channels_last=False)[0]


def torchcodec_missing() -> str | None:
    """Why TorchCodec cannot decode here, or None."""
    from loaderbench.loaders.nvjpeg import jpeg_decoder

    name = jpeg_decoder()[0]
    return (
        None if name.startswith("torchcodec") else "TorchCodec is not installed for this torch (pip install torchcodec)"
    )


LOADERS = {
    "opencv": opencv_output,
    "nvjpeg": nvjpeg_output,  # TorchCodec's decode_jpeg
    "nvjpeg-torchvision": lambda p, c: nvjpeg_output(p, c, library="torchvision.io"),
    "dali-sc": lambda p, c: dali_output(p, c, "mixed"),  # CPU-only here: mixed falls back to CPU decoding
    "dali-mc": lambda p, c: dali_output(p, c, "mixed"),
    "dali-cpu": lambda p, c: dali_output(p, c, "cpu"),
    "wds": wds_output,  # PIL on the shard's bytes
    "dali-wds": dali_wds_output,  # readers.webdataset with the staged index
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_loader_matches_torchvision_with_fixed_crop(image_path, loader, case):
    mean, p99 = diff(LOADERS[loader](image_path, case), reference(image_path, case))
    assert mean <= MEAN_TOL and p99 <= P99_TOL, f"{loader} {case}: mean {mean:.4f}, p99 {p99:.4f}"


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_the_bounds_catch_a_wrong_crop_flip_or_channel_order(image_path, loader):
    case = CASES[0]
    out = LOADERS[loader](image_path, case)
    ref = reference(image_path, case)
    shifted = reference(image_path, (case[0] + 40, case[1] + 40, *case[2:]))
    flipped = reference(image_path, (*case[:4], not case[4]))
    for wrong in (shifted, flipped, ref.flip(0)):
        mean, p99 = diff(out, wrong)
        assert mean > 2 * MEAN_TOL or p99 > 2 * P99_TOL
    assert np.isfinite(out.numpy()).all()


def test_torchvision_and_opencv_loaders_label_files_alike(small_dataset):
    from torchvision.datasets import ImageFolder

    ctx = LoaderContext(
        data_root=small_dataset,
        allowed=frozenset(str(p.relative_to(small_dataset)) for p in small_dataset.rglob("*.JPEG")),
        batch_size=1,
        crop_size=32,
        workers=0,
        prefetch_factor=1,
        seed=0,
        device=torch.device("cpu"),
        channels_last=False,
    )
    samples, _ = ctx.samples()
    assert ImageFolder(str(small_dataset)).samples == samples


def test_torchcodec_decodes_what_torchvision_decodes(image_path):
    """The GPU-decode loader's two libraries on the same bytes: the same pixels within a grey level or two (both
    wrap libjpeg-turbo on the CPU; nvJPEG on a GPU)."""
    if why := torchcodec_missing():
        pytest.skip(why)
    from loaderbench.loaders.nvjpeg import collate, decode, jpeg_decoder

    buffer, meta, _, _ = collate([(np.fromfile(image_path, dtype=np.uint8), 0, CASES[0])])
    a = decode(buffer, meta, torch.device("cpu"), jpeg_decoder("torchcodec")[1])[0]
    b = decode(buffer, meta, torch.device("cpu"), jpeg_decoder("torchvision.io")[1])[0]
    assert a.shape == b.shape and a.dtype == b.dtype == torch.uint8
    assert (a.int() - b.int()).abs().max() <= 2
