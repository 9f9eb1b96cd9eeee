"""Measurements outside the grid, each against a reference: loader-only throughput (`bench`), the compute ceiling
against a bare training loop (`ceiling`), a loader's cell against a bare loop of the same loader (`crosscheck`),
settings sweeps (`sweep`) and a loader's settings searched (`tune`: `tuneknobs` what it searches, `tunereport` its
report)."""
