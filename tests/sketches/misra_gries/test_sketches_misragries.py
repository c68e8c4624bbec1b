"""Tests of the Misra-Gries variant ([LT23, Algorithm 1]) and the Agarwal et al. merge
([LT23, Section 7]): reference vectors, the invariants of docs/algorithms.md#mg-oracles, agreement
with a naive O(k)-scan reference of Algorithm 1 (tests/oracles.py), weighted and batched updates,
merge bounds, and exhaustive checks of [LT23, Section 5, Lemma 2] and of the global sensitivity
([LT23, Section 2]) on small cases. All deterministic; no statistics.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import NaiveMG, RefDummy, frequencies, ref_merge, standard_mg

from beam_dpsketch.sketches import CountMinSketch, MisraGries

# Small universes so that every branch of Algorithm 1 runs often.
INT_KEY = st.integers(0, 7)
MIXED_KEY = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([2**64, -(2**70), True, False]),
    st.sampled_from(["a", "b", "", "é", "漢"]),
    st.sampled_from([b"a", b"", b"\xff"]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", b"x"])),
    st.just(()),
)
K = st.integers(1, 5)
# Skewed streams (runs of repeated keys) give distinct counter values, so merges are not decided
# by ties alone.
SKEWED = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 9), st.sampled_from(["a", b"a", (1, "a")])), st.integers(1, 9)
    ),
    max_size=10,
).map(lambda pairs: [x for x, w in pairs for _ in range(w)])


def mg(k, stream, counts=None):
    return MisraGries(k).update(stream, counts) if len(stream) else MisraGries(k)


def slot_dict(sketch: MisraGries) -> dict:
    """``slots()`` as a dict, with dummies named as in the reference. Dummies are replaced in
    index order, so the m remaining ones are D_{k-m}, ..., D_{k-1}."""
    slots = sketch.slots()
    m = sum(1 for x, _ in slots if x is None)
    out, j = {}, 0
    for x, c in slots:
        if x is None:
            out[RefDummy(sketch.k - m + j)] = c
            j += 1
        else:
            out[x] = c
    return out


def assert_invariants(sketch: MisraGries, stream):
    """docs/algorithms.md#mg-oracles invariants 1-3 and 5 for a non-merged sketch."""
    k, n, d = sketch.k, sketch.n, sketch.d
    f = frequencies(stream)
    slots = sketch.slots()
    assert len(slots) == k
    assert n == len(stream)
    assert all(type(c) is int and c >= 0 for _, c in slots)
    assert all(c == 0 for x, c in slots if x is None)  # dummies stay at 0
    keys = [x for x, _ in slots if x is not None]
    assert len(set(keys)) == len(keys)
    assert all(x in f for x in keys)  # only stream keys are held
    assert sum(c for _, c in slots) == n - (k + 1) * d
    assert 0 <= d and (k + 1) * d <= n
    probe = list(f) + ["absent", 10**9]
    est = sketch.estimate(probe).tolist()
    for x, e in zip(probe, est, strict=True):
        assert f[x] - d <= e <= f[x]
        assert (k + 1) * (f[x] - e) <= n
    assert sketch.to_dict() == {x: c for x, c in slots if x is not None and c > 0}
    assert sketch.error_bound() == d


# --------------------------------------------------------------------------------------------
# Reference vectors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, stream, slots, d, standard",
    [
        (2, (1, 2, 1, 3, 3, 4), [(1, 0), (3, 0)], 2, {}),
        (3, (5, 1, 5, 2, 3, 5, 4, 4, 4), [(2, 0), (4, 3), (5, 2)], 1, {4: 3, 5: 2}),
    ],
)
def test_appendix_a1_traces(k, stream, slots, d, standard):
    for batch in (list(stream), np.array(stream), pa.array(stream), tuple(stream)):
        sk = MisraGries(k).update(batch)
        assert sk.slots() == slots
        assert sk.d == d and sk.n == len(stream)
        assert sk.to_dict() == standard
        assert not sk.merged
    one = MisraGries(k)
    for x in stream:
        one.update([x])
    assert one.slots() == slots and one.d == d
    assert standard_mg(stream, k) == (standard, d)
    assert NaiveMG(k).extend(stream).slots() == slots


def test_appendix_a1_dummies_are_none_and_used_first():
    sk = MisraGries(3)
    assert sk.slots() == [(None, 0)] * 3 and sk.d == 0 and sk.to_dict() == {}
    sk.update([7])
    assert sk.slots() == [(None, 0), (None, 0), (7, 1)]
    sk.update([0])  # the key 0 is a real key, never a dummy
    assert sk.slots() == [(None, 0), (0, 1), (7, 1)]


def test_appendix_a2_state_s6():
    # k = 2, S = (0,1,2,3), S' = (0,2,3): MG(S) = {1:0, 3:1}, MG(S') = {0:0, 2:0}.
    assert MisraGries(2).update([0, 1, 2, 3]).slots() == [(1, 0), (3, 1)]
    assert MisraGries(2).update([0, 2, 3]).slots() == [(0, 0), (2, 0)]


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((2, 0, 2, 3, 3), (7, 1, 0, 5), {0: 1, 2: 2, 3: 2}),
        ((2, 0, 2, 3, 3), (7, 0, 5), {0: 1, 2: 1, 3: 1}),
        ((0, 3), (2, 1), {}),
        ((0, 3), (1,), {0: 1, 3: 1, 1: 1}),
    ],
)
def test_appendix_a4_merge_vectors(a, b, expected):
    # M = MERGE_3(MG(B), MG(A)); the merge is commutative, so both orders give M.
    for first, second in [(b, a), (a, b)]:
        merged = MisraGries(3).update(list(first)).merge(MisraGries(3).update(list(second)))
        assert merged.to_dict() == expected
        assert merged.merged
        assert merged.n == len(a) + len(b)
        assert len(merged.slots()) == 3


# --------------------------------------------------------------------------------------------
# Invariants and agreement with the naive reference
# --------------------------------------------------------------------------------------------


@given(K, st.lists(INT_KEY, max_size=60))
def test_invariants_on_int_streams(k, stream):
    assert_invariants(mg(k, stream), stream)


@given(K, SKEWED | st.lists(MIXED_KEY, max_size=50))
def test_invariants_on_mixed_streams(k, stream):
    assert_invariants(mg(k, stream), stream)


@given(K, st.lists(INT_KEY, max_size=60))
def test_agrees_with_naive_algorithm_1_on_int_streams(k, stream):
    sk = mg(k, stream)
    ref = NaiveMG(k).extend(stream)
    assert sk.slots() == ref.slots()
    assert slot_dict(sk) == ref.T
    assert (sk.n, sk.d) == (ref.n, ref.d)


@given(K, SKEWED | st.lists(MIXED_KEY, max_size=50))
def test_agrees_with_naive_algorithm_1_on_mixed_streams(k, stream):
    sk = mg(k, stream)
    ref = NaiveMG(k).extend(stream)
    assert sk.slots() == ref.slots()
    assert (sk.n, sk.d) == (ref.n, ref.d)


@given(K, st.lists(MIXED_KEY, max_size=40), st.lists(MIXED_KEY, max_size=40))
def test_agrees_with_naive_reference_at_every_step(k, first, second):
    # Also across batches: the zero-key bookkeeping carries over between update() calls.
    sk = mg(k, first)
    ref = NaiveMG(k).extend(first)
    for x in second:
        sk.update([x])
        ref.update(x)
        assert sk.slots() == ref.slots()
        assert sk.d == ref.d


@given(K, SKEWED | st.lists(MIXED_KEY, max_size=50))
def test_standard_mg_equals_to_dict(k, stream):
    sk = mg(k, stream)
    counters, d = standard_mg(stream, k)
    assert sk.to_dict() == counters
    assert sk.d == d


@given(K, st.lists(MIXED_KEY, max_size=50), st.data())
def test_batch_update_equals_one_at_a_time(k, stream, data):
    whole = mg(k, stream)
    single = MisraGries(k)
    for x in stream:
        single.update([x])
    assert whole == single
    assert whole.slots() == single.slots()
    # arbitrary batch boundaries
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=4)))
    pieces = MisraGries(k)
    for lo, hi in itertools.pairwise([0, *cuts, len(stream)]):
        if hi > lo:
            pieces.update(stream[lo:hi])
    assert pieces == whole


@given(K, st.lists(st.tuples(MIXED_KEY, st.integers(1, 6)), max_size=25))
def test_weighted_update_equals_repeated_unit_updates(k, pairs):
    keys = [x for x, _ in pairs]
    weights = [w for _, w in pairs]
    repeated = [x for x, w in pairs for _ in range(w)]
    weighted = mg(k, keys, weights)
    unit = mg(k, repeated)
    assert weighted == unit
    assert weighted.slots() == unit.slots()
    assert (weighted.n, weighted.d) == (unit.n, unit.d)
    # one key at a time with a weight, too
    single = MisraGries(k)
    for x, w in pairs:
        single.update([x], [w])
    assert single == unit
    assert NaiveMG(k).extend(repeated).slots() == weighted.slots()


@given(K, st.lists(INT_KEY, max_size=20), INT_KEY, st.integers(1, 10**12))
def test_huge_weight_is_fast_and_exact(k, prefix, x, w):
    sk = mg(k, prefix).update([x], [w])
    f = Counter(prefix)
    f[x] += w
    assert sk.n == len(prefix) + w
    assert sum(c for _, c in sk.slots()) == sk.n - (k + 1) * sk.d
    assert f[x] - sk.d <= int(sk.estimate([x])[0]) <= f[x]
    if w > len(prefix):  # x's weight is a strict majority: x must be held
        assert int(sk.estimate([x])[0]) > 0


def test_weighted_batch_through_numpy_and_arrow():
    keys = np.array([3, 1, 3, 2, 9], dtype=np.int32)
    counts = np.array([4, 1, 2, 5, 1], dtype=np.uint8)
    expected = MisraGries(2).update([3, 3, 3, 3, 1, 3, 3, 2, 2, 2, 2, 2, 9])
    assert MisraGries(2).update(keys, counts) == expected
    assert MisraGries(2).update(pa.array(keys), counts.tolist()) == expected
    assert MisraGries(2).update(keys.tolist(), counts.astype(np.int64)) == expected


def test_bool_and_numpy_scalars_are_their_python_keys():
    sk = MisraGries(4).update([True, 1, np.int64(1), np.str_("a"), "a", np.bytes_(b"z")])
    assert sk.to_dict() == {1: 3, "a": 2, b"z": 1}
    assert sk.estimate([1, True, "a", b"z", "1"]).tolist() == [3, 3, 2, 1, 0]
    # The class documents that numpy scalars are stored as their Python counterparts.
    assert all(type(x) in (int, str, bytes) for x, _ in sk.slots() if x is not None)


@pytest.mark.parametrize(
    "numpy_stream, python_stream",
    [
        ([np.str_("a"), "b", "c", "e"], ["a", "b", "c", "e"]),
        ([np.bytes_(b"a"), b"b", b"c", b"e"], [b"a", b"b", b"c", b"e"]),
        (list(np.array(["a", "b", "c", "e"])), ["a", "b", "c", "e"]),
    ],
)
def test_numpy_scalar_keys_give_the_same_sketch_as_python_keys(numpy_stream, python_stream):
    # k = 2: "a" and "b" reach 0 at the decrement caused by "c"; "e" must then replace the
    # smallest zero key in the fixed order, "a", whatever Python type "a" arrived as.
    expected = MisraGries(2).update(python_stream)
    assert expected.slots() == [(python_stream[1], 0), (python_stream[3], 1)]
    got = MisraGries(2).update(numpy_stream)
    assert got.slots() == expected.slots()
    assert got == expected


# --------------------------------------------------------------------------------------------
# Merging (Agarwal et al.)
# --------------------------------------------------------------------------------------------


def assert_merge_bounds(sketch: MisraGries, f: Counter):
    k, n, d = sketch.k, sketch.n, sketch.d
    assert n == sum(f.values())
    positive = sketch.to_dict()
    assert len(positive) <= k and all(c > 0 for c in positive.values())
    assert len(sketch.slots()) == k
    assert (k + 1) * d <= n
    assert sum(positive.values()) + (k + 1) * d <= n
    probe = list(f) + ["absent"]
    for x, e in zip(probe, sketch.estimate(probe).tolist(), strict=True):
        assert f[x] - n / (k + 1) <= e <= f[x]
        assert f[x] - d <= e  # d bounds the undercount of every key


@given(
    K,
    st.lists(st.one_of(SKEWED, st.lists(MIXED_KEY, max_size=25)), min_size=2, max_size=6),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=10, max_size=10),
)
def test_merge_bounds_under_random_merge_trees(k, streams, choices):
    nodes = [(mg(k, s), frequencies(s)) for s in streams]
    step = 0
    while len(nodes) > 1:
        i, j = choices[step % len(choices)]
        step += 1
        i, j = i % len(nodes), j % len(nodes)
        if i == j:
            j = (i + 1) % len(nodes)
        (a, fa), (b, fb) = nodes[i], nodes[j]
        b_before = b.copy()
        a_flag, a_empty, b_empty = a.merged, a.is_empty(), b.is_empty()
        merged = a.merge(b)
        # An empty side is the identity; any other merge records its provenance.
        expected_flag = a_flag if b_empty else b_before.merged if a_empty else True
        assert merged is a and merged.merged == expected_flag
        assert b == b_before  # the argument is not modified
        f = fa + fb
        assert_merge_bounds(merged, f)
        nodes[i] = (merged, f)
        del nodes[j]
    final, f = nodes[0]
    assert_merge_bounds(final, f)


@given(K, SKEWED | st.lists(MIXED_KEY, max_size=30), SKEWED | st.lists(MIXED_KEY, max_size=30))
def test_merge_is_commutative_and_equals_reference_merge(k, s1, s2):
    a, b = mg(k, s1), mg(k, s2)
    ab = a.copy().merge(b.copy())
    ba = b.copy().merge(a.copy())
    assert ab == ba
    assert ab.slots() == ba.slots()
    # Provenance is recorded unless one side is empty (the identity, see the merge docstring).
    assert ab.merged == ba.merged == (not a.is_empty() and not b.is_empty())
    assert ab.to_dict() == ref_merge(k, a.to_dict(), b.to_dict())
    assert ab.n == a.n + b.n


@given(
    K, SKEWED, SKEWED | st.lists(MIXED_KEY, max_size=30), SKEWED | st.lists(MIXED_KEY, max_size=40)
)
def test_updates_after_a_merge_keep_the_bound(k, s1, s2, s3):
    sk = mg(k, s1).merge(mg(k, s2))
    if s3:
        sk.update(s3)
    assert sk.merged == (bool(s1) and bool(s2))
    assert_merge_bounds(sk, frequencies(s1 + s2 + s3))
    # and merging again after updating
    again = sk.copy().merge(mg(k, s1))
    assert_merge_bounds(again, frequencies(s1 + s2 + s3 + s1))


def test_merge_with_empty_and_small_supports():
    a = MisraGries(3).update([1, 1, 2])
    m = a.copy().merge(MisraGries(3))
    assert m == a and m.to_dict() == {1: 2, 2: 1} and not m.merged  # empty: the identity
    # fewer than k+1 keys in the summed support: a plain sum
    m = MisraGries(3).update([1, 2]).merge(MisraGries(3).update([2, 3]))
    assert m.to_dict() == {1: 1, 2: 2, 3: 1}
    # ties at the (k+1)-th value are counted with multiplicity: all four keys have 1, so v = 1
    m = MisraGries(3).update([1, 2]).merge(MisraGries(3).update([3, 4]))
    assert m.to_dict() == {} and m.d == 1
    # zero-count keys of Algorithm 1 are not merged as keys
    z = MisraGries(2).update([1, 2, 1, 3, 3, 4])  # {1:0, 3:0}
    m = z.copy().merge(MisraGries(2).update([5]))
    assert m.to_dict() == {5: 1} and m.slots() == [(None, 0), (5, 1)]


def test_merge_rejects_incompatible_sketches():
    with pytest.raises(ValueError, match=r"3 vs 4"):
        MisraGries(3).merge(MisraGries(4))
    with pytest.raises(ValueError, match="CountMinSketch"):
        MisraGries(3).merge(CountMinSketch(4, 2))
    a = MisraGries(3).update([1])
    before = a.copy()
    with pytest.raises(ValueError):
        a.merge(MisraGries(2).update([1]))
    assert a == before and not a.merged


# --------------------------------------------------------------------------------------------
# Exhaustive structure on small cases (docs/algorithms.md#mg-oracles: L-MG2 and L-CHAN)
# --------------------------------------------------------------------------------------------


def test_exhaustive_l_mg2_and_l_chan():
    # All streams S of length <= 6 over {0, 1, 2} and of length <= 5 over {0, 1, 2, 3}, every
    # deletion S', k = 1..4: with T, c from
    # S (the stream with the extra element) and T', c' from S':
    #   (a) |T \ T'| <= 2, |T' \ T| <= 2, counters off the intersection are <= 1;
    #   (b) exactly one of Case D / Case I holds;
    #   L-CHAN: every counter differs by at most 1, ||c - c'||_1 <= k.
    cache: dict = {}

    def sketch(k, stream):
        key = (k, stream)  # the stream's universe does not matter: its keys are the ints in it
        if key not in cache:
            cache[key] = slot_dict(MisraGries(k).update(list(stream)) if stream else MisraGries(k))
        return cache[key]

    checked = 0
    s6_seen = False
    for k, universe, max_len in itertools.product(range(1, 5), [3, 4], [0]):
        max_len = 6 if universe == 3 else 5
        for length in range(1, max_len + 1):
            for stream in itertools.product(range(universe), repeat=length):
                T = sketch(k, stream)
                for pos in range(length):
                    T2 = sketch(k, stream[:pos] + stream[pos + 1 :])
                    only1 = set(T) - set(T2)
                    only2 = set(T2) - set(T)
                    assert len(only1) <= 2 and len(only2) <= 2, (k, stream, pos)
                    assert all(T[x] <= 1 for x in only1) and all(T2[x] <= 1 for x in only2)
                    keys = set(T) | set(T2)
                    diff = {x: T.get(x, 0) - T2.get(x, 0) for x in keys}
                    case_d = all(T.get(x, 0) == T2[x] - 1 for x in T2) and all(
                        T[x] == 0 for x in only1
                    )
                    plus = [x for x, v in diff.items() if v == 1]
                    case_i = len(plus) == 1 and all(v == 0 for x, v in diff.items() if x != plus[0])
                    assert case_d != case_i, (k, stream, pos, T, T2)
                    assert all(abs(v) <= 1 for v in diff.values())
                    assert sum(abs(v) for v in diff.values()) <= k
                    s6_seen |= len(only1) == 2
                    checked += 1
    assert checked > 45_000
    assert s6_seen  # the two-keys-per-side state is reached


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, exc",
    [
        (0, ValueError),
        (-1, ValueError),
        (2**24 + 1, ValueError),
        (1.0, TypeError),
        (True, TypeError),
        ("3", TypeError),
        (None, TypeError),
    ],
)
def test_invalid_k_names_k(k, exc):
    with pytest.raises(exc, match=r"\bk\b"):
        MisraGries(k)


def test_valid_k_extremes():
    assert len(MisraGries(1).slots()) == 1
    assert MisraGries(np.int32(4)).k == 4 and type(MisraGries(np.int32(4)).k) is int


@pytest.mark.parametrize("counts", [[0], [-1], [2, 0], [1, -5], np.array([3, 0])])
def test_non_positive_counts_raise_and_leave_the_sketch_unchanged(counts):
    sk = MisraGries(2).update([1, 1, 2])
    before = sk.copy()
    keys = ["a", "b"][: len(counts)]
    with pytest.raises(ValueError, match="positive"):
        sk.update(keys, counts)
    assert sk == before


def test_bad_counts_shape_and_dtype():
    sk = MisraGries(2)
    with pytest.raises(ValueError, match="counts"):
        sk.update(["a", "b"], [1, 2, 3])
    with pytest.raises(TypeError, match="counts"):
        sk.update(["a"], [1.5])
    assert sk == MisraGries(2)


@pytest.mark.parametrize(
    "batch, type_name",
    [
        ([None], "NoneType"),
        (["a", None], "NoneType"),
        ([1, 2.5], "float"),
        ([[1]], "list"),
        ([(1, None)], "NoneType"),
        ([{}], "dict"),
        (np.array([1.0]), "float"),
        (pa.array(["a", None]), "None"),
    ],
)
def test_bad_keys_raise_type_error_naming_the_type(batch, type_name):
    sk = MisraGries(2).update(["x"])
    before = sk.copy()
    with pytest.raises(TypeError, match=type_name):
        sk.update(batch)
    assert sk == before
    with pytest.raises(TypeError, match=type_name):
        sk.estimate(batch)


def test_single_string_is_not_a_batch():
    with pytest.raises(TypeError, match="str"):
        MisraGries(2).update("abc")


def test_output_order_is_canonical_not_insertion_order():
    # docs/algorithms.md#mg-order: insertion order encodes stream history; the views must not reveal it.
    a = MisraGries(4).update(["b", "a", 2, 1])
    b = MisraGries(4).update([1, 2, "a", "b"])
    assert list(a.to_dict().items()) == list(b.to_dict().items())
    assert a.slots() == b.slots() == [(1, 1), (2, 1), ("a", 1), ("b", 1)]
    assert a == b


def test_canonical_order_of_slots():
    sk = MisraGries(9).update([(1, "a"), b"b", "b", 10, -3, 2**70, "a", b"a"])
    assert sk.slots() == [
        (None, 0),
        (-3, 1),
        (10, 1),
        (2**70, 1),
        ("a", 1),
        ("b", 1),
        (b"a", 1),
        (b"b", 1),
        ((1, "a"), 1),
    ]


def test_empty_batches_are_no_ops():
    sk = MisraGries(2).update([1, 2, 1, 3, 3, 4])
    before = sk.copy()
    for empty in [[], (), np.array([], dtype=np.int64), pa.array([], pa.string()), iter([])]:
        sk.update(empty)
        assert sk == before
        assert sk.estimate(empty).shape == (0,)
    sk.update([], np.array([], dtype=np.int64))
    assert sk == before


def test_empty_batch_with_empty_counts_list_is_a_no_op():
    # An empty bundle gives keys == [] and counts == []; np.asarray([]) is float64, which must
    # not be mistaken for non-integer weights.
    sk = MisraGries(3).update([1])
    before = sk.copy()
    sk.update([], [])
    assert sk == before


def test_copy_is_independent():
    a = MisraGries(2).update([1, 2, 1])
    c = a.copy()
    c.update([3, 3, 3])
    assert a.to_dict() == {1: 2, 2: 1} and a.n == 3
    assert c != a


def test_merge_with_empty_sketch_is_the_identity_both_ways():
    # Beam creates and merges empty accumulators freely: they must not change the state
    # (zero-count keys, dummies and the single-stream provenance are kept).
    stream = [5, 1, 5, 2, 3, 5, 4, 4, 4]
    direct = MisraGries(3).update(stream)
    assert direct.slots() == [(2, 0), (4, 3), (5, 2)]
    left = MisraGries(3).update(stream).merge(MisraGries(3))
    right = MisraGries(3).merge(MisraGries(3).update(stream))
    assert left == direct and right == direct
    assert not left.merged and not right.merged
    assert right.slots() == direct.slots()
    # A non-empty merge still marks provenance.
    assert MisraGries(3).update([1]).merge(MisraGries(3).update([2])).merged
