"""Which windows and panes a release step emits, and what its metrics and report say.

Whether a window is released, and how many panes a run withheld, depend on the data; neither may
leave the transform unless the schedule is public (a declared ``release_range``).
"""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.combiners import CountCombineFn
from apache_beam.transforms.window import FixedWindows, SlidingWindows, TimestampedValue

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import Windowing
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.transforms import DPCount
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.release import DPAggregate, explain_pipeline

RUNNER = "FnApiRunner"


def _released_windows(
    times: list[float], windowfn, out: Path, name: str, release_range=None, **options
) -> list[tuple[float, float]]:
    """Window bounds of every release of a DPAggregate count over elements at ``times``."""
    agg = DPAggregate(
        CountCombineFn(),
        CountLaplaceMechanism(1),
        budget=PrivacyBudget.pure(1.0),
        noise_source=NoiseSource.insecure_for_tests(5),
        with_metadata=True,
        windowing=Windowing(release_range=release_range),
        **options,
    )
    path = out / name

    def keep(actual):
        path.write_text(json.dumps(sorted((r.window_start, r.window_end) for r in actual)))

    with beam.Pipeline(runner=RUNNER) as p:
        released = (
            p
            | beam.Create(times)
            | beam.Map(lambda t: TimestampedValue(t, t))
            | beam.WindowInto(windowfn)
            | agg
        )
        assert_that(released, keep)
    return [tuple(w) for w in json.loads(path.read_text())]


def test_declared_range_releases_every_window_whatever_the_data(tmp_path):
    # Neighbours: with and without the only element of window [0, 10).
    full = _released_windows([3.0, 12.0, 13.0], FixedWindows(10), tmp_path, "a", (0, 40))
    less = _released_windows([12.0, 13.0], FixedWindows(10), tmp_path, "b", (0, 40))
    assert full == less == [(0.0, 10.0), (10.0, 20.0), (20.0, 30.0), (30.0, 40.0)]


def test_windows_outside_the_declared_range_are_never_released(tmp_path):
    got = _released_windows([3.0, 55.0], FixedWindows(10), tmp_path, "c", (0, 20))
    assert got == [(0.0, 10.0), (10.0, 20.0)]


def test_declared_range_with_sliding_windows(tmp_path):
    got = _released_windows([], SlidingWindows(20, 10), tmp_path, "d", (0, 30))
    assert got == [(0.0, 20.0), (10.0, 30.0), (20.0, 40.0)]


def test_without_a_range_the_condition_is_stated_in_explain(tmp_path):
    # Without a declared range an empty window is not released: the guarantee must say so.
    full = _released_windows([3.0, 12.0], FixedWindows(10), tmp_path, "e")
    less = _released_windows([12.0], FixedWindows(10), tmp_path, "f")
    assert full != less
    dp = DPCount(PrivacyBudget.pure(1.0), noise_source=NoiseSource.insecure_for_tests(1))
    p = beam.Pipeline(runner=RUNNER)
    _ = p | beam.Create([1.0]) | beam.WindowInto(FixedWindows(10)) | dp
    assert "no pane for a window without elements" in dp.explain()
    assert "release_range" in dp.explain()


def test_release_range_is_refused_where_it_means_nothing():
    agg = DPAggregate(
        CountCombineFn(),
        CountLaplaceMechanism(1),
        budget=PrivacyBudget.pure(1.0),
        noise_source=NoiseSource.insecure_for_tests(5),
        windowing=Windowing(release_range=(0, 10)),
    )
    p = beam.Pipeline(runner=RUNNER)
    with pytest.raises(ValueError, match="release_range"):
        _ = p | beam.Create([1]) | agg
    with pytest.raises(ValueError, match="start < end"):
        DPAggregate(
            CountCombineFn(),
            CountLaplaceMechanism(1),
            budget=PrivacyBudget.pure(1.0),
            windowing=Windowing(release_range=(10, 0)),
        )


def test_no_beam_metric_and_no_run_counts_in_the_report():
    # An early trigger with a cap of 1 pane: the ON_TIME panes are withheld. How many were
    # withheld or released depends on the data, so no counter and no report line may say it.
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        windowing=Windowing(max_panes_per_window=1),
        noise_source=NoiseSource.insecure_for_tests(2),
    )
    p = beam.Pipeline(runner=RUNNER)
    _ = (
        p
        | beam.Create([1.0, 2.0, 15.0])
        | beam.Map(lambda t: TimestampedValue(t, t))
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
        | dp
    )
    result = p.run()
    result.wait_until_finish()
    metrics = result.metrics().query()
    names = [
        f"{m.key.metric.namespace}/{m.key.metric.name}"
        for kind in ("counters", "distributions", "gauges")
        for m in metrics.get(kind, [])
        if m.key.metric.namespace.startswith("beam_dpsketch")
    ]
    assert names == []
    report = explain_pipeline(dp.accountant)
    assert "pane(s) released" not in report and "withheld beyond" not in report


def _count(release_range=None, **kw):
    return DPCount(PrivacyBudget.pure(1.0), windowing=Windowing(release_range=release_range), **kw)


def _heavy_hitters(release_range=None, **kw):
    from beam_dpsketch.transforms import DPHeavyHitters

    windowing = Windowing(release_range=release_range)
    return DPHeavyHitters(
        8, PrivacyBudget.approx(1.0, 1e-6), mechanism="design-b", windowing=windowing, **kw
    )


def _frequencies(release_range=None, **kw):
    from beam_dpsketch.transforms import DPFrequencies

    windowing = Windowing(release_range=release_range)
    return DPFrequencies(16, 2, PrivacyBudget.pure(1.0), windowing=windowing, **kw)


def _quantiles(release_range=None, **kw):
    from beam_dpsketch.transforms import DPQuantiles

    windowing = Windowing(release_range=release_range)
    return DPQuantiles(
        [0.5],
        0,
        64,
        PrivacyBudget.pure(1.0),
        tree=QuantileTree(width=16, depth=2),
        windowing=windowing,
        **kw,
    )


@pytest.mark.parametrize("make", [_count, _heavy_hitters, _frequencies, _quantiles])
def test_every_dp_transform_releases_every_window_of_a_declared_range(make, tmp_path):
    def windows(times: list[int], name: str) -> list[tuple[float, float]]:
        dp = make(
            noise_source=NoiseSource.insecure_for_tests(8),
            with_metadata=True,
            release_range=(0, 30),
        )
        path = tmp_path / name

        def keep(actual):
            path.write_text(json.dumps(sorted((r.window_start, r.window_end) for r in actual)))

        with beam.Pipeline(runner=RUNNER) as p:
            released = (
                p
                | beam.Create(times)
                | beam.Map(lambda t: TimestampedValue(t, t))
                | beam.WindowInto(FixedWindows(10))
                | dp
            )
            assert_that(released, keep)
        return [tuple(w) for w in json.loads(path.read_text())]

    expected = [(0.0, 10.0), (10.0, 20.0), (20.0, 30.0)]
    assert windows([3, 4, 15], "with") == expected
    assert windows([15], "without") == expected
