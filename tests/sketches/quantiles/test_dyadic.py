"""Tests of the exact Dyadic Count Sketch and FloatDomain ([ZQR+22, Section 4.1] and docs/algorithms.md#lin-extensions).

Layout and level seeds, equality of every sketched level with a library Count Sketch over the
node ids, turnstile cancellation, merges (exact, order-free), validation errors naming the bad
values, serialization, and the exact rank / quantile algorithms (with exact levels they return
the true rank and the k-th smallest item, docs/algorithms.md#linear-sketches item 6).
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_dpsketch import serialization
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountSketch
from beam_dpsketch.sketches.quantiles.dyadic import (
    DyadicCountSketch,
    FloatDomain,
    dyadic_shape,
    level_seed,
)


def true_rank(data: np.ndarray, x) -> np.ndarray:
    return np.searchsorted(np.sort(data), np.asarray(x), side="right").astype(float)


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


def test_layout_and_shapes():
    assert dyadic_shape(0, 2**16 - 1, 0.01) == (882, 8)  # [ZQR+22, Section 4.2]
    assert dyadic_shape(0, 2**32 - 1, 0.01) == (1308, 8)
    assert dyadic_shape(0, 2**16 - 1, 0.01, "reference_code_as_run") == (882, 3)
    s = DyadicCountSketch.from_error(0, 2**16 - 1, 0.01)
    assert (s.levels, s.width, s.depth, s.n_sketched) == (16, 882, 8, 4)  # 2**12 <= 7056
    assert len(s.exact) == sum(2**m for m in range(1, 13))
    p = DyadicCountSketch.from_error(0, 2**16 - 1, 0.01, preset="paper")
    assert (p.n_sketched, len(p.exact), p.exact_levels) == (16, 0, False)
    assert DyadicCountSketch(-5, 10, 4, 2).levels == 4
    assert DyadicCountSketch(0, 16, 4, 2).levels == 5
    assert DyadicCountSketch(3, 3, 4, 2).levels == 1
    assert DyadicCountSketch(0, 2**62 - 1, 4, 2).levels == 62
    seeds = [level_seed(9, j) for j in range(40)]
    assert len(set(seeds)) == 40 and all(0 <= x < 2**32 for x in seeds)
    assert s.memory_bytes() >= (4 * 8 * 882 + len(s.exact)) * 8


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((5, 4, 8, 2), "upper"),
        ((0, 2**62, 8, 2), "2\\*\\*62"),
        ((0, 10, 0, 2), "width"),
        ((0, 10, 8, 0), "depth"),
        ((0, 10, 8, 2, -1), "seed"),
    ],
)
def test_constructor_validation(args, match):
    with pytest.raises(ValueError, match=match):
        DyadicCountSketch(*args)


def test_sketched_levels_equal_count_sketches_of_node_ids():
    rng = np.random.default_rng(0)
    values = rng.integers(-300, 700, 5000)
    counts = rng.integers(-3, 5, 5000)
    s = DyadicCountSketch(-300, 699, 16, 3, seed=77, exact_levels=True).update(values, counts)
    off = values + 300
    assert s.n_sketched == 5 and s.levels == 10  # 2**(10 - j) <= 48 iff j >= 5
    for j in range(s.levels):
        nodes = off >> j
        if j < s.n_sketched:
            ref = CountSketch(16, 3, level_seed(77, j)).update(nodes, counts)
            assert np.array_equal(s.level_table(j), ref.table)
        else:
            ref = np.bincount(nodes, weights=counts, minlength=2 ** (s.levels - j))
            assert np.array_equal(s.level_table(j), ref.astype(np.int64))
    assert s.total_weight == counts.sum()


# --------------------------------------------------------------------------------------------
# Updates: validation, turnstile, merge
# --------------------------------------------------------------------------------------------


def test_update_validation_names_the_bounds_never_the_values():
    # Values are data: an error names the parameter and the public bounds only.
    s = DyadicCountSketch(0, 99, 8, 2)
    with pytest.raises(ValueError, match=r"outside the declared domain \[0, 99\]") as exc:
        s.update([5, 100, -1])
    assert "100" not in str(exc.value) and "-1" not in str(exc.value)
    with pytest.raises(ValueError, match=r"\[0, 99\]") as exc:
        s.update([2**70])
    assert "1180591620717411303424" not in str(exc.value)
    with pytest.raises(TypeError, match="FloatDomain"):
        s.update(np.array([1.5]))
    with pytest.raises(TypeError, match="str"):
        s.update(["a"])
    with pytest.raises(TypeError, match="str") as exc:
        s.update([1, "secret-value"])
    assert "secret-value" not in str(exc.value)
    with pytest.raises(ValueError, match="counts"):
        s.update([1, 2], [1])
    assert s.total_weight == 0 and not s.sketched.any()  # nothing was half-applied
    clamped = DyadicCountSketch(0, 99, 8, 2, clamp=True).update([5, 100, -1, 2**70])
    ref = DyadicCountSketch(0, 99, 8, 2).update([5, 99, 0, 99])
    assert np.array_equal(clamped.sketched, ref.sketched) and np.array_equal(
        clamped.exact, ref.exact
    )
    assert DyadicCountSketch(0, 99, 8, 2).update([5, 100], clamp=True).rank(99) == 2.0
    s.update(np.array([], dtype=np.int64))
    s.update(np.uint64(7))
    assert s.total_weight == 1


VALUES = st.lists(st.integers(-40, 87), max_size=50)


@given(VALUES, VALUES, st.integers(0, 2**32 - 1), st.booleans())
def test_turnstile_insert_then_delete_leaves_the_remainder(keep, remove, seed, exact_levels):
    s = DyadicCountSketch(-40, 87, 5, 3, seed, exact_levels=exact_levels)
    s.update(keep + remove)
    if remove:
        s.update(remove, -np.ones(len(remove), dtype=np.int64))
    ref = DyadicCountSketch(-40, 87, 5, 3, seed, exact_levels=exact_levels)
    if keep:
        ref.update(keep)
    assert s == ref
    empty = DyadicCountSketch(-40, 87, 5, 3, seed, exact_levels=exact_levels)
    if keep:
        s.update(keep, -np.ones(len(keep), dtype=np.int64))
    # inserting then deleting the same multiset leaves all zeros (docs/algorithms.md#lin-oracles)
    assert s == empty


@given(VALUES, VALUES, VALUES, st.integers(0, 2**32 - 1))
def test_merge_is_exact_and_order_free(a, b, c, seed):
    def build(vals):
        return DyadicCountSketch(-40, 87, 4, 2, seed).update(vals)

    one = build(a + b + c)
    assert build(a).merge(build(b)).merge(build(c)) == one
    assert build(c).merge(build(b).merge(build(a))) == one


def test_merge_refuses_other_configurations():
    s = DyadicCountSketch(0, 99, 8, 2, 1)
    for other in (
        DyadicCountSketch(0, 99, 8, 2, 2),
        DyadicCountSketch(0, 98, 8, 2, 1),
        DyadicCountSketch(0, 99, 8, 2, 1, exact_levels=False),
    ):
        with pytest.raises(ValueError, match="different"):
            s.merge(other)
    with pytest.raises(TypeError):
        s.merge(CountSketch(8, 2, 1))


# --------------------------------------------------------------------------------------------
# Serialization
# --------------------------------------------------------------------------------------------


def test_serialization_round_trip_and_errors():
    s = DyadicCountSketch(-10, 1000, 8, 3, 5, clamp=True).update(np.arange(-10, 1000, 7))
    data = s.to_bytes()
    back = DyadicCountSketch.from_bytes(data)
    assert back == s and back.clamp and pickle.loads(pickle.dumps(s)) == s
    assert back.rank(500) == s.rank(500)
    assert s.copy() == s and s.copy().update([1]) != s
    flipped = bytearray(data)
    flipped[-20] ^= 1
    for bad in (bytes(flipped), data[:-3], b"garbage", CountSketch(4, 2).to_bytes()):
        with pytest.raises(SketchFormatError):
            DyadicCountSketch.from_bytes(bad)
    _, params, arrays = serialization.loads(data)
    params["total_weight"] += 1  # exact levels no longer sum to the total
    with pytest.raises(SketchFormatError, match="total"):
        DyadicCountSketch.from_bytes(serialization.dumps("DyadicCountSketch", params, arrays))
    params["total_weight"] -= 1
    params["width"] = 9
    with pytest.raises(SketchFormatError):
        DyadicCountSketch.from_bytes(serialization.dumps("DyadicCountSketch", params, arrays))


# --------------------------------------------------------------------------------------------
# Exact queries
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lower", [0, -1000, 2**40])
def test_all_exact_levels_give_true_ranks_and_quantiles(lower):
    rng = np.random.default_rng(lower % 97)
    data = lower + rng.integers(0, 3000, 4000)
    s = DyadicCountSketch(lower, lower + 2999, 64, 64, exact_levels=True).update(data)
    assert s.n_sketched == 0
    xs = np.concatenate([[lower - 5, lower, lower + 2999, lower + 5000], data[:300]])
    assert np.array_equal(s.rank(xs), true_rank(data, xs))
    assert np.array_equal(s.rank_lt(xs), true_rank(data, xs - 1))
    assert s.rank(int(lower - 1)) == 0.0 and isinstance(s.rank(int(lower)), float)
    srt = np.sort(data)
    qs = np.linspace(0, 1, 101)
    k = np.minimum(np.maximum(1, np.ceil(qs * len(data))), len(data)).astype(int)
    assert np.array_equal(s.quantiles(qs), srt[k - 1])  # the k-th smallest item
    assert s.quantile(0.0) == srt[0] and s.quantile(1.0) == srt[-1]


def test_sketched_levels_without_collisions_are_exact():
    data = np.array([3, 3, 9, 200, 1023, 512, 0, 77])
    s = DyadicCountSketch(0, 1023, 4096, 3, 1, exact_levels=False).update(data)
    xs = np.arange(-1, 1025)
    assert np.allclose(s.rank(xs), true_rank(data, xs))
    assert list(s.quantiles([0.1, 0.5, 1.0])) == [0, 9, 1023]


def test_query_validation():
    s = DyadicCountSketch(0, 99, 8, 2).update([1, 2, 3])
    with pytest.raises(TypeError, match="FloatDomain"):
        s.rank(1.5)
    with pytest.raises(ValueError, match="q"):
        s.quantiles([0.5, 1.5])
    with pytest.raises(ValueError, match="q"):
        s.quantiles([float("nan")])
    with pytest.raises(ValueError, match="level"):
        s.node_estimates(7, [0])
    with pytest.raises(ValueError, match="nodes"):
        s.node_estimates(6, [2])
    assert s.rank(np.array([2**64 - 1], dtype=np.uint64))[0] == 3.0
    assert s.rank([2**80, -(2**80)]).tolist() == [3.0, 0.0]


# --------------------------------------------------------------------------------------------
# FloatDomain
# --------------------------------------------------------------------------------------------


def test_float_domain_mapping():
    dom = FloatDomain(0, 1, 0.1)
    assert dom.bins == 11 and dom.int_bounds == (0, 10)
    assert dom.to_int([0, 0.05, 0.3, 0.7, 0.99999, 1]).tolist() == [0, 0, 3, 7, 9, 10]
    assert np.allclose(dom.to_float([3, 7]), [0.3, 0.7])
    with pytest.raises(ValueError, match="NaN") as exc:
        dom.to_int([0.5, float("nan")])
    assert "[1]" not in str(exc.value)  # not the NaN's position either
    with pytest.raises(ValueError, match="outside the declared domain") as exc:
        dom.to_int([0.5, 1.5, -0.1])
    assert "1.5" not in str(exc.value) and "-0.1" not in str(exc.value)
    assert dom.to_int([1.5, -0.1, float("inf")], clamp=True).tolist() == [10, 0, 10]
    with pytest.raises(ValueError, match="NaN"):
        dom.to_int([float("nan")], clamp=True)
    with pytest.raises(ValueError, match="lower"):
        FloatDomain(1, 1, 0.1)
    with pytest.raises(ValueError, match="resolution"):
        FloatDomain(0, 1, 0)
    with pytest.raises(ValueError, match="upper"):
        FloatDomain(0, math.inf, 1)
    assert FloatDomain.from_dict(dom.to_dict()) == dom


def test_float_domain_quantiles_end_to_end():
    dom = FloatDomain(-5.0, 5.0, 0.01)
    rng = np.random.default_rng(3)
    x = np.clip(rng.normal(0, 1, 20000), -5, 5)
    s = DyadicCountSketch(*dom.int_bounds, 2048, 4).update(dom.to_int(x))
    got = dom.to_float(s.quantiles([0.1, 0.5, 0.9]))
    assert np.all(np.abs(got - np.quantile(x, [0.1, 0.5, 0.9])) <= 0.02)


def test_heavy_hitters_by_dyadic_descent():
    data = np.array([5] * 50 + [700] * 30 + [1023] * 20 + list(range(0, 1000, 3)))
    s = DyadicCountSketch(-10, 1013, 64, 64).update(data - 10)  # all levels exact
    assert s.heavy_hitters(20) == [(-5, 50.0), (690, 30.0), (1013, 20.0)]
    assert s.heavy_hitters(1000) == []
    with pytest.raises(ValueError, match="max_candidates"):
        s.heavy_hitters(1, max_candidates=10)
    with pytest.raises(ValueError, match="NaN"):
        s.heavy_hitters(float("nan"))
