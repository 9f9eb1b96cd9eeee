"""A measuring process: `entry` (its entry point: order in, outcome out), `measure` (the cell's run), `window`
(warm-up and the timed window), `bursts` and `batchmeans` (when to stop, how sure), `metrics` and `runmetrics` (the
cell's numbers), `parallel` (dp and ddp), `parts` (the what-if's beside and ranks parts), `stepprofile` (a step
split on the GPU), `warmstart` (the fork server processes start from).

Importing this package imports none of its modules: `python -m loaderbench.engine.process.entry` must not find
its module imported before it runs.
"""
