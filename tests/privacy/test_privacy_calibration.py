"""Calibration functions against independent computations and reference values."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import special, stats

from beam_dpsketch.privacy import _normal
from beam_dpsketch.privacy.calibration import (
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    discrete_laplace_parameter,
    discrete_laplace_scale,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_zcdp_rho,
    geometric_tail_threshold,
    laplace_scale,
    laplace_tail_threshold,
    rational_epsilon_floor,
    subsampled_epsilon,
    zcdp_gaussian_sigma,
)
from beam_dpsketch.sketches.misra_gries.calibration import (
    approx_pp_threshold,
    gshm_closed_form_parameters,
    gshm_delta,
    gshm_threshold,
    merged_laplace_threshold,
    pmg_geometric_threshold,
    pmg_geometric_threshold_paper,
    pmg_standard_threshold,
    pmg_threshold,
    user_level_pmg_parameters,
)


def bw_delta(d2: float, sigma: float, eps: float) -> float:
    """Balle and Wang (2018) Theorem 8, computed independently with scipy (log-space 2nd term)."""
    a = d2 / (2 * sigma) - eps * sigma / d2
    b = -d2 / (2 * sigma) - eps * sigma / d2
    return float(special.ndtr(a) - np.exp(eps + special.log_ndtr(b)))


# ---------------------------------------------------------------------------------------------
# Normal CDF helpers
# ---------------------------------------------------------------------------------------------


def test_ndtr_and_log_ndtr_match_scipy():
    xs = np.concatenate([np.linspace(-200, 37, 4741), [-30.0, -29.999, -30.001, 0.0, 1e-12]])
    for x in xs:
        assert _normal.ndtr(x) == pytest.approx(special.ndtr(x), rel=1e-13, abs=1e-300)
        assert _normal.log_ndtr(x) == pytest.approx(special.log_ndtr(x), rel=1e-12, abs=1e-300)
    assert _normal.log_ndtr(-math.inf) == -math.inf
    with pytest.raises(ValueError):
        _normal.ndtr(math.nan)


# ---------------------------------------------------------------------------------------------
# Laplace and discrete Laplace
# ---------------------------------------------------------------------------------------------


def test_laplace_scale():
    assert laplace_scale(1, 1.0) == 1.0
    assert laplace_scale(2, 0.5) == 4.0  # PURE_PP: Lap(2/eps), [LT23, Section 6]
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(0, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_scale(1, -1.0)


def test_discrete_laplace_parameter():
    assert discrete_laplace_parameter(1, 1.0) == pytest.approx(math.exp(-1.0), rel=1e-15)
    # docs/algorithms.md#int-oracles: a = exp(-eps/d)
    assert discrete_laplace_parameter(5, 1.0) == pytest.approx(math.exp(-0.2), rel=1e-15)
    # pmf ratio for a shift of one sensitivity is exactly e^eps
    a = discrete_laplace_parameter(3, 0.7)
    assert a**3 == pytest.approx(math.exp(-0.7), rel=1e-14)


def test_rational_epsilon_floor_and_discrete_scale():
    assert rational_epsilon_floor("0.01") == Fraction(1, 100)
    assert rational_epsilon_floor(0.5) == Fraction(1, 2)
    f = rational_epsilon_floor(0.1, max_denominator=1000)
    assert f <= Fraction(0.1) and f == Fraction(1, 10)
    g = rational_epsilon_floor(math.pi, max_denominator=1000)
    assert g == Fraction(3141, 1000) and g <= Fraction(math.pi)
    s = discrete_laplace_scale(2, "0.3")
    assert s == Fraction(20, 3)
    # rounding eps down rounds the scale up
    s2 = discrete_laplace_scale(1, math.pi, max_denominator=1000)
    assert s2 >= Fraction(1) / Fraction(math.pi)
    with pytest.raises(ValueError, match="rounds down to 0"):
        rational_epsilon_floor(1e-9, max_denominator=1000)
    with pytest.raises(TypeError, match="sensitivity"):
        discrete_laplace_scale(1.5, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        rational_epsilon_floor("-1")


# ---------------------------------------------------------------------------------------------
# Gaussian mechanisms
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d2,eps,delta", [(1.0, 0.5, 1e-5), (3.0, 0.1, 1e-9), (0.2, 0.99, 0.01)])
def test_classical_gaussian_formula(d2, eps, delta):
    expected = math.sqrt(2 * math.log(1.25 / delta)) * d2 / eps
    sigma = classical_gaussian_sigma(d2, eps, delta)
    assert sigma == pytest.approx(expected * (1 + 1e-9), rel=1e-14)
    assert sigma > expected  # Theorem A.1 needs the strict inequality
    # the classical calibration is always valid (and loose) by the exact criterion
    assert bw_delta(d2, sigma, eps) <= delta


# docs/algorithms.md#lazy-oracles G1: sigma = sqrt(2 h m ln(1.25/delta))/eps, h = bit_length(T_cap)
G1 = [
    (1, 1, 0.5, 1e-3, 7.5530),
    (4, 1, 0.5, 1e-3, 13.0821),
    (20, 1, 0.5, 1e-3, 16.8889),
    (19066, 6, 0.3, 1e-3, 119.4228),
    (19066, 12, 0.3, 1e-3, 168.8893),
    (2**20, 6, 0.3, 1e-3, 141.3029),
    (2**20, 12, 0.3, 1e-3, 199.8325),
]


@pytest.mark.parametrize("t_cap,m,eps,delta,sigma", G1)
def test_classical_gaussian_lazy_sketch_golden_values(t_cap, m, eps, delta, sigma):
    h = t_cap.bit_length()
    assert classical_gaussian_sigma(math.sqrt(h * m), eps, delta) == pytest.approx(sigma, rel=1e-4)


def test_classical_gaussian_refuses_eps_ge_1():
    with pytest.raises(ValueError, match="epsilon must be < 1"):
        classical_gaussian_sigma(1.0, 1.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        classical_gaussian_sigma(1.0, 0.5, 0.0)
    with pytest.raises(ValueError, match="l2_sensitivity"):
        classical_gaussian_sigma(-1.0, 0.5, 1e-6)


def test_lazy_sketch_cs_sensitivity_numbers():
    # [Hol25, Section 4.1]: true sensitivity sqrt(2) x calibrated one, exact Balle-Wang delta
    s = classical_gaussian_sigma(1.0, 0.3, 1e-3)
    assert gaussian_delta(math.sqrt(2), s, 0.3) == pytest.approx(1.5e-4, rel=0.05)
    s = classical_gaussian_sigma(1.0, 0.3, 1e-6)
    assert gaussian_delta(math.sqrt(2), s, 0.3) == pytest.approx(2.0e-6, rel=0.05)


def test_gaussian_delta_matches_independent_formula():
    for d2, sigma, eps in [(1, 1, 1), (1, 3, 0.5), (2.5, 0.7, 4.0), (1, 10, 0.01), (1, 0.5, 20)]:
        assert gaussian_delta(d2, sigma, eps) == pytest.approx(
            bw_delta(d2, sigma, eps), rel=1e-10, abs=1e-300
        )
    # [LT23, Section 8, Theorem 5 and Lemma 6]: Psi(1, 1) = 1.269367e-01
    assert gaussian_delta(1.0, 1.0, 1.0) == pytest.approx(1.269367e-01, rel=1e-6)


@pytest.mark.parametrize(
    "d2,eps,delta",
    [
        (1.0, 1.0, 1e-5),
        (1.0, 0.1, 1e-6),
        (2.0, 3.0, 1e-9),
        (0.5, 10.0, 1e-3),
        (1.0, 0.5, 0.1),
        (7.0, 1.0, 1e-12),
    ],
)
def test_analytic_gaussian_sigma_is_exact_boundary(d2, eps, delta):
    sigma = analytic_gaussian_sigma(d2, eps, delta)
    assert bw_delta(d2, sigma, eps) <= delta
    assert bw_delta(d2, sigma * (1 - 1e-6), eps) > delta
    if eps < 1:
        assert sigma < classical_gaussian_sigma(d2, eps, delta)  # analytic is tighter


def test_gaussian_epsilon_linear_sketches_table():
    # [ZQR+22, Section 2.1] "optional tight conversion", mu = sqrt(2 rho)
    table = [
        (0.1, 1e-5, 1.7601),
        (0.1, 1e-6, 1.9945),
        (1.0, 1e-5, 6.5730),
        (1.0, 1e-6, 7.2861),
        (10.0, 1e-5, 28.3735),
        (10.0, 1e-6, 30.5789),
    ]
    for rho, delta, eps in table:
        got = gaussian_epsilon(math.sqrt(2 * rho), 1.0, delta)
        assert got == pytest.approx(eps, abs=5e-5)
        assert bw_delta(math.sqrt(2 * rho), 1.0, got) <= delta
    assert gaussian_epsilon(1.0, 100.0, 0.5) == 0.0


def test_zcdp_gaussian_sigma():
    # Reference example: Delta2 = sqrt(6) (CM/CS add_remove, d=6), rho=1
    assert zcdp_gaussian_sigma(math.sqrt(6), 1.0) == pytest.approx(1.732051, abs=5e-7)
    assert zcdp_gaussian_sigma(2.0, 0.5) == pytest.approx(2.0)
    assert gaussian_zcdp_rho(2.0, zcdp_gaussian_sigma(2.0, 0.37)) == pytest.approx(0.37)
    # DPSW reference shape: sigma_F = sqrt(3/(0.9375 rho)) = 17.8 with rho = 0.0101319
    rho = 0.0101319 * 0.9375
    assert zcdp_gaussian_sigma(math.sqrt(6), rho) == pytest.approx(17.8, abs=0.05)
    with pytest.raises(ValueError, match="rho"):
        zcdp_gaussian_sigma(1.0, 0.0)


# ---------------------------------------------------------------------------------------------
# Thresholds (reference values for [LT23]'s mechanisms)
# ---------------------------------------------------------------------------------------------

A6 = [
    # eps, delta, k, PMG, std, tau_geo, t*, M-LAP, tau_geo_p, (k+2)/(2 delta) form
    (1.0, 1e-6, 100, 30.8282, 37.8613, 33, 16, 1773.75, 31.5880, 36.4947),
    (0.5, 1e-9, 1000, 88.2875, 111.5281, 91, 45, 53876.75, 89.1638, 108.7595),
    (0.1, 1e-6, 10, 299.2825, 325.2681, 301, 150, 1543.49, 300.2575, 313.1454),
]


@pytest.mark.parametrize("row", A6)
def test_misra_gries_threshold_table(row):
    eps, delta, k, pmg, std, tau_geo, t_star, mlap, geo_p, k2_form = row
    assert pmg_threshold(eps, delta) == pytest.approx(pmg, abs=5e-5)
    assert pmg_standard_threshold(eps, delta, k) == pytest.approx(std, abs=5e-5)
    assert pmg_geometric_threshold(eps, delta) == (tau_geo, t_star)
    assert merged_laplace_threshold(eps, delta, k) == pytest.approx(mlap, abs=5e-3)
    assert pmg_geometric_threshold_paper(eps, delta) == pytest.approx(geo_p, abs=5e-5)
    # generic union-bound forms reproduce the named ones
    assert 1 + 2 * laplace_tail_threshold(1 / eps, delta, 6) == pytest.approx(pmg, abs=5e-5)
    assert 1 + 2 * laplace_tail_threshold(1 / eps, delta, k + 2) == pytest.approx(k2_form, abs=5e-5)


def test_pmg_threshold_union_bound_is_tight():
    # six Laplace(1/eps) draws, each >= (tau-1)/2 with probability exp(-eps t)/2, sum to delta
    eps, delta = 0.7, 1e-7
    t = (pmg_threshold(eps, delta) - 1) / 2
    assert 6 * 0.5 * math.exp(-eps * t) == pytest.approx(delta, rel=1e-12)


def test_geometric_tail_threshold_definition():
    for eps, delta, draws in [(1.0, 1e-6, 6), (0.5, 1e-9, 6), (0.1, 1e-6, 22), (2.0, 0.3, 1)]:
        t = geometric_tail_threshold(eps, delta, draws)

        def tail(s: int, eps: float = eps) -> float:
            return math.exp(-eps * s) / (1 + math.exp(-eps))

        assert draws * tail(t) <= delta
        assert t == 0 or draws * tail(t - 1) > delta
    # standard-MG variant: 6 draws become 2(k+1)
    assert pmg_geometric_threshold(1.0, 1e-6, k=10)[1] == geometric_tail_threshold(1.0, 1e-6, 22)


def test_approx_pp_and_user_level():
    assert approx_pp_threshold(1.0, 1e-6, 100) == pytest.approx(
        1 + 2 * math.log(100 / 2e-6), rel=1e-14
    )
    eps0, delta0, tau = user_level_pmg_parameters(1.0, 1e-6, 10)
    assert eps0 == pytest.approx(0.1)
    assert delta0 == pytest.approx(3.67879e-8, rel=1e-5)
    assert tau == pytest.approx(365.3342, abs=5e-5)


def test_threshold_validation():
    with pytest.raises(ValueError, match="delta"):
        pmg_threshold(1.0, 0.0)
    with pytest.raises(ValueError, match="k"):
        pmg_standard_threshold(1.0, 1e-6, 0)
    with pytest.raises(ValueError, match="draws"):
        laplace_tail_threshold(1.0, 1e-6, 0)


# ---------------------------------------------------------------------------------------------
# GSHM ([LT23, Section 8, Theorem 5 and Lemma 6])
# ---------------------------------------------------------------------------------------------

GSHM_TABLE = [
    (1, 5.0, 20.0, 0.5, 5.1254e-04),
    (10, 20.0, 100.0, 1.0, 2.8665e-06),
    (100, 50.0, 250.0, 1.0, 2.8665e-05),
    (3, 2.0, 6.0, 2.0, 7.7683e-03),
]


def gshm_delta_independent(l, sigma, tau, eps):  # noqa: E741
    p = stats.norm.cdf(tau / sigma)
    terms = [1 - p**l]
    for j in range(l):
        mu = math.sqrt(l - j) / sigma
        terms.append(1 - p**j + p**j * bw_delta(1.0, 1.0 / mu, eps - j * math.log(p)))
        terms.append(bw_delta(1.0, 1.0 / mu, eps + j * math.log(p)))
    return max(terms)


@pytest.mark.parametrize("l,sigma,tau,eps,expected", GSHM_TABLE)
def test_gshm_delta_table(l, sigma, tau, eps, expected):  # noqa: E741
    assert gshm_delta(l, sigma, tau, eps) == pytest.approx(expected, rel=5e-4)
    assert gshm_delta(l, sigma, tau, eps) == pytest.approx(
        gshm_delta_independent(l, sigma, tau, eps), rel=1e-6
    )


def test_gshm_closed_form_and_threshold():
    sigma, tau = gshm_closed_form_parameters(100, 0.5, 1e-6)
    assert sigma == pytest.approx(108.5608, abs=5e-4)
    assert tau == pytest.approx(658.9322, abs=5e-4)
    assert gshm_delta(100, sigma, tau, 0.5) == pytest.approx(6.4071e-08, rel=1e-4)
    # GSHM ([LT23, Section 8, Theorem 5]) reference: l=100, eps=1, delta=1e-6, sigma ~ 42.5 gives tau ~ 238.5
    t = gshm_threshold(100, 42.5, 1.0, 1e-6)
    assert t == pytest.approx(238.5, abs=0.1)
    assert gshm_delta(100, 42.5, t, 1.0) <= 1e-6
    assert gshm_delta(100, 42.5, t * (1 - 1e-6), 1.0) > 1e-6
    with pytest.raises(ValueError, match="too small"):
        gshm_threshold(100, 1.0, 1.0, 1e-6)


def test_subsampled_epsilon():
    # docs/algorithms.md#int-e24: ln(1 + q (e^eps - 1))
    eps, d = subsampled_epsilon(1.0, 0.1, 1e-6)
    assert eps == pytest.approx(math.log(1 + 0.1 * (math.e - 1)), rel=1e-14)
    assert d == pytest.approx(1e-7)
    assert subsampled_epsilon(0.5, 1.0)[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="rate"):
        subsampled_epsilon(1.0, 1.5)


@given(
    eps=st.floats(0.01, 20.0),
    log_delta=st.floats(-12.0, math.log10(0.5)),
    d2=st.floats(0.1, 100.0),
)
def test_analytic_gaussian_property(eps, log_delta, d2):
    delta = 10.0**log_delta
    sigma = analytic_gaussian_sigma(d2, eps, delta)
    assert bw_delta(d2, sigma, eps) <= delta
    assert bw_delta(d2, sigma * (1 - 1e-6), eps) > delta
    # and the exact profile inverts it
    assert gaussian_epsilon(d2, sigma, delta) == pytest.approx(eps, rel=1e-6)
