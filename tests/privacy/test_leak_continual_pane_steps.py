"""ContinualDPSketch pane model: time steps whose boundaries and number do not depend on the data.

In the pane time model a pane is a time step, and the core's guarantee assumes neighbouring
inputs differ within one step. Count triggers (``AfterCount``, early firings), processing-time
triggers (their delay starts at a pane's first element) and late firings make the pane
boundaries and the number of panes depend on the data: removing one element moves others
between steps and changes how many releases exist. They must be refused when the transform is
applied (a ``ValueError`` naming the trigger), as must non-global windows, whose release exists
only if the window received data. The one step that remains must exist whether or not data
arrived (an empty input still gives one release, with noise only).

Runners: pipeline construction for the refusals; TestStream on the DirectRunner with
``--streaming`` for the streaming cases (early DISCARDING panes, one of them empty, are refused;
an allowed watermark trigger on an empty stream still releases its step).
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
from beam_dpsketch.transforms.continual import ContinualDPSketch

BUDGET = PrivacyBudget.approx(0.5, 1e-6)
QUERIES = ["a", "b"]
DISCARDING = tr.AccumulationMode.DISCARDING


def _pane_sketch(label: str, horizon: int = 8) -> ContinualDPSketch:
    return ContinualDPSketch(
        16,
        3,
        horizon,
        BUDGET,
        query_keys=QUERIES,
        sketch="count-min",
        time_model="pane",
        noise_source=NoiseSource.insecure_for_tests(3),
        label=label,
        with_metadata=True,
    )


def _streaming() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner.
    return beam.Pipeline(runner="DirectRunner", options=PipelineOptions(["--streaming"]))


DATA_DEPENDENT_TRIGGERS = {
    "early count": (tr.AfterWatermark(early=tr.AfterCount(2)), 0),
    "repeated count": (tr.Repeatedly(tr.AfterCount(3)), 0),
    "single count": (tr.AfterCount(5), 0),
    "processing time": (tr.AfterProcessingTime(10), 0),
    "early processing time": (tr.AfterWatermark(early=tr.AfterProcessingTime(5)), 0),
    "late firings": (tr.AfterWatermark(late=tr.AfterCount(1)), 60),
    "default with lateness": (tr.DefaultTrigger(), 60),
    "any of count and watermark": (tr.AfterAny(tr.AfterCount(4), tr.AfterWatermark()), 0),
}


@pytest.mark.parametrize("name", sorted(DATA_DEPENDENT_TRIGGERS))
def test_data_dependent_triggers_are_refused_naming_the_trigger(name):
    trigger, lateness = DATA_DEPENDENT_TRIGGERS[name]
    p = beam.Pipeline(runner="FnApiRunner")
    keys = (
        p
        | beam.Create(["a", "b"])
        | beam.WindowInto(
            GlobalWindows(),
            trigger=trigger,
            accumulation_mode=DISCARDING,
            allowed_lateness=lateness,
        )
    )
    with pytest.raises(ValueError, match=r"trigger .* is refused by the pane time model"):
        _ = keys | _pane_sketch("refused")


def test_non_global_windows_are_refused():
    # FixedWindows with the default trigger: a window without data has no pane, so whether its
    # release exists would reveal that it had data.
    p = beam.Pipeline(runner="FnApiRunner")
    keys = p | beam.Create(["a"]) | beam.WindowInto(FixedWindows(10))
    with pytest.raises(ValueError, match="windowfn: the pane time model needs GlobalWindows"):
        _ = keys | _pane_sketch("fixed")


def test_teststream_early_discarding_panes_with_an_empty_one_are_refused():
    # Two early panes (AfterCount(2)) and an empty ON_TIME pane in window [0, 10): the number of
    # panes, hence of time steps and releases, is a count of the data.
    for windowfn in (FixedWindows(10), GlobalWindows()):
        stream = (
            ts.TestStream()
            .advance_watermark_to(0)
            .add_elements([TimestampedValue(k, t) for k, t in [("a", 1), ("b", 2)]])
            .add_elements([TimestampedValue(k, t) for k, t in [("a", 3), ("a", 4)]])
            .advance_watermark_to(20)
            .advance_watermark_to_infinity()
        )
        p = _streaming()
        keys = (
            p
            | stream
            | beam.WindowInto(
                windowfn,
                trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
                accumulation_mode=DISCARDING,
            )
        )
        with pytest.raises(ValueError, match=r"trigger AfterWatermark\(early=AfterCount\(2\)"):
            _ = keys | _pane_sketch("early")


@pytest.mark.parametrize("with_data", [False, True], ids=["empty", "data"])
def test_teststream_watermark_trigger_releases_its_step_with_or_without_data(with_data, tmp_path):
    # An allowed, non-default windowing (AfterWatermark() in the global window): the one step
    # exists, and is released, whether or not any element arrived.
    stream = ts.TestStream().advance_watermark_to(0)
    if with_data:
        stream = stream.add_elements([TimestampedValue("a", 1), TimestampedValue("b", 2)])
    stream = stream.advance_watermark_to_infinity()
    out = DumpToFile(str(tmp_path / "out.pickle"))
    t = _pane_sketch("watermark", horizon=1)
    p = _streaming()
    keys = (
        p
        | stream
        | beam.WindowInto(
            GlobalWindows(), trigger=tr.AfterWatermark(), accumulation_mode=DISCARDING
        )
    )
    assert_that(keys | t, out)
    p.run().wait_until_finish()
    (release,) = out.load()
    assert (release.t, release.time_model, release.window_start) == (1, "pane", None)
    assert set(release.answers) == set(QUERIES)


def test_relation_states_add_remove_within_the_single_step():
    p = beam.Pipeline(runner="FnApiRunner")
    t = _pane_sketch("relation")
    _ = p | beam.Create(["a"]) | t
    relation = t.charge.details["neighbouring_relation"]
    assert relation.startswith("add, remove or replace up to 1 arrival(s)")
    assert relation in t.explain()
