"""A live source for Beam YAML: the lines of files as they appear in a directory.

Beam YAML 2.77 reads files once (``ReadFromText``, ``ReadFromCsv``, ...) and has no step that
watches a directory; the Python SDK does (``fileio.MatchContinuously``, used by
``examples/stream_directory.py``). :class:`ReadNewLines` is that pipeline as one YAML step, so a
streaming YAML pipeline can feed the DP transforms of :mod:`beam_dpsketch.yaml.transforms`.
"""

import time
from collections.abc import Iterator

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from beam_dpsketch.checks import check_real

__all__ = ["ReadNewLines"]


def _lines(readable: fileio.ReadableFile) -> Iterator[beam.Row]:
    for line in readable.read_utf8().splitlines():
        text = line.strip()
        if text:
            yield beam.Row(line=text)


class ReadNewLines(beam.PTransform):
    """Every non-empty line (stripped) of every file matching a pattern, read once when found.

    The directory is polled every ``interval`` seconds from ``start`` to ``stop``; each file is
    read once, when a poll first sees it (a file rewritten under the same name is not read
    again), and its lines carry the time of that poll as their event time, so a ``windowing:``
    on this step windows lines by when their file was found. Emits rows with one field,
    ``line`` (a ``str``). An unbounded source: run the pipeline with ``--streaming`` on a runner
    that polls in real time (Prism, Flink, Spark, Dataflow); the FnApiRunner runs every poll at
    once when the pipeline starts and reads no file dropped later. Write files elsewhere and
    move them in, so that a poll never sees half a file.

    Privacy: file names and the times files appear are treated as public (they set the event
    times and the number of polls); the lines are the data the DP transforms protect.

    Parameters
    ----------
    file_pattern
        The files to read, e.g. ``/data/drop/*.txt``.
    interval
        Seconds between polls (default 2).
    start
        Event time (Unix seconds) of the first poll (default: when the pipeline is built).
    stop
        Event time (Unix seconds) after which no poll runs (default: none, the watch never
        ends); or give ``duration_seconds``.
    duration_seconds
        ``stop`` as seconds after ``start``.
    """

    def __init__(
        self,
        file_pattern: str,
        interval: float = 2.0,
        start: float | None = None,
        stop: float | None = None,
        duration_seconds: float | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(file_pattern, str) or not file_pattern:
            raise ValueError(f"file_pattern must be a non-empty string, got {file_pattern!r}")
        self.file_pattern = file_pattern
        self.interval = check_real(interval, "interval", 0.0, lower_open=True)
        self.start = time.time() if start is None else check_real(start, "start", 0.0)
        if stop is not None and duration_seconds is not None:
            raise ValueError("stop: give stop or duration_seconds, not both")
        if duration_seconds is not None:
            stop = self.start + check_real(duration_seconds, "duration_seconds", 0.0)
        self.stop = None if stop is None else check_real(stop, "stop", self.start, lower_open=True)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Match"
            >> fileio.MatchContinuously(
                self.file_pattern,
                interval=self.interval,
                start_timestamp=self.start,
                stop_timestamp=MAX_TIMESTAMP if self.stop is None else self.stop,
            )
            | "Open" >> fileio.ReadMatches()
            | "Lines"
            >> beam.FlatMap(_lines).with_output_types(
                RowTypeConstraint.from_fields([("line", str)])
            )
        )
