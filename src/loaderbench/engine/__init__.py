"""The measuring engine: one cell job from start to record.

`runcell` starts the measuring processes (forked by the `warmstart` server or fresh) under the host lock
(`hostlock`), watches them (`watchdog`, `telemetry`, `contention`) and writes the record; each process trains
(`train`: the loader, the model's step, `parallel` for dp and ddp, `placement` of threads on cores) for a timed
window (`window`) and turns it into the cell's metrics (`metrics`); `stepprofile` splits a step on the GPU.
Importing this package imports none of its modules (a module run with `python -m` must not be imported before it
runs); `run_cell` is imported on first use.
"""

from loaderbench.core.util import lazy_exports

_EXPORTS = {"run_cell": "runcell"}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
