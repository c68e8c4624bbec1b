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
    The pipeline maps each released element to rows and writes them with Beam's
    ``WriteToText`` (JSON lines) into a staging directory (:class:`StagingArea`: under Beam's
    ``--temp_location`` when given, so that remote workers can reach it, else a hidden,
    owner-only folder next to ``--output``, or in the system's temporary folder when the output
    goes to stdout); the command reads them back, orders them and writes the chosen format
    through Beam's filesystems (so ``--output`` may name any filesystem Beam knows).

All or nothing
    Inside the command line (:class:`CommandOutputs`), every output path is checked before the
    pipeline runs, every file is written under a temporary name and renamed onto its path only
    once the whole command has succeeded, and stdout is written after that: a command that
    fails, or is interrupted, leaves no output file (an earlier file at the path stays as it
    was) and prints no release.
"""

from __future__ import annotations

import argparse
import contextvars
import csv
import io
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

from beam_dpsketch.pipelines.options import (
    check_local_destination,
    check_plot_path,
    format_table,
    jsonable_key,
    pipeline_options,
    terminal_safe,
)

try:
    import fcntl
except ImportError:  # not POSIX: no locks, so stale staging folders are not swept
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FORMATS",
    "NOT_PRIVATE",
    "ORDER",
    "PARQUET_METADATA_KEY",
    "ROW_FIELDS",
    "CliRelease",
    "STAGING_PREFIX",
    "CommandOutputs",
    "Destination",
    "ReleaseRun",
    "StagingArea",
    "active_outputs",
    "add_output_arguments",
    "atomic_destination",
    "check_output_arguments",
    "emit_text",
    "guarantee_of",
    "plain",
    "plot_figure",
    "plot_series",
    "remove_stale_staging",
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
# Staging: rows through a Beam sink and back
# --------------------------------------------------------------------------------------------


STAGING_PREFIX = ".beam-dpsketch-staging-"
#: A staging folder without its lock file is left alone for this long (it may be being created).
_UNLOCKED_STAGING_GRACE_SECONDS = 3600.0
_LOCK_NAME = ".lock"
_PENDING_PREFIX = ".beam-dpsketch-new-"


def remove_stale_staging(folder: str) -> list[str]:
    """Delete the staging folders in ``folder`` whose command is no longer running.

    A command holds an exclusive ``flock`` on the lock file of each staging folder it creates
    for as long as it runs; the kernel releases it when the process ends, however it ends
    (``SIGKILL`` included). So a staging folder whose lock can be taken was left by a command
    that is gone, and its released rows are deleted here, by the next command that stages in
    the same folder. Folders of running commands are never touched. Returns the paths deleted.
    """
    if fcntl is None or not os.path.isdir(folder):
        return []
    removed = []
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(STAGING_PREFIX)]
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            lock_path = os.path.join(entry.path, _LOCK_NAME)
            if not os.path.exists(lock_path):
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
                if age > _UNLOCKED_STAGING_GRACE_SECONDS:
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(entry.path)
                continue
            with open(lock_path, "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its command is running
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
        except OSError:
            continue
    return removed


class _StagingFolder:
    """A hidden, owner-only folder ``<base>/.beam-dpsketch-staging-*`` locked while in use."""

    def __init__(self, base: str) -> None:
        os.makedirs(base, exist_ok=True)
        remove_stale_staging(base)
        # Created under another name and renamed once locked: a sweep by another command
        # never sees it unlocked.
        pending = tempfile.mkdtemp(prefix=_PENDING_PREFIX, dir=base)
        self._lock: TextIO | None = open(os.path.join(pending, _LOCK_NAME), "w")  # noqa: SIM115
        if fcntl is not None:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.path = os.path.join(
            base, STAGING_PREFIX + os.path.basename(pending).removeprefix(_PENDING_PREFIX)
        )
        os.rename(pending, self.path)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None


@dataclass(frozen=True)
class Destination:
    """A place a command writes to, checked before its pipeline runs.

    Attributes
    ----------
    option
        The option that names it (``--output``, ``--plot``, ``--out``).
    path
        The path the user gave.
    is_folder
        ``True`` for a folder the command writes files into (``demo --out``).
    """

    option: str
    path: str
    is_folder: bool = False

    @property
    def local(self) -> bool:
        return FileSystems.get_scheme(self.path) is None

    @property
    def folder(self) -> str:
        """The local folder its files (and the command's staging) go to."""
        full = os.path.abspath(self.path)
        return full if self.is_folder else os.path.dirname(full)


_ACTIVE: contextvars.ContextVar[CommandOutputs | None] = contextvars.ContextVar(
    "beam_dpsketch_command_outputs", default=None
)


class CommandOutputs:
    """Every output of one command, published together only when the command succeeds.

    While active (``with CommandOutputs(...)``), :func:`atomic_destination` writes each output
    file under a temporary name in a hidden staging folder next to its destination, and
    :func:`emit_text` holds back what would go to stdout. :meth:`publish` then renames the files
    onto their destinations (one ``rename`` each, atomic on a local filesystem) and only then
    prints the held-back text. Leaving the block without :meth:`publish` (an error, a signal, a
    non-zero exit status) deletes the temporary files and prints nothing: a command that fails
    releases nothing, so a caller that retries it does not publish a second, independently
    noised release next to a first one.

    The rows a pipeline stages through a Beam sink (:class:`StagingArea`) go to a staging
    folder in the folder of the first local destination (the ``--output`` file's folder), or
    else in the system's temporary folder: released rows never land anywhere the user did not
    name. Staging folders are removed when the block ends, and a folder left by a command that
    was killed (``SIGKILL`` cannot be handled) is removed by the next command that stages in
    the same place (:func:`remove_stale_staging`).

    Parameters
    ----------
    destinations
        The command's destinations. Each is checked on entry, before any work
        (:func:`~beam_dpsketch.pipelines.options.check_local_destination`).

    Raises
    ------
    ValueError
        On entry, for a destination that cannot be written (naming its option and path).
    """

    def __init__(self, destinations: Iterable[Destination] = ()) -> None:
        self.destinations = list(destinations)
        self._folders: dict[str, _StagingFolder] = {}
        self._files: list[tuple[str, str]] = []
        self._text: list[tuple[TextIO | None, str]] = []
        self._notes: list[str] = []
        self._token: contextvars.Token | None = None

    def __enter__(self) -> CommandOutputs:
        for d in self.destinations:
            if d.local:
                probe = os.path.join(d.path, "x") if d.is_folder else d.path
                check_local_destination(probe, d.option, make_parents=True)
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None
        self.discard()

    def staging_folder(self, base: str | None = None) -> str:
        """A locked, hidden staging folder in ``base`` (default: the first local destination's
        folder, else the system's temporary folder), created on first use."""
        if base is None:
            local = [d for d in self.destinations if d.local]
            base = local[0].folder if local else tempfile.gettempdir()
        base = os.path.abspath(base)
        if base not in self._folders:
            self._folders[base] = _StagingFolder(base)
        return self._folders[base].path

    def temporary_for(self, path: str) -> str:
        """Where to write the file that :meth:`publish` renames onto ``path``."""
        if FileSystems.get_scheme(path) is None:
            full = os.path.abspath(path)
            folder = self.staging_folder(os.path.dirname(full))
            return os.path.join(folder, f"{uuid.uuid4().hex}-{os.path.basename(full)}")
        parent, name = FileSystems.split(path)
        return FileSystems.join(parent, f"{STAGING_PREFIX}{uuid.uuid4().hex}-{name}")

    def add_file(self, temporary: str, path: str) -> None:
        """Publish ``temporary`` as ``path`` on :meth:`publish`."""
        self._files.append((temporary, path))

    def add_text(self, text: str, stream: TextIO | None = None) -> None:
        """Print ``text`` to ``stream`` (default: stdout at publication) on :meth:`publish`."""
        self._text.append((stream, text))

    def add_note(self, line: str) -> None:
        """Print ``line`` to stderr after publication (e.g. ``# wrote PATH``)."""
        self._notes.append(line)

    def publish(self) -> None:
        """Rename every output file onto its destination, then print the held-back text.

        Raises
        ------
        OSError
            If a rename fails; the files renamed before it stay published.
        """
        files, self._files = self._files, []
        for temporary, path in files:
            if FileSystems.get_scheme(path) is None:
                os.replace(temporary, path)
            else:
                if FileSystems.exists(path):
                    FileSystems.delete([path])
                FileSystems.rename([temporary], [path])
        text, self._text = self._text, []
        for stream, chunk in text:
            target = stream or sys.stdout
            target.write(chunk)
            target.flush()
        notes, self._notes = self._notes, []
        for line in notes:
            print(line, file=sys.stderr)

    def discard(self) -> None:
        """Delete what was not published and every staging folder; print nothing."""
        files, self._files = self._files, []
        for temporary, path in files:
            if FileSystems.get_scheme(path) is not None:
                try:
                    FileSystems.delete([temporary])
                except Exception:  # noqa: BLE001 - best effort: the file may not exist
                    pass
        self._text.clear()
        self._notes.clear()
        folders, self._folders = self._folders, {}
        for folder in folders.values():
            folder.remove()


def active_outputs() -> CommandOutputs | None:
    """The :class:`CommandOutputs` of the running command, if any."""
    return _ACTIVE.get()


@contextmanager
def atomic_destination(path: str) -> Iterator[str]:
    """A temporary path to write ``path``'s content to; it becomes ``path`` only on success.

    If the block raises, the temporary file is deleted and ``path`` is untouched (an earlier
    file there stays as it was). Inside a command (:class:`CommandOutputs`) the file is
    published with the command's other outputs when the command succeeds; otherwise it is
    renamed onto ``path`` when the block ends. The temporary name keeps ``path``'s extension.
    """
    outputs = _ACTIVE.get()
    own = outputs is None
    if own:
        outputs = CommandOutputs()
    assert outputs is not None
    try:
        temporary = outputs.temporary_for(path)
        if FileSystems.get_scheme(path) is None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        yield temporary
        outputs.add_file(temporary, path)
        if own:
            outputs.publish()
    finally:
        if own:
            outputs.discard()


def emit_text(text: str, stream: TextIO | None = None) -> None:
    """Write released ``text`` to ``stream`` (default stdout): held back until the command
    publishes its outputs when a :class:`CommandOutputs` is active, else written now."""
    outputs = _ACTIVE.get()
    if outputs is not None:
        outputs.add_text(text, stream)
        return
    target = stream or sys.stdout
    target.write(text)


def _note(line: str) -> None:
    outputs = _ACTIVE.get()
    if outputs is not None:
        outputs.add_note(line)
    else:
        print(line, file=sys.stderr)


class StagingArea:
    """A directory that a pipeline writes JSON-line outputs to, read back after the run.

    Use as a context manager: the directory and everything in it is deleted on exit.

    With ``--temp_location`` the directory lives there (reachable from remote workers; the
    user chose the place). Otherwise it is a hidden, owner-only folder of the running command
    (:meth:`CommandOutputs.staging_folder`: next to ``--output``), or, outside a command, of
    the system's temporary folder; a folder left by a killed command is removed by the next
    one (:func:`remove_stale_staging`).

    Parameters
    ----------
    options
        The pipeline's options (for ``--temp_location``).
    """

    def __init__(self, options: PipelineOptions | None = None) -> None:
        temp_location = None
        if options is not None:
            temp_location = options.view_as(GoogleCloudOptions).temp_location
        self._own: _StagingFolder | None = None
        if temp_location:
            self.directory = FileSystems.join(temp_location, f"beam-dpsketch-{uuid.uuid4().hex}")
            return
        outputs = _ACTIVE.get()
        if outputs is not None:
            folder = outputs.staging_folder()
        else:
            self._own = _StagingFolder(tempfile.gettempdir())
            folder = self._own.path
        self.directory = os.path.join(folder, f"rows-{uuid.uuid4().hex}")
        os.makedirs(self.directory)

    def __enter__(self) -> StagingArea:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if FileSystems.exists(self.directory):
                FileSystems.delete([self.directory])
        except OSError:
            # Cleanup is best effort here; a local folder is removed with its staging folder.
            pass
        if self._own is not None:
            self._own.remove()
            self._own = None

    def _prefix(self, name: str) -> str:
        return FileSystems.join(self.directory, name)

    def write(self, pcoll: beam.PCollection, name: str) -> beam.pvalue.PDone:
        """Write the JSON-serialisable elements of ``pcoll`` as JSON lines under ``name``."""
        return (
            pcoll
            | f"Encode{name}" >> beam.Map(json.dumps, allow_nan=True)
            | f"Write{name}" >> beam.io.WriteToText(self._prefix(name), file_name_suffix=".jsonl")
        )

    def read(self, name: str) -> list[Any]:
        """Every element written under ``name`` (in no particular order)."""
        (result,) = FileSystems.match([self._prefix(name) + "*.jsonl"])
        out: list[Any] = []
        for meta in sorted(result.metadata_list, key=lambda m: m.path):
            with FileSystems.open(meta.path) as f:
                text = f.read().decode("utf-8")
            out.extend(json.loads(line) for line in text.splitlines() if line.strip())
        return out


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
        rows = released | "Rows" >> beam.FlatMap(to_rows)
        staging.write(rows, "rows")
        named = {**(sides or {}), **(released_sides or {})}
        for name, side in named.items():
            origin = read if name in (sides or {}) else released
            staging.write(origin | f"Side{name}" >> side, f"side-{name}")
        if explain:
            print(transform.explain(), file=sys.stderr)
        try:
            with _worker_errors_not_logged():
                pipeline.run().wait_until_finish()
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
    """Add ``--format table|json|jsonl|csv|parquet`` and ``--output PATH`` to ``parser``."""
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


def check_output_arguments(args: argparse.Namespace) -> None:
    """Refuse output options that cannot be honoured, before any work is done.

    Parquet needs ``--output``; a local ``--output`` must be a file that can be created
    (Beam's local filesystem creates missing directories); a ``--plot``, in the subcommands that
    have one, must have an extension matplotlib writes and a writable, existing directory
    (:func:`~beam_dpsketch.pipelines.options.check_plot_path`). So a run that could not write
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

    The file is written atomically (:func:`atomic_destination`): under a temporary name,
    renamed onto ``output`` once complete, so no reader ever sees a partial release. Inside a
    command (:class:`CommandOutputs`) the file and the stdout text are published only when the
    whole command succeeds.

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
        _write_file(output, sink.getvalue().to_pybytes())
        return
    text = _text(release, fmt)
    if output:
        _write_file(output, text.encode("utf-8"))
    else:
        emit_text(text, stdout)


def _write_file(output: str, data: bytes) -> None:
    """Write ``data`` to ``output`` atomically (:func:`atomic_destination`)."""
    with atomic_destination(output) as temporary, FileSystems.create(temporary) as f:
        f.write(data)
    _note(f"# wrote {output}")


@contextmanager
def plot_figure(
    path: str, rows: int = 1, *, figsize: tuple[float, float] = (8, 4.5), dpi: int = 120
) -> Iterator[tuple[Any, Any]]:
    """``(figure, axes)`` of a ``--plot`` (matplotlib, Agg), laid out and saved to ``path`` on
    exit (with ``rows > 1`` the axes share x).

    The file is written atomically, with the command's other outputs
    (:func:`atomic_destination`): a failed save leaves nothing
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
