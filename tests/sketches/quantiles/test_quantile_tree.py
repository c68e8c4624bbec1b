"""The quantile tree beyond the paper's binary layout: branching, coarse leaves, consistency.

Layout and exact queries for any branching factor, interpolation in coarse leaves, the
least-squares consistent estimates, the descent by fractions, serialization, the choice of
Laplace noise for ``(eps, delta)`` budgets, and a seeded accuracy test on a 20 M-wide range
(docs/algorithms.md#lin-wide-range).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.quantiles.dyadic import (
    DyadicCountSketch,
    fitting_leaf_bits,
    tree_shifts,
)
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms import DPQuantiles

SRC = NoiseSource.insecure_for_tests(77)
LOWER, UPPER = 874_000_000, 894_000_000
QS = np.round(np.arange(1, 100) / 100, 2)


def _kth(values: np.ndarray, qs) -> np.ndarray:
    ordered = np.sort(values)
    k = np.maximum(1, np.ceil(np.asarray(qs) * len(values))).astype(np.int64)
    return ordered[k - 1]


def test_tree_shifts_binary_is_the_paper_layout_and_the_top_takes_the_rest():
    assert tree_shifts(12, 2) == tuple(range(12))
    assert tree_shifts(25, 32, 10) == (10, 15, 20)  # top: 2**5 nodes
    assert tree_shifts(17, 16) == (0, 4, 8, 12)  # top: 2**5 = 32 nodes, between b and b*b/2
    assert tree_shifts(3, 16) == (0,)  # a small domain: one level of 8 nodes
    sk = DyadicCountSketch(0, 255, 16, 3, 0)
    assert (sk.levels, sk.n_sketched, sk.branching, sk.leaf_bits) == (8, 3, 2, 0)


def test_fitting_leaf_bits_from_the_exact_node_budget():
    assert fitting_leaf_bits(-1024, 3071, 1 << 15) == 0
    assert fitting_leaf_bits(LOWER, UPPER, 1 << 15) == 10  # 2**25 values in 2**15 leaves
    sk = DyadicCountSketch(LOWER, UPPER, 64, 3, 0, branching=32, exact_nodes=1 << 15, leaf_bits=10)
    assert sk.n_sketched == 0 and sk.level_nodes(0) == 1 << 15


@pytest.mark.parametrize("branching", [4, 16, 32])
def test_exact_sketch_ranks_and_quantiles_for_any_branching(branching):
    rng = np.random.default_rng(branching)
    values = rng.integers(-300, 5000, 20_000)
    sk = DyadicCountSketch(-300, 5000, 64, 3, 1, branching=branching, exact_nodes=1 << 8)
    sk.update(values)
    assert sk.n_sketched > 0  # sketched lower levels: wide enough to keep collisions rare
    exact = DyadicCountSketch(-300, 5000, 64, 3, 1, branching=branching, exact_nodes=1 << 14)
    exact.update(values)
    assert exact.n_sketched == 0
    xs = np.concatenate([[-300, -299, 4999, 5000], rng.integers(-300, 5001, 300)])
    truth = np.searchsorted(np.sort(values), xs, side="right")
    np.testing.assert_array_equal(exact.rank(xs), truth)
    np.testing.assert_array_equal(exact.quantiles(QS), _kth(values, QS))
    for j in range(exact.levels):  # one item, one node per level
        assert exact.level_table(j).sum() == len(values)


def test_rank_interpolates_inside_coarse_leaves():
    values = np.array([8, 9, 10, 11, 12, 13, 14, 15, 3], dtype=np.int64)
    sk = DyadicCountSketch(0, 63, 8, 2, 0, branching=8, exact_nodes=64, leaf_bits=3)
    sk.update(values)
    assert sk.levels == 1 and sk.level_nodes(0) == 8
    # Leaf [8, 16) holds 8 items: x = 11 covers 4 of its 8 values, so half of them count.
    assert sk.rank(11) == pytest.approx(1 + 8 * 4 / 8)
    assert sk.rank(7) == pytest.approx(1.0)  # leaf [0, 8) whole
    # Inside a leaf the position is interpolated: the lone item of [0, 8) reads as its middle.
    assert sk.quantile(1.0) == 15 and sk.quantile(0.0) == 4
    with pytest.raises(ValueError, match="leaf_bits=0"):
        sk.heavy_hitters(1)


def _release(sk, budget, tag, **kwargs):
    return PrivateDyadicCountSketch.release(sk, budget, SRC.stream(tag), **kwargs)


def test_descent_by_fractions_recovers_the_kth_smallest_without_noise():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 4096, 5000)
    sk = DyadicCountSketch(0, 4095, 64, 3, 0, branching=32, exact_nodes=1 << 12).update(values)
    quiet = _release(sk, PrivacyBudget.pure(1e9), "quiet", consistency=True)
    np.testing.assert_array_equal(quiet.quantiles(QS), _kth(values, QS))
    np.testing.assert_array_equal(quiet.quantiles([0.0, 1.0]), [values.min(), values.max()])


def test_descent_by_fractions_is_monotone_and_in_the_domain_under_heavy_noise():
    sk = DyadicCountSketch(LOWER, UPPER, 64, 3, 0, branching=32, exact_nodes=1 << 10)
    sk.update(np.array([LOWER + 5, UPPER - 5]))
    for t in range(20):
        rel = _release(sk, PrivacyBudget.pure(0.01), ("heavy", t), consistency=True)
        got = rel.quantiles(np.linspace(0, 1, 201))
        assert np.all(np.diff(got) >= 0) and got.min() >= LOWER and got.max() <= UPPER


def test_consistent_estimates_add_up_and_know_the_empty_nodes():
    rng = np.random.default_rng(4)
    values = rng.integers(0, 3000, 2000)  # the domain [0, 3000] pads to 4096
    sk = DyadicCountSketch(0, 3000, 64, 3, 0, branching=8, exact_nodes=1 << 12).update(values)
    rel = _release(sk, PrivacyBudget.pure(0.5), "cons", consistency=True, neighbouring="replace")
    levels = rel.consistent_estimates()
    assert len(levels) == rel.levels
    for finer, coarser in zip(levels, levels[1:], strict=False):
        np.testing.assert_allclose(finer.reshape(len(coarser), -1).sum(axis=1), coarser)
    assert levels[-1].sum() == pytest.approx(len(values))  # the public total under replace
    leaf_starts = np.arange(rel.level_nodes(0)) << rel.shifts[0]
    assert np.all(levels[0][leaf_starts > 3000] == 0)
    plain = _release(sk, PrivacyBudget.pure(0.5), "cons", neighbouring="replace")
    assert not plain.consistency and plain.node_estimates(0, [3001]) != 0  # raw noise


def test_serialization_keeps_the_tree_and_reads_older_bytes():
    sk = DyadicCountSketch(0, 4095, 16, 3, 2, branching=16, exact_nodes=64, leaf_bits=2)
    sk.update(np.arange(0, 4096, 3))
    assert DyadicCountSketch.from_bytes(sk.to_bytes()) == sk
    rel = _release(
        sk, PrivacyBudget.approx(0.5, 1e-6), "ser", consistency=True, approx_noise="auto"
    )
    back = PrivateDyadicCountSketch.from_bytes(rel.to_bytes())
    assert back == rel and back.consistency and back.branching == 16 and back.leaf_bits == 2
    np.testing.assert_array_equal(back.quantiles(QS), rel.quantiles(QS))
    # Bytes written before the tree options existed: the binary tree, no consistency.
    old = DyadicCountSketch(0, 255, 16, 3, 0).update([1, 2, 3])
    _, params, arrays = serialization.loads(old.to_bytes(), expected_kind="DyadicCountSketch")
    for key in ("branching", "exact_nodes", "leaf_bits"):
        del params[key]
    legacy = DyadicCountSketch.from_bytes(serialization.dumps("DyadicCountSketch", params, arrays))
    assert legacy == old


def test_merge_refuses_a_different_tree():
    a = DyadicCountSketch(0, 255, 16, 3, 0, branching=4)
    with pytest.raises(ValueError, match="branching"):
        a.merge(DyadicCountSketch(0, 255, 16, 3, 0, branching=8))
    with pytest.raises(ValueError, match="power of two"):
        DyadicCountSketch(0, 255, 16, 3, 0, branching=6)
    with pytest.raises(ValueError, match="leaf_bits"):
        DyadicCountSketch(0, 255, 16, 3, 0, leaf_bits=8)


def test_laplace_for_an_approx_budget_only_when_it_is_less_noisy():
    wide = DyadicCountSketch(
        LOWER, UPPER, 64, 3, 0, branching=32, exact_nodes=1 << 15, leaf_bits=10
    )
    budget = PrivacyBudget.approx(0.1, 1e-6)
    cals = PrivateDyadicCountSketch.calibrate(wide, budget, approx_noise="auto")
    gauss = PrivateDyadicCountSketch.calibrate(wide, budget)
    assert {c.noise for c in cals} == {"discrete_laplace"}
    assert {c.noise for c in gauss} == {"discrete_gaussian"}
    assert sum(c.noise_variance for c in cals) < sum(c.noise_variance for c in gauss)
    assert math.isclose(sum(c.epsilon for c in cals), 0.1, rel_tol=1e-9)
    rel = _release(wide, budget, "auto", approx_noise="auto")
    assert rel.budget_kind == "pure" and rel.epsilon == 0.1 and rel.rho is None
    # The paper's binary tree (25 levels) at eps = 1: the Gaussian is less noisy and stays.
    binary = DyadicCountSketch(LOWER, UPPER, 64, 3, 0)
    cals = PrivateDyadicCountSketch.calibrate(
        binary, PrivacyBudget.approx(1.0, 1e-6), approx_noise="auto"
    )
    assert {c.noise for c in cals} == {"discrete_gaussian"}


def test_dpquantiles_default_tree_fits_the_exact_node_budget():
    q = DPQuantiles([0.5], LOWER, UPPER, PrivacyBudget.pure(1.0))
    assert q.mechanism.tree == {"branching": 32, "exact_nodes": 1 << 15, "leaf_bits": 10}
    assert q.mechanism.consistency
    small = DPQuantiles([0.5], -1024, 3071, PrivacyBudget.pure(1.0))
    assert small.mechanism.tree["leaf_bits"] == 0  # one-value leaves when the range fits
    params = q.display_parameters()
    assert params["branching"] == 32 and params["leaf_bits"] == 10


def _timestamps(n: int, seed: int) -> np.ndarray:
    """Flight-like departures: 180 days from LOWER + 2e6, busy 6:00-22:00, minute resolution."""
    rng = np.random.default_rng(seed)
    day = rng.integers(0, 180, n)
    minute = np.clip(np.round(rng.normal(14 * 60, 4 * 60, n)), 6 * 60, 22 * 60 - 1)
    return LOWER + 2_000_000 + day * 86_400 + minute.astype(np.int64) * 60


def test_seeded_accuracy_on_a_wide_range():
    """Mean rank error of DPQuantiles' release on a 20 M-wide range, within a derived bound.

    Bound: a released quantile's rank is off by the noise of the (consistent) estimate of the
    prefix where the descent crosses its target, plus at most the items of the leaf it
    interpolates in. The raw estimate of a prefix sums at most ``(b - 1)`` nodes of every level
    below the top and ``top - 1`` top nodes, so its noise has standard deviation
    ``sigma = sqrt(nodes * V)`` with ``V`` the per-node noise variance; the consistent
    estimate is the minimum-variance unbiased one, so its standard deviation is at most
    ``sigma`` and its mean absolute value at most ``sigma``. Averaged over 99 quantiles and 5
    releases, the mean error stays below ``1.5 sigma`` plus the largest leaf. Ten times the noise
    (a mis-calibrated release) breaks the bound.
    """
    values = _timestamps(200_000, 11)
    ordered = np.sort(values)
    budget = PrivacyBudget.pure(0.1)
    mechanism = DPQuantiles(QS.tolist(), LOWER, UPPER, budget).mechanism
    sk = DyadicCountSketch(*mechanism.layout, clamp=True, **mechanism.tree).update(values)
    errors = []
    for t in range(5):
        out = mechanism.release(sk, budget, SRC.stream(("accuracy", t)))
        released = np.array([r.value for r in out], dtype=np.float64)
        lo = np.searchsorted(ordered, released, side="left")
        hi = np.searchsorted(ordered, released, side="right")
        errors.append(np.maximum(np.maximum(lo - QS * len(values), QS * len(values) - hi), 0))
    cals = PrivateDyadicCountSketch.calibrate(sk, budget, approx_noise="auto")
    nodes = (sk.branching - 1) * (sk.levels - 1) + sk.level_nodes(sk.levels - 1) - 1
    sigma = math.sqrt(nodes * max(c.noise_variance for c in cals))
    largest_leaf = int(sk.level_table(0).max())
    bound = 1.5 * sigma + largest_leaf
    mean_error = float(np.mean(errors))
    assert mean_error <= bound, (mean_error, sigma, largest_leaf)
    # The bound is not vacuous: it is a small fraction of N.
    assert bound < 0.01 * len(values)
