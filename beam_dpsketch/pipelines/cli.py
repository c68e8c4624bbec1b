"""The ``beam-dpsketch`` command line.

Each subcommand lives in its own module under :mod:`beam_dpsketch.pipelines` (or
:mod:`beam_dpsketch.evaluation`) and exposes ``register(subparsers)``, which adds its parser and
sets ``run=<callable(args, beam_args) -> int>`` as a default. Arguments this parser does not know
are Beam pipeline options (``--runner``, ``--direct_num_workers``, ...) and are passed through.
Errors print one line to stderr and exit with status 2; with ``--verbose`` they propagate, so the
traceback shows.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence

from beam_dpsketch.pipelines.arguments import accept_negative_numbers

__all__ = ["main", "SUBCOMMAND_MODULES"]

# Order is the order of `beam-dpsketch --help`.
SUBCOMMAND_MODULES = (
    "beam_dpsketch.pipelines.demo",
    "beam_dpsketch.pipelines.heavy_hitters",
    "beam_dpsketch.pipelines.frequencies",
    "beam_dpsketch.pipelines.sketch",
    "beam_dpsketch.pipelines.sliding_window",
    "beam_dpsketch.pipelines.continual",
    "beam_dpsketch.pipelines.intermittent",
    "beam_dpsketch.evaluation.cli",
)


def build_parser() -> argparse.ArgumentParser:
    # Imported here, after main() configured logging: the options module imports Beam's
    # filesystems, which log a warning at import.
    from beam_dpsketch.pipelines.options import CommandLineParser

    # Its subparsers are CommandLineParsers too: each subcommand can tell which options were given.
    parser = CommandLineParser(
        prog="beam-dpsketch",
        description=(
            "Differentially private streaming sketches on Apache Beam. Unknown options are "
            "passed to Beam as pipeline options (e.g. --runner, --direct_num_workers)."
        ),
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show Beam's log output and full tracebacks on errors",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    # Every subcommand reads "-1e18" or "-inf" as a value, never as an option.
    for sub in subparsers.choices.values():
        accept_negative_numbers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Before the subcommand modules are imported: importing Beam's filesystems logs an
    # apitools warning, and Beam logs the Prism download attempt at INFO.
    _configure_logging(verbose=any(a in ("-v", "--verbose") for a in argv))
    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    _configure_logging(verbose=args.verbose)
    try:
        return int(args.run(args, beam_args) or 0)
    except Exception as exc:
        if args.verbose:
            raise
        print(f"beam-dpsketch {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


# Dask's ``distributed`` sets its loggers' levels from its configuration when it is imported,
# which it reads from the environment: in this process and in the worker processes a local Dask
# cluster spawns. The variable is set only when the user has not set it.
_DASK_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"
_dask_level_set_here = False


def _configure_logging(verbose: bool) -> None:
    """INFO with ``-v``; else ERROR, for Beam, Dask and the runners' worker processes.

    The FnApiRunner's ``multi_processing`` workers follow the ``apache_beam`` level
    (:class:`~beam_dpsketch.pipelines.options.FnApiRunnerWorkerLogging`).
    """
    global _dask_level_set_here
    level = logging.INFO if verbose else logging.ERROR
    logging.basicConfig(level=level)
    logging.getLogger().setLevel(level)
    for name in ("apache_beam", "distributed"):
        logging.getLogger(name).setLevel(level)
    if not verbose and _DASK_LOG_LEVEL not in os.environ:
        os.environ[_DASK_LOG_LEVEL] = "error"
        _dask_level_set_here = True
    elif verbose and _dask_level_set_here:
        os.environ.pop(_DASK_LOG_LEVEL, None)
        _dask_level_set_here = False


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b.*:")


def _one_line(exc: BaseException) -> str:
    """One line describing ``exc``.

    Portable and multi-process runners wrap a worker's failure in an exception whose message
    is a traceback; the worker's own ``SomeError: message`` line is the informative one.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if len(lines) > 1 and (lines[0].startswith("Traceback") or "failed in state" in lines[0]):
        errors = [line for line in lines if _ERROR_LINE.match(line)]
        if errors:
            return errors[-1]
    return lines[0]


if __name__ == "__main__":
    sys.exit(main())
