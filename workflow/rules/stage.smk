# Stage the checked dataset onto every configured tier (mount point) and write each tier's manifest.

# The shards' layout is a param only when shards are staged: a change rewrites them, and a run without shards keeps
# the params (and so the staged tiers and measured cells) it had before shards existed.
SHARD_PARAMS = (
    {"shards": json.dumps({k: CFG["shards"][k] for k in ("size_mb", "min_shards", "seed", "files")})}
    if CFG["shards"]["stage"]
    else {}
)
SHARD_OPTION = "--shards {params.shards:q}" if SHARD_PARAMS else ""


rule stage:
    input:
        R.check,
    output:
        R.manifest("{tier}"),
    log:
        "logs/stage/{tier}.log",
    conda:
        HOST_ENV
    resources:
        bench_slot=1,  # never beside a cell: copying a tier's files takes the CPUs and disks a cell measures
    params:
        **SHARD_PARAMS,
        tier_path=lambda w: CFG["storage"][w.tier]["path"],
        dataset=DATASET["name"],
        verify="--verify" if CFG["staging"]["verify"] else "",
    shell:
        "lb stage --check {input} --tier {wildcards.tier} --tier-path {params.tier_path:q} "
        f"--dataset {{params.dataset:q}} --out {{output:q}} {{params.verify}} {SHARD_OPTION} 2> {{log:q}}"


# The measured read rate of each tier, read as the cells read it (an emulated tier through its mount), cold.
rule probe_tier:
    input:
        R.manifest("{tier}"),
    output:
        R.probe("{tier}"),
    log:
        "logs/probe/{tier}.log",
    priority: 50  # before the cells, which are ready as soon as the tier is staged: said first, measured first
    conda:
        HOST_ENV
    resources:
        bench_slot=1,  # never beside a cell: both measure the same devices
    params:
        tier=lambda w: json.dumps(CFG["storage"][w.tier]),
        readers=" ".join(map(str, CFG["probe"]["readers"])),
        max_files=f"--max-files {CFG['probe']['max_files']}" if CFG["probe"]["max_files"] else "",
        max_seconds=CFG["probe"]["max_seconds"],
        sequential_mb=CFG["probe"]["sequential_mb"],
    shell:
        "lb_probe probe-tier --manifest {input} --tier {params.tier:q} --readers {params.readers} {params.max_files} "
        "--max-seconds {params.max_seconds} --sequential-mb {params.sequential_mb} --out {output} 2> {log} && cat {log}"
