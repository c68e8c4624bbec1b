"""The noise of the DP Misra-Gries releases: draws, exact noisy sums, tails and quantiles.

Union-bound thresholds (how large a noise draw can be, so that a key present on one side only
is released with probability at most ``delta``) and two-sided quantiles (the noise part of a
stated error bound) for exact discrete Laplace noise and for lattice Laplace noise, [LT23,
Section 3; Section 5.2]; deviations in docs/algorithms.md#misra-gries.

Numeric conventions (docs/algorithms.md#noise-sampling and docs/algorithms.md#mg-e7):

* ``epsilon`` is rounded **down** to a rational ``eps' = p / 10**6``
  (:func:`beam_dpsketch.privacy.calibration.rational_epsilon_floor`), so every noise scale
  ``b = sensitivity / eps'`` is an exact fraction that the exact samplers use without rounding,
  and every threshold is computed from ``eps'``. The guarantee holds at ``eps' <= epsilon``;
  releases report the requested ``epsilon`` and ``details["epsilon_effective"] = eps'``.
* Integer data get exact discrete Laplace noise (:func:`beam_dpsketch.noise.discrete_laplace`).
  "Laplace" releases use :func:`beam_dpsketch.noise.laplace`, the exact discrete Laplace on the
  lattice ``2**-j Z`` with step ``h <= b * 2**-20``. Its tail is
  ``P[Z >= t] <= exp(-t/b) / (1 + exp(-h/b)) <= exp(-t/b) / (1 + exp(-2**-20))``, a hair above
  the continuous ``exp(-t/b)/2``, and thresholds use that bound. Sums ``count + noise`` are
  formed exactly (``math.fsum``) and rounded once, so the released float is a function of the
  exact noisy value only.
* Union-bound thresholds are computed with a ``1e-9`` relative safety margin on ``delta`` so
  floating-point error can only make them (negligibly) larger, as docs/algorithms.md#mg-e7 asks.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from beam_dpsketch.checks import check_probability
from beam_dpsketch.noise import NoiseStream, discrete_laplace, laplace

__all__ = [
    "NOISE_KINDS",
    "draw",
    "geometric_two_sided_quantile",
    "geometric_union_tail",
    "laplace_quantile",
    "laplace_sum_quantile",
    "laplace_union_tail",
    "noisy_sums",
]

#: The noise kinds accepted by the mechanisms with integer inputs.
NOISE_KINDS = ("discrete_laplace", "laplace")

_SAFETY = 1e-9  # relative margin on delta in union-bound thresholds (docs/algorithms.md#mg-e7)
_LATTICE_TAIL_LOG = math.log1p(math.exp(-(2.0**-20)))  # ln(1 + exp(-2**-20)), see module doc


def geometric_union_tail(scale: Fraction, delta: float, draws: int) -> int:
    """Smallest integer ``t >= 0`` with ``draws * P[Geo2(exp(-1/scale)) >= t] <= delta``.

    ``P[Geo2(a) >= t] = a**t / (1 + a)`` for integers ``t >= 0`` ([LT23, Section 3; Section 5.2]). Computed
    against ``delta * (1 - 1e-9)`` so rounding can only raise ``t``.
    """
    b = float(scale)
    log1pa = math.log1p(math.exp(-1.0 / b))
    target = math.log(delta * (1.0 - _SAFETY))

    def log_mass(t: int) -> float:
        return math.log(draws) - t / b - log1pa

    t = max(0, math.ceil((math.log(draws) - log1pa - target) * b))
    while t > 0 and log_mass(t - 1) <= target:
        t -= 1
    while log_mass(t) > target:
        t += 1
    return t


def geometric_two_sided_quantile(scale: Fraction, failure: float) -> int:
    """Smallest integer ``t >= 0`` with ``P[|Geo2(exp(-1/scale))| > t] <= failure``.

    ``P[|Z| > t] = 2 a**(t+1) / (1 + a)`` with ``a = exp(-1/scale)`` ([LT23, Section 3]), so
    ``|Z| <= t`` with probability at least ``1 - failure``. Used for stated error bounds.
    """
    check_probability(failure, "failure")
    b = float(scale)
    log_a = -1.0 / b
    log_const = math.log(2.0) - math.log1p(math.exp(log_a))
    target = math.log(failure)
    t = max(0, math.ceil((log_const - target) * b) - 1)
    while t > 0 and log_const + t * log_a <= target:
        t -= 1
    while log_const + (t + 1) * log_a > target:
        t += 1
    return t


def laplace_union_tail(scale: Fraction | float, delta: float, draws: int) -> float:
    """Smallest real ``t >= 0`` with ``draws * P[Z >= t] <= delta`` for lattice-Laplace ``Z``.

    Uses ``P[Z >= t] <= exp(-t/b) / (1 + exp(-2**-20))`` (module docstring); for the continuous
    Laplace this would be ``b * ln(draws / (2 delta))`` ([LT23, Algorithm 2] and docs/algorithms.md#mg-merged), which it exceeds by
    about ``b * 2**-21``.
    """
    b = float(scale)
    return max(0.0, b * (math.log(draws) - math.log(delta * (1.0 - _SAFETY)) - _LATTICE_TAIL_LOG))


# --------------------------------------------------------------------------------------------
# Noise quantiles: the noise part of the per-value error bounds
# --------------------------------------------------------------------------------------------


def laplace_sum_quantile(scale: Fraction | float, failure: float, *, noise: str) -> float:
    """Smallest ``t`` with ``P[|Z_1 + Z_2| > t] <= failure`` for two independent noise draws.

    PMG adds a shared draw and a per-key draw of the same scale ([LT23, Algorithm 2]); their
    sum is the noise of every released value. For ``Geo2(a)`` draws (``a = exp(-1/scale)``) the
    sum has ``P[S = s] = c**2 a**|s| (|s| + 1 + 2 a**2 / (1 - a**2))`` with
    ``c = (1 - a)/(1 + a)``, summed in closed form; ``t`` is an integer. A release on the lattice
    of step ``1/g`` (docs/algorithms.md#mg-lattice) passes its scale in lattice steps (``g`` times
    the scale in counts) and reads ``t / g``. For the lattice Laplace
    (``noise="laplace"``) the continuous tail ``exp(-t/b) (1 + t/(2b))`` is used and ``t`` is
    raised by ``b * 2**-19`` for the lattice.
    """
    check_probability(failure, "failure")
    b = float(scale)
    target = math.log(failure)
    if noise == "discrete_laplace":
        log_a = -1.0 / b
        a = math.exp(log_a)
        log_c2 = 2.0 * (math.log1p(-a) - math.log1p(a))
        extra = 2.0 * a * a / (1.0 - a * a)

        def log_tail(t: int) -> float:  # log P[|S| > t]
            m = t + 1
            inner = (m + 1) / (1.0 - a) + a / (1.0 - a) ** 2 + extra / (1.0 - a)
            return math.log(2.0) + log_c2 + m * log_a + math.log(inner)

        hi = 1
        while log_tail(hi) > target:
            hi *= 2
        lo = -1  # log_tail(-1) is log P[|S| > -1] = 0 > target
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if log_tail(mid) > target:
                lo = mid
            else:
                hi = mid
        return float(hi)

    def cont_tail(t: float) -> float:
        return -t / b + math.log1p(t / (2.0 * b))

    lo, hi = 0.0, b
    while cont_tail(hi) > target:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if cont_tail(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi + b * 2.0**-19


def laplace_quantile(scale: Fraction | float, failure: float, *, noise: str) -> float:
    """Smallest ``t`` with ``P[|Z| > t] <= failure`` for one draw of the given noise kind.

    Discrete Laplace: :func:`geometric_two_sided_quantile` (an integer). Lattice Laplace: the
    continuous ``b ln(1/failure)`` raised by ``b * 2**-19`` for the lattice.
    """
    if noise == "discrete_laplace":
        return float(geometric_two_sided_quantile(Fraction(scale), failure))
    check_probability(failure, "failure")
    b = float(scale)
    return b * math.log(1.0 / failure) + b * 2.0**-19


def draw(stream: NoiseStream, kind: str, scale: Fraction, size: int) -> np.ndarray:
    """``size`` i.i.d. draws of the integer (``discrete_laplace``) or lattice (``laplace``) noise."""
    if kind == "discrete_laplace":
        return discrete_laplace(stream, scale, size)
    return laplace(stream, scale, size)


def noisy_sums(kind: str, counts: list[int], *parts: np.ndarray) -> list[int | float]:
    """Per-key ``counts[i] + sum_j parts[j][i]``.

    Exact Python ints for ``discrete_laplace``; for lattice noise the exact real sum rounded once
    to a float (``math.fsum``), so the result depends on the exact noisy value only.
    """
    cols = [p.tolist() for p in parts]
    if kind == "discrete_laplace":
        return [int(c) + sum(int(col[i]) for col in cols) for i, c in enumerate(counts)]
    out: list[int | float] = []
    for i, c in enumerate(counts):
        hi = float(c)  # c = hi + lo exactly, even for counts above 2**53
        out.append(math.fsum([hi, float(int(c) - int(hi)), *(col[i] for col in cols)]))
    return out
