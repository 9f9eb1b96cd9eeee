# Tables -> figures (PNG for the report and the bundle, SVG beside each).


rule figures:
    input:
        table="results/tables/cells.csv",
        repeats="results/tables/repeats.csv",
    output:
        throughput=report(
            "results/figures/throughput.png",
            caption="../report/throughput.rst",
            category="Throughput",
            labels={"figure": "Samples/s by loader and tier"},
        ),
        speed=report(
            "results/figures/speed_heatmap.png",
            caption="../report/speed_heatmap.rst",
            category="Throughput",
            labels={"figure": "Speed heatmap"},
        ),
        table=report(
            "results/figures/seed_table.png",
            caption="../report/seed_table.rst",
            category="Tables",
            labels={"figure": "The seed's table"},
        ),
        svgs=multiext("results/figures/", "throughput.svg", "speed_heatmap.svg", "seed_table.svg"),
        html="results/figures/seed_table.html",
    log:
        "logs/figures.log",
    shell:
        "{LB} figures --table {input.table} --repeats {input.repeats} --out-dir results/figures 2> {log}"
