#!/usr/bin/env bash
# Make, check and stage a config's dataset without Snakemake (on a GPU host before Snakemake is unpacked there).
# Writes exactly the files the pipeline's make_dataset/check_dataset/stage rules write, so a later Snakemake run
# finds them up to date. Usage: scripts/gpu-host-prep.sh CONFIG
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
eval "$(python3 - "$1" <<'PY'
import shlex, sys
from loaderbench.config import dataset_source_dir, load_config
cfg = load_config(sys.argv[1], check_paths=True)
ds = cfg["dataset"]
print(f"name={shlex.quote(ds['name'])} images={ds['images']} classes={ds['classes']} seed={ds['seed']} "
      f"quality={ds['quality']} source={shlex.quote(str(dataset_source_dir(cfg)))} generated={int(ds['source'] == 'generated')}")
print("tiers=(" + " ".join(shlex.quote(f"{t}={cfg['storage'][t]['path']}") for t in cfg["tiers"]) + ")")
PY
)"
mkdir -p logs/stage results/dataset results/staging
if [ "$generated" = 1 ] && [ ! -d "resources/datasets/$name" ]; then
  python3 -m loaderbench make-dataset --out "resources/datasets/$name" --images "$images" --classes "$classes" \
    --seed "$seed" --quality "$quality" 2> logs/make_dataset.log
fi
python3 -m loaderbench check --source "$source" --out results/dataset/check.json \
  --quarantine results/dataset/quarantine 2> logs/check_dataset.log
for t in "${tiers[@]}"; do
  python3 -m loaderbench stage --check results/dataset/check.json --tier "${t%%=*}" --tier-path "${t#*=}" \
    --dataset "$name" --out "results/staging/${t%%=*}.json" 2> "logs/stage/${t%%=*}.log"
  tail -1 "logs/stage/${t%%=*}.log"
done
