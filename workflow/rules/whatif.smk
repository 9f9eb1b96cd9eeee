# Cell records -> the what-if: every loader x model predicted from its parts (each loader alone, each model's
# ceiling, the beside and rank parts) at the config's GPU counts, and the checks (config key whatif.checks) scored.


rule whatif:
    input:
        cells=get_cell_files(),
    output:
        matrix=R.table("whatif.csv"),
        scores=R.table("whatif_scores.json"),
    log:
        "logs/whatif.log",
    conda:
        HOST_ENV
    params:
        gpus=WHATIF_GPUS,  # a list: each count a word
        tables=lambda w, output: os.path.dirname(output.matrix),
    shell:
        "lb whatif --cells {input.cells} --gpus {params.gpus} --out-dir {params.tables:q} 2> {log}"
