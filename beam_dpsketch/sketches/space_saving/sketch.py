"""SpaceSaving with ``k`` counters and a fixed, data-independent tie-break (not private).

Metwally, Agrawal and El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data
Streams" (ICDT 2005): ``k`` (label, count) slots; a monitored arrival adds 1 to its count, any
other arrival takes a slot of minimum count ``c_min``, relabels it and sets it to ``c_min + 1``.
Which minimum slot is taken is fixed here, as Lebeda and Tětek fix the slot Misra-Gries reuses
([LT23, Algorithm 1]): an unused slot first, else the minimum-count label with the smallest
canonical key (:func:`~beam_dpsketch.hashing.encode_key` order). The DP release
(:func:`~beam_dpsketch.sketches.space_saving.release.dp_space_saving`) relies on that rule
(docs/algorithms.md#space-saving).

Facts every run keeps (tested): the counts sum to the number of arrivals ``n``; every label
``x`` satisfies ``f(x) <= c(x) <= f(x) + c_min`` with ``c_min <= n/k``; every key with
``f(x) > c_min`` is monitored.
"""

from __future__ import annotations

import heapq
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_keys, decode_key, encode_key

__all__ = ["MAX_COUNTERS", "SpaceSaving"]

#: The most counters a sketch may have.
MAX_COUNTERS = 1 << 24


class SpaceSaving:
    """SpaceSaving with ``k`` counters, fed in arrival order, with a fixed tie-break.

    This object is **not** differentially private.

    Parameters
    ----------
    k
        Number of counters, in ``[1, 2**24]``.
    """

    KIND = "SpaceSaving"
    __slots__ = ("k", "n", "merged", "_cnt", "_enc", "_heap")

    def __init__(self, k: int) -> None:
        self.k = check_int(k, "k", upper=MAX_COUNTERS)
        self.n = 0
        #: True once two non-empty sketches were merged: no DP release takes it.
        self.merged = False
        self._cnt: dict[Any, int] = {}
        self._enc: dict[Any, bytes] = {}
        # One entry (count, encoded key, label) per monitored label, whose count is at most
        # the label's current count: a popped entry that is current is the minimum slot with
        # the smallest key (entries are refreshed lazily, so an increment costs O(1)).
        self._heap: list[tuple[int, bytes, Any]] = []

    # ---------------------------------------------------------------- updates

    def update(self, keys: Any) -> Self:
        """Process a batch of keys (numpy array, pyarrow array or sequence) in arrival order."""
        batch = canonical_keys(keys)
        cnt, enc, heap, k = self._cnt, self._enc, self._heap, self.k
        for x in batch:
            c = cnt.get(x)
            if c is not None:
                cnt[x] = c + 1
                continue
            if len(cnt) < k:
                # An unused slot (count 0) comes before any used one.
                e = encode_key(x)
                cnt[x], enc[x] = 1, e
                heapq.heappush(heap, (1, e, x))
                continue
            while True:
                stored, e_old, old = heap[0]
                current = cnt[old]
                if current == stored:
                    break
                heapq.heapreplace(heap, (current, e_old, old))
            del cnt[old], enc[old]
            e = encode_key(x)
            cnt[x], enc[x] = stored + 1, e
            heapq.heapreplace(heap, (stored + 1, e, x))
        self.n += len(batch)
        return self

    # ---------------------------------------------------------------- merging

    def merge(self, other: SpaceSaving) -> Self:
        """Merge ``other`` into this sketch.

        Merging with an empty sketch returns the other one unchanged (so a window holding one
        sketch yields exactly it). Two non-empty sketches are summed label by label and the
        ``k`` largest kept (ties by canonical key); the result is flagged :attr:`merged`, which
        the DP release refuses: its sensitivity facts hold for one sequential run only.
        """
        if not isinstance(other, SpaceSaving):
            raise ValueError(f"cannot merge a SpaceSaving with a {type(other).__name__}")
        if other.k != self.k:
            raise ValueError(f"cannot merge SpaceSaving sketches with different k: {self.k}")
        if other.n == 0 and not other.merged:
            return self
        if self.n == 0 and not self.merged:
            self._load(other.to_dict(), other.n, other.merged)
            return self
        total = dict(self._cnt)
        for x, c in other._cnt.items():
            total[x] = total.get(x, 0) + c
        kept = sorted(total.items(), key=lambda kv: (-kv[1], encode_key(kv[0])))[: self.k]
        self._load(dict(kept), self.n + other.n, True)
        return self

    def _load(self, counts: dict[Any, int], n: int, merged: bool) -> None:
        self._cnt = dict(counts)
        self._enc = {x: encode_key(x) for x in self._cnt}
        self._heap = [(c, self._enc[x], x) for x, c in self._cnt.items()]
        heapq.heapify(self._heap)
        self.n, self.merged = n, merged

    # ---------------------------------------------------------------- queries

    def to_dict(self) -> dict[Any, int]:
        """Monitored labels and their counts, in canonical key order. Not private."""
        return {x: self._cnt[x] for x in sorted(self._cnt, key=self._enc.__getitem__)}

    @property
    def c_min(self) -> int:
        """The minimum slot count (0 while a slot is unused). Not private."""
        if len(self._cnt) < self.k:
            return 0
        return min(self._cnt.values())

    def estimate(self, keys: Any) -> np.ndarray:
        """Count of each key (0 if not monitored), as int64: an over-estimate by at most
        :attr:`c_min` for monitored keys. Not private."""
        get = self._cnt.get
        return np.array([get(x, 0) for x in canonical_keys(keys)], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._cnt)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpaceSaving):
            return NotImplemented
        return (self.k, self.n, self.merged, self._cnt) == (
            other.k,
            other.n,
            other.merged,
            other._cnt,
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"SpaceSaving(k={self.k}, n={self.n}, labels={len(self._cnt)}, merged={self.merged})"

    def copy(self) -> SpaceSaving:
        """An independent copy."""
        return SpaceSaving.from_bytes(self.to_bytes())

    # ---------------------------------------------------------------- bytes

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`).

        The labels and counts determine the sketch: the tie-break is a function of them.
        """
        items = sorted((self._enc[x], c) for x, c in self._cnt.items())
        data, offsets = serialization.pack_bytes_list([e for e, _ in items])
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "counts": np.array([c for _, c in items], dtype=np.int64),
        }
        params = {"k": self.k, "n": self.n, "merged": self.merged}
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> SpaceSaving:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        k, n, merged = req(params, "k", int), req(params, "n", int), req(params, "merged", bool)
        encoded = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "key_data", "|u1"),
            serialization.require_array(arrays, "key_offsets", "<i8"),
        )
        counts = serialization.require_array(arrays, "counts", "<i8", (len(encoded),))
        if not 1 <= k <= MAX_COUNTERS or n < 0 or len(encoded) > k:
            raise err("impossible SpaceSaving parameters")
        if len(counts) and (counts.min() < 1 or int(counts.sum()) > n):
            raise err("SpaceSaving counts must be positive and sum to at most n")
        try:
            keys = [decode_key(b) for b in encoded]
        except (ValueError, TypeError, RecursionError) as exc:
            # The decoder's message can quote the key's bytes: keep only its type.
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        counts_by_key = dict(zip(keys, counts.tolist(), strict=True))
        if len(counts_by_key) != len(keys):
            raise err("duplicate keys in SpaceSaving bytes")
        sketch = cls(k)
        sketch._load(counts_by_key, n, merged)
        return sketch

    def __reduce__(self):
        return (SpaceSaving.from_bytes, (self.to_bytes(),))
