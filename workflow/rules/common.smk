# Configuration (validated against the schema, defaults filled), the grid of cells, and input functions.
import json
from pathlib import Path

import yaml
from snakemake.utils import update_config

from loaderbench.config import (
    CELL_ID_PATTERN,
    ConfigError,
    cell_ids,
    cell_spec,
    dataset_source_dir,
    parse_cell_id,
    validate_config,
)
from loaderbench.util import stable_hash

DEFAULT_CONFIG = "config/quickstart.yaml"

# No `configfile:` directive: Snakemake would merge a --configfile into it key by key (mixing the two grids'
# storage maps). Without --configfile the embedded default is used, with any --config overrides on top.
if not workflow.configfiles:
    _raw = yaml.safe_load(Path(workflow.basedir, DEFAULT_CONFIG).read_text())
    update_config(_raw, config)
    config.clear()
    config.update(_raw)

CFG = validate_config(config)
CELLS = cell_ids(CFG)
TIERS = CFG["tiers"]
DATASET = CFG["dataset"]
GENERATED = DATASET["source"] == "generated"
if not GENERATED and not Path(DATASET["path"]).is_dir():
    raise ConfigError(f"config key 'dataset.path': {DATASET['path']} does not exist or is not a directory")


wildcard_constraints:
    cell=CELL_ID_PATTERN,
    tier="|".join(TIERS),


def source_fingerprint():
    """Changes when the source dataset changes, so staging reruns (Snakemake's params trigger)."""
    if GENERATED:
        return stable_hash({k: DATASET[k] for k in ("images", "classes", "seed", "quality")})
    n, size, mtime = 0, 0, 0
    for p in sorted(Path(DATASET["path"]).rglob("*")):
        if p.is_file():
            st = p.stat()
            n, size, mtime = n + 1, size + st.st_size, max(mtime, st.st_mtime_ns)
    return f"{n}-{size}-{mtime}"


def get_source_input():
    return f"resources/datasets/{DATASET['name']}" if GENERATED else DATASET["path"]


def get_cell_manifest(wildcards):
    return f"results/staging/{parse_cell_id(wildcards.cell)['tier']}.json"


def get_cell_spec(wildcards):
    return json.dumps(cell_spec(CFG, wildcards.cell).to_dict())


def get_cell_files():
    return expand("results/cells/{cell}.json", cell=CELLS)


def get_final_output():
    return ["results/tables/cells.csv", "results/bundle", "results/bundle.zip"]
