# loaderbench: where is the input-pipeline bottleneck of GPU training, and what fixes it?
# Default grid: config/quickstart.yaml (small, runs anywhere). The seed's grid:
#   snakemake --configfile config/config.yaml
# The default profile (profiles/default) runs cells one at a time and keeps going past failed jobs.
from snakemake.utils import min_version

min_version("8.20")


include: "workflow/rules/common.smk"
include: "workflow/rules/dataset.smk"
include: "workflow/rules/stage.smk"
include: "workflow/rules/cells.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/whatif.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/bundle.smk"


report: "workflow/report/workflow.rst"


# Everything but the cells runs where Snakemake runs (no container, no cluster job). The tier probe too: on a
# cluster it measures the tiers as the submit host sees them (the same paths the compute nodes must see).
localrules:
    make_dataset,
    check_dataset,
    stage,
    probe_tier,
    resolved_config,
    aggregate,
    diagnose,
    whatif,
    figures,
    bundle,
    all,


rule all:
    input:
        get_final_output(),
