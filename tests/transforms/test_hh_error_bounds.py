"""Every element-level DPHistogram mechanism's records carry a stated 95 % error bound, and its
explain facts state the budget split that pays for it (FnApiRunner, in memory)."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPHistogram
from beam_dpsketch.transforms.records import BoundedKeyEstimate
from tests.collect import DumpToFile

BUDGET = PrivacyBudget.approx(4.0, 1e-6)


@pytest.mark.parametrize("mechanism", ["sequential", "merged-gshm", "merged-laplace"])
def test_records_carry_the_stated_bound(mechanism, tmp_path):
    rng = np.random.default_rng(0)
    keys = (rng.zipf(1.5, 6000) % 20).tolist()
    t = DPHistogram(
        32,
        BUDGET,
        mechanism=mechanism,
        noise_source=NoiseSource.insecure_for_tests(1),
        label=f"bounds-{mechanism}",
    )
    dump = DumpToFile(str(tmp_path / "out.pkl"))
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner="FnApiRunner", options=options) as p:
        assert_that(p | beam.Create(keys) | t, dump)
    out = dump.load()
    assert out
    truth = np.bincount(keys)
    for record in out:
        assert isinstance(record, BoundedKeyEstimate)
        assert record.confidence == 0.95
        assert record.lower <= record.count <= record.upper
        # 20 distinct keys < k: the sketch is exact and the bound is the noise quantile.
        assert abs(record.count - truth[record.key]) <= record.error_bound
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert "noisy test of whether the sketch is exact" in facts["budget_split"]
    assert "with probability >= 0.95" in facts["error_bound"]
