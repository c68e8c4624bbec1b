"""The ``beam-dpsketch`` command line.

Each subcommand lives in its own module under :mod:`beam_dpsketch.pipelines` (or
:mod:`beam_dpsketch.evaluation`) and exposes ``register(subparsers)``, which adds its parser and
sets ``run=<callable(args, beam_args) -> int>`` as a default. Arguments this parser does not know
are Beam pipeline options (``--runner``, ``--direct_num_workers``, ...) and are passed through.
Errors print one line to stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["main", "SUBCOMMAND_MODULES"]

# Order is the order of `beam-dpsketch --help`.
SUBCOMMAND_MODULES = (
    "beam_dpsketch.pipelines.demo",
    "beam_dpsketch.pipelines.sketch",
)


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="beam-dpsketch",
        description=(
            "Differentially private streaming sketches on Apache Beam. Unknown options are "
            "passed to Beam as pipeline options (e.g. --runner, --direct_num_workers)."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show Beam's log output")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    if not args.verbose:
        # Beam logs an apitools warning on import and Prism download attempts at INFO.
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
        logging.getLogger().setLevel(logging.ERROR)
    try:
        return int(args.run(args, beam_args) or 0)
    except (CliError, ValueError, TypeError, FileNotFoundError, OSError) as exc:
        print(f"beam-dpsketch {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
