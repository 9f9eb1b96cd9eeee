# Cell records -> the seed's table (median of repeats, Speed, GPU Efficiency) and every repeat.


rule resolved_config:
    output:
        "results/config.json",
    params:
        config=json.dumps(CFG, sort_keys=True),
    log:
        "logs/resolved_config.log",
    shell:
        "printf '%s\\n' {params.config:q} > {output} 2> {log}"


rule aggregate:
    input:
        get_cell_files(),
    output:
        table="results/tables/cells.csv",
        repeats="results/tables/repeats.csv",
    params:
        baseline=json.dumps(CFG["baseline"]),
        spread_warn=CFG["spread_warn"],
    log:
        "logs/aggregate.log",
    shell:
        "{LB} aggregate --cells {input} --baseline {params.baseline:q} "
        "--spread-warn {params.spread_warn} --out-dir results/tables 2> {log}"
