# Everything a reader needs in one folder (index.html) and one zip.


rule bundle:
    input:
        config="results/config.json",
        tables=rules.aggregate.output,
        figures=rules.figures.output,
        check="results/dataset/check.json",
        manifests=expand("results/staging/{tier}.json", tier=TIERS),
        cells=get_cell_files(),
        diagnosis=rules.diagnose.output,
        timelines=expand("results/telemetry/{cell}.csv", cell=CELLS),
    output:
        bundle=directory("results/bundle"),
        zip="results/bundle.zip",
    params:
        captions=f"{workflow.basedir}/workflow/report",
    log:
        "logs/bundle.log",
    shell:
        "{LB} bundle --config-json {input.config} --tables results/tables --figures results/figures "
        "--check {input.check} --manifests {input.manifests} --cells {input.cells} --captions {params.captions:q} "
        "--telemetry results/telemetry --out-dir {output.bundle} --zip {output.zip} 2> {log} && cat {log}"
