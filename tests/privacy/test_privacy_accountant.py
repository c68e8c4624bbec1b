"""PrivacyAccountant: sequential, parallel and split totals, refusals and reports."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dpsketch.privacy import (
    BudgetExceededError,
    PrivacyAccountant,
    PrivacyBudget,
    zcdp_to_epsilon,
)

pure = PrivacyBudget.pure
approx = PrivacyBudget.approx
zcdp = PrivacyBudget.zcdp


def test_sequential_pure_sums_epsilon():
    acc = PrivacyAccountant(pure(1.0))
    acc.charge("a", "Laplace", pure(0.1), releases=3)
    acc.charge("b", "Laplace", pure(0.25))
    assert acc.committed.epsilon == pytest.approx(0.55)
    assert acc.remaining.epsilon == pytest.approx(0.45)
    assert [c.transform for c in acc.charges] == ["a", "b"]
    assert acc.charges[0].total_cost == pure(0.1).times(3)


def test_sequential_approx_basic_composition():
    acc = PrivacyAccountant(approx(1.0, 1e-6))
    acc.charge("hh", "PMG", approx(0.2, 1e-7), releases=2)
    acc.charge("q", "Laplace", pure(0.3))
    assert acc.committed.epsilon == pytest.approx(0.7)
    assert acc.committed.delta == pytest.approx(2e-7)
    assert acc.remaining.delta == pytest.approx(8e-7)


def test_zcdp_budget_adds_rho_and_converts_pure():
    acc = PrivacyAccountant(zcdp(0.5))
    acc.charge("cms", "Gaussian", zcdp(0.1), releases=2)
    acc.charge("lap", "Laplace", pure(0.4))  # 0.4^2 / 2 = 0.08
    assert acc.committed.rho == pytest.approx(0.28)
    with pytest.raises(ValueError, match="zCDP budget"):
        acc.charge("pmg", "PMG", approx(0.1, 1e-9))


def test_pure_budget_refuses_other_kinds():
    acc = PrivacyAccountant(pure(1.0))
    with pytest.raises(ValueError, match="pure budget"):
        acc.charge("g", "Gaussian", zcdp(0.01))
    with pytest.raises(ValueError, match="pure budget"):
        acc.charge("p", "PMG", approx(0.1, 1e-9))
    assert acc.charges == ()


def test_approx_budget_converts_zcdp_part_once():
    acc = PrivacyAccountant(approx(2.0, 1e-6))
    acc.charge("pmg", "PMG", approx(0.5, 4e-7))
    acc.charge("cms", "Gaussian", zcdp(0.001), releases=5)
    acc.charge("cs", "Gaussian", zcdp(0.002))
    rho = 0.007
    expected = 0.5 + rho + 2 * math.sqrt(rho * math.log(1 / 6e-7))
    assert acc.committed.epsilon == pytest.approx(expected, rel=1e-12)
    assert acc.committed.delta == pytest.approx(1e-6)
    cks = PrivacyAccountant(approx(2.0, 1e-6), conversion="cks")
    cks.charge("cms", "Gaussian", zcdp(0.007))
    assert cks.committed.epsilon == pytest.approx(zcdp_to_epsilon(0.007, 1e-6, "cks"))
    assert cks.committed.epsilon < zcdp_to_epsilon(0.007, 1e-6)


def test_approx_budget_takes_better_route_for_many_pure_charges():
    acc = PrivacyAccountant(approx(1.0, 1e-6))
    acc.charge("windows", "Laplace", pure(0.01), releases=100)  # basic: 1.0
    rho = 100 * 0.01**2 / 2
    assert acc.committed.epsilon == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
    assert acc.committed.epsilon < 0.6


def test_zcdp_charge_needs_delta_left():
    acc = PrivacyAccountant(approx(10.0, 1e-6))
    acc.charge("pmg", "PMG", approx(0.5, 1e-6))
    with pytest.raises(BudgetExceededError, match="used it all"):
        acc.charge("cms", "Gaussian", zcdp(1e-6))


def test_over_budget_message_names_transform_and_numbers():
    acc = PrivacyAccountant(approx(1.0, 1e-6), name="clicks")
    acc.charge("hh", "PMG", approx(0.6, 5e-7))
    with pytest.raises(BudgetExceededError) as info:
        acc.charge("freq", "Laplace", pure(0.25), releases=2)
    err = info.value
    assert isinstance(err, ValueError)
    text = str(err)
    assert "'freq'" in text and "'clicks'" in text
    assert "eps=0.5 (pure DP)" in text  # requested total
    assert "eps=0.6, delta=5e-07" in text  # already committed
    assert "(eps=1, delta=1e-06)-DP" in text  # budget
    assert "eps=1.1" in text  # what the total would be
    assert err.transform == "freq" and err.budget == approx(1.0, 1e-6)
    assert len(acc.charges) == 1  # nothing recorded


def test_exact_shares_fit_without_slack():
    total = approx(0.7, 1e-6)
    acc = PrivacyAccountant(total)
    share = total.divide(7)
    for i in range(7):
        acc.charge(f"t{i}", "Laplace", share)
    with pytest.raises(BudgetExceededError):
        acc.charge("one-more", "Laplace", pure(1e-9))


def test_split_reserves_and_child_enforces():
    acc = PrivacyAccountant(approx(1.0, 1e-6))
    child = acc.split("quantiles", 0.4)
    assert child.budget == approx(0.4, 4e-7)
    assert acc.committed.epsilon == pytest.approx(0.4)
    child.charge("dcs", "Laplace", pure(0.1), releases=2)
    with pytest.raises(BudgetExceededError, match="'quantiles'"):
        child.charge("dcs2", "Laplace", pure(0.3))
    # the parent still counts the full reservation, but reports actual spending too
    assert acc.committed.epsilon == pytest.approx(0.4)
    assert acc.spent.epsilon == pytest.approx(0.2)
    acc.charge("hh", "PMG", approx(0.6, 6e-7))
    with pytest.raises(BudgetExceededError, match="reservation"):
        acc.split("more", 0.1)
    with pytest.raises(ValueError, match="already has"):
        acc.split("quantiles", pure(1e-3))


def test_split_with_explicit_zcdp_budget_under_approx_parent():
    acc = PrivacyAccountant(approx(1.0, 1e-6))
    child = acc.split("gauss", zcdp(0.01))
    child.charge("cms", "Gaussian", zcdp(0.005), releases=2)
    expected = 0.01 + 2 * math.sqrt(0.01 * math.log(1e6))
    assert acc.committed.epsilon == pytest.approx(expected)
    with pytest.raises(ValueError, match="pure budget"):
        PrivacyAccountant(pure(1.0)).split("g", zcdp(0.01))


def test_parallel_group_costs_the_maximum():
    acc = PrivacyAccountant(pure(1.0))
    group = acc.parallel("shards", pure(0.5))
    group.partition("s0").charge("pmg", "PMG", pure(0.1), releases=3)
    group.partition("s1").charge("pmg", "PMG", pure(0.2))
    group.partition("s1").charge("extra", "Laplace", pure(0.15))
    assert group.spent.epsilon == pytest.approx(0.35)
    assert acc.spent.epsilon == pytest.approx(0.35)
    assert acc.committed.epsilon == pytest.approx(0.5)
    with pytest.raises(BudgetExceededError, match="'shards\\[s0\\]'"):
        group.partition("s0").charge("big", "Laplace", pure(0.3))
    acc.charge("top", "Laplace", pure(0.5))
    assert acc.remaining.epsilon == pytest.approx(0.0)
    paths = [p for p, _ in acc.all_charges()]
    assert paths == [
        "pipeline/shards[s0]",
        "pipeline/shards[s1]",
        "pipeline/shards[s1]",
        "pipeline",
    ]


def test_parallel_group_approx_max_componentwise():
    acc = PrivacyAccountant(approx(1.0, 1e-6))
    g = acc.parallel("keys", 0.5)
    g.partition("a").charge("x", "PMG", approx(0.4, 1e-7))
    g.partition("b").charge("x", "PMG", approx(0.2, 3e-7))
    assert g.spent.epsilon == pytest.approx(0.4)
    assert g.spent.delta == pytest.approx(3e-7)


def test_explain_contains_expected_lines():
    acc = PrivacyAccountant(approx(1.0, 1e-6), name="demo")
    acc.charge(
        "heavy_hitters",
        "PMG (Laplace)",
        approx(0.1, 1e-7),
        releases=3,
        privacy_unit="user",
        noise_scale=10.0,
        threshold=31.25,
        windows=3,
        panes=1,
        spec="dp-misra-gries §4.1",
    )
    text = acc.explain()
    assert "Privacy accountant 'demo': budget (eps=1, delta=1e-06)-DP" in text
    assert "[1] transform 'heavy_hitters': mechanism 'PMG (Laplace)'" in text
    assert "noise scale: 10; threshold: 31.25" in text
    assert "privacy unit: user; windows per unit: 3; panes per window: 1" in text
    assert (
        "cost per release: (eps=0.1, delta=1e-07)-DP; releases: 3; "
        "total: (eps=0.3, delta=3e-07)-DP" in text
    )
    assert "spec: dp-misra-gries §4.1" in text
    assert "remaining budget after this charge: eps=0.7, delta=7e-07" in text
    assert "remaining budget: eps=0.7, delta=7e-07" in text


def test_to_dict_is_json():
    acc = PrivacyAccountant(zcdp(1.0, delta_for_conversion=1e-6))
    acc.charge("a", "Gaussian", zcdp(0.1), sensitivity=math.sqrt(6), obj=object())
    acc.split("b", 0.5).charge("c", "Laplace", pure(0.2))
    acc.parallel("p", 0.1).partition("k").charge("d", "Gaussian", zcdp(0.05))
    data = json.loads(json.dumps(acc.to_dict()))
    assert data["budget"] == {"kind": "zcdp", "rho": 1.0, "delta_for_conversion": 1e-6}
    assert data["committed"]["rho"] == pytest.approx(0.7)
    assert data["entries"][0]["details"]["sensitivity"] == pytest.approx(math.sqrt(6))
    assert [e["type"] for e in data["entries"]] == ["charge", "split", "parallel"]
    assert data["spent"]["rho"] == pytest.approx(0.1 + 0.02 + 0.05)


def test_charge_validation_and_alias():
    acc = PrivacyAccountant(pure(1.0))
    with pytest.raises(ValueError, match="name"):
        acc.charge("", "Laplace", pure(0.1))
    with pytest.raises(ValueError, match="releases"):
        acc.charge("a", "Laplace", pure(0.1), releases=0)
    with pytest.raises(TypeError, match="per_release_cost"):
        acc.charge("a", "Laplace", 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="noise_scale"):
        acc.charge("a", "Laplace", pure(0.1), noise_scale=math.nan)


@given(costs=st.lists(st.floats(0.001, 0.4), min_size=1, max_size=12))
def test_pure_accountant_property(costs):
    acc = PrivacyAccountant(pure(1.0))
    accepted: list[float] = []
    for i, c in enumerate(costs):
        if math.fsum([*accepted, c]) <= 1.0:
            acc.charge(f"t{i}", "Laplace", pure(c))
            accepted.append(c)
        elif math.fsum([*accepted, c]) > 1.0 + 1e-9:
            with pytest.raises(BudgetExceededError):
                acc.charge(f"t{i}", "Laplace", pure(c))
    assert acc.committed.epsilon == pytest.approx(math.fsum(accepted), rel=1e-12)
    assert len(acc.charges) == len(accepted)
