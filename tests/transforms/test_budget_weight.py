"""Weighted budget splits on a shared accountant: no result depends on application order.

Transforms without an explicit ``budget`` share the accountant's pool (its budget minus the
explicit budgets declared on it) in proportion to their ``budget_weight`` (default 1). The
pool is frozen when the first transform is applied, so the budgets, and with a seeded noise
source the releases themselves, are the same whatever order the transforms are constructed or
applied in.
"""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.transforms.display import DisplayData

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import (
    BudgetExceededError,
    PrivacyAccountant,
    PrivacyBudget,
    PrivacyUnit,
    Windowing,
)
from beam_dpsketch.transforms import DPCount, DPFrequencies, DPQuantiles
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.release import DPAggregate

RUNNER = "FnApiRunner"
ELEMENTS = list(range(40))

# name: (budget_weight, seed of its own insecure noise source)
WEIGHTED = {"a": (None, 11), "b": (2.0, 12), "c": (1.0, 13)}


def _count(acc: PrivacyAccountant, name: str, weight: float | None) -> DPCount:
    seed = WEIGHTED[name][1]
    # Each transform has its own seeded source, so its noise does not depend on construction
    # order either (a shared insecure source derives keys by construction counter).
    return DPCount(
        accountant=acc,
        budget_weight=weight,
        noise_source=NoiseSource.insecure_for_tests(seed),
        label=name,
    )


def _run(names: list[str], build_order: list[str], apply_order: list[str], tmp: Path) -> dict:
    """Budgets and released counts of ``names``, built and applied in the given orders."""
    acc = PrivacyAccountant(PrivacyBudget.pure(1.2), name="shared")
    built = {n: _count(acc, n, WEIGHTED[n][0]) for n in build_order}
    p = beam.Pipeline(runner=RUNNER)
    data = p | beam.Create(ELEMENTS)
    paths = {}
    for n in apply_order:
        out = data | f"Apply{n}" >> built[n]
        paths[n] = tmp / f"{n}.pickle"
        target = str(paths[n])

        def write(actual, target=target):
            with open(target, "wb") as fh:
                pickle.dump(sorted(r.count for r in actual), fh)

        assert_that(out, write, label=f"Dump{n}")
    p.run().wait_until_finish()
    result = {}
    for n in names:
        with open(paths[n], "rb") as fh:
            released = pickle.load(fh)
        result[n] = (built[n].aggregate.per_release_budget, released)
    return result


@pytest.mark.parametrize("names", [["a", "b"], ["a", "b", "c"]], ids=["two", "three"])
def test_every_order_gives_the_same_budgets_and_the_same_seeded_releases(names, tmp_path):
    orders = list(itertools.permutations(names))
    first = _run(names, list(names), list(orders[0]), tmp_path)
    total = sum(WEIGHTED[n][0] or 1.0 for n in names)
    for n in names:
        share = (WEIGHTED[n][0] or 1.0) / total
        assert first[n][0].epsilon == pytest.approx(1.2 * share)
    for apply_order in orders[1:]:
        assert _run(names, list(names), list(apply_order), tmp_path) == first
    # Construction order does not matter either.
    assert _run(names, list(reversed(names)), list(names), tmp_path) == first


def test_explicit_budgets_are_reserved_before_the_weights_share_the_rest():
    acc = PrivacyAccountant(PrivacyBudget.approx(1.0, 1e-6), name="shared")
    weighted = DPCount(accountant=acc, budget_weight=3, label="weighted")
    default = DPCount(accountant=acc, label="default")
    explicit = DPCount(PrivacyBudget.pure(0.2), accountant=acc, label="explicit")
    p = beam.Pipeline(runner=RUNNER)
    data = p | beam.Create(ELEMENTS)
    # The explicit transform is applied first; the pool was frozen before its charge.
    for t in (explicit, default, weighted):
        _ = data | t
    assert weighted.aggregate.per_release_budget.epsilon == pytest.approx(0.8 * 3 / 4)
    assert default.aggregate.per_release_budget.epsilon == pytest.approx(0.8 / 4)
    assert weighted.aggregate.per_release_budget.delta == pytest.approx(1e-6 * 3 / 4)
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-9)
    # The report states the pool and every share.
    report = weighted.explain()
    assert "shared by weight: pool eps=0.8, delta=1e-06" in report
    assert "'explicit': explicit budget eps=0.2 (pure DP)" in report
    assert "'weighted': weight 3 of 4: (eps=0.6, delta=7.5e-07)-DP" in report
    assert "'default': weight 1 of 4: (eps=0.2, delta=2.5e-07)-DP" in report
    shares = {s.name: s for s in acc.shares}
    assert shares["weighted"].weight == 3.0 and shares["explicit"].weight is None
    assert acc.to_dict()["shares"][0]["weight"] == 3.0
    # display_data says what the transform's budget is: its weight in the pool.
    items = {i.key: i.value for i in DisplayData.create_from(weighted).items}
    assert items["budget"] == "weight 3 of accountant 'shared''s pool"


def test_a_weight_with_an_explicit_budget_or_without_an_accountant_is_refused():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    with pytest.raises(ValueError, match=r"budget_weight: give either budget= .* not both"):
        DPCount(PrivacyBudget.pure(0.5), accountant=acc, budget_weight=2)
    with pytest.raises(ValueError, match=r"budget_weight: .* pass accountant="):
        DPCount(budget_weight=2)
    with pytest.raises(ValueError, match=r"budget_weight must be > 0"):
        DPCount(accountant=acc, budget_weight=0)
    with pytest.raises(TypeError, match=r"budget_weight must be a real number"):
        DPCount(accountant=acc, budget_weight="2")
    # None of the refused transforms claimed a share of the accountant.
    assert acc.shares == ()


def test_a_transform_whose_construction_fails_claims_no_share():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    with pytest.raises(ValueError, match="selection_key"):
        DPCount(accountant=acc, selection_key=b"k" * 32)
    with pytest.raises(ValueError, match="privacy_unit: this transform protects elements"):
        DPFrequencies(32, 3, accountant=acc, privacy_unit=PrivacyUnit(id="user"))
    assert acc.shares == ()
    only = DPCount(accountant=acc, label="only")
    p = beam.Pipeline(runner=RUNNER)
    _ = p | beam.Create(ELEMENTS) | only
    assert only.aggregate.per_release_budget.epsilon == pytest.approx(1.0)


def test_a_weighted_transform_constructed_after_the_first_charge_is_refused():
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0), name="shared")
    first = DPCount(accountant=acc, label="first")
    p = beam.Pipeline(runner=RUNNER)
    data = p | beam.Create(ELEMENTS)
    _ = data | first
    with pytest.raises(ValueError, match=r"construct every transform .* explicit budget="):
        DPCount(accountant=acc, budget_weight=1, label="late")
    # An explicit budget is still accepted, and charged against what is left (nothing here).
    late = DPCount(PrivacyBudget.pure(0.1), accountant=acc, label="late")
    with pytest.raises(BudgetExceededError):
        _ = data | late


def test_every_transform_family_takes_a_weight():
    acc = PrivacyAccountant(PrivacyBudget.zcdp(0.5), name="shared")
    count = DPCount(accountant=acc, budget_weight=1, label="count")
    freq = DPFrequencies(32, 3, accountant=acc, budget_weight=2, label="freq")
    quant = DPQuantiles([0.5], 0, 15, accountant=acc, budget_weight=1, label="quant")
    agg = DPAggregate(
        beam.combiners.CountCombineFn(),
        CountLaplaceMechanism(),
        budget=None,
        budget_weight=1,
        accountant=PrivacyAccountant(PrivacyBudget.pure(1.0)),
        label="agg",
    )
    p = beam.Pipeline(runner=RUNNER)
    data = p | beam.Create(ELEMENTS)
    for t in (quant, freq, count, agg):
        _ = data | t
    assert count.aggregate.per_release_budget.rho == pytest.approx(0.5 / 4)
    assert freq.aggregate.per_release_budget.rho == pytest.approx(0.5 * 2 / 4)
    assert quant.aggregate.per_release_budget.rho == pytest.approx(0.5 / 4)
    assert agg.per_release_budget.epsilon == pytest.approx(1.0)
    assert acc.remaining.rho == pytest.approx(0.0, abs=1e-12)


def test_explicit_budgets_of_another_kind_reserve_what_they_can_spend():
    # Under a pure accountant an approximate-DP budget can only be spent by a pure mechanism,
    # at most its epsilon: that is reserved. A zCDP budget can never be charged there: it
    # reserves nothing and is refused when applied.
    acc = PrivacyAccountant(PrivacyBudget.pure(1.0))
    approx = DPCount(PrivacyBudget.approx(0.25, 1e-6), accountant=acc, label="approx")
    zcdp = DPCount(PrivacyBudget.zcdp(0.1), accountant=acc, label="zcdp")
    weighted = DPCount(accountant=acc, label="weighted")
    p = beam.Pipeline(runner=RUNNER)
    data = p | beam.Create(ELEMENTS)
    _ = data | weighted
    assert weighted.aggregate.per_release_budget.epsilon == pytest.approx(0.75)
    _ = data | approx
    assert acc.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="pure budget"):
        _ = data | zcdp


def test_privacy_unit_and_windowing_are_shown_in_display_data_and_explain():
    unit = PrivacyUnit(id="user", max_contributions=2, max_windows=1)
    dp = DPCount(
        PrivacyBudget.pure(1.0),
        privacy_unit=unit,
        windowing=Windowing(release_range=(0, 10)),
        noise_source=NoiseSource.insecure_for_tests(3),
        label="users",
    )
    p = beam.Pipeline(runner=RUNNER)
    _ = (
        p
        | beam.Create([{"user": "u1", "t": 1}])
        | beam.Map(lambda r: beam.window.TimestampedValue(r, r["t"]))
        | beam.WindowInto(beam.window.FixedWindows(10))
        | dp
    )
    items = {i.key: i.value for i in DisplayData.create_from(dp).items}
    described = "user (id 'user', <= 2 contributions per window, <= 1 windows)"
    assert items["privacy_unit"] == described
    assert items["max_windows_per_unit"] == 1
    assert items["release_range"] == "(0.0, 10.0)"
    report = dp.explain()
    assert f"unit: {described}" in report
    assert "privacy unit: user; windows per unit: 1" in report


def test_a_refusal_proposes_windowing_for_a_transform_that_takes_it():
    from apache_beam.transforms import trigger as tr

    p = beam.Pipeline(runner=RUNNER)
    windowed = (
        p
        | beam.Create([beam.window.TimestampedValue(1, 1)])
        | beam.WindowInto(
            beam.window.FixedWindows(60),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )
    with pytest.raises(ValueError, match=r"Accepted instead: windowing=Windowing\(max_panes"):
        _ = windowed | DPCount(PrivacyBudget.pure(1.0), label="early")
