"""User-level DP Misra-Gries: the PAMG sketch (Algorithm 4) and user-level PMG (group privacy).

[LT23, Section 8] (Section 8 of the paper). The GSHM release of a PAMG sketch is
:func:`beam_dpsketch.sketches.misra_gries.merged.pamg_gshm` (``l = k``: one unit can move every
counter). The ``pamg-gshm`` mechanism of the Beam transforms uses one-counter PAMG sketches per
hash bucket instead, whose neighbours differ in at most ``m`` counters, released at ``l = m``
(:func:`beam_dpsketch.sketches.misra_gries.hashed.hashed_pamg_gshm`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_key, canonical_keys, decode_key, encode_key
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.calibration import user_level_pmg_parameters
from beam_dpsketch.sketches.misra_gries.pmg_release import (
    pmg_noisy_sketch,
    pmg_parameters,
    require_single_stream,
)
from beam_dpsketch.sketches.misra_gries.release import (
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.sketch import MAX_K, MisraGries

__all__ = ["PAMGSketch", "flatten_users", "merge_k", "user_level_pmg"]


def user_set_relation(m: int) -> str:
    """Neighbouring relation of PAMG releases ([LT23, Definition 1] user level, [LT23, Algorithm 4])."""
    return (
        f"add/remove one user, whose contribution is a set of at most m={m} distinct elements "
        "([LT23, Definition 1; Algorithm 4])"
    )


def user_group_relation(m: int) -> str:
    """Neighbouring relation of user-level PMG ([LT23, Definition 1] Corollary 3 variant, [LT23, Section 8, Lemmas 1-2 and Corollary 3])."""
    return (
        f"add/remove up to m={m} elements of one user, not necessarily distinct or consecutive "
        "(group privacy, [LT23, Definition 1; Section 8, Lemmas 1-2 and Corollary 3])"
    )


def user_flattened_relation(m: int) -> str:
    """Neighbouring relation of user-level PURE_PP ([LT23, Definition 1] user level, [LT23,
    Section 8, Lemma 4]): one user's elements removed from the flattened stream."""
    return (
        f"add/remove one user, whose contribution is at most m={m} elements, flattened into one "
        "stream ([LT23, Definition 1; Section 8, Lemma 4])"
    )


def merge_k(k: int, sketches: Iterable[Mapping[Any, int]]) -> dict[Any, int]:
    """Multi-way ``MERGE_k`` (Agarwal et al., [LT23, Section 7; Section 7, Lemma 1 and Corollary 2]).

    Sum the positive counters; if more than ``k`` keys remain, subtract the ``(k+1)``-th largest
    sum (ties with multiplicity) and keep the positive results. Not differentially private.
    """
    total: dict[Any, int] = {}
    for sk in sketches:
        for x, c in sk.items():
            if c > 0:
                total[x] = total.get(x, 0) + int(c)
    if len(total) <= k:
        return total
    values = np.fromiter(total.values(), dtype=np.int64, count=len(total))
    v = int(np.partition(values, len(values) - k - 1)[len(values) - k - 1])
    return {x: c - v for x, c in total.items() if c > v}


class PAMGSketch:
    """The Privacy-Aware Misra-Gries sketch (PAMG, Algorithm 4 of Lebeda and Tetek).

    Each stream item is one user's **set** of at most ``m`` distinct elements. The user's
    elements are all incremented; if more than ``k`` keys are then stored, every counter is
    decremented once and the zeros are deleted (at most once per user). This equals folding
    ``MERGE_k(c, {x: 1 for x in X})`` over the users ([LT23, Algorithm 4], verified in the tests), and
    sketches merge with ``MERGE_k`` (:meth:`merge`).

    Invariants (docs/algorithms.md#mg-oracles): at most ``k`` keys after each user, all positive, and
    ``f(x) - N/(k+1) <= c_x <= f(x)`` with ``f(x)`` the number of users holding ``x`` and ``N``
    the total number of (user, element) pairs (Lemma 8; Lemma 11 after merges). Sensitivity
    ([LT23, Section 8, Lemma 9 and Corollary 10]): adding or removing one user changes at most ``k`` counters, each
    by exactly 1, all in the same direction, also after any fixed tree of merges; so release with
    GSHM at ``l = k`` (never ``l = m``): :func:`~.merged.pamg_gshm`.

    This object is **not** differentially private.

    Parameters
    ----------
    k
        Number of counters, in ``[1, 2**24]``.
    m
        Maximum number of distinct elements per user (contribution bound, docs/algorithms.md#mg-partition).
    allow_m_gt_k
        ``m > k`` raises ``ValueError`` unless this is true (docs/algorithms.md#mg-e17: PAMG stays correct and
        private, but its error bound ``N/(k+1) >= f(x)`` is vacuous); then it only warns.
    """

    KIND = "PAMGSketch"
    __slots__ = ("k", "m", "n_users", "total", "merged", "_cnt")

    def __init__(self, k: int, m: int, *, allow_m_gt_k: bool = False) -> None:
        self.k = check_int(k, "k", upper=MAX_K)
        self.m = check_int(m, "m")
        if self.m > self.k:
            msg = (
                f"m={m} > k={k}: the PAMG error bound N/(k+1) is then vacuous ([LT23, "
                "Section 8]; erratum MG-E17 in docs/algorithms.md#mg-e17)"
            )
            if not allow_m_gt_k:
                raise ValueError(msg + "; pass allow_m_gt_k=True to proceed anyway")
            warnings.warn(msg, stacklevel=2)
        self.n_users = 0
        self.total = 0
        self.merged = False
        self._cnt: dict[Any, int] = {}

    # ---------------------------------------------------------------- updates

    def update_user(self, items: Iterable[Any]) -> Self:
        """Add one user's contribution, treated as a **set** (duplicates count once).

        Raises ``ValueError`` if it has more than ``m`` distinct elements: bound contributions
        first (group by user, deduplicate, keep at most ``m``; docs/algorithms.md#mg-partition).
        """
        if isinstance(items, str | bytes):
            raise TypeError("a user's items must be a collection of keys, not a single str/bytes")
        distinct = set(canonical_keys(list(items)))
        if len(distinct) > self.m:
            # The number of distinct elements is the user's data: the message names only m.
            raise ValueError(
                f"a user contributes more than m={self.m} distinct elements: bound each user's "
                "contribution before sketching (docs/algorithms.md#mg-partition)"
            )
        cnt = self._cnt
        for x in distinct:
            cnt[x] = cnt.get(x, 0) + 1
        if len(cnt) > self.k:
            self._cnt = {x: c - 1 for x, c in cnt.items() if c > 1}
        self.n_users += 1
        self.total += len(distinct)
        return self

    def update_users(self, users: Iterable[Iterable[Any]]) -> Self:
        """:meth:`update_user` for each user, in order."""
        for user in users:
            self.update_user(user)
        return self

    # ---------------------------------------------------------------- merging

    def check_compatible(self, other: Any) -> None:
        """Raise ``ValueError`` unless ``other`` is a PAMGSketch with the same ``k`` and ``m``."""
        if not isinstance(other, PAMGSketch):
            raise ValueError(f"cannot merge a PAMGSketch with a {type(other).__name__}")
        if (other.k, other.m) != (self.k, self.m):
            raise ValueError(
                f"cannot merge PAMG sketches with different (k, m): {(self.k, self.m)} vs "
                f"{(other.k, other.m)}"
            )

    def merge(self, *others: PAMGSketch) -> Self:
        """Multi-way ``MERGE_k`` of this sketch with ``others`` (in that order); sets ``merged``.

        Merge in a fixed, data-independent order (docs/algorithms.md#mg-partition strict mode) for the DP release.
        """
        for other in others:
            self.check_compatible(other)
        self._cnt = merge_k(self.k, [self._cnt, *(o._cnt for o in others)])
        for other in others:
            self.n_users += other.n_users
            self.total += other.total
        self.merged = True
        return self

    # ---------------------------------------------------------------- queries

    def to_dict(self) -> dict[Any, int]:
        """Positive counters in canonical key order. Not private."""
        return {x: self._cnt[x] for x in sorted(self._cnt, key=encode_key)}

    def estimate(self, keys: Iterable[Any]) -> np.ndarray:
        """Counter of each key (0 if not stored), as int64. Not private."""
        get = self._cnt.get
        return np.array([get(x, 0) for x in canonical_keys(list(keys))], dtype=np.int64)

    def error_bound(self) -> Fraction:
        """``N/(k+1)``: every key satisfies ``f(x) - N/(k+1) <= c_x <= f(x)`` (Lemmas 8, 11)."""
        return Fraction(self.total, self.k + 1)

    def __len__(self) -> int:
        return len(self._cnt)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PAMGSketch):
            return NotImplemented
        return (self.k, self.m, self.n_users, self.total, self.merged, self._cnt) == (
            other.k,
            other.m,
            other.n_users,
            other.total,
            other.merged,
            other._cnt,
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (
            f"PAMGSketch(k={self.k}, m={self.m}, users={self.n_users}, keys={len(self._cnt)}, "
            f"merged={self.merged})"
        )

    def copy(self) -> PAMGSketch:
        """An independent copy."""
        return PAMGSketch.from_bytes(self.to_bytes())

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`)."""
        items = list(self.to_dict().items())
        data, offsets = serialization.pack_bytes_list([encode_key(x) for x, _ in items])
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "counts": np.array([c for _, c in items], dtype=np.int64),
        }
        params = {
            "k": self.k,
            "m": self.m,
            "n_users": self.n_users,
            "total": self.total,
            "merged": self.merged,
        }
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> PAMGSketch:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        k, m = req(params, "k", int), req(params, "m", int)
        n_users, total = req(params, "n_users", int), req(params, "total", int)
        merged = req(params, "merged", bool)
        encoded = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "key_data", "|u1"),
            serialization.require_array(arrays, "key_offsets", "<i8"),
        )
        counts = serialization.require_array(arrays, "counts", "<i8", (len(encoded),))
        if not 1 <= k <= MAX_K or m < 1 or n_users < 0 or total < 0 or len(encoded) > k:
            raise err("impossible PAMGSketch parameters")
        if len(counts) and (counts.min() < 1 or int(counts.sum()) > total):
            raise err("PAMG counters must be positive and sum to at most N")
        try:
            keys = [decode_key(b) for b in encoded]
        except (ValueError, TypeError, RecursionError) as exc:
            # The decoder's message can quote the key's bytes: keep only its type.
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        sketch = cls.__new__(cls)
        sketch.k, sketch.m, sketch.n_users, sketch.total, sketch.merged = (
            k,
            m,
            n_users,
            total,
            merged,
        )
        sketch._cnt = dict(zip(keys, counts.tolist(), strict=True))
        if len(sketch._cnt) != len(keys):
            raise err("duplicate keys in PAMGSketch bytes")
        return sketch

    def __reduce__(self):
        return (PAMGSketch.from_bytes, (self.to_bytes(),))


def flatten_users(users: Iterable[Iterable[Any]]) -> list[Any]:
    """Flatten user contributions for :func:`user_level_pmg`, each user's elements in canonical order.

    [LT23, Section 8, Lemma 2 and Corollary 3]: flatten the sets in a fixed within-set order. Users keep
    their order; repeated elements within a user are kept (the group-privacy analysis allows
    them).
    """
    out: list[Any] = []
    for user in users:
        if isinstance(user, str | bytes):
            raise TypeError("each user must be a collection of keys, not a single str/bytes")
        out.extend(sorted((canonical_key(x) for x in user), key=encode_key))
    return out


def user_level_pmg(
    sketch: MisraGries,
    budget: PrivacyBudget,
    m: int,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
) -> HeavyHitterRelease:
    """User-level PMG by group privacy ([LT23, Section 8, Lemmas 1-2 and Corollary 3]).

    Runs :func:`~.pmg_release.pmg` on the MG sketch of the **flattened** user stream
    (see :func:`flatten_users`) with ``eps0 = eps/m`` and ``delta0 = delta/(m e^eps)``
    (:func:`beam_dpsketch.sketches.misra_gries.calibration.user_level_pmg_parameters`); group privacy over
    ``m`` one-element steps gives ``(eps, delta e^(-eps/m)) <= (eps, delta)``. Noise is
    ``Lap(m/eps)`` shared plus per key (discrete by default), threshold
    ``1 + 2 (m/eps) ln(3 m e^eps / delta)`` for Laplace (discrete: ``tau_geo`` at
    ``(eps0, delta0)``). Error ``n/(k+1) + O(m log(m/delta)/eps)``: linear in ``m``, which
    [LT23, Section 8, Lemma 7] shows is unavoidable for any release of MG counters; for ``m`` above
    about ``sqrt(k)`` prefer PAMG + GSHM (:func:`~.merged.pamg_gshm`).

    Guarantee: ``(epsilon, delta)``-DP when neighbouring streams differ by adding/removing up to
    ``m`` elements of one user (not necessarily distinct or consecutive). Confidence note: the
    ``delta0`` constant is (third-party code) / re-derived, not verified against the paper (docs/algorithms.md#mg-e1).

    Parameters
    ----------
    sketch
        Single-stream ``MisraGries`` of the flattened stream (merged sketches raise
        ``TypeError``; flattened leaves in a merge tree are not analysed, docs/algorithms.md#mg-merged).
    budget
        The user-level budget: ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1``
        (any other budget raises ``ValueError`` naming ``budget``).
    m
        Maximum number of elements per user, ``>= 1``.
    stream
        The release's noise stream.
    noise
        ``"discrete_laplace"`` (default) or ``"laplace"``.
    """
    require_single_stream(sketch, "user_level_pmg")
    eps, dl = approx_budget(budget)
    mm = check_int(m, "m")
    check_stream(stream)
    if mm > sketch.k:
        warnings.warn(
            f"m={mm} > k={sketch.k}: the MG error bound is then vacuous for user-level data "
            "([LT23, Section 8] and docs/algorithms.md#misra-gries)",
            stacklevel=2,
        )
    eps0, delta0, _ = user_level_pmg_parameters(eps, dl, mm)
    scale, tau, name = pmg_parameters(
        eps0, delta0, noise=noise, threshold_form="union_bound", draws=6
    )
    pairs = pmg_noisy_sketch(sketch, noise, scale, tau, stream)
    return make_release(
        pairs,
        mechanism="user-level " + name,
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=NoiseSpec(noise, float(scale), float(scale)),
        k=sketch.k,
        neighbouring=user_group_relation(mm),
        privacy_unit="user",
        details={
            "m": mm,
            "epsilon0": eps0,
            "delta0": delta0,
            "epsilon0_effective": float(1 / scale),
            "group_delta": dl * math.exp(-eps / mm),
        },
    )
