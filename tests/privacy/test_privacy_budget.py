"""PrivacyBudget validation, conversions and composition helpers."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from beam_dpsketch.privacy.budget import (
    PrivacyBudget,
    approx_to_zcdp,
    compose_parallel,
    compose_sequential,
    group_privacy,
    pure_to_zcdp,
    zcdp_to_epsilon,
)

# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, -1.0, math.inf, math.nan])
def test_pure_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyBudget.pure(eps)


@pytest.mark.parametrize("delta", [-1e-9, 1.0, 2.0, math.nan])
def test_approx_rejects_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        PrivacyBudget.approx(1.0, delta)


@pytest.mark.parametrize("rho", [0.0, -0.1, math.inf])
def test_zcdp_rejects_bad_rho(rho):
    with pytest.raises(ValueError, match="rho"):
        PrivacyBudget.zcdp(rho)


def test_zcdp_rejects_bad_delta_for_conversion():
    with pytest.raises(ValueError, match="delta_for_conversion"):
        PrivacyBudget.zcdp(0.5, delta_for_conversion=0.0)


def test_type_errors_name_parameter():
    with pytest.raises(TypeError, match="epsilon"):
        PrivacyBudget.pure("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="epsilon"):
        PrivacyBudget.pure(True)  # type: ignore[arg-type]


def test_numpy_scalars_accepted():
    assert PrivacyBudget.pure(np.float64(0.5)).epsilon == 0.5
    assert PrivacyBudget.approx(np.float32(1.0), 0).delta == 0.0


def test_approx_with_zero_delta_is_pure():
    b = PrivacyBudget.approx(1.0, 0.0)
    assert b.is_pure
    assert b.to_zcdp().rho == 0.5


# ---------------------------------------------------------------------------------------------
# Conversions: reference tables and independent computations
# ---------------------------------------------------------------------------------------------

# [ZQR+22, Section 2.1], Lemma 2.9 worked values (4 decimals)
LEMMA_29 = [
    (0.1, 1e-5, 2.2460),
    (0.1, 1e-6, 2.4508),
    (1.0, 1e-5, 7.7861),
    (1.0, 1e-6, 8.4338),
    (10.0, 1e-5, 31.4597),
    (10.0, 1e-6, 33.5079),
]


@pytest.mark.parametrize("rho,delta,expected", LEMMA_29)
def test_zcdp_to_epsilon_standard_matches_spec_table(rho, delta, expected):
    assert zcdp_to_epsilon(rho, delta) == pytest.approx(expected, abs=5e-5)
    assert zcdp_to_epsilon(rho, delta) == pytest.approx(
        rho + 2 * math.sqrt(rho * math.log(1 / delta)), rel=1e-15
    )


# [WWC24, Theorem 3.2] reference values (relative tolerance 1e-12)
DPSW_EQ1 = [
    (1.0, 1e-6, 0.01746890476912338),
    (0.5, 1e-6, 0.004443844159097062),
    (2.0, 1e-5, 0.08004537534668205),
    (1.0, 1e-10, 0.010627808461541018),
    (0.1, 1e-10, 0.00010833849386085304),
    (0.1, (1e7) ** -1.5, 0.00010319015382409328),
    (1.0, (1e7) ** -1.5, 0.010131872189633667),
    (2.0, (1e7) ** -1.5, 0.039734241631730415),
]


@pytest.mark.parametrize("eps,delta,rho", DPSW_EQ1)
def test_approx_to_zcdp_matches_dpsw_table(eps, delta, rho):
    assert approx_to_zcdp(eps, delta) == pytest.approx(rho, rel=1e-12)
    # and it is the exact inverse of the standard conversion
    assert zcdp_to_epsilon(approx_to_zcdp(eps, delta), delta) == pytest.approx(eps, rel=1e-12)


def test_approx_to_zcdp_linear_sketches_inverse_examples():
    # [ZQR+22, Section 2.1]: rho(1, 1e-5) = 0.020820; rho(1, 1e-6) = 0.017469
    assert approx_to_zcdp(1.0, 1e-5) == pytest.approx(0.020820, abs=5e-7)
    assert approx_to_zcdp(1.0, 1e-6) == pytest.approx(0.017469, abs=5e-7)


def test_pure_to_zcdp():
    assert pure_to_zcdp(1.0) == 0.5
    assert pure_to_zcdp(0.3) == pytest.approx(0.045, rel=1e-15)
    assert PrivacyBudget.pure(2.0).to_zcdp() == PrivacyBudget.zcdp(2.0)


def _cks_delta(rho: float, eps: float) -> float:
    """Independent CKS (2020) Corollary 13: min over alpha of
    exp((alpha-1)(alpha*rho - eps)) / (alpha-1) * (1 - 1/alpha)^alpha."""

    def log_delta(log_am1: float) -> float:
        a = 1.0 + math.exp(log_am1)
        return (a - 1) * (a * rho - eps) - math.log(a - 1) + a * math.log1p(-1 / a)

    res = minimize_scalar(log_delta, bounds=(-20, 20), method="bounded", options={"xatol": 1e-12})
    grid = min(log_delta(x) for x in np.linspace(-20, 20, 4001))
    return math.exp(min(res.fun, grid))


@pytest.mark.parametrize("rho", [1e-4, 0.01, 0.1, 1.0, 10.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_cks_conversion_against_independent_delta(rho, delta):
    eps = zcdp_to_epsilon(rho, delta, method="cks")
    # the returned eps achieves the target delta ...
    assert _cks_delta(rho, eps) <= delta * (1 + 1e-7)
    # ... and is close to the smallest such eps
    assert _cks_delta(rho, eps * (1 - 1e-4)) > delta
    # and it is never worse than the standard conversion
    assert eps <= zcdp_to_epsilon(rho, delta) + 1e-12


def test_cks_sits_between_gaussian_profile_and_standard():
    # [ZQR+22, Section 2.1] tight Gaussian values are the lower end for a Gaussian mechanism
    assert 1.7601 < zcdp_to_epsilon(0.1, 1e-5, "cks") < 2.2460
    assert 7.2861 < zcdp_to_epsilon(1.0, 1e-6, "cks") < 8.4338


def test_zcdp_to_epsilon_validates():
    with pytest.raises(ValueError, match="delta"):
        zcdp_to_epsilon(0.1, 0.0)
    with pytest.raises(ValueError, match="method"):
        zcdp_to_epsilon(0.1, 1e-6, method="exact")  # type: ignore[arg-type]


def test_to_approx():
    b = PrivacyBudget.zcdp(1.0, delta_for_conversion=1e-5)
    assert b.to_approx().epsilon == pytest.approx(7.7861, abs=5e-5)
    assert b.to_approx(1e-6).epsilon == pytest.approx(8.4338, abs=5e-5)
    with pytest.raises(ValueError, match="delta"):
        PrivacyBudget.zcdp(1.0).to_approx()
    assert PrivacyBudget.pure(1.0).to_approx() == PrivacyBudget.approx(1.0, 0.0)
    with pytest.raises(ValueError, match="cannot be expressed as zCDP"):
        PrivacyBudget.approx(1.0, 1e-6).to_zcdp()


# ---------------------------------------------------------------------------------------------
# Arithmetic and composition
# ---------------------------------------------------------------------------------------------


def test_times_fraction_divide():
    b = PrivacyBudget.approx(1.0, 1e-6)
    assert b.times(3) == PrivacyBudget.approx(3.0, 3e-6)
    assert b.fraction(0.25) == PrivacyBudget.approx(0.25, 2.5e-7)
    assert PrivacyBudget.zcdp(0.5).times(4).rho == 2.0
    with pytest.raises(ValueError, match="fraction"):
        b.fraction(1.5)
    with pytest.raises(ValueError, match="k"):
        b.times(0)
    with pytest.raises(ValueError, match="vacuous"):
        PrivacyBudget.approx(1.0, 0.4).times(3)


@pytest.mark.parametrize("total", [0.7, 1.0, 0.1, 1e-6, 3.3])
@pytest.mark.parametrize("k", [3, 7, 9, 10, 1000])
def test_divide_never_exceeds_total_exactly(total, k):
    share = PrivacyBudget.pure(total).divide(k).epsilon
    assert Fraction(share) * k <= Fraction(total)
    assert share == pytest.approx(total / k, rel=1e-12)


def test_compose_sequential():
    assert compose_sequential([PrivacyBudget.pure(0.1)] * 3).epsilon == pytest.approx(0.3)
    mixed = compose_sequential([PrivacyBudget.pure(0.5), PrivacyBudget.approx(0.25, 1e-7)])
    assert mixed == PrivacyBudget.approx(0.75, 1e-7)
    z = compose_sequential([PrivacyBudget.zcdp(0.1), PrivacyBudget.pure(1.0)])
    assert z.kind == "zcdp" and z.rho == pytest.approx(0.6)
    with pytest.raises(ValueError, match="delta split"):
        compose_sequential([PrivacyBudget.zcdp(0.1), PrivacyBudget.approx(1.0, 1e-6)])


def test_compose_parallel():
    p = compose_parallel([PrivacyBudget.approx(0.5, 1e-7), PrivacyBudget.approx(0.3, 2e-7)])
    assert p == PrivacyBudget.approx(0.5, 2e-7)
    assert compose_parallel([PrivacyBudget.zcdp(0.1), PrivacyBudget.zcdp(0.2)]).rho == 0.2


def test_group_privacy():
    assert group_privacy(PrivacyBudget.pure(0.1), 10).epsilon == pytest.approx(1.0)
    # [LT23, Section 8, Lemmas 1-2 and Corollary 3] Lemma 1: (m eps0, m e^((m-1) eps0) delta0)
    g = group_privacy(PrivacyBudget.approx(0.1, 3.6787944117144233e-08), 10)
    assert g.epsilon == pytest.approx(1.0)
    assert g.delta == pytest.approx(10 * math.exp(0.9) * 3.6787944117144233e-08)
    assert g.delta <= 1e-6  # the user-level PMG example of [LT23, Section 8] stays within delta
    assert group_privacy(PrivacyBudget.zcdp(0.01), 3).rho == pytest.approx(0.09)


def test_str_and_to_dict():
    assert str(PrivacyBudget.approx(1.0, 1e-6)) == "(eps=1, delta=1e-06)-DP"
    assert "zCDP" in str(PrivacyBudget.zcdp(0.5, 1e-6))
    assert PrivacyBudget.zcdp(0.5).to_dict() == {
        "kind": "zcdp",
        "rho": 0.5,
        "delta_for_conversion": None,
    }
