# Tables, diagnosis and telemetry timelines -> figures (PNG for the report and the bundle, SVG beside each). The
# figures, their report categories and captions (workflow/report/<figure>.rst) come from one registry.
from loaderbench.report.figure_list import EXTRA_FILES, FIGURES, REGISTRY


rule figures:
    input:
        table=R.table("cells.csv"),
        repeats=R.table("repeats.csv"),
        diagnosis=R.table("diagnosis.csv"),
        probe=R.table("tier_probe.csv"),
        timelines=[R.timeline(c) for c in CELLS],
    output:
        **{
            fig.name: report(
                R.figure(fig.name, "png"),
                caption=f"../report/{fig.name}.rst",
                category=fig.category,
                labels={"figure": fig.name.replace("_", " ")},
            )
            for fig in REGISTRY
        },
        svgs=[R.figure(name, "svg") for name in FIGURES],
        extra=[f"{R.figures}/{name}" for name in EXTRA_FILES],
    log:
        "logs/figures.log",
    conda:
        HOST_ENV
    params:
        timeline_cells=CFG["timeline_cells"],  # a list: each cell id quoted
        out_dir=lambda w, output: os.path.dirname(output.svgs[0]),
    shell:
        "lb figures --table {input.table:q} --repeats {input.repeats:q} --diagnosis {input.diagnosis:q} "
        "--probe {input.probe:q} --timelines {input.timelines:q} --timeline-cells {params.timeline_cells:q} "
        "--out-dir {params.out_dir:q} 2> {log}"
