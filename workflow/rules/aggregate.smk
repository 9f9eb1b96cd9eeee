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
        cells=get_cell_files(),
        probes=expand("results/probe/{tier}.json", tier=TIERS),
    output:
        table="results/tables/cells.csv",
        repeats="results/tables/repeats.csv",
        probe="results/tables/tier_probe.csv",
    params:
        baseline=json.dumps(CFG["baseline"]),
        spread_warn=CFG["spread_warn"],
    log:
        "logs/aggregate.log",
    shell:
        "{LB} aggregate --cells {input.cells} --probes {input.probes} --baseline {params.baseline:q} "
        "--spread-warn {params.spread_warn} --out-dir results/tables 2> {log}"


rule diagnose:
    input:
        "results/tables/cells.csv",
    output:
        table="results/tables/diagnosis.csv",
        recommendations="results/tables/recommendations.json",
        markdown="results/tables/diagnosis.md",
    params:
        baseline=json.dumps(CFG["baseline"]),
    log:
        "logs/diagnose.log",
    shell:
        "{LB} diagnose --table {input} --baseline {params.baseline:q} --out-dir results/tables 2> {log}"
