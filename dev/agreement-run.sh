#!/usr/bin/env bash
# One run on a 1-GPU host: does the harness slow the loader it measures? In order of importance:
#   1. the torchvision cell at PyTorch's ImageNet example's settings, before (the code in .before/src, a git archive
#      of the commit before the endless sampler) and after, interleaved;
#   2. `loaderbench crosscheck` of config/studies/h200-peers.yaml (cells against bare loops), then PyTorch's ImageNet example
#      and DALI's ResNet-50 example (mixed and --dali_cpu), unmodified from .peers/, on a hard-linked view of the same
#      staged files (benchmarks/peers.py);
#   3. `loaderbench crosscheck` of config/studies/h200-agreement.yaml: every loader, fp32 and amp, at default settings;
#   4. a sweep of thread placement (auto against off) at the peers' settings.
# Start it detached and poll with `dev/gpu-study.sh wait DEST SECONDS`:
#   setsid nohup dev/agreement-run.sh DEST > DEST.log 2>&1 < /dev/null &
# STEPS picks and orders the parts (default: before-after peers crosscheck placement); CROSSCHECK_LOADERS and
# CROSSCHECK_ROUNDS set those of part 3 (default: every built-in loader, 1 round).
# Needs the carried bundle unpacked (`dev/gpu-study.sh setup`): DALI, and jsonschema from smk.0.
set -u
cd "$(dirname "$0")/.."
# Run from a private copy: the device tool syncs the working tree at every call, and a file it replaces or removes
# under a running job breaks that job (one run lost its prep and a cell to "No module named loaderbench..."), and
# ignored folders not named in the call's carry (.peers, .before) are gone after the next call.
if [ -z "${AGREEMENT_PRIVATE:-}" ]; then
  priv=/tmp/agreement-repo; rm -rf "$priv"; mkdir -p "$priv"
  tar -c --exclude=./.bundles --exclude=./results --exclude=./resources . | tar -x -C "$priv"
  AGREEMENT_PRIVATE=1 exec "$priv/dev/agreement-run.sh" "$@"
fi
repo=$PWD dest=$1
mkdir -p "$dest"/{before,after,peers}
export PYTHONPATH=$repo/src:/tmp/site PYTHONUNBUFFERED=1 LOADERBENCH_GIT_COMMIT=${LOADERBENCH_GIT_COMMIT:-unknown}
export LOADERBENCH_RUN_ID=${LOADERBENCH_RUN_ID:-$(date +%Y%m%dT%H%M%S)-agreement-$$}  # every part below: one run
A=${AGREEMENT_CONFIG:-config/studies/h200-agreement.yaml} P=${PEERS_CONFIG:-config/studies/h200-peers.yaml} man=results/staging/ram.json
step() { echo "== $(date +%T) $*" | tee -a "$dest/steps.log"; }
step host; dev/host-facts.sh > "$dest/host.txt" 2>&1
step prep; t0=$SECONDS
dev/gpu-host-prep.sh "$A" > "$dest/prep.log" 2>&1 || { step "prep failed"; touch "$dest/DONE"; exit 1; }
echo "prep $((SECONDS - t0)) s" >> "$dest/prep.log"
cell=${PEERS_CELL:-torchvision_ram_g1_b256_fp32_dp}
before_after() {
  step "before/after: $cell, 2 each, alternating"
  for r in 0 1; do
    PYTHONPATH=$repo/.before/src:/tmp/site python3 -m loaderbench run-cell --config "$P" --cell "${cell}_r$r" \
      --out "$dest/before/${cell}_r$r.json" --timeline "$dest/before/${cell}_r$r.csv" 2>> "$dest/before/run.log"
    python3 -m loaderbench run-cell --config "$P" --cell "${cell}_r$r" --out "$dest/after/${cell}_r$r.json" \
      --timeline "$dest/after/${cell}_r$r.csv" 2>> "$dest/after/run.log"
  done
}
peers() {
  step "crosscheck of the peers' settings"
  python3 -m loaderbench crosscheck --config "$P" --loaders torchvision dali-sc dali-cpu --precision fp32 --rounds 1 \
    --out "$dest/peers/crosscheck" > "$dest/peers/crosscheck.log" 2>&1
  step "peers"
  python3 benchmarks/peers.py view --manifest "$man" --out /dev/shm/peers --copies 5 > "$dest/peers/view.json"
  mkdir -p /tmp/peerwork && cd /tmp/peerwork || exit 1
  timeout 400 python3 "$repo/.peers/pytorch_imagenet/main.py" -a mobilenet_v2 -b 256 -j 15 --gpu 0 --epochs 2 -p 1 \
    /dev/shm/peers > "$dest/peers/pytorch.log" 2>&1; echo "rc $?" >> "$dest/peers/pytorch.log"
  for mode in mixed cpu; do
    flag=(); [ $mode = cpu ] && flag=(--dali_cpu)
    timeout 300 python3 "$repo/.peers/dali_resnet50/main.py" -a mobilenet_v2 -b 256 -j 15 --epochs 2 "${flag[@]}" \
      /dev/shm/peers > "$dest/peers/dali-$mode.log" 2>&1; echo "rc $?" >> "$dest/peers/dali-$mode.log"
  done
  cd "$repo" || exit 1
  python3 benchmarks/peers.py rate --kind pytorch "$dest/peers/pytorch.log" > "$dest/peers/pytorch.json"
  for mode in mixed cpu; do
    python3 benchmarks/peers.py rate --kind dali "$dest/peers/dali-$mode.log" > "$dest/peers/dali-$mode.json"
  done
}
crosscheck() {
  step "crosscheck of every loader at default settings"
  # shellcheck disable=SC2086  # a list of loader names
  python3 -m loaderbench crosscheck --config "$A" --precision fp32 amp --rounds "${CROSSCHECK_ROUNDS:-1}" \
    --out "$dest/crosscheck" --loaders ${CROSSCHECK_LOADERS:-torchvision dali-cpu dali-sc synthetic opencv nvjpeg dali-mc} \
    > "$dest/crosscheck.log" 2>&1
  python3 -m loaderbench engine-report --cells "$dest/crosscheck/cells" > "$dest/crosscheck/engine-report.txt" 2>&1
}
placement() {
  step "placement: auto against off at the peers' settings"
  python3 -m loaderbench sweep --config "$P" --variant auto:placement=auto --variant off:placement=off --tier ram \
    --precision fp32 --repeats 1 --loaders torchvision dali-sc dali-cpu --out "$dest/placement" > "$dest/placement.log" 2>&1
}
for part in ${STEPS:-before-after peers crosscheck placement}; do
  case $part in
  before-after) before_after ;; peers) peers ;; crosscheck) crosscheck ;; placement) placement ;;
  *) step "unknown part $part" ;;
  esac
done
step done; touch "$dest/DONE"
