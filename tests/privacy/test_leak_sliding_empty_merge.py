"""The segment combiner of DPSlidingWindowFrequencies merges zero accumulators into nothing.

With ``AfterWatermark(early=AfterCount(1))`` in DISCARDING mode, the ON_TIME pane after early
panes holds no element and Beam's streaming runner calls ``merge_accumulators`` with no
accumulators for it. A combiner that cannot merge nothing fails the job whenever such a pane
occurs, so whether a job fails would depend on the data. The transform itself refuses such
triggers on its input (a ``ValueError`` naming the trigger, at application); its own segment
windows fire once, on time. Streaming tests run TestStream on the DirectRunner with
``--streaming``.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, GlobalWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.transforms.sliding.tables import SegmentCombineFn

SHAPE = (16, 2, 5)


def streaming() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner.
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def early_discarding(windowfn) -> beam.WindowInto:
    return beam.WindowInto(
        windowfn,
        trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
        accumulation_mode=tr.AccumulationMode.DISCARDING,
    )


def two_rows_then_watermark() -> ts.TestStream:
    """One row per bundle (two EARLY panes), then the watermark: an empty ON_TIME pane."""
    return (
        ts.TestStream()
        .advance_watermark_to(0)
        .add_elements([TimestampedValue((1, "a"), 1)])
        .add_elements([TimestampedValue((2, "b"), 2)])
        .advance_watermark_to(20)
        .advance_watermark_to_infinity()
    )


def test_merging_no_accumulators_gives_the_empty_table():
    fn = SegmentCombineFn(*SHAPE)
    sketch, max_step = fn.extract_output(fn.merge_accumulators([]))
    assert sketch == CountMinSketch(*SHAPE) and sketch.total_weight == 0 and max_step == 0
    sketch, max_step = fn.extract_output(fn.merge_accumulators(iter([])))
    assert sketch.total_weight == 0 and max_step == 0


def test_segment_combiner_survives_an_empty_on_time_pane(tmp_path):
    dump = DumpToFile(tmp_path / "panes.pickle")
    p = streaming()
    tables = (
        p
        | two_rows_then_watermark()
        | early_discarding(FixedWindows(10))
        | beam.CombineGlobally(SegmentCombineFn(*SHAPE)).without_defaults()
        | beam.Map(
            lambda acc, pane=beam.DoFn.PaneInfoParam: (
                pane.index,
                pane.timing,
                acc[0].total_weight,
                acc[1],
            )
        )
    )
    assert_that(tables, dump)
    p.run().wait_until_finish()
    got = sorted(dump.load())
    # Two EARLY panes with one row each, then the empty ON_TIME pane (timing 1 = ON_TIME).
    assert [(i, w, s) for i, _, w, s in got] == [(0, 1, 1), (1, 1, 2), (2, 0, 0)]
    assert got[-1][1] == 1


@pytest.mark.parametrize("mode", ["count", "time"])
def test_early_discarding_input_is_refused_naming_the_trigger(mode):
    p = streaming()
    pcoll = p | two_rows_then_watermark() | early_discarding(GlobalWindows())
    dp = DPSlidingWindowFrequencies(
        20,
        SHAPE[0],
        SHAPE[1],
        PrivacyBudget.zcdp(1.0),
        release_every=5,
        query_keys=["a"],
        mode=mode,
        origin=0 if mode == "time" else None,
        seed=SHAPE[2],
        noise_source=NoiseSource.insecure_for_tests(3),
        label=f"sw-early-{mode}",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )
    with pytest.raises(ValueError, match=r"the input's trigger .*early or late firings"):
        _ = pcoll | dp
