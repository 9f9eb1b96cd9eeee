"""Cell ids and the configurations they repeat: `<config>_r<repeat>`."""

from __future__ import annotations

import re

REPEAT = re.compile(r"_r\d+$")


def configuration(cell_id: str) -> str:
    """The cell id without its repeat: the unit the table's median is taken over."""
    return REPEAT.sub("", cell_id)
