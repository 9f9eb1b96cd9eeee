# Cell records -> the seed's table (median of repeats, Speed, GPU Efficiency) and every repeat.


rule resolved_config:
    output:
        R.config,
    params:
        config=json.dumps(CFG, sort_keys=True),
    log:
        "logs/resolved_config.log",
    shell:
        "printf '%s\\n' {params.config:q} > {output} 2> {log}"


rule aggregate:
    input:
        cells=get_cell_files(),
        probes=[R.probe(t) for t in TIERS],
    output:
        table=R.table("cells.csv"),
        repeats=R.table("repeats.csv"),
        probe=R.table("tier_probe.csv"),
    params:
        baseline=json.dumps(CFG["baseline"]),
        spread_warn=CFG["spread_warn"],
        ledger=R.respread_ledger,
        tables=R.tables,
    log:
        "logs/aggregate.log",
    shell:
        "{LB} aggregate --cells {input.cells} --probes {input.probes} --baseline {params.baseline:q} "
        "--spread-warn {params.spread_warn} --ledger {params.ledger:q} --out-dir {params.tables:q} 2> {log}"


rule diagnose:
    input:
        R.table("cells.csv"),
    output:
        table=R.table("diagnosis.csv"),
        recommendations=R.table("recommendations.json"),
        markdown=R.table("diagnosis.md"),
    params:
        baseline=json.dumps(CFG["baseline"]),
        tables=R.tables,
    log:
        "logs/diagnose.log",
    shell:
        "{LB} diagnose --table {input:q} --baseline {params.baseline:q} --out-dir {params.tables:q} 2> {log}"
