"""Privacy smoke test of one released cell on neighbouring inputs (docs/algorithms.md#lin-oracles).

``X`` holds a key 3 times and its add/remove neighbour ``X'`` 2 times; both are released many
times (fresh release ids) as a 1 x 1 Count-Min sketch, and the frequencies of the threshold
event ``S = {cell - offset >= 3}`` (and of its complement, for the other direction) are
compared with the claimed guarantee: ``P_X(S) <= e^eps P_X'(S) + delta``.

The check rejects only when the Clopper-Pearson lower bound of ``P_X(S)`` exceeds
``e^eps`` times the upper bound of ``P_X'(S)`` plus ``delta``; with each bound at level
``2.5e-7`` a correct mechanism is rejected with probability ``<= 1e-6`` per test. The same check
**must** reject a mutation that releases with half the noise scale while claiming the same
guarantee, which shows the test has power (the threshold event is the worst case for these
mechanisms: its probability ratio is exactly ``e^eps`` for the discrete Laplace).

Guarantees checked: pure ``eps`` (discrete Laplace, scale ``1/eps`` for one row); for zCDP
releases the exact privacy profile of the Gaussian mechanism with ``mu = Delta2/sigma =
sqrt(2 rho)`` ([ZQR+22, Section 2.1] "tight conversion"), which the discrete Gaussian meets on this event
(the exact discrete value is computed below) and which implies nothing weaker than the
Lemma 2.9 conversion.
"""

from __future__ import annotations

import math

import numpy as np
from privacy_audit import cp_lower, cp_upper

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import gaussian_delta
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch

SRC = NoiseSource.insecure_for_tests(4242)
TRIALS = 1500
ALPHA = 2.5e-7


def violation_detected(k1: int, k2: int, n: int, eps: float, delta: float) -> bool:
    """Whether the counts prove ``P1 > e^eps P2 + delta`` at confidence ``1 - 2 ALPHA``."""
    return cp_lower(k1, n, ALPHA) > math.exp(eps) * cp_upper(k2, n, ALPHA) + delta


def event_counts(budget: PrivacyBudget, tag: str) -> tuple[int, int, int, int]:
    """``(#S under X, #S under X', #S^c under X', #S^c under X)`` over TRIALS releases each."""
    x = CountMinSketch(1, 1, 0).update([7, 7, 7])
    xp = CountMinSketch(1, 1, 0).update([7, 7])
    values = []
    for j, exact in enumerate((x, xp)):
        cells = np.empty(TRIALS, dtype=np.int64)
        for i in range(TRIALS):
            rel = PrivateCountMinSketch.release(exact, budget, SRC.stream((tag, j, i)))
            cells[i] = rel.table[0, 0] - rel.offset
        values.append(cells)
    in_x, in_xp = int((values[0] >= 3).sum()), int((values[1] >= 3).sum())
    return in_x, in_xp, TRIALS - in_xp, TRIALS - in_x


def check(counts: tuple[int, int, int, int], eps: float, delta: float) -> bool:
    s_x, s_xp, c_xp, c_x = counts
    return violation_detected(s_x, s_xp, TRIALS, eps, delta) or violation_detected(
        c_xp, c_x, TRIALS, eps, delta
    )


def test_pure_release_of_one_cell():
    eps = 1.0
    cal = PrivateCountMinSketch.calibrate(1, 1, PrivacyBudget.pure(eps))
    assert cal.scale == 1.0 and cal.sensitivity == 1
    assert not check(event_counts(PrivacyBudget.pure(eps), "pure"), eps, 0.0)
    # Mutation: half the noise scale (budget 2 eps) while claiming eps must be caught.
    assert check(event_counts(PrivacyBudget.pure(2 * eps), "pure-half"), eps, 0.0)


def _discrete_gaussian_delta(sigma: float, eps: float) -> float:
    z = np.arange(-60, 61)
    w = np.exp(-(z * z) / (2 * sigma * sigma))
    p = w / w.sum()
    return float(p[z >= 0].sum() - math.exp(eps) * p[z >= 1].sum())


def test_zcdp_release_of_one_cell():
    rho, eps = 0.5, 0.5
    cal = PrivateCountMinSketch.calibrate(1, 1, PrivacyBudget.zcdp(rho))
    sigma = cal.scale
    assert math.isclose(sigma, 1 / math.sqrt(2 * rho))
    delta = gaussian_delta(1.0, sigma, eps)  # the Gaussian mechanism's exact profile
    assert _discrete_gaussian_delta(sigma, eps) <= delta  # the discrete version meets it here
    assert cal.epsilon_at(delta) >= eps  # the Lemma 2.9 conversion is weaker
    assert not check(event_counts(PrivacyBudget.zcdp(rho), "zcdp"), eps, delta)
    # Mutation: half the noise (4 rho) while claiming rho must be caught.
    assert check(event_counts(PrivacyBudget.zcdp(4 * rho), "zcdp-half"), eps, delta)
