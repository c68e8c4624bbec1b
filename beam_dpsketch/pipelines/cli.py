"""The ``beam-dpsketch`` command line.

Each subcommand lives in its own module under :mod:`beam_dpsketch.pipelines` (``evaluate``
registers the harness of a source checkout) and exposes ``register(subparsers)``, which adds
its parser and sets ``run=<callable(args, beam_args) -> int>`` as a default. Arguments this
parser does not know are Beam pipeline options (``--runner``, ``--direct_num_workers``, ...) and
are passed through.
Errors print one line to stderr and exit with status 2; with ``--verbose`` they propagate, so the
traceback shows.

A command publishes its outputs only when it succeeds
(:class:`~beam_dpsketch.io.sinks.CommandOutputs`): every ``--output``, ``--plot``,
``--save-sketch`` and ``--out`` destination is checked before the pipeline runs, files are
renamed into place at the end and stdout is written last, so a run that exits non-zero has
released nothing (``--save-sketch``, the exact sketch, is written by the pipeline). ``SIGINT``
(Ctrl-C) and ``SIGTERM`` stop the command, delete its staging folders and temporary files, print
one line, and exit with status 130 and 143 (128 + the signal number).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from beam_dpsketch.pipelines.arguments import accept_negative_numbers

__all__ = ["main", "SUBCOMMAND_MODULES"]

# Order is the order of `beam-dpsketch --help`.
SUBCOMMAND_MODULES = (
    "beam_dpsketch.pipelines.demo",
    "beam_dpsketch.pipelines.heavy_hitters",
    "beam_dpsketch.pipelines.frequencies",
    "beam_dpsketch.pipelines.top_keys",
    "beam_dpsketch.pipelines.sketch",
    "beam_dpsketch.pipelines.sliding_window",
    "beam_dpsketch.pipelines.continual",
    "beam_dpsketch.pipelines.intermittent",
    "beam_dpsketch.pipelines.merge",
    "beam_dpsketch.pipelines.evaluate",
)


def build_parser() -> argparse.ArgumentParser:
    # Imported here, after main() configured logging: the options module imports Beam's
    # filesystems, which log a warning at import.
    from beam_dpsketch.pipelines.arguments import CommandLineParser

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
    from beam_dpsketch.io.sinks import CommandOutputs
    from beam_dpsketch.pipelines.runner import command_runner

    received: list[int] = []
    try:
        with (
            _stopping_on_signals(received) as signals,
            CommandOutputs(_destinations(args)) as outputs,
            # With --runner dask: the subcommand is checked, and a --dask-workers cluster
            # lives as long as the command.
            command_runner(args, beam_args) as beam_args,
        ):
            code = int(args.run(args, beam_args) or 0)
            if code == 0:
                # Past this point the command has succeeded: a signal must not interrupt the
                # publication halfway, nor report a release that is out as "nothing released".
                signals.ignore()
                outputs.publish()
            return code
    except (KeyboardInterrupt, _Stopped):
        return _stopped(args.command, received)
    except Exception as exc:
        # A signal that arrived while Beam was running may come back wrapped in Beam's error.
        if received:
            return _stopped(args.command, received)
        if args.verbose:
            raise
        print(f"beam-dpsketch {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _destinations(args: argparse.Namespace) -> list:
    """The output destinations the parsed command line names (``--output``, ``--plot``,
    ``--save-sketch``, ``--out``), for :class:`~beam_dpsketch.io.sinks.CommandOutputs`,
    which checks each before anything runs."""
    from beam_dpsketch.io.sinks import Destination

    named = (
        ("output", "--output", False),
        ("plot", "--plot", False),
        ("save_sketch", "--save-sketch", False),
        ("out", "--out", True),
    )
    return [
        Destination(option, getattr(args, name), is_folder)
        for name, option, is_folder in named
        if getattr(args, name, None)
    ]


class _Stopped(BaseException):
    """Raised in the main thread by the ``SIGTERM`` handler: unwinds like ``KeyboardInterrupt``
    (no ``except Exception`` stops it), so every cleanup on the way runs."""


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _SignalState:
    """Whether the stop signals still stop the command (:meth:`ignore` ends that)."""

    def __init__(self) -> None:
        self.ignored = False

    def ignore(self) -> None:
        self.ignored = True


@contextmanager
def _stopping_on_signals(received: list[int]) -> Iterator[_SignalState]:
    """While the command runs, turn ``SIGINT`` and ``SIGTERM`` into exceptions (recording the
    signal in ``received``), so that the command's staging is deleted on the way out."""
    state = _SignalState()
    if threading.current_thread() is not threading.main_thread():
        yield state  # signal handlers can only be set in the main thread
        return

    def stop(signum: int, frame: object) -> None:
        if state.ignored:
            return
        received.append(signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Stopped

    def quiet_once_stopped(hook_args: threading.ExceptHookArgs) -> None:
        # Once stopped, Beam's helper threads die of the stop (a worker process that Ctrl-C
        # reached exits, its monitor thread raises): the one-line report says it all.
        if not received:
            previous_hook(hook_args)

    previous_hook = threading.excepthook
    threading.excepthook = quiet_once_stopped
    previous = {s: signal.signal(s, stop) for s in _STOP_SIGNALS}
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        threading.excepthook = previous_hook


def _stopped(command: str, received: list[int]) -> int:
    """Report a command stopped by a signal; returns 128 + the signal's number."""
    signum = received[0] if received else signal.SIGINT
    name = "interrupted" if signum == signal.SIGINT else "terminated"
    print(
        f"beam-dpsketch {command}: {name} ({signal.Signals(signum).name}); nothing was released",
        file=sys.stderr,
    )
    return 128 + int(signum)


# Dask's ``distributed`` sets its loggers' levels from its configuration when it is imported,
# which it reads from the environment: in this process and in the worker processes a local Dask
# cluster spawns. The variable is set only when the user has not set it.
_DASK_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"
_dask_level_set_here = False


def _configure_logging(verbose: bool) -> None:
    """INFO with ``-v``; else ERROR, for Beam, Dask and the runners' worker processes.

    The FnApiRunner's ``multi_processing`` workers follow the ``apache_beam`` level
    (:class:`~beam_dpsketch.pipelines.runner.FnApiRunnerWorkerLogging`).
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
