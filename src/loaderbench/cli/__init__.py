"""`loaderbench` command line: the commands a user runs, side measurements, and one subcommand per pipeline job."""

from __future__ import annotations

import argparse
import sys

from loaderbench.core.config import ConfigError
from loaderbench.core.util import WriteError
from loaderbench.data.check import DatasetError
from loaderbench.data.stage import StagingError
from loaderbench.engine.runner.hostlock import HostBusy

from . import experiments, pipeline, study

GROUPS = (study, experiments, pipeline)


def build_parser() -> argparse.ArgumentParser:
    """The parser; its help lists the subcommands by group, the user's first."""
    p = argparse.ArgumentParser(prog="loaderbench", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = []
    for group in GROUPS:
        listing.append(f"{group.TITLE}:")

        def add(name, help, **kw):
            listing.append(f"  {name:16} {help}")
            return sub.add_parser(name, description=help, **kw)

        group.register(add)
        listing.append("")
    p.epilog = "\n".join(listing).rstrip() + "\n\n`loaderbench COMMAND --help` gives a command's options."
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except (ConfigError, DatasetError, StagingError, HostBusy, WriteError) as e:
        print(f"loaderbench {a.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; the shell's status for SIGINT
        print(f"\nloaderbench {a.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
