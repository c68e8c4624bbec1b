"""The same equality on the other runners that work offline.

* FnApiRunner ``multi_processing`` with 2 workers: accumulators cross processes through
  SketchCoder and Beam merges partials from several bundles.
* PortableRunner with an embedded job server and LOOPBACK workers.

On both, a matcher runs in a worker; ``test_failing_matcher_fails_on_multi_processing`` checks
that its assertion error still fails the pipeline.
"""

from __future__ import annotations

import os
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.transforms import SketchGlobally

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _workers_can_import_this_module(monkeypatch):
    # Functions defined here are pickled by reference; multi_processing workers are fresh
    # interpreters that need this directory on their path to unpickle them.
    here = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    )


SEEDS = list(range(6))
K = 30


def chunks(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, 2000) % 3000).astype(np.int64) for _ in range(4)]


def keys_of(seed: int) -> list[str]:
    return [f"r{x}" for c in chunks(seed)[:2] for x in c.tolist()]


def _cms_matcher(broken: bool = False):
    expected = CountMinSketch(256, 4, 21)
    for s in SEEDS:
        for c in chunks(s):
            expected.update(c)
    if broken:
        expected.update([1])

    def check(actual):
        assert len(actual) == 1, f"expected one sketch, got {len(actual)}"
        assert actual[0] == expected, "Count-Min sketch differs from the direct sketch"

    return check


def _mg_matcher():
    exact = Counter(x for s in SEEDS for x in keys_of(s))
    n = sum(exact.values())

    def check(actual):
        assert len(actual) == 1
        mg = actual[0]
        keys = list(exact)
        est = mg.estimate(keys)
        f = np.array([exact[x] for x in keys])
        assert mg.n == n
        assert np.all(est <= f) and np.all(est >= f - n / (K + 1)), "MG outside its bound"

    return check


def _build(p: beam.Pipeline, broken: bool = False) -> None:
    # A Reshuffle after the seeds spreads them over bundles (and workers).
    seeds = p | beam.Create(SEEDS) | beam.Reshuffle()
    cms = seeds | "Chunks" >> beam.FlatMap(chunks) | "CMS" >> SketchGlobally.count_min(256, 4, 21)
    assert_that(cms, _cms_matcher(broken), label="cms")
    if broken:
        return
    mg = seeds | "Keys" >> beam.FlatMap(keys_of) | "MG" >> SketchGlobally.misra_gries(K)
    assert_that(mg, _mg_matcher(), label="mg")


MULTI_PROCESSING = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
PORTABLE_LOOPBACK = [
    "--runner=PortableRunner",
    "--job_endpoint=embed",
    "--environment_type=LOOPBACK",
]


def test_multi_processing_two_workers():
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(MULTI_PROCESSING)) as p:
        _build(p)


def test_failing_matcher_fails_on_multi_processing():
    with pytest.raises(Exception, match="Count-Min sketch differs"):
        with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(MULTI_PROCESSING)) as p:
            _build(p, broken=True)


def test_portable_runner_loopback():
    with beam.Pipeline(options=PipelineOptions(PORTABLE_LOOPBACK)) as p:
        _build(p)
