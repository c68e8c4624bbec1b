"""Every DP transform takes the shared declarations as value objects and a budget weight.

``DPHistogram`` / ``DPHeavyHitters`` take ``privacy_unit=PrivacyUnit(...)`` and
``windowing=Windowing(...)``; ``ContinualDPSketch`` takes the part of a ``PrivacyUnit`` it can
honour and refuses the rest, naming the field; every transform takes ``budget_weight=``. No
public transform hides its parameters behind ``**kwargs``, and no refusal names a loose
parameter that the transforms no longer take.
"""

from __future__ import annotations

import inspect
from operator import itemgetter

import apache_beam as beam
import pytest
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw
from apache_beam.transforms.display import DisplayData

import beam_dpsketch as dps
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPHeavyHitters,
    DPHistogram,
    DPIntermittentQueries,
    DPSlidingWindowFrequencies,
    QuerySchedule,
)
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.transforms.windowing_rules import WindowingRefused

RUNNER = "FnApiRunner"
APPROX = PrivacyBudget.approx(1.0, 1e-6)
#: The parameters the value objects replace: no transform takes them any more.
LOOSE = (
    "privacy_id_fn",
    "max_windows_per_unit",
    "max_panes_per_window",
    "release_range",
    "data_independent_panes",
)
TRANSFORMS = (
    dps.DPCount,
    dps.DPFrequencies,
    dps.DPQuantiles,
    DPHistogram,
    DPHeavyHitters,
    DPSlidingWindowFrequencies,
    ContinualDPSketch,
    DPIntermittentQueries,
)


def _user_rows() -> list[tuple[str, str]]:
    return [(f"u{u}", f"k{(u + i) % 5}") for u in range(60) for i in range(3)]


@pytest.mark.parametrize("cls", TRANSFORMS, ids=lambda c: c.__name__)
def test_signatures_are_explicit_and_take_no_loose_declaration(cls):
    params = inspect.signature(cls.__init__).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert [name for name in LOOSE if name in params] == []
    assert "budget_weight" in params


def test_user_level_histogram_is_declared_by_its_privacy_unit():
    unit = PrivacyUnit(id=itemgetter(0), max_contributions=2)
    t = DPHistogram(
        16,
        APPROX,
        key_fn=itemgetter(1),
        privacy_unit=unit,
        noise_source=NoiseSource.insecure_for_tests(3),
        selection_key=b"s" * 32,
        label="users",
    )
    assert t.mechanism_name == "user-exact" and t.mechanism.max_contributions == 2
    p = beam.Pipeline(runner=RUNNER)
    _ = p | beam.Create(_user_rows()) | t
    assert t.charge.privacy_unit == "user"
    assert "unit: user (id <callable itemgetter>, <= 2 contributions per window)" in t.explain()
    items = {i.key: i.value for i in DisplayData.create_from(t).items}
    assert items["max_contributions"] == 2


def test_histogram_reads_the_privacy_id_from_a_field():
    rows = [{"user": u, "page": k} for u, k in _user_rows()]
    t = DPHeavyHitters(
        16,
        APPROX,
        key_fn="page",
        privacy_unit=PrivacyUnit(id="user", max_contributions=3),
        noise_source=NoiseSource.insecure_for_tests(3),
        label="pages",
    )
    p = beam.Pipeline(runner=RUNNER)
    _ = p | beam.Create(rows) | t
    assert "id 'user'" in t.explain()


def test_a_contribution_bound_needs_a_user_level_unit():
    with pytest.raises(ValueError, match="max_contributions applies to a user-level"):
        DPHeavyHitters(16, APPROX, privacy_unit=PrivacyUnit(max_contributions=3))


def test_histogram_windowing_bounds_come_from_the_windowing_object():
    p = beam.Pipeline(runner=RUNNER)
    early = (
        p
        | beam.Create([bw.TimestampedValue(i % 5, i) for i in range(20)])
        | beam.WindowInto(
            bw.FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    with pytest.raises(WindowingRefused, match=r"windowing=Windowing\(max_panes_per_window="):
        _ = early | "Undeclared" >> DPHistogram(8, APPROX, mechanism="design-b", label="a")
    t = DPHistogram(
        8, APPROX, mechanism="design-b", windowing=Windowing(max_panes_per_window=3), label="b"
    )
    _ = early | "Declared" >> t
    assert t.aggregate.max_panes_per_window == 3


def test_a_user_level_refusal_names_the_privacy_unit_field():
    p = beam.Pipeline(runner=RUNNER)
    windowed = (
        p
        | beam.Create([bw.TimestampedValue(r, i) for i, r in enumerate(_user_rows())])
        | beam.WindowInto(bw.FixedWindows(60))
    )
    t = DPHistogram(
        8,
        APPROX,
        key_fn=itemgetter(1),
        privacy_unit=PrivacyUnit(id=itemgetter(0), max_contributions=2),
    )
    with pytest.raises(WindowingRefused) as info:
        _ = windowed | t
    message = str(info.value)
    # The reason and the proposal both speak of the object the transform takes.
    assert "max_windows_per_unit" not in message, message
    assert "PrivacyUnit(max_windows=" in message.split("Accepted instead")[0], message
    assert "privacy_unit=PrivacyUnit(id=..., max_contributions=2, max_windows=" in message
    assert info.value.parameters == ("privacy_unit",)


def _continual(**kw):
    return ContinualDPSketch(
        16,
        3,
        64,
        PrivacyBudget.approx(0.5, 1e-6),
        query_keys=["k1"],
        time_model="pane",
        noise_source=NoiseSource.insecure_for_tests(2),
        **kw,
    )


def test_continual_takes_the_contribution_bound_of_a_privacy_unit():
    t = _continual(privacy_unit=PrivacyUnit(id="user", max_contributions=3))
    assert t.display_parameters()["max_contributions"] == 3
    assert "3 arrivals" in t.neighbouring_relation or "3" in t.neighbouring_relation


@pytest.mark.parametrize(
    ("unit", "field"),
    [(PrivacyUnit(max_windows=2), "max_windows")],
    ids=["max_windows"],
)
def test_continual_refuses_the_fields_it_cannot_honour(unit, field):
    with pytest.raises(ValueError, match=rf"privacy_unit: .*{field}") as info:
        _continual(privacy_unit=unit)
    assert "accepted" in str(info.value).lower()


def test_the_element_model_refuses_a_contribution_bound():
    with pytest.raises(ValueError, match="max_contributions"):
        ContinualDPSketch(
            16,
            3,
            64,
            PrivacyBudget.approx(0.5, 1e-6),
            query_keys=["k1"],
            privacy_unit=PrivacyUnit(id="user", max_contributions=2),
        )


def test_weights_share_one_accountant_across_families():
    acc = PrivacyAccountant(PrivacyBudget.approx(1.2, 1e-6), name="shared")
    hist = DPHistogram(8, accountant=acc, budget_weight=1, mechanism="design-b", label="hist")
    cont = ContinualDPSketch(
        16, 3, 64, accountant=acc, budget_weight=2, query_keys=["k1"], label="cont"
    )
    p = beam.Pipeline(runner=RUNNER)
    _ = p | "Keys" >> beam.Create(["k1", "k2"]) | hist
    _ = p | "Positions" >> beam.Create([(0, "k1"), (1, "k2")]) | cont
    assert hist.aggregate.per_release_budget.epsilon == pytest.approx(0.4)
    assert cont.window_budget.epsilon == pytest.approx(0.8)


def test_sliding_and_intermittent_take_a_weight():
    zcdp = PrivacyAccountant(PrivacyBudget.zcdp(0.9), name="zcdp")
    a = DPSlidingWindowFrequencies(
        20,
        16,
        2,
        accountant=zcdp,
        budget_weight=1,
        release_every=5,
        query_keys=["k1"],
        label="a",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )
    b = DPSlidingWindowFrequencies(
        20,
        16,
        2,
        accountant=zcdp,
        budget_weight=2,
        release_every=5,
        query_keys=["k1"],
        label="b",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )
    pure = PrivacyAccountant(PrivacyBudget.pure(1.0), name="pure")
    schedule = QuerySchedule([(5, ["k1"])])
    c = DPIntermittentQueries(
        32, 3, accountant=pure, budget_weight=3, queries=schedule, clock="positions", label="c"
    )
    d = DPIntermittentQueries(
        32, 3, accountant=pure, budget_weight=1, queries=schedule, clock="positions", label="d"
    )
    p = beam.Pipeline(runner=RUNNER)
    positioned = p | beam.Create([(1, "k1"), (2, "k2")])
    # Applied in the opposite order of their construction: the shares do not depend on it.
    for t in (b, a, d, c):
        _ = positioned | t
    assert a.rho == pytest.approx(0.3) and b.rho == pytest.approx(0.6)
    assert c.charge.total_cost.epsilon == pytest.approx(0.75)
    assert d.charge.total_cost.epsilon == pytest.approx(0.25)


def test_the_sliding_layout_is_one_value_object():
    layout = SlidingLayout(block=10, alpha="1/2")
    # Only the fields given reach the sketch: its defaults apply to the others.
    assert layout.sketch_options() == {"block": 10, "alpha": "1/2"}
    assert SlidingLayout(preset="theory").sketch_options() == {}
    with pytest.raises(ValueError, match="preset must be one of"):
        SlidingLayout(preset="fast")

    def sliding(**kw):
        return DPSlidingWindowFrequencies(
            20, 16, 2, PrivacyBudget.zcdp(1.0), release_every=5, query_keys=["k1"], **kw
        )

    assert sliding(layout=layout).display_parameters()["window"] == 20
    with pytest.raises(TypeError, match="layout must be a SlidingLayout"):
        sliding(layout={"block": 10, "alpha": "1/2"})
    # No block structure at all is refused by the sketch, naming what to give.
    with pytest.raises(ValueError, match="block and beta"):
        sliding()
