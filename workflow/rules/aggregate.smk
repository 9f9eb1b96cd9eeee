# Cell records -> the seed's table (median of repeats, Speed, GPU Efficiency) and every repeat.


rule resolved_config:
    output:
        R.config,
    log:
        "logs/resolved_config.log",
    conda:
        HOST_ENV
    params:
        config=json.dumps(CFG, sort_keys=True),
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
        parts=R.table("parts.csv"),
    log:
        "logs/aggregate.log",
    conda:
        HOST_ENV
    params:
        baseline=json.dumps(CFG["baseline"]),
        spread_warn=CFG["spread_warn"],
        ledger=R.respread_ledger,
        tables=lambda w, output: os.path.dirname(output.table),
    shell:
        "lb aggregate --cells {input.cells} --probes {input.probes} --baseline {params.baseline:q} "
        "--spread-warn {params.spread_warn} --ledger {params.ledger:q} --out-dir {params.tables:q} 2> {log}"


rule diagnose:
    input:
        R.table("cells.csv"),
    output:
        table=R.table("diagnosis.csv"),
        recommendations=R.table("recommendations.json"),
        markdown=R.table("diagnosis.md"),
        verdict=R.table("verdict.json"),
    log:
        "logs/diagnose.log",
    conda:
        HOST_ENV
    params:
        baseline=json.dumps(CFG["baseline"]),
        tables=lambda w, output: os.path.dirname(output.table),
    shell:
        "lb diagnose --table {input:q} --baseline {params.baseline:q} --out-dir {params.tables:q} 2> {log}"
