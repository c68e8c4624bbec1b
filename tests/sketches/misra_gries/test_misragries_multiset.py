"""``MisraGries.update_multiset``: [LT23, Algorithm 1] on the batch sorted by the
fixed key order, computed from each distinct key's total weight. Checked against unit updates
of the sorted stream (the sketch's own arrival-order path, itself checked against the naive
reference in test_sketches_misragries.py) and against the naive O(k)-scan reference, from empty
and non-empty starting states, for every input form (numpy, Arrow, lists, weights).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import NaiveMG

from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries.sketch import _order, multiset_counts

MIXED_KEY = st.one_of(
    st.integers(-3, 9),
    st.sampled_from([2**64, -(2**70), True, False]),
    st.sampled_from(["a", "b", "", "é", "漢"]),
    st.sampled_from([b"a", b"", b"\xff"]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", b"x"])),
)
K = st.integers(1, 6)
# Runs of repeated keys: distinct weights make every branch of the weighted update run.
SKEWED = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 9)), max_size=14).map(
    lambda pairs: [x for x, w in pairs for _ in range(w)]
)


def canonical_sorted(stream: list) -> list:
    """The stream sorted by the fixed key order (bool keys are their ints)."""
    return sorted((int(x) if isinstance(x, bool) else x for x in stream), key=_order)


def assert_same(a: MisraGries, b: MisraGries) -> None:
    assert a == b
    assert a.slots() == b.slots()
    assert (a.n, a.d) == (b.n, b.d)


@given(K, st.lists(MIXED_KEY, max_size=60))
def test_equals_unit_updates_of_the_sorted_stream(k, stream):
    got = MisraGries(k).update_multiset(stream)
    want = MisraGries(k)
    if stream:
        want.update(canonical_sorted(stream))
    assert_same(got, want)
    assert NaiveMG(k).extend(canonical_sorted(stream)).slots() == got.slots()


@given(K, SKEWED, SKEWED)
def test_from_a_non_empty_state(k, prefix, stream):
    start = MisraGries(k).update(prefix) if prefix else MisraGries(k)
    got = start.copy().update_multiset(np.array(stream, dtype=np.int64))
    want = start.copy()
    if stream:
        want.update(canonical_sorted(stream))
    assert_same(got, want)
    # A second multiset batch continues from the state the first one left.
    twice = got.copy().update_multiset(stream)
    again = want.copy()
    if stream:
        again.update(canonical_sorted(stream))
    assert_same(twice, again)


@given(K, st.lists(st.tuples(MIXED_KEY, st.integers(1, 7)), max_size=20))
def test_weights_equal_repeated_keys(k, pairs):
    keys = [x for x, _ in pairs]
    weights = [w for _, w in pairs]
    repeated = [x for x, w in pairs for _ in range(w)]
    got = MisraGries(k).update_multiset(keys, weights)
    assert_same(got, MisraGries(k).update_multiset(repeated))


@pytest.mark.parametrize("k", [1, 2, 5, 64])
def test_input_forms_agree(k):
    rng = np.random.default_rng(3)
    ints = rng.zipf(1.3, 5000) % 400
    strings = [f"key-{v}" for v in ints.tolist()]
    want_int = MisraGries(k).update(sorted(ints.tolist()))
    for batch in (
        ints,
        ints.astype(np.int32),
        pa.array(ints),
        ints.tolist(),
        ints + 10**12 - 10**12,
    ):
        assert_same(MisraGries(k).update_multiset(batch), want_int)
    wide = ints * 10**9  # a sparse range: np.unique rather than bincount
    assert_same(MisraGries(k).update_multiset(wide), MisraGries(k).update(sorted(wide.tolist())))
    want_str = MisraGries(k).update(sorted(strings))
    for batch in (
        strings,
        pa.array(strings),
        pa.array(strings, pa.large_string()),
        pa.array(strings).dictionary_encode(),
        pa.chunked_array([strings[:100], strings[100:]]),
    ):
        assert_same(MisraGries(k).update_multiset(batch), want_str)
    data = [s.encode() for s in strings]
    assert_same(MisraGries(k).update_multiset(pa.array(data)), MisraGries(k).update(sorted(data)))


def test_huge_weights_are_exact():
    keys = np.array([5, 3, 5, 9], dtype=np.int64)
    weights = np.array([2**60, 7, 2**40, 1], dtype=np.int64)
    got = MisraGries(2).update_multiset(keys, weights)
    want = MisraGries(2).update([3, 5, 9], [7, 2**60 + 2**40, 1])
    assert_same(got, want)
    got_str = MisraGries(2).update_multiset(pa.array(["b", "a", "b"]), [2**61, 3, 5])
    assert_same(got_str, MisraGries(2).update(["a", "b"], [3, 2**61 + 5]))


def test_multiset_counts_are_sorted_and_exact():
    keys, counts = multiset_counts(["b", "a", "b", "é"])
    assert keys == ["a", "b", "é"] and counts == [1, 2, 1]
    keys, counts = multiset_counts(np.array([7, -2, 7, 7]))
    assert keys == [-2, 7] and counts == [1, 3]
    keys, counts = multiset_counts([True, 1, np.int64(1), (1, "a"), b"z"])
    assert keys == [1, b"z", (1, "a")] and counts == [3, 1, 1]


@pytest.mark.parametrize(
    "batch, type_name",
    [([1, 1.0], "float"), ([None], "NoneType"), (["a", 2.5], "float"), ([[1]], "list")],
)
def test_bad_keys_raise_naming_the_type(batch, type_name):
    with pytest.raises(TypeError, match=type_name):
        MisraGries(2).update_multiset(batch)


def test_nulls_and_bad_counts_raise():
    with pytest.raises(TypeError, match="None"):
        MisraGries(2).update_multiset(pa.array(["a", None]))
    with pytest.raises(ValueError, match="positive"):
        MisraGries(2).update_multiset([1, 2], [1, 0])
    with pytest.raises(ValueError, match="one entry per key"):
        MisraGries(2).update_multiset([1, 2], [1, 1, 1])


def test_large_k_allocates_with_the_data():
    sk = MisraGries(1 << 24).update_multiset(np.arange(100))
    assert sk.memory_bytes() < 1 << 20
    assert sum(1 for x, c in sk.slots()[-100:] if x is not None and c == 1) == 100
    assert MisraGries.from_bytes(sk.to_bytes()) == sk
