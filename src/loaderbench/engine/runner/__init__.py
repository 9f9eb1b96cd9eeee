"""The cell job's side of a measurement: `runcell` (the job), `job` (its inputs and scratch files), `ranks` (the
measuring processes started and watched), `record` (the record built), `output` (the files written, a record kept and
restored), `hostlock` (one measurement at a time per host), `warmclient` (processes from the warm-start server),
`tier_run` (mount, eviction, rereads), `telemetry` (resource sampling and the timeline), `contention` (foreign load
during the window), `trace` (the cell's steps for Perfetto).
"""
