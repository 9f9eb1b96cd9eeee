#!/usr/bin/env bash
# One run's GPU work for the engine and the study on a host with 2 GPUs, detached (setsid),
# so that no call's time limit cuts a cell. In order of priority:
#   1. dev/reuse-check.sh: kept dp processes against fresh ones (torchvision, synthetic, dali-cpu; 4 rounds). If a
#      cell fails, or kept/fresh is off by more than REUSE_TOLERANCE (default 0.10, the drift seen between
#      processes), host.reuse_processes is turned off in this copy's two configs below, and steps.log says so.
#      REUSE_CHECK=0 skips it (kept processes stay as the configs say).
#   2. `loaderbench ceiling` (the engine's config): the synthetic cell against a pinned bare loop.
#   3. the engine grid (ENGINE, default config/studies/h200x2-engine.yaml) through the pipeline (`gpu-study.sh start`, ENGINE_MIN minutes at most), packed.
#   4. the study (STUDY, default config/studies/h200x2-study.yaml): the engine run's records move to DEST/engine-results
#      (its pack has them), the records in RESUME (default: the finished study's bundle, docs/results/2026-12-01-h200x2/study; RESUME=none: no records) are copied in
#      and adopted, then the study's missing cells run until END_MIN minutes after this script started.
# On a host with one GPU: REUSE_CHECK=0 STUDY=config/studies/h200-sweep.yaml RESUME=none (the engine's 2-GPU cells are
# recorded `skipped`, with the reason).
# Run after `gpu-study.sh setup` and `prep DEST` (the study's dataset and tiers). DEST/steps.log says what ran;
# DEST/DONE marks the end. Poll with `dev/gpu-study.sh wait DEST SECONDS OUT` (it packs DEST and the records);
# stop with `dev/gpu-study.sh stop DEST`.
# Environment: LOADERBENCH_GIT_COMMIT names the code in every record.
# Usage: dev/gpu-round.sh DEST END_MIN
set -u
cd "$(dirname "$0")/.."
# the project and the carried bundles (DALI, Snakemake) for every step, `loaderbench adopt` included
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
[ $# -eq 2 ] || { sed -n '2,15p' "$0"; exit 2; }
dest=$1 end_min=$2
mkdir -p "$dest"
setsid nohup bash -c '
  dest=$1; end_min=$2
  echo $$ > "$dest/driver.pid"  # `dev/gpu-study.sh stop DEST` ends this run and the runs it started
  step() { echo "== $(date +%T) $*" | tee -a "$dest/steps.log"; }
  engine=${ENGINE:-config/studies/h200x2-engine.yaml} study=${STUDY:-config/studies/h200x2-study.yaml}
  if [ "${REUSE_CHECK:-1}" = 0 ]; then step "reuse check skipped (REUSE_CHECK=0)"; else
  step reuse check; mkdir -p "$dest/reuse"
  dev/reuse-check.sh "$study" "$dest/reuse" torchvision_ram_g1_b256_amp_dp_r0 synthetic_ram_g1_b256_amp_dp_r0 \
    dali-cpu_ram_g1_b256_amp_dp_r0 > "$dest/reuse/table.txt" 2>&1
  cat "$dest/reuse/table.txt" >> "$dest/steps.log"
  verdict=$(python3 - "$dest/reuse/table.txt" "${REUSE_TOLERANCE:-0.10}" <<EOF
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"kept / fresh, median over (\d+) cells: ([0-9.]+) \(range ([0-9.]+)-([0-9.]+)\)", text)
tol = float(sys.argv[2])
ok = m and int(m.group(1)) == 3 and ": failed" not in text and ": stalled" not in text \
    and 1 - tol <= float(m.group(3)) and float(m.group(4)) <= 1 + tol
print("keep" if ok else "off")
EOF
)
  if [ "$verdict" != keep ]; then
    sed -i "s/^  reuse_processes: true/  reuse_processes: false/" "$engine" "$study"
    step "kept processes OFF for the rest: the check above is outside +-${REUSE_TOLERANCE:-0.10} or a cell failed"
  else step "kept processes stay on"; fi
  fi
  step ceiling
  CONFIG=$engine dev/gpu-study.sh ceiling "$dest/ceiling" > /dev/null 2>&1
  tail -4 "$dest/ceiling/ceiling.log" >> "$dest/steps.log"
  step engine
  CONFIG=$engine dev/gpu-study.sh start "$dest/engine" "${ENGINE_MIN:-9}" > /dev/null
  until [ -f "$dest/engine/DONE" ]; do sleep 5; done
  dev/gpu-study.sh pack "$dest/engine" "$dest/engine-out" > /dev/null 2>&1
  cat "$dest/engine/steps.log" >> "$dest/steps.log"
  step study
  resume=${RESUME:-docs/results/2026-12-01-h200x2/study/bundle}
  # the study sees its own records only: the engine measured some of its cells under other settings
  mkdir -p "$dest/engine-results" results/cells results/telemetry
  mv results/cells results/telemetry "$dest/engine-results/"
  mkdir -p results/cells results/telemetry
  if [ "$resume" != none ]; then
    cp "$resume"/cells/*.json results/cells/
    cp "$resume"/telemetry/* results/telemetry/ 2>/dev/null
  fi
  # adopt also clears the params Snakemake stored for these outputs when the engine measured the same cell ids under
  # other settings (2026-12-01: without it, 11 cells and 3 minutes of GPU time were measured again)
  python3 -m loaderbench adopt --config "$study" >> "$dest/steps.log" 2>&1
  left=$(( end_min - SECONDS / 60 ))
  step "study: $left minutes"
  CONFIG=$study dev/gpu-study.sh start "$dest/study" "$left" > /dev/null
  until [ -f "$dest/study/DONE" ]; do sleep 5; done
  cat "$dest/study/steps.log" >> "$dest/steps.log"
  dev/gpu-study.sh pack "$dest/study" "$dest/study-out" > /dev/null 2>&1
  step done; touch "$dest/DONE"' _ "$dest" "$end_min" > "$dest/driver.log" 2>&1 < /dev/null &
echo "started; poll with: dev/gpu-study.sh wait $dest SECONDS OUT"
