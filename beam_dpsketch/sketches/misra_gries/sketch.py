"""Misra-Gries summary in the variant of Lebeda and Tetek (Algorithm 1), with the Agarwal et al. merge.

No privacy here: the DP releases (PMG, pure DP, merged, user level) build on this class.
Lebeda and Tetek (PODS 2023), cited as [LT23]: Algorithm 1 (the variant), docs/algorithms.md#mg-implementation (efficient implementation),
docs/algorithms.md#mg-weighted (weighted updates), [LT23, Section 7] (merge), docs/algorithms.md#mg-oracles (invariants, tested).

Two update orders: :meth:`MisraGries.update` runs Algorithm 1 in arrival order (in C for batches
of ints, strs or bytes, docs/algorithms.md#mg-implementation; one Python step per key otherwise);
:meth:`MisraGries.update_multiset` runs it on the batch sorted by the fixed key order, from each
distinct key's total weight (numpy/Arrow counting, one Python step per distinct key), which is
what a shard that is the unit of the privacy analysis may use (see its docstring).
"""

from __future__ import annotations

import heapq
import sys
from typing import Any, Self

import numpy as np
import pyarrow as pa

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int
from beam_dpsketch.extensions import load_extension
from beam_dpsketch.hashing import canonical_keys, decode_key, encode_key
from beam_dpsketch.sketches.linear.base import validate_counts
from beam_dpsketch.sketches.misra_gries.batches import (
    INT64_MAX,
    Distinct,
    as_list,
    coded_batch,
    gather,
    multiset,
    multiset_counts,
    sorted_keys,
)
from beam_dpsketch.sketches.misra_gries.batches import key_order as _order
from beam_dpsketch.sketches.misra_gries.sizing import MAX_K, k_for_memory, suggest_k

# The compiled update loop, or its bit-identical pure-Python fallback (no C compiler).
kernel = load_extension(
    "beam_dpsketch.sketches.misra_gries.kernel",
    "beam_dpsketch.sketches.misra_gries.kernel_fallback",
)

__all__ = ["MisraGries", "multiset_counts"]

# Below this many keys a batch stays on the Python loop: converting the held keys to codes and
# back costs about as much as updating a few thousand keys in Python.
_COMPILED_MIN_BATCH = 1024
_BATCH_TYPES = (list, np.ndarray, pa.Array, pa.ChunkedArray)


class MisraGries:
    """Misra-Gries with ``k`` counters in the variant of [LT23, Algorithm 1].

    The sketch always holds exactly ``k`` (key, counter) slots: it starts with ``k`` dummy keys
    at count 0, keeps keys whose counter drops to 0, and when a slot is needed replaces the
    *smallest* zero-count key in a fixed order (dummies first, then keys by :func:`_order`).
    Its estimates and its decrement count ``d`` equal standard Misra-Gries exactly, so for every
    key ``f(x) - d <= estimate(x) <= f(x)`` with ``d <= n / (k + 1)`` (Bose et al., Fact 1). The
    variant exists because it bounds how many keys neighbouring sketches differ in ([LT23, Section 5, Lemma 2]),
    which the private release uses.

    Dummy slots are not materialised: the sketch stores its real keys and the indices of the
    remaining dummies as a range, so memory follows the keys that arrived, not ``k``.

    :meth:`update` processes a batch **in arrival order**, with the same result as one key at a
    time (weighted updates per docs/algorithms.md#mg-weighted give the same state as repeated
    unit updates). :meth:`update_multiset` processes a batch as a multiset, in the fixed key
    order: see there for when that is the right call.

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
    __slots__ = ("k", "n", "d", "merged", "_cnt", "_dummies", "_nzero", "_zero_list", "_zp")

    def __init__(self, k: int):
        self.k = check_int(k, "k", upper=MAX_K)
        self.n = 0
        self.d = 0
        self.merged = False
        self._reset_slots({})

    def _reset_slots(self, positive: dict[Any, int]) -> None:
        """Hold ``positive`` (at most k keys, counts >= 1) and fill the other slots with dummies."""
        self._cnt = dict(positive)
        self._dummies: range | list[int] = range(self.k - len(positive))
        self._rebuild_zero_list()

    def _rebuild_zero_list(self) -> None:
        """The zero-count real keys in the fixed order (the dummies are kept apart)."""
        self._zero_list = sorted_keys([y for y, c in self._cnt.items() if c == 0])
        self._zp = 0
        self._nzero = len(self._zero_list)

    def _use_dummies(self, used: int) -> None:
        """Replace the ``used`` smallest dummies (they are always the smallest zero keys)."""
        if used:
            dummies = self._dummies
            if type(dummies) is range:
                self._dummies = dummies[used:]
            else:
                del dummies[:used]

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
        if counts is None and self._update_compiled(keys):
            return self
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

    def update_multiset(self, keys: Any, counts: Any = None) -> Self:
        """Process a batch as a multiset: each distinct key once, with its total weight, in the
        fixed key order :func:`_order`.

        The result is exactly :meth:`update` on the batch **sorted by** :func:`_order` (stable
        order is irrelevant: equal keys are interchangeable), i.e. Algorithm 1 run on the
        canonically sorted stream. Why: the copies of one key are consecutive in the sorted
        stream, and ``w`` consecutive unit updates of ``x`` equal one weighted update
        (docs/algorithms.md#mg-weighted): if ``x`` is held its counter grows by ``w``; else if a
        zero key exists, the first copy replaces the smallest one and the others increment it;
        else each copy decrements every counter until one reaches 0 (``t = min(w, min counter)``
        decrements, ``d += t``), and a copy left over after that takes the smallest new zero key.
        The minimum counter comes from a heap over lazily offset counters, so one weighted update
        costs ``O(log k)`` plus the keys that reach 0; on a sketch that holds no key yet (the
        common case: one call per shard), no counter ever grows, and counters grouped by value
        make it ``O(1)`` amortised.

        The state therefore depends on the batch only through its multiset of keys, never on the
        order in which they arrived. For the privacy analysis this matters where a *shard* (a
        Beam accumulator's elements, a Design B segment, a merged design's leaf) is the unit: a
        shard minus one element sorts to the sorted shard minus one element, so Algorithm 1's
        neighbouring-stream lemmas ([LT23, Section 5, Lemma 2]) apply unchanged, under the same
        partition assumption A-PART. Call it once per shard with the shard's whole multiset:
        calling it on position-cut batches of a longer stream is *not* Algorithm 1 on a sorted
        stream (removing an element moves others across batch boundaries), so a release that
        treats that longer stream as one sequential sketch (PMG) must use :meth:`update`.

        Parameters
        ----------
        keys
            numpy array, pyarrow array or sequence of keys (str, bytes, int, bool, tuples).
        counts
            Optional positive integer weight per key.

        Returns
        -------
        self
        """
        distinct, weights = multiset(keys, counts)
        if weights and not self._cnt:
            self._sorted_runs_from_empty(distinct, weights)
        elif weights:
            self._update_sorted_runs(as_list(distinct), weights)
        return self

    def _update_sorted_runs(self, keys: list[Any], weights: list[int]) -> None:
        """Weighted updates of distinct ``keys`` in the given order (see :meth:`update_multiset`).

        Counters are stored with a lazy offset: ``stored = counter + base``, so decrementing every
        counter by ``t`` is ``base += t``. ``heap`` holds ``(stored, id, key)`` with one live
        entry per held key (``ids[key] == id``); an entry whose stored value is stale (the key
        grew since) is pushed again when it surfaces, so the top live entry is the minimum.
        """
        if not self._cnt:
            self._sorted_runs_from_empty(keys, weights)
            return
        cnt = self._cnt
        get = cnt.get
        zero_list, zp, nzero = self._zero_list, self._zp, self._nzero
        free = len(self._dummies)
        free0 = free
        base = 0
        d = 0
        seq = 0
        ids: dict[Any, int] = {}
        heap: list[tuple[int, int, Any]] = []
        for y, c in cnt.items():
            if c:
                ids[y] = seq
                heap.append((c, seq, y))
                seq += 1
        heapq.heapify(heap)
        push, pop = heapq.heappush, heapq.heappop
        for x, w in zip(keys, weights, strict=True):
            c = get(x)
            if c is not None:
                if c == base:
                    nzero -= 1
                    ids[x] = seq
                    push(heap, (c + w, seq, x))
                    seq += 1
                cnt[x] = c + w
                continue
            if free:
                free -= 1
            elif nzero:
                while True:
                    z = zero_list[zp]
                    zp += 1
                    if get(z) == base:
                        break
                del cnt[z]
                nzero -= 1
            else:
                # Every counter is positive: t = min(w, min counter) decrements in a row.
                while True:
                    v, i, y = heap[0]
                    if ids.get(y) != i:
                        pop(heap)
                    elif cnt[y] != v:
                        pop(heap)
                        push(heap, (cnt[y], i, y))
                    else:
                        break
                t = min(w, v - base)
                base += t
                d += t
                w -= t
                if v != base:
                    continue  # x is used up, every counter is still positive
                zeros = []
                while heap and heap[0][0] <= base:
                    v, i, y = pop(heap)
                    if ids.get(y) != i:
                        continue
                    if cnt[y] != v:
                        push(heap, (cnt[y], i, y))
                        continue
                    del ids[y]
                    zeros.append(y)
                zero_list = sorted_keys(zeros)
                zp, nzero = 0, len(zero_list)
                if not w:
                    continue
                z = zero_list[0]
                zp = 1
                del cnt[z]
                nzero -= 1
            cnt[x] = base + w
            ids[x] = seq
            push(heap, (base + w, seq, x))
            seq += 1
        if base:
            for y in cnt:
                cnt[y] -= base
        self._zero_list, self._zp, self._nzero = zero_list, zp, nzero
        self._use_dummies(free0 - free)
        self.d += d
        self.n += sum(weights)

    def _sorted_runs_from_empty(self, keys: Distinct, weights: list[int]) -> None:
        """:meth:`_update_sorted_runs` when no key is held (every slot is a dummy).

        Each key of the batch occurs once and none is held when it arrives, so no counter ever
        grows: held counters only fall, all together, by the decrements. Keys are handled by
        their position ``i`` in ``keys`` (their rank in the fixed order). Counters are stored
        as ``counter + base``, grouped by stored value: ``buckets[v]`` lists the held ranks with
        stored value ``v`` in increasing order (ranks arrive in increasing order), and ``values``
        is a heap of the bucket values. The zero keys are the bucket ``v == base``, replaced in
        rank order; only zero keys are ever replaced, so every other bucket holds live keys only.
        """
        n_keys = len(keys)
        take = min(len(self._dummies), n_keys)
        buckets: dict[int, list[int]] = {}
        for i in range(take):  # the first keys fill the dummy slots, in order
            w = weights[i]
            bucket = buckets.get(w)
            if bucket is None:
                buckets[w] = [i]
            else:
                bucket.append(i)
        values = list(buckets)
        heapq.heapify(values)
        push, pop = heapq.heappush, heapq.heappop
        pool: list[int] = []
        pp = 0
        base = 0
        d = 0
        get = buckets.get
        for i in range(take, n_keys):
            w = weights[i]
            if pp == len(pool):
                # No zero slot: t = min(w, min counter) decrements in a row.
                low = values[0]
                t = min(w, low - base)
                base += t
                d += t
                w -= t
                if low != base:
                    continue  # the key is used up and every counter is still positive
                pop(values)
                pool = buckets.pop(low)
                pp = 0
                if not w:
                    continue
            pp += 1  # the smallest zero key leaves; the key takes its slot
            v = base + w
            bucket = get(v)
            if bucket is None:
                buckets[v] = [i]
                push(values, v)
            else:
                bucket.append(i)
        ranks = [j for bucket in buckets.values() for j in bucket]
        counts = [v - base for v, bucket in buckets.items() for _ in bucket]
        held = dict(zip(gather(keys, ranks), counts, strict=True))
        zeros = gather(keys, pool[pp:])
        held.update(dict.fromkeys(zeros, 0))
        self._cnt = held
        self._zero_list, self._zp, self._nzero = zeros, 0, len(zeros)
        self._use_dummies(take)
        self.d += d
        self.n += sum(weights)

    def _update_compiled(self, keys: Any) -> bool:
        """Unit updates in arrival order by the C loop of :mod:`.kernel`, when the batch and the
        held keys code to int64 in the fixed key order (see :func:`coded_batch`); False when
        they do not, and the Python loop :meth:`_update_unit` (the same algorithm) runs.

        Both produce the same sketch: the kernel is :meth:`_update_unit` over codes, and codes
        compare as the keys do under :func:`_order`. The held keys are converted in and out on
        each call, so a batch much smaller than the held keys stays on the Python loop.
        """
        cnt = self._cnt
        if not isinstance(keys, _BATCH_TYPES) or len(keys) < max(
            _COMPILED_MIN_BATCH, len(cnt) // 4
        ):
            return False
        if isinstance(keys, list) and keys and type(keys[0]) is str:
            return self._update_str_list(keys)
        coded = coded_batch(keys, cnt)
        if coded is None:
            return False
        codes, held_codes, decode = coded
        m = len(held_codes)
        counts = np.fromiter(cnt.values(), dtype=np.int64, count=m)
        room = m + min(len(self._dummies), len(codes))
        out_keys = np.empty(room, dtype=np.int64)
        out_counts = np.empty(room, dtype=np.int64)
        free = len(self._dummies)
        held, free_left, decrements = kernel.update_unit(
            codes, held_codes, counts, out_keys, out_counts, self.k, free
        )
        self._adopt(decode(out_keys[:held]), out_counts[:held], free - free_left, decrements)
        self.n += len(codes)
        return True

    def _update_str_list(self, keys: list[Any]) -> bool:
        """:meth:`_update_compiled` of a list of ``str``: the C loop finds the keys among the
        held ones by value and orders zero keys by their UTF-8 bytes (code-point order, as
        :func:`_order`), without numbering the batch's distinct values. False (nothing
        changed) when a key or a held key is not a ``str`` or has no UTF-8 encoding."""
        cnt = self._cnt
        if not set(map(type, cnt)) <= {str}:
            return False
        counts = np.fromiter(cnt.values(), dtype=np.int64, count=len(cnt))
        free = len(self._dummies)
        out_counts = np.empty(len(cnt) + min(free, len(keys)), dtype=np.int64)
        result = kernel.update_strs(keys, list(cnt), counts, out_counts, self.k, free)
        if result is None:
            return False
        held, free_left, decrements = result
        self._adopt(held, out_counts[: len(held)], free - free_left, decrements)
        self.n += len(keys)
        return True

    def _adopt(self, keys: list[Any], counts: np.ndarray, used: int, decrements: int) -> None:
        """Take the state the C loop returned: the held keys and counters, ``used`` dummies
        replaced, ``decrements`` more decrements."""
        self._cnt = dict(zip(keys, counts.tolist(), strict=True))
        self._use_dummies(used)
        self._rebuild_zero_list()
        self.d += decrements

    def _update_unit(self, keys: list[Any]) -> None:
        # The hot loop of docs/algorithms.md#mg-implementation: locals only, one dict lookup per
        # hit. Counters are stored with a lazy offset, ``stored = counter + base`` (base starts
        # at 0), so a decrement of every counter is ``base += 1`` and a read-only scan for the
        # keys that reach 0 instead of a store per held key; the offset is folded back once,
        # at the end of the call.
        cnt = self._cnt
        get = cnt.get
        nzero, zero_list, zp, d = self._nzero, self._zero_list, self._zp, self.d
        free = len(self._dummies)
        free0 = free
        base = 0
        for x in keys:
            c = get(x)
            if c is not None:
                if c == base:
                    nzero -= 1
                cnt[x] = c + 1
            elif free:
                # The dummies come first in the fixed order, smallest index first.
                free -= 1
                cnt[x] = base + 1
            elif nzero:
                while True:
                    z = zero_list[zp]
                    zp += 1
                    if get(z) == base:
                        break
                del cnt[z]
                cnt[x] = base + 1
                nzero -= 1
            else:
                # Branch 2 runs only when no counter is 0 (so no dummy is left either): every
                # stored value is above base, and the new zero keys are those equal to base + 1.
                d += 1
                base += 1
                zero_list = sorted_keys([y for y, v in cnt.items() if v == base])
                zp = 0
                nzero = len(zero_list)
        if base:
            for y in cnt:
                cnt[y] -= base
        self._nzero, self._zero_list, self._zp, self.d = nzero, zero_list, zp, d
        self._use_dummies(free0 - free)
        self.n += len(keys)

    def _pop_smallest_zero(self) -> None:
        """Free the smallest zero slot: a dummy if any is left, else the smallest zero key."""
        if len(self._dummies):
            self._use_dummies(1)
            return
        while True:
            z = self._zero_list[self._zp]
            self._zp += 1
            if self._cnt.get(z) == 0:
                self._nzero -= 1
                del self._cnt[z]
                return

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
            if self._nzero or len(self._dummies):
                self._pop_smallest_zero()
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
        return [(None, 0)] * self.dummy_slots + self.key_slots()

    @property
    def dummy_slots(self) -> int:
        """How many slots still hold dummies (count 0); they come first in :meth:`slots`."""
        return len(self._dummies)

    def key_slots(self) -> list[tuple[Any, int]]:
        """The (key, counter) pairs of the real keys (zero counters included), in the fixed
        order: :meth:`slots` without its leading dummies, in ``O(keys)`` rather than ``O(k)``."""
        return sorted(self._cnt.items(), key=lambda item: _order(item[0]))

    def error_bound(self) -> int:
        """``d``: every key satisfies ``f(x) - d <= estimate(x) <= f(x)``, and ``d <= n/(k+1)``."""
        return self.d

    @property
    def widest(self) -> int:
        """``min(distinct keys summarised, k + 1)``: the number of positive counters while
        ``d == 0``, ``k + 1`` once the sketch (or a merge into it) decremented. Not private.

        A sketch decrements exactly when its stream has more than ``k`` distinct keys (Algorithm
        1 takes a dummy or zero-count slot while one is left), and a ``MERGE_k`` of sketches
        whose streams have at most ``k`` distinct keys together subtracts nothing; so ``d == 0``
        iff the summarised elements have at most ``k`` distinct keys, and then every counter is
        an exact count. As a function of the multiset of elements alone, ``widest`` changes by at
        most 1 when one element is added or removed, whatever the merge tree.
        """
        if self.d:
            return self.k + 1
        return sum(1 for c in self._cnt.values() if c > 0)

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
            dummies = other._dummies
            self._dummies = dummies if type(dummies) is range else list(dummies)
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
        ) and self._dummy_ids_equal(other)

    def _dummy_ids_equal(self, other: MisraGries) -> bool:
        mine, theirs = self._dummies, other._dummies
        if type(mine) is type(theirs):
            return mine == theirs
        return len(mine) == len(theirs) and list(mine) == list(theirs)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        held = sum(1 for c in self._cnt.values() if c > 0)
        return f"MisraGries(k={self.k}, n={self.n}, d={self.d}, positive_keys={held}, merged={self.merged})"

    def memory_bytes(self) -> int:
        """Approximate bytes held: the dict, its keys and counters, and the zero-key list (the
        dummy slots are a range: a constant)."""
        size = sys.getsizeof(self._cnt) + sys.getsizeof(self._zero_list)
        size += sys.getsizeof(self._dummies)
        for x, c in self._cnt.items():
            size += sys.getsizeof(x) + sys.getsizeof(c)
        return size

    def to_bytes(self) -> bytes:
        """Serialize with the versioned format of :mod:`beam_dpsketch.serialization`."""
        # One encoding per key, reused for the order and for the bytes.
        real = sorted((encode_key(x), c) for x, c in self._cnt.items())
        data, offsets = serialization.pack_bytes_list([e for e, _ in real])
        params = {"k": self.k, "n": self.n, "d": self.d, "merged": self.merged}
        dummies = self._dummies
        if type(dummies) is range:
            # A run of dummy ids travels as its two ends: the bytes follow the keys that
            # arrived, not k (a fresh sketch of k = 2**24 is a few hundred bytes).
            params["dummy_range"] = [dummies.start, dummies.stop]
            ids = np.zeros(0, dtype=np.int64)
        else:
            ids = np.array(dummies, dtype=np.int64)
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "counts": np.array([c for _, c in real], dtype=np.int64),
            "dummy_ids": ids,
        }
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
        dummy_range = params.get("dummy_range")
        if dummy_range is not None:
            if (
                not isinstance(dummy_range, list)
                or len(dummy_range) != 2
                or not all(type(v) is int for v in dummy_range)
                or not 0 <= dummy_range[0] <= dummy_range[1] <= INT64_MAX
                or len(dummy_ids)
            ):
                raise err("malformed dummy slots")
            n_dummies = dummy_range[1] - dummy_range[0]
        else:
            n_dummies = len(dummy_ids)
        # Check sizes against the arrays before building anything of size k.
        if not 1 <= k <= MAX_K or dummy_ids.ndim != 1 or len(encoded) + n_dummies != k:
            raise err("a MisraGries sketch must hold exactly k slots, 1 <= k <= 2**24")
        if n < 0 or d < 0 or (k + 1) * d > n or n > INT64_MAX:
            # The totals are exact counts of the data: name the constraint, not the values.
            raise err(
                "impossible Misra-Gries totals: need n >= 0, d >= 0, (k+1)d <= n and n < 2**63"
            )
        if len(counts) and counts.min() < 0:
            raise err("negative Misra-Gries counter")
        # Summed as Python ints: numpy's int64 sum wraps around, and forged counters near 2**63
        # would then add up to a small number that passes the check below.
        values = counts.tolist()
        held = sum(values)
        if held > n - (k + 1) * d or (not merged and held != n - (k + 1) * d):
            raise err("Misra-Gries counters do not add up to n - (k+1)d")
        if len(dummy_ids) and (dummy_ids.min() < 0 or len(np.unique(dummy_ids)) != len(dummy_ids)):
            raise err("malformed dummy slots")
        try:
            keys = [decode_key(b) for b in encoded]
        except (ValueError, TypeError, RecursionError) as exc:
            # The decoder's message can quote the key's bytes: keep only its type.
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        cnt: dict[Any, int] = dict(zip(keys, values, strict=True))
        if len(cnt) != len(keys):
            raise err("duplicate keys in MisraGries bytes")
        ids = np.sort(dummy_ids)
        sketch = cls.__new__(cls)
        sketch.k, sketch.n, sketch.d, sketch.merged = k, n, d, merged
        sketch._cnt = cnt
        if dummy_range is not None:
            sketch._dummies = range(*dummy_range)
        elif not len(ids) or int(ids[-1]) - int(ids[0]) == len(ids) - 1:
            sketch._dummies = range(int(ids[0]), int(ids[-1]) + 1) if len(ids) else range(0)
        else:
            sketch._dummies = ids.tolist()
        sketch._rebuild_zero_list()
        return sketch

    def __reduce__(self):
        return (MisraGries.from_bytes, (self.to_bytes(),))
