"""Thresholds and noise parameters of the DP Misra-Gries releases (Lebeda and Tetek [LT23]).

Every function validates its inputs (``ValueError`` naming the parameter), cites the result of
[LT23] it implements (Sections 5-8: PMG and its variants, the merged and post-processed
releases, user-level PMG, and the Gaussian sparse histogram mechanism GSHM) and is checked
against reference values in the tests. The generic calibration they build on (Laplace and
Gaussian tails, the Gaussian privacy profile) is :mod:`beam_dpsketch.privacy.calibration`.
Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md#misra-gries``
explains every deviation from the paper.
"""

from __future__ import annotations

import math

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.privacy.budget import check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import (
    check_positive,
    classical_gaussian_sigma,
    gaussian_hockey_stick,
    geometric_tail_threshold,
    laplace_tail_threshold,
    log_ndtr,
)

__all__ = [
    "approx_pp_threshold",
    "gshm_closed_form_parameters",
    "gshm_delta",
    "gshm_threshold",
    "merged_laplace_threshold",
    "pmg_geometric_threshold",
    "pmg_geometric_threshold_paper",
    "pmg_standard_threshold",
    "pmg_threshold",
    "user_level_pmg_parameters",
]


# --------------------------------------------------------------------------------------------
# DP Misra-Gries thresholds ([LT23, Sections 5-7]; reference values checked in the tests)
# --------------------------------------------------------------------------------------------


def pmg_threshold(epsilon: float, delta: float) -> float:
    """PMG threshold ``tau = 1 + 2 ln(3/delta) / eps`` ([LT23, Algorithm 2]).

    Equals ``1 + 2 * laplace_tail_threshold(1/eps, delta, 6)`` (Lemma 5 counts 6 draws).
    Reference values (tested): ``eps = 1, delta = 1e-6`` gives 30.8282.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    return 1.0 + 2.0 * math.log(3.0 / d) / eps


def pmg_standard_threshold(epsilon: float, delta: float, k: int) -> float:
    """PMG on standard MG: ``tau_std = 1 + 2 ln((k+1)/delta) / eps`` ([LT23, Section 5.1]).

    The library keeps this value (it is above the derived ``(k+2)/(2 delta)`` form;
    docs/algorithms.md#mg-e4). Reference values (tested): ``(1, 1e-6, 100)`` gives 37.8613.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    kk = check_int(k, "k")
    return 1.0 + 2.0 * math.log((kk + 1) / d) / eps


def pmg_geometric_threshold(epsilon: float, delta: float, k: int | None = None) -> tuple[int, int]:
    """Discrete PMG threshold ``(tau_geo, t*)`` with ``tau_geo = 1 + 2 t*`` ([LT23, Section 5.2]).

    ``t* = ceil(ln(6 e^eps / ((1+e^eps) delta)) / eps)`` for the variant MG (6 draws); for
    standard MG (pass ``k``) the 6 becomes ``2(k+1)``. This is the library's default, conservative
    form (docs/algorithms.md#mg-e5). Reference values (tested): ``eps = 1, delta = 1e-6`` gives ``(33, 16)``.
    """
    draws = 6 if k is None else 2 * (check_int(k, "k") + 1)
    t_star = geometric_tail_threshold(epsilon, delta, draws)
    return 1 + 2 * t_star, t_star


def pmg_geometric_threshold_paper(epsilon: float, delta: float) -> float:
    """Probable-paper discrete PMG threshold ``1 + 2 L / eps`` ([LT23, Section 5.2]).

    ``L = ln(6 e^eps / ((1 + e^eps) delta))``; keep integer noisy counts ``y >= ceil(tau)``. The
    library keeps :func:`pmg_geometric_threshold` as the default. Reference values (tested): 31.5880, 89.1638,
    300.2575.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    big_l = math.log(6.0) - math.log1p(math.exp(-eps)) - math.log(d)
    return 1.0 + 2.0 * big_l / eps


def merged_laplace_threshold(epsilon: float, delta: float, k: int) -> float:
    """M-LAP threshold ``1 + (k/eps) ln(k / (2 delta))`` for merged MG sketches (docs/algorithms.md#mg-merged).

    Noise is ``Lap(k/eps)`` on the positive keys; Reference values (tested): ``(1, 1e-6, 100)`` gives 1773.75.
    """
    eps = check_epsilon(epsilon)
    kk = check_int(k, "k")
    return 1.0 + laplace_tail_threshold(kk / eps, delta, kk)


def approx_pp_threshold(epsilon: float, delta: float, k: int) -> float:
    """APPROX_PP threshold ``1 + (2/eps) ln(k / (2 delta))`` (docs/algorithms.md#mg-pp-approx and docs/algorithms.md#mg-merged).

    For the post-processed sketch (Algorithm 3) with ``Lap(2/eps)`` noise on the positive keys.
    """
    eps = check_epsilon(epsilon)
    kk = check_int(k, "k")
    return 1.0 + laplace_tail_threshold(2.0 / eps, delta, kk)


def user_level_pmg_parameters(epsilon: float, delta: float, m: int) -> tuple[float, float, float]:
    """``(eps0, delta0, tau)`` for PMG on a flattened user-level stream ([LT23, Section 8, Lemmas 1-2 and Corollary 3]).

    ``eps0 = eps/m``, ``delta0 = delta / (m e^eps)`` and ``tau = 1 + 2 (m/eps) ln(3 m e^eps /
    delta)`` (= :func:`pmg_threshold` at ``(eps0, delta0)``); group privacy then gives
    ``(eps, delta)`` for users of at most ``m`` elements. Reference values (tested): ``(1, 1e-6, 10)`` gives
    ``(0.1, 3.67879e-8, 365.3342)``.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    mm = check_int(m, "m")
    eps0 = eps / mm
    delta0 = d / (mm * math.exp(eps))
    return eps0, delta0, pmg_threshold(eps0, delta0)


# --------------------------------------------------------------------------------------------
# Gaussian sparse histogram mechanism ([LT23, Section 8, Theorem 5 and Lemma 6])
# --------------------------------------------------------------------------------------------


def _gshm_terms(l: int, s: float, lp: float, eps: float, a: int, b: int) -> float:  # noqa: E741
    """``max(add, remove)`` of [LT23, Theorem 5] with ``p^j`` at ``j = b`` and ``Psi`` at ``j = a``.

    At ``a == b`` this is the exact term ``j``. For ``a < b`` it bounds every term
    ``j in [a, b]`` from above: with ``ln p <= 0``, ``1 - p^j <= 1 - p^b``, and ``Psi(e, mu)`` (a
    hockey-stick divergence) decreases in ``e`` and increases in ``mu = sqrt(l-j)/sigma``, so
    ``Psi(eps - j ln p, mu_j) <= Psi(eps - a ln p, mu_a)`` and ``Psi(eps + j ln p, mu_j) <=
    Psi(eps + b ln p, mu_a)``.
    """
    mu = math.sqrt(l - a) / s
    add = -math.expm1(b * lp) + math.exp(b * lp) * gaussian_hockey_stick(eps - a * lp, mu)
    # eps + j ln p may be negative: Psi is defined there.
    remove = gaussian_hockey_stick(eps + b * lp, mu)
    return max(add, remove)


# Blocks of at most this many terms are evaluated term by term rather than bounded.
_GSHM_LEAF = 16
# A block is skipped only when its bound is below the running maximum by more than this
# (times 1 + eps): far above the rounding error of one term (about 1e-15 absolute), so every
# term that could be the computed maximum is evaluated and the result is the full scan's.
_GSHM_SKIP_MARGIN = 1e-12


def gshm_delta(l: int, sigma: float, tau: float, epsilon: float) -> float:  # noqa: E741
    """Exact ``delta_GSHM(l, sigma, tau, eps)`` of the Gaussian sparse histogram mechanism.

    [LT23, Section 8, Theorem 5] (after Wilkins, Kifer, Zhang and Karrer): GSHM adds
    ``N(0, sigma^2)`` to every positive count and keeps ``y >= 1 + tau``; it is
    ``(eps, delta)``-DP iff ``delta >= max(1 - p^l, max_j [1 - p^j + p^j Psi(eps - j ln p,
    sqrt(l-j)/sigma)], max_j Psi(eps + j ln p, sqrt(l-j)/sigma))`` with ``p = Phi(tau/sigma)`` and
    ``j = 0..l-1``. Evaluated stably with ``ln p = log_ndtr(tau/sigma)`` and ``1 - p^j =
    -expm1(j ln p)``, for numerical stability. Reference value (tested): ``(1, 5, 20, 0.5)`` gives
    ``5.1254e-04``.

    The maximum over ``j`` is found by branch and bound rather than a scan of all ``l`` terms:
    a range of ``j`` whose upper bound (monotonicity of ``p^j`` and of ``Psi``) lies below the
    largest term found so far, by a margin well above rounding error, cannot hold the maximum
    and is skipped; every other term is evaluated exactly as a full scan would. The value
    returned is the full scan's, bit for bit, in a few dozen term evaluations instead of
    ``l`` (``l`` is ``k``, up to ``2^17`` and more, and a calibration evaluates this function
    about a thousand times).
    """
    ll = check_int(l, "l")
    s = check_positive(sigma, "sigma")
    check_real(tau, "tau")
    eps = check_epsilon(epsilon)
    lp = log_ndtr(float(tau) / s)
    worst = max(
        -math.expm1(ll * lp),
        _gshm_terms(ll, s, lp, eps, 0, 0),
        _gshm_terms(ll, s, lp, eps, ll - 1, ll - 1),
    )
    margin = _GSHM_SKIP_MARGIN * (1.0 + eps)
    blocks = [(1, ll - 2)]
    # Once a term reaches 1 the answer is 1 (the result is capped there).
    while blocks and worst < 1.0:
        a, b = blocks.pop()
        if b - a < _GSHM_LEAF:
            for j in range(a, b + 1):
                worst = max(worst, _gshm_terms(ll, s, lp, eps, j, j))
        elif _gshm_terms(ll, s, lp, eps, a, b) >= worst - margin:
            mid = (a + b) // 2
            blocks += [(mid + 1, b), (a, mid)]
    return min(1.0, worst)


def gshm_threshold(l: int, sigma: float, epsilon: float, delta: float) -> float:  # noqa: E741
    """Smallest ``tau`` with :func:`gshm_delta` ``<= delta`` for a fixed sigma, by bisection.

    ``delta_GSHM`` decreases in ``tau`` ([LT23, Section 8, Theorem 5]; checked numerically in the tests),
    and the code re-evaluates the exact condition after rounding: docs/algorithms.md#mg-e10; the returned value is
    the upper end of the bisection, for which the condition holds as evaluated.

    Raises
    ------
    ValueError
        If sigma is too small: even an infinite threshold leaves the Gaussian part above delta.
    """
    ll = check_int(l, "l")
    s = check_positive(sigma, "sigma")
    eps = check_epsilon(epsilon)
    target = check_delta(delta, allow_zero=False)
    if gaussian_hockey_stick(eps, math.sqrt(ll) / s) > target:
        raise ValueError(
            f"sigma={sigma!r} is too small for (epsilon={epsilon!r}, delta={delta!r}) with l={l}: "
            "the Gaussian part alone exceeds delta"
        )
    lo, hi = 0.0, s
    while gshm_delta(ll, s, hi, eps) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e6 * s:
            raise ValueError(f"no threshold reaches delta={delta!r} with sigma={sigma!r}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gshm_delta(ll, s, mid, eps) <= target:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * hi:
            break
    return hi


def gshm_closed_form_parameters(
    l: int,  # noqa: E741
    epsilon: float,
    delta: float,
) -> tuple[float, float]:
    """Lemma-6 style closed-form ``(sigma, tau)`` for GSHM ([LT23, Section 8, Theorem 5 and Lemma 6]).

    ``sigma = sqrt(2 l ln(2.5/delta)) / eps`` (classical Gaussian with ``Delta2 = sqrt(l)`` at
    ``delta/2``, rounded up by :data:`CLASSICAL_GAUSSIAN_MARGIN`) and ``tau = sigma sqrt(2
    ln(l/delta))``. Needs ``eps < 1`` (Theorem A.1). Always looser than the exact condition: A.7
    gives ``sigma = 108.5608``, ``tau = 658.9322`` and exact delta ``6.4071e-08`` for
    ``(100, 0.5, 1e-6)``. Prefer :func:`gshm_threshold` with an exact check.
    """
    ll = check_int(l, "l")
    d = check_delta(delta, allow_zero=False)
    sigma = classical_gaussian_sigma(math.sqrt(ll), epsilon, d / 2.0)
    tau = sigma * math.sqrt(2.0 * math.log(ll / d))
    return sigma, tau
