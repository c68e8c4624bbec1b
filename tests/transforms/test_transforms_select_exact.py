"""DPHeavyHitters with select-then-count: default ``k`` and ``top=None`` release every selected key."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.select_count import selection_calibration
from beam_dpsketch.sketches.misra_gries.sizing import DEFAULT_K, SELECT_COUNT_K
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram

BUDGET = PrivacyBudget.approx(1.0, 1e-6)


def test_select_then_count_defaults_to_a_large_k_and_other_releases_keep_theirs():
    t = DPHeavyHitters(budget=BUDGET, mechanism="select-then-count")
    assert t.k == SELECT_COUNT_K
    assert DPHistogram(budget=BUDGET, mechanism="design-b").k == DEFAULT_K


def test_top_none_releases_every_selected_key_largest_first(tmp_path):
    # 300 keys of count 100 (above the count the selection keeps with certainty at eps_sel =
    # 0.5) and 2000 keys seen once: all 300 and none of the others, more than DEFAULT_TOP.
    keys = np.concatenate([np.repeat(np.arange(300), 100), np.arange(1000, 3000)])
    keys = np.random.default_rng(0).permutation(keys).astype(np.int64)
    cal = selection_calibration(0.5, 1e-6, SELECT_COUNT_K)
    assert cal.exact_certain < 100
    dump = DumpToFile(tmp_path / "out.pickle")
    t = DPHeavyHitters(
        budget=BUDGET,
        mechanism="select-then-count",
        top=None,
        noise_source=NoiseSource.insecure_for_tests(3),
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([keys], reshuffle=False) | t, dump)
    out = dump.load()
    assert {r.key for r in out} == set(range(300))
    counts = [r.estimate for r in out]
    assert counts == sorted(counts, reverse=True)
