"""The default calibration of the Gaussian binary mechanism: any epsilon > 0, exact, never noisier.

The default must build at every ``epsilon > 0`` (1, 2 and 8 included, where the paper's classical
Gaussian refuses), its sigma must meet ``(epsilon, delta)`` by the exact privacy profile of the
Gaussian mechanism (Balle and Wang 2018, Theorem 8), evaluated here independently with scipy, and
it must be at least as tight as ``calibration="paper"`` wherever that one is valid (eps < 1).
A sigma 2 % too small fails the profile check, so the check is not vacuous.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual import (
    GaussianBinaryMechanism,
    HierarchicalLazySketch,
    LazySketch,
    PunctualSketch,
)
from beam_dpsketch.sketches.continual.binary_mechanism import (
    DEFAULT_CALIBRATION,
    gaussbm_height,
    gaussbm_sigma,
)
from beam_dpsketch.sketches.continual.sketch import new_continual_sketch

SRC = NoiseSource.insecure_for_tests(5)
EPSILONS = (0.05, 0.3, 0.9, 0.999, 1.0, 2.0, 8.0, 20.0)
DELTAS = (1e-3, 1e-6, 1e-10)


def exact_delta(l2: float, sigma: float, eps: float) -> float:
    """``delta(eps)`` of ``N(0, sigma^2)`` noise at L2 sensitivity ``l2`` (Balle-Wang, Thm 8).

    ``Phi(l2/(2 sigma) - eps sigma/l2) - e^eps Phi(-l2/(2 sigma) - eps sigma/l2)``, the second
    term in logs so that ``e^eps`` does not overflow at large ``eps``.
    """
    a = l2 / (2.0 * sigma) - eps * sigma / l2
    b = -l2 / (2.0 * sigma) - eps * sigma / l2
    return float(stats.norm.cdf(a) - math.exp(eps + stats.norm.logcdf(b)))


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize(("horizon", "m", "c"), [(1, 1, 1), (20, 6, 1), (2**20, 12, 3)])
def test_default_sigma_meets_the_exact_gaussian_profile(eps, delta, horizon, m, c):
    sigma = gaussbm_sigma(horizon, m, eps, delta, max_contributions=c)
    l2 = c * math.sqrt(m * gaussbm_height(horizon))
    assert exact_delta(l2, sigma, eps) <= delta
    # Tight: 2 % less noise breaks the guarantee, so a broken (too small) sigma is caught.
    assert exact_delta(l2, 0.98 * sigma, eps) > delta


@pytest.mark.parametrize("eps", [e for e in EPSILONS if e < 1])
@pytest.mark.parametrize("delta", DELTAS)
def test_default_is_never_noisier_than_the_paper(eps, delta):
    for horizon, m in ((1, 1), (400, 6), (2**20, 12)):
        default = gaussbm_sigma(horizon, m, eps, delta)
        paper = gaussbm_sigma(horizon, m, eps, delta, calibration="paper")
        assert default <= paper


def test_default_is_the_analytic_gaussian():
    assert DEFAULT_CALIBRATION == "analytic"
    assert gaussbm_sigma(400, 6, 2.0, 1e-6) == gaussbm_sigma(
        400, 6, 2.0, 1e-6, calibration="analytic"
    )


@pytest.mark.parametrize("eps", [1.0, 2.0, 8.0])
def test_every_core_object_builds_at_large_epsilon_by_default(eps):
    budget = PrivacyBudget.approx(eps, 1e-6)
    gbm = GaussianBinaryMechanism(5, 64, budget, 2, noise_source=SRC, release_prefix="gbm")
    assert gbm.calibration == "analytic"
    assert exact_delta(math.sqrt(2 * gbm.height), gbm.sigma, eps) <= 1e-6
    gbm.update(np.arange(5))
    assert np.isfinite(gbm.values()).all()
    for cls in (LazySketch, PunctualSketch):
        for kind in ("cms", "cs"):
            s = cls(16, 3, 500, budget, release_prefix="core", kind=kind, noise_source=SRC)
            assert s.calibration == "analytic"
            assert exact_delta(math.sqrt(s.m * s.tree_height), s.sigma, eps) <= 1e-6
            s.update_batch(np.arange(100) % 7)
            assert np.isfinite(s.estimate([0, 1, 99])).all()
    sketch = new_continual_sketch(16, 3, 500, budget, release_prefix="new", noise_source=SRC)
    assert sketch.calibration == "analytic"
    hier = HierarchicalLazySketch(8, 4, 16, 3, 500, budget, release_prefix="h", noise_source=SRC)
    assert all(level.calibration == "analytic" for level in hier.levels)


def test_paper_stays_available_and_refuses_epsilon_one():
    budget = PrivacyBudget.approx(0.5, 1e-6)
    s = LazySketch(16, 3, 500, budget, release_prefix="p", noise_source=SRC, calibration="paper")
    assert s.calibration == "paper"
    with pytest.raises(ValueError, match="epsilon must be < 1 with calibration='paper'"):
        LazySketch(
            16,
            3,
            500,
            PrivacyBudget.approx(1.0, 1e-6),
            release_prefix="p",
            noise_source=SRC,
            calibration="paper",
        )
