# Tables, diagnosis and telemetry timelines -> figures (PNG for the report and the bundle, SVG beside each).
# Each figure's caption is workflow/report/<figure>.rst, shared by Snakemake's --report and the bundle.
from loaderbench.figures import FIGURES

FIGURE_CATEGORIES = {
    "throughput": "Throughput", "speed_heatmap": "Throughput", "scaling": "Throughput", "batch_effect": "Throughput",
    "seed_table": "Tables", "stall_bars": "Bottlenecks", "au_bars": "Bottlenecks", "timelines": "Bottlenecks",
    "memory": "Memory", "tier_probe": "Storage",
}  # fmt: skip


rule figures:
    input:
        table="results/tables/cells.csv",
        repeats="results/tables/repeats.csv",
        diagnosis="results/tables/diagnosis.csv",
        probe="results/tables/tier_probe.csv",
        timelines=expand("results/telemetry/{cell}.csv", cell=CELLS),
    output:
        **{
            name: report(
                f"results/figures/{name}.png",
                caption=f"../report/{name}.rst",
                category=FIGURE_CATEGORIES[name],
                labels={"figure": name.replace("_", " ")},
            )
            for name in FIGURES
        },
        svgs=expand("results/figures/{name}.svg", name=FIGURES),
        html="results/figures/seed_table.html",
    params:
        timeline_cells=CFG["timeline_cells"],  # a list: each cell id quoted
    log:
        "logs/figures.log",
    shell:
        "{LB} figures --table {input.table} --repeats {input.repeats} --diagnosis {input.diagnosis} "
        "--telemetry results/telemetry --timeline-cells {params.timeline_cells:q} --out-dir results/figures 2> {log}"
