#!/usr/bin/env bash
# The study of config/studies/h200x2-study.yaml on a bare GPU host, in the few calls an offline host allows. Verbs:
#   bundle                (here, not there) build .bundles/c0..cN: DALI, Snakemake + jsonschema + mfusepy + webdataset, libfuse
#   stash DIR...          copy carried bundle parts (.bundles/cN) to /tmp/parts, where the next calls find them
#   setup                 unpack what is stashed: smk.0 (Snakemake, jsonschema, mfusepy) and, once all the parts are
#                         there, dali.0-N (DALI; dali.parts says N+1) into /tmp/site; libfuse/fusermount3 from the
#                         parts' fuse/ folder. .bundles/c0 (dali.0, dali.parts, fuse/) to c7 (dali.7, smk.0) are
#                         up to 25 MB each: one part and the working tree (32 MB) must fit a call's 64 MiB. Without
#                         smk.0 no loaderbench command runs there (jsonschema): setup says so
#   prep OUT              host facts, then the dataset made, checked and staged (dev/gpu-host-prep.sh); records
#                         carried from an earlier run are adopted (`loaderbench adopt`): only missing cells run
#   probe OUT             the first-step probe: cuDNN autotuning on/off/limited, fresh processes (first_step_probe.py)
#   ceiling OUT           `loaderbench ceiling`: the synthetic cell against a pinned bare loop, 3 alternating rounds
#                         (engine-2: with 2, one slow cell of 7649 against 8312 made the median 0.947)
#   start DEST MINUTES    the pipeline, detached, stopped by SIGINT after MINUTES: the parts in order, then
#                         `loaderbench respread` (configurations whose repeats spread over spread_warn, or with a
#                         contended cell, measured once more), the rest of the workflow; then the tables and bundle of
#                         whatever was measured (budget_minutes=0 + trim keeps only measured cells), reports, DONE
#   sweep DEST ARGS...    `loaderbench sweep --config $CONFIG --out DEST/records ARGS...`, detached (a sweep outlasts a
#                         call), then its engine report; DEST/DONE when it ends
#   wait DEST SECONDS [OUT]  poll until DEST/DONE or SECONDS passed; print the progress; with OUT, pack what is
#                         measured so far into it: a borrowed machine that goes idle 30 s is gone with its disk
#   pack DEST OUT         results into OUT (tarball under 16 MiB) and the reports beside it
#   tune DEST SECONDS LOADER...  `loaderbench tune --budget-s SECONDS $TUNE_ARGS` of each loader in turn, detached,
#                         after AFTER/DONE (a study's folder) when AFTER is set; DEST/DONE when all ended
#   stop DEST             end the run `start DEST` began: its driver's whole session (Snakemake, the warm-start
#                         server, the cells) gets SIGTERM, then SIGKILL; then Snakemake's lock is released if no
#                         Snakemake of this folder is left. Never `pkill -f`: a pattern in the calling command's own
#                         line kills the caller
# Environment: CONFIG (default config/studies/h200x2-study.yaml); LOADERBENCH_GIT_COMMIT names the code in every record;
# ONLY, an extended regular expression: `start` runs only the cells whose ids match it (e.g. ONLY=_b128_).
# CROSSCHECK, CROSSCHECK_AFTER: `loaderbench crosscheck` arguments for one before the parts (its cells of the grid
# are adopted: the parts do not measure them again) and one after them, in what time is left. RESPREAD=0 skips the
# respread step (where processes of one configuration differ by more than spread_warn anyway, a rerun narrows
# nothing: the intervals carry the spread).
set -u
cd "$(dirname "$0")/.."
export C=${CONFIG:-config/studies/h200x2-study.yaml}
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -x /tmp/fuse/fusermount3 ]; then export PATH=/tmp/fuse:$PATH FUSE_LIBRARY_PATH=/tmp/fuse/libfuse3.so.3; fi
SMK=(python3 -m snakemake --cores "$(nproc)")  # --configfile last: it takes every word after it
# Snakemake processes working in this folder, this script's own ancestors left out (their command lines may name
# Snakemake: a bash -c '... snakemake ...' is not one)
snakemakes() {
  python3 - <<'PY'
import os, psutil
mine = {p.pid for p in psutil.Process().parents()} | {os.getpid()}
here = os.getcwd()
for p in psutil.process_iter(["cmdline", "cwd"]):
    words = p.info["cmdline"] or []
    if p.pid not in mine and p.info["cwd"] == here and any(w == "snakemake" or w.endswith("/snakemake") for w in words[:3]):
        print(p.pid)
PY
}
# a lock left by a Snakemake that was killed (SIGKILL leaves it) refuses every later run: release it, if none runs
unlock_if_stale() {
  if [ -n "$(ls -A .snakemake/locks 2>/dev/null)" ]; then
    alive=$(snakemakes | tr '\n' ' ')
    if [ -z "$alive" ]; then "${SMK[@]}" --unlock --configfile "$C" > /dev/null 2>&1 && echo "released a stale Snakemake lock"
    else echo "Snakemake lock held by running Snakemake process(es) $alive"; fi
  fi
}
verb=$1; shift
case $verb in
bundle)
  # here, not on the GPU host (nothing can be fetched there): .bundles/c0..cN from PyPI for its Python 3.12 - DALI
  # for CUDA 13 in parts of 24 MB (one a call), Snakemake with jsonschema and mfusepy less what the host has
  # (dev/gpu-host-packages.txt, the device tool's KINDS.md list), and this machine's fusermount3 and libfuse3
  tool=${OFFLINE_BUNDLE:-../shared/tools/offline-bundle}; work=$(mktemp -d)
  "$tool" --out "$work/dali" --python 3.12 --no-deps --part-mib 24 nvidia-dali-cuda130==2.4.0 \
    'nvidia-nvimgcodec-cu13==0.9.*' nvidia-libnvcomp-cu13==5.3.0.16 nvidia-nvjpeg nvidia-nvjpeg2k-cu13 \
    nvidia-nvtiff-cu13 astunparse gast optree nvtx makefun 'libcst~=1.8' > "$work/dali.log" 2>&1 || { tail "$work/dali.log"; exit 1; }
  "$tool" --out "$work/smk" --python 3.12 --part-mib 64 --exclude-file dev/gpu-host-packages.txt \
    snakemake jsonschema mfusepy webdataset > "$work/smk.log" 2>&1 || { tail "$work/smk.log"; exit 1; }
  rm -rf .bundles; parts=("$work"/dali/part-*)
  for i in "${!parts[@]}"; do mkdir -p ".bundles/c$i"; cp "${parts[$i]}" ".bundles/c$i/dali.$i"; done
  echo "${#parts[@]}" > .bundles/c0/dali.parts
  last=$((${#parts[@]} - 1)); cat "$work"/smk/part-* > ".bundles/c$last/smk.0"  # the last DALI part is the smallest
  mkdir -p .bundles/c0/fuse
  cp "$(command -v fusermount3)" .bundles/c0/fuse/ && cp -L "$(ldconfig -p | awk '/libfuse3.so.3 /{print $NF; exit}')" .bundles/c0/fuse/libfuse3.so.3
  rm -rf "$work"; du -sh .bundles/* ;;
stash)
  mkdir -p /tmp/parts
  for d in "$@"; do cp -r "$d"/. /tmp/parts/; done
  ls -la /tmp/parts ;;
setup)
  mkdir -p /tmp/site /tmp/fuse
  if [ -f /tmp/parts/smk.0 ] && [ ! -f /tmp/site/.smk ]; then
    xz -dc /tmp/parts/smk.0 | tar -x -C /tmp && touch /tmp/site/.smk
  fi
  if [ -d /tmp/parts/fuse ] && ! command -v fusermount3 >/dev/null; then cp /tmp/parts/fuse/* /tmp/fuse/; fi
  # dali.parts (in c0) says how many pieces the DALI stream was cut into; unpack once all of them are here
  n=$(cat /tmp/parts/dali.parts 2>/dev/null || echo 0); dali=()
  for ((i = 0; i < n; i++)); do [ -f "/tmp/parts/dali.$i" ] && dali+=("/tmp/parts/dali.$i"); done
  if [ "$n" -gt 0 ] && [ ${#dali[@]} -eq "$n" ] && [ ! -f /tmp/site/.dali ]; then
    cat "${dali[@]}" | xz -dc | tar -x -C /tmp && touch /tmp/site/.dali
  else echo "DALI: ${#dali[@]} of $n parts here"; fi
  python3 -c 'import snakemake; print("snakemake", snakemake.__version__)' 2>&1 | tail -1
  PYTHONPATH=src:/tmp/site python3 -c 'import loaderbench.core.config' 2>&1 | tail -1 | sed 's/^/loaderbench cannot run here: /'
  python3 -c 'import nvidia.dali; print("dali", nvidia.dali.__version__)' 2>&1 | tail -1 ;;
prep)
  out=$1; mkdir -p "$out"
  dev/host-facts.sh > "$out/host.txt" 2>&1
  t0=$SECONDS
  dev/gpu-host-prep.sh "$C" && echo "prep $((SECONDS - t0)) s" | tee "$out/prep.txt"
  # records carried from an earlier run (results/cells, results/telemetry): keep those of the same spec and data
  if ls results/cells/*.json >/dev/null 2>&1; then python3 -m loaderbench adopt --config "$C" | tee -a "$out/prep.txt"; fi ;;
probe)
  out=$1; mkdir -p "$out"
  for args in "--benchmark 1" "--benchmark 0" "--benchmark 1 --limit 1" "--benchmark 1 --limit 3" "--benchmark 1" \
              "--benchmark 0" "--benchmark 1 --precision fp32 --batch 128" "--benchmark 0 --precision fp32 --batch 128"; do
    # shellcheck disable=SC2086
    timeout 120 python3 benchmarks/first_step.py $args 2>> "$out/probe.log" | tee -a "$out/probe.jsonl"
  done ;;
ceiling)
  out=$1; mkdir -p "$out"
  timeout 300 python3 -m loaderbench ceiling --config "$C" --batch-size 256 --precision amp --rounds 3 \
    --variant-steps 0 --json "$out/ceiling.json" 2>&1 | tee "$out/ceiling.log" | grep -v "^  \[" ;;
start)
  dest=$1; minutes=$2; mkdir -p "$dest"
  unlock_if_stale | tee -a "$dest/steps.log"
  setsid nohup bash -c '
    dest=$1; minutes=$2; shift 2
    echo $$ > "$dest/driver.pid"  # the session leader: `stop` ends its session
    step() { echo "== $(date +%T) $*" | tee -a "$dest/steps.log"; }
    deadline=$((SECONDS + 60 * minutes))
    # one run: its Snakemake invocations (the parts, respread, the rest) divide their cells by each other
    export LOADERBENCH_RUN_ID=${LOADERBENCH_RUN_ID:-$(date +%Y%m%dT%H%M%S)-study-$$}
    # one warm-start server for every Snakemake run below (each would start its own: 8-13 s of imports on the H200
    # before its first cell); it ends with this driver (loaderbench.engine.process.warmstart.serve watches its parent)
    export LOADERBENCH_WARM_SOCKET=/tmp/loaderbench-warm-study-$$.sock
    reuse=$(python3 -c "from loaderbench.core.config import load_config; print(\"--reuse\" if load_config(\"$C\")[\"host\"][\"reuse_processes\"] else \"\")")
    python3 -m loaderbench.engine.process.warmstart "$LOADERBENCH_WARM_SOCKET" $reuse 2>> "$dest/warm-server.log" &
    step plan; python3 -m loaderbench plan --config "$C" > "$dest/plan-before.txt" 2>&1
    # CROSSCHECK (crosscheck arguments): cells against bare loops first; its cells of the grid count as measured
    if [ -n "${CROSSCHECK:-}" ]; then
      step "crosscheck $CROSSCHECK"
      python3 -m loaderbench crosscheck --config "$C" $CROSSCHECK > "$dest/crosscheck.log" 2>&1
      python3 -m loaderbench adopt --config "$C" --from results/crosscheck >> "$dest/steps.log" 2>&1
    fi
    # the parts in their order (their priority), each as its own Snakemake run of its cells, so that the deadline
    # cuts the least important cells; then the whole workflow (tables, figures, bundle)
    rc=0
    for part in $(python3 -c "from loaderbench.core.config import load_config; print(*[p[\"name\"] for p in load_config(\"$C\")[\"parts\"]])"); do
      left=$((deadline - SECONDS)); [ $left -gt 20 ] || { rc=124; break; }
      mapfile -t targets < <(python3 -m loaderbench cells --config "$C" --part "$part" --paths | grep -E -- "${ONLY:-.}")
      missing=0; for t in "${targets[@]}"; do [ -f "$t" ] || missing=$((missing + 1)); done
      [ $missing -gt 0 ] || { step "part $part: ${#targets[@]} cells, all measured"; continue; }
      step "part $part: ${#targets[@]} cells, $missing to measure, $left s left"
      timeout -s INT -k 30 "$left" "$@" "${targets[@]}" --configfile "$C" >> "$dest/snakemake.log" 2>&1 || { rc=$?; break; }
    done
    # a configuration whose repeats spread over spread_warn, or with a contended cell, is measured once more: its
    # records move to superseded/ (the ledger results/respread.json keeps it from a second rerun) and the run below
    # measures it again; if it still spreads, its table row says so
    left=$((deadline - SECONDS))
    if [ $rc -eq 0 ] && [ $left -gt 60 ] && [ -z "${ONLY:-}" ] && [ "${RESPREAD:-1}" = 1 ]; then
      step "respread, $left s left"; python3 -m loaderbench respread --config "$C" >> "$dest/steps.log" 2>&1
    fi
    left=$((deadline - SECONDS))
    if [ $rc -eq 0 ] && [ $left -gt 20 ] && [ -z "${ONLY:-}" ]; then
      step "the rest of the workflow, $left s left"
      timeout -s INT -k 30 "$left" "$@" --configfile "$C" >> "$dest/snakemake.log" 2>&1; rc=$?
    fi
    step "pipeline rc=$rc"
    # a requeued cell the deadline left unmeasured gets its first record back (the newest superseded one): no hole
    restored=0
    for f in $(ls -r results/cells/superseded/*.json 2>/dev/null); do
      b=${f##*/}; cid=${b%.*.json}
      [ -e "results/cells/$cid.json" ] && continue
      cp "$f" "results/cells/$cid.json"; restored=1; step "kept the first record of $cid"
    done
    if [ $rc -ne 0 ] || [ $restored -eq 1 ] || [ ! -f results/bundle/index.html ]; then
      sleep 5; step tables and bundle of the measured cells
      "$@" --configfile "$C" --config budget_minutes=0 > "$dest/snakemake-close.log" 2>&1  # the config has trim: true
    fi
    # CROSSCHECK_AFTER (crosscheck arguments, with its own --out): a second crosscheck, with what time is left
    left=$((deadline - SECONDS))
    if [ -n "${CROSSCHECK_AFTER:-}" ] && [ $left -gt 60 ]; then
      step "crosscheck $CROSSCHECK_AFTER, $left s left"
      timeout -s INT -k 30 "$left" python3 -m loaderbench crosscheck --config "$C" $CROSSCHECK_AFTER > "$dest/crosscheck-after.log" 2>&1
    fi
    step reports
    python3 -m loaderbench plan --config "$C" > "$dest/plan-after.txt" 2>&1
    python3 -m loaderbench engine-report --cells results/cells --json "$dest/engine-report.json" > "$dest/engine-report.txt" 2>&1
    step done; touch "$dest/DONE"' _ "$dest" "$minutes" "${SMK[@]}" > "$dest/driver.log" 2>&1 < /dev/null &
  echo $! > "$dest/driver.pid"
  echo "started; poll with: dev/gpu-study.sh wait $dest SECONDS" ;;
tune)
  # tune DEST SECONDS LOADER...: `loaderbench tune` of each loader in turn, detached, once AFTER/DONE exists when AFTER
  # names the folder of a run started before (both measure the host: never at once); DEST/DONE when all ended
  dest=$1; budget=$2; shift 2; mkdir -p "$dest"
  setsid nohup bash -c '
    dest=$1; budget=$2; shift 2
    echo $$ > "$dest/driver.pid"  # the session leader: `stop` ends its session
    while [ -n "${AFTER:-}" ] && [ ! -f "$AFTER/DONE" ]; do sleep 5; done
    for loader in "$@"; do
      echo "== $(date +%T) tune $loader" >> "$dest/steps.log"
      # shellcheck disable=SC2086
      python3 -m loaderbench tune --config "$C" --loader "$loader" --budget-s "$budget" ${TUNE_ARGS:-} \
        --out "$dest/$loader" --json "$dest/$loader.json" > "$dest/$loader.log" 2>&1
      rc=$?; echo "== $(date +%T) tune $loader rc=$rc" >> "$dest/steps.log"
    done
    echo "== $(date +%T) done" >> "$dest/steps.log"; touch "$dest/DONE"' _ "$dest" "$budget" "$@" > "$dest/driver.log" 2>&1 < /dev/null &
  echo "started; poll with: dev/gpu-study.sh wait $dest SECONDS \$OUT" ;;
sweep)
  dest=$1; shift; mkdir -p "$dest"
  setsid nohup bash -c '
    dest=$1; shift
    echo $$ > "$dest/driver.pid"  # the session leader: `stop` ends its session
    echo "== $(date +%T) sweep $*" >> "$dest/steps.log"
    python3 -m loaderbench sweep --config "$C" --out "$dest/records" "$@" > "$dest/sweep.log" 2>&1
    rc=$?; echo "== $(date +%T) sweep rc=$rc" >> "$dest/steps.log"  # (not $? after $(date): that is the date command)
    python3 -m loaderbench engine-report --cells "$dest/records" --json "$dest/engine-report.json" > "$dest/engine-report.txt" 2>&1
    echo "== $(date +%T) done" >> "$dest/steps.log"; touch "$dest/DONE"' _ "$dest" "$@" > "$dest/driver.log" 2>&1 < /dev/null &
  echo "started; poll with: dev/gpu-study.sh wait $dest SECONDS \$OUT (pack in that call: the machine goes back 30 s after it)" ;;
stop)
  dest=$1
  compgen -G "$dest/driver.pid" > /dev/null || compgen -G "$dest/*/driver.pid" > /dev/null ||
    { echo "no driver.pid in $dest: nothing started there" >&2; exit 2; }
  for f in "$dest"/driver.pid "$dest"/*/driver.pid; do  # a run and the runs it started (gpu-round.sh's)
    [ -f "$f" ] || continue
    sid=$(ps -o sid= -p "$(cat "$f")" 2>/dev/null | tr -d ' ')
    if [ -n "$sid" ] && [ "$sid" != "$(ps -o sid= -p $$ | tr -d ' ')" ]; then
      pkill -TERM -s "$sid"
      for _ in $(seq 1 20); do pgrep -s "$sid" > /dev/null || break; sleep 0.5; done
      pkill -KILL -s "$sid"
      echo "stopped the run of $(dirname "$f") (session $sid)"
    else echo "the run of $(dirname "$f") has ended already"; fi
  done
  sleep 1; unlock_if_stale ;;
wait)
  dest=$1; until_s=$((SECONDS + $2))
  while [ ! -f "$dest/DONE" ] && [ $SECONDS -lt $until_s ]; do sleep 10; done
  cat "$dest/steps.log" 2>/dev/null
  grep -h -E "^cell .*: (ok|failed|skipped|stalled)" "$dest/sweep.log" 2>/dev/null | tail -3
  echo "records: $(ls results/cells 2>/dev/null | wc -l)"; grep -h -E "^\[.*\] (Finished|Error)" "$dest/snakemake.log" 2>/dev/null | tail -3
  ls results/cells 2>/dev/null | tail -3
  if [ -n "${3:-}" ]; then mkdir -p "$3"; tar -czf "$3/partial.tgz" results/cells results/telemetry results/crosscheck "$dest" 2>/dev/null; fi
  [ -f "$dest/DONE" ] && echo DONE ;;
pack)
  dest=$1; out=$2; mkdir -p "$out"
  tar -czf "$out/study.tgz" results/cells results/telemetry results/crosscheck results/tables results/bundle results/tierprobe* \
    results/check* logs "$dest" 2>/dev/null
  cp "$dest"/*.txt "$out"/ 2>/dev/null; ls -la "$out" ;;
*) echo "unknown verb $verb" >&2; exit 2 ;;
esac
