"""loaderbench: where is the input-pipeline bottleneck of GPU training, and what fixes it."""

__version__ = "0.1.0"
