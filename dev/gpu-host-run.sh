#!/usr/bin/env bash
# Run the pipeline on a GPU host that has torch/torchvision/OpenCV but no internet, then pack the results.
# Usage: dev/gpu-host-run.sh OUT_DIR [extra snakemake args...]
#   SITE=/tmp/site  an unpacked offline bundle (Snakemake + jsonschema), see docs/results/*/README.md
#   LOADERBENCH_GIT_COMMIT=<sha>  recorded in every cell where the copied tree has no .git
# Writes OUT_DIR/results.tar.gz (bundle, tables, cell records, logs) and OUT_DIR/host.txt (versions, GPU).
set -euo pipefail
out=$1; shift
cd "$(dirname "$0")/.."
export PYTHONPATH="${SITE:-/tmp/site}:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  python3 -c 'import sys, torch, torchvision, cv2, snakemake; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torchvision.__version__, cv2.__version__, snakemake.__version__)'
  nproc; free -g | sed -n 2p; df -h /dev/shm . | tail -2
} | tee "$out/host.txt"
python3 -m snakemake --cores "$(nproc)" "$@" 2>&1 | tee "$out/snakemake.log" | grep -E "^cell |steps \(|Error|error" || true
test -f results/bundle/index.html
tar -czf "$out/results.tar.gz" results/bundle results/bundle.zip results/tables results/cells logs
