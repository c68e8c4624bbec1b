"""One output schema for every ``beam-dpsketch`` subcommand, written through Beam sinks.

Every subcommand that releases something (``heavy-hitters``, ``frequencies``, ``quantiles``,
``continual``, ``sliding-window``, ``intermittent``, and the exact ``sketch``) produces one
:class:`CliRelease` and writes it with ``--format`` and ``--output``:

Envelope (``--format json``)
    One JSON object with four members, in this order::

        {
          "guarantee": "(eps=1, delta=1e-06)-DP in total; privacy unit: element; neighbouring
                        relation: add/remove one stream element; ...",
          "mechanism": "dp-misra-gries/design-b",
          "parameters": {"column": "route", "k": 100, "budget": {...}, "noise_scale": 2.0, ...},
          "rows": [{"key": "LAX-SFO", "estimate": 1234.5}, ...]
        }

    ``guarantee``
        The privacy claim of the releasing transform, read from the charge it recorded in its
        privacy accountant: the total budget (epsilon and delta, or rho), the privacy unit and
        the neighbouring relation, plus any condition the accountant lists as not protected by
        the noise. With ``--insecure-test-seed`` it also says that the output is not private.
        The ``sketch`` subcommand, which adds no noise, says ``NOT PRIVATE (exact sketch)``.
    ``mechanism``
        The mechanism name the transform charged (for ``sketch``: the sketch and its shape).
    ``parameters``
        Public parameters only: the command's options, the total ``budget`` as a JSON object,
        and the public calibration (``noise_scale``, ``threshold``) when the mechanism has one.
        Never a value computed from the data.
    ``rows``
        The released values, one object per row, with the field names of :data:`ROW_FIELDS`.

Row fields (the same name means the same thing in every subcommand)
    ``key``
        A key of the input column (string or integer; bytes decoded as UTF-8).
    ``estimate``
        A released (noisy) count or frequency estimate of ``key``; for ``sketch`` the exact
        sketch estimate.
    ``error_bound``
        Half-width of the estimate's error interval: ``|estimate - true| <= error_bound`` with
        probability ``parameters["error_confidence"]`` for that row, computed from released
        values and public parameters only (``heavy-hitters`` with ``design-b``; ``frequencies``,
        whose sketch bound adds the hashing error to the noise); ``null`` when
        the release states none.
    ``time``
        When the estimate was released: a 1-based row position when ``parameters["clock"]`` is
        ``"positions"``, or an event time (in the time column's units, or in ``--time-unit``
        steps for ``sliding-window``) when it is ``"event_time"``.
    ``quantile``, ``value``
        A quantile level in [0, 1] and its released value.

    Rows are in long format: a time series has one row per (time, key).

Other formats
    ``jsonl`` (one row per line), ``csv`` (a header line of field names) and ``parquet`` (one
    column per field) hold the rows only: the guarantee then goes to stderr, and for Parquet
    also into the file's schema metadata (:data:`PARQUET_METADATA_KEY` holds the envelope
    without its rows). ``table`` is an aligned text table under a title, guarantee and mechanism
    header. Without ``--output`` the text formats go to stdout; Parquet needs ``--output``.

How rows travel
    The pipeline maps each released element to rows and writes them, with any public side
    outputs, through one sink (:class:`~beam_dpsketch.io.sinks.WriteStaged`: JSON lines
    gathered into one element and written by one ``DoFn``) into a staging directory
    (:class:`~beam_dpsketch.io.sinks.StagingArea`: under Beam's ``--temp_location`` when
    given, so that remote workers can reach it, else a hidden, owner-only folder next to
    ``--output``, or in the system's temporary folder when the output goes to stdout); the
    command reads them back, orders them and writes the chosen format through Beam's
    filesystems (so ``--output`` may name any filesystem Beam knows). The sink is built of
    steps every runner implements, and what it writes does not depend on the runner nor on
    its bundling: the same seeded run writes the same bytes on the FnApiRunner, on Prism and
    on the DaskRunner (``--runner dask``, :func:`~beam_dpsketch.pipelines.runner.command_runner`).

All or nothing
    Inside the command line (:class:`~beam_dpsketch.io.sinks.CommandOutputs`), every output
    path is checked before the pipeline runs, every file is written under a temporary name and
    renamed onto its path only once the whole command has succeeded, and stdout is written
    after that: a command that fails, or is interrupted, leaves no output file (an earlier file
    at the path stays as it was) and prints no release. The sinks of
    :mod:`beam_dpsketch.io.sinks` do this for every subcommand.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from beam_dpsketch.io.sinks import (
    StagingArea,
    atomic_destination,
    check_local_destination,
    emit_text,
    write_file,
)
from beam_dpsketch.pipelines.plotting import check_plot_path
from beam_dpsketch.pipelines.runner import add_runner_arguments, pipeline_options, run_pipeline
from beam_dpsketch.pipelines.tables import format_table, jsonable_key, terminal_safe

__all__ = [
    "FORMATS",
    "NOT_PRIVATE",
    "ORDER",
    "PARQUET_METADATA_KEY",
    "ROW_FIELDS",
    "CliRelease",
    "ReleaseRun",
    "add_output_arguments",
    "check_output_arguments",
    "guarantee_of",
    "plain",
    "plot_figure",
    "plot_series",
    "run_release",
    "write_release",
]

FORMATS = ("table", "json", "jsonl", "csv", "parquet")
NOT_PRIVATE = "NOT PRIVATE (exact sketch)"
PARQUET_METADATA_KEY = b"beam_dpsketch.release"
#: Every row field any subcommand writes, with its meaning (see the module docstring).
ROW_FIELDS = {
    "key": "a key of the input column",
    "estimate": "released (noisy) count or frequency estimate of the key",
    "error_bound": "|estimate - true value| <= error_bound with probability "
    "parameters['error_confidence'] (per row); null when the release states none",
    "time": "release time: 1-based row position or event time (parameters['clock'])",
    "quantile": "quantile level in [0, 1]",
    "value": "released value of the quantile",
}
#: Staged rows carry their display order under this name; it is dropped before writing.
ORDER = "_order"
_INSECURE = (
    "; INSECURE: --insecure-test-seed makes the noise reproducible, so this output is NOT private."
)


@dataclass(frozen=True)
class CliRelease:
    """What a subcommand writes: the envelope of the module docstring.

    Attributes
    ----------
    guarantee, mechanism, parameters
        As in the envelope; ``parameters`` holds public values only.
    fields
        The row field names, in column order (a subset of :data:`ROW_FIELDS`).
    rows
        The released rows, each a mapping with exactly ``fields``.
    title
        One descriptive line for ``--format table`` (public configuration only).
    """

    guarantee: str
    mechanism: str
    parameters: Mapping[str, Any]
    fields: tuple[str, ...]
    rows: Sequence[Mapping[str, Any]]
    title: str = ""

    def __post_init__(self) -> None:
        unknown = [f for f in self.fields if f not in ROW_FIELDS]
        if unknown:
            raise ValueError(f"fields: not row fields of the CLI schema: {unknown}")

    def envelope(self, *, with_rows: bool = True) -> dict[str, Any]:
        """The JSON envelope (without ``rows`` when ``with_rows`` is false)."""
        out: dict[str, Any] = {
            "guarantee": self.guarantee,
            "mechanism": self.mechanism,
            "parameters": dict(self.parameters),
        }
        if with_rows:
            out["rows"] = [{f: row.get(f) for f in self.fields} for row in self.rows]
        return out


def plain(value: Any) -> Any:
    """A JSON value for a released number or key: numpy scalars as Python numbers, bytes as
    text, tuples as lists."""
    if hasattr(value, "item") and not isinstance(value, bytes | str):
        value = value.item()
    return jsonable_key(value)


def guarantee_of(transform: Any, *, insecure: bool = False) -> tuple[str, str, dict[str, Any]]:
    """``(guarantee, mechanism, calibration)`` of an applied DP transform.

    Everything comes from the charge the transform recorded in its accountant
    (``transform.accountant``; the last charge, which is its own): the total budget, the privacy
    unit, the neighbouring relation, the conditions not protected by the noise, the mechanism
    name, and the public calibration (``budget``, ``noise_scale``, ``threshold``).

    Parameters
    ----------
    transform
        A DP transform that has been applied to a PCollection (its charge exists).
    insecure
        The noise key is a seeded test key: the guarantee then says the output is not private.

    Raises
    ------
    RuntimeError
        If the transform has not recorded a charge yet.
    """
    charges = [c for _, c in transform.accountant.all_charges()]
    if not charges:
        raise RuntimeError("the transform has no charge yet: apply it to a PCollection first")
    charge = charges[-1]
    details = dict(charge.details)
    relation = details.get("neighbouring_relation", "add/remove one privacy unit")
    text = (
        f"{charge.total_cost} in total; privacy unit: {charge.privacy_unit}; "
        f"neighbouring relation: {relation}"
    )
    conditions = details.get("data_dependent_schedule")
    if isinstance(conditions, list | tuple) and conditions:
        text += "; NOT PROTECTED by the noise: " + "; ".join(str(c) for c in conditions)
    if insecure:
        text += _INSECURE
    calibration: dict[str, Any] = {"budget": charge.total_cost.to_dict()}
    if charge.noise_scale is not None:
        calibration["noise_scale"] = charge.noise_scale
    if charge.threshold is not None:
        calibration["threshold"] = charge.threshold
    return text, str(charge.mechanism), calibration


# --------------------------------------------------------------------------------------------
# Running a release: rows through a Beam sink (beam_dpsketch.io.sinks) and back
# --------------------------------------------------------------------------------------------


# Loggers through which Beam's runners log a failed element's exception with its traceback.
_WORKER_ERROR_LOGGERS = (
    "apache_beam.runners.common",
    "apache_beam.runners.worker.bundle_processor",
    "apache_beam.runners.worker.sdk_worker",
)
_STEP_NAME = re.compile(r" \[while running '[^']*'\]")


class _DropErrorTracebacks(logging.Filter):
    """Drop log records that carry an exception: the run re-raises it, and the command line
    reports it in one line (with ``--verbose``, Beam's INFO logging, the records stay)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.exc_info


@contextmanager
def _worker_errors_not_logged() -> Iterator[None]:
    """While a pipeline runs, keep Beam from logging the traceback of a failure that is about
    to be raised, unless Beam's INFO logging is on (``--verbose``)."""
    if logging.getLogger("apache_beam").isEnabledFor(logging.INFO):
        yield
        return
    quiet = _DropErrorTracebacks()
    loggers = [logging.getLogger(name) for name in _WORKER_ERROR_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _without_step_name(exc: BaseException) -> BaseException | None:
    """``exc`` without the `` [while running 'Step']`` that Beam appends to a failure's
    message (the message of an input error ends with the file and row it names); ``None``
    when there is nothing to remove or the exception cannot be rebuilt."""
    args = exc.args
    if not args or not isinstance(args[0], str) or not _STEP_NAME.search(args[0]):
        return None
    try:
        return type(exc)(_STEP_NAME.sub("", args[0]), *args[1:])
    except Exception:  # noqa: BLE001 - an exception type with another signature: keep it
        return None


@contextmanager
def _removing_local_tempdir(options: PipelineOptions) -> Iterator[beam.Pipeline]:
    """A pipeline whose local temporary folder is removed however the block ends.

    Beam creates the folder when the pipeline is constructed and removes it when ``run()``
    ends; a signal that stops the command before ``run()`` would leave it behind.
    """
    pipeline = beam.Pipeline(options=options)
    try:
        yield pipeline
    finally:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


@dataclass
class ReleaseRun:
    """The rows of a release run, in display order, and any named side outputs."""

    rows: list[dict[str, Any]]
    sides: dict[str, list[Any]] = field(default_factory=dict)


def _ordered(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = list(rows)
    rows.sort(key=lambda r: r.get(ORDER, ()))
    for r in rows:
        r.pop(ORDER, None)
    return rows


def run_release(
    source: beam.PTransform,
    transform: beam.PTransform,
    to_rows: Callable[[Any], Iterable[dict[str, Any]]],
    beam_args: Sequence[str] | None = None,
    *,
    explain: bool = False,
    sides: Mapping[str, beam.PTransform] | None = None,
    released_sides: Mapping[str, beam.PTransform] | None = None,
    known_options: Iterable[str] = (),
) -> ReleaseRun:
    """Run ``source | transform | FlatMap(to_rows)`` and return the rows, through a Beam sink.

    Parameters
    ----------
    source
        Reads the input (a root transform).
    transform
        The release; its output elements go to ``to_rows``.
    to_rows
        Maps one released element to rows (dicts of JSON values with CLI field names). A row
        may carry a sortable list under ``"_order"``: the rows are returned sorted by it, and
        it is removed.
    beam_args
        Beam pipeline options (FnApiRunner unless ``--runner``).
    explain
        Print ``transform.explain()`` to stderr once the pipeline is built, before it runs.
    sides
        Named transforms applied to the source's output, whose (JSON-serialisable) outputs are
        returned in :attr:`ReleaseRun.sides`; for public checks of the input.
    released_sides
        Named transforms applied to the transform's output, returned the same way.
    known_options
        The subcommand's own option strings (for suggestions on mistyped Beam options).

    Raises
    ------
    Exception
        A failure inside the pipeline (a damaged input file, ...) is re-raised as it was raised
        in the worker, without the `` [while running 'Step']`` Beam appends, so the command line
        prints the one line that names the file and row; Beam does not log its traceback
        unless its INFO logging is on (``--verbose``).
    """
    options = pipeline_options(beam_args, known_options=known_options)
    with StagingArea(options) as staging, _removing_local_tempdir(options) as pipeline:
        read = pipeline | "Read" >> source
        released = read | "Release" >> transform
        staged = {"rows": released | "Rows" >> beam.FlatMap(to_rows)}
        named = {**(sides or {}), **(released_sides or {})}
        for name, side in named.items():
            origin = read if name in (sides or {}) else released
            staged[f"side-{name}"] = origin | f"Side{name}" >> side
        # One sink for everything: the DaskRunner computes only a pipeline's last sink.
        staging.write_all(staged)
        if explain:
            print(transform.explain(), file=sys.stderr)
        try:
            with _worker_errors_not_logged():
                run_pipeline(pipeline)
        except Exception as exc:
            clean = _without_step_name(exc)
            if clean is None:
                raise
            raise clean from None
        return ReleaseRun(
            _ordered(staging.read("rows")),
            {name: staging.read(f"side-{name}") for name in named},
        )


# --------------------------------------------------------------------------------------------
# Command-line options and writers
# --------------------------------------------------------------------------------------------


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--format table|json|jsonl|csv|parquet`` and ``--output PATH`` to ``parser``, and
    the Dask runner's options (:func:`~beam_dpsketch.pipelines.runner.add_runner_arguments`)."""
    group = parser.add_argument_group("output")
    group.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (default: aligned text under the guarantee), json (one document: "
        "guarantee, mechanism, parameters, rows), jsonl or csv (rows only; the guarantee goes "
        "to stderr), parquet (rows; the guarantee also in the schema metadata; needs --output)",
    )
    group.add_argument(
        "--output",
        metavar="PATH",
        help="write the output here (any Beam filesystem) instead of stdout",
    )
    add_runner_arguments(parser)


def check_output_arguments(args: argparse.Namespace) -> None:
    """Refuse output options that cannot be honoured, before any work is done.

    Parquet needs ``--output``; a local ``--output`` must be a file that can be created
    (Beam's local filesystem creates missing directories); a ``--plot``, in the subcommands that
    have one, must have an extension matplotlib writes and a writable, existing directory
    (:func:`~beam_dpsketch.pipelines.plotting.check_plot_path`). So a run that could not write
    its results fails before the pipeline runs, with nothing written.
    """
    if args.format == "parquet" and not args.output:
        raise ValueError("--format parquet needs --output PATH")
    if args.output:
        check_local_destination(args.output, "--output", make_parents=True)
    plot = getattr(args, "plot", None)
    if plot:
        check_plot_path(plot)


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value)
    return "" if value is None else value


def _text(release: CliRelease, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(release.envelope()) + "\n"
    rows = [{f: row.get(f) for f in release.fields} for row in release.rows]
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(release.fields), lineterminator="\n")
        writer.writeheader()
        writer.writerows({f: _csv_cell(v) for f, v in r.items()} for r in rows)
        return buf.getvalue()
    if fmt == "table":
        header = [release.title] if release.title else []
        header += [f"guarantee: {release.guarantee}", f"mechanism: {release.mechanism}"]
        # Titles name the user's paths and columns: shown as text, like the cells below.
        lines = [f"# {terminal_safe(line)}" for line in header]
        lines.append(format_table(rows, list(release.fields)))
        return "\n".join(lines) + "\n"
    raise ValueError(f"--format must be one of {FORMATS}, got {fmt!r}")


def _parquet_table(release: CliRelease) -> pa.Table:
    columns = {f: [row.get(f) for row in release.rows] for f in release.fields}
    table = pa.table(columns)
    envelope = release.envelope(with_rows=False)
    metadata = {
        PARQUET_METADATA_KEY: json.dumps(envelope).encode("utf-8"),
        b"guarantee": release.guarantee.encode("utf-8"),
    }
    return table.replace_schema_metadata(metadata)


def write_release(
    release: CliRelease,
    fmt: str,
    output: str | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> None:
    """Write ``release`` in format ``fmt`` to ``output`` (any Beam filesystem) or stdout.

    The file is written atomically (:func:`~beam_dpsketch.io.sinks.atomic_destination`): under
    a temporary name, renamed onto ``output`` once complete, so no reader ever sees a partial
    release. Inside a command (:class:`~beam_dpsketch.io.sinks.CommandOutputs`) the file and
    the stdout text are published only when the whole command succeeds.

    Formats without the envelope (``jsonl``, ``csv``, ``parquet``) print the guarantee and the
    mechanism to stderr, so that a reader of the terminal always sees what was claimed.

    Raises
    ------
    ValueError
        For ``parquet`` without ``output``, or an unknown format.
    """
    stderr = stderr or sys.stderr
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {FORMATS}, got {fmt!r}")
    if fmt in ("jsonl", "csv", "parquet"):
        print(f"# guarantee: {release.guarantee}", file=stderr)
        print(f"# mechanism: {release.mechanism}", file=stderr)
    if fmt == "parquet":
        if not output:
            raise ValueError("--format parquet needs --output PATH")
        sink = pa.BufferOutputStream()
        pq.write_table(_parquet_table(release), sink)
        write_file(output, sink.getvalue().to_pybytes())
        return
    text = _text(release, fmt)
    if output:
        write_file(output, text.encode("utf-8"))
    else:
        emit_text(text, stdout)


@contextmanager
def plot_figure(
    path: str, rows: int = 1, *, figsize: tuple[float, float] = (8, 4.5), dpi: int = 120
) -> Iterator[tuple[Any, Any]]:
    """``(figure, axes)`` of a ``--plot`` (matplotlib, Agg), laid out and saved to ``path`` on
    exit (with ``rows > 1`` the axes share x).

    The file is written atomically, with the command's other outputs
    (:func:`~beam_dpsketch.io.sinks.atomic_destination`): a failed save leaves nothing
    at ``path``, and a command that fails later publishes no plot.
    """
    from beam_dpsketch.pipelines.plotting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(rows, 1, figsize=figsize, sharex=rows > 1)
    try:
        yield fig, axes
        fig.tight_layout()
        with atomic_destination(path) as temporary:
            fig.savefig(temporary, dpi=dpi)
    finally:
        plt.close(fig)


def plot_series(
    path: str,
    series: Mapping[Any, tuple[Sequence[Any], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    legend_title: str | None = None,
    max_series: int = 20,
) -> None:
    """A ``--plot`` of estimates over time: one line per key (``{key: (xs, ys)}``), at most
    ``max_series`` of them."""
    with plot_figure(path) as (_, ax):
        shown = list(series.items())[:max_series]
        for key, (xs, ys) in shown:
            ax.plot(xs, ys, marker="." if len(xs) < 50 else None, label=str(key))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title[:100], fontsize=8)
        if shown:
            ax.legend(title=legend_title, fontsize=7, ncol=2 if len(shown) > 10 else 1)
        ax.grid(True, alpha=0.3)
