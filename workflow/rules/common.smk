# Configuration (validated against the schema, defaults filled), the grid of cells, and input functions.
import json
import os
import sys
from pathlib import Path

import yaml
from snakemake.utils import update_config

from loaderbench.config import (
    CELL_ID_PATTERN,
    cell_ids,
    cell_spec,
    dataset_source_dir,
    parse_cell_id,
    validate_config,
)
from loaderbench.util import stable_hash

DEFAULT_CONFIG = "config/quickstart.yaml"
# Every job calls the package through the Python running Snakemake (a virtualenv needs no activation).
LB = f"{sys.executable} -m loaderbench"

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


wildcard_constraints:
    cell=CELL_ID_PATTERN,
    tier="|".join(TIERS),


def source_fingerprint():
    """Changes when the source dataset changes, so staging reruns (Snakemake's params trigger)."""
    if GENERATED:
        return stable_hash({k: DATASET[k] for k in ("images", "classes", "seed", "quality")})
    n, size, mtime = 0, 0, 0
    stack = [DATASET["path"]]
    while stack:  # os.scandir: one stat per file, fast enough for ImageNet's 1.28M files
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # a missing source is reported by the check job, naming the key
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif e.is_file():
                st = e.stat()
                n, size, mtime = n + 1, size + st.st_size, max(mtime, st.st_mtime_ns)
    return f"{n}-{size}-{mtime}"


def get_source_input():
    """The generated tree is a job's output; a real source is tracked by its fingerprint instead, so that a
    dry run plans the grid before the dataset exists and the check job reports a missing path clearly."""
    return [f"resources/datasets/{DATASET['name']}"] if GENERATED else []


def get_cell_manifest(wildcards):
    return f"results/staging/{parse_cell_id(wildcards.cell)['tier']}.json"


def get_cell_spec(wildcards):
    return json.dumps(cell_spec(CFG, wildcards.cell).to_dict())


def get_cell_files():
    return expand("results/cells/{cell}.json", cell=CELLS)


def get_final_output():
    # Cell records are targets in their own right: a deleted or missing one is recomputed (with what depends
    # on it) even though the bundle already exists; an intermediate file alone would be left missing.
    return [*get_cell_files(), "results/tables/cells.csv", "results/bundle", "results/bundle.zip"]
