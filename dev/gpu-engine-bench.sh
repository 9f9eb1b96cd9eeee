#!/usr/bin/env bash
# The measuring engine's benchmarks on a GPU host: the DataParallel probe, the dp/ddp grid of
# config/studies/h200x2-engine.yaml through the real pipeline, 3 interleaved repeats of synthetic and dali-cpu in separate
# processes, the ceiling check (synthetic cell vs bare loop), and where step-rate noise comes from (the synthetic cell
# with telemetry, placement or cuDNN autotuning off).
# Start it detached and poll for $DEST/DONE: setsid nohup dev/gpu-engine-bench.sh DEST > DEST.log 2>&1 &
# Needs DALI and Snakemake importable (PYTHONPATH) and LOADERBENCH_GIT_COMMIT when the tree has no .git.
set -u
DEST=${1:-engine-out}; mkdir -p "$DEST"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
C=${ENGINE_CONFIG:-config/studies/h200x2-engine.yaml}; B=${ENGINE_BATCH:-256}
step() { echo "== $(date +%T) $*" | tee -a "$DEST/steps.log"; }
step host
dev/host-facts.sh > "$DEST/host.txt" 2>&1
step dp probe
python3 benchmarks/dp_step.py --stock-steps 2 > "$DEST/dp_probe.json" 2> "$DEST/dp_probe.log"
step pipeline
t0=$SECONDS
python3 -m snakemake --cores "$(nproc)" --configfile "$C" > "$DEST/snakemake.log" 2>&1
echo "pipeline wall $((SECONDS - t0)) s" | tee -a "$DEST/steps.log"
step repeats
python3 -m loaderbench sweep --config "$C" --tier ram --batch-size "$B" --precision amp --loaders synthetic dali-cpu \
  --repeats 3 --variant base: --out results/sweep-repeats > "$DEST/repeats.log" 2>&1
step ceiling
python3 -m loaderbench ceiling --config "$C" --batch-size "$B" --precision amp --rounds 2 --variant-steps 0 \
  --json "$DEST/ceiling.json" > "$DEST/ceiling.log" 2>&1
step noise: the synthetic cell, fixed 10 s windows, as configured / telemetry off / placement off / both off / no autotuning
F=window_s=10,window_max_s=null
python3 -m loaderbench sweep --config "$C" --tier ram --batch-size "$B" --precision amp --loaders synthetic \
  --variant "base:$F" --variant "notel:$F,telemetry_hz=0" --variant "nopin:$F,placement=off" \
  --variant "neither:$F,telemetry_hz=0,placement=off" --variant "nobench:$F,cudnn_benchmark=false" \
  --out results/sweep-noise > "$DEST/noise.log" 2>&1
step reports
python3 -m loaderbench engine-report --cells results/cells --ceiling "$DEST/ceiling.json" --json "$DEST/engine-report.json" > "$DEST/engine-report.txt" 2>&1
python3 -m loaderbench engine-report --cells results/sweep-repeats/base > "$DEST/repeats-report.txt" 2>&1
for v in base notel nopin neither nobench; do echo "-- $v"; python3 -m loaderbench engine-report --cells "results/sweep-noise/$v"; done > "$DEST/noise-report.txt" 2>&1
tar czf "$DEST/results.tgz" results/cells results/telemetry results/tables results/bundle results/sweep-repeats \
  results/sweep-noise results/ceiling logs "$DEST"/*.log "$DEST"/*.txt "$DEST"/*.json 2>/dev/null
step done
touch "$DEST/DONE"
