"""An empty pane is a release: it gets noise and an output, and never crashes the pipeline.

With ``AfterWatermark(early=AfterCount(1))`` in DISCARDING mode, the ON_TIME pane after early
panes holds no element, and Beam's streaming runner calls ``merge_accumulators`` with *no*
accumulators for it. A CombineFn that cannot merge nothing fails the job whenever such a pane
occurs, so whether a job fails would depend on the data. Streaming tests run TestStream on the
DirectRunner with ``--streaming``; pipelines that are refused fail at construction.
"""

from __future__ import annotations

from operator import itemgetter

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.combiners import CountCombineFn
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PAMGSketch, PostProcessedSum
from beam_dpsketch.transforms import DPCount, DPHeavyHitters, Release
from beam_dpsketch.transforms.combiners import (
    MergeSketchesCombineFn,
    SketchCombineFn,
    WeightedSketchCombineFn,
)
from beam_dpsketch.transforms.heavy_hitters import DesignBCombineFn

APPROX = PrivacyBudget.approx(1.0, 1e-6)


def streaming() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner.
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def early_discarding() -> beam.WindowInto:
    return beam.WindowInto(
        FixedWindows(10),
        trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
        accumulation_mode=tr.AccumulationMode.DISCARDING,
    )


def two_elements_then_watermark() -> ts.TestStream:
    """One element per bundle (two EARLY panes), then the watermark: an empty ON_TIME pane."""
    return (
        ts.TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue("a", 1)])
        .add_elements([TimestampedValue("b", 2)])
        .advance_watermark_to_infinity()
    )


def panes(releases: list[Release]) -> list[tuple[int, str]]:
    return sorted((r.pane_index, r.pane_timing) for r in releases)


# --------------------------------------------------------------------------------------------
# Unit: every CombineFn of the release paths merges zero accumulators into the empty aggregate
# --------------------------------------------------------------------------------------------


def test_design_b_merges_no_accumulators_into_the_empty_sum():
    fn = DesignBCombineFn(4, max_shards=8)
    merged = fn.merge_accumulators([])
    out = fn.extract_output(merged)
    assert isinstance(out, PostProcessedSum)
    assert len(out) == 0 and out.shards == 0 and out.k == 4 and out.max_shards == 8


@pytest.mark.parametrize(
    "fn, empty",
    [
        (SketchCombineFn.misra_gries(4), MisraGries(4)),
        (MergeSketchesCombineFn(lambda: MisraGries(4)), MisraGries(4)),
        (MergeSketchesCombineFn(lambda: PAMGSketch(4, 2)), PAMGSketch(4, 2)),
        (WeightedSketchCombineFn(SketchCombineFn.misra_gries(4)._factory), MisraGries(4)),
    ],
    ids=["misra-gries", "merge-mg", "merge-pamg", "weighted"],
)
def test_sketch_combiners_merge_no_accumulators_into_the_empty_sketch(fn, empty):
    assert fn.extract_output(fn.merge_accumulators(iter([]))) == empty


def test_count_combiner_merges_no_accumulators_into_zero():
    # DPCount's exact aggregate is Beam's CountCombineFn.
    fn = CountCombineFn()
    assert fn.extract_output(fn.merge_accumulators([])) == 0


# --------------------------------------------------------------------------------------------
# Streaming: the empty ON_TIME pane is released, with noise
# --------------------------------------------------------------------------------------------


def test_heavy_hitters_default_design_releases_the_empty_on_time_pane(tmp_path):
    dump = DumpToFile(tmp_path / "hh.pickle")
    dp = DPHeavyHitters(
        4,
        APPROX,
        mechanism="design-b",
        windowing=Windowing(max_panes_per_window=3),
        noise_source=NoiseSource.insecure_for_tests(7),
        with_metadata=True,
        label="hh-empty-pane",
    )
    assert dp.mechanism_name == "design-b"
    p = streaming()
    out = p | two_elements_then_watermark() | early_discarding() | dp
    assert_that(out, dump)
    p.run().wait_until_finish()
    releases = dump.load()
    assert panes(releases) == [(0, "EARLY"), (1, "EARLY"), (2, "ON_TIME")]
    on_time = next(r for r in releases if r.pane_timing == "ON_TIME")
    # Released like any other pane: calibrated noise and threshold, no key of an empty pane
    # (keys come only from the aggregate, never from the noise).
    assert on_time.noise_scale > 0 and on_time.threshold is not None
    assert on_time.records == ()


def test_count_releases_the_empty_on_time_pane(tmp_path):
    dump = DumpToFile(tmp_path / "count.pickle")
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        windowing=Windowing(max_panes_per_window=3),
        noise_source=NoiseSource.insecure_for_tests(7),
        with_metadata=True,
        label="count-empty-pane",
    )
    p = streaming()
    out = p | two_elements_then_watermark() | early_discarding() | dp
    assert_that(out, dump)
    p.run().wait_until_finish()
    releases = dump.load()
    assert panes(releases) == [(0, "EARLY"), (1, "EARLY"), (2, "ON_TIME")]
    on_time = next(r for r in releases if r.pane_timing == "ON_TIME")
    assert on_time.noise_scale > 0
    assert len(on_time.records) == 1 and isinstance(on_time.records[0].count, int)


# --------------------------------------------------------------------------------------------
# Shapes that cannot release several panes per window are refused at construction
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: DPHeavyHitters(
            4,
            APPROX,
            privacy_unit=PrivacyUnit(id=itemgetter(0), max_windows=1),
            key_fn=itemgetter(1),
            windowing=Windowing(max_panes_per_window=3),
        ),
        lambda: DPCount(
            PrivacyBudget.pure(1.0),
            privacy_unit=PrivacyUnit(id=itemgetter(0), max_windows=1),
            windowing=Windowing(max_panes_per_window=3),
        ),
    ],
    ids=["heavy-hitters-user", "count-user"],
)
def test_user_level_refuses_multi_pane_triggers(make):
    # Contribution bounding is per window: a trigger firing several times per window would let
    # one unit contribute max_contributions to every pane.
    p = streaming()
    windowed = p | two_elements_then_watermark() | beam.Map(lambda x: (x, x)) | early_discarding()
    with pytest.raises(ValueError, match="fires once per window"):
        _ = windowed | make()


def test_sequential_heavy_hitters_refuses_multi_pane_triggers():
    # Several panes would reach the release as a merge of Algorithm-1 sketches, which PMG
    # cannot release (the pipeline would fail at run time, on data-dependent panes).
    p = streaming()
    windowed = p | two_elements_then_watermark() | early_discarding()
    dp = DPHeavyHitters(
        4, APPROX, mechanism="sequential", windowing=Windowing(max_panes_per_window=3)
    )
    with pytest.raises(ValueError, match="'sequential'.*fires once per window"):
        _ = windowed | dp
