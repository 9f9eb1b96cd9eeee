#!/usr/bin/env bash
# Make, check and stage a config's dataset without Snakemake (on a GPU host before Snakemake is unpacked there).
# Writes exactly the files the pipeline's make_dataset/check_dataset/stage rules write, so a later Snakemake run
# finds them up to date. Usage: dev/gpu-host-prep.sh CONFIG
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
facts=$(python3 - "$1" <<'PY'
import shlex, sys
from loaderbench.core.config import dataset_source_dir, load_config
from loaderbench.core.layout import DATASETS, RESULTS as R
cfg = load_config(sys.argv[1], check_paths=True)
ds = cfg["dataset"]
print(f"name={shlex.quote(ds['name'])} images={ds['images']} classes={ds['classes']} seed={ds['seed']} "
      f"quality={ds['quality']} source={shlex.quote(str(dataset_source_dir(cfg)))} generated={int(ds['source'] == 'generated')}")
print("tiers=(" + " ".join(shlex.quote(f"{t}={cfg['storage'][t]['path']}") for t in cfg["tiers"]) + ")")
print(f"dataset_dir={shlex.quote(DATASETS + '/' + ds['name'])} check={shlex.quote(R.check)} "
      f"quarantine={shlex.quote(R.quarantine)}")
print("manifests=(" + " ".join(shlex.quote(R.manifest(t)) for t in cfg["tiers"]) + ")")
PY
) || { echo "gpu-host-prep: cannot read the config $1 with loaderbench here (the error is above)" >&2; exit 1; }
eval "$facts"
failed() { echo "gpu-host-prep: $1 failed; the end of $2:" >&2; tail -5 "$2" >&2; exit 1; }
mkdir -p logs/stage "$(dirname "$check")" "$(dirname "${manifests[0]}")"
if [ "$generated" = 1 ] && [ ! -d "$dataset_dir" ]; then
  python3 -m loaderbench make-dataset --out "$dataset_dir" --images "$images" --classes "$classes" \
    --seed "$seed" --quality "$quality" 2> logs/make_dataset.log || failed make-dataset logs/make_dataset.log
fi
python3 -m loaderbench check --source "$source" --out "$check" --quarantine "$quarantine" 2> logs/check_dataset.log ||
  failed check logs/check_dataset.log
for i in "${!tiers[@]}"; do
  t=${tiers[$i]}
  python3 -m loaderbench stage --check "$check" --tier "${t%%=*}" --tier-path "${t#*=}" \
    --dataset "$name" --out "${manifests[$i]}" 2> "logs/stage/${t%%=*}.log" || failed "stage ${t%%=*}" "logs/stage/${t%%=*}.log"
  tail -1 "logs/stage/${t%%=*}.log"
done
