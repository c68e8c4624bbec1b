"""Tests of the exact Count-Min sketch: linearity (merge = one pass), one-sided error, the
(epsilon, delta) guarantee of Cormode and Muthukrishnan, turnstile updates and parameter checks.

Statistical tests model MurmurHash3 under different seeds as independent random functions; each
states its false-failure rate under that model (<= 1e-6).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.base import _CHUNK

KEY = st.one_of(
    st.integers(-20, 20),
    st.sampled_from(["a", "b", "c", "", "漢"]),
    st.sampled_from([b"a", b"\x00"]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"])),
)
STREAM = st.lists(KEY, max_size=40)
SHAPE = st.tuples(st.integers(1, 9), st.integers(1, 5), st.integers(0, 2**32 - 1))


def canon(key):
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, tuple):
        return tuple(canon(x) for x in key)
    return key


def build(shape, keys, counts=None):
    width, depth, seed = shape
    sk = CountMinSketch(width, depth, seed)
    if keys:
        sk.update(keys, counts)
    return sk


def naive_table(shape, keys, counts=None):
    """The table computed one key at a time from the documented hash derivation."""
    width, depth, seed = shape
    table = np.zeros((depth, width), dtype=np.int64)
    counts = [1] * len(keys) if counts is None else counts
    for key, w in zip(keys, counts, strict=True):
        h1, h2 = (int(x) for x in np.array(hash_keys([key], seed)).ravel())
        for i in range(depth):
            g = (h1 + i * h2) % 2**64
            table[i, ((g >> 32) * width) >> 32] += w
    return table


# --------------------------------------------------------------------------------------------
# Linearity: merges and one pass agree exactly
# --------------------------------------------------------------------------------------------


@given(SHAPE, STREAM, STREAM, STREAM)
def test_merge_commutative_associative_and_equals_single_pass(shape, a, b, c):
    one_pass = build(shape, a + b + c)
    sa, sb, sc = build(shape, a), build(shape, b), build(shape, c)
    ab = sa.copy().merge(sb)
    ba = sb.copy().merge(sa)
    assert ab == ba
    left = sa.copy().merge(sb).merge(sc)
    right = sa.copy().merge(sb.copy().merge(sc))
    assert left == right == one_pass
    assert one_pass.total_weight == len(a) + len(b) + len(c)
    # merging does not touch the argument
    assert sb == build(shape, b)


@given(SHAPE, STREAM)
def test_table_matches_naive_per_key_computation(shape, keys):
    sk = build(shape, keys)
    np.testing.assert_array_equal(sk.table, naive_table(shape, keys))
    # every row sums to the total weight
    assert (sk.table.sum(axis=1) == len(keys)).all()


@given(SHAPE, st.lists(st.tuples(KEY, st.integers(1, 6)), max_size=25))
def test_weighted_update_equals_repeated_keys(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = [w for _, w in pairs]
    repeated = [k for k, w in pairs for _ in range(w)]
    assert build(shape, keys, weights) == build(shape, repeated)
    # scalar weight broadcast
    assert build(shape, keys, 3) == build(shape, [k for k in keys for _ in range(3)])


@given(SHAPE, STREAM, st.data())
def test_batching_does_not_matter(shape, keys, data):
    cut = data.draw(st.integers(0, len(keys)))
    split = build(shape, keys[:cut])
    if keys[cut:]:
        split.update(keys[cut:])
    assert split == build(shape, keys)


# --------------------------------------------------------------------------------------------
# Error guarantees
# --------------------------------------------------------------------------------------------


@given(SHAPE, st.lists(st.tuples(KEY, st.integers(0, 5)), max_size=40))
def test_never_underestimates_with_non_negative_weights(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = [w for _, w in pairs]
    sk = build(shape, keys, weights)
    truth = Counter()
    for k, w in pairs:
        truth[canon(k)] += w
    probe = list(truth) + ["absent", 999, (9, "z")]
    est = sk.estimate(probe)
    assert est.dtype == np.int64
    for key, e in zip(probe, est.tolist(), strict=True):
        assert truth[key] <= e <= sk.total_weight
    # the estimate is the row minimum of the key's counters
    h1, h2 = hash_keys(probe, shape[2])
    np.testing.assert_array_equal(sk.estimate_hashes(h1, h2), est)


def test_exact_when_there_are_no_collisions():
    sk = CountMinSketch(1 << 20, 4, seed=3).update(["a", "b", "a", 1, 1, 1])
    np.testing.assert_array_equal(sk.estimate(["a", "b", 1, "c"]), [2, 1, 3, 0])
    sk = CountMinSketch(1, 3, seed=3).update(["a", "b", "a"])
    np.testing.assert_array_equal(sk.estimate(["a", "zzz"]), [3, 3])  # width 1: everything collides


def test_epsilon_delta_bound_binomial():
    # Cormode-Muthukrishnan: for each key, P(estimate - f(x) > e/width * N) <= exp(-depth).
    # Stream: 3 heavy keys of weight 300 each and 100 light keys of weight 1 (N = 1000, width 10,
    # so e/width * N = 271.8; a light key's row exceeds it iff it shares a bucket with a heavy key,
    # probability 1 - 0.9**3 = 0.271 < 1/e per row). Trial s uses seed s and queries one light key,
    # so the R trials are independent and the number of violations is Binomial(R, p) with
    # p <= exp(-3) = 0.0498. The one-sided binomial test fails when P(Bin(R, exp(-3)) >= X) < 1e-6:
    # false-failure rate <= 1e-6. (If the rows were not independent, p would be about 0.27 and
    # the test would fail.)
    width, depth, R = 10, 3, 3000
    heavy = [10**6, 10**6 + 1, 10**6 + 2]
    light = list(range(100))
    keys = np.array(heavy + light, dtype=np.int64)
    counts = np.array([300] * 3 + [1] * 100, dtype=np.int64)
    n_total = int(counts.sum())
    bound = math.e / width * n_total
    p_max = math.exp(-depth)
    violations = 0
    for s in range(R):
        sk = CountMinSketch(width, depth, seed=s).update(keys, counts)
        assert sk.error_bound() == (pytest.approx(bound), pytest.approx(p_max))
        query = light[s % len(light)]
        err = int(sk.estimate([query])[0]) - 1
        assert err >= 0
        violations += err > bound
    p_value = stats.binom.sf(violations - 1, R, p_max)  # P(X >= violations)
    assert p_value > 1e-6, (violations, R, p_max)


def test_from_error_sizes_the_sketch():
    sk = CountMinSketch.from_error(0.01, 1e-3, seed=4)
    assert sk.width == math.ceil(math.e / 0.01) and sk.depth == math.ceil(math.log(1e3))
    assert sk.seed == 4
    for eps, delta in [(0, 0.1), (1, 0.1), (0.1, 0), (0.1, 1), (-0.1, 0.5)]:
        with pytest.raises(ValueError, match="epsilon" if eps in (0, 1, -0.1) else "delta"):
            CountMinSketch.from_error(eps, delta)


# --------------------------------------------------------------------------------------------
# Turnstile (negative weights)
# --------------------------------------------------------------------------------------------


@given(SHAPE, st.lists(st.tuples(KEY, st.integers(-50, 50)), max_size=30))
def test_turnstile_insert_then_delete_is_empty(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    sk = build(shape, keys, weights)
    if keys:
        sk.update(keys, -weights)
    assert sk == CountMinSketch(*shape)
    assert not sk.table.any() and sk.total_weight == 0


@given(SHAPE, st.lists(st.tuples(KEY, st.integers(-50, 50)), max_size=30))
def test_turnstile_table_is_linear(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = [w for _, w in pairs]
    sk = build(shape, keys, weights)
    np.testing.assert_array_equal(sk.table, naive_table(shape, keys, weights))
    assert (sk.table.sum(axis=1) == sum(weights)).all()
    assert sk.total_weight == sum(weights)


def test_large_weights_are_exact():
    # Weights whose float64 sums would round (> 2**53) must still be added exactly.
    big = 2**60 + 1
    sk = CountMinSketch(4, 2, seed=0).update(["a", "b", "a"], [big, 3, -1])
    assert int(sk.estimate(["a"])[0]) >= 2**60
    assert sk.total_weight == big + 2
    assert (sk.table.sum(axis=1) == big + 2).all()
    np.testing.assert_array_equal(sk.table, naive_table((4, 2, 0), ["a", "b", "a"], [big, 3, -1]))


def test_chunked_update_equals_small_batches():
    rng = np.random.default_rng(5)
    n = 2 * _CHUNK + 123
    keys = rng.integers(0, 1000, n)
    counts = rng.integers(-3, 4, n)
    big = CountMinSketch(64, 3, seed=8).update(keys, counts)
    small = CountMinSketch(64, 3, seed=8)
    for start in range(0, n, 5000):
        small.update(keys[start : start + 5000], counts[start : start + 5000])
    assert big == small
    as_list = CountMinSketch(64, 3, seed=8).update(keys.tolist(), counts.tolist())
    assert as_list == big


# --------------------------------------------------------------------------------------------
# Key types
# --------------------------------------------------------------------------------------------


def test_estimate_on_mixed_key_types_and_containers():
    keys = ["a", 1, True, b"a", (1, "a"), 2**70, "1", np.int64(1), np.str_("a")]
    sk = CountMinSketch(1 << 16, 4, seed=1).update(keys)
    # True and np.int64(1) are the key 1; np.str_("a") is "a"; "1", b"a" are their own keys.
    np.testing.assert_array_equal(
        sk.estimate(["a", 1, b"a", (1, "a"), 2**70, "1", (True, "a"), "absent"]),
        [2, 3, 1, 1, 1, 1, 1, 0],
    )
    # The same estimates through every input container.
    ints = np.array([5, 6, 5, 7], dtype=np.int32)
    strs = ["x", "y", "x"]
    ref = CountMinSketch(1 << 16, 4, seed=1).update([5, 6, 5, 7, "x", "y", "x"])
    for int_batch in [ints, ints.astype(np.uint64), pa.array(ints), ints.tolist()]:
        for str_batch in [
            strs,
            np.array(strs),
            pa.array(strs),
            pa.array(strs, pa.large_string()),
            pa.array(strs).dictionary_encode(),
        ]:
            sk = CountMinSketch(1 << 16, 4, seed=1).update(int_batch).update(str_batch)
            assert sk == ref


def test_bad_keys_raise_type_error_and_leave_the_sketch_unchanged():
    sk = CountMinSketch(8, 2, seed=0).update(["a"])
    before = sk.copy()
    for bad, name in [
        ([None], "NoneType"),
        (["a", 1.5], "float"),
        ([[1]], "list"),
        (np.array([1.0]), "float"),
        (pa.array(["a", None]), "None"),
    ]:
        with pytest.raises(TypeError, match=name):
            sk.update(bad)
        with pytest.raises(TypeError, match=name):
            sk.estimate(bad)
    assert sk == before


def test_bad_counts():
    sk = CountMinSketch(8, 2)
    with pytest.raises(ValueError, match="counts"):
        sk.update(["a", "b"], [1, 2, 3])
    with pytest.raises(TypeError, match="counts"):
        sk.update(["a", "b"], [1.0, 2.0])
    assert sk == CountMinSketch(8, 2)


# --------------------------------------------------------------------------------------------
# Parameters and merge compatibility
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, name",
    [
        ({"width": 0, "depth": 2}, ValueError, "width"),
        ({"width": -1, "depth": 2}, ValueError, "width"),
        ({"width": 2**31 + 1, "depth": 2}, ValueError, "width"),
        ({"width": 4, "depth": 0}, ValueError, "depth"),
        ({"width": 4, "depth": 65}, ValueError, "depth"),
        ({"width": 4, "depth": 2, "seed": -1}, ValueError, "seed"),
        ({"width": 4, "depth": 2, "seed": 2**32}, ValueError, "seed"),
        ({"width": True, "depth": 2}, TypeError, "width"),
        ({"width": 4, "depth": False}, TypeError, "depth"),
        ({"width": 4, "depth": 2, "seed": True}, TypeError, "seed"),
        ({"width": 4.0, "depth": 2}, TypeError, "width"),
        ({"width": 4, "depth": 2.0}, TypeError, "depth"),
        ({"width": 4, "depth": 2, "seed": 1.0}, TypeError, "seed"),
        ({"width": "4", "depth": 2}, TypeError, "width"),
        ({"width": None, "depth": 2}, TypeError, "width"),
    ],
)
@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_invalid_parameters_name_the_parameter(cls, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        cls(**kwargs)


def test_valid_parameter_extremes():
    assert CountMinSketch(1, 1, 0).table.shape == (1, 1)
    sk = CountMinSketch(np.int64(3), np.uint8(64), np.uint32(2**32 - 1))
    assert (sk.width, sk.depth, sk.seed) == (3, 64, 2**32 - 1)
    assert all(type(v) is int for v in (sk.width, sk.depth, sk.seed))
    sk.update(["a", "b"])
    assert (sk.table.sum(axis=1) == 2).all()


@pytest.mark.parametrize(
    "other, needle",
    [
        (CountMinSketch(9, 3, 1), r"\(8, 3, 1\) vs \(9, 3, 1\)"),
        (CountMinSketch(8, 4, 1), r"\(8, 3, 1\) vs \(8, 4, 1\)"),
        (CountMinSketch(8, 3, 2), r"\(8, 3, 1\) vs \(8, 3, 2\)"),
        (CountSketch(8, 3, 1), "CountSketch"),
    ],
)
def test_mismatched_merge_names_the_differing_values(other, needle):
    sk = CountMinSketch(8, 3, 1).update(["a"])
    before = sk.copy()
    with pytest.raises(ValueError, match=needle):
        sk.merge(other)
    assert sk == before
    with pytest.raises(ValueError):
        CountMinSketch(8, 3, 1).merge("not a sketch")


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_empty_batches_are_no_ops(cls):
    sk = cls(8, 3, seed=1).update(["a", 2])
    before = sk.copy()
    for empty in [[], (), np.array([], dtype=np.int64), pa.array([], pa.string()), iter([])]:
        sk.update(empty)
        assert sk == before
        assert sk.estimate(empty).shape == (0,)
    sk.update([], np.array([], dtype=np.int64))
    assert sk == before


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_empty_batch_with_empty_counts_list_is_a_no_op(cls):
    # An empty bundle gives keys == [] and counts == []; np.asarray([]) is float64, which must
    # not be mistaken for non-integer weights.
    sk = cls(8, 3, seed=1)
    sk.update([], [])
    assert sk == cls(8, 3, seed=1)


def test_copy_is_independent():
    sk = CountMinSketch(4, 2, 0).update(["a"])
    cp = sk.copy()
    cp.update(["b"])
    assert sk.total_weight == 1 and cp.total_weight == 2
    assert not np.shares_memory(sk.table, cp.table)
    assert sk != cp and sk == CountMinSketch(4, 2, 0).update(["a"])
    assert CountMinSketch(4, 2, 0) != CountSketch(4, 2, 0)
