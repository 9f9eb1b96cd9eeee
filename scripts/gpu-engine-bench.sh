#!/usr/bin/env bash
# The measuring engine's benchmarks on a GPU host (issue 13): the DataParallel probe, the dp/ddp grid of
# config/h200x2-engine.yaml through the real pipeline, 3 interleaved repeats of synthetic and dali-cpu in separate
# processes, cuDNN autotuning on/off for the synthetic cell, and the ceiling check (synthetic cell vs bare loop).
# Start it detached and poll for $DEST/DONE: setsid nohup scripts/gpu-engine-bench.sh DEST > DEST.log 2>&1 &
# Needs DALI and Snakemake importable (PYTHONPATH) and LOADERBENCH_GIT_COMMIT when the tree has no .git.
set -u
DEST=${1:-engine-out}; mkdir -p "$DEST"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
C=${ENGINE_CONFIG:-config/h200x2-engine.yaml}; B=${ENGINE_BATCH:-256}
step() { echo "== $(date +%T) $*" | tee -a "$DEST/steps.log"; }
step host
{ nvidia-smi; nvidia-smi topo -m; nproc; free -g; python3 -c 'import sys, torch, torchvision, nvidia.dali, snakemake;
print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version());
print("torchvision", torchvision.__version__, "dali", nvidia.dali.__version__, "snakemake", snakemake.__version__)'; env | grep -E '^(NCCL|TORCH|NVSHMEM)_' ; } > "$DEST/host.txt" 2>&1
step dp probe
python3 scripts/dp_probe.py > "$DEST/dp_probe.json" 2> "$DEST/dp_probe.log"
step pipeline
t0=$SECONDS
python3 -m snakemake --cores "$(nproc)" --configfile "$C" > "$DEST/snakemake.log" 2>&1
echo "pipeline wall $((SECONDS - t0)) s" | tee -a "$DEST/steps.log"
step repeats
python3 -m loaderbench sweep --config "$C" --tier ram --batch-size "$B" --precision amp --loaders synthetic dali-cpu \
  --repeats 3 --variant base: --out results/sweep-repeats > "$DEST/repeats.log" 2>&1
step cudnn autotuning on/off
python3 -m loaderbench sweep --config "$C" --tier ram --batch-size "$B" --precision amp --loaders synthetic \
  --variant bench: --variant nobench:cudnn_benchmark=false --out results/sweep-cudnn > "$DEST/cudnn.log" 2>&1
step ceiling
python3 -m loaderbench ceiling --config "$C" --batch-size "$B" --precision amp --rounds 3 --variant-steps 0 \
  --json "$DEST/ceiling.json" > "$DEST/ceiling.log" 2>&1
step reports
python3 -m loaderbench engine-report --cells results/cells --ceiling "$DEST/ceiling.json" --json "$DEST/engine-report.json" > "$DEST/engine-report.txt" 2>&1
python3 -m loaderbench engine-report --cells results/sweep-repeats/base > "$DEST/repeats-report.txt" 2>&1
python3 -m loaderbench engine-report --cells results/sweep-cudnn/bench >> "$DEST/cudnn-report.txt" 2>&1
python3 -m loaderbench engine-report --cells results/sweep-cudnn/nobench >> "$DEST/cudnn-report.txt" 2>&1
tar czf "$DEST/results.tgz" results/cells results/telemetry results/tables results/bundle results/sweep-repeats \
  results/sweep-cudnn results/ceiling logs "$DEST"/*.log "$DEST"/*.txt "$DEST"/*.json 2>/dev/null
step done
touch "$DEST/DONE"
