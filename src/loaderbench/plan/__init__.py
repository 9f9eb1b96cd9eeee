"""Before and between runs: what a grid will cost (`predict`, from the `costmodel` and the measured `fixedcosts` of a
host) and which configurations to measure again because their repeats disagree (`respread`)."""

from .predict import workflow_cells

__all__ = ["workflow_cells"]
