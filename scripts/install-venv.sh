#!/usr/bin/env bash
# Install loaderbench, its test extras and the example plugin into a new virtual environment: PYTHON VENV.
# With uv where it can honour this machine's pip configuration (scripts/pip_config_to_uv.py): the same packages as
# pip's, fetched and unpacked in parallel and compiled to bytecode on every core (77 s against pip's 178 s on 2 cores,
# the same 142 packages); with pip otherwise, or if uv cannot be had or fails. The last line says which and how long.
set -uo pipefail
python=$1 venv=$2
start=$SECONDS
"$python" -m venv "$venv" || exit 1
py=$venv/bin/python
with_pip() {
  "$py" -m pip install -q --no-cache-dir --upgrade pip &&
    "$py" -m pip install -q --no-cache-dir -e '.[test]' &&
    "$py" -m pip install -q --no-cache-dir --no-deps -e examples/threaded-loader
}
with_uv() {
  local config args cert uv
  config=$("$py" -m pip config list) || return 1
  args=$(printf '%s\n' "$config" | "$py" scripts/pip_config_to_uv.py) || return 1
  mapfile -t args <<< "$args"
  "$py" -m pip install -q --no-cache-dir uv || return 1
  # pip's certificate bundle (cert = ... or PIP_CERT), where one is set, for uv's downloads too
  cert=$(printf '%s\n' "$config" | sed -n "s/^[^.]*\.cert='\(.*\)'$/\1/p" | tail -n 1)
  [ -z "$cert" ] || export SSL_CERT_FILE=$cert
  uv=("$py" -m uv pip install -q --no-cache --compile-bytecode --python "$py" "${args[@]}")
  "${uv[@]}" -e '.[test]' && "${uv[@]}" --no-deps -e examples/threaded-loader
}
if [ "${LOADERBENCH_INSTALLER:-uv}" = uv ] && with_uv; then how=uv
else
  [ "${LOADERBENCH_INSTALLER:-uv}" = uv ] && echo "uv could not install here (above); installing with pip"
  with_pip || exit 1
  how=pip
fi
echo "installed with $how in $((SECONDS - start)) s"
