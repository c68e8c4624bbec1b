"""The ``space-saving`` heavy-hitter mechanism in Beam pipelines (FnApiRunner, in-process)."""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, Windowing
from beam_dpsketch.sketches.space_saving import SpaceSaving, dp_space_saving
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.heavy_hitters import MECHANISMS, SpaceSavingDP

BUDGET = PrivacyBudget.approx(1.0, 1e-6)


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "output.pickle")


def zipf(n: int, seed: int) -> np.ndarray:
    keys = np.random.default_rng(seed).zipf(1.3, size=n)
    return keys[keys < 10**6].astype(np.int64)


def test_pipeline_release_equals_the_sketch_layer_release(dump):
    keys = zipf(20_000, 3)
    batches = np.array_split(keys, 5)
    source = NoiseSource.insecure_for_tests(7)
    t = DPHistogram(budget=BUDGET, mechanism=SpaceSavingDP(32), noise_source=source)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(batches, reshuffle=False) | t, dump)
    got = {r[0]: r[1] for r in dump.load()}
    truth = Counter(keys.tolist())
    heavy = {x for x, f in truth.items() if f >= len(keys) / 32}
    assert heavy <= set(got)
    for x, v in got.items():
        assert abs(v - truth[x]) <= 0.05 * truth[x]
    assert "space-saving" in MECHANISMS and "space-saving" in t.explain()


def test_one_release_per_fixed_window_and_calibration_matches(dump):
    rows = [TimestampedValue(int(x), 10 * w + 1) for w in range(2) for x in zipf(3000, w)]
    t = DPHeavyHitters(
        budget=BUDGET,
        mechanism=SpaceSavingDP(16, cut="rows"),
        noise_source=NoiseSource.insecure_for_tests(8),
        with_metadata=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(rows) | beam.WindowInto(FixedWindows(10)) | t, dump)
    releases = dump.load()
    assert len(releases) == 2
    stated = t.mechanism.calibration(BUDGET)
    for release in releases:
        assert release.records and release.records[0][0] == 1
        assert release.noise_scale == pytest.approx(stated["noise_scale"])
        assert release.threshold == pytest.approx(stated["threshold"])


def test_calibration_is_what_the_release_reports():
    sketch = SpaceSaving(8).update(zipf(2000, 1).tolist())
    for budget in (BUDGET, PrivacyBudget.approx(0.3, 1e-8)):
        for cut in ("minimum", "rows"):
            m = SpaceSavingDP(8, cut=cut).bind(top=None, max_contributions=None)
            stated = m.calibration(budget)
            released = m.release_object(
                sketch, budget, NoiseSource.insecure_for_tests(3).stream("r")
            )
            direct = dp_space_saving(
                sketch, budget, NoiseSource.insecure_for_tests(3).stream("r"), cut=cut
            )
            assert released.items == direct.items
            assert stated["noise_scale"] == pytest.approx(released.noise.scale, rel=1e-12)
            assert stated["threshold"] == pytest.approx(released.threshold, rel=1e-12)
            assert stated["neighbouring_relation"] == released.neighbouring
            assert stated["noise"] == released.noise.distribution


def test_repeated_panes_and_user_level_are_refused():
    with pytest.raises(ValueError, match="space-saving"):
        p = beam.Pipeline(runner=FnApiRunner())
        _ = (
            p
            | beam.Create([1, 2])
            | beam.WindowInto(
                FixedWindows(10),
                trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
            | DPHistogram(
                budget=BUDGET,
                mechanism="space-saving",
                windowing=Windowing(max_panes_per_window=3),
            )
        )
    with pytest.raises(ValueError, match="cut"):
        SpaceSavingDP(8, cut="median")
    with pytest.raises(ValueError, match="cut_fraction"):
        SpaceSavingDP(8, cut_fraction=1.0)
