"""The accounted release step (DPAggregate) through DPCount, on streaming and batch runners.

Streaming tests run TestStream pipelines on the DirectRunner with ``--streaming`` (which uses the
BundleBasedDirectRunner); batch tests name the FnApiRunner. Every released value is checked
exactly: the test recomputes the one noise draw of each release from the same (insecure, seeded)
noise key and release id, so "noise once, from the release's stream" is what is asserted.

Hand computations of the accountant's totals (pure DP, element level):

* FixedWindows(10), default trigger: 1 window x 1 pane = 1 release per element; eps 1.0 -> 1.0
  per release, total 1.0 (windows compose in parallel).
* SlidingWindows(30, 10), default trigger: ceil(30/10) = 3 windows x 1 pane = 3 releases;
  eps 1.5 -> 0.5 per release, total 1.5.
* FixedWindows(10), AfterWatermark(early=AfterCount(2)), max_panes_per_window=3, ACCUMULATING:
  1 window x 3 panes = 3 releases; eps 0.9 -> 0.3 per release, total 0.9.
* The same in DISCARDING mode: AfterCount makes pane boundaries data dependent, so all 3 panes
  are charged as well: 3 releases, 0.3 each, total 0.9; pane relation "replace".
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as ts
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    SlidingWindows,
    TimestampedValue,
)

from beam_dpsketch.noise import NoiseSource, discrete_laplace
from beam_dpsketch.privacy import (
    BudgetExceededError,
    PrivacyAccountant,
    PrivacyBudget,
    Windowing,
    group_privacy,
)
from beam_dpsketch.transforms import (
    DPAggregate,
    DPCount,
    Release,
    ReleaseMechanism,
    explain_pipeline,
)
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.records import CountEstimate
from beam_dpsketch.transforms.release import GroupPrivacyReplace, release_id_for

SEED = 20261122


def streaming() -> beam.Pipeline:
    # --streaming + TestStream runs on the BundleBasedDirectRunner (the runner Beam uses for TestStream).
    return beam.Pipeline(options=PipelineOptions(["--streaming"]))


def stream_of(steps, end=None):
    """TestStream: watermark 0, one ``add_elements`` per step of (value, time), then ``end``."""
    # Used through its module: a module-level name TestStream would be collected by pytest.
    s = ts.TestStream().advance_watermark_to(0)
    for step in steps:
        s = s.add_elements([TimestampedValue(v, t) for v, t in step])
    if end is not None:
        s = s.advance_watermark_to(end)
    return s.advance_watermark_to_infinity()


def expected_value(dp: DPCount, source: NoiseSource, window, pane_index: int, true_count: int):
    """True count plus the one noise draw of release (label, window, pane) — recomputed here."""
    agg = dp.aggregate
    rid = release_id_for(agg.release_label, window, pane_index)
    scale = agg.calibrated_mechanism.scale(agg.per_release_budget)
    return true_count + int(discrete_laplace(agg.noise_source.stream(rid), scale, 1)[0])


def as_tuples(releases):
    return sorted(
        (r.window_start, r.window_end, r.pane_index, r.pane_timing, r.records[0].count)
        for r in releases
    )


def equal_sorted(expected):
    expected = sorted(expected)

    def check(actual):
        got = as_tuples(actual)
        assert got == expected, f"released {got}, expected {expected}"

    return check


# --------------------------------------------------------------------------------------------
# Windows: accounting + exact noise
# --------------------------------------------------------------------------------------------


def test_fixed_windows_one_release_per_element_and_exact_noise():
    source = NoiseSource.insecure_for_tests(SEED)
    acc = PrivacyAccountant(PrivacyBudget.pure(2.0), name="pipeline")
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        accountant=acc,
        noise_source=source,
        with_metadata=True,
        label="fixed",
    )
    p = streaming()
    data = [("a", 1), ("b", 2), ("c", 3), ("d", 12), ("e", 15)]
    out = p | stream_of([data]) | beam.WindowInto(FixedWindows(10)) | dp
    # Hand computation: 1 window x 1 pane = 1 release of eps 1.0.
    assert dp.aggregate.charge.releases == 1
    assert dp.aggregate.per_release_budget.epsilon == 1.0
    assert acc.spent.epsilon == pytest.approx(1.0)
    expected = [
        (0.0, 10.0, 0, "ON_TIME", expected_value(dp, source, IntervalWindow(0, 10), 0, 3)),
        (10.0, 20.0, 0, "ON_TIME", expected_value(dp, source, IntervalWindow(10, 20), 0, 2)),
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()


def test_sliding_windows_charge_size_over_period_releases():
    source = NoiseSource.insecure_for_tests(SEED)
    acc = PrivacyAccountant(PrivacyBudget.pure(1.5))
    dp = DPCount(
        PrivacyBudget.pure(1.5),
        accountant=acc,
        noise_source=source,
        with_metadata=True,
        label="sliding",
    )
    p = streaming()
    data = [("a", 1), ("b", 2), ("c", 12), ("d", 25)]
    out = p | stream_of([data]) | beam.WindowInto(SlidingWindows(30, 10)) | dp
    # Hand computation: ceil(30/10) = 3 windows x 1 pane = 3 releases of eps 0.5: total 1.5.
    charge = dp.aggregate.charge
    assert (charge.windows_per_unit, charge.panes_per_window, charge.releases) == (3, 1, 3)
    assert dp.aggregate.per_release_budget.epsilon == pytest.approx(0.5)
    assert 3 * dp.aggregate.per_release_budget.epsilon <= 1.5
    assert acc.spent.epsilon == pytest.approx(1.5)
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    true_counts = {(-20, 10): 2, (-10, 20): 3, (0, 30): 4, (10, 40): 2, (20, 50): 1}
    expected = [
        (float(s), float(e), 0, "ON_TIME", expected_value(dp, source, IntervalWindow(s, e), 0, c))
        for (s, e), c in true_counts.items()
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()


EARLY_STEPS = [[("a", 1), ("b", 2)], [("c", 3), ("d", 4)], [("e", 5)]]


@pytest.mark.parametrize(
    ("mode", "true_counts"),
    [
        # AfterCount(2) fires after a, b and after c, d; the watermark fires the ON_TIME pane.
        (tr.AccumulationMode.ACCUMULATING, [2, 4, 5]),
        (tr.AccumulationMode.DISCARDING, [2, 2, 1]),
    ],
    ids=["accumulating", "discarding"],
)
def test_early_firings_charge_every_declared_pane(mode, true_counts):
    source = NoiseSource.insecure_for_tests(SEED)
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    dp = DPCount(
        PrivacyBudget.pure(0.9),
        accountant=acc,
        windowing=Windowing(max_panes_per_window=3),
        noise_source=source,
        with_metadata=True,
        label="early",
    )
    p = streaming()
    windowed = (
        p
        | stream_of(EARLY_STEPS)
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
            accumulation_mode=mode,
        )
    )
    out = windowed | dp
    # Hand computation: 1 window x 3 panes = 3 releases of eps 0.3, total 0.9, in both modes
    # (DISCARDING panes have data-dependent boundaries, so they are not parallel).
    charge = dp.aggregate.charge
    assert (charge.windows_per_unit, charge.panes_per_window, charge.releases) == (1, 3, 3)
    assert dp.aggregate.per_release_budget.epsilon == pytest.approx(0.3)
    assert acc.spent.epsilon == pytest.approx(0.9)
    assert dp.aggregate.plan.pane_relation == "replace"
    # A count's sensitivity under replacement is still 1 (see DPCount's docstring).
    assert dp.aggregate.calibrated_mechanism.sensitivity == 1
    assert charge.noise_scale == pytest.approx(1 / 0.3, rel=1e-5)
    timings = ["EARLY", "EARLY", "ON_TIME"]
    w = IntervalWindow(0, 10)
    expected = [
        (0.0, 10.0, i, timings[i], expected_value(dp, source, w, i, c))
        for i, c in enumerate(true_counts)
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()


def test_pipeline_total_is_the_sum_of_the_hand_computed_charges():
    acc = PrivacyAccountant(PrivacyBudget.pure(5.0), name="pipeline")
    p = streaming()
    events = p | stream_of(EARLY_STEPS)
    (
        events
        | "Fixed" >> beam.WindowInto(FixedWindows(10))
        | "C1" >> DPCount(PrivacyBudget.pure(1.0), accountant=acc)
    )
    (
        events
        | "Sliding" >> beam.WindowInto(SlidingWindows(30, 10))
        | "C2" >> DPCount(PrivacyBudget.pure(1.5), accountant=acc)
    )
    for name, mode in [
        ("Acc", tr.AccumulationMode.ACCUMULATING),
        ("Disc", tr.AccumulationMode.DISCARDING),
    ]:
        (
            events
            | name
            >> beam.WindowInto(
                FixedWindows(10),
                trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
                accumulation_mode=mode,
            )
            | f"C{name}"
            >> DPCount(
                PrivacyBudget.pure(0.9),
                accountant=acc,
                windowing=Windowing(max_panes_per_window=3),
            )
        )
    # 1.0 + 3 x 0.5 + 3 x 0.3 + 3 x 0.3 = 4.3
    assert [c.releases for c in acc.charges] == [1, 3, 3, 3]
    assert [c.transform for c in acc.charges] == ["C1", "C2", "CAcc", "CDisc"]
    assert acc.spent.epsilon == pytest.approx(4.3)
    assert acc.remaining.epsilon == pytest.approx(0.7)
    report = explain_pipeline(acc)
    assert "'CAcc'" in report and "releases: 3" in report and "committed" in report


# --------------------------------------------------------------------------------------------
# Refusals at construction
# --------------------------------------------------------------------------------------------


def test_over_budget_fails_at_construction_naming_transform_and_numbers():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0), name="pipeline")
    p = streaming()
    windowed = p | stream_of(EARLY_STEPS) | beam.WindowInto(FixedWindows(10))
    windowed | "First" >> DPCount(PrivacyBudget.pure(0.8), accountant=acc)
    with pytest.raises(BudgetExceededError, match=r"'Second'.*eps=0\.5.*eps=0\.8") as info:
        windowed | "Second" >> DPCount(PrivacyBudget.pure(0.5), accountant=acc)
    assert info.value.transform == "Second"
    assert "eps=1" in str(info.value)  # the budget
    # Nothing was charged for the refused transform, and nothing ran.
    assert [c.transform for c in acc.charges] == ["First"]


def test_sliding_windows_over_budget_because_of_the_window_count():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        accountant=acc,
        label="slide",
        windowing=Windowing(max_panes_per_window=None),
    )
    # Per-release eps 1/3 x 3 windows fits exactly; a second transform does not.
    p = streaming()
    sliding = p | stream_of(EARLY_STEPS) | beam.WindowInto(SlidingWindows(30, 10))
    sliding | "A" >> dp
    with pytest.raises(BudgetExceededError, match="'slide2'"):
        sliding | "B" >> DPCount(PrivacyBudget.pure(0.01), accountant=acc, label="slide2")


def test_early_firing_without_max_panes_fails_at_construction():
    p = streaming()
    windowed = (
        p
        | stream_of(EARLY_STEPS)
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    with pytest.raises(ValueError, match=r"NoMax: .*max_panes_per_window"):
        windowed | "NoMax" >> DPCount(PrivacyBudget.pure(1.0))


@pytest.mark.parametrize(
    "trigger",
    [tr.AfterWatermark(early=tr.AfterProcessingTime(5)), tr.AfterProcessingTime(5)],
    ids=["early-processing-time", "processing-time"],
)
def test_processing_time_triggers_are_refused(trigger):
    # AfterProcessingTime starts at a pane's first element: removing it can shift any number of
    # elements into the pane, so no per-pane sensitivity holds.
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    p = streaming()
    windowed = (
        p
        | stream_of(EARLY_STEPS)
        | beam.WindowInto(
            FixedWindows(10), trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
        )
    )
    with pytest.raises(ValueError, match=r"PT: .*AfterProcessingTime"):
        windowed | "PT" >> DPCount(
            accountant=acc,
            windowing=Windowing(max_panes_per_window=2),
        )
    assert acc.charges == ()


def test_same_label_twice_on_one_accountant_is_refused():
    acc = PrivacyAccountant(PrivacyBudget.pure(4.0))
    p = streaming()
    windowed = p | stream_of(EARLY_STEPS) | beam.WindowInto(FixedWindows(10))
    windowed | "A" >> DPCount(PrivacyBudget.pure(1.0), accountant=acc, label="same")
    with pytest.raises(ValueError, match="already has a charge"):
        windowed | "B" >> DPCount(PrivacyBudget.pure(1.0), accountant=acc, label="same")


def test_explain_needs_the_transform_applied():
    dp = DPCount(PrivacyBudget.pure(1.0))
    with pytest.raises(RuntimeError, match="applied"):
        dp.explain()


# --------------------------------------------------------------------------------------------
# Panes: withheld beyond the maximum, empty panes released
# --------------------------------------------------------------------------------------------


def test_panes_beyond_the_declared_maximum_are_withheld():
    source = NoiseSource.insecure_for_tests(SEED)
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        windowing=Windowing(max_panes_per_window=2),
        noise_source=source,
        with_metadata=True,
        label="capped",
    )
    p = streaming()
    steps = [[("a", 1)], [("b", 2)], [("c", 3)]]
    windowed = (
        p
        | stream_of(steps)
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
        )
    )
    out = windowed | dp
    # Beam fires EARLY panes 0, 1, 2 (one per element) and ON_TIME pane 3; only 0 and 1 are
    # released, 2 and 3 are withheld.
    w = IntervalWindow(0, 10)
    expected = [
        (0.0, 10.0, 0, "EARLY", expected_value(dp, source, w, 0, 1)),
        (0.0, 10.0, 1, "EARLY", expected_value(dp, source, w, 1, 2)),
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()
    # The report states public facts only, never how many panes a run released or withheld.
    report = explain_pipeline(dp.accountant)
    assert "panes per window: 2" in report
    assert "withheld beyond" not in report


def test_panes_beyond_the_maximum_are_withheld_on_the_fnapi_runner():
    # Batch with an early trigger: per window one EARLY pane with all the data, then an ON_TIME
    # pane (empty in DISCARDING mode). With max 1 pane, each window's ON_TIME pane is withheld.
    source = NoiseSource.insecure_for_tests(SEED)
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        windowing=Windowing(max_panes_per_window=1),
        noise_source=source,
        with_metadata=True,
        label="batch-capped",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    windowed = (
        p
        | beam.Create([1, 2, 3, 11, 12])
        | beam.Map(lambda t: TimestampedValue(t, t))
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    out = windowed | dp
    expected = [
        (0.0, 10.0, 0, "EARLY", expected_value(dp, source, IntervalWindow(0, 10), 0, 3)),
        (10.0, 20.0, 0, "EARLY", expected_value(dp, source, IntervalWindow(10, 20), 0, 2)),
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()


def test_empty_on_time_pane_is_released_with_noise():
    source = NoiseSource.insecure_for_tests(SEED)
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        windowing=Windowing(max_panes_per_window=3),
        noise_source=source,
        with_metadata=True,
        label="empty-pane",
    )
    p = streaming()
    windowed = (
        p
        | stream_of([[("a", 1)], [("b", 2)]])
        | beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    out = windowed | dp
    w = IntervalWindow(0, 10)
    on_time = expected_value(dp, source, w, 2, 0)
    expected = [
        (0.0, 10.0, 0, "EARLY", expected_value(dp, source, w, 0, 1)),
        (0.0, 10.0, 1, "EARLY", expected_value(dp, source, w, 1, 1)),
        # The ON_TIME pane holds no element: released as 0 + noise, not dropped.
        (0.0, 10.0, 2, "ON_TIME", on_time),
    ]
    assert_that(out, equal_sorted(expected))
    p.run().wait_until_finish()


def test_global_window_empty_input_releases_noise_on_fnapi():
    source = NoiseSource.insecure_for_tests(SEED)
    dp = DPCount(PrivacyBudget.pure(0.5), noise_source=source, label="empty-global")
    p = beam.Pipeline(runner="FnApiRunner")
    out = p | beam.Create([], reshuffle=False).with_output_types(str) | dp
    agg = dp.aggregate
    scale = agg.calibrated_mechanism.scale(agg.per_release_budget)
    rid = release_id_for("empty-global", GlobalWindow(), 0)
    assert rid == ("empty-global", "global", 0)
    noise = int(discrete_laplace(agg.noise_source.stream(rid), scale, 1)[0])

    def check(actual):
        assert actual == [CountEstimate(noise)]

    assert_that(out, check)
    p.run().wait_until_finish()


# --------------------------------------------------------------------------------------------
# Reproducible, once-per-release noise
# --------------------------------------------------------------------------------------------


def run_fixed(seed: int, out_file, eps: float = 0.01) -> tuple[DPCount, list]:
    """Run the two-window pipeline; return the transform and its released tuples."""
    source = NoiseSource.insecure_for_tests(seed)
    dp = DPCount(PrivacyBudget.pure(eps), noise_source=source, with_metadata=True, label="rep")
    p = streaming()
    data = [("a", 1), ("b", 2), ("c", 3), ("d", 12), ("e", 15)]
    out = p | stream_of([data[:2], data[2:]]) | beam.WindowInto(FixedWindows(10)) | dp

    def capture(actual):
        # The matcher is pickled before it runs, so results leave through a file.
        out_file.write_text(json.dumps(as_tuples(actual)))

    assert_that(out, capture)
    p.run().wait_until_finish()
    return dp, [tuple(r) for r in json.loads(out_file.read_text())]


def test_same_key_and_release_id_reproduce_the_release_across_runs(tmp_path):
    dp1, first = run_fixed(SEED, tmp_path / "run1.json")
    _, second = run_fixed(SEED, tmp_path / "run2.json")
    _, other_key = run_fixed(SEED + 1, tmp_path / "run3.json")
    assert first == second
    assert len(first) == 2
    source = NoiseSource.insecure_for_tests(SEED)
    expected = [
        (0.0, 10.0, 0, "ON_TIME", expected_value(dp1, source, IntervalWindow(0, 10), 0, 3)),
        (10.0, 20.0, 0, "ON_TIME", expected_value(dp1, source, IntervalWindow(10, 20), 0, 2)),
    ]
    # The released value is the exact count plus exactly one draw from the release's stream.
    assert first == expected
    noise = [r[4] - c for r, c in zip(first, [3, 2], strict=True)]
    # Different windows have different release ids, hence different noise (scale 100 here).
    assert noise[0] != noise[1]
    # A different key gives different noise for the same releases.
    assert [r[4] for r in other_key] != [r[4] for r in first]


def test_release_ids_name_label_window_and_pane():
    assert release_id_for("x", IntervalWindow(0, 10), 2) == ("x", 0, 10_000_000, 2)
    assert release_id_for("x", GlobalWindow(), 0) == ("x", "global", 0)
    source = NoiseSource.insecure_for_tests(1)
    a = source.stream(release_id_for("x", IntervalWindow(0, 10), 0)).uint64(4)
    b = source.stream(release_id_for("x", IntervalWindow(10, 20), 0)).uint64(4)
    c = source.stream(release_id_for("x", IntervalWindow(0, 10), 1)).uint64(4)
    assert list(a) != list(b) and list(a) != list(c)


# --------------------------------------------------------------------------------------------
# DPAggregate with a custom mechanism; metadata; generic replace calibration
# --------------------------------------------------------------------------------------------


class RecordingMechanism(ReleaseMechanism):
    """Releases the accumulator and the first stream word: shows what the DoFn passes."""

    name = "recording"

    def release(self, accumulator, budget, stream):
        return [{"acc": accumulator, "word": int(stream.uint64(1)[0]), "eps": budget.epsilon}]

    def describe(self, budget):
        return {
            "noise": "none (test)",
            "noise_scale": 1.0 / budget.epsilon,
            "threshold": 7.0,
            "sensitivity": 1,
            "neighbouring_relation": "add/remove one element",
        }


def test_dpaggregate_with_custom_mechanism_and_metadata():
    source = NoiseSource.insecure_for_tests(3)
    agg = DPAggregate(
        sum,
        RecordingMechanism(),
        budget=PrivacyBudget.approx(1.0, 1e-6),
        noise_source=source,
        with_metadata=True,
        label="agg",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    out = p | beam.Create([1, 2, 3]) | agg
    word = int(agg.noise_source.stream(("agg", "global", 0)).uint64(1)[0])
    expected = Release(
        transform="agg",
        window_start=None,
        window_end=None,
        pane_index=0,
        pane_timing="UNKNOWN",
        is_last_pane=True,
        mechanism="recording",
        privacy_unit="element",
        pane_relation="add_remove",
        epsilon=1.0,
        delta=1e-6,
        rho=None,
        noise_scale=1.0,
        threshold=7.0,
        records=({"acc": 6, "word": word, "eps": 1.0},),
    )

    def check(actual):
        assert actual == [expected]

    assert_that(out, check)
    p.run().wait_until_finish()
    assert agg.charge.threshold == 7.0
    assert "agg" in agg.explain() and "threshold: 7" in agg.explain()


def test_default_replace_calibration_is_group_privacy_of_two():
    mech = RecordingMechanism().for_pane_relation("replace")
    assert isinstance(mech, GroupPrivacyReplace)
    assert mech.for_pane_relation("add_remove").name == "recording"
    assert GroupPrivacyReplace.shrink(PrivacyBudget.pure(1.0)).epsilon == 0.5
    assert GroupPrivacyReplace.shrink(PrivacyBudget.zcdp(1.0)).rho == 0.25
    inner = GroupPrivacyReplace.shrink(PrivacyBudget.approx(1.0, 1e-6))
    back = group_privacy(inner, 2)
    assert back.epsilon == pytest.approx(1.0) and back.delta == pytest.approx(1e-6)
    # The inner mechanism sees the shrunk budget.
    rec = mech.release(5, PrivacyBudget.pure(1.0), NoiseSource.insecure_for_tests(0).stream("r"))
    assert rec[0]["eps"] == 0.5
    assert "group privacy" in mech.describe(PrivacyBudget.pure(1.0))["neighbouring_relation"]


def test_dpaggregate_validates_arguments():
    with pytest.raises(ValueError, match="budget"):
        DPAggregate(sum, RecordingMechanism())
    with pytest.raises(TypeError, match="mechanism"):
        DPAggregate(sum, object(), budget=PrivacyBudget.pure(1.0))
    with pytest.raises(TypeError, match="privacy_unit must be a PrivacyUnit"):
        DPAggregate(sum, RecordingMechanism(), budget=PrivacyBudget.pure(1.0), privacy_unit="x")
    with pytest.raises(ValueError, match="max_panes_per_window"):
        DPAggregate(
            sum,
            RecordingMechanism(),
            budget=PrivacyBudget.pure(1.0),
            windowing=Windowing(max_panes_per_window=0),
        )
    with pytest.raises(ValueError, match="zCDP"):
        DPAggregate(sum, CountLaplaceMechanism(), budget=PrivacyBudget.zcdp(1.0))


def test_budget_none_takes_what_the_accountant_has_left():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    acc.charge("earlier", "m", PrivacyBudget.pure(0.25))
    dp = DPCount(accountant=acc, label="rest")
    p = beam.Pipeline(runner="FnApiRunner")
    p | beam.Create([1]) | dp
    assert dp.aggregate.per_release_budget.epsilon == pytest.approx(0.75)
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    # Taking "what is left" later would depend on the order of application: a transform
    # without a budget constructed once the pool is frozen is refused, naming the alternative.
    with pytest.raises(ValueError, match="construct every transform .* explicit budget="):
        DPCount(accountant=acc, label="more")
    with pytest.raises(BudgetExceededError, match="total would be"):
        (
            p
            | "again" >> beam.Create([1])
            | "more" >> DPCount(PrivacyBudget.pure(0.1), accountant=acc, label="more")
        )
