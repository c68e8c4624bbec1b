"""Shared command-line helpers: input and output arguments, Beam pipeline options, tables.

Every subcommand builds its pipeline through :func:`make_pipeline`, which runs on Beam's
in-process ``FnApiRunner`` unless ``--runner`` is given. The default ``DirectRunner`` would first
try to download the Prism runner (offline machines wait for it to fail), and the FnApiRunner's
``multi_threading`` mode is refused because on Beam 2.77 it loses elements around large
GroupByKeys; ``--direct_running_mode=multi_processing --direct_num_workers=N`` is the way to use
several cores locally. Its SDK worker processes then log at this process's level for Beam
(:class:`FnApiRunnerWorkerLogging`).

Options of every runner Beam defines are recognised, including those declared next to a runner
rather than in ``apache_beam.options.pipeline_options`` (``--dask_client_address`` of the
``DaskRunner``): the chosen runner's module is imported before the options are checked. The
``DaskRunner`` itself is refused (:func:`pipeline_options`): the command line's outputs leave the
pipeline through ``WriteToText``, which it completes without writing the elements.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

import apache_beam as beam
from apache_beam.options import pipeline_options as beam_pipeline_options
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
from google.protobuf import struct_pb2

from beam_dpsketch.io import (
    DEFAULT_MAX_RECORD_BYTES,
    INPUT_FORMATS,
    KEY_TYPES,
    ON_BAD_RECORD,
    ReadOrderedKeys,
)
from beam_dpsketch.io.sinks import check_local_destination
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget

__all__ = [
    "DEFAULT_RUNNER",
    "TIME_COLUMN_MEMORY",
    "GIVEN_OPTIONS",
    "CommandLineParser",
    "FnApiRunnerWorkerLogging",
    "add_input_arguments",
    "add_privacy_arguments",
    "bad_record_options",
    "budget_from_args",
    "check_plot_path",
    "convert_query_keys",
    "format_table",
    "given_options",
    "jsonable_key",
    "make_pipeline",
    "noise_source_from_args",
    "ordered_input",
    "pipeline_options",
    "option_strings",
    "read_candidates",
    "refuse_given",
    "terminal_safe",
]

DEFAULT_RUNNER = "FnApiRunner"

#: Appended to every ``--time-column`` help: the one input path whose memory grows with the rows.
TIME_COLUMN_MEMORY = (
    "; the rows are sorted by it in memory (about 16 bytes per row with int keys, more with "
    "strings), whereas file order streams in bounded memory"
)


#: Namespace attribute where :class:`CommandLineParser` records the options the command line gave.
GIVEN_OPTIONS = "given_options"


class _NotGiven:
    """Placeholder value of an option while its command line is parsed (never seen after)."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN = _NotGiven()
# Actions that update the value already in the namespace (a list, a count) rather than replace
# it: they cannot start from a placeholder. Passing one always stores a new object (a copied
# list, a count), so "given" is "the value is not the default object".
_ACCUMULATING_ACTIONS = (
    argparse._AppendAction,  # noqa: SLF001 - includes _ExtendAction
    argparse._AppendConstAction,  # noqa: SLF001
    argparse._CountAction,  # noqa: SLF001
)


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that records which options the command line gave explicitly.

    After parsing, ``namespace.given_options`` (:data:`GIVEN_OPTIONS`) maps the ``dest`` of every
    option that appeared on the command line (under any spelling or abbreviation) to its long
    option string, e.g. ``{"max_contributions": "--max-contributions"}`` (for options sharing a
    ``dest``, that of the first one declared). Every other option holds
    its default, as with ``argparse.ArgumentParser``; an option passed with its default value
    counts as given. Subparsers created by ``add_subparsers`` are of this class too (argparse's
    default), and their records are merged into the parent's namespace.

    :func:`given_options` and :func:`refuse_given` read the record, so a subcommand can refuse an
    option the user passed that would have no effect, whatever its default.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace = argparse.Namespace() if namespace is None else namespace
        tracked: dict[str, argparse.Action] = {}
        for action in self._actions:
            if (
                not action.option_strings
                or action.dest == argparse.SUPPRESS
                or action.default is argparse.SUPPRESS
                or action.dest in tracked
                or hasattr(namespace, action.dest)
            ):
                continue
            tracked[action.dest] = action
            if not isinstance(action, _ACCUMULATING_ACTIONS):
                # argparse sets a default only where the namespace has no value: the placeholder
                # stays exactly where no option wrote.
                setattr(namespace, action.dest, _NOT_GIVEN)
        namespace, extras = super().parse_known_args(args, namespace)
        given = dict(getattr(namespace, GIVEN_OPTIONS, None) or {})
        for dest, action in tracked.items():
            value = getattr(namespace, dest, _NOT_GIVEN)
            if isinstance(action, _ACCUMULATING_ACTIONS):
                passed = value is not action.default
            else:
                passed = value is not _NOT_GIVEN
                if not passed:
                    default = action.default
                    if isinstance(default, str):
                        # argparse converts a string default with the option's type.
                        default = self._get_value(action, default)
                    setattr(namespace, dest, default)
            if passed:
                given[dest] = next(
                    (s for s in action.option_strings if s.startswith("--")),
                    action.option_strings[0],
                )
        setattr(namespace, GIVEN_OPTIONS, given)
        return namespace, extras


def given_options(args: argparse.Namespace, *dests: str) -> list[str]:
    """The option strings of those ``dests`` the command line gave, in the order of ``dests``.

    Reads the record of :class:`CommandLineParser`; a namespace without one (built by another
    parser or by hand) has no given options.
    """
    given: Mapping[str, str] = getattr(args, GIVEN_OPTIONS, None) or {}
    return [given[d] for d in dests if d in given]


def refuse_given(args: argparse.Namespace, dests: Iterable[str], reason: str) -> None:
    """Refuse options that would have no effect: raise if the command line gave any of ``dests``.

    Raises
    ------
    ValueError
        ``"--a, --b have no effect <reason>"`` for the given ones (one line; ``reason`` should
        name only public settings, e.g. ``"without --time-column"``).
    """
    flags = given_options(args, *dests)
    if flags:
        verb = "has" if len(flags) == 1 else "have"
        raise ValueError(f"{', '.join(flags)} {verb} no effect {reason}")


def check_plot_path(path: str, *, formats: Sequence[str] | None = None) -> None:
    """Refuse a ``--plot`` destination before any work: matplotlib must be installed and write
    the file's extension (or one of ``formats``), and the file must be writable locally.

    Raises
    ------
    ValueError
        Naming ``--plot`` (a missing matplotlib raises ``ValueError`` too, so the command line
        reports it in one line before the pipeline runs).
    """
    from beam_dpsketch.pipelines.plotting import pyplot

    try:
        pyplot()  # the Agg backend of plot_figure
    except ImportError:
        raise ValueError(
            "--plot needs the 'matplotlib' package: pip install 'matplotlib>=3.8'"
        ) from None
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    extension = os.path.splitext(path)[1].lower().lstrip(".")
    allowed = sorted(formats or FigureCanvasAgg.get_supported_filetypes())
    if extension not in allowed:
        raise ValueError(
            f"--plot {path}: the extension must be one of {', '.join('.' + f for f in allowed)}"
        )
    check_local_destination(path, "--plot")


def add_input_arguments(parser: argparse.ArgumentParser, *, input_required: bool = True) -> None:
    """Add ``--input``, ``--input-format``, ``--column``, ``--key-type``, ``--on-bad-record`` and
    ``--max-record-bytes`` to ``parser``."""
    group = parser.add_argument_group("input")
    group.add_argument(
        "--input",
        required=input_required,
        metavar="PATH",
        help="input file or glob (Parquet, CSV, JSON Lines or text; any Beam filesystem)",
    )
    group.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default=None,
        help="input format (default: from the extension; .parquet, .csv, .jsonl/.ndjson/.json, "
        "anything else is text with one key per line)",
    )
    group.add_argument(
        "--column",
        metavar="NAME",
        default=None,
        help="key column (required except for text input)",
    )
    group.add_argument(
        "--key-type",
        choices=KEY_TYPES,
        default=None,
        help="convert keys to int or str (default: the column's type; CSV and text give str)",
    )
    group.add_argument(
        "--on-bad-record",
        choices=ON_BAD_RECORD,
        default="fail",
        help="a malformed record (missing key, not an int key or number, ragged CSV record, "
        "JSON line that is not an object or has another type, not UTF-8, longer than "
        "--max-record-bytes): fail the run (default), or drop it before any DP step, "
        "uncounted (JSON Lines input then needs --key-type)",
    )
    group.add_argument(
        "--max-record-bytes",
        type=int,
        metavar="N",
        default=DEFAULT_MAX_RECORD_BYTES,
        help="the longest line or CSV record read, in bytes; memory holds one such record "
        f"(default {DEFAULT_MAX_RECORD_BYTES})",
    )


def ordered_input(args: argparse.Namespace) -> ReadOrderedKeys:
    """The public-order reader of :func:`add_input_arguments`' options and ``--time-column``."""
    return ReadOrderedKeys(
        args.input,
        args.column,
        args.input_format,
        key_type=args.key_type,
        time_column=args.time_column,
        **bad_record_options(args),
    )


def bad_record_options(args: argparse.Namespace) -> dict[str, Any]:
    """The readers' ``on_bad_record`` and ``max_record_bytes`` from :func:`add_input_arguments`'
    ``--on-bad-record`` and ``--max-record-bytes``."""
    return {"on_bad_record": args.on_bad_record, "max_record_bytes": args.max_record_bytes}


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` (to suggest corrections for mistyped Beam options)."""
    return [s for action in parser._actions for s in action.option_strings]  # noqa: SLF001


#: The delta of every command whose release needs one, unless ``--delta`` says otherwise.
DEFAULT_DELTA = 1e-6

#: Default counters per row of the streaming commands' sketches (continual, sliding-window).
#: Every key adds its count to one cell per row and the estimate keeps the minimum over the
#: rows, so a key reads about ``n / width`` of other keys' rows (``n`` the rows counted). At
#: 1,024 a rare key read several hundred high on a 2 M-row city stream (continual) and about
#: 75 high over a 10^5-row window (sliding-window); at 16,384 collisions stay below the noise at
#: eps 1 there, for 20-30 % more run time.
STREAM_WIDTH = 16384
STREAM_WIDTH_HELP = (
    f"counters per row ({STREAM_WIDTH}); a key's estimate carries about rows/width of other "
    "keys' counts: raise it for much more than 10^6 rows (continual) or a window of much more "
    "than 10^5 rows (sliding-window)"
)


def add_privacy_arguments(
    group: argparse._ArgumentGroup,
    *,
    delta: str | float | None = "optional",
    rho: bool = False,
) -> None:
    """Add ``--epsilon``, ``--delta``, ``--rho``, ``--insecure-test-seed`` and ``--explain``.

    Parameters
    ----------
    group
        The argument group (or parser) to add to.
    delta
        ``None``: no ``--delta`` (pure epsilon-DP only); ``"optional"``: pure DP without it;
        ``"gaussian"``: a Gaussian release, for which ``--epsilon`` alone means
        ``delta = DEFAULT_DELTA``; or a float: its default.
    rho
        Also offer ``--rho`` (zCDP) instead of ``--epsilon``/``--delta``; ``--epsilon`` is then
        optional.

    :func:`budget_from_args` and :func:`noise_source_from_args` read them back.
    """
    group.add_argument(
        "--epsilon",
        type=float,
        required=not rho,
        help="privacy parameter epsilon" + ("" if delta is not None else " (pure DP, in total)"),
    )
    if delta == "optional":
        help_delta = "privacy parameter delta (default: pure epsilon-DP)"
        group.add_argument("--delta", type=float, help=help_delta)
    elif delta == "gaussian":
        group.add_argument(
            "--delta",
            type=float,
            help=f"privacy parameter delta ({DEFAULT_DELTA:g} with --epsilon alone: this release "
            "is Gaussian, it has no pure-DP form)",
        )
    elif delta is not None:
        group.add_argument(
            "--delta", type=float, default=delta, help=f"privacy parameter delta ({delta:g})"
        )
    if rho:
        group.add_argument("--rho", type=float, help="zCDP rho (instead of --epsilon/--delta)")
    group.add_argument(
        "--insecure-test-seed",
        type=int,
        metavar="N",
        help="INSECURE: derive the noise key from N (reproducible output, no privacy)",
    )
    group.add_argument(
        "--explain", action="store_true", help="print the privacy accounting before running"
    )


def budget_from_args(args: argparse.Namespace, *, pure: bool = True) -> PrivacyBudget:
    """The budget of :func:`add_privacy_arguments`' options.

    ``--rho`` gives ``PrivacyBudget.zcdp``, ``--epsilon`` with ``--delta`` ``approx``, and
    ``--epsilon`` alone ``pure``, or, with ``pure=False`` (Gaussian releases),
    ``approx(epsilon, DEFAULT_DELTA)``.
    """
    rho = getattr(args, "rho", None)
    epsilon, delta = args.epsilon, getattr(args, "delta", None)
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("pass either --rho or --epsilon with --delta")
        return PrivacyBudget.zcdp(rho)
    if epsilon is None:
        alternative = " (or --rho)" if hasattr(args, "rho") else ""
        raise ValueError("--epsilon is required" + alternative)
    if delta is None and not pure:
        # A Gaussian release has no pure-DP form: the same default delta as the other commands.
        delta = DEFAULT_DELTA
    if delta is None:
        return PrivacyBudget.pure(epsilon)
    return PrivacyBudget.approx(epsilon, delta)


def noise_source_from_args(args: argparse.Namespace) -> NoiseSource:
    """A fresh secret ``NoiseSource``, or the insecure seeded one of ``--insecure-test-seed``."""
    if args.insecure_test_seed is not None:
        return NoiseSource.insecure_for_tests(args.insecure_test_seed)
    return NoiseSource()


def read_candidates(path: str) -> list[str]:
    """The public candidate keys of a ``--candidates`` file: one per line, blank lines skipped.

    Raises
    ------
    ValueError
        If the file has no keys.
    """
    with open(path, encoding="utf-8") as f:
        keys = [line.rstrip("\n") for line in f if line.strip()]
    if not keys:
        raise ValueError(f"--candidates file {path} has no keys")
    return keys


def _has_flag(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _flag_value(args: Sequence[str], name: str) -> str | None:
    value = None
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            value = a.split("=", 1)[1]
        elif a == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def _runner_path(runner: str) -> str | None:
    """The ``module.Class`` path of a ``--runner`` value (a path, or a name Beam knows)."""
    if "." in runner:
        return runner
    wanted = runner.lower()
    for path in StandardOptions.ALL_KNOWN_RUNNERS:
        name = path.rsplit(".", 1)[-1].lower()
        if wanted in (name, name.removesuffix("runner")):
            return path
    return None


def _import_runner(beam_args: Sequence[str]) -> str | None:
    """Import the module of the chosen runner, so that its own options classes exist.

    Returns the runner's ``module.Class`` path (``None`` if unknown). A runner that cannot be
    imported is left for Beam to report when it builds the pipeline.
    """
    runner = _flag_value(beam_args, "--runner")
    path = _runner_path(runner) if runner else None
    if path is not None:
        try:
            importlib.import_module(path.rsplit(".", 1)[0])
        except Exception:  # Beam reports it, with its own message, when it creates the runner
            pass
    return path


def _without_flag(args: Sequence[str], name: str) -> list[str]:
    """``args`` without every ``name=value`` and ``name value`` occurrence."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def _warn_unknown(beam_args: Sequence[str], known: Iterable[str], stderr: TextIO) -> None:
    """Warn about options neither this CLI nor Beam knows: Beam ignores them silently."""
    # The same parser Beam builds in PipelineOptions.get_all_options (private, but it is how
    # Beam itself decides which arguments it will discard). The options classes are the
    # subclasses of PipelineOptions imported so far: the caller imports the runner's module first.
    parser = beam_pipeline_options._BeamArgumentParser(allow_abbrev=False)  # noqa: SLF001
    classes: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # noqa: SLF001
    _, unknown = parser.parse_known_args(list(beam_args))
    choices = sorted({s for a in parser._actions for s in a.option_strings} | set(known))  # noqa: SLF001
    for arg in unknown:
        if not arg.startswith("--"):
            continue
        name = arg.split("=", 1)[0]
        hint = difflib.get_close_matches(name, choices, n=1)
        suffix = f" (did you mean {hint[0]}?)" if hint else ""
        print(
            f"beam-dpsketch: warning: unknown option {name} passed to Beam, which ignores it"
            + suffix,
            file=stderr,
        )


class FnApiRunnerWorkerLogging(FnApiRunner):
    """Beam's FnApiRunner, whose SDK worker processes log at this process's level for Beam.

    The FnApiRunner starts its ``multi_processing`` workers with no pipeline options, so they log
    at INFO (about twenty lines each) whatever the caller configured. This runner gives them
    ``default_sdk_harness_log_level``: the effective level of the ``apache_beam`` logger when the
    runner is created (``ERROR`` for the command line without ``-v``). A worker still prints
    what it logs before it reads its options (one line, and Beam's import-time warnings).
    Everything else is the FnApiRunner's.
    """

    def __init__(self) -> None:
        level = logging.getLevelName(logging.getLogger("apache_beam").getEffectiveLevel())
        options = struct_pb2.Struct()
        options.update({"beam:option:default_sdk_harness_log_level:v1": level})
        info = beam_provision_api_pb2.ProvisionInfo(
            retrieval_token="unused-retrieval-token", pipeline_options=options
        )
        super().__init__(provision_info=ExtendedProvisionInfo(info))


_FN_API_RUNNERS = (
    "apache_beam.runners.portability.fn_api_runner.FnApiRunner",
    "apache_beam.runners.portability.fn_api_runner.fn_runner.FnApiRunner",
)
_WORKER_LOGGING_RUNNER = f"{__name__}.{FnApiRunnerWorkerLogging.__name__}"
# Runners the command line refuses, with the reason (measured on Beam 2.77).
_REFUSED_RUNNERS = {
    "apache_beam.runners.dask.dask_runner.DaskRunner": (
        "the command line's results leave the pipeline through WriteToText, which DaskRunner "
        "completes without writing the elements (the output would be empty), and DaskRunner "
        "computes only the last of several outputs. Apply the DP transforms in a Python "
        "pipeline with one sink (docs/deploying.md), or choose another runner"
    ),
}


def pipeline_options(
    beam_args: Sequence[str] | None = None,
    *,
    known_options: Iterable[str] = (),
    stderr: TextIO | None = None,
) -> PipelineOptions:
    """Beam pipeline options from the pass-through arguments, defaulting to the FnApiRunner.

    The FnApiRunner in ``multi_processing`` mode becomes :class:`FnApiRunnerWorkerLogging`
    (the same runner, with workers that log at this process's level for Beam).

    Parameters
    ----------
    beam_args
        Arguments the subcommand did not parse (``--runner``, ``--direct_num_workers``, ...).
    known_options
        The subcommand's own option strings, used to suggest corrections for typos.
    stderr
        Where to warn about options Beam does not know (default ``sys.stderr``).

    Raises
    ------
    ValueError
        For ``--direct_running_mode=multi_threading``, which loses data on this Beam version,
        and for a runner the command line cannot get its results back from (the DaskRunner).
    """
    args = list(beam_args or ())
    if _flag_value(args, "--direct_running_mode") == "multi_threading":
        raise ValueError(
            "--direct_running_mode=multi_threading loses elements on Beam 2.77; use "
            "in_memory (the default) or multi_processing"
        )
    if not _has_flag(args, "--runner"):
        args = [f"--runner={DEFAULT_RUNNER}", *args]
    path = _import_runner(args)
    _warn_unknown(args, known_options, stderr or sys.stderr)
    if path in _REFUSED_RUNNERS:
        name = path.rsplit(".", 1)[-1]
        raise ValueError(f"--runner {name}: {_REFUSED_RUNNERS[path]}")
    if path in _FN_API_RUNNERS and _flag_value(args, "--direct_running_mode") == "multi_processing":
        args = [f"--runner={_WORKER_LOGGING_RUNNER}", *_without_flag(args, "--runner")]
    return PipelineOptions(args)


def make_pipeline(
    beam_args: Sequence[str] | None = None, *, known_options: Iterable[str] = ()
) -> beam.Pipeline:
    """A ``beam.Pipeline`` with :func:`pipeline_options` (FnApiRunner unless ``--runner``)."""
    return beam.Pipeline(options=pipeline_options(beam_args, known_options=known_options))


def jsonable_key(key: Any) -> Any:
    """A key as JSON: str and int as they are, bytes decoded as UTF-8 (escaped if invalid),
    tuples as lists."""
    if isinstance(key, bytes):
        return key.decode("utf-8", "backslashreplace")
    if isinstance(key, tuple):
        return [jsonable_key(k) for k in key]
    return key


def convert_query_keys(queries: Sequence[str], key_type: str | None, column: str | None) -> list:
    """Convert ``--query`` strings to the key type of the input, so they can match.

    Raises
    ------
    ValueError
        If a query is not an integer but the keys are ints (the message names the column).
    """
    if key_type == "int":
        out = []
        for q in queries:
            try:
                out.append(int(q))
            except ValueError:
                where = f"column {column!r}" if column else "the input"
                raise ValueError(
                    f"--query {q!r} is not an integer, but {where} holds integer keys"
                ) from None
        return out
    if key_type == "bytes":
        return [q.encode("utf-8") for q in queries]
    return list(queries)


# Characters a terminal may act on rather than show: C0 and C1 controls (ESC starts the
# sequences that recolour, move the cursor or retitle the window), DEL, line and paragraph
# separators, and the bidirectional overrides that reorder what is shown.
_UNSAFE_FOR_TERMINAL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on shown as a Python escape
    (``"\\x1b"``, ``"\\n"``, ``"\\u202e"``), so that keys from the data print as text."""
    return _UNSAFE_FOR_TERMINAL.sub(lambda m: repr(m.group())[1:-1], text)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bytes):
        return terminal_safe(value.decode("utf-8", "backslashreplace"))
    return terminal_safe(str(value))


def format_table(
    records: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    headers: Sequence[str] | None = None,
) -> str:
    """Records as an aligned text table (numbers right-aligned), one line per record.

    Cells and headers pass through :func:`terminal_safe`: a key holding terminal control
    sequences prints as escaped text, never as a command to the terminal.
    """
    headers = [terminal_safe(h) for h in (headers or columns)]
    rows = [[_cell(r.get(c, "")) for c in columns] for r in records]
    numeric = [
        bool(records) and all(isinstance(r.get(c), int | float) for r in records) for c in columns
    ]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(cells, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)
