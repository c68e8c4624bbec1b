"""Shared pieces of the DP Misra-Gries releases: the release object, validation, thresholds,
noise helpers, declared universes and the exact pure-DP top-k sampler.

Everything public is re-exported by :mod:`beam_dpsketch.sketches.misra_gries.private`, which is the
module to import and whose docstring gives the overview. Paper: Lebeda and Tetek
(PODS 2023), cited as [LT23]; deviations in docs/algorithms.md#misra-gries.

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
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseStream, discrete_laplace, laplace
from beam_dpsketch.privacy.budget import PrivacyBudget, check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import discrete_laplace_scale, rational_epsilon_floor
from beam_dpsketch.sketches.misra_gries.universe import Universe
from beam_dpsketch.sketches.misra_gries.universe import pure_top_k as pure_top_k
from beam_dpsketch.sketches.misra_gries.universe import sample_tail_count as sample_tail_count
from beam_dpsketch.sketches.misra_gries.universe import (
    sample_upper_geometric as sample_upper_geometric,
)
from beam_dpsketch.sketches.misra_gries.universe import (
    validate_in_universe as validate_in_universe,
)

__all__ = [
    "ERROR_CONFIDENCE",
    "NEIGHBOURING_ELEMENT",
    "NEIGHBOURING_SHARDED",
    "NOISE_KINDS",
    "ErrorBound",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "NoiseSpec",
    "SKETCH_CHECK_FAILURE",
    "SketchCheck",
    "Universe",
    "laplace_quantile",
    "laplace_sum_quantile",
    "sketch_check_calibration",
    "sketch_shortfall",
]

#: Neighbouring relation of every single-stream element-level release ([LT23, Definition 1].
NEIGHBOURING_ELEMENT = "add/remove one stream element ([LT23, Definition 1])"
#: Relation for releases of sharded / merged data ([LT23, Definition 1] plus assumption A-PART (docs/algorithms.md#mg-a-part), docs/algorithms.md#mg-partition).
NEIGHBOURING_SHARDED = (
    "add/remove one stream element; the shard partition, within-shard order and merge tree do "
    "not depend on the presence of any other element (assumption A-PART, docs/algorithms.md#mg-a-part)"
)
#: The noise kinds accepted by the mechanisms with integer inputs.
NOISE_KINDS = ("discrete_laplace", "laplace")

_SAFETY = 1e-9  # relative margin on delta in union-bound thresholds (docs/algorithms.md#mg-e7)
_LATTICE_TAIL_LOG = math.log1p(math.exp(-(2.0**-20)))  # ln(1 + exp(-2**-20)), see module doc


# --------------------------------------------------------------------------------------------
# The release object
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseSpec:
    """The noise a release added, in the units of the released counts.

    Attributes
    ----------
    distribution
        ``"discrete_laplace"`` (exact, integers), ``"laplace"`` (exact discrete Laplace on a fine
        lattice, see :func:`beam_dpsketch.noise.laplace`) or ``"gaussian"`` (exact discrete
        Gaussian on a fine lattice, :func:`beam_dpsketch.noise.gaussian`).
    scale
        Laplace scale ``b`` (density ``~ exp(-|z|/b)``) or Gaussian ``sigma`` of the per-key draw.
    shared_scale
        Scale of the single draw shared by all keys (PMG's ``eta``), or ``None`` if there is none.
    """

    distribution: str
    scale: float
    shared_scale: float | None = None


#: Confidence of the per-value error bounds a release reports (each value separately).
ERROR_CONFIDENCE = 0.95


@dataclass(frozen=True)
class ErrorBound:
    """How far a released count can be from the true count, at a stated confidence.

    For every released key ``x``, separately, with probability at least ``confidence`` over the
    noise: ``estimate - below <= f(x) <= estimate + above``. Both margins are computed from
    public parameters and released (noisy) values only, so the bound is itself a release.

    Attributes
    ----------
    below
        How far the true count may lie below the estimate (sketch error plus noise quantile).
    above
        How far the true count may lie above the estimate (noise quantile).
    confidence
        Probability, per released value, that the interval holds.
    """

    below: float
    above: float
    confidence: float

    @property
    def half_width(self) -> float:
        """``max(below, above)``: ``|estimate - f(x)| <= half_width`` at ``confidence``."""
        return max(self.below, self.above)


class HeavyHitterEstimate(tuple):
    """A released ``(key, count)`` pair that also carries the count's error bound.

    It is a 2-tuple (``key, count = estimate`` and comparisons with plain tuples work), with
    the attributes ``lower`` and ``upper`` (``lower <= f(key) <= upper``), ``confidence`` (the
    probability of that statement, for this key alone) and :attr:`error_bound`. Every attribute
    is a function of released values and public parameters.
    """

    lower: float
    upper: float
    confidence: float

    def __new__(
        cls, key: Any, count: int | float, lower: float, upper: float, confidence: float
    ) -> HeavyHitterEstimate:
        self = super().__new__(cls, (key, count))
        self.lower, self.upper, self.confidence = float(lower), float(upper), float(confidence)
        return self

    @property
    def key(self) -> Any:
        return self[0]

    @property
    def count(self) -> int | float:
        return self[1]

    @property
    def error_bound(self) -> float:
        """``max(count - lower, upper - count)``: ``|count - f(key)| <= error_bound``."""
        return max(float(self[1]) - self.lower, self.upper - float(self[1]))

    def __reduce__(self):
        return (HeavyHitterEstimate, (self[0], self[1], self.lower, self.upper, self.confidence))

    def __repr__(self) -> str:
        return (
            f"HeavyHitterEstimate(key={self[0]!r}, count={self[1]!r}, lower={self.lower!r}, "
            f"upper={self.upper!r}, confidence={self.confidence!r})"
        )


@dataclass(frozen=True)
class HeavyHitterRelease:
    """A differentially private heavy-hitter / sparse-histogram release.

    Everything in it may be published: it is the output of a DP mechanism plus public
    parameters. Keys not listed have estimate 0 ([LT23, Section 3]).

    Attributes
    ----------
    items
        ``(key, noisy_count)`` pairs sorted by the canonical key order
        (:func:`beam_dpsketch.hashing.encode_key`), never by insertion order (docs/algorithms.md#mg-order).
        Counts are ``int`` for discrete-noise releases and ``float`` otherwise.
    mechanism
        Name of the mechanism (e.g. ``"PMG-geo"``, ``"APPROX_PP"``, ``"M-GSHM"``).
    epsilon, delta
        The guarantee: ``(epsilon, delta)``-DP (``delta == 0`` for pure DP) under
        ``neighbouring`` for one ``privacy_unit``.
    threshold
        Cut applied to noisy values (a key is kept iff value ``>= threshold``), in count units;
        ``None`` for top-k releases without a cutoff.
    noise
        Distribution and scale of the noise, see :class:`NoiseSpec`.
    k
        Sketch size (at most ``k`` keys are released), ``None`` for exact-histogram baselines.
    neighbouring
        The neighbouring relation the guarantee is stated for.
    privacy_unit
        ``"element"`` or ``"user"`` (with the contribution bound in ``neighbouring``).
    details
        Further public parameters (effective epsilon, GSHM ``sigma``/``tau``, pure-DP cutoff,
        budget split, ...).
    noisy_count
        A differentially private count of the stream's elements that the release spent part of
        its budget on (Design B's count correction), or ``None``.
    error
        The per-value :class:`ErrorBound` shared by every released key, or ``None`` when the
        release cannot state one from released values (it would need the unreleased stream
        length). :meth:`estimates` attaches it to every item.
    """

    items: tuple[tuple[Any, int | float], ...]
    mechanism: str
    epsilon: float
    delta: float
    threshold: float | None
    noise: NoiseSpec
    k: int | None
    neighbouring: str
    privacy_unit: str
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)
    noisy_count: int | None = None
    error: ErrorBound | None = None

    def __post_init__(self) -> None:
        items = tuple((key, value) for key, value in self.items)
        encoded = [encode_key(key) for key, _ in items]
        if any(a >= b for a, b in zip(encoded, encoded[1:], strict=False)):
            raise ValueError("items must be sorted by canonical key order without duplicates")
        object.__setattr__(self, "items", items)
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    def __reduce__(self):
        # A read-only mapping does not pickle; rebuild from a plain dict (Beam pickles elements).
        return (
            HeavyHitterRelease,
            (
                self.items,
                self.mechanism,
                self.epsilon,
                self.delta,
                self.threshold,
                self.noise,
                self.k,
                self.neighbouring,
                self.privacy_unit,
                dict(self.details),
                self.noisy_count,
                self.error,
            ),
        )

    def __len__(self) -> int:
        return len(self.items)

    def keys(self) -> list[Any]:
        """The released keys, in canonical key order."""
        return [key for key, _ in self.items]

    def as_dict(self) -> dict[Any, int | float]:
        """``{key: noisy_count}`` in canonical key order."""
        return dict(self.items)

    @property
    def budget(self) -> PrivacyBudget:
        """The privacy cost of this release as a :class:`PrivacyBudget` (pure if ``delta == 0``)."""
        if self.delta == 0.0:
            return PrivacyBudget.pure(self.epsilon)
        return PrivacyBudget.approx(self.epsilon, self.delta)

    def estimates(self) -> list[tuple[Any, int | float]]:
        """The items as :class:`HeavyHitterEstimate` (with error bounds) when :attr:`error` is
        known, else as plain ``(key, count)`` pairs; canonical key order."""
        if self.error is None:
            return list(self.items)
        e = self.error
        return [
            HeavyHitterEstimate(
                key, value, max(0.0, float(value) - e.below), float(value) + e.above, e.confidence
            )
            for key, value in self.items
        ]

    def to_records(self) -> list[dict[str, Any]]:
        """The release as ``[{"key": key, "count": noisy_count}, ...]`` in canonical key order."""
        return [{"key": key, "count": value} for key, value in self.items]

    def top(self, m: int) -> HeavyHitterRelease:
        """The ``m`` keys with the largest noisy counts (post-processing: no privacy cost).

        Ties are broken by the canonical key order. The result is again sorted by key and keeps
        every other attribute; ``details["top"]`` records ``m``.

        Parameters
        ----------
        m
            Number of keys to keep, ``>= 0``.
        """
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
            raise ValueError(f"m must be an int >= 0, got {m!r}")
        ranked = sorted(self.items, key=lambda kv: (-kv[1], encode_key(kv[0])))[: int(m)]
        ranked.sort(key=lambda kv: encode_key(kv[0]))
        details = dict(self.details)
        details["top"] = int(m)
        return HeavyHitterRelease(
            tuple(ranked),
            self.mechanism,
            self.epsilon,
            self.delta,
            self.threshold,
            self.noise,
            self.k,
            self.neighbouring,
            self.privacy_unit,
            details,
            self.noisy_count,
            self.error,
        )


def make_release(
    pairs: Iterable[tuple[Any, int | float]],
    *,
    mechanism: str,
    epsilon: float,
    delta: float,
    threshold: float | None,
    noise: NoiseSpec,
    k: int | None,
    neighbouring: str = NEIGHBOURING_ELEMENT,
    privacy_unit: str = "element",
    details: Mapping[str, Any] | None = None,
    noisy_count: int | None = None,
    error: ErrorBound | None = None,
) -> HeavyHitterRelease:
    """Sort ``pairs`` canonically and wrap them (internal helper of the mechanisms)."""
    items = sorted(pairs, key=lambda kv: encode_key(kv[0]))
    return HeavyHitterRelease(
        tuple(items),
        mechanism,
        float(epsilon),
        float(delta),
        threshold,
        noise,
        k,
        neighbouring,
        privacy_unit,
        dict(details or {}),
        noisy_count,
        error,
    )


# --------------------------------------------------------------------------------------------
# Validation (docs/algorithms.md#misra-gries)
# --------------------------------------------------------------------------------------------


def check_stream(stream: Any) -> NoiseStream:
    """Require a :class:`beam_dpsketch.noise.NoiseStream` (the release's keyed noise)."""
    if not isinstance(stream, NoiseStream):
        raise TypeError(
            f"stream must be a beam_dpsketch.noise.NoiseStream (NoiseSource.stream(release_id)), "
            f"got {type(stream).__name__}"
        )
    return stream


def check_eps(epsilon: Any) -> float:
    """``0 < epsilon < inf`` (ValueError naming ``epsilon``)."""
    return check_epsilon(epsilon)


def check_approx_delta(delta: Any) -> float:
    """``0 < delta < 1`` for every (eps, delta) mechanism (docs/algorithms.md#misra-gries; docs/algorithms.md#mg-e9)."""
    return check_delta(delta, allow_zero=False)


def check_noise_kind(noise: Any) -> str:
    if noise not in NOISE_KINDS:
        raise ValueError(f"noise must be one of {NOISE_KINDS}, got {noise!r}")
    return noise


def check_beta(beta: Any) -> float:
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta!r}")
    return float(beta)


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as a Python int ``>= 1`` (:func:`beam_dpsketch.checks.check_int`)."""
    return check_int(value, name)


def laplace_scale_exact(sensitivity: int | Fraction, epsilon: float) -> Fraction:
    """``b = sensitivity / eps'`` with ``eps' <= epsilon`` rational: an exact sampler scale."""
    return discrete_laplace_scale(sensitivity, epsilon)


# --------------------------------------------------------------------------------------------
# Union-bound thresholds for the noise actually drawn
# --------------------------------------------------------------------------------------------


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
    if not 0.0 < failure < 1.0:
        raise ValueError(f"failure must be in (0, 1), got {failure!r}")
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
# Per-value error bounds: noise quantiles and the private checks of a sketch's own error
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
    if not 0.0 < failure < 1.0:
        raise ValueError(f"failure must be in (0, 1), got {failure!r}")
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
    if not 0.0 < failure < 1.0:
        raise ValueError(f"failure must be in (0, 1), got {failure!r}")
    b = float(scale)
    return b * math.log(1.0 / failure) + b * 2.0**-19


#: Probability that each of the two private checks behind a sketch's error bound misses; both
#: are counted against the bound's ``1 - confidence``.
SKETCH_CHECK_FAILURE = 1e-3
#: Share of ``k`` the exactness check leaves as its margin: a sketch of streams with up to about
#: ``(1 - SKETCH_CHECK_MARGIN) k`` distinct keys passes almost surely.
SKETCH_CHECK_MARGIN = 0.25
#: Most of a release's epsilon each of the two checks may spend.
SKETCH_CHECK_FRACTION = 0.02


@dataclass(frozen=True)
class SketchCheck:
    """Public calibration of the private checks that bound a Misra-Gries sketch's own error.

    A Misra-Gries sketch (one stream, or merged with ``MERGE_k``) undercounts every key by at
    most its decrement total ``d``, and ``d <= n/(k+1)`` ([LT23, Section 2; Section 7]); ``d``
    is 0 exactly when the stream has at most ``k`` distinct keys. Two pure-DP statistics, on
    noise independent of the release's, turn this into a bound stated from released values:

    * **exactness test** (``test_epsilon``): ``widest + Z_t <= test_cut`` with ``widest =
      min(distinct keys, k + 1)`` (:attr:`~.sketch.MisraGries.widest`, sensitivity 1) and
      ``Z_t`` discrete Laplace of scale ``test_scale``; a sketch with ``d > 0``
      (``widest = k + 1``) passes with probability at most ``failure``;
    * **element count** (``count_epsilon``): ``n_up = n + W + count_margin`` with ``W``
      discrete Laplace of scale ``count_scale`` (sensitivity 1), ``n_up < n`` with probability
      at most ``failure``.

    The sketch's shortfall bound is 0 if the test passes, else ``max(n_up, 0)/(k+1)``.
    ``release_epsilon`` is what is left for the release itself (basic composition).
    """

    test_epsilon: float
    test_scale: Fraction
    test_cut: int
    count_epsilon: float
    count_scale: Fraction
    count_margin: int
    failure: float
    release_epsilon: float

    @property
    def epsilon(self) -> float:
        """The epsilon both checks spend together."""
        return self.test_epsilon + self.count_epsilon


def sketch_check_calibration(epsilon: float, k: int) -> SketchCheck:
    """The public :class:`SketchCheck` of a release of ``epsilon`` on a sketch of size ``k``.

    The test spends just enough epsilon for a margin of ``SKETCH_CHECK_MARGIN * k`` at failure
    ``SKETCH_CHECK_FAILURE``, and the count just enough that its margin is at most half a count
    after division by ``k + 1`` (about ``2e-4`` and ``1e-4`` at ``k = 131072``); each is capped
    at ``SKETCH_CHECK_FRACTION`` of epsilon and rounded onto the ``1e-6`` grid of the exact
    samplers, so ``test_epsilon + count_epsilon + release_epsilon <= epsilon``.
    """
    eps = check_eps(epsilon)
    kk = check_positive_int(k, "k")
    micro = Fraction(1, 10**6)
    total = rational_epsilon_floor(eps)  # eps' on the 1e-6 grid, <= epsilon
    cap = (total * Fraction(SKETCH_CHECK_FRACTION)) // micro * micro
    log_inv = math.log(1.0 / SKETCH_CHECK_FAILURE)

    def share(wanted: float) -> Fraction:
        grid = -(-Fraction(wanted) // micro) * micro  # rounded up: at least the margin wanted
        return max(micro, min(grid, cap))

    eps_t = share((1.0 + log_inv) / (SKETCH_CHECK_MARGIN * kk))
    eps_n = share(2.0 * (1.0 + log_inv) / (kk + 1))
    rest = total - eps_t - eps_n
    if rest < micro:
        raise ValueError(
            f"epsilon={epsilon!r} is too small to split for a stated error bound: raise epsilon"
        )
    test_scale = laplace_scale_exact(1, eps_t)
    count_scale = laplace_scale_exact(1, eps_n)
    release = float(rest)
    if Fraction(release) > rest:
        release = math.nextafter(release, 0.0)
    return SketchCheck(
        test_epsilon=float(eps_t),
        test_scale=test_scale,
        test_cut=kk + 1 - geometric_union_tail(test_scale, SKETCH_CHECK_FAILURE, 1),
        count_epsilon=float(eps_n),
        count_scale=count_scale,
        count_margin=geometric_union_tail(count_scale, SKETCH_CHECK_FAILURE, 1),
        failure=SKETCH_CHECK_FAILURE,
        release_epsilon=release,
    )


def sketch_shortfall(
    widest: int, n: int, k: int, check: SketchCheck, stream: NoiseStream
) -> tuple[float, dict[str, Any]]:
    """Run the two checks of :class:`SketchCheck`: ``(shortfall bound, public details)``.

    The noise comes from ``stream.substream("sketch-check")``, so it neither moves nor depends
    on the release's own draws; exactly two draws are made whatever the data. With probability
    at least ``1 - 2 * check.failure`` the bound is at least the sketch's decrement total.
    """
    sub = stream.substream("sketch-check")
    z_t = int(discrete_laplace(sub, check.test_scale, 1)[0])
    w = int(discrete_laplace(sub, check.count_scale, 1)[0])
    exact = widest + z_t <= check.test_cut
    n_up = n + w + check.count_margin
    shortfall = 0.0 if exact else max(n_up, 0) / (k + 1)
    details: dict[str, Any] = {
        "exactness_test_epsilon": check.test_epsilon,
        "exactness_test_passed": bool(exact),
        "count_check_epsilon": check.count_epsilon,
        "sketch_error_bound": shortfall,
    }
    return shortfall, details


def check_error_confidence(error_confidence: Any) -> float:
    """``error_confidence`` in ``(0, 1 - 2 * SKETCH_CHECK_FAILURE)`` (ValueError naming it)."""
    top = 1.0 - 2.0 * SKETCH_CHECK_FAILURE
    if (
        isinstance(error_confidence, bool)
        or not isinstance(error_confidence, numbers.Real)
        or not 0.0 < float(error_confidence) < top
    ):
        raise ValueError(f"error_confidence must be in (0, {top:g}), got {error_confidence!r}")
    return float(error_confidence)


# --------------------------------------------------------------------------------------------
# Noise helpers
# --------------------------------------------------------------------------------------------


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
