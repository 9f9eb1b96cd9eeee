"""A cell's storage tier while it runs: an emulated tier mounted, a cold tier evicted before and during the window,
and afterwards what the cell read: its rereads and the share of the window's bytes the device delivered."""

from __future__ import annotations

from pathlib import Path

from loaderbench.core.cells import CellSpec
from loaderbench.core.layout import read_root
from loaderbench.core.records import warning
from loaderbench.core.registry import tierless


def fuse_missing() -> bool:
    from loaderbench.data.emulated import fuse_available

    return fuse_available() is not None


def prepare(spec: CellSpec, manifest: dict, tier: dict):
    """Mount an emulated tier (returned, to be unmounted by the caller) and make a cold tier cold."""
    mount = None
    if spec.tier_kind == "emulated":
        from loaderbench.data.emulated import DeviceModel
        from loaderbench.data.emulated import mount as mount_emulated

        mount = mount_emulated(spec.tier_path, spec.read_path, DeviceModel.from_dict(spec.device_model))
    if spec.cache == "cold":
        from loaderbench.data.cache import evict

        tier["eviction"] = evict(staged_files(spec, manifest))
    return mount


def staged_files(spec: CellSpec, manifest: dict) -> list[Path]:
    """The tier's real copies of the manifest's files and shards (an emulated tier's backing files)."""
    root = read_root(manifest, spec.tier_path)
    files = [root / f["path"] for f in manifest["files"]] if manifest.get("files_staged", True) else []
    if shards := manifest.get("shards"):
        folder = root.parent / shards["folder"]
        files += [folder / name for f in shards["files"] for name in (f["path"], f["index"])]
    return files


def keep_cold(spec: CellSpec, manifest: dict, evict_first: bool = False):
    """A cold path tier is evicted again and again while the cell reads it (`cache.KeepCold`); None for other tiers
    (an emulated tier's mount bypasses the page cache itself, RAM is warm by nature). With `evict_first`, the files
    are evicted once before it starts (a cell's runner has done so already)."""
    if spec.cache != "cold" or spec.tier_kind != "path" or tierless(spec.loader):
        return None
    from loaderbench.data.cache import KeepCold, evict

    paths = staged_files(spec, manifest)
    if evict_first:
        evict(paths)
    return KeepCold(paths).start()


def device_read_share(spec: CellSpec, manifest: dict, tier: dict, metrics: dict, tele: dict) -> None:
    """The share of the window's reads that came from the tier's device rather than the page cache, on a cold path
    tier: the device's read bytes (the whole disk: other readers count too) over the bytes the cell took.

    Two measures of "took", each biased low in its own way, and the share is the higher: the bytes of the images the
    window's steps consumed (low when the loader's read-ahead queue drains in the window) and the bytes the cell's
    processes read through read() in the same telemetry samples (low when pipes and /proc add to them; none where a
    loader maps its files, as DALI does). A warm cell reads little from the device by both. Below COLD_SHARE it is
    shown as warm."""
    from loaderbench.data.cache import COLD_SHARE

    if spec.cache != "cold" or spec.tier_kind != "path":
        return
    files, size = len(manifest["files"]), manifest.get("counts", {}).get("bytes", 0)
    disk = (tele.get("disk_read_mb_s") or {}).get("mean")
    window_bytes = metrics.get("steps", 0) * metrics.get("global_batch", 0) * (size / files if files else 0)
    if disk is None or not window_bytes or not metrics.get("time_s"):
        tier["device_read_share"] = None
        tier["device_read_note"] = tele.get("disk_note") or "no device read counter for this tier"
        return
    device = disk * 1e6 * metrics["time_s"]
    shares = {"consumed": device / window_bytes}
    read = (tele.get("proc_read_mb_s") or {}).get("mean")
    if read:
        shares["read"] = disk / read
    basis = max(shares, key=shares.get)
    share = min(1.0, shares[basis])
    tier.update(
        device_read_share=round(share, 4),
        device_read_basis=basis,
        device_read_bytes=round(device),
        window_bytes=round(window_bytes),
    )
    if share < COLD_SHARE:
        metrics.setdefault("warnings", []).append(
            warning(
                "warm_reads",
                f"only {100 * share:.0f}% of the window's bytes came from the device of this cold tier (the "
                f"rest from the page cache), under {100 * COLD_SHARE:.0f}%: the cell is shown as warm and carries no "
                "cold verdict",
            )
        )


def check_rereads(manifest: dict, tier: dict, metrics: dict) -> None:
    """How many images the cell read against the dataset's files: the share it read more than once. On a cold path
    tier those rereads come from the device too (`keep_cold`); `device_read_share` says how much did."""
    files = len(manifest["files"])
    read = (metrics.get("warmup_steps", 0) + metrics.get("steps", 0)) * metrics.get("global_batch", 0)
    if not files or not read:
        return
    tier["images_read"] = read
    tier["reread_fraction"] = max(0.0, read - files) / read
