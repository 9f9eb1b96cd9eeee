# Tables, diagnosis and telemetry timelines -> figures (PNG for the report and the bundle, SVG beside each) in one
# folder. A figure whose inputs hold nothing it shows (a grid where nothing trained, or every cell failed) is not
# drawn: the folder's index (figures.json) names those drawn and why each other one was not, so the folder is the
# output, not a file per figure. The figures, their report categories and captions (workflow/report/<figure>.rst)
# come from one registry; the report's caption template (figure.rst) picks each figure's own from the params.
from loaderbench.report.figure_list import REGISTRY

FIGURE_CATEGORY = {fig.name: fig.category for fig in REGISTRY}


rule figures:
    input:
        table=R.table("cells.csv"),
        repeats=R.table("repeats.csv"),
        diagnosis=R.table("diagnosis.csv"),
        probe=R.table("tier_probe.csv"),
        whatif=rules.whatif.output.matrix,
        timelines=[R.timeline(c) for c in CELLS],
    output:
        figures=report(
            directory(R.figures),
            patterns=["{figure}.png"],
            caption="../report/figure.rst",
            category=lambda w: FIGURE_CATEGORY[w.figure],
            labels=lambda w: {"figure": w.figure.replace("_", " ")},
        ),
    log:
        "logs/figures.log",
    conda:
        HOST_ENV
    params:
        timeline_cells=CFG["timeline_cells"],  # a list: each cell id quoted
        captions={fig.name: fig.caption(f"{workflow.basedir}/workflow/report").read_text() for fig in REGISTRY},
    shell:
        "lb figures --table {input.table:q} --repeats {input.repeats:q} --diagnosis {input.diagnosis:q} "
        "--probe {input.probe:q} --whatif {input.whatif:q} --timelines {input.timelines:q} --timeline-cells {params.timeline_cells:q} "
        "--out-dir {output.figures:q} 2> {log}"
