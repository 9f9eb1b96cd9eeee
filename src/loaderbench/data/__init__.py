"""The dataset and where it is read from: generate or check the source, stage it onto each tier, read the staged
manifest, keep a cold tier cold, probe a tier's read rate, and emulate slow devices with FUSE (`emulated`).

Modules: `dataset` (the embedded generated dataset), `check` (validate a source folder), `stage` (copy it onto a tier
and write the manifest), `manifest` (the staged files and labels every reader takes), `cache` (page-cache eviction),
`shards` (WebDataset shards written at staging), `tierprobe` (a tier's measured read rate), `emulated/` (a FUSE
filesystem with a disk's timing).
"""

from loaderbench.core.util import lazy_exports

_EXPORTS = {
    "DatasetError": "check",
    "check_dataset": "check",
    "samples": "manifest",
    "StagingError": "stage",
    "stage": "stage",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
