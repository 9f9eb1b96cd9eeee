# Everything a reader needs in one folder (index.html) and one zip.


rule bundle:
    input:
        config=R.config,
        tables=[*rules.aggregate.output, *rules.diagnose.output, *rules.whatif.output],
        figures=rules.figures.output.figures,
        check=R.check,
        check_report=R.check_report,
        manifests=[R.manifest(t) for t in TIERS],
        cells=get_cell_files(),
        timelines=[R.timeline(c) for c in CELLS],
        traces=[R.trace(c) for c in CELLS],  # copied from the paths the records give (bundle.py)
        crosscheck=get_crosscheck(),
    output:
        bundle=directory(R.bundle),
        zip=R.bundle_zip,
    log:
        "logs/bundle.log",
    conda:
        HOST_ENV
    params:
        captions=f"{workflow.basedir}/workflow/report",
    shell:
        "lb bundle --config-json {input.config:q} --tables {input.tables:q} --figures {input.figures:q} "
        "--check {input.check:q} --check-report {input.check_report:q} --manifests {input.manifests:q} "
        "--cells {input.cells:q} --captions {params.captions:q} --timelines {input.timelines:q} "
        "--crosscheck {input.crosscheck:q} "
        "--out-dir {output.bundle:q} --zip {output.zip:q} 2> {log} && cat {log}"
