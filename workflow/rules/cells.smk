# One job per cell: loader x tier x gpus x batch x precision x repeat. The job always writes a record
# (ok, skipped or failed with its reason), atomically. `bench_slot` (profiles/default) keeps cells from
# running at the same time, which would make them compete for the CPUs and GPUs they measure.


rule cell:
    input:
        manifest=get_cell_manifest,
    output:
        "results/cells/{cell}.json",
    params:
        spec=get_cell_spec,
    log:
        "logs/cells/{cell}.log",
    resources:
        bench_slot=1,
    shell:
        "{LB} run-cell --spec {params.spec:q} --manifest {input.manifest} --out {output} 2>&1 | tee {log}"
