# Stage the checked dataset onto every configured tier (mount point) and write each tier's manifest.


rule stage:
    input:
        "results/dataset/check.json",
    output:
        "results/staging/{tier}.json",
    params:
        tier_path=lambda w: CFG["storage"][w.tier],
        dataset=DATASET["name"],
    log:
        "logs/stage/{tier}.log",
    shell:
        "{LB} stage --check {input} --tier {wildcards.tier} --tier-path {params.tier_path:q} "
        "--dataset {params.dataset} --out {output} 2> {log}"
