"""The Gaussian sparse histogram mechanism (GSHM) and its exact calibration ([LT23, Section 8, Theorem 5]).

:func:`calibrate_gshm` chooses ``(sigma, tau)`` on the exact condition ``delta_GSHM <= delta``
(docs/algorithms.md#mg-e10) and :func:`gshm_release` applies the mechanism to positive counts;
the releases that use it are :func:`~.merged.merged_gshm`, :func:`~.merged.pamg_gshm`, the
exactness gate's Gaussian branch and the baselines.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from beam_dpsketch.checks import check_int, check_probability, check_real
from beam_dpsketch.noise import NoiseStream, gaussian
from beam_dpsketch.privacy.budget import check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import (
    analytic_gaussian_sigma,
)
from beam_dpsketch.sketches.misra_gries.calibration import gshm_delta, gshm_threshold
from beam_dpsketch.sketches.misra_gries.tails import (
    noisy_sums,
)

__all__ = ["GSHMParameters", "calibrate_gshm", "gshm_parameters", "gshm_release"]


_TARGET_MARGIN = 1e-9  # calibrate against delta * (1 - margin)
_SIGMA_SLACK = 1e-11  # the exact sampler may round sigma**2 up by < 2**-40 relative


@dataclass(frozen=True)
class GSHMParameters:
    """Parameters of the Gaussian sparse histogram mechanism ([LT23, Section 8, Theorem 5 and Lemma 6]).

    GSHM adds ``N(0, sigma^2)`` to every positive count and keeps values ``>= 1 + tau``
    (docs/algorithms.md#mg-e18: the API takes the paper's ``tau``; the absolute cut is :attr:`threshold`).
    ``delta_exact = delta_GSHM(l, sigma, tau, eps) <= delta`` is re-evaluated on the exact
    ``(sigma, tau)`` used (and on ``sigma * (1 + 1e-11)``, covering the sampler's rounding).
    """

    l: int  # noqa: E741
    epsilon: float
    delta: float
    sigma: float
    tau: float
    delta_exact: float
    beta: float | None = None

    @property
    def threshold(self) -> float:
        """The absolute cut ``1 + tau``."""
        return 1.0 + self.tau

    def error_bound(self, beta: float = 0.05) -> float:
        """Theorem 12 / docs/algorithms.md#mg-oracles oracle: w.p. ``>= 1 - beta`` the privacy error is below this.

        ``1 + tau + sigma * Phi^-1(1 - beta/(2l))``: for merged / PAMG sketches
        ``|f~(x) - f(x)| < N/(k+1) + error_bound(beta)`` for all ``x`` ([LT23, Theorem 12]).
        """
        b = check_probability(beta, "beta")
        return 1.0 + self.tau + self.sigma * -NormalDist().inv_cdf(b / (2 * self.l))


def _tau_for(l: int, sigma: float, eps: float, delta: float) -> float:  # noqa: E741
    """Smallest ``tau`` meeting ``delta`` at ``sigma`` and at ``sigma (1 + 1e-11)``."""
    target = delta * (1.0 - _TARGET_MARGIN)
    hi = sigma * (1.0 + _SIGMA_SLACK)
    tau = max(gshm_threshold(l, sigma, eps, target), gshm_threshold(l, hi, eps, target))
    while max(gshm_delta(l, sigma, tau, eps), gshm_delta(l, hi, tau, eps)) > target:
        tau *= 1.0 + 1e-9  # pragma: no cover - delta_GSHM decreases in tau
    return tau


def _finish(l: int, eps: float, delta: float, sigma: float, tau: float, beta) -> GSHMParameters:  # noqa: E741
    exact = max(gshm_delta(l, sigma, tau, eps), gshm_delta(l, sigma * (1 + _SIGMA_SLACK), tau, eps))
    if exact > delta:  # pragma: no cover - guarded by _tau_for
        raise RuntimeError(f"GSHM calibration failed: delta_GSHM={exact} > delta={delta}")
    return GSHMParameters(l, eps, delta, sigma, tau, exact, beta)


@functools.lru_cache(maxsize=512)
def _gshm_for_sigma(l: int, eps: float, delta: float, sigma: float) -> GSHMParameters:  # noqa: E741
    sigma_min = analytic_gaussian_sigma(math.sqrt(l), eps, delta * (1.0 - _TARGET_MARGIN))
    if sigma <= sigma_min:
        raise ValueError(
            f"sigma={sigma!r} is too small for (epsilon={eps!r}, delta={delta!r}) with l={l}: "
            f"the Gaussian part alone needs sigma > {sigma_min:.6g}"
        )
    return _finish(l, eps, delta, sigma, _tau_for(l, sigma, eps, delta), None)


@functools.lru_cache(maxsize=512)
def _calibrate(l: int, eps: float, delta: float, beta: float) -> GSHMParameters:  # noqa: E741
    target = delta * (1.0 - _TARGET_MARGIN)
    sigma_min = analytic_gaussian_sigma(math.sqrt(l), eps, target)
    z = -NormalDist().inv_cdf(beta / (2 * l))
    memo: dict[float, float] = {}

    def proxy(sigma: float) -> float:
        if sigma not in memo:
            try:
                memo[sigma] = 1.0 + gshm_threshold(l, sigma, eps, target) + sigma * z
            except ValueError:
                memo[sigma] = math.inf
        return memo[sigma]

    ratios = [1.0 + 1e-4 * (3.0 / 1e-4) ** (i / 12) for i in range(13)]  # 1+1e-4 .. 4, geometric
    grid = [sigma_min * r for r in ratios]
    scores = [proxy(s) for s in grid]
    i = min(range(len(grid)), key=scores.__getitem__)
    lo = grid[i - 1] if i > 0 else sigma_min * (1.0 + 1e-7)
    hi = grid[i + 1] if i + 1 < len(grid) else grid[i]
    # Golden-section search on log(sigma) inside the bracket around the best grid point.
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(lo), math.log(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(14):
        if proxy(math.exp(c)) <= proxy(math.exp(d)):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    sigma = min(memo, key=memo.__getitem__)
    return _finish(l, eps, delta, sigma, _tau_for(l, sigma, eps, delta), beta)


def calibrate_gshm(l: int, epsilon: float, delta: float, *, beta: float = 0.05) -> GSHMParameters:  # noqa: E741
    """Exact GSHM calibration for ``l`` differing counts ([LT23, Section 8, Theorem 5 and Lemma 6]).

    ``sigma_min`` solves ``Psi(eps, sqrt(l)/sigma) = delta``; over ``sigma`` from ``sigma_min``
    to ``4 sigma_min`` (13-point geometric grid, then golden-section refinement) the smallest
    ``tau`` with ``delta_GSHM(l, sigma, tau, eps) <= delta`` is found by bisection
    (:func:`beam_dpsketch.sketches.misra_gries.calibration.gshm_threshold`) and the ``sigma`` minimising the
    error proxy ``1 + tau + sigma Phi^-1(1 - beta/(2l))`` is kept. The exact condition is
    re-evaluated on the returned pair (docs/algorithms.md#mg-e10). Results are cached by
    ``(l, epsilon, delta, beta)``. A calibration evaluates ``delta_GSHM`` about 1,300 times,
    each in a few dozen terms rather than ``l``
    (:func:`~beam_dpsketch.sketches.misra_gries.calibration.gshm_delta` skips the ranges of
    ``j`` that cannot hold the maximum): about 0.1 s of CPU at ``l = 2^17``.

    The closed-form Lemma 6 parameters are deliberately not used (docs/algorithms.md#mg-e10: they need
    ``eps < 1`` and are always looser; see
    :func:`beam_dpsketch.sketches.misra_gries.calibration.gshm_closed_form_parameters`).

    Parameters
    ----------
    l
        Number of counts neighbours may differ in: ``k`` for merged and PAMG sketches (never
        ``m``, docs/algorithms.md#misra-gries), ``1`` / ``m`` only for exact histograms.
    epsilon, delta
        Target ``(epsilon, delta)``; ``0 < delta < 1``.
    beta
        Failure probability of the utility proxy, in ``(0, 1)``.
    """
    ll = check_int(l, "l")
    return _calibrate(
        ll,
        check_epsilon(epsilon),
        check_delta(delta, allow_zero=False),
        check_probability(beta, "beta"),
    )


def gshm_parameters(l: int, epsilon: float, delta: float, sigma: float) -> GSHMParameters:  # noqa: E741
    """GSHM parameters for a caller-chosen ``sigma``: the smallest valid ``tau`` ([LT23, Section 8, Theorem 5 and Lemma 6]).

    Raises ``ValueError`` if ``sigma`` is too small for the Gaussian part alone.
    """
    ll = check_int(l, "l")
    s = check_real(sigma, "sigma", 0.0, lower_open=True)
    return _gshm_for_sigma(ll, check_epsilon(epsilon), check_delta(delta, allow_zero=False), s)


def gshm_release(
    values: Mapping[Any, int],
    params: GSHMParameters,
    stream: NoiseStream,
    draws: int,
) -> list[tuple[Any, float]]:
    """``c_x + N(0, sigma^2)`` on every positive key, kept iff ``>= 1 + tau`` ([LT23, Section 8, Theorem 5 and Lemma 6])."""
    keys = list(values)
    z = gaussian(stream, params.sigma, max(draws, len(keys)))[: len(keys)]
    ys = noisy_sums("gaussian", [values[x] for x in keys], z)
    return [(x, y) for x, y in zip(keys, ys, strict=True) if y >= params.threshold]
