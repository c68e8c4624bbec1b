"""Release rows to files: the cost of leaving Beam with no ``Map`` in the user's pipeline.

Run ``python benchmarks/bench_release_sinks.py`` (``--quick`` for a smoke run). A release of
``n`` :class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` rows (string keys, as a
histogram over many keys releases them) is generated inside a pipeline on the in-process
FnApiRunner and written by each sink: ``WriteReleaseToParquet`` (Beam's ``WriteToParquet`` with
the schema of ``parquet_schema``), the DataFrame's ``to_parquet`` and ``beam.io.WriteToJson``;
the same rows after ``WithWindowBounds`` in fixed windows go to ``WriteReleaseToParquet`` too.
A baseline pipeline that generates the rows and drops them is timed alone and its time is
subtracted. A second table times ``ReleasedSketch.of`` (the row of a released sketch: its
error bound, read off every cell, and its bytes in base64) against ``to_bytes`` alone.
"""

from __future__ import annotations

import glob
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions

from beam_dpsketch.io import WriteReleaseToParquet
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountSketch
from beam_dpsketch.sketches.linear.private import PrivateCountSketch
from beam_dpsketch.transforms.records import BoundedKeyEstimate, ReleasedSketch, WithWindowBounds
from benchmarks.run import bench_main

COLUMNS = (
    ("benchmark", "benchmark", "<44"),
    ("n", "n", ">10,"),
    ("seconds", "seconds", ">8.2f"),
    ("items_per_s", "rows/s", ">12,.0f"),
    ("notes", "notes", ""),
)
#: Rows per generated batch (one element of the generator's input).
CHUNK = 10_000


def _rows(chunk: int) -> Iterator[BoundedKeyEstimate]:
    start = chunk * CHUNK
    for i in range(start, start + CHUNK):
        estimate = float(i % 977)
        yield BoundedKeyEstimate(f"key-{i}", estimate, estimate - 3.0, estimate + 3.0, 0.95)


def _timestamped(row: BoundedKeyEstimate) -> Any:
    # Ten windows of one second over the rows, by key number: a public layout for the bench.
    return beam.window.TimestampedValue(row, int(row.key[4:]) % 10 + 0.5)


def _release(p: beam.Pipeline, n: int, windowed: bool) -> beam.PCollection:
    rows = (
        p
        | beam.Create(list(range(n // CHUNK)))
        | beam.Reshuffle()
        | beam.FlatMap(_rows).with_output_types(BoundedKeyEstimate)
    )
    if windowed:
        rows = (
            rows
            | beam.Map(_timestamped).with_output_types(BoundedKeyEstimate)
            | beam.WindowInto(beam.window.FixedWindows(1))
            | WithWindowBounds()
        )
    return rows


def _timed(write: Callable[[beam.PCollection, str], Any], n: int, windowed: bool = False) -> float:
    with tempfile.TemporaryDirectory() as folder:
        options = PipelineOptions(["--direct_running_mode=in_memory"])
        start = time.perf_counter()
        with beam.Pipeline(runner="FnApiRunner", options=options) as p:
            write(_release(p, n, windowed), str(Path(folder) / "part"))
        seconds = time.perf_counter() - start
        written = glob.glob(str(Path(folder) / "part*"))
        assert written or write is _drop, "the sink wrote no file"
    return seconds


def _drop(release: beam.PCollection, path: str) -> None:
    _ = release | beam.Filter(lambda _: False)


def _parquet(release: beam.PCollection, path: str) -> None:
    _ = release | WriteReleaseToParquet(path, key_type=str)


def _frame_parquet(release: beam.PCollection, path: str) -> None:
    from apache_beam.dataframe.convert import to_dataframe

    to_dataframe(release).to_parquet(path, index=False)


def _json(release: beam.PCollection, path: str) -> None:
    _ = release | beam.io.WriteToJson(path, double_precision=15)


def _sketch_rows(quick: bool) -> list[dict]:
    width, depth = (65_536, 3) if quick else (262_144, 5)
    exact = CountSketch(width, depth, 0)
    exact.update(np.arange(100_000, dtype=np.int64) % 5_000)
    stream = NoiseSource.insecure_for_tests(1).stream(("bench", 0))
    private = PrivateCountSketch.release(exact, PrivacyBudget.pure(1.0), stream, lattice=True)
    out = []
    for name, fn in (
        ("to_bytes", private.to_bytes),
        ("ReleasedSketch.of (error bound + base64)", lambda: ReleasedSketch.of(private)),
    ):
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        out.append(
            {
                "benchmark": name,
                "n": width * depth,
                "seconds": seconds,
                "items_per_s": width * depth / seconds,
                "notes": f"cells of a {depth} x {width} Count Sketch",
            }
        )
    return out


def run(quick: bool = False) -> list[dict]:
    n = 50_000 if quick else 1_000_000
    baseline = _timed(_drop, n)
    rows = [
        {
            "benchmark": "generate only (baseline)",
            "n": n,
            "seconds": baseline,
            "items_per_s": n / baseline,
            "notes": "rows generated and dropped",
        }
    ]
    for name, write, windowed in (
        ("WriteReleaseToParquet", _parquet, False),
        ("to_dataframe(...).to_parquet", _frame_parquet, False),
        ("beam.io.WriteToJson", _json, False),
        ("WithWindowBounds + WriteReleaseToParquet", _parquet, True),
    ):
        seconds = _timed(write, n, windowed)
        net = max(seconds - baseline, 1e-9)
        rows.append(
            {
                "benchmark": name,
                "n": n,
                "seconds": seconds,
                "items_per_s": n / net,
                "notes": "rows/s net of the baseline",
            }
        )
        print(f"  {name:<44} {seconds:8.2f} s", file=sys.stderr)
    return rows + _sketch_rows(quick)


if __name__ == "__main__":
    bench_main(run, COLUMNS)
