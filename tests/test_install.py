"""The install's translation of pip's configuration into uv's options (scripts/pip_config_to_uv.py)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "pip_config_to_uv.py"


def _translate(env: dict) -> subprocess.CompletedProcess:
    """`pip config list` under the PIP_* variables `env` (PIP_CONFIG_FILE: a pip.conf), through the script."""
    return subprocess.run(
        f"{sys.executable} -m pip config list | {sys.executable} {SCRIPT}",
        shell=True,
        check=False,
        capture_output=True,
        text=True,
        env={**_without_pip_settings(), **env},
    )


def _without_pip_settings() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}


def test_pips_indexes_wheels_and_constraints_reach_uv_with_pips_choice_of_version(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url = file:///opt/a/simple file:///opt/b/simple\n"
        "constraint = /etc/caps.txt\n"
        "cert = /etc/ssl/ca.pem\n"
        "disable-pip-version-check = 1\n"
    )
    out = _translate({"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/opt/wheels"})
    assert out.returncode == 0, out.stderr
    args = out.stdout.split()
    pairs = set(itertools.pairwise(args))
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's best version across indexes, not uv's first
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert {("--extra-index-url", "file:///opt/a/simple"), ("--extra-index-url", "file:///opt/b/simple")} <= pairs
    assert ("--constraint", "/etc/caps.txt") in pairs and ("--find-links", "/opt/wheels") in pairs
    assert "/etc/ssl/ca.pem" not in args  # the certificate goes to SSL_CERT_FILE, not to an option


def test_a_setting_named_twice_is_passed_once(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /opt/wheels\n")
    out = _translate({"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/opt/wheels"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split().count("/opt/wheels") == 1


def test_a_setting_uv_cannot_honour_is_named(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\ntrusted-host = mirror.example\n")
    out = _translate({"PIP_CONFIG_FILE": str(conf)})
    assert out.returncode == 3
    assert "global.trusted-host" in out.stderr  # scripts/install-venv.sh then installs with pip
