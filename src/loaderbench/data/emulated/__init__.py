"""An emulated storage device: a read-only FUSE passthrough that throttles every read to a device model.

A `DeviceModel` (`model`) is a positioning time, a bandwidth and how many requests the device serves at once. The
filesystem (`fs`, served by `python -m loaderbench.data.emulated serve ...`, `server`) keeps that many "heads"
(`throttle`); a read holds one head for access time (unless it continues that head's last read) plus bytes /
bandwidth, real read included. `mount()` (`mounting`) runs the server as a child process, records it in
`<mountpoint>.owner.json` and `cleanup_stale()` removes what a crashed owner left behind. `predict()` is the rate the
model promises, which `loaderbench.data.tierprobe` compares a measured probe against.
"""

from loaderbench.core.devices import DEVICE_MODELS, DeviceModel, EmulatedTierError, predict, resolve_model

# The FUSE side (mfusepy, loaded by `fs`) only when asked for: `loaderbench.core.devices` alone serves the config
# checks and the tier probe's predictions.
_MOUNTING = ("EmulatedMount", "cleanup_stale", "fuse_available", "mount", "mount_entry", "owner_path")


def __getattr__(name: str):
    if name in _MOUNTING:
        from . import mounting

        return getattr(mounting, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DEVICE_MODELS", "DeviceModel", "EmulatedTierError", "predict", "resolve_model", *_MOUNTING]  # noqa: PLE0604
