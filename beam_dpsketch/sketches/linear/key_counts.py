"""Exact counts of declared public keys and their differentially private release.

When the keys to be counted are public (declared before the data are seen, e.g. the routes an
analyst asks about), no sketch is needed: :class:`KeyCountIndex` counts exactly those keys
(memory ``O(#keys)``, vectorised lookups by 128-bit key hash), and :meth:`PrivateKeyCounts.release`
adds independent noise once to every declared key's count, zero counts included. The count
vector is the identity linear map of the frequency vector restricted to the declared keys: a
Count-Min sketch with one row and no collisions, so its exact sensitivities are those of
:func:`~beam_dpsketch.sketches.linear.calibration.linear_sensitivity` for ``count_min`` with
``depth = 1`` (one element changes one key's count by one: L1 = L2 = 1 under add/remove; a
user's ``k`` updates: ``k``). The release is the discrete Laplace mechanism (pure budget, and
approximate budgets, for which it has the smaller variance: it then spends no ``delta``) or the
discrete Gaussian mechanism (zCDP budget) on that vector (Canonne, Kamath and Steinke 2020,
Theorem 14 for the discrete Gaussian; the discrete Laplace mechanism of Ghosh, Roughgarden and
Sundararajan 2009). There is no hashing error. The discrete Laplace noise is drawn on a lattice
finer than one count when its scale is small (:func:`~beam_dpsketch.sketches.linear.calibration.noise_lattice`:
``g`` times the counts plus noise of scale ``g`` times larger, read in units of ``1 / g``; the
same guarantee), so that the stated error bound covers close to its level
(docs/algorithms.md#lin-lattice).

Which keys are released is public (every declared key, whatever the data), so releasing the
keys with their counts reveals nothing beyond the noisy counts. Elements whose key was not
declared are not counted: dropping them can only lower the sensitivity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.hashing import canonical_keys, encode_key, hash_keys
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.linear.base import validate_counts
from beam_dpsketch.sketches.linear.calibration import (
    LinearCalibration,
    calibrate_linear,
    check_stream,
    draw_noise,
    parse_neighbouring,
)
from beam_dpsketch.sketches.linear.private import check_confidence

__all__ = ["KeyCountIndex", "PrivateKeyCounts", "check_query_keys"]

# The lookup hash seed: public and fixed (the hashes only find a key's slot).
_LOOKUP_SEED = 0
_CHUNK = 1 << 16


def check_query_keys(query_keys: Any) -> tuple[Any, ...]:
    """Canonical, de-duplicated public keys, in declared order (``query_keys`` errors)."""
    if isinstance(query_keys, str | bytes) or not isinstance(query_keys, Sequence | np.ndarray):
        raise TypeError(
            f"query_keys must be a sequence of keys, got {type(query_keys).__name__} (wrap a "
            "single key in a list)"
        )
    try:
        keys = tuple(dict.fromkeys(canonical_keys(query_keys)))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"query_keys: {exc}") from None
    if not keys:
        raise ValueError("query_keys must hold at least one public key")
    return keys


class KeyCountIndex:
    """Slot lookup for a fixed tuple of public keys: keys -> index in declared order.

    Keys are found by their 128-bit MurmurHash3 (:func:`~beam_dpsketch.hashing.hash_keys`), with
    a sorted array and ``searchsorted``: ``O(n log #keys)`` numpy work per batch, no per-key
    Python. Two different keys share both 64-bit halves with probability about ``2**-128``.

    Parameters
    ----------
    keys
        The declared keys (see :func:`check_query_keys`).

    Raises
    ------
    ValueError
        If two declared keys share the first 64-bit hash half (never seen in practice; it would
        make the lookup ambiguous).
    """

    __slots__ = ("keys", "_h1", "_h2", "_order")

    def __init__(self, keys: Sequence[Any]) -> None:
        self.keys = check_query_keys(keys)
        h1, h2 = hash_keys(list(self.keys), _LOOKUP_SEED)
        order = np.argsort(h1, kind="stable")
        self._h1, self._h2, self._order = h1[order], h2[order], order
        if np.any(self._h1[1:] == self._h1[:-1]):
            raise ValueError("query_keys: two declared keys share a 64-bit lookup hash")

    def __len__(self) -> int:
        return len(self.keys)

    def zeros(self) -> np.ndarray:
        """An empty accumulator: one int64 count per declared key."""
        return np.zeros(len(self.keys), dtype=np.int64)

    def add(self, counts: np.ndarray, keys: Any, weights: Any = None) -> np.ndarray:
        """Add a batch of keys (weight 1 each, or ``weights``) into ``counts`` in place.

        ``keys`` is anything :func:`~beam_dpsketch.hashing.hash_keys` accepts (numpy, pyarrow,
        a list or :class:`~beam_dpsketch.transforms.batching.KeyBatch`). Undeclared keys are
        ignored. Returns ``counts``.
        """
        n_keys = len(self.keys)
        h1_all, h2_all = hash_keys(keys, _LOOKUP_SEED)
        w_all = validate_counts(weights, len(h1_all))
        for start in range(0, len(h1_all), _CHUNK):
            h1 = h1_all[start : start + _CHUNK]
            h2 = h2_all[start : start + _CHUNK]
            pos = np.minimum(np.searchsorted(self._h1, h1), n_keys - 1)
            hit = (self._h1[pos] == h1) & (self._h2[pos] == h2)
            slots = self._order[pos[hit]]
            if w_all is None:
                counts += np.bincount(slots, minlength=n_keys)
            else:
                np.add.at(counts, slots, w_all[start : start + _CHUNK][hit])
        return counts


class PrivateKeyCounts:
    """Released DP counts of declared public keys (one noise draw per key, zero counts included).

    Build it with :meth:`release`. ``counts[i]`` is the exact count of ``keys[i]`` plus
    independent zero-mean noise, so each released count is unbiased; the noise is an integer
    number of steps of the calibration's lattice (``1 / calibration.lattice``, 1 when the
    scale is 16 or more).

    Guarantee: ``epsilon``-DP (discrete Laplace on the L1 sensitivity: pure budgets, and
    approximate budgets when it has the smaller variance, see :meth:`calibrate`) or
    ``rho``-zCDP (discrete Gaussian on the L2 sensitivity), under :attr:`neighbouring`
    (add/remove one element by default: sensitivity 1 in both norms). Any query on it is
    post-processing.

    Attributes
    ----------
    keys
        The declared keys, in declared order (public).
    counts
        The released noisy counts (float64 multiples of ``1 / calibration.lattice``, read-only).
    calibration
        The public :class:`~beam_dpsketch.sketches.linear.calibration.LinearCalibration`.
    """

    KIND = "PrivateKeyCounts"
    __slots__ = ("keys", "counts", "calibration", "_index")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("PrivateKeyCounts objects come from PrivateKeyCounts.release(...)")

    @classmethod
    def calibrate(
        cls,
        n_keys: int,
        budget: PrivacyBudget,
        *,
        neighbouring: str = "add_remove",
        beta_noise: float = 0.005,
    ) -> LinearCalibration:
        """The calibration of a release of ``n_keys`` counts (no noise drawn).

        Pure budget: discrete Laplace on the L1 sensitivity; zCDP budget: discrete Gaussian on
        the L2 sensitivity. An approximate ``(epsilon, delta)`` budget can be spent either way
        (the discrete Laplace mechanism is ``epsilon``-DP and spends no ``delta``; the discrete
        Gaussian is calibrated through zCDP), and the one with the smaller noise variance is
        chosen from public parameters only. For a count vector L1 and L2 sensitivities are equal
        (one element changes one count), so that is the discrete Laplace for any practical
        budget; :meth:`privacy_cost` then charges ``epsilon`` alone.
        """
        n_keys = check_int(n_keys, "n_keys")
        name, _ = parse_neighbouring(neighbouring)

        def calibrate(spent: PrivacyBudget) -> LinearCalibration:
            return calibrate_linear(
                "count-min",
                1,
                spent,
                neighbouring=name,
                counters=n_keys,
                beta_noise=beta_noise,
                offset=False,
                lattice=spent.is_pure,
            )

        if budget.kind != "approx" or budget.is_pure:
            return calibrate(budget)
        laplace = calibrate(PrivacyBudget.pure(budget.epsilon))  # type: ignore[arg-type]
        try:
            gaussian = calibrate(budget)
        except ValueError:
            # sigma outside the exact sampler's range: the discrete Laplace is the only option.
            return laplace
        return laplace if laplace.noise_variance <= gaussian.noise_variance else gaussian

    @classmethod
    def privacy_cost(
        cls, n_keys: int, budget: PrivacyBudget, *, neighbouring: str = "add_remove"
    ) -> PrivacyBudget:
        """What a release calibrated for ``budget`` spends: ``epsilon`` alone when an approximate
        budget is spent by the discrete Laplace mechanism, else ``budget``."""
        cal = cls.calibrate(n_keys, budget, neighbouring=neighbouring)
        if budget.kind == "approx" and cal.budget_kind == "pure":
            return PrivacyBudget.pure(budget.epsilon)  # type: ignore[arg-type]
        return budget

    @classmethod
    def release(
        cls,
        index: KeyCountIndex,
        counts: np.ndarray,
        budget: PrivacyBudget,
        stream: Any,
        *,
        neighbouring: str = "add_remove",
    ) -> Self:
        """Release the exact ``counts`` of ``index.keys`` once, with noise for ``neighbouring``.

        Exactly ``len(index)`` noise values are drawn from ``stream``, whatever the data.
        """
        stream = check_stream(stream)
        exact = np.asarray(counts)
        if exact.shape != (len(index),) or exact.dtype.kind not in "iu":
            raise ValueError("counts must be one int64 count per declared key")
        cal = cls.calibrate(len(index), budget, neighbouring=neighbouring)
        noise = draw_noise(stream, cal.noise, cal.sampler_parameter(), len(index))
        obj = object.__new__(cls)
        # Counts and noise in lattice steps, read in units of one count (exact: g is a power
        # of two and the sum stays far below 2**53).
        g = cal.lattice
        released = (exact.astype(np.int64) * g + noise).astype(np.float64) / g
        released.flags.writeable = False
        obj.keys, obj.counts, obj.calibration, obj._index = index.keys, released, cal, index
        return obj

    # ---------------------------------------------------------------- calibration metadata

    @property
    def noise(self) -> str:
        return self.calibration.noise

    @property
    def scale(self) -> float:
        return self.calibration.scale

    @property
    def neighbouring(self) -> str:
        return self.calibration.neighbouring

    @property
    def noise_variance(self) -> float:
        return self.calibration.noise_variance

    def error_bound(self, confidence: float = 0.95) -> float:
        """``B`` with ``|count(x) - f(x)| <= B`` with probability ``>= confidence``, per key.

        Noise only (there is no sketch error): the ``confidence`` quantile of one noise value's
        absolute value, computed exactly from the public calibration
        (:func:`~beam_dpsketch.sketches.linear.calibration.noise_abs_quantile`), so the bound
        covers its stated level up to one lattice step of mass (not the wider sub-Gaussian
        tail): at most about ``0.05 / 16`` above 95 % for discrete Laplace noise on the lattice.
        """
        beta = 1.0 - check_confidence(confidence)
        return float(self.calibration.abs_quantile(beta))

    def describe(self) -> dict[str, Any]:
        """Public calibration facts (never a count)."""
        out = self.calibration.to_dict()
        out.update(kind=self.KIND, keys=len(self.keys))
        return out

    # ---------------------------------------------------------------- queries

    def estimate(self, keys: Any) -> np.ndarray:
        """Released counts of ``keys`` (float64); every key must have been declared."""
        h1, h2 = hash_keys(keys, _LOOKUP_SEED)
        idx = self._index
        pos = np.minimum(np.searchsorted(idx._h1, h1), len(idx) - 1)
        hit = (idx._h1[pos] == h1) & (idx._h2[pos] == h2)
        if not bool(np.all(hit)):
            # The key comes from the caller's query, not the data; still, name the parameter.
            raise KeyError("keys: only declared query_keys have a released count")
        return self.counts[idx._order[pos]].astype(np.float64)

    def as_dict(self) -> dict[Any, float]:
        """``{key: released count}`` for every declared key."""
        return dict(zip(self.keys, self.counts.tolist(), strict=True))

    def heavy_hitters(
        self, candidates: Any = None, threshold: float | None = None, top: int | None = None
    ) -> list[tuple[Any, float]]:
        """Declared keys (or the declared ``candidates``) by released count, largest first.

        Ties by canonical key order; ``threshold`` keeps counts ``>= threshold``; ``top`` the
        first ``top``. Post-processing of the released counts.
        """
        if top is not None:
            top = check_int(top, "top")
        keys = list(self.keys if candidates is None else dict.fromkeys(canonical_keys(candidates)))
        values = self.estimate(keys) if keys else np.zeros(0)
        if threshold is not None:
            check_real(threshold, "threshold", finite=False)
            keep = np.flatnonzero(values >= float(threshold))
            keys, values = [keys[i] for i in keep.tolist()], values[keep]
        order = sorted(range(len(keys)), key=lambda i: (-values[i], encode_key(keys[i])))
        order = order if top is None else order[:top]
        return [(keys[i], float(values[i])) for i in order]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (
            self.keys == other.keys
            and self.calibration == other.calibration
            and bool(np.array_equal(self.counts, other.counts))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PrivateKeyCounts(keys={len(self.keys)}, neighbouring={self.neighbouring!r}, "
            f"noise={self.noise!r}, scale={self.scale:.6g})"
        )

    def __reduce__(self):
        return (_rebuild, (self.keys, np.asarray(self.counts), self.calibration.to_dict()))


def _rebuild(keys: tuple[Any, ...], counts: np.ndarray, calibration: dict[str, Any]):
    obj = object.__new__(PrivateKeyCounts)
    released = np.array(counts, dtype=np.float64)
    released.flags.writeable = False
    obj.keys, obj.counts = tuple(keys), released
    obj.calibration = LinearCalibration.from_dict(calibration)
    obj._index = KeyCountIndex(obj.keys)
    return obj
