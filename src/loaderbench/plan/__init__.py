"""Before and between runs: what a grid will cost (`predict`, from the `costmodel`, the host's records read by
`hostrecords` and the measured `fixedcosts` of a host) and which cells to measure again: configurations whose
repeats disagree (`respread`), and cells measured on another boot, code or stack than the rest (`regroup`)."""

from loaderbench.core.util import lazy_exports

_EXPORTS = {"workflow_cells": "predict"}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
