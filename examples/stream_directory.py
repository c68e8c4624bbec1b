"""Streaming example: DP counts and heavy hitters of text files dropped into a directory.

Every file matching ``--pattern`` in ``--input-dir`` is read exactly once, when a poll first sees
it (``fileio.MatchContinuously`` with its default deduplication; a file rewritten under the same
name is not read again). Each line is one key and one privacy unit. Lines are windowed by the
time their file was found (``FixedWindows(--window-seconds)``), and every window of the run is
released once, empty ones included: a DP count of its lines and its DP top ``--top`` keys. The
privacy report (every budget charge) is printed before the pipeline starts; each release is
printed as one JSON line with its window and pane, and appended to ``--output`` if given.

Run it on Prism (Beam's portable runner; ``scripts/prism.sh`` builds the binary once)::

    python examples/stream_directory.py --input-dir /tmp/drop --duration-seconds 60 \\
        --runner=PrismRunner --prism_location="$(scripts/prism.sh)" \\
        --environment_type=LOOPBACK --streaming

then drop files into ``/tmp/drop`` (write them elsewhere and ``mv`` them in, so a poll never sees
half a file). Any other ``--flag`` is a Beam pipeline option. The pipeline stops polling after
``--duration-seconds`` and then releases the last windows.

The script refuses to start (exit status 2, nothing released) unless ``--streaming`` is given
with a runner that polls in real time: ``PrismRunner``, ``FlinkRunner``, ``SparkRunner``,
``DataflowRunner``, or a ``PortableRunner`` submitting to a job service at ``--job_endpoint``.
The FnApiRunner and the in-process ``--job_endpoint=embed`` run every poll at once when the
pipeline starts, and Beam's default DirectRunner falls back to the FnApiRunner whenever it cannot
start Prism, so they would read none of the files dropped later and release noise alone for
every window.

Privacy: ``--epsilon`` and ``--delta`` are the budget of the whole run; one line changes one
window's count and heavy hitters, and both transforms charge one shared accountant. Which
windows are released is public (``release_range`` covers the run). File names and the times files
appear are treated as public; a file's contents are not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions
from apache_beam.transforms.window import FixedWindows

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, Windowing
from beam_dpsketch.transforms import DPCount, DPHeavyHitters, Release, explain_pipeline


def file_keys(readable: fileio.ReadableFile) -> Iterator[str]:
    """The keys of one matched file: its non-empty lines, stripped."""
    for line in readable.read_utf8().splitlines():
        key = line.strip()
        if key:
            yield key


def release_json(release: Release) -> str:
    """One release as a JSON line: public metadata and the noisy records."""
    # Typed rows become JSON objects by field name; other records (key, count pairs) lists.
    records = [r._asdict() if hasattr(r, "_asdict") else list(r) for r in release.records]
    return json.dumps(
        {
            "transform": release.transform,
            "window": [release.window_start, release.window_end],
            "pane": release.pane_index,
            "timing": release.pane_timing,
            "epsilon": release.epsilon,
            "records": records,
        },
        default=str,
    )


class EmitRelease(beam.DoFn):
    """Print each release and append it to ``path`` (when given): one JSON line each."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def process(self, release: Release) -> Iterator[str]:
        line = release_json(release)
        print(line, flush=True)
        if self.path:
            # One short O_APPEND write per line, so lines from parallel bundles never interleave.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        yield line


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-dir", required=True, help="directory to watch")
    parser.add_argument("--pattern", default="*.txt", help="file name glob (default *.txt)")
    parser.add_argument("--window-seconds", type=float, default=10.0)
    parser.add_argument("--duration-seconds", type=float, default=60.0)
    parser.add_argument("--poll-seconds", type=float, default=2.0)
    parser.add_argument("--epsilon", type=float, default=1.0, help="budget of the whole run")
    parser.add_argument("--delta", type=float, default=1e-6, help="budget of the whole run")
    parser.add_argument("--count-share", type=float, default=0.2, help="epsilon share of counts")
    parser.add_argument("--k", type=int, default=32, help="Misra-Gries counters")
    parser.add_argument("--top", type=int, default=5, help="heavy hitters released per window")
    parser.add_argument("--output", default=None, help="also append the JSON lines here")
    return parser.parse_known_args(argv)


# Runners that poll ``MatchContinuously`` in real time, by the module-qualified name of the
# runner class or a base class; a PortableRunner qualifies when it submits to a job service.
POLLING_RUNNERS = (
    "apache_beam.runners.portability.prism_runner.PrismRunner",
    "apache_beam.runners.portability.flink_runner.FlinkRunner",
    "apache_beam.runners.portability.spark_runner.SparkRunner",
    "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner",
)
PORTABLE_RUNNER = "apache_beam.runners.portability.portable_runner.PortableRunner"


def runner_refusal(p: beam.Pipeline) -> str | None:
    """Why ``p`` cannot run this example (``None`` if it can).

    The example reads files as they appear, so it needs a streaming pipeline on a runner that
    polls in real time; any other would read nothing and release noise only.
    """
    options = p.options
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(p.runner).__mro__}
    endpoint = options.view_as(PortableOptions).job_endpoint
    polls = bool(names.intersection(POLLING_RUNNERS)) or (
        PORTABLE_RUNNER in names and bool(endpoint) and endpoint != "embed"
    )
    if not polls or endpoint == "embed":
        return (
            f"the runner {type(p.runner).__name__} is not known to poll --input-dir in real "
            "time (the FnApiRunner, and the DirectRunner when it falls back to it, run every "
            "poll at once when the pipeline starts), so it could read no file dropped later and "
            "release noise only; run on Prism: --runner=PrismRunner "
            '--prism_location="$(scripts/prism.sh)" --environment_type=LOOPBACK --streaming '
            "(or Flink, Spark, Dataflow)"
        )
    if not options.view_as(StandardOptions).streaming:
        return "--streaming is required: the input is an unbounded, polled directory"
    return None


def build(
    p: beam.Pipeline,
    args: argparse.Namespace,
    start: float,
    accountant: PrivacyAccountant,
    noise_source: NoiseSource | None = None,
) -> beam.PCollection:
    """The streaming pipeline on ``p``; returns the PCollection of printed JSON lines.

    ``noise_source`` is for tests only (a seeded, insecure source); leave it ``None``.
    """
    stop = start + args.duration_seconds
    width = args.window_seconds
    # Windows are aligned to multiples of their width: release every one the run can touch.
    release_range = (math.floor(start / width) * width, stop)
    keys = (
        p
        | "Match"
        >> fileio.MatchContinuously(
            os.path.join(args.input_dir, args.pattern),
            interval=args.poll_seconds,
            start_timestamp=start,
            stop_timestamp=stop,
        )
        | "Open" >> fileio.ReadMatches()
        | "Lines" >> beam.FlatMap(file_keys)
        | "Window" >> beam.WindowInto(FixedWindows(width))
    )
    eps_count = args.epsilon * args.count_share
    counts = keys | "Count" >> DPCount(
        PrivacyBudget.pure(eps_count),
        accountant=accountant,
        windowing=Windowing(release_range=release_range),
        noise_source=noise_source,
        with_metadata=True,
        label="lines",
    )
    top = keys | "Top" >> DPHeavyHitters(
        args.k,
        PrivacyBudget.approx(args.epsilon - eps_count, args.delta),
        top=args.top,
        mechanism="sequential",
        accountant=accountant,
        windowing=Windowing(release_range=release_range),
        noise_source=noise_source,
        with_metadata=True,
        label="top",
    )
    return (counts, top) | beam.Flatten() | beam.ParDo(EmitRelease(args.output))


def main(argv: Sequence[str] | None = None, noise_source: NoiseSource | None = None) -> int:
    args, beam_args = parse_args(argv)
    accountant = PrivacyAccountant(PrivacyBudget.approx(args.epsilon, args.delta), name="run")
    options = PipelineOptions(beam_args)
    p = beam.Pipeline(options=options)
    refusal = runner_refusal(p)
    if refusal is not None:
        # Before anything is built, charged or printed: a refused run releases nothing.
        print(f"stream_directory.py: error: {refusal}", file=sys.stderr)
        return 2
    build(p, args, time.time(), accountant, noise_source)
    # Every charge is made at construction: the report is complete before anything runs.
    print(explain_pipeline(accountant), flush=True)
    p.run().wait_until_finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
