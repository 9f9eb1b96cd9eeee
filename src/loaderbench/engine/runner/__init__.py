"""The cell job's side of a measurement: `runcell` (the job: processes, record), `hostlock` (one measurement at a
time per host), `warmclient` (processes from the warm-start server), `tier_run` (mount, eviction, rereads),
`telemetry` (resource sampling and the timeline), `contention` (foreign load during the window).
"""
