#!/usr/bin/env python3
"""Translate `pip config list` (stdin) into `uv pip install` arguments, one per line, so uv installs what pip would.

uv reads none of pip's configuration: a machine whose pip.conf or PIP_* variables name a mirror, extra indexes, local
wheels or a constraints file would get other packages from uv than from pip. The settings below are carried over
(with pip's choice of the best version across every index); a setting uv cannot honour exits 3 naming it, and the
caller installs with pip instead. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import itertools
import re
import shlex
import sys

# pip setting -> uv option; each whitespace-separated value becomes one option
CARRIED = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
# settings of pip's own output and timing, or of its cache: they change nothing that is installed
HARMLESS = {
    *("disable-pip-version-check", "default-timeout", "timeout", "retries", "no-input", "root-user-action"),
    "config-file",  # where the settings listed beside it come from
    *("no-cache-dir", "cache-dir", "no-compile", "progress-bar", "quiet", "verbose", "no-color"),
}
LINE = re.compile(r"^(?P<scope>[^.]*)\.(?P<key>[A-Za-z0-9_-]+)=(?P<value>.*)$")


def translate(config: str) -> list[str]:
    """uv arguments for the `pip config list` text `config`; ValueError names a setting uv cannot honour."""
    args = ["--index-strategy", "unsafe-best-match"]  # pip takes the best version from all indexes; uv the first's
    for line in config.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        key = m["key"].replace("_", "-")
        value = " ".join(shlex.split(m["value"].replace("\\n", " ")))  # pip prints a multi-line value with \n
        if key in CARRIED:
            for word in value.split():
                if not _has(args, CARRIED[key], word):  # a setting in pip.conf and in PIP_* is listed twice
                    args += [CARRIED[key], word]
        elif key == "no-index" and value.lower() in {"1", "true", "yes", "on"}:
            args.append("--no-index")
        elif key == "cert":
            continue  # the caller exports it as SSL_CERT_FILE
        elif key not in HARMLESS:
            raise ValueError(f"pip setting {m['scope']}.{key} has no uv equivalent here")
    return args


def _has(args: list[str], option: str, value: str) -> bool:
    return any(a == option and b == value for a, b in itertools.pairwise(args))


def main() -> int:
    try:
        print("\n".join(translate(sys.stdin.read())))
    except ValueError as e:
        print(e, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
