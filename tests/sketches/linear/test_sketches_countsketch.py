"""Tests of the exact Count Sketch: linearity (merge = one pass), unbiased rows, the median
estimator's error bound, turnstile updates.

Statistical tests model MurmurHash3 under different seeds as independent random functions; each
states its false-failure rate under that model (<= 1e-6). Inputs and seeds are fixed, so the tests
are deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from beam_dpsketch.hashing import hash_keys, row_signs
from beam_dpsketch.sketches import CountMinSketch, CountSketch

KEY = st.one_of(
    st.integers(-20, 20),
    st.sampled_from(["a", "b", "c", "", "漢"]),
    st.sampled_from([b"a", b"\x00"]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"])),
)
STREAM = st.lists(KEY, max_size=40)
WEIGHTED = st.lists(st.tuples(KEY, st.integers(-30, 30)), max_size=30)
SHAPE = st.tuples(st.integers(1, 9), st.integers(1, 5), st.integers(0, 2**32 - 1))


def build(shape, keys, counts=None):
    sk = CountSketch(*shape)
    if len(keys):
        sk.update(keys, counts)
    return sk


def naive_table(shape, keys, counts=None):
    """Per-key table from the documented derivation: bucket from h1 + i*h2, sign from bit 63-i
    of h2 * 0x9E3779B97F4A7C15."""
    width, depth, seed = shape
    table = np.zeros((depth, width), dtype=np.int64)
    counts = [1] * len(keys) if counts is None else counts
    for key, w in zip(keys, counts, strict=True):
        h1, h2 = (int(x) for x in np.array(hash_keys([key], seed)).ravel())
        mixed = (h2 * 0x9E3779B97F4A7C15) % 2**64
        for i in range(depth):
            g = (h1 + i * h2) % 2**64
            sign = -1 if (mixed >> (63 - i)) & 1 else 1
            table[i, ((g >> 32) * width) >> 32] += sign * w
    return table


@given(SHAPE, STREAM, STREAM, STREAM)
def test_merge_commutative_associative_and_equals_single_pass(shape, a, b, c):
    one_pass = build(shape, a + b + c)
    sa, sb, sc = build(shape, a), build(shape, b), build(shape, c)
    assert sa.copy().merge(sb) == sb.copy().merge(sa)
    left = sa.copy().merge(sb).merge(sc)
    right = sa.copy().merge(sb.copy().merge(sc))
    assert left == right == one_pass
    assert one_pass.total_weight == len(a + b + c)


@given(SHAPE, WEIGHTED)
def test_table_matches_naive_signed_computation(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = [w for _, w in pairs]
    sk = build(shape, keys, weights)
    np.testing.assert_array_equal(sk.table, naive_table(shape, keys, weights))
    # each +-w is congruent to w mod 2, so every row sum has the parity of the total weight
    assert ((sk.table.sum(axis=1) - sum(weights)) % 2 == 0).all()
    unit = build(shape, keys)
    np.testing.assert_array_equal(unit.table, naive_table(shape, keys))


@given(SHAPE, WEIGHTED)
def test_turnstile_insert_then_delete_is_empty(shape, pairs):
    keys = [k for k, _ in pairs]
    weights = np.array([w for _, w in pairs], dtype=np.int64)
    sk = build(shape, keys, weights)
    if keys:
        sk.update(keys, -weights)
    assert sk == CountSketch(*shape)
    assert not sk.table.any()


@given(SHAPE, st.lists(st.tuples(KEY, st.integers(1, 5)), max_size=25))
def test_weighted_update_equals_repeated_keys(shape, pairs):
    keys = [k for k, _ in pairs]
    repeated = [k for k, w in pairs for _ in range(w)]
    assert build(shape, keys, [w for _, w in pairs]) == build(shape, repeated)


@given(SHAPE, WEIGHTED, st.lists(KEY, min_size=1, max_size=6))
def test_estimate_is_median_of_row_estimates(shape, pairs, probe):
    keys = [k for k, _ in pairs]
    sk = build(shape, keys, [w for _, w in pairs])
    rows = sk.row_estimates(probe)
    assert rows.shape == (shape[1], len(probe)) and rows.dtype == np.int64
    est = sk.estimate(probe)
    np.testing.assert_array_equal(est, np.median(rows, axis=0))
    # and the row estimates are sign * counter, read from the table
    h1, h2 = hash_keys(probe, shape[2])
    np.testing.assert_array_equal(sk.estimate_hashes(h1, h2), est)


def test_exact_without_collisions_and_negative_frequencies():
    sk = CountSketch(1 << 20, 5, seed=1).update(["a", "b", "a", 7], [2, -3, 4, 1])
    np.testing.assert_array_equal(sk.estimate(["a", "b", 7, "none"]), [6.0, -3.0, 1.0, 0.0])
    np.testing.assert_array_equal(sk.row_estimates(["a"]), np.full((5, 1), 6))
    # even depth: the median is the mean of the two middle rows
    even = CountSketch(1 << 20, 4, seed=1).update(["a"] * 3)
    assert even.estimate(["a"]).tolist() == [3.0]


def test_merge_mismatch_names_the_values():
    sk = CountSketch(8, 3, 1)
    with pytest.raises(ValueError, match=r"\(8, 3, 1\) vs \(8, 3, 2\)"):
        sk.merge(CountSketch(8, 3, 2))
    with pytest.raises(ValueError, match=r"\(8, 3, 1\) vs \(4, 3, 1\)"):
        sk.merge(CountSketch(4, 3, 1))
    with pytest.raises(ValueError, match=r"\(8, 3, 1\) vs \(8, 5, 1\)"):
        sk.merge(CountSketch(8, 5, 1))
    with pytest.raises(ValueError, match="CountMinSketch"):
        sk.merge(CountMinSketch(8, 3, 1))


# --------------------------------------------------------------------------------------------
# Statistical properties over seeds
# --------------------------------------------------------------------------------------------

# Fixed stream: the target key 0 with frequency 50 and 40 other keys with weights in [1, 12],
# every fifth negated (turnstile). Over seeds, each row estimate of key 0 is
# 50 + sum_y s(0)s(y) f(y) [h(0) = h(y)], with mean 50 and variance sum_{y != 0} f(y)^2 / width
# (Charikar et al., Lemma 2). The net weight of the other keys is far from 0, so an estimator
# that ignored the signs would be biased by about sum_y f(y) / width.
_rng = np.random.default_rng(31337)
OTHER_KEYS = np.arange(1, 41, dtype=np.int64)
OTHER_W = _rng.integers(1, 13, size=40)
OTHER_W[::5] *= -1
TARGET_F = 50
STREAM_KEYS = np.concatenate([[0], OTHER_KEYS])
STREAM_W = np.concatenate([[TARGET_F], OTHER_W]).astype(np.int64)


def test_row_estimates_are_unbiased_over_seeds():
    # Bernstein's inequality for the mean of R i.i.d. variables with |X - E X| <= M and
    # Var X <= s2: P(|mean - E X| >= t) <= 2 exp(-R t^2 / (2 s2 + 2 M t / 3)). Here
    # M = sum |f(y)| (y != 0) and s2 = sum f(y)^2 / width. We solve for the t giving probability
    # 1e-6 / depth per row; a union bound over the rows gives a false-failure rate <= 1e-6.
    width, depth, R = 8, 5, 4000
    l1 = float(np.abs(OTHER_W).sum())
    s2 = float((OTHER_W.astype(float) ** 2).sum()) / width
    log_term = math.log(2 * depth / 1e-6)
    # R t^2 = log_term (2 s2 + 2 l1 t / 3): positive root of a quadratic in t
    a, b, c = R, -log_term * 2 * l1 / 3, -log_term * 2 * s2
    t = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    rows = np.empty((R, depth), dtype=np.int64)
    for s in range(R):
        sk = CountSketch(width, depth, seed=s).update(STREAM_KEYS, STREAM_W)
        rows[s] = sk.row_estimates([0])[:, 0]
    means = rows.mean(axis=0)
    assert np.all(np.abs(means - TARGET_F) < t), (means, t)
    # The bound is tight enough to matter: reading a counter without the key's sign would give
    # mean 0 (off by 50), and signs correlated with buckets would bias every row by O(|f(y)|).
    assert t < 2.0 < abs(OTHER_W.sum()) / width


def test_median_error_within_standard_bound():
    # Per row, Chebyshev with Var <= F2/width gives P(|row - f| >= 2 sqrt(F2/width)) <= 1/4, so
    # with independent rows and odd depth 5 the median fails only if >= 3 rows fail:
    # p <= P(Bin(5, 1/4) >= 3) = 0.1035. One query per seed makes the R trials independent, and
    # the one-sided binomial test at 1e-6 has a false-failure rate <= 1e-6.
    width, depth, R = 8, 5, 2000
    f2 = float((STREAM_W.astype(float) ** 2).sum())
    bound = 2 * math.sqrt(f2 / width)
    p_max = stats.binom.sf(2, depth, 0.25)
    assert p_max == pytest.approx(0.103515625)
    failures = 0
    for s in range(R):
        sk = CountSketch(width, depth, seed=10_000 + s).update(STREAM_KEYS, STREAM_W)
        key = int(STREAM_KEYS[s % len(STREAM_KEYS)])
        truth = int(STREAM_W[s % len(STREAM_KEYS)])
        failures += abs(float(sk.estimate([key])[0]) - truth) >= bound
    assert stats.binom.sf(failures - 1, R, p_max) > 1e-6, (failures, R, p_max)


def test_signs_of_two_keys_are_uncorrelated_over_seeds():
    # E[s(x) s(y)] = 0 for x != y is what makes rows unbiased. Over R seeds the sum of the +-1
    # products is bounded by Hoeffding: P(|sum| >= lam) <= 2 exp(-lam^2 / (2R)); lam is chosen so
    # that this is 1e-6 / depth per row: false-failure rate <= 1e-6 (union over rows).
    R, depth = 20000, 4
    prods = np.zeros(depth)
    for s in range(R):
        _, h2 = hash_keys([17, "seventeen"], s)
        signs = row_signs(h2, depth)
        prods += signs[:, 0] * signs[:, 1]
    limit = math.sqrt(2 * R * math.log(2 * depth / 1e-6))
    assert np.all(np.abs(prods) < limit), (prods, limit)
