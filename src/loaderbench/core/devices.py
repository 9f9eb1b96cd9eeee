"""The device model of an emulated tier and the rate it promises: plain maths, no FUSE (the config checks models
with it, the tier probe predicts with it).

A `DeviceModel` is a positioning time, a bandwidth and how many requests the device serves at once. `predict()` is
the rate the model promises, which `loaderbench.data.tierprobe` compares a measured probe against.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


class EmulatedTierError(RuntimeError):
    """An emulated tier cannot be modelled, mounted or cleaned; the message names the path and the fix."""


@dataclass(frozen=True)
class DeviceModel:
    """A storage device as seen by whole-file reads: positioning time, bandwidth (MB = 1e6 B), parallel requests."""

    name: str
    access_ms: float
    bandwidth_mb_s: float
    concurrency: int = 1

    def __post_init__(self):
        access = self.access_ms
        if not isinstance(access, (int, float)) or isinstance(access, bool) or access < 0:
            raise EmulatedTierError(f"device model '{self.name}': access_ms must be a number >= 0, got {access!r}")
        bw = self.bandwidth_mb_s
        if not isinstance(bw, (int, float)) or isinstance(bw, bool) or bw <= 0:
            raise EmulatedTierError(f"device model '{self.name}': bandwidth_mb_s must be a number > 0, got {bw!r}")
        if not isinstance(self.concurrency, int) or isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise EmulatedTierError(
                f"device model '{self.name}': concurrency must be an integer >= 1, got {self.concurrency!r}"
            )

    @classmethod
    def from_dict(cls, d: dict, name: str | None = None) -> DeviceModel:
        if not isinstance(d, dict):
            raise EmulatedTierError(f"device model {name or ''}: expected a mapping, got {type(d).__name__}")
        fields = {"name", "access_ms", "bandwidth_mb_s", "concurrency"}
        label = d.get("name", name or "custom")
        unknown = sorted(set(d) - fields)
        if unknown:
            raise EmulatedTierError(f"device model '{label}': unknown keys {unknown}; allowed: {sorted(fields)}")
        missing = sorted({"access_ms", "bandwidth_mb_s"} - set(d))
        if missing:
            raise EmulatedTierError(f"device model '{label}': missing keys {missing}")
        return cls(str(label), d["access_ms"], d["bandwidth_mb_s"], d.get("concurrency", 1))

    def to_dict(self) -> dict:
        return asdict(self)

    def service_s(self, nbytes: int, seek: bool = True) -> float:
        """Seconds one head is busy with a request of `nbytes` (plus a positioning when `seek`)."""
        return (self.access_ms / 1e3 if seek else 0.0) + nbytes / (self.bandwidth_mb_s * 1e6)


# Typical datasheet figures. HDD access = average seek + half a rotation (7200 rpm: ~4.3 + 4.2 ms; 5400 rpm:
# ~6.5 + 5.6 ms); sustained rates of current 1-4 TB desktop drives; one actuator. SATA SSD: the SATA III
# link caps reads near 530-560 MB/s, ~0.1 ms read latency, NCQ queue depth 32. NFS over 1 GbE: 125 MB/s line
# rate less TCP/RPC overhead, ~0.5 ms round trip with server, 8 = the default number of nfsd threads.
DEVICE_MODELS: dict[str, DeviceModel] = {
    m.name: m
    for m in (
        DeviceModel("hdd-7200", 8.5, 160.0, 1),
        DeviceModel("hdd-5400", 12.0, 100.0, 1),
        DeviceModel("sata-ssd", 0.1, 530.0, 32),
        DeviceModel("nfs-1gbe", 0.5, 110.0, 8),
    )
}


def resolve_model(name_or_dict: str | dict | DeviceModel, extra_models: dict | None = None) -> DeviceModel:
    """A model by built-in name, by a name in `extra_models` (these win over built-ins), or inline as a dict."""
    if isinstance(name_or_dict, DeviceModel):
        return name_or_dict
    if isinstance(name_or_dict, dict):
        return DeviceModel.from_dict(name_or_dict)
    if not isinstance(name_or_dict, str):
        raise EmulatedTierError(f"device model must be a name or a mapping, got {type(name_or_dict).__name__}")
    extra = extra_models or {}
    if name_or_dict in extra:
        found = extra[name_or_dict]
        return found if isinstance(found, DeviceModel) else DeviceModel.from_dict(found, name=name_or_dict)
    if name_or_dict in DEVICE_MODELS:
        return DEVICE_MODELS[name_or_dict]
    known = sorted(set(DEVICE_MODELS) | set(extra))
    raise EmulatedTierError(
        f"unknown device model '{name_or_dict}'; known models: {', '.join(known)} (or give access_ms, "
        "bandwidth_mb_s and concurrency inline)"
    )


def predict(model: DeviceModel, mean_file_bytes: float, readers: int) -> dict:
    """Files/s and MB/s the model gives whole-file reads of that mean size with `readers` concurrent readers."""
    if readers < 1:
        raise EmulatedTierError(f"predict: readers must be >= 1, got {readers}")
    service = model.service_s(mean_file_bytes)
    in_service = min(readers, model.concurrency)
    files_s = in_service / service if service > 0 else float("inf")
    return {
        "model": model.name,
        "readers": readers,
        "in_service": in_service,
        "mean_file_bytes": mean_file_bytes,
        "service_ms": service * 1e3,
        "files_per_s": files_s,
        "mb_per_s": files_s * mean_file_bytes / 1e6,
    }
