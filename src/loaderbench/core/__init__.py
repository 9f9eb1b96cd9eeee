"""What every part shares: the config and its cells, where files live, the record format, provenance, and how far a
measurement can be trusted. Imports nothing heavier than PyYAML and jsonschema.

Modules: `config` (validation, cell specs and ids), `cells` (configurations of repeated cells), `registry` (the
built-in loaders by name), `devices` (models of emulated storage devices), `layout` (the results layout), `records`
(the cell record), `provenance` (host, code and run ids), `uncertainty` (intervals and whether two cells differ),
`util` (atomic writes, hashing, process trees).
"""

from .cells import CellSpec, cell_ids, cell_spec, configuration, parse_cell_id
from .config import ConfigError, load_config, validate_config
from .layout import RESULTS, Layout
from .records import load_records, make_record
from .uncertainty import ratio

__all__ = ["CellSpec", "ConfigError", "Layout", "RESULTS", "cell_ids", "cell_spec", "configuration", "load_config",
           "load_records", "make_record", "parse_cell_id", "ratio", "validate_config"]  # fmt: skip
