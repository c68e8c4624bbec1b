"""Where the command line's outputs go: checked destinations, atomic files, staged rows.

Every output of a ``beam-dpsketch`` command goes through here. Inside a command
(:class:`CommandOutputs`) every destination is checked before the pipeline runs
(:func:`check_local_destination`), every file is written under a temporary name
(:func:`atomic_destination`, :func:`write_file`) and renamed onto its path only once the whole
command has succeeded, and stdout (:func:`emit_text`) is written after that: a command that
fails, or is interrupted, leaves no output file and prints no release. The rows a pipeline
releases travel through one Beam sink into a staging directory (:class:`StagingArea`,
:class:`WriteStaged`) and are read back by the command; staging folders are hidden, owner-only, locked while in use, and
removed when the command ends or, after a ``SIGKILL``, by the next command
(:func:`remove_stale_staging`).
"""

from __future__ import annotations

import contextvars
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

try:
    import fcntl
except ImportError:  # not POSIX: no locks, so stale staging folders are not swept
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "STAGING_PREFIX",
    "CommandOutputs",
    "Destination",
    "StagingArea",
    "WriteStaged",
    "active_outputs",
    "atomic_destination",
    "check_local_destination",
    "emit_text",
    "remove_stale_staging",
    "write_file",
]


def check_local_destination(path: str, option: str, *, make_parents: bool = False) -> None:
    """Refuse a local output ``path`` that cannot be written, before any work is done.

    Checks what can be known without writing: ``path`` is not a directory, its directory exists
    (or, with ``make_parents``, its nearest existing ancestor is a directory) and is writable,
    and an existing file at ``path`` is writable. Paths with a scheme (``gs://``, ...) are left to
    their filesystem.

    Raises
    ------
    ValueError
        Naming ``option`` and ``path`` (a path the user gave; nothing from the data).
    """
    if FileSystems.get_scheme(path) is not None:
        return
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise ValueError(f"{option} {path} is a directory, not a file")
    if os.path.exists(full):
        if not os.access(full, os.W_OK):
            raise ValueError(f"{option} {path} is not writable")
        return
    parent = os.path.dirname(full)
    if make_parents:
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
    if not os.path.exists(parent):
        raise ValueError(
            f"{option} {path}: directory {os.path.dirname(path) or '.'} does not exist"
        )
    if not os.path.isdir(parent):
        raise ValueError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: directory {parent} is not writable")


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
            base,
            STAGING_PREFIX + os.path.basename(pending).removeprefix(_PENDING_PREFIX),
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
        (:func:`check_local_destination`).

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


class _WriteStagedFiles(beam.DoFn):
    """Write each name's lines, gathered in one element, to ``<directory>/<name>.jsonl``.

    Every file is written under a hidden temporary name and renamed onto its own, so a reader
    never sees part of it, and a retried bundle rewrites the same bytes.
    """

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, element: tuple[Any, Iterable[tuple[str, str]]]) -> Iterator[str]:
        by_name: dict[str, list[str]] = {}
        for name, line in element[1]:
            by_name.setdefault(name, []).append(line)
        for name, lines in sorted(by_name.items()):
            # The order in which a runner delivers elements is not part of its output: lines
            # are written sorted, so every runner writes the same bytes.
            lines.sort()
            final = FileSystems.join(self._directory, f"{name}.jsonl")
            temporary = FileSystems.join(self._directory, f".{name}.{uuid.uuid4().hex}.tmp")
            with FileSystems.create(temporary) as f:
                f.write("".join(line + "\n" for line in lines).encode("utf-8"))
            FileSystems.rename([temporary], [final])
            yield final


def _tagged_line(element: Any, name: str) -> tuple[int, tuple[str, str]]:
    return 0, (name, json.dumps(element, allow_nan=True))


class WriteStaged(beam.PTransform):
    """Write named PCollections of JSON values into ``directory``, through one sink.

    Apply to a dict ``{name: pcoll}``. Each element becomes a JSON line; the lines of every
    name are gathered into one element (a ``GroupByKey`` on a single key) and written, sorted,
    to ``<directory>/<name>.jsonl`` by one ``DoFn`` (atomically, by renaming). A name without
    elements gets no file. Meant for small outputs (a release's rows, public checks): they are
    held in one worker's memory.

    It is one sink made of ``ParDo``, ``Flatten`` and ``GroupByKey`` steps only, so it runs the
    same on every runner, and the bytes it writes do not depend on the runner or on how it
    bundled the elements. Beam's ``DaskRunner`` (2.77) computes only the last sink of a
    pipeline, and drops what a ``DoFn`` emits from ``finish_bundle``, which is how
    ``WriteToText`` reports the files it wrote: its finalisation then finds none and publishes
    nothing.
    """

    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def expand(self, pcolls: Mapping[str, beam.PCollection]) -> beam.PCollection:
        tagged = [
            pcoll | f"Tag[{name}]" >> beam.Map(_tagged_line, name) for name, pcoll in pcolls.items()
        ]
        return (
            tagged
            | "Merge" >> beam.Flatten()
            | "Gather" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(_WriteStagedFiles(self._directory))
        )


class StagingArea:
    """A directory that a pipeline writes JSON-line outputs to, read back after the run.

    Use as a context manager: the directory and everything in it is deleted on exit.

    With ``--temp_location`` the directory lives there (reachable from remote workers; the
    user chose the place). Otherwise it is a hidden, owner-only folder of the running command
    (:meth:`CommandOutputs.staging_folder`: next to ``--output``), or, outside a command, of
    the system's temporary folder; a folder left by a killed command is removed by the next
    one (:func:`remove_stale_staging`).

    A pipeline stages all its outputs with one :meth:`write_all`: one sink, since some runners
    compute only the last sink of a pipeline (:class:`WriteStaged`).

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

    def write_all(self, pcolls: Mapping[str, beam.PCollection]) -> beam.PCollection:
        """Write the JSON-serialisable elements of each named PCollection, through one sink
        (:class:`WriteStaged`); read each name back with :meth:`read`.

        Raises
        ------
        ValueError
            If ``pcolls`` is empty.
        """
        if not pcolls:
            raise ValueError("pcolls: name at least one PCollection to stage")
        return pcolls | "Stage[" + ",".join(pcolls) + "]" >> WriteStaged(self.directory)

    def write(self, pcoll: beam.PCollection, name: str) -> beam.PCollection:
        """Write the JSON-serialisable elements of ``pcoll`` under ``name`` (:meth:`write_all`
        of one PCollection)."""
        return self.write_all({name: pcoll})

    def read(self, name: str) -> list[Any]:
        """Every element written under ``name``, in the order of their JSON text (none when
        the pipeline staged none)."""
        path = FileSystems.join(self.directory, f"{name}.jsonl")
        if not FileSystems.exists(path):
            return []
        with FileSystems.open(path) as f:
            text = f.read().decode("utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_file(output: str, data: bytes) -> None:
    """Write ``data`` to ``output`` (any Beam filesystem) atomically (:func:`atomic_destination`).

    Inside a command (:class:`CommandOutputs`) the file is published with the command's other
    outputs, and ``# wrote <output>`` goes to stderr after publication; outside one, now.
    """
    with atomic_destination(output) as temporary, FileSystems.create(temporary) as f:
        f.write(data)
    _note(f"# wrote {output}")
