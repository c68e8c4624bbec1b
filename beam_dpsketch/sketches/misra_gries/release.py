"""The DP Misra-Gries release object: released pairs, their guarantee and their error bound.

Every release of the family returns a :class:`HeavyHitterRelease` built by
:func:`make_release` (sorted by canonical key order, docs/algorithms.md#mg-order), stating its
``(epsilon, delta)``, its neighbouring relation (:data:`NEIGHBOURING_ELEMENT`,
:data:`NEIGHBOURING_SHARDED`), the noise it added (:class:`NoiseSpec`) and, where it can state
one from released values, the per-value :class:`ErrorBound`. :func:`~beam_dpsketch.noise.check_stream` checks the
one argument every release shares, its keyed noise stream; :func:`approx_budget` and
:func:`pure_budget` read the :class:`~beam_dpsketch.privacy.PrivacyBudget` a release spends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import check_stream
from beam_dpsketch.privacy.budget import PrivacyBudget

__all__ = [
    "ERROR_CONFIDENCE",
    "NEIGHBOURING_ELEMENT",
    "NEIGHBOURING_SHARDED",
    "ErrorBound",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "NoiseSpec",
    "approx_budget",
    "check_stream",
    "make_release",
    "pure_budget",
]

#: Neighbouring relation of every single-stream element-level release ([LT23, Definition 1].
NEIGHBOURING_ELEMENT = "add/remove one stream element ([LT23, Definition 1])"
#: Relation for releases of sharded / merged data ([LT23, Definition 1] plus assumption A-PART (docs/algorithms.md#mg-a-part), docs/algorithms.md#mg-partition).
NEIGHBOURING_SHARDED = (
    "add/remove one stream element; the shard partition, within-shard order and merge tree do "
    "not depend on the presence of any other element (assumption A-PART, docs/algorithms.md#mg-a-part)"
)


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
        m = check_int(m, "m", lower=0)
        ranked = sorted(self.items, key=lambda kv: (-kv[1], encode_key(kv[0])))[:m]
        ranked.sort(key=lambda kv: encode_key(kv[0]))
        details = dict(self.details)
        details["top"] = m
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


def approx_budget(budget: Any) -> tuple[float, float]:
    """``(epsilon, delta)`` of the budget an ``(epsilon, delta)``-DP release spends.

    Every thresholding release of the family needs ``delta > 0`` to hide which keys it lists
    (docs/algorithms.md#mg-e9), so only ``PrivacyBudget.approx(epsilon, delta)`` with
    ``0 < delta < 1`` is accepted.

    Raises
    ------
    TypeError
        If ``budget`` is not a :class:`~beam_dpsketch.privacy.PrivacyBudget`.
    ValueError
        Naming ``budget`` for a pure, zCDP or ``delta = 0`` budget.
    """
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(
            "budget must be a beam_dpsketch.privacy.PrivacyBudget "
            f"(PrivacyBudget.approx(epsilon, delta)), got {type(budget).__name__}"
        )
    if budget.kind != "approx" or budget.delta == 0.0:
        raise ValueError(
            "budget must be PrivacyBudget.approx(epsilon, delta) with delta > 0: this release "
            f"is (epsilon, delta)-DP, got {budget}"
        )
    return float(budget.epsilon), float(budget.delta)  # type: ignore[arg-type]


def pure_budget(budget: Any) -> float:
    """``epsilon`` of the budget a pure ``epsilon``-DP release spends.

    A pure release spends no ``delta``, so only ``PrivacyBudget.pure(epsilon)`` is accepted: an
    approximate budget would state a ``delta`` the release does not use.

    Raises
    ------
    TypeError
        If ``budget`` is not a :class:`~beam_dpsketch.privacy.PrivacyBudget`.
    ValueError
        Naming ``budget`` for an approximate or zCDP budget.
    """
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(
            "budget must be a beam_dpsketch.privacy.PrivacyBudget (PrivacyBudget.pure(epsilon)), "
            f"got {type(budget).__name__}"
        )
    if budget.kind != "pure":
        raise ValueError(
            f"budget must be PrivacyBudget.pure(epsilon): this release is pure epsilon-DP, got {budget}"
        )
    return float(budget.epsilon)  # type: ignore[arg-type]
