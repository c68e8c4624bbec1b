"""The Scale-out benchmark's three pipelines run end to end at a tiny size, in process.

``benchmarks/bench_scaleout.py`` times DP heavy hitters, frequencies and quantiles on the
FnApiRunner and on one and two Dask workers at up to 10^8 rows; this builds the same pipelines
(:func:`benchmarks.bench_scaleout.release`) on 3,200 rows and runs them on the FnApiRunner only,
so a transform signature the benchmark no longer matches fails here, not in a long benchmark run.
One test runs a one-worker Dask configuration the way the benchmark does (``--one`` in a fresh
process) and checks that its worker draws the benchmark's key pool once, not once per task.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.transforms import BoundedKeyEstimate, QuantileEstimate
from benchmarks import bench_scaleout
from benchmarks.run import SECTIONS

ROWS = 100 * bench_scaleout.PARTS
REPO = Path(__file__).resolve().parents[2]


def _released(name: str, tmp_path: Path) -> list:
    dump = DumpToFile(str(tmp_path / f"{name}.pkl"))
    with beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"])) as p:
        assert_that(bench_scaleout.release(p, name, ROWS), dump)
    return dump.load()


def test_the_benchmark_covers_three_transforms_and_is_a_registered_section():
    assert bench_scaleout.TRANSFORMS == ("heavy-hitters", "frequencies", "quantiles")
    targets = [target for title, target, _ in SECTIONS if title.startswith("Scale-out")]
    assert targets == ["benchmarks.bench_scaleout:run"]


def test_heavy_hitters_release_the_head_of_the_zipf_keys(tmp_path: Path):
    released = _released("heavy-hitters", tmp_path)
    assert 0 < len(released) <= 100
    assert all(isinstance(r, BoundedKeyEstimate) for r in released)
    # Key 0 is the most frequent Zipf(1.1) rank; at 3,200 rows it is far above the threshold.
    assert 0 in {r.key for r in released}


def test_frequencies_release_one_count_sketch_of_the_benchmark_shape(tmp_path: Path):
    released = _released("frequencies", tmp_path)
    assert len(released) == 1
    assert (released[0].width, released[0].depth) == (2048, 5)


def test_quantiles_release_the_three_declared_quantiles_in_order(tmp_path: Path):
    released = _released("quantiles", tmp_path)
    assert all(isinstance(r, QuantileEstimate) for r in released)
    assert [r.quantile for r in released] == [0.1, 0.5, 0.9]
    values = [r.value for r in released]
    assert values == sorted(values)
    assert all(0 <= v <= 255 for v in values)


def test_the_benchmark_process_of_one_dask_configuration_draws_each_key_pool_once():
    # `python -m benchmarks.bench_scaleout` runs each configuration as `--one` in a fresh
    # process; its workers must reuse one key pool, or the benchmark times drawing it.
    pytest.importorskip("distributed")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_scaleout", "--one", "frequencies", "dask-1"]
        + ["--rows", str(ROWS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["rows"] == ROWS
    assert row["key_pool_draws"] == [1]
