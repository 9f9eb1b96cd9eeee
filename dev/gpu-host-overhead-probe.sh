#!/usr/bin/env bash
# On a bare GPU host (no Snakemake, no jsonschema): the telemetry sampler's overhead on a training loop
# and the emulated HDD's probe against its device model. Carry `.whl/` holding the mfusepy wheel and,
# where the host has no libfuse3/fusermount3, `.whl/fuse/{libfuse3.so.3,fusermount3}` copied from a Debian host.
# Writes into $OUT (default ./out): gpu.txt, overhead.json/.log, probe.json/.log.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 benchmarks/telemetry_overhead.py --batch 256 --amp --rounds 3 --seconds 6 > "$OUT/overhead.json" 2> "$OUT/overhead.log"
tail -1 "$OUT/overhead.log"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/mfusepy-*.whl
if ! command -v fusermount3 >/dev/null && [ -x .whl/fuse/fusermount3 ]; then export PATH=$PWD/.whl/fuse:$PATH; fi
if ! python3 -c 'import ctypes.util,sys; sys.exit(0 if ctypes.util.find_library("fuse3") else 1)' && [ -f .whl/fuse/libfuse3.so.3 ]; then
  export FUSE_LIBRARY_PATH=$PWD/.whl/fuse/libfuse3.so.3
fi
ls -la /dev/fuse > "$OUT/probe.log" 2>&1
timeout 120 python3 - >> "$OUT/probe.json" 2>> "$OUT/probe.log" <<'PY'
import json, os
from pathlib import Path
from loaderbench.data.dataset import DatasetParams, make_dataset
from loaderbench.data.emulated import fuse_available, mount, resolve_model
from loaderbench.data.tierprobe import probe

why = fuse_available()
if why:
    raise SystemExit(f"no FUSE here: {why}")
stats = make_dataset(DatasetParams(images=200, classes=4, seed=0), Path("/tmp/ds"))
files = sorted(str(p.relative_to("/tmp/ds/train")) for p in Path("/tmp/ds/train").rglob("*") if p.is_file())
model = resolve_model("hdd-7200")
with mount("/tmp/ds", "/tmp/mnt-hdd", model) as m:
    result = probe("/tmp/mnt-hdd/train", files, readers=(1, 8), max_seconds=20, cold=True, model=model)
    result["emulated_stats"] = m.stats()
result["dataset"] = stats
print(json.dumps(result, indent=2))
for run in result["runs"]:
    print(f"emulated hdd-7200, {run['readers']} readers: {run['files_per_s']:.1f} files/s, predicted "
          f"{run['predicted']['files_per_s']:.1f}, ratio {run['ratio']:.3f}", file=os.sys.stderr)
PY
tail -3 "$OUT/probe.log"
