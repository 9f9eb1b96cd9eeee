#!/usr/bin/env bash
# What the tests need beyond Python: a real single-node Slurm (munge, slurmctld, slurmd), FUSE (libfuse3 and
# fusermount3, for the emulated tier) and Debian's Chromium and ChromeDriver (the bundle checked in a headless browser).
# Installs what is missing when running as root with apt-get; otherwise says which tests will skip.
# --required (CI): exit non-zero unless everything is there, so CI skips nothing.
set -uo pipefail
required=0
[ "${1:-}" = "--required" ] && required=1
have_slurm() { command -v slurmctld >/dev/null && command -v munged >/dev/null; }
have_fuse() { command -v fusermount3 >/dev/null; }
have_chromium() { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }
missing=()
have_slurm || missing+=(munge slurmctld slurmd slurm-client)
have_fuse || missing+=(fuse3 libfuse3-3)
have_chromium || missing+=(chromium chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ "${LOADERBENCH_INSTALL:-1}" != 0 ]; then
    echo "installing for the tests: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "not installed (needs root and apt-get): ${missing[*]}; the tests that need them will skip"
  fi
fi
ok=1
have_slurm || { ok=0; echo "missing: Slurm (munge, slurmctld, slurmd): tests/test_slurm.py skips"; }
have_fuse || { ok=0; echo "missing: FUSE (fuse3): the emulated-tier tests skip"; }
have_chromium || { ok=0; echo "missing: Chromium and ChromeDriver: the headless bundle check skips"; }
[ $required = 1 ] && [ $ok = 0 ] && exit 1
exit 0
