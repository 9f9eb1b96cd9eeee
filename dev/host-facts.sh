#!/usr/bin/env bash
# The GPU host's facts for a results folder's host.txt: date, GPUs and their links, CPUs, memory, disks, the Python
# stack's versions (DALI and Snakemake where importable) and the NCCL/TORCH/NVSHMEM variables the host sets.
# Usage: dev/host-facts.sh > DEST/host.txt 2>&1
date -u +%FT%TZ
nvidia-smi
nvidia-smi topo -m
nproc
# SMT siblings and sockets: a launching thread shares its core with whatever runs on its sibling
lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|NUMA node|CPU\(s\)|On-line|Hypervisor|Virtualization)'
cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null | sed 's/^/cpu0 siblings: /'
grep -E '^cpu ' /proc/stat | awk '{print "steal since boot (s): " $9 / 100}'
free -g
df -h . /dev/shm
python3 - <<'PY'
import importlib, sys

import cv2, torch, torchvision

print(sys.version)
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
      "torchvision", torchvision.__version__, "opencv", cv2.__version__)
for name in ("nvidia.dali", "snakemake"):
    try:
        print(name, importlib.import_module(name).__version__)
    except ImportError as e:
        print(name, "not importable:", e)
PY
env | grep -E '^(NCCL|TORCH|NVSHMEM)_'
