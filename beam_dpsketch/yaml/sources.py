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
from apache_beam.options.pipeline_options import PortableOptions, StandardOptions
from apache_beam.typehints.row_type import RowTypeConstraint
from apache_beam.utils.timestamp import MAX_TIMESTAMP

from beam_dpsketch.checks import check_real

__all__ = ["POLLING_RUNNERS", "ReadNewLines", "polling_refusal"]

#: Runners that poll ``MatchContinuously`` in real time, by the module-qualified name of the
#: runner class or a base class; a ``PortableRunner`` qualifies when it submits to a job
#: service at ``--job_endpoint`` (not ``embed``, Beam's in-process FnApiRunner).
POLLING_RUNNERS = (
    "apache_beam.runners.portability.prism_runner.PrismRunner",
    "apache_beam.runners.portability.flink_runner.FlinkRunner",
    "apache_beam.runners.portability.spark_runner.SparkRunner",
    "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner",
)
_PORTABLE_RUNNER = "apache_beam.runners.portability.portable_runner.PortableRunner"


def polling_refusal(pipeline: beam.Pipeline) -> str | None:
    """Why ``pipeline`` cannot watch a directory in real time (``None`` if it can).

    The FnApiRunner (and Beam's default DirectRunner when it falls back to it) runs every poll at
    once when the pipeline starts: it would read no file dropped later, and the DP steps after
    it would release noise alone for every window. A batch pipeline has no later either.
    """
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(pipeline.runner).__mro__}
    endpoint = pipeline.options.view_as(PortableOptions).job_endpoint
    polls = bool(names & set(POLLING_RUNNERS)) or (
        _PORTABLE_RUNNER in names and bool(endpoint) and endpoint != "embed"
    )
    if not polls or endpoint == "embed":
        return (
            f"the runner {type(pipeline.runner).__name__} is not known to poll a directory in "
            "real time (the FnApiRunner, and the DirectRunner when it falls back to it, run "
            "every poll at once when the pipeline starts); run on Prism: --runner=PrismRunner "
            '--prism_location="$(scripts/prism.sh)" --environment_type=LOOPBACK (or Flink, '
            "Spark, Dataflow)"
        )
    if not pipeline.options.view_as(StandardOptions).streaming:
        return "--streaming is required: the input is an unbounded, polled directory"
    return None


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
    ``line`` (a ``str``). An unbounded source: the pipeline must be streaming (``--streaming``,
    or ``options: {streaming: true}`` in the YAML file) and run on a runner that polls in real
    time (Prism, Flink, Spark, Dataflow, or a portable runner submitting to a job service);
    any other is refused while the pipeline is built (:func:`polling_refusal`), since the
    FnApiRunner runs every poll at once when the pipeline starts and would read no file
    dropped later. Write files elsewhere and move them in, so that a poll never sees half a
    file.

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
        refusal = polling_refusal(pbegin.pipeline)
        if refusal is not None:
            # Refused while the pipeline is built: nothing is read, charged or released.
            raise ValueError(f"ReadNewLines: {refusal}")
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
