"""`nvjpeg`: DataLoader workers only read file bytes and draw the crop; JPEG decode (batched, nvJPEG: TorchCodec's
`decode_jpeg` where TorchCodec imports, else `torchvision.io.decode_jpeg`, which torchvision deprecates in its
favour) and the crop/resize/flip/normalise run on the GPU. The record says which library decoded.

A batch crosses from the workers as one byte buffer plus offsets (one shared tensor, not one per image: thousands of
small shared tensors exhaust file descriptors and hang the loader). Without a GPU the same code decodes on the CPU.
Files that are not JPEG (kept odd files) are decoded by PIL in the worker and shipped as pixels.
"""

from __future__ import annotations

import io

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.io import ImageReadMode, decode_image, decode_jpeg

from .common import LoaderContext, forever, normalize_uint8_nhwc
from .opencv_loader import crop_params

JPEG_MAGIC = b"\xff\xd8\xff"


class BytesDataset(torch.utils.data.Dataset):
    """(bytes or pixels, label, (top, left, h, w, flip)) per file; the crop is drawn as torchvision draws it."""

    def __init__(self, samples: list[tuple[str, int]]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        path, label = self.samples[i]
        with open(path, "rb") as f:
            data = f.read()
        if data.startswith(JPEG_MAGIC):
            with Image.open(io.BytesIO(data)) as im:  # header only: the size, for the crop
                width, height = im.size
            payload = np.frombuffer(data, np.uint8)
        else:
            with Image.open(io.BytesIO(data)) as im:
                payload = np.asarray(im.convert("RGB"))  # HWC pixels
            height, width = payload.shape[:2]
        top, left, h, w = crop_params(height, width)
        flip = bool(torch.rand(1) < 0.5)
        return payload, label, (top, left, h, w, flip)


def collate(items):
    """One uint8 buffer for the whole batch + per-item (offset, length, height, width) + labels + crops."""
    flat = [p.reshape(-1) for p, _, _ in items]
    lengths = np.array([a.size for a in flat])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    shapes = np.array([(0, 0) if p.ndim == 1 else p.shape[:2] for p, _, _ in items])
    meta = torch.from_numpy(np.column_stack([offsets, lengths, shapes]).astype(np.int64))
    labels = torch.tensor([y for _, y, _ in items])
    crops = torch.tensor([c for _, _, c in items], dtype=torch.int64)
    return torch.from_numpy(np.concatenate(flat)), meta, labels, crops


def _torchvision_decode(blobs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    return decode_jpeg(blobs, mode=ImageReadMode.RGB, device=device)


def jpeg_decoder(prefer: str = "torchcodec"):
    """(library name, batched decode of CPU byte tensors to CHW uint8 RGB on a device): TorchCodec where it imports
    (its wheel must match the installed torch), else torchvision.io."""
    if prefer == "torchcodec":
        try:
            import torchcodec
            from torchcodec.decoders import decode_jpeg as codec_decode_jpeg
        except Exception:  # noqa: BLE001 - not installed, or built for another torch: its libraries do not load
            return "torchvision.io", _torchvision_decode
        return f"torchcodec {torchcodec.__version__}", lambda blobs, device: codec_decode_jpeg(
            blobs, mode="RGB", device=device
        )
    return "torchvision.io", _torchvision_decode


def decode(buffer: torch.Tensor, meta: torch.Tensor, device: torch.device, decoder=None) -> list[torch.Tensor]:
    """CHW uint8 images on `device`: JPEGs in one batched call of `decoder` (default `jpeg_decoder()`'s), shipped
    pixels moved as they are."""
    images: list[torch.Tensor | None] = [None] * len(meta)
    jpegs = [i for i, m in enumerate(meta.tolist()) if m[2] == 0]
    if jpegs:
        blobs = [buffer[meta[i, 0] : meta[i, 0] + meta[i, 1]] for i in jpegs]
        try:
            decoded = (decoder or jpeg_decoder()[1])(blobs, device)
        except RuntimeError:  # a JPEG flavour the decoder refuses (e.g. some CMYK): decode those one by one on the CPU
            decoded = [decode_image(b, mode=ImageReadMode.RGB).to(device) for b in blobs]
        for i, img in zip(jpegs, decoded, strict=True):
            images[i] = img
    for i, m in enumerate(meta.tolist()):
        if m[2]:
            hwc = buffer[m[0] : m[0] + m[1]].view(m[2], m[3], 3)
            images[i] = hwc.to(device, non_blocking=True).permute(2, 0, 1)
    return images


def augment(
    images: list[torch.Tensor],
    crops: torch.Tensor,
    crop_size: int,
    channels_last: bool,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Crop, resize (bilinear, antialiased as torchvision's Resize), flip, normalise: a float NCHW batch."""
    out = torch.empty(len(images), crop_size, crop_size, 3, dtype=torch.uint8, device=images[0].device)
    for k, (img, (top, left, h, w, flip)) in enumerate(zip(images, crops.tolist(), strict=True)):
        patch = img[:, top : top + h, left : left + w].unsqueeze(0).float()
        patch = F.interpolate(patch, size=(crop_size, crop_size), mode="bilinear", antialias=True, align_corners=False)
        if flip:
            patch = patch.flip(3)
        out[k] = patch[0].permute(1, 2, 0).round_().clamp_(0, 255).to(torch.uint8)
    return normalize_uint8_nhwc(out, channels_last, dtype)


def build(ctx: LoaderContext):
    samples, _ = ctx.samples()
    loader = ctx.dataloader(BytesDataset(samples), collate_fn=collate)
    ctx.info["decoder"] = "nvjpeg (GPU)" if ctx.device.type == "cuda" else "libjpeg-turbo (CPU, no GPU here)"
    library, decoder = jpeg_decoder()
    ctx.info["decode_library"] = library

    def to_device(batch):
        buffer, meta, labels, crops = batch
        images = decode(buffer, meta, ctx.device, decoder)
        return augment(images, crops, ctx.crop_size, ctx.channels_last, ctx.dtype), labels.to(
            ctx.device, non_blocking=True
        )

    return forever(loader, to_device)
