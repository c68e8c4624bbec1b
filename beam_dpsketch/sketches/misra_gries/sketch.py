"""Misra-Gries summary in the variant of Lebeda and Tetek (Algorithm 1), with the Agarwal et al. merge.

No privacy here: the DP releases (PMG, pure DP, merged, user level) build on this class.
Lebeda and Tetek (PODS 2023), cited as [LT23]: [LT23, Algorithm 1] (the variant), docs/algorithms.md#mg-implementation (efficient implementation),
docs/algorithms.md#mg-weighted (weighted updates), [LT23, Section 7] (merge), docs/algorithms.md#mg-oracles (invariants, tested).
"""

from __future__ import annotations

import sys
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.hashing import canonical_keys, decode_key, encode_key
from beam_dpsketch.sketches.linear.base import validate_counts
from beam_dpsketch.sketches.misra_gries.sizing import MAX_K, k_for_memory, suggest_k

__all__ = ["MisraGries"]


class _Dummy:
    """Placeholder key ``D_i``: never equal to a user key, ordered before every user key."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __eq__(self, other: object) -> bool:
        return type(other) is _Dummy and other.index == self.index

    def __hash__(self) -> int:
        return self.index

    def __repr__(self) -> str:
        return f"D_{self.index}"


_TYPE_RANK = {int: 1, str: 2, bytes: 3}


def _order(key: Any) -> tuple[int, Any]:
    """The fixed, data-independent total order on keys used to pick the smallest zero key.

    Dummies come first (by index), then ints (numerically), strs (by code point, which is also
    their UTF-8 byte order), bytes, and tuples (by canonical encoding). [LT23, Algorithm 1] allows any fixed
    order that does not depend on the stream; this one sorts natively for homogeneous keys, which
    docs/algorithms.md#mg-order's encoding-bytes order cannot (it was 60% of the update time).
    """
    if type(key) is _Dummy:
        return (0, key.index)
    rank = _TYPE_RANK.get(type(key))
    if rank is None:
        return (4, encode_key(key))
    return (rank, key)


def _sorted_real_keys(keys: list[Any]) -> list[Any]:
    """Sort user keys by :func:`_order`, natively when they all share one of int/str/bytes."""
    if keys:
        first = type(keys[0])
        if first in _TYPE_RANK and all(type(x) is first for x in keys):
            return sorted(keys)
    return sorted(keys, key=_order)


class MisraGries:
    """Misra-Gries with ``k`` counters in the variant of [LT23, Algorithm 1].

    The sketch always holds exactly ``k`` (key, counter) pairs: it starts with ``k`` dummy keys
    at count 0, keeps keys whose counter drops to 0, and when a slot is needed replaces the
    *smallest* zero-count key in a fixed order (dummies first, then keys by canonical encoding).
    Its estimates and its decrement count ``d`` equal standard Misra-Gries exactly, so for every
    key ``f(x) - d <= estimate(x) <= f(x)`` with ``d <= n / (k + 1)`` (Bose et al., Fact 1). The
    variant exists because it bounds how many keys neighbouring sketches differ in ([LT23, Section 5, Lemma 2]),
    which the private release uses.

    Updates process a batch **in arrival order**, with the same result as one key at a time
    (weighted updates per docs/algorithms.md#mg-weighted give the same state as repeated unit updates).

    :meth:`merge` is the Agarwal et al. (2013) merge ([LT23, Section 7]): sum the positive counters, and
    if more than ``k`` keys remain subtract the ``(k+1)``-th largest value. It is commutative but
    not associative; any merge tree keeps ``f(x) - n/(k+1) <= estimate(x) <= f(x)``. A merged
    sketch records ``merged = True`` (its provenance matters to the DP release, docs/algorithms.md#misra-gries), and
    ``d`` then holds the bound on the total undercount of any key.

    This object is **not** differentially private.

    Parameters
    ----------
    k
        Number of counters, in ``[1, 2**24]``.
    """

    KIND = "MisraGries"
    __slots__ = ("k", "n", "d", "merged", "_cnt", "_nzero", "_zero_list", "_zp")

    def __init__(self, k: int):
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            raise TypeError(f"k must be an int, got {type(k).__name__}")
        if not 1 <= int(k) <= MAX_K:
            raise ValueError(f"k must be in [1, {MAX_K}], got {k}")
        self.k = int(k)
        self.n = 0
        self.d = 0
        self.merged = False
        self._reset_slots({})

    def _reset_slots(self, positive: dict[Any, int]) -> None:
        """Hold ``positive`` (at most k keys, counts >= 1) and fill the other slots with dummies."""
        cnt: dict[Any, int] = {_Dummy(i): 0 for i in range(self.k - len(positive))}
        cnt.update(positive)
        self._cnt = cnt
        self._rebuild_zero_list()

    def _rebuild_zero_list(self) -> None:
        zeros = [y for y, c in self._cnt.items() if c == 0]
        dummies = sorted((y for y in zeros if type(y) is _Dummy), key=_order)
        self._zero_list = dummies + _sorted_real_keys([y for y in zeros if type(y) is not _Dummy])
        self._zp = 0
        self._nzero = len(self._zero_list)

    # ---------------------------------------------------------------- updates

    def update(self, keys: Any, counts: Any = None) -> Self:
        """Process a batch of keys in arrival order (weight 1 each, or positive ``counts``).

        Parameters
        ----------
        keys
            numpy array, pyarrow array or sequence of keys (str, bytes, int, bool, tuples).
        counts
            Optional positive integer weight per key; ``update([x], [w])`` equals ``w`` unit
            updates of ``x``.

        Returns
        -------
        self
        """
        keys = canonical_keys(keys)
        weights = validate_counts(counts, len(keys))
        if weights is None:
            self._update_unit(keys)
        else:
            if len(weights) and weights.min() < 1:
                raise ValueError("Misra-Gries counts must be positive integers (insert-only)")
            for x, w in zip(keys, weights.tolist(), strict=True):
                self._update_weighted(x, w)
        return self

    def _update_unit(self, keys: list[Any]) -> None:
        # The hot loop of docs/algorithms.md#mg-implementation: locals only, one dict lookup per hit.
        cnt = self._cnt
        get = cnt.get
        nzero, zero_list, zp, d = self._nzero, self._zero_list, self._zp, self.d
        for x in keys:
            c = get(x)
            if c is not None:
                if c == 0:
                    nzero -= 1
                cnt[x] = c + 1
            elif nzero:
                while True:
                    z = zero_list[zp]
                    zp += 1
                    if get(z) == 0:
                        break
                del cnt[z]
                cnt[x] = 1
                nzero -= 1
            else:
                # Branch 2 runs only when no counter is 0, so no dummy is left to sort.
                d += 1
                zeros = []
                for y in cnt:
                    c = cnt[y] - 1
                    cnt[y] = c
                    if c == 0:
                        zeros.append(y)
                zero_list = _sorted_real_keys(zeros)
                zp = 0
                nzero = len(zero_list)
        self._nzero, self._zero_list, self._zp, self.d = nzero, zero_list, zp, d
        self.n += len(keys)

    def _pop_smallest_zero(self) -> Any:
        while True:
            z = self._zero_list[self._zp]
            self._zp += 1
            if self._cnt.get(z) == 0:
                self._nzero -= 1
                return z

    def _update_weighted(self, x: Any, w: int) -> None:
        cnt = self._cnt
        self.n += w
        while w > 0:
            c = cnt.get(x)
            if c is not None:
                if c == 0:
                    self._nzero -= 1
                cnt[x] = c + w
                return
            if self._nzero:
                del cnt[self._pop_smallest_zero()]
                cnt[x] = w
                return
            # t decrements in a row, each consuming one copy of x (docs/algorithms.md#mg-weighted).
            t = min(w, min(cnt.values()))
            for y in cnt:
                cnt[y] -= t
            self.d += t
            w -= t
            self._rebuild_zero_list()

    # ---------------------------------------------------------------- queries

    def estimate(self, keys: Any) -> np.ndarray:
        """Counter of each key in a batch (0 if not held), as int64."""
        get = self._cnt.get
        return np.array([get(x, 0) for x in canonical_keys(keys)], dtype=np.int64)

    def to_dict(self) -> dict[Any, int]:
        """The standard Misra-Gries view: keys with a positive counter, in canonical key order."""
        items = [(x, c) for x, c in self._cnt.items() if c > 0]
        items.sort(key=lambda item: encode_key(item[0]))
        return dict(items)

    def slots(self) -> list[tuple[Any, int]]:
        """All ``k`` (key, counter) pairs of Algorithm 1 in the fixed order; dummies are ``None``."""
        ordered = sorted(self._cnt.items(), key=lambda item: _order(item[0]))
        return [(None if type(x) is _Dummy else x, c) for x, c in ordered]

    def error_bound(self) -> int:
        """``d``: every key satisfies ``f(x) - d <= estimate(x) <= f(x)``, and ``d <= n/(k+1)``."""
        return self.d

    # ---------------------------------------------------------------- merging

    def check_compatible(self, other: Any) -> None:
        """Raise ``ValueError`` unless ``other`` is a MisraGries with the same ``k``."""
        if type(other) is not MisraGries:
            raise ValueError(f"cannot merge a MisraGries with a {type(other).__name__}")
        if other.k != self.k:
            raise ValueError(
                f"cannot merge MisraGries sketches with different k: {self.k} vs {other.k}"
            )

    def is_empty(self) -> bool:
        """True if no key ever reached this sketch (directly or through a merge)."""
        return self.n == 0 and not self.merged

    def merge(self, other: MisraGries) -> Self:
        """Agarwal et al. merge of ``other`` into this sketch ([LT23, Section 7]); sets ``merged``.

        An empty sketch is the identity: merging it changes nothing, and merging into it adopts
        ``other``'s exact state (zero-count keys and provenance included). Beam creates and
        merges empty accumulators freely, and a real merge would needlessly drop zero-count keys
        and mark a single-stream sketch as merged, which changes its DP release (docs/algorithms.md#mg-merged).
        """
        self.check_compatible(other)
        if other.is_empty():
            return self
        if self.is_empty():
            self.n, self.d, self.merged = other.n, other.d, other.merged
            self._cnt = dict(other._cnt)
            self._rebuild_zero_list()
            return self
        total = {x: c for x, c in self._cnt.items() if c > 0}
        for x, c in other._cnt.items():
            if c > 0:
                total[x] = total.get(x, 0) + c
        v = 0
        if len(total) > self.k:
            values = np.fromiter(total.values(), dtype=np.int64, count=len(total))
            # (k+1)-th largest, ties counted with multiplicity.
            v = int(np.partition(values, len(values) - self.k - 1)[len(values) - self.k - 1])
            total = {x: c - v for x, c in total.items() if c > v}
        self.n += other.n
        self.d += other.d + v
        self.merged = True
        self._reset_slots(total)
        return self

    def copy(self) -> MisraGries:
        return MisraGries.from_bytes(self.to_bytes())

    # ---------------------------------------------------------------- sizing

    @classmethod
    def from_error(cls, max_error: float, n: int) -> MisraGries:
        """An empty sketch whose error bound ``n/(k+1)`` is at most ``max_error`` for ``n``
        elements (the smallest such ``k``, :func:`~.sizing.suggest_k`)."""
        return cls(suggest_k(max_error=max_error, n=n))

    @classmethod
    def from_memory(cls, memory: int) -> MisraGries:
        """An empty sketch with the most counters that fit in ``memory`` bytes
        (:func:`~.sizing.k_for_memory`, an estimate for short keys)."""
        return cls(k_for_memory(memory))

    # ---------------------------------------------------------------- identity, size, bytes

    def __eq__(self, other: object) -> bool:
        if type(other) is not MisraGries:
            return NotImplemented
        return (self.k, self.n, self.d, self.merged, self._cnt) == (
            other.k,
            other.n,
            other.d,
            other.merged,
            other._cnt,
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        held = sum(1 for c in self._cnt.values() if c > 0)
        return f"MisraGries(k={self.k}, n={self.n}, d={self.d}, positive_keys={held}, merged={self.merged})"

    def memory_bytes(self) -> int:
        """Approximate bytes held: the dict, its keys and counters, and the zero-key list."""
        size = sys.getsizeof(self._cnt) + sys.getsizeof(self._zero_list)
        for x, c in self._cnt.items():
            size += sys.getsizeof(x) + sys.getsizeof(c)
        return size

    def to_bytes(self) -> bytes:
        """Serialize with the versioned format of :mod:`beam_dpsketch.serialization`."""
        real = [(x, c) for x, c in self._cnt.items() if type(x) is not _Dummy]
        real.sort(key=lambda item: encode_key(item[0]))
        data, offsets = serialization.pack_bytes_list([encode_key(x) for x, _ in real])
        dummies = sorted(x.index for x in self._cnt if type(x) is _Dummy)
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "counts": np.array([c for _, c in real], dtype=np.int64),
            "dummy_ids": np.array(dummies, dtype=np.int64),
        }
        params = {"k": self.k, "n": self.n, "d": self.d, "merged": self.merged}
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> MisraGries:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes.

        Beyond the format, docs/algorithms.md#mg-oracles invariants are checked: exactly ``k`` slots, counters
        summing to ``n - (k+1)d`` (at most that after a merge) and ``(k+1)d <= n``.
        """
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        k, n, d = req(params, "k", int), req(params, "n", int), req(params, "d", int)
        merged = req(params, "merged", bool)
        encoded = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "key_data", "|u1"),
            serialization.require_array(arrays, "key_offsets", "<i8"),
        )
        counts = serialization.require_array(arrays, "counts", "<i8", (len(encoded),))
        dummy_ids = serialization.require_array(arrays, "dummy_ids", "<i8")
        # Check sizes against the arrays before building anything of size k.
        if not 1 <= k <= MAX_K or dummy_ids.ndim != 1 or len(encoded) + len(dummy_ids) != k:
            raise err("a MisraGries sketch must hold exactly k slots, 1 <= k <= 2**24")
        if n < 0 or d < 0 or (k + 1) * d > n:
            # The totals are exact counts of the data: name the constraint, not the values.
            raise err("impossible Misra-Gries totals: need n >= 0, d >= 0 and (k+1)d <= n")
        if len(counts) and counts.min() < 0:
            raise err("negative Misra-Gries counter")
        held = int(counts.sum())
        if held > n - (k + 1) * d or (not merged and held != n - (k + 1) * d):
            raise err("Misra-Gries counters do not add up to n - (k+1)d")
        if len(dummy_ids) and (
            dummy_ids.min() < 0 or len(set(dummy_ids.tolist())) != len(dummy_ids)
        ):
            raise err("malformed dummy slots")
        try:
            keys = [decode_key(b) for b in encoded]
        except (ValueError, TypeError, RecursionError) as exc:
            # The decoder's message can quote the key's bytes: keep only its type.
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        cnt: dict[Any, int] = {_Dummy(i): 0 for i in dummy_ids.tolist()}
        cnt.update(zip(keys, counts.tolist(), strict=True))
        if len(cnt) != k:
            raise err("duplicate keys in MisraGries bytes")
        sketch = cls.__new__(cls)
        sketch.k, sketch.n, sketch.d, sketch.merged = k, n, d, merged
        sketch._cnt = cnt
        sketch._rebuild_zero_list()
        return sketch

    def __reduce__(self):
        return (MisraGries.from_bytes, (self.to_bytes(),))
