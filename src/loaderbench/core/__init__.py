"""What every part shares: the config and its cells, where files live, the record format, provenance, and how far a
measurement can be trusted. Imports nothing heavier than PyYAML and jsonschema.

Modules: `config` (loading and validation), `resolve` (loader and model entries as names and plugins), `machine`
(the config's tiers and dataset on this machine), `cells` (cell specs, ids, the grid and its parts), `registry` (the
built-in loaders by name), `pluginsource` (a plugin's code, identified without importing it), `devices` (models of
emulated storage devices), `layout` (the results and staging layout), `records` (the cell record: validated when
written, upgraded when read), `provenance` (host, code and run ids), `comparable` (which records divide which),
`uncertainty` (intervals and whether two cells differ), `util` (atomic writes, hashing, process trees). The names
below are imported on first use.
"""

from .util import lazy_exports

_EXPORTS = {
    "CellSpec": "cells",
    "cell_ids": "cells",
    "cell_spec": "cells",
    "configuration": "cells",
    "parse_cell_id": "cells",
    "ConfigError": "config",
    "load_config": "config",
    "validate_config": "config",
    "RESULTS": "layout",
    "Layout": "layout",
    "load_records": "records",
    "make_record": "records",
    "ratio": "uncertainty",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
