"""A shard sketched in the fixed key order: the neighbouring-sketch lemma of Algorithm 1 holds.

``MisraGries.update_multiset`` runs Algorithm 1 on a whole shard **sorted by the fixed key
order**, from the shard's exact key counts. Where the shard is the unit
of the analysis (assumption A-PART), the shard minus one element sorts to the sorted shard minus
one element, so the two sketches are Algorithm 1 on neighbouring streams and differ as Lebeda and
Tětek's Section 5, Lemma 2 says (docs/algorithms.md#mg-oracles, L-MG2 and L-CHAN). (Design B does
not use it: it holds a counter per distinct key of the shard, where arrival order holds ``k``.)

Checked exhaustively on small shards, in every arrival order and with every deletion:

* the shard sketch equals unit-update Algorithm 1 on the sorted shard, whatever the arrival
  order;
* neighbouring shards' sketches satisfy L-MG2 (at most two keys on each side outside the common
  keys, with counters <= 1; exactly one of Case D / Case I) and L-CHAN (every counter moves by at
  most 1, L1 distance <= k), and their Algorithm 3 values differ by at most one count unit
  (``k + 1`` in the sum's scaled units) per key.

A variant that orders a shard by first occurrence (data-dependent) breaks the lemma; the test of
that is ``test_first_occurrence_order_breaks_the_lemma``.
"""

from __future__ import annotations

import itertools

from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum

MAX_SHARDS = 4


def slot_map(sketch: MisraGries) -> dict:
    """Slots as a dict; the ``m`` remaining dummies are named ``("D", i)`` like Algorithm 1's."""
    slots = sketch.slots()
    m = sum(1 for x, _ in slots if x is None)
    out, j = {}, 0
    for x, c in slots:
        if x is None:
            out[("D", sketch.k - m + j)] = c
            j += 1
        else:
            out[x] = c
    return out


def lemma_holds(t: dict, t2: dict, k: int) -> bool:
    """L-MG2 and L-CHAN for ``t`` = sketch of S, ``t2`` = sketch of S minus one element."""
    only1, only2 = set(t) - set(t2), set(t2) - set(t)
    if len(only1) > 2 or len(only2) > 2:
        return False
    if any(t[x] > 1 for x in only1) or any(t2[x] > 1 for x in only2):
        return False
    diff = {x: t.get(x, 0) - t2.get(x, 0) for x in set(t) | set(t2)}
    case_d = all(t.get(x, 0) == t2[x] - 1 for x in t2) and all(t[x] == 0 for x in only1)
    plus = [x for x, v in diff.items() if v == 1]
    case_i = len(plus) == 1 and all(v == 0 for x, v in diff.items() if x != plus[0])
    if case_d == case_i:
        return False
    return all(abs(v) <= 1 for v in diff.values()) and sum(abs(v) for v in diff.values()) <= k


def segment_sum(k: int, stream: tuple):
    """One shard sketched as a multiset: its sketch, and Algorithm 3's exact aggregate of that
    one shard."""
    sketch = MisraGries(k).update_multiset(list(stream))
    total = PostProcessedSum(k, max_shards=MAX_SHARDS)
    if stream:
        total.add_sketch(sketch)
    return sketch, total


def segment_sketch(k: int, stream: tuple) -> MisraGries:
    return segment_sum(k, stream)[0]


def test_segment_sketch_is_algorithm_1_on_the_sorted_segment():
    checked = 0
    for k in (1, 2, 3):
        for length in range(1, 6):
            for stream in itertools.product(["a", "b", "c", "d"], repeat=length):
                want = MisraGries(k).update(sorted(stream))  # the fixed order on str keys
                got = segment_sketch(k, stream)
                assert got == want and got.slots() == want.slots()
                # Arrival order is irrelevant: the segment is one multiset.
                backwards, total = segment_sum(k, stream[::-1])
                assert backwards == want and backwards.slots() == want.slots()
                assert total.shards == 1 and total.n == length
                checked += 1
    assert checked > 3000


def _neighbour_pairs(universe: list, max_len: int):
    for length in range(1, max_len + 1):
        for stream in itertools.product(universe, repeat=length):
            for pos in range(length):
                yield stream, stream[:pos] + stream[pos + 1 :]


def test_neighbouring_segments_differ_as_the_lemma_says():
    checked = 0
    for k in (1, 2, 3, 4):
        cache: dict = {}

        def sketch(stream: tuple, k: int = k, cache: dict = cache) -> MisraGries:
            if stream not in cache:
                cache[stream] = segment_sketch(k, stream)
            return cache[stream]

        for universe, max_len in (([0, 1, 2], 6), (["a", "b", "c", "d"], 5)):
            for stream, smaller in _neighbour_pairs(universe, max_len):
                big, small = sketch(stream), sketch(smaller)
                assert lemma_holds(slot_map(big), slot_map(small), k), (k, stream, smaller)
                checked += 1
    assert checked > 45_000


def test_neighbouring_segments_move_each_algorithm_3_value_by_at_most_one_unit():
    k = 3
    for stream, smaller in _neighbour_pairs(["a", "b", "c", "d", "e"], 5):
        _, big = segment_sum(k, stream)
        _, small = segment_sum(k, smaller)
        v, v2 = big.scaled_counts(), small.scaled_counts()
        assert big.n == small.n + 1
        assert all(abs(v.get(x, 0) - v2.get(x, 0)) <= k + 1 for x in set(v) | set(v2))


def _first_occurrence_sketch(k: int, stream: tuple) -> MisraGries:
    """A broken shard sketch: each key's copies grouped, keys in order of first occurrence."""
    grouped = [x for x in dict.fromkeys(stream) for y in stream if y == x]
    return MisraGries(k).update(grouped)


def test_first_occurrence_order_breaks_the_lemma():
    # The same checks catch a data-dependent order: removing an element can reorder the keys
    # (k = 1: ("a", "a", "b", "c", "b", "c") gives {c: 2}, without its first "b" {b: 1}).
    broken = [
        (stream, smaller)
        for stream, smaller in _neighbour_pairs(["a", "b", "c"], 6)
        if not lemma_holds(
            slot_map(_first_occurrence_sketch(1, stream)),
            slot_map(_first_occurrence_sketch(1, smaller)),
            1,
        )
    ]
    assert broken
