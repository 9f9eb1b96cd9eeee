#!/usr/bin/env bash
# Kept measuring processes (host.reuse_processes) against fresh ones, on this host, before a study relies on them:
# the same dp cells measured in 4 rounds, each by its own warm-start server - fresh (a process forked per cell) and
# kept (one process handed cell after cell) alternating, since the host drifts - then a table of each cell's rate,
# cold step and setup in both. A kept process must measure what a fresh one does (rates within the host's drift)
# and skip the cold step after its first cell of a shape.
# Run in the project folder whose results/staging has the cells' tiers (after `dev/gpu-study.sh prep`, or a
# pipeline run of CONFIG). PYTHON names the interpreter (default python3).
# Usage: dev/reuse-check.sh CONFIG OUT CELL...    (dp cells of CONFIG, each of another configuration)
set -eu
[ $# -ge 3 ] || { sed -n '2,9p' "$0"; exit 2; }
cfg=$1 out=$2
shift 2
export PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
mkdir -p "$out"
round=0
for mode in fresh kept fresh kept; do
  round=$((round + 1))
  dir="$out/$round-$mode"
  mkdir -p "$dir"
  sock="/tmp/loaderbench-reuse-check-$$-$round.sock"
  flag=""
  [ "$mode" = kept ] && flag=--reuse
  "$PY" -m loaderbench.engine.process.warmstart "$sock" $flag 2>> "$out/server.log" &
  server=$!
  "$PY" -c "import sys; from loaderbench.engine.runner.warmclient import serves_this_code as s; sys.exit(0 if s(sys.argv[1]) else 1)" "$sock"
  for cell in "$@"; do
    LOADERBENCH_WARM_SOCKET="$sock" "$PY" -m loaderbench run-cell --config "$cfg" --cell "$cell" \
      --out "$dir/$cell.json" --timeline "$dir/$cell.csv" 2>> "$out/cells.log"
  done
  kill "$server"
  wait "$server" 2> /dev/null || true
done
"$PY" - "$out" "$@" << 'EOF'
import json, statistics, sys
from pathlib import Path

out, cells = Path(sys.argv[1]), sys.argv[2:]
rows = {}
for d in sorted(p for p in out.iterdir() if p.is_dir()):
    mode = d.name.split("-", 1)[1]
    for c in cells:
        r = json.loads((d / f"{c}.json").read_text())
        m, start = r["metrics"], r["process_start"][0]
        if r["status"] != "ok":
            print(f"{d.name} {c}: {r['status']} ({r['reason']})")
            continue
        rows.setdefault((c, mode), []).append((m["samples_per_s"], m.get("cold_step_s") or 0.0,
                                               r["phases_s"]["setup"], start.get("reused", 0)))
print(f"{'cell':42s} {'fresh samples/s':>18s} {'kept samples/s':>18s} {'kept/fresh':>10s} "
      f"{'cold step s (f/k)':>18s} {'setup s (f/k)':>14s} reused")
ratios = []
for c in cells:
    f, k = rows.get((c, "fresh"), []), rows.get((c, "kept"), [])
    if not f or not k:
        continue
    med = lambda v, i: statistics.median(x[i] for x in v)  # noqa: E731
    ratios.append(med(k, 0) / med(f, 0))
    print(f"{c:42s} {' '.join(f'{x[0]:.0f}' for x in f):>18s} {' '.join(f'{x[0]:.0f}' for x in k):>18s} "
          f"{ratios[-1]:10.3f} {med(f, 1):8.2f} /{med(k, 1):7.2f} {med(f, 2):6.2f} /{med(k, 2):5.2f} "
          f"{[x[3] for x in k]}")
if ratios:
    print(f"kept / fresh, median over {len(ratios)} cells: {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})")
EOF
