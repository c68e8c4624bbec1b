"""``gshm_delta`` skips ranges of ``j`` that cannot hold the maximum, and returns the full scan.

[LT23, Section 8, Theorem 5] defines ``delta_GSHM`` as a maximum over ``j = 0..l-1``; the
calibration evaluates it about a thousand times at ``l = k`` (up to ``2^17``). These tests pin
the value to a term-by-term scan (bit for bit, over the parameters a calibration visits and
beyond) and the cost to a small number of term evaluations.
"""

from __future__ import annotations

import math

import pytest

from beam_dpsketch.privacy.calibration import analytic_gaussian_sigma, log_ndtr
from beam_dpsketch.sketches.misra_gries import calibration
from beam_dpsketch.sketches.misra_gries.calibration import gshm_delta, gshm_threshold


def full_scan(l: int, sigma: float, tau: float, eps: float) -> float:  # noqa: E741
    """The maximum over every ``j``, term by term, with the same floating-point expressions."""
    lp = log_ndtr(float(tau) / sigma)
    worst = -math.expm1(l * lp)
    for j in range(l):
        pj = math.exp(j * lp)
        mu = math.sqrt(l - j) / sigma
        add = -math.expm1(j * lp) + pj * calibration.gaussian_hockey_stick(eps - j * lp, mu)
        remove = calibration.gaussian_hockey_stick(eps + j * lp, mu)
        worst = max(worst, add, remove)
    return min(1.0, worst)


def _cases() -> list[tuple[int, float, float, float]]:
    """Sigmas from the Gaussian part's minimum to 4x, taus from the bisection's whole range."""
    cases = []
    for l in (1, 2, 3, 17, 100, 1000, 4096):  # noqa: E741
        for eps in (0.05, 0.5, 1.0, 3.0):
            for delta in (1e-6, 1e-9):
                s_min = analytic_gaussian_sigma(math.sqrt(l), eps, delta)
                for ratio in (1.0001, 1.1, 2.0, 4.0):
                    s = s_min * ratio
                    t = gshm_threshold(l, s, eps, delta)
                    for tau in (-0.5 * s, 0.0, 0.5 * s, 3.0 * s, t * (1 - 1e-6), t, 2.0 * t):
                        cases.append((l, s, tau, eps))
    return cases


def test_gshm_delta_equals_the_full_scan_bit_for_bit():
    cases = _cases()
    assert len(cases) > 1000
    different = [c for c in cases if gshm_delta(*c) != full_scan(*c)]
    assert different == []


@pytest.mark.parametrize("eps", [0.1, 1.0])
def test_gshm_delta_at_large_l_matches_the_scan_near_the_calibrated_threshold(eps):
    l = 1 << 14  # noqa: E741
    s = analytic_gaussian_sigma(math.sqrt(l), eps, 1e-6) * 1.3
    t = gshm_threshold(l, s, eps, 1e-6)
    for tau in (t * (1 - 1e-9), t, t * (1 + 1e-9), 0.9 * t, 1.5 * t):
        assert gshm_delta(l, s, tau, eps) == full_scan(l, s, tau, eps)


def test_a_maximum_inside_the_range_is_found(monkeypatch):
    # Over the parameters a calibration visits, the maximum sits at j = 0, l - 1 or l, which
    # any pruning keeps. The skipping is only valid because Psi decreases in its first
    # argument and increases in its second: a Psi with just these properties whose maximum
    # lies deep inside the range checks that no range holding it is skipped.
    l, s = 4096, 1.0  # noqa: E741
    mu0 = math.sqrt(l - 2000) / s

    def psi(e: float, mu: float) -> float:
        step = 0.5 / (1.0 + math.exp(min(-50.0 * (mu - mu0), 700.0)))  # increases in mu
        return step * math.exp(-1e-3 * max(e, 0.0))  # does not increase in e

    monkeypatch.setattr(calibration, "gaussian_hockey_stick", psi)
    tau = 3.72 * s  # ln p about -1e-4: p^j barely moves over the range
    lp = log_ndtr(tau / s)
    terms = [-math.expm1(j * lp) + math.exp(j * lp) * psi(1.0 - j * lp, math.sqrt(l - j) / s)
             for j in range(l)]  # fmt: skip
    inside = max(range(l), key=terms.__getitem__)
    assert 100 < inside < l - 100 and terms[inside] > max(terms[0], terms[-1], -math.expm1(l * lp))
    assert gshm_delta(l, s, tau, 1.0) == full_scan(l, s, tau, 1.0) == terms[inside]


def test_gshm_delta_evaluates_few_terms_at_the_default_k(monkeypatch):
    l = 1 << 17  # noqa: E741
    eps = 1.0
    s = analytic_gaussian_sigma(math.sqrt(l), eps, 1e-6) * 1.2
    calls = []
    real = calibration.gaussian_hockey_stick

    def counted(e: float, mu: float) -> float:
        calls.append(1)
        return real(e, mu)

    monkeypatch.setattr(calibration, "gaussian_hockey_stick", counted)
    for tau in (0.0, 2.0 * s, 5.0 * s, 7.0 * s, 20.0 * s):
        calls.clear()
        value = gshm_delta(l, s, tau, eps)
        assert 0.0 <= value <= 1.0
        # A scan costs 2 l evaluations; the bound needs a few per level of a binary tree.
        assert len(calls) < 2 * l / 100
