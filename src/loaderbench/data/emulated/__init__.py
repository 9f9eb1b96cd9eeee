"""An emulated storage device: a read-only FUSE passthrough that throttles every read to a device model.

A `DeviceModel` (`loaderbench.core.devices`) is a positioning time, a bandwidth and how many requests the device
serves at once. The filesystem (`fs`, served by `python -m loaderbench.data.emulated serve ...`, `server`) keeps that
many "heads" (`throttle`); a read holds one head for access time (unless it continues that head's last read) plus
bytes / bandwidth, real read included. `mount()` (`mounting`) runs the server as a child process, records it in
`<mountpoint>.owner.json` and `cleanup_stale()` (`owner`) removes what a crashed owner left behind; `mounts` reads the
mount table and says whether FUSE is usable here. `predict()` is the rate the model promises, which
`loaderbench.data.tierprobe` compares a measured probe against.
"""

from loaderbench.core.devices import DEVICE_MODELS, DeviceModel, EmulatedTierError, predict, resolve_model
from loaderbench.core.util import lazy_exports

# The FUSE side (mfusepy, loaded by `fs`) only when asked for: `loaderbench.core.devices` alone serves the config
# checks and the tier probe's predictions.
_MOUNTING = {
    "EmulatedMount": "mounting",
    "cleanup_stale": "owner",
    "fuse_available": "mounts",
    "mount": "mounting",
    "mount_entry": "mounts",
    "owner_path": "owner",
}

__all__ = ["DEVICE_MODELS", "DeviceModel", "EmulatedTierError", "predict", "resolve_model", *_MOUNTING]  # noqa: PLE0604
__getattr__ = lazy_exports(__name__, _MOUNTING)
