# The dataset source: generated (ImageNet-like JPEG tree) or a real ImageFolder tree; checked once.


rule make_dataset:
    output:
        directory(f"{DATASETS}/{DATASET['name']}"),
    log:
        "logs/make_dataset.log",
    conda:
        HOST_ENV
    params:
        images=DATASET["images"],
        classes=DATASET["classes"],
        seed=DATASET["seed"],
        quality=DATASET["quality"],
    shell:
        "lb make-dataset --out {output:q} --images {params.images} --classes {params.classes} "
        "--seed {params.seed} --quality {params.quality} 2> {log}"


rule check_dataset:
    input:
        get_source_input(),
    output:
        check=R.check,
        report=R.check_report,
    log:
        "logs/check_dataset.log",
    conda:
        HOST_ENV
    params:
        root=str(dataset_source_dir(CFG)),
        fingerprint=source_fingerprint(),
        strict="--strict" if CFG["strict"] else "",
        quarantine=R.quarantine,
    # the report's summary (counts, issues, what was left out) in the run's output, once; its per-file lines stay in
    # the report
    shell:
        "lb check --source {params.root:q} --out {output.check:q} "
        "--quarantine {params.quarantine:q} {params.strict} 2> {log} && grep -v '^  ' {output.report:q}"
