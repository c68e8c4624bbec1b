"""The quantile throughput benchmark's own pipeline runs end to end on a small Parquet file.

``benchmarks/bench_linear.py`` times DPQuantiles on the FnApiRunner against PipelineDP; this runs
the same function on 2,000 rows so a broken name in it fails here, not in a long benchmark run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import bench_linear


def test_the_dpquantiles_pipeline_of_the_benchmark_releases_every_percentile(tmp_path: Path):
    path = str(tmp_path / "delay.parquet")
    delays = np.random.default_rng(3).integers(-60, 600, size=2000).astype(np.int64)
    pq.write_table(pa.table({"delay": delays}), path)
    bench_linear._SINK.clear()
    # The benchmark names its runner itself: FnApiRunner, in memory.
    bench_linear._beam_ours(path, 1.0)
    released = bench_linear._SINK["ours"]
    assert [r.quantile for r in released] == [p / 100 for p in bench_linear.PERCENTILES]
    values = [r.value for r in released]
    assert values == sorted(values)
