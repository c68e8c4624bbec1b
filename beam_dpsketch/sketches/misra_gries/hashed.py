"""User-level releases at bounded memory: hashed one-counter PAMG sketches.

Pure numpy, no Beam. The selection step of user-level select-then-count
(:mod:`beam_dpsketch.sketches.misra_gries.select_count`), and the user-level sparse histogram
of the ``pamg-gshm`` mechanism (:func:`hashed_pamg_gshm`), which publishes the same noisy
counters as estimates.

**The sketch.** Keys are hashed (seeded, public, data-independent) into ``B`` buckets, and each
bucket holds a Privacy-Aware Misra-Gries sketch with one counter (Lebeda and Tětek, PODS 2023,
Section 8, Algorithm 4, with ``k = 1``): a privacy unit's distinct keys falling into a bucket
form that bucket's user set. Sketches merge bucket by bucket with ``MERGE_1`` (Agarwal et al.,
"Mergeable Summaries", PODS 2012). Memory is at most ``B`` (key, counter) pairs whatever the
number of distinct keys. A key alone among the heavy keys of its bucket keeps a counter of at
least its count minus the counts of the other keys of its bucket; with ``B`` well above the
number of distinct keys, most buckets hold one key and the counter is exact.

**Sensitivity.** Adding or removing one unit (a set of at most ``m`` distinct keys) leaves every
bucket the unit does not touch unchanged: its per-bucket stream is the same. In each bucket it
touches (at most ``m``), the one-counter PAMG sketches of the two streams differ in at most one
counter, by exactly 1, also after any fixed tree of merges (Lebeda and Tětek, Section 8, Lemma 9
and Corollary 10, for any ``k >= 1`` and any user-set size). So the two counter vectors differ
in at most ``m`` counters, each by 1 (the signs may differ between buckets); a key stored in
only one of them has counter exactly 1 there.

**The release** (:func:`hashed_selection`): discrete-lattice Gaussian noise ``N(0, sigma^2)`` on
every stored counter, keep the keys whose noisy counter is at least ``threshold``, and return
the ``k`` largest (post-processing). With ``sigma`` the analytic Gaussian scale for L2
sensitivity ``sqrt(m)`` at ``(epsilon, delta/2)`` and ``threshold = 1 + sigma
Phi^-1(1 - delta / (2 m e^epsilon))`` it is ``(epsilon, delta)``-DP for units of at most ``m``
distinct keys; the proof is in :func:`hashed_selection_parameters`. Unlike Design B at user
level, no group privacy is used: the noise grows with ``sqrt(m)``, not with ``m``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_keys, decode_key, encode_key, hash_keys
from beam_dpsketch.noise import NoiseStream, gaussian
from beam_dpsketch.privacy.budget import PrivacyBudget, check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import analytic_gaussian_sigma
from beam_dpsketch.sketches.misra_gries.release import (
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.sizing import MAX_K
from beam_dpsketch.sketches.misra_gries.tails import (
    noisy_sums,
)
from beam_dpsketch.sketches.misra_gries.user import user_set_relation

__all__ = [
    "HashedPAMG",
    "HashedSelectionParameters",
    "hashed_pamg_gshm",
    "hashed_selection",
    "hashed_selection_parameters",
]

#: Public seed of the bucket hash (the bucket of a key is data-independent, not secret).
BUCKET_SEED = 0x5E1EC7


class HashedPAMG:
    """``B`` one-counter PAMG sketches, one per hash bucket of the keys. Not private.

    Parameters
    ----------
    buckets
        Number of buckets ``B`` (at most ``B`` keys are stored), in ``[1, 2**24]``.
    seed
        Seed of the bucket hash; sketches with different ``(buckets, seed)`` refuse to merge.
    """

    KIND = "HashedPAMG"
    __slots__ = ("buckets", "seed", "_cells")

    def __init__(self, buckets: int, seed: int = BUCKET_SEED) -> None:
        self.buckets = check_int(buckets, "buckets", upper=MAX_K)
        self.seed = int(seed)
        # bucket -> (key, counter >= 1)
        self._cells: dict[int, tuple[Any, int]] = {}

    def _bucket_of(self, keys: list[Any]) -> list[int]:
        h1, _ = hash_keys(keys, self.seed)
        return (h1 % np.uint64(self.buckets)).astype(np.int64).tolist()

    def update(self, unit: Iterable[Any]) -> Self:
        """Merge one privacy unit's contribution, a set of keys (duplicates count once).

        The unit's own sketch is, per bucket, ``{x: 1}`` if exactly one of its keys falls
        there and empty otherwise (PAMG with one counter on a set of two or more keys
        increments them all, then decrements them all); it is merged with ``MERGE_1``.
        """
        if isinstance(unit, str | bytes):
            raise TypeError("a unit's keys must be a collection of keys, not a single str/bytes")
        distinct = sorted(set(canonical_keys(list(unit))), key=encode_key)
        if not distinct:
            return self
        per_bucket: dict[int, list[Any]] = {}
        for b, x in zip(self._bucket_of(distinct), distinct, strict=True):
            per_bucket.setdefault(b, []).append(x)
        own = {b: (xs[0], 1) for b, xs in per_bucket.items() if len(xs) == 1}
        self._merge_cells([own])
        return self

    def update_user(self, unit: Iterable[Any]) -> Self:
        """Alias of :meth:`update` (the name :class:`PAMGSketch` uses)."""
        return self.update(unit)

    def _merge_cells(self, others: list[dict[int, tuple[Any, int]]]) -> None:
        cells = self._cells
        touched: dict[int, dict[Any, int]] = {}
        for other in others:
            for b, (x, c) in other.items():
                sums = touched.get(b)
                if sums is None:
                    sums = touched[b] = {}
                    if b in cells:
                        y, cy = cells[b]
                        sums[y] = cy
                sums[x] = sums.get(x, 0) + c
        for b, sums in touched.items():
            # MERGE_1: subtract the second largest sum (0 if one key), keep what stays positive.
            ranked = sorted(sums.values(), reverse=True)
            second = ranked[1] if len(ranked) > 1 else 0
            kept = [(x, c - second) for x, c in sums.items() if c > second]
            if kept:
                cells[b] = kept[0]
            else:
                cells.pop(b, None)

    def merge(self, *others: HashedPAMG) -> Self:
        """Bucket-wise multi-way ``MERGE_1`` with ``others`` (in that order)."""
        for other in others:
            if not isinstance(other, HashedPAMG):
                raise ValueError(f"cannot merge a HashedPAMG with a {type(other).__name__}")
            if (other.buckets, other.seed) != (self.buckets, self.seed):
                raise ValueError("cannot merge HashedPAMG sketches with different (buckets, seed)")
        self._merge_cells([o._cells for o in others])
        return self

    def to_dict(self) -> dict[Any, int]:
        """Positive counters in canonical key order. Not private."""
        pairs = sorted(self._cells.values(), key=lambda xc: encode_key(xc[0]))
        return dict(pairs)

    def __len__(self) -> int:
        return len(self._cells)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HashedPAMG):
            return NotImplemented
        return (self.buckets, self.seed, self._cells) == (other.buckets, other.seed, other._cells)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"HashedPAMG(buckets={self.buckets}, keys={len(self._cells)})"

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`)."""
        items = sorted(self._cells.items())
        data, offsets = serialization.pack_bytes_list([encode_key(x) for _, (x, _) in items])
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "buckets": np.array([b for b, _ in items], dtype=np.int64),
            "counts": np.array([c for _, (_, c) in items], dtype=np.int64),
        }
        return serialization.dumps(self.KIND, {"buckets": self.buckets, "seed": self.seed}, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> HashedPAMG:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        nb = serialization.require(params, "buckets", int)
        seed = serialization.require(params, "seed", int)
        encoded = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "key_data", "|u1"),
            serialization.require_array(arrays, "key_offsets", "<i8"),
        )
        n = len(encoded)
        buckets = serialization.require_array(arrays, "buckets", "<i8", (n,))
        counts = serialization.require_array(arrays, "counts", "<i8", (n,))
        if not 1 <= nb <= MAX_K or n > nb:
            raise err("impossible HashedPAMG parameters")
        if n and (counts.min() < 1 or buckets.min() < 0 or buckets.max() >= nb):
            raise err("HashedPAMG counters must be positive and buckets in range")
        try:
            keys = [decode_key(b) for b in encoded]
        except (ValueError, TypeError, RecursionError) as exc:
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        sketch = cls(nb, seed)
        sketch._cells = {
            int(b): (x, int(c))
            for b, x, c in zip(buckets.tolist(), keys, counts.tolist(), strict=True)
        }
        if len(sketch._cells) != n:
            raise err("duplicate buckets in HashedPAMG bytes")
        if n and sketch._bucket_of(keys) != [int(b) for b in buckets.tolist()]:
            raise err("a key is stored outside its bucket")
        return sketch

    def __reduce__(self):
        return (HashedPAMG.from_bytes, (self.to_bytes(),))


@dataclass(frozen=True)
class HashedSelectionParameters:
    """Noise scale and cut of :func:`hashed_selection` for ``(m, epsilon, delta)``."""

    m: int
    epsilon: float
    delta: float
    sigma: float
    threshold: float


#: Relative safety margins on sigma and on the tail target (the sampler rounds sigma to a
#: lattice; the threshold's tail is that of the continuous Gaussian).
_SIGMA_MARGIN = 1e-9
_TAIL_MARGIN = 0.9


def hashed_selection_parameters(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """``sigma`` and ``threshold`` making :func:`hashed_selection` ``(epsilon, delta)``-DP.

    ``sigma`` is the analytic Gaussian scale (Balle and Wang, ICML 2018) for L2 sensitivity
    ``sqrt(m)`` at ``(epsilon, delta/2)``; ``threshold = 1 + sigma z`` with ``z`` the upper
    ``delta / (2 m e^epsilon)`` quantile of the standard normal (with a safety margin).

    Notes
    -----
    **Proof.** Let ``c``, ``c'`` be the counter vectors of neighbouring inputs (one unit added
    or removed). By the module's sensitivity argument they differ in at most ``m`` counters by
    1; let ``F`` (resp. ``G``) be the keys stored in ``c`` only (resp. ``c'`` only), each with
    counter 1, ``|F| + |G| <= m``, and ``A`` the keys stored in both. Write ``M_A`` for the
    release restricted to ``A``. On the event that no key of ``F`` passes the threshold,
    ``M(c) = M_A(c)``; that key's noise is independent of the rest, so for any output set
    ``O``: ``P[M(c) in O] <= P[M_A(c) in O] + |F| q`` with ``q = P[1 + Z >= threshold] <=
    delta/(2 m e^epsilon)``. ``M_A`` is the Gaussian mechanism on ``A`` (L2 distance at most
    ``sqrt(m)``) followed by post-processing, so ``P[M_A(c) in O] <= e^epsilon P[M_A(c') in O] +
    delta/2``, and ``P[M_A(c') in O] <= P[M(c') in O] + |G| q`` likewise. Together
    ``P[M(c) in O] <= e^epsilon P[M(c') in O] + delta/2 + (|F| + e^epsilon |G|) q <= e^epsilon
    P[M(c') in O] + delta``. The argument is symmetric, so the release is ``(epsilon,
    delta)``-DP.
    """
    mm = check_int(m, "m")
    eps = check_epsilon(epsilon)
    dl = check_delta(delta, allow_zero=False)
    sigma = analytic_gaussian_sigma(math.sqrt(mm), eps, dl / 2.0) * (1.0 + _SIGMA_MARGIN)
    q = _TAIL_MARGIN * dl / (2.0 * mm * math.exp(eps))
    z = -NormalDist().inv_cdf(q)
    return HashedSelectionParameters(mm, eps, dl, sigma, 1.0 + sigma * z)


def hashed_selection(
    sketch: HashedPAMG,
    m: int,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    k: int,
) -> list[tuple[Any, float]]:
    """The selected keys: stored counters plus Gaussian noise, cut, at most ``k`` largest.

    Parameters
    ----------
    sketch
        The merged :class:`HashedPAMG` of the window (bucket by bucket ``MERGE_1`` in a fixed,
        data-independent tree, as for PAMG sketches).
    m
        Contribution bound: distinct keys per unit and window.
    budget
        The selection's budget: ``PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0``
        (any other budget raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream; keys take their draws in canonical order.
    k
        Maximum number of keys returned (the largest noisy counters; post-processing).

    Returns
    -------
    list of (key, float)
        Selected keys with their noisy counters, largest first (ties in canonical key order).
        Keys and noisy counters are both covered by the guarantee below. The counters never
        exceed the keys' unit counts and fall below them where keys share a bucket, so
        select-then-count publishes only the keys and recounts them exactly, while
        :func:`hashed_pamg_gshm` publishes the counters as estimates.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP under add/remove of one privacy unit whose
    contribution is a set of at most ``m`` distinct keys (:func:`hashed_selection_parameters`).
    """
    if not isinstance(sketch, HashedPAMG):
        raise TypeError(f"sketch must be a HashedPAMG, got {type(sketch).__name__}")
    kk = check_int(k, "k")
    epsilon, delta = approx_budget(budget)
    check_stream(stream)
    params = hashed_selection_parameters(m, epsilon, delta)
    values = sketch.to_dict()
    keys = list(values)
    z = gaussian(stream, params.sigma, len(keys))
    ys = noisy_sums("gaussian", [values[x] for x in keys], z)
    kept = [(x, float(y)) for x, y in zip(keys, ys, strict=True) if y >= params.threshold]
    kept.sort(key=lambda xy: -xy[1])  # stable: ties keep canonical order
    return kept[:kk]


def hashed_pamg_gshm(
    sketch: HashedPAMG,
    m: int,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    k: int,
) -> HeavyHitterRelease:
    """User-level sparse histogram of a :class:`HashedPAMG`: GSHM at ``l = m`` on its counters.

    The release of :func:`hashed_selection` (the same noise draws, cut and ``k`` largest)
    with the noisy counters published as the keys' estimated unit counts. This is the
    Gaussian sparse histogram mechanism of Lebeda and Tětek (PODS 2023, Section 8, Theorem 5)
    applied to ``B`` one-counter PAMG sketches ([LT23, Algorithm 4] with ``k = 1`` per bucket)
    instead of one ``k``-counter sketch: one unit moves at most ``m`` counters by 1 here
    (module docstring), against up to ``k`` for a ``k``-counter sketch ([LT23, Section 8,
    Lemma 9]), so the noise and the threshold follow ``sqrt(m)`` instead of ``sqrt(k)``.

    Parameters
    ----------
    sketch
        The merged :class:`HashedPAMG` of the window (bucket by bucket ``MERGE_1`` in a fixed,
        data-independent tree).
    m
        Contribution bound: distinct keys per unit and window.
    budget
        The release's budget: ``PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0``
        (any other budget raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream; keys take their draws in canonical order.
    k
        Maximum number of keys released (the largest noisy counters; post-processing).

    Returns
    -------
    HeavyHitterRelease
        ``(key, noisy_counter)`` pairs. Before noise a counter ``c_x`` satisfies ``f(x) - L_x
        <= c_x <= f(x)``, with ``f(x)`` the number of units holding ``x`` and ``L_x`` the
        units of the other keys of its bucket (one-counter Misra-Gries error), so ``L_x = 0``
        when ``x`` is alone in its bucket. No error bound is attached: ``L_x`` depends on
        unreleased counts.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP under add/remove of one privacy unit whose
    contribution is a set of at most ``m`` distinct keys; the proof
    (:func:`hashed_selection_parameters`) covers the noisy counters, not only the keys.
    """
    pairs = hashed_selection(sketch, m, budget, stream, k=k)
    params = hashed_selection_parameters(m, *approx_budget(budget))
    return make_release(
        pairs,
        mechanism="hashed PAMG-GSHM",
        epsilon=params.epsilon,
        delta=params.delta,
        threshold=params.threshold,
        noise=NoiseSpec("gaussian", float(params.sigma)),
        k=k,
        neighbouring=user_set_relation(params.m),
        privacy_unit="user",
        details={"m": params.m, "l": params.m, "buckets": sketch.buckets, "sigma": params.sigma},
    )
