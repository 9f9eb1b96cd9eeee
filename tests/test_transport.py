"""The torchvision loader's transport (`torchvision.transport`): uint8 hands over the crop's bytes and normalises on the
device; it must deliver what float32 (the seed's ToTensor + Normalize in the workers) delivers, and adding the setting
must leave every record made before it the measurement of its cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from loaderbench.core.cells import CellSpec, cell_spec
from loaderbench.core.config import ConfigError, validate_config
from loaderbench.core.records import spec_hash
from loaderbench.data.manifest import class_names
from loaderbench.engine import step
from loaderbench.loaders import get_loader
from tests.conftest import staged_disk, tiny_config
from tests.test_cold_step import _ctx, _layout

STUDY_RECORDS = Path(__file__).resolve().parents[1] / "docs/results/2026-12-01-h200x2/study/bundle/cells"


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "transport")


def _batches(tmp, transport, **kw):
    ctx = _ctx(tmp, workers=0, options={"transport": transport}, **kw)
    torch.manual_seed(0)  # with no worker, the crops and flips draw from this process's generator
    batches = get_loader("torchvision").build(ctx)
    return ctx, [next(batches) for _ in range(3)]


@pytest.mark.parametrize(
    "channels_last, dtype", [(True, torch.float32), (False, torch.float32), (True, torch.bfloat16)]
)
def test_uint8_transport_delivers_what_float32_delivers(staged, channels_last, dtype):
    tmp, _ = staged
    ctx32, ref = _batches(tmp, "float32", channels_last=channels_last, dtype=dtype)
    ctx8, got = _batches(tmp, "uint8", channels_last=channels_last, dtype=dtype)
    assert (ctx32.info["transport"], ctx8.info["transport"]) == ("float32", "uint8")
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # the same value rounded once to bfloat16 (8 bits of mantissa)
    for (a, la), (b, lb) in zip(ref, got, strict=True):
        assert _layout((a, la)) == _layout((b, lb))  # shape, dtype, strides (memory format), device
        assert torch.equal(la, lb)  # the same samples in the same order
        assert torch.allclose(a.float(), b.float(), atol=tol, rtol=tol), float((a.float() - b.float()).abs().max())
    # the check can fail: another sample's crop differs by far more than the tolerance
    assert not torch.allclose(ref[0][0][0].float(), got[1][0][0].float(), atol=0.1)


def test_a_uint8_batch_is_a_quarter_of_the_bytes_the_workers_hand_over(staged):
    tmp, _ = staged
    ctx = _ctx(tmp, workers=0)
    sizes = {}
    for transport in ("float32", "uint8"):
        from loaderbench.loaders.torchvision_loader import load, transform

        samples, _ = ctx.samples()
        sizes[transport] = load(transform(ctx.crop_size, transport))(samples[0][0])
    assert sizes["float32"].dtype == torch.float32 and sizes["uint8"].dtype == torch.uint8
    assert sizes["uint8"].shape == (32, 32, 3) and sizes["float32"].shape == (3, 32, 32)
    assert sizes["float32"].nbytes == 4 * sizes["uint8"].nbytes


def test_the_cold_batch_is_laid_out_as_the_uint8_loaders_batches(staged):
    tmp, _ = staged
    ctx, batches = _batches(tmp, "uint8", dtype=torch.bfloat16)
    assert _layout(step.cold_batch(ctx, len(class_names(ctx.allowed)))) == _layout(batches[0])


def test_records_made_before_the_setting_keep_their_hash():
    records = [json.loads(p.read_text()) for p in sorted(STUDY_RECORDS.glob("*.json"))]
    assert len(records) >= 50
    for rec in records:
        spec = CellSpec.from_dict(rec["spec"])
        assert spec.torchvision_transport == "float32"
        assert "torchvision_transport" not in spec.to_dict()
        assert spec_hash(spec) == rec["spec_hash"], rec["cell_id"]


def test_the_setting_reaches_the_spec_and_changes_its_hash(tmp_path):
    cfg = tiny_config(tmp_path)
    cid = "torchvision_disk-a_g1_b4_fp32_dp_r0"
    default = cell_spec(validate_config(cfg), cid)
    uint8 = cell_spec(validate_config({**cfg, "torchvision": {"transport": "uint8"}}), cid)
    assert uint8.torchvision_transport == "uint8" and uint8.to_dict()["torchvision_transport"] == "uint8"
    assert spec_hash(uint8) != spec_hash(default)
    assert CellSpec.from_dict(uint8.to_dict()) == uint8
    with pytest.raises(ConfigError, match="transport"):
        validate_config({**cfg, "torchvision": {"transport": "float16"}})


def test_the_setting_is_torchvisions_alone(tmp_path):
    """Other loaders' cells keep their specs (and records) when torchvision's transport changes, so a config may set
    it at the top and share its other cells with a config that does not."""
    cfg = tiny_config(tmp_path, loaders=["torchvision", "opencv"])
    base, uint8 = validate_config(cfg), validate_config({**cfg, "torchvision": {"transport": "uint8"}})
    other = "opencv_disk-a_g1_b4_fp32_dp_r0"
    assert cell_spec(uint8, other) == cell_spec(base, other)
    assert spec_hash(cell_spec(uint8, other)) == spec_hash(cell_spec(base, other))
    # a part that sets it shares its other loaders' cells with a part that does not
    parts = {
        **cfg,
        "parts": [
            {"name": "a", "loaders": ["opencv"]},
            {"name": "b", "loaders": ["torchvision", "opencv"], "torchvision": {"transport": "uint8"}},
        ],
    }
    shared = validate_config(parts)
    assert cell_spec(shared, other) == cell_spec(base, other)
    assert cell_spec(shared, "torchvision_disk-a_g1_b4_fp32_dp_r0").torchvision_transport == "uint8"
