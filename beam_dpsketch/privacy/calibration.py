"""Noise calibration and thresholds: the one module every mechanism calls.

Every function validates its inputs (``ValueError`` naming the parameter) and cites the paper
result it implements; papers are cited by the keys of ``docs/algorithms.md#references``
(for example [LT23] for Lebeda and Tetek's Misra-Gries paper). Conventions:

* ``sensitivity`` is the L1 sensitivity for Laplace-type noise and ``l2_sensitivity`` the L2
  sensitivity for Gaussian noise, both under the neighbouring relation the caller uses (see
  ``docs/privacy-model.md``). The sketch class, not this module, knows its own sensitivity.
* ``Lap(b)`` has density ``exp(-|x|/b) / (2b)``; ``Geo2(alpha)`` (discrete Laplace) has
  ``P[Z = z] = (1-alpha)/(1+alpha) * alpha^|z|``; ``N(0, sigma^2)`` has standard deviation sigma.
* Gaussian privacy profiles use the standard normal CDF from :mod:`._normal` (``erfc`` based, so
  scipy is not needed at run time; the tests compare with ``scipy.special.ndtr``/``log_ndtr``).

Thresholds implemented here are the generic union-bound forms; the tests check each against
reference values. Mechanism-specific thresholds belong next to their sketch (those of the DP
Misra-Gries releases are in :mod:`beam_dpsketch.sketches.misra_gries.calibration`).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from ..checks import check_int
from ._normal import log_ndtr, ndtr
from .budget import check_delta, check_epsilon, check_rho

__all__ = [
    "CLASSICAL_GAUSSIAN_MARGIN",
    "LATTICE_MIN_STEPS",
    "MAX_LATTICE",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "discrete_laplace_parameter",
    "discrete_laplace_scale",
    "gaussian_delta",
    "check_positive",
    "gaussian_epsilon",
    "gaussian_hockey_stick",
    "gaussian_zcdp_rho",
    "geometric_split_epsilon",
    "geometric_tail_threshold",
    "laplace_scale",
    "laplace_tail_threshold",
    "log_ndtr",
    "noise_lattice",
    "rational_epsilon_floor",
    "subsampled_epsilon",
    "zcdp_gaussian_sigma",
]

#: Relative margin added to the classical Gaussian sigma so that Dwork and Roth's Theorem A.1
#: condition ``c^2 > 2 ln(1.25/delta)`` holds *strictly* ([LT23, Section 8, Theorem 5 and Lemma 6], "Pedantic
#: point": "round sigma up by a hair: multiply by (1 + 1e-9)").
CLASSICAL_GAUSSIAN_MARGIN = 1e-9


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def check_positive(value: object, name: str) -> float:
    """``value`` as a finite float ``> 0``; ``TypeError`` / ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


# --------------------------------------------------------------------------------------------
# Laplace and discrete Laplace
# --------------------------------------------------------------------------------------------


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """Scale ``b = sensitivity / epsilon`` of the Laplace mechanism.

    Releasing ``f(X) + Lap(b)`` with L1 sensitivity ``sensitivity`` is ``epsilon``-DP ([YKAE, Section II-A]; used with sensitivity 1 by PMG, [LT23, Algorithm 2], and 2 by PURE_PP, [LT23, Section 6]).

    Parameters
    ----------
    sensitivity
        L1 sensitivity, finite and ``> 0``.
    epsilon
        Privacy parameter, finite and ``> 0``.

    Returns
    -------
    float
        The Laplace scale ``b``.
    """
    return check_positive(sensitivity, "sensitivity") / check_epsilon(epsilon)


def discrete_laplace_parameter(sensitivity: float, epsilon: float) -> float:
    """Parameter ``alpha = exp(-epsilon / sensitivity)`` of the discrete Laplace ``Geo2(alpha)``.

    Integer-valued queries get ``Geo2(alpha)`` noise, ``P[Z=z] = (1-a)/(1+a) a^|z|``, which is
    ``epsilon``-DP for integer sensitivity ``sensitivity`` (docs/algorithms.md#int-oracles and docs/algorithms.md#noise-sampling, ``a = exp(-eps/d)``; [LT23, Section 5.2] and docs/algorithms.md#noise-sampling, ``Geo2(exp(-eps))``).
    The exact sampler wants a rational scale instead: see :func:`discrete_laplace_scale`.

    Parameters
    ----------
    sensitivity
        L1 sensitivity (normally an integer), finite and ``> 0``.
    epsilon
        Privacy parameter, finite and ``> 0``.

    Returns
    -------
    float
        ``alpha`` in ``(0, 1)``.
    """
    return math.exp(-check_epsilon(epsilon) / check_positive(sensitivity, "sensitivity"))


def rational_epsilon_floor(
    epsilon: float | str | Fraction, max_denominator: int = 1_000_000
) -> Fraction:
    """The largest fraction ``p/q`` with ``q = max_denominator`` that is ``<= epsilon``.

    The exact integer samplers take rational parameters; rounding ``eps`` **down** gives more noise
    and stays private (docs/algorithms.md#noise-sampling). A ``str`` is parsed exactly as a decimal
    (``"0.01"`` is exactly 1/100; docs/algorithms.md#noise-sampling recommends building
    from the decimal string); a float is taken at its exact binary value.

    Raises
    ------
    ValueError
        If ``epsilon`` is not finite and ``> 0``, or rounds down to 0.
    """
    q = check_int(max_denominator, "max_denominator")
    if isinstance(epsilon, str):
        try:
            exact = Fraction(epsilon.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"epsilon must be a decimal number, got {epsilon!r}") from None
        if exact <= 0:
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    elif isinstance(epsilon, Fraction):
        if epsilon <= 0:
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
        exact = epsilon
    else:
        exact = Fraction(check_epsilon(epsilon))
    if exact.denominator <= q:
        return exact
    floored = Fraction(math.floor(exact * q), q)
    if floored <= 0:
        raise ValueError(
            f"epsilon={epsilon!r} rounds down to 0 with max_denominator={q}; raise max_denominator"
        )
    return floored


def discrete_laplace_scale(
    sensitivity: int | Fraction,
    epsilon: float | str | Fraction,
    max_denominator: int = 1_000_000,
) -> Fraction:
    """Exact rational scale ``t/s = sensitivity / eps'`` for the integer discrete Laplace sampler.

    ``eps'`` is :func:`rational_epsilon_floor` of ``epsilon`` (rounded down, so the scale is
    rounded up). The sampler ``discrete_laplace(s, t)`` of
    Canonne, Kamath and Steinke (2020, Algorithm 2) draws ``P[Z=z] ~ exp(-|z| s/t)``, i.e. scale ``t/s``; pass
    ``s = scale.denominator`` and ``t = scale.numerator``.

    Parameters
    ----------
    sensitivity
        Integer (or rational) L1 sensitivity ``> 0``; floats are rejected because their binary
        value is rarely the intended one.
    epsilon
        Privacy parameter (float, decimal string or Fraction), ``> 0``.
    max_denominator
        Denominator used to round ``epsilon`` down.

    Returns
    -------
    fractions.Fraction
        The scale ``b >= sensitivity / epsilon``.
    """
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, numbers.Rational):
        raise TypeError(f"sensitivity must be an int or Fraction, got {type(sensitivity).__name__}")
    sens = Fraction(sensitivity)
    if sens <= 0:
        raise ValueError(f"sensitivity must be > 0, got {sensitivity!r}")
    return sens / rational_epsilon_floor(epsilon, max_denominator)


#: Lattice noise is drawn at a scale of at least this many lattice steps (see noise_lattice).
LATTICE_MIN_STEPS = 16
#: Finest lattice: keeps ``count * lattice`` far inside int64 for any count of 2**40 or less.
MAX_LATTICE = 1 << 20


def noise_lattice(scale: float) -> int:
    """Lattice steps per unit for discrete Laplace noise of ``scale`` (a power of two, >= 1).

    The smallest power of two ``g`` with ``g * scale >= LATTICE_MIN_STEPS`` (1 when ``scale`` is
    already that wide; at most :data:`MAX_LATTICE`). A release on the lattice adds discrete
    Laplace noise of scale ``g * scale`` to ``g`` times the exact counts and reads the result in
    units of ``1 / g``: the same mechanism on a sensitivity ``g`` times larger, so the same
    guarantee, with noise whose quantiles are resolved to ``1 / g``. On the integers, a scale
    of about 1 (``epsilon`` 1, sensitivity 1) has no level ``e`` with ``P(|Z| <= e)`` between
    92.7 % and 97.3 %, so no integer error bound can state 95 % and mean it.
    """
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    g = 1
    while g * scale < LATTICE_MIN_STEPS and g < MAX_LATTICE:
        g *= 2
    return g


# --------------------------------------------------------------------------------------------
# Gaussian mechanisms
# --------------------------------------------------------------------------------------------


def classical_gaussian_sigma(
    l2_sensitivity: float,
    epsilon: float,
    delta: float,
    *,
    margin: float = CLASSICAL_GAUSSIAN_MARGIN,
) -> float:
    """Classical Gaussian mechanism: ``sigma = sqrt(2 ln(1.25/delta)) * Delta2 / eps * (1+margin)``.

    Dwork and Roth's Theorem A.1, restated as [Hol25, Lemma 1]. It is
    only valid for ``0 < eps < 1``: docs/algorithms.md#lazy-e5 (the paper's "for any eps > 0"
    is wrong), so ``eps >= 1`` raises ``ValueError``; use :func:`analytic_gaussian_sigma` there.
    ``margin`` makes the theorem's strict inequality hold ([LT23, Section 8, Theorem 5 and Lemma 6], "round sigma
    up by a hair"); it is far below any test tolerance (the binary-mechanism tests use
    1e-4; docs/algorithms.md#lazy-oracles). Note docs/algorithms.md#lazy-e4: the paper's Theorem 1 proof drops the factor 2 inside the
    root; this function keeps it.

    Parameters
    ----------
    l2_sensitivity
        L2 sensitivity ``Delta2 > 0``.
    epsilon
        In ``(0, 1)``.
    delta
        In ``(0, 1)``.
    margin
        Relative upward rounding, ``>= 0``.

    Returns
    -------
    float
        The standard deviation sigma.
    """
    d2 = check_positive(l2_sensitivity, "l2_sensitivity")
    eps = check_epsilon(epsilon)
    if eps >= 1.0:
        raise ValueError(
            f"epsilon must be < 1 for the classical Gaussian mechanism, got {epsilon!r} "
            "(docs/algorithms.md#lazy-e5); use analytic_gaussian_sigma for epsilon >= 1"
        )
    dl = check_delta(delta, allow_zero=False)
    if margin < 0 or not math.isfinite(margin):
        raise ValueError(f"margin must be finite and >= 0, got {margin!r}")
    return math.sqrt(2.0 * math.log(1.25 / dl)) * d2 / eps * (1.0 + margin)


def gaussian_delta(l2_sensitivity: float, sigma: float, epsilon: float) -> float:
    """Exact ``delta(eps)`` of the Gaussian mechanism (Balle and Wang 2018, Theorem 8).

    ``delta = Phi(D/(2s) - eps*s/D) - exp(eps) * Phi(-D/(2s) - eps*s/D)`` with ``D = Delta2`` and
    ``s = sigma``: the privacy profile of the analytic Gaussian mechanism (Balle and Wang 2018), the privacy profile of [ZQR+22, Section 2.1] ("Optional tight conversion", ``mu = D/s``) and ``Psi(eps, mu)`` of
    [LT23, Section 8, Theorem 5 and Lemma 6]. The mechanism is ``(eps, delta)``-DP iff ``delta >= gaussian_delta``.
    The second term is evaluated as ``exp(eps + log Phi(.))`` so it neither overflows nor
    underflows early.

    Parameters
    ----------
    l2_sensitivity
        ``Delta2 > 0``.
    sigma
        Noise standard deviation ``> 0``.
    epsilon
        ``eps >= 0``.

    Returns
    -------
    float
        ``delta`` in ``[0, 1)``.
    """
    d2 = check_positive(l2_sensitivity, "l2_sensitivity")
    s = check_positive(sigma, "sigma")
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a real number, got {type(epsilon).__name__}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps < 0.0:
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return gaussian_hockey_stick(eps, d2 / s)


def gaussian_hockey_stick(eps: float, mu: float) -> float:
    """Gaussian hockey-stick divergence ``Psi(eps, mu)`` ([LT23, Section 8, Theorem 5 and Lemma 6]).

    Defined for every real ``eps`` (GSHM evaluates it at ``eps + j ln p``, which can be negative).
    """
    a = mu / 2.0 - eps / mu
    b = -mu / 2.0 - eps / mu
    first = ndtr(a)
    second = math.exp(eps + log_ndtr(b)) if eps + log_ndtr(b) > -745.0 else 0.0
    return max(0.0, first - second)


def analytic_gaussian_sigma(l2_sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest sigma with :func:`gaussian_delta` ``<= delta`` (analytic Gaussian, Balle-Wang 2018).

    Valid for every ``eps > 0`` (this is the "labelled analytic-Gaussian mode" that docs/algorithms.md#lazy-e5 and docs/algorithms.md#continual-observation allow for ``eps >= 1``; the exact condition is the one of
    the analytic Gaussian mechanism). ``gaussian_delta`` decreases in sigma, so the function brackets the
    answer and bisects in ``log(sigma)`` until the bracket is below ``1e-13`` relative, then
    returns the upper end, which satisfies the target exactly as evaluated. The target is
    shrunk by ``1e-10`` relative to absorb floating-point error in the evaluation.

    Parameters
    ----------
    l2_sensitivity
        ``Delta2 > 0``.
    epsilon
        ``eps > 0`` (any size).
    delta
        ``0 < delta < 1``.

    Returns
    -------
    float
        sigma.
    """
    d2 = check_positive(l2_sensitivity, "l2_sensitivity")
    eps = check_epsilon(epsilon)
    target = check_delta(delta, allow_zero=False) * (1.0 - 1e-10)
    # Work with unit sensitivity (delta depends on sigma / Delta2 only), then scale.
    lo, hi = 1e-3, 1.0
    while gaussian_hockey_stick(eps, 1.0 / hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            raise ValueError(f"delta={delta!r} is too small to calibrate")
    while gaussian_hockey_stick(eps, 1.0 / lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-300:
            return hi * d2
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if gaussian_hockey_stick(eps, 1.0 / mid) <= target:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1.0 < 1e-13:
            break
    return hi * d2


def gaussian_epsilon(l2_sensitivity: float, sigma: float, delta: float) -> float:
    """Smallest ``eps`` with :func:`gaussian_delta` ``<= delta``: the exact Gaussian profile.

    With ``mu = Delta2 / sigma = sqrt(2 rho)`` this is the "optional tight conversion" of [ZQR+22, Section 2.1] (table: ``rho = 1``, ``delta = 1e-5`` gives 6.5730). It is valid only
    for a Gaussian mechanism (or a composition of Gaussian mechanisms, whose ``mu^2`` add up), not
    for an arbitrary zCDP mechanism; for those use
    :func:`beam_dpsketch.privacy.budget.zcdp_to_epsilon`.

    Returns
    -------
    float
        ``eps >= 0`` (0 when even ``eps = 0`` meets ``delta``).
    """
    d2 = check_positive(l2_sensitivity, "l2_sensitivity")
    s = check_positive(sigma, "sigma")
    target = check_delta(delta, allow_zero=False)
    mu = d2 / s
    if gaussian_hockey_stick(0.0, mu) <= target:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_hockey_stick(hi, mu) > target:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_hockey_stick(mid, mu) <= target:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-13 * hi:
            break
    return hi


def zcdp_gaussian_sigma(l2_sensitivity: float, rho: float) -> float:
    """``sigma = Delta2 / sqrt(2 rho)``: the Gaussian mechanism is then ``rho``-zCDP.

    [ZQR+22, Section 2.1, Lemma 2.8] corrected (docs/algorithms.md#lin-e2: the paper drops ``rho``); [WWC24, Theorem 3.2] (``sigma^2 = Delta_2^2 / (2 rho)``). A tested
    example: ``Delta2 = sqrt(6)``, ``rho = 1`` gives 1.732051.
    """
    return check_positive(l2_sensitivity, "l2_sensitivity") / math.sqrt(2.0 * check_rho(rho))


def gaussian_zcdp_rho(l2_sensitivity: float, sigma: float) -> float:
    """``rho = Delta2^2 / (2 sigma^2)`` of a Gaussian mechanism ([ZQR+22, Section 2.1])."""
    d2 = check_positive(l2_sensitivity, "l2_sensitivity")
    s = check_positive(sigma, "sigma")
    return d2 * d2 / (2.0 * s * s)


# --------------------------------------------------------------------------------------------
# Generic union-bound thresholds
# --------------------------------------------------------------------------------------------


def laplace_tail_threshold(scale: float, delta: float, draws: int) -> float:
    """Smallest ``t`` with ``draws * P[Lap(scale) >= t] <= delta``: ``t = b ln(draws / (2 delta))``.

    This is the union bound behind every "noise plus threshold" release of [LT23]:
    PMG counts 6 draws ([LT23, Algorithm 2 and Lemma 5]), PMG-std ``2(k+1)`` ([LT23, Section 5.1]), M-LAP and APPROX_PP ``k``
    (docs/algorithms.md#mg-merged and docs/algorithms.md#mg-pp-approx), each with ``P[Lap(b) >= t] = exp(-t/b)/2``. A key whose exact value is at most
    ``v`` passes ``v + t`` with probability ``<= delta`` over all draws. Clipped at 0.
    """
    b = check_positive(scale, "scale")
    d = check_delta(delta, allow_zero=False)
    n = check_int(draws, "draws")
    return max(0.0, b * math.log(n / (2.0 * d)))


def geometric_tail_threshold(epsilon: float, delta: float, draws: int) -> int:
    """Smallest integer ``t`` with ``draws * P[Geo2(e^-eps) >= t] <= delta``.

    ``P[Geo2 >= t] = e^(-eps t) / (1 + e^(-eps))`` ([LT23, Section 5.2]), so
    ``t = ceil(ln(draws e^eps / ((1 + e^eps) delta)) / eps)``, clipped at 0. For a sensitivity
    ``s > 1`` pass ``epsilon / s``. With 6 draws this is the ``t*`` of [LT23, Section 5.2].
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    n = check_int(draws, "draws")
    # log(n e^eps / ((1+e^eps) d)) = log n - log(1 + e^-eps) - log d
    value = (math.log(n) - math.log1p(math.exp(-eps)) - math.log(d)) / eps
    t = max(0, math.ceil(value))
    # Guard the ceiling against floating error: verify and adjust by one step if needed.
    while t > 0 and n * math.exp(-eps * (t - 1)) / (1.0 + math.exp(-eps)) <= d:
        t -= 1
    while n * math.exp(-eps * t) / (1.0 + math.exp(-eps)) > d:
        t += 1
    return t


# --------------------------------------------------------------------------------------------
# Amplification by subsampling
# --------------------------------------------------------------------------------------------


def subsampled_epsilon(epsilon: float, rate: float, delta: float = 0.0) -> tuple[float, float]:
    """Privacy of an ``(eps, delta)`` mechanism run on a Poisson subsample with keep rate ``rate``.

    ``eps' = ln(1 + rate (e^eps - 1))`` and ``delta' = rate * delta`` under add/remove
    neighbours ([YKAE, Section VII] and docs/algorithms.md#int-e24, after Balle,
    Barthe and Gaboardi 2018). Estimates must be rescaled by ``1/rate`` (post-processing).
    """
    eps = check_epsilon(epsilon)
    q = check_positive(rate, "rate")
    if q > 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate!r}")
    d = check_delta(delta)
    return math.log1p(q * math.expm1(eps)), q * d


# --------------------------------------------------------------------------------------------
# Geometric budget split (budgets with no horizon)
# --------------------------------------------------------------------------------------------


def geometric_split_epsilon(
    epsilon: float | str | Fraction, eta: float | str | Fraction, index: int
) -> Fraction:
    """Exact share ``eps_k = eps' (1 - eta) eta^(k-1)`` of the ``k``-th use, ``k >= 1``.

    The split of [YKAE, Section IV-A] (D1: ``eps_k`` per batch; D2: the
    per-use budget of a cell with ``eps/d`` in place of ``eps``, docs/algorithms.md#int-e10) and docs/algorithms.md#int-oracles. The shares
    sum to ``eps' (1 - eta^K)`` over ``K`` uses, below ``eps'`` for any number of uses, so no
    horizon is needed. ``eps'`` is :func:`rational_epsilon_floor` of ``epsilon`` (rounded down);
    ``eta`` is taken exactly (a float at its binary value, a str as an exact decimal), so the
    returned share is the exact rational the sampler's scale ``sensitivity / eps_k`` is built from.

    Parameters
    ----------
    epsilon
        Total budget ``> 0``.
    eta
        Decay factor in ``(0, 1)`` (docs/algorithms.md#int-a12: required, no default).
    index
        Use (or batch) index ``k >= 1``.
    """
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real | str):
        raise TypeError(f"eta must be a real number or a decimal string, got {type(eta).__name__}")
    if isinstance(eta, str):
        try:
            e = Fraction(eta.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"eta must be a decimal number, got {eta!r}") from None
    elif isinstance(eta, numbers.Rational):
        e = Fraction(int(eta.numerator), int(eta.denominator))
    else:
        if not math.isfinite(float(eta)):
            raise ValueError(f"eta must be in (0, 1), got {eta!r}")
        e = Fraction(float(eta))
    if not 0 < e < 1:
        raise ValueError(f"eta must be in (0, 1), got {eta!r}")
    k = check_int(index, "index")
    return rational_epsilon_floor(epsilon) * (1 - e) * e ** (k - 1)
