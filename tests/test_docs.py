"""The docs describe the shipped configs as they are."""

from __future__ import annotations

import re

import yaml
from conftest import REPO

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config


def test_config_readme_describes_the_shipped_quickstart(tmp_path):
    raw = yaml.safe_load((REPO / "config/quickstart.yaml").read_text())
    cfg = validate_config(raw, base_dir=tmp_path)
    text = (REPO / "config/README.md").read_text()
    entry = re.search(r"^- `quickstart\.yaml`:(.*?)(?=^- |\Z)", text, re.MULTILINE | re.DOTALL).group(1)
    entry = " ".join(entry.split())
    assert f"{cfg['dataset']['images']} generated images" in entry, entry
    for tier in cfg["tiers"]:
        assert f"`{tier}`" in entry, (tier, entry)
    assert f"{len(cell_ids(cfg))} cells" in entry, entry
    assert "batch " + " and ".join(map(str, cfg["batch_sizes"])) in entry, entry
