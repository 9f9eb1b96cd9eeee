# One job per cell: loader x tier x gpus x batch x precision x parallel mode x repeat. The job always writes a record
# (ok, skipped or failed with its reason), atomically. `bench_slot` (profiles/default) keeps cells from
# running at the same time, which would make them compete for the CPUs and GPUs they measure; the host lock
# (HOST_ARGS, config `host:`) keeps any other measurement on the host (a second pipeline, a shell) out too.
# With --use-singularity the job runs in the cell container (config key container.image); under
# --executor slurm it is one Slurm job with the resources below.


rule cell:
    input:
        manifest=get_cell_manifest,
    output:
        record=R.cell("{cell}"),
        timeline=R.timeline("{cell}"),
        trace=R.trace("{cell}"),
    log:
        "logs/cells/{cell}.log",
    container:
        CFG["container"]["image"]
    resources:
        **SLURM_PLACEMENT,
        bench_slot=1,
        gpu=lambda w: cell_gpus(w) if SLURM["request_gpus"] else 0,
        cpus_per_task=lambda w: SLURM["cpus_per_gpu"] * cell_gpus(w),
        mem_mb=lambda w: SLURM["mem_mb_per_gpu"] * cell_gpus(w),
        runtime=SLURM["runtime_min"],
    params:
        spec=get_cell_spec,  # the cell's identity: a changed spec re-measures the cell, nothing else does
    shell:
        "lb_cell run-cell --spec {params.spec:q} --manifest {input.manifest:q} --out {output.record:q} "
        "--timeline {output.timeline:q} --trace {output.trace:q} 2>&1 | tee {log:q}"
