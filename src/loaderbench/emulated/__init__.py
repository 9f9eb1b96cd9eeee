"""An emulated storage device: a read-only FUSE passthrough that throttles every read to a device model.

A `DeviceModel` (`model`) is a positioning time, a bandwidth and how many requests the device serves at once. The
filesystem (`fs`, served by `python -m loaderbench.emulated serve ...`, `server`) keeps that many "heads"
(`throttle`); a read holds one head for access time (unless it continues that head's last read) plus bytes /
bandwidth, real read included. `mount()` (`mount`) runs the server as a child process, records it in
`<mountpoint>.owner.json` and `cleanup_stale()` removes what a crashed owner left behind. `predict()` is the rate the
model promises, which `loaderbench.tierprobe` compares a measured probe against.
"""

from .model import DEVICE_MODELS, DeviceModel, EmulatedTierError, predict, resolve_model
from .mount import EmulatedMount, cleanup_stale, fuse_available, mount, mount_entry, owner_path

__all__ = [
    "DEVICE_MODELS",
    "DeviceModel",
    "EmulatedMount",
    "EmulatedTierError",
    "cleanup_stale",
    "fuse_available",
    "mount",
    "mount_entry",
    "owner_path",
    "predict",
    "resolve_model",
]
