"""Release plans read from real Beam PCollections at construction time (no pipeline runs)."""

from __future__ import annotations

from types import SimpleNamespace

import apache_beam as beam
import pytest
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw

from beam_dpsketch.privacy import BudgetExceededError, PrivacyAccountant, PrivacyBudget
from beam_dpsketch.transforms.windowing_rules import max_trigger_firings, plan_releases

ACC = tr.AccumulationMode.ACCUMULATING
DISC = tr.AccumulationMode.DISCARDING


@pytest.fixture(scope="module")
def base():
    p = beam.Pipeline()
    return p | beam.Create([("k", 1), ("k", 2)])


_LABELS = iter(range(10_000))


def windowed(pcoll, windowfn, **kwargs):
    return pcoll | f"w{next(_LABELS)}" >> beam.WindowInto(windowfn, **kwargs)


def test_global_default_is_one_release(base):
    plan = plan_releases(base.windowing)
    assert (plan.windows_per_element, plan.panes_per_window, plan.releases_per_element) == (1, 1, 1)
    assert plan.composition == "single release"
    assert plan.pane_relation == "add_remove"
    assert plan.data_dependent_schedule == ()
    # a PCollection is accepted directly too
    assert plan_releases(base) == plan


def test_fixed_windows_parallel_for_elements(base):
    plan = plan_releases(windowed(base, bw.FixedWindows(10)).windowing)
    assert plan.windows_per_element == 1
    assert plan.releases_per_element == 1
    assert plan.window_fn == "FixedWindows(size=10s)"
    assert "parallel" in plan.composition
    assert any("no pane for a window without elements" in r for r in plan.data_dependent_schedule)


def test_fixed_windows_user_level_needs_declared_windows(base):
    pc = windowed(base, bw.FixedWindows(10))
    with pytest.raises(ValueError, match="max_windows_per_unit"):
        plan_releases(pc.windowing, privacy_unit="user")
    plan = plan_releases(pc.windowing, privacy_unit="user", max_windows_per_unit=24)
    assert plan.windows_per_element == 24
    assert plan.releases_per_element == 24


@pytest.mark.parametrize(
    "size,period,expected", [(30, 10, 3), (25, 10, 3), (10, 10, 1), (60, 7, 9)]
)
def test_sliding_windows_ceil_size_over_period(base, size, period, expected):
    plan = plan_releases(windowed(base, bw.SlidingWindows(size, period)).windowing)
    assert plan.windows_per_element == expected
    assert plan.releases_per_element == expected


def test_sliding_element_level_rejects_smaller_declared_windows(base):
    pc = windowed(base, bw.SlidingWindows(30, 10))
    with pytest.raises(ValueError, match="max_windows_per_unit=2"):
        plan_releases(pc.windowing, max_windows_per_unit=2)
    assert plan_releases(pc.windowing, max_windows_per_unit=5).windows_per_element == 3


@pytest.mark.parametrize("mode,name", [(DISC, "discarding"), (ACC, "accumulating")])
def test_early_firings_need_declared_max_panes(base, mode, name):
    pc = windowed(
        base,
        bw.FixedWindows(10),
        trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
        accumulation_mode=mode,
    )
    with pytest.raises(ValueError, match="max_panes_per_window"):
        plan_releases(pc.windowing)
    plan = plan_releases(pc.windowing, max_panes_per_window=4)
    assert plan.accumulation_mode == name
    assert plan.panes_per_window == 4
    # both modes charge every pane: boundaries of AfterCount panes depend on the data
    assert plan.panes_charged_per_window == 4
    assert plan.releases_per_element == 4
    assert plan.pane_relation == "replace"
    assert any("AfterCount(2)" in r for r in plan.data_dependent_schedule)
    assert plan.allows_pane(3) and not plan.allows_pane(4)


def test_sliding_with_early_firings_hand_computation(base):
    pc = windowed(
        base,
        bw.SlidingWindows(30, 10),
        trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
        accumulation_mode=ACC,
    )
    plan = plan_releases(pc.windowing, max_panes_per_window=3)
    assert (plan.windows_per_element, plan.panes_charged_per_window) == (3, 3)
    assert plan.releases_per_element == 9
    assert "3 window(s) x 3 pane(s) = 9 release(s)" in plan.explanation


def test_over_budget_configuration_fails_at_construction(base):
    pc = windowed(
        base,
        bw.SlidingWindows(30, 10),
        trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
        accumulation_mode=DISC,
    )
    plan = plan_releases(pc.windowing, max_panes_per_window=3)
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0), name="construction")
    with pytest.raises(BudgetExceededError, match="'sliding-counts'") as info:
        acc.charge_plan("sliding-counts", "Laplace", PrivacyBudget.pure(0.2), plan)
    assert "eps=1.8" in str(info.value)
    # the even split of the budget over the plan's releases fits exactly
    charge = acc.charge_plan(
        "sliding-counts", "Laplace", plan.per_release_budget(acc.budget), plan, noise_scale=9.0
    )
    assert charge.releases == 9
    assert charge.windows_per_unit == 3 and charge.panes_per_window == 3
    assert charge.details["pane_relation"] == "replace"
    assert "pane_relation: replace" in acc.explain()


def test_default_trigger_with_lateness_is_unbounded(base):
    pc = windowed(base, bw.FixedWindows(10), allowed_lateness=60)
    assert max_trigger_firings(pc.windowing.triggerfn, pc.windowing.allowed_lateness) is None
    with pytest.raises(ValueError, match="unbounded"):
        plan_releases(pc.windowing)
    plan = plan_releases(pc.windowing, max_panes_per_window=2)
    assert plan.releases_per_element == 2
    assert plan.allowed_lateness == 60.0


def test_late_firings_only_count_with_lateness(base):
    late = tr.AfterWatermark(late=tr.AfterCount(1))
    no_lateness = windowed(base, bw.FixedWindows(10), trigger=late, accumulation_mode=DISC)
    assert plan_releases(no_lateness.windowing).releases_per_element == 1
    with_lateness = windowed(
        base, bw.FixedWindows(10), trigger=late, accumulation_mode=DISC, allowed_lateness=100
    )
    with pytest.raises(ValueError, match="max_panes_per_window"):
        plan_releases(with_lateness.windowing)


def test_sessions_refused_unless_bounded(base):
    pc = windowed(base, bw.Sessions(30))
    with pytest.raises(ValueError, match="Sessions are refused unless bounded"):
        plan_releases(pc.windowing)
    plan = plan_releases(pc.windowing, max_windows_per_unit=4)
    assert plan.releases_per_element == 4
    assert any("Sessions" in r for r in plan.data_dependent_schedule)


def test_max_trigger_firings_structure():
    assert max_trigger_firings(tr.DefaultTrigger()) == 1
    assert max_trigger_firings(tr.AfterWatermark()) == 1
    assert max_trigger_firings(tr.AfterCount(3)) == 1
    assert max_trigger_firings(tr.AfterProcessingTime(5)) == 1
    assert max_trigger_firings(tr.Repeatedly(tr.AfterCount(2))) is None
    assert max_trigger_firings(tr.Always()) is None
    assert max_trigger_firings(tr.AfterAny(tr.AfterCount(2), tr.AfterWatermark())) == 1
    assert max_trigger_firings(tr.AfterAll(tr.AfterCount(2), tr.AfterProcessingTime(1))) == 1
    assert max_trigger_firings(tr.AfterEach(tr.AfterCount(2), tr.AfterWatermark())) == 2
    assert (
        max_trigger_firings(tr.OrFinally(tr.Repeatedly(tr.AfterCount(2)), tr.AfterWatermark()))
        is None
    )
    assert max_trigger_firings(tr.AfterWatermark(late=tr.AfterCount(1)), 0) == 1
    assert max_trigger_firings(tr.AfterWatermark(late=tr.AfterCount(1)), 10) is None


def test_after_each_finite_still_needs_declaration(base):
    trig = tr.AfterEach(tr.AfterCount(2), tr.AfterWatermark())
    pc = windowed(base, bw.GlobalWindows(), trigger=trig, accumulation_mode=ACC)
    with pytest.raises(ValueError, match="up to 2 panes"):
        plan_releases(pc.windowing)
    assert plan_releases(pc.windowing, max_panes_per_window=2).releases_per_element == 2


class _TickTrigger(tr.TriggerFn):
    """A custom trigger standing in for one that fires on a public schedule."""

    def on_element(self, element, window, context):  # pragma: no cover - never run
        pass

    def on_merge(self, to_be_merged, merge_result, context):  # pragma: no cover
        pass

    def should_fire(self, time_domain, timestamp, window, context):  # pragma: no cover
        return False

    def on_fire(self, watermark, window, context):  # pragma: no cover
        return False

    def reset(self, window, context):  # pragma: no cover
        pass

    def may_lose_data(self, windowing):  # pragma: no cover
        return tr.DataLossReason.NO_POTENTIAL_LOSS

    def has_ontime_pane(self):  # pragma: no cover
        return True

    def get_continuation_trigger(self):  # pragma: no cover
        return self

    def to_runner_api(self, context):  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def from_runner_api(proto, context):  # pragma: no cover
        raise NotImplementedError


def test_data_independent_discarding_panes_cost_one_pane_per_element():
    ws = SimpleNamespace(
        windowfn=bw.FixedWindows(60),
        triggerfn=_TickTrigger(),
        accumulation_mode=DISC,
        allowed_lateness=0,
    )
    with pytest.raises(ValueError, match="unbounded"):
        plan_releases(ws)  # unknown triggers are conservatively unbounded
    disjoint = plan_releases(ws, max_panes_per_window=6, data_independent_panes=True)
    assert disjoint.panes_per_window == 6
    assert disjoint.panes_charged_per_window == 1
    assert disjoint.releases_per_element == 1
    assert disjoint.pane_relation == "add_remove"
    # without the assertion every pane is charged
    assert plan_releases(ws, max_panes_per_window=6).releases_per_element == 6
    # accumulating panes re-release the element whatever the boundaries
    acc_ws = SimpleNamespace(**{**vars(ws), "accumulation_mode": ACC})
    assert (
        plan_releases(
            acc_ws, max_panes_per_window=6, data_independent_panes=True
        ).releases_per_element
        == 6
    )
    # user level: a user's elements can sit in several panes
    user = plan_releases(
        ws,
        privacy_unit="user",
        max_panes_per_window=6,
        max_windows_per_unit=2,
        data_independent_panes=True,
    )
    assert user.releases_per_element == 12


def test_data_independent_panes_refused_for_count_triggers(base):
    pc = windowed(
        base,
        bw.FixedWindows(10),
        trigger=tr.AfterWatermark(early=tr.AfterCount(2)),
        accumulation_mode=DISC,
    )
    with pytest.raises(ValueError, match="contradicts the trigger"):
        plan_releases(pc.windowing, max_panes_per_window=3, data_independent_panes=True)


def test_processing_time_trigger_is_data_dependent(base):
    pc = windowed(
        base,
        bw.GlobalWindows(),
        trigger=tr.Repeatedly(tr.AfterProcessingTime(5)),
        accumulation_mode=DISC,
    )
    plan = plan_releases(pc.windowing, max_panes_per_window=10)
    assert plan.releases_per_element == 10
    assert any("AfterProcessingTime" in r for r in plan.data_dependent_schedule)


def test_parameter_validation(base):
    with pytest.raises(ValueError, match="privacy_unit"):
        plan_releases(base.windowing, privacy_unit="row")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_panes_per_window"):
        plan_releases(base.windowing, max_panes_per_window=0)
    with pytest.raises(TypeError, match="PCollection or a Beam Windowing"):
        plan_releases(object())
    plan = plan_releases(base.windowing)
    with pytest.raises(ValueError, match="pane_index"):
        plan.allows_pane(-1)
