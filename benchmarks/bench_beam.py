"""End-to-end Beam pipelines on Parquet: our sketches next to ``Count.PerElement`` + ``Top.Of``.

Both pipelines read the same files (Zipf(1.1) int64 keys in 10 files so two workers can split the
work) and run on the FnApiRunner in ``multi_processing`` mode with 2 workers. Times include
pipeline construction and worker start-up, which is what a user waits for.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from benchmarks.run import zipf_keys

TOP_K = 100
FILES = 10


def _write_files(directory: Path, n: int) -> str:
    keys = zipf_keys(n)
    per_file = -(-n // FILES)
    for i in range(FILES):
        chunk = keys[i * per_file : (i + 1) * per_file]
        pq.write_table(
            pa.table({"key": chunk}), directory / f"keys-{i:02d}.parquet", row_group_size=1 << 20
        )
    return str(directory / "keys-*.parquet")


def _options(workers: int) -> PipelineOptions:
    if workers == 1:
        return PipelineOptions([])
    return PipelineOptions(
        ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    )


def _ours(pattern: str, sketch: str, workers: int) -> None:
    from beam_dpsketch.transforms import ReadKeyBatches, SketchGlobally

    make = {
        "Misra-Gries k=1024": lambda: SketchGlobally.misra_gries(k=1024),
        "Count-Min 5x2048": lambda: SketchGlobally.count_min(width=2048, depth=5, seed=1),
    }[sketch]
    with beam.Pipeline(runner=FnApiRunner(), options=_options(workers)) as p:
        _ = p | ReadKeyBatches(pattern, column="key") | make()


def _beam_count_top(pattern: str, workers: int) -> None:
    with beam.Pipeline(runner=FnApiRunner(), options=_options(workers)) as p:
        _ = (
            p
            | beam.io.ReadFromParquet(pattern, columns=["key"])
            | beam.Map(lambda row: row["key"])
            | beam.combiners.Count.PerElement()
            | beam.combiners.Top.Of(TOP_K, key=lambda kv: kv[1])
        )


def run(quick: bool = False) -> list[dict]:
    n = 1_000_000 if quick else 10_000_000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pattern = _write_files(Path(tmp), n)
        cases = [
            ("beam-dpsketch Misra-Gries k=1024", lambda w: _ours(pattern, "Misra-Gries k=1024", w)),
            ("beam-dpsketch Count-Min 5x2048", lambda w: _ours(pattern, "Count-Min 5x2048", w)),
            (f"Beam Count.PerElement + Top.Of({TOP_K})", lambda w: _beam_count_top(pattern, w)),
        ]
        for name, fn in cases:
            for workers in (2,):
                start = time.perf_counter()
                fn(workers)
                seconds = time.perf_counter() - start
                runner = f"FnApiRunner multi_processing x{workers}"
                rows.append(
                    {
                        "benchmark": name,
                        "runner": runner,
                        "n": n,
                        "seconds": seconds,
                        "items_per_s": n / seconds,
                        "notes": "10 Parquet files",
                    }
                )
                print(
                    f"  {name:<42} {runner:<34} {seconds:7.2f} s {n / seconds / 1e6:6.2f} M keys/s",
                    file=sys.stderr,
                )
    return rows


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
