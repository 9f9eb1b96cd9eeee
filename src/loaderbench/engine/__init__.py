"""The measuring engine: one cell job from start to record.

`runcell` starts the measuring processes (forked by the `warmstart` server or fresh) under the host lock
(`hostlock`), watches them (`watchdog`, `telemetry`, `contention`) and writes the record; each process trains
(`train`: the loader, the model's step, `parallel` for dp and ddp, `placement` of threads on cores) for a timed
window (`window`) and turns it into the cell's metrics (`metrics`); `stepprofile` splits a step on the GPU.
Importing this package imports no torch; `train` and the modules it uses do.
"""

from .runcell import run_cell

__all__ = ["run_cell"]
