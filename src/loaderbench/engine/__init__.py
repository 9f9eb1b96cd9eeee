"""The measuring engine: one cell job from start to record, split where its processes split.

- `runner/`: the cell job's side (the Snakemake job, `run-cell`): `runcell` runs the job under the host lock
  (`hostlock`) from its inputs (`job`), prepares the tier (`tier_run`), starts the measuring processes (`ranks`),
  forked by the warm-start server (`warmclient`) or fresh, watches them (`telemetry`, `contention`, the heartbeats),
  builds the record (`record`) and writes it, its timeline and its trace (`output`, `trace`).
- `process/`: a measuring process: `entry` takes its order, trains the cell (`measure`: the loader, the step,
  `parallel` for dp and ddp) for a timed window (`window`, `bursts`, `batchmeans`), turns it into the cell's
  metrics (`metrics`, `runmetrics`), splits a step on the GPU (`stepprofile`), and hands back its outcome;
  `warmstart` is the fork server those processes start from.
- shared by both: `contract` (the order and the outcome they exchange, and the warm-start protocol), `watchdog`
  (heartbeats and stall rules), `placement` (threads on cores), `step` (the training step and the devices).

Importing this package imports none of its modules (a module run with `python -m` must not be imported before it
runs); `run_cell` is imported on first use.
"""

from loaderbench.core.util import lazy_exports

_EXPORTS = {"run_cell": "runner.runcell"}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the names lazy_exports serves
__getattr__ = lazy_exports(__name__, _EXPORTS)
