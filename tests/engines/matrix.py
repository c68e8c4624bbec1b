"""What the engine tests share: test data, running one pipeline, and comparing two runners.

Each engine test builds the same pipeline twice, each time with a fresh transform over a fresh
``NoiseSource.insecure_for_tests(seed)`` (same application key, so the same keyed noise
streams), runs it on the FnApiRunner and on the engine, and compares the outputs as multisets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from collect import DumpToFile

Build = Callable[[beam.Pipeline], beam.PCollection]


def run(pipeline: beam.Pipeline, build: Build, path: Path) -> list:
    """Run ``build`` on ``pipeline`` with one sink (some engines compute only the last one)."""
    out = DumpToFile(str(path))
    assert_that(build(pipeline), out)
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        # The DaskRunner opens a client per run and leaves it open.
        client = getattr(result, "client", None)
        if client is not None:
            client.close()
    return out.load()


def on_both(build: Build, tmp_path: Path, engine_args: Sequence[str]) -> tuple[list, list]:
    """``build`` run on the FnApiRunner and on the engine: both outputs, in a canonical order."""
    ref = run(beam.Pipeline(runner=FnApiRunner()), build, tmp_path / "fnapi.pickle")
    engine = beam.Pipeline(options=PipelineOptions(list(engine_args)))
    got = run(engine, build, tmp_path / "engine.pickle")
    return sorted(ref, key=repr), sorted(got, key=repr)


def assert_equal_and_nonempty(ref: list, got: list) -> None:
    assert ref, "the FnApiRunner released nothing: the comparison would be vacuous"
    assert got == ref


def zipf_keys(n: int, seed: int, items: int = 2000, s: float = 1.2) -> np.ndarray:
    # np.random only generates test data.
    ranks = np.arange(1, items + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(items, size=n, p=pmf).astype(np.int64)


def spread_chunks(seed: int) -> list[np.ndarray]:
    return list(np.array_split(zipf_keys(4000, seed), 4))


def frequency_chunks(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.array_split(rng.zipf(1.3, 20_000).astype(np.int64) % 5000, 8)
