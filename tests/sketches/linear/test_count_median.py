"""Count-Median: the exact sketch, its DP release and their error bounds (docs/algorithms.md#lin-count-median).

Exact sketch: the table is the Count-Min table of the same input, the estimate is the median of
the key's counters, merges are exact, insertions cancel deletions, the a-priori binomial-median
bound holds on general turnstile data, and malformed bytes are refused. Release: zero-mean
noise with no offset, the Count-Min sensitivities (not Count Sketch's under replace-one), a
noise-only difference from the exact median bounded by the key's largest noise, immutability,
bytes round trip and the kind registry. Error bars: on a Zipf stream and on a general turnstile
stream the released ``error_bound(0.95)`` covers 93-97 % of point queries over keys and hash
seeds and is at most 3x the actual 95th-percentile error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMedianSketch, CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear import PRIVATE_LINEAR_SKETCHES
from beam_dpsketch.sketches.linear.calibration import linear_sensitivity
from beam_dpsketch.sketches.linear.countmedian import median_row_tail
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
)
from reproduction import datasets

SRC = NoiseSource.insecure_for_tests(20261129)
PURE = PrivacyBudget.pure(1.0)
RHO1 = PrivacyBudget.zcdp(1.0)


def _zipf(n: int = 5000, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).zipf(1.4, n) % 2000


def _turnstile(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A general turnstile stream: Zipf insertions, Zipf deletions of a permuted ranking.

    Returns ``(keys, weights, items, f)`` with ``f`` the exact net frequency of each item; about
    a third of the items end negative.
    """
    ins = datasets.zipf_stream(n_in, 1.1, 50_000, seed=7)
    dels = (datasets.zipf_stream(n_out, 1.1, 50_000, seed=8) * 7919) % 50_000 + 1
    keys = np.concatenate([ins, dels])
    weights = np.concatenate([np.ones(len(ins), np.int64), -np.ones(len(dels), np.int64)])
    items, inverse = np.unique(keys, return_inverse=True)
    f = np.bincount(inverse, weights=weights, minlength=len(items)).astype(np.int64)
    return keys, weights, items, f


# --------------------------------------------------------------------------------------------
# The exact sketch
# --------------------------------------------------------------------------------------------


def test_table_is_the_count_min_table_and_the_estimate_its_median():
    keys = _zipf()
    cmed = CountMedianSketch(64, 5, 11).update(keys)
    cmin = CountMinSketch(64, 5, 11).update(keys)
    assert np.array_equal(cmed.table, cmin.table) and cmed.total_weight == cmin.total_weight
    queries = np.arange(-5, 2100)
    rows = cmed.row_estimates(queries)
    assert rows.shape == (5, len(queries)) and rows.dtype == np.int64
    assert np.array_equal(cmed.estimate(queries), np.median(rows, axis=0))
    assert np.array_equal(cmin.estimate(queries), rows.min(axis=0))
    # With non-negative weights every row holds at least f(x): the median is never below the
    # minimum, which is never below the count.
    items, f = datasets.exact_counts(keys)
    assert np.all(cmed.estimate(items) >= cmin.estimate(items))
    assert np.all(cmin.estimate(items) >= f)


def test_even_depth_takes_the_mean_of_the_middle_rows():
    sketch = CountMedianSketch(8, 4, 2).update(_zipf(300))
    rows = np.sort(sketch.row_estimates([1, 2, 3]), axis=0)
    assert np.array_equal(sketch.estimate([1, 2, 3]), (rows[1] + rows[2]) / 2.0)


def test_merges_are_exact_and_deletions_cancel():
    a, b = _zipf(4000, 1), _zipf(3000, 2)
    whole = CountMedianSketch(128, 3, 5).update(np.concatenate([a, b]))
    left = CountMedianSketch(128, 3, 5).update(a)
    right = CountMedianSketch(128, 3, 5).update(b)
    assert left.copy().merge(right) == whole == right.copy().merge(left)
    # Insert then delete the same multiset: all zeros.
    gone = CountMedianSketch(128, 3, 5).update(a).update(a, -np.ones(len(a), dtype=np.int64))
    assert not gone.table.any() and gone.total_weight == 0
    with pytest.raises(ValueError, match="cannot merge a CountMedianSketch with a CountMinSketch"):
        left.merge(CountMinSketch(128, 3, 5))
    with pytest.raises(ValueError, match="different \\(width, depth, seed\\)"):
        left.merge(CountMedianSketch(128, 3, 6))


def test_bytes_round_trip_and_forged_totals():
    sketch = CountMedianSketch(32, 3, 1).update(_zipf(500))
    data = sketch.to_bytes()
    assert CountMedianSketch.from_bytes(data) == sketch
    with pytest.raises(SketchFormatError):
        CountMinSketch.from_bytes(data)  # the kind is part of the bytes
    forged = CountMedianSketch(32, 3, 1).update(_zipf(500))
    forged.total_weight += 1
    with pytest.raises(SketchFormatError, match="Count-Median rows do not all sum"):
        CountMedianSketch.from_bytes(forged.to_bytes())


def test_median_row_tail_is_the_binomial_tail():
    # depth 3: at least 2 of 3 rows; depth 4: at least 2 of 4 (the upper middle row).
    p = 0.1
    assert math.isclose(median_row_tail(3, p), 3 * p**2 * (1 - p) + p**3)
    assert math.isclose(median_row_tail(4, p), 1 - (1 - p) ** 4 - 4 * p * (1 - p) ** 3)
    assert median_row_tail(5, 0.0) == 0.0 and median_row_tail(5, 1.0) == 1.0


def test_a_priori_bound_holds_on_general_turnstile_data():
    # The stated bound: P(|f~ - f| > B) <= 5 % for B = error_bound(0.95, ||f||_1), per key,
    # over the hash functions. Checked over 6 hash seeds x 2000 keys (top and random).
    keys, weights, items, f = _turnstile(150_000, 100_000)
    assert np.mean(f < 0) > 0.2  # general turnstile, not strict
    l1 = float(np.abs(f).sum())
    rng = np.random.default_rng(3)
    pick = np.concatenate([np.argsort(-np.abs(f))[:500], rng.choice(len(items), 1500, False)])
    misses = []
    for seed in range(6):
        sketch = CountMedianSketch(1024, 5, seed).update(keys, weights)
        bound = sketch.error_bound(0.95, l1_norm=l1)
        # Markov per row, binomial over rows: the level of d = 5 rows at 95 % is about 4.8 l1/w.
        assert 3.0 * l1 / 1024 <= bound <= 8.0 * l1 / 1024, bound
        misses.append(np.mean(np.abs(sketch.estimate(items[pick]) - f[pick]) > bound))
    assert np.mean(misses) <= 0.05, misses
    # The default l1_norm is the total weight (||f||_1 for non-negative data only).
    assert sketch.error_bound(0.95) < bound
    assert CountMedianSketch(8, 3).error_bound() == 0.0
    with pytest.raises(ValueError, match="^l1_norm must be >= 0"):
        sketch.error_bound(0.95, l1_norm=-1.0)
    with pytest.raises(ValueError, match="^confidence must be in"):
        sketch.error_bound(1.0)


# --------------------------------------------------------------------------------------------
# The release
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("relation", ["add_remove", "replace", "replace_update", "user:3"])
@pytest.mark.parametrize("budget", [PURE, RHO1, PrivacyBudget.approx(1.0, 1e-6)])
def test_calibration_is_count_min_sensitivity_with_zero_mean_noise(relation, budget):
    cal = PrivateCountMedianSketch.calibrate(512, 5, budget, neighbouring=relation)
    cm = PrivateCountMinSketch.calibrate(512, 5, budget, neighbouring=relation, offset=False)
    assert cal == cm
    assert cal.offset == 0
    norm = "l1" if budget.is_pure else "l2"
    assert cal.sensitivity == linear_sensitivity("count-median", relation, 5, norm)
    assert cal.sensitivity == linear_sensitivity("count-min", relation, 5, norm)


def test_replace_one_needs_less_noise_than_count_sketch():
    # Count-Min's table moves by sqrt(2d) when one element is replaced; Count Sketch's by
    # 2 sqrt(d) (two keys colliding with opposite signs).
    assert linear_sensitivity("count-median", "replace", 5) == math.sqrt(10)
    cmed = PrivateCountMedianSketch.calibrate(512, 5, RHO1, neighbouring="replace")
    cs = PrivateCountSketch.calibrate(512, 5, RHO1, neighbouring="replace")
    assert math.isclose(cs.scale / cmed.scale, math.sqrt(2))


@pytest.mark.parametrize("budget", [RHO1, PURE, PrivacyBudget.approx(1, 1e-6)])
@pytest.mark.parametrize("relation", ["add_remove", "replace", "user:2"])
def test_noise_only_difference(budget, relation):
    exact = CountMedianSketch(64, 5, 3).update(_zipf())
    exact.update(_zipf(300, 2), -np.ones(300, dtype=np.int64))  # general turnstile
    rel = PrivateCountMedianSketch.release(
        exact, budget, SRC.stream(("cmed-inv", str(budget), relation)), neighbouring=relation
    )
    assert rel.offset == 0
    z = rel.cells - exact.table  # the noise of every cell, in counts
    keys = list(range(-50, 2500))
    h1, h2 = hash_keys(keys, 3)
    zk = np.take_along_axis(z, row_buckets(h1, h2, 5, 64), axis=1)
    diff = np.abs(rel.estimate(keys) - exact.estimate(keys))
    # The median is 1-Lipschitz in the largest coordinate change.
    assert np.all(diff <= np.abs(zk).max(0) + 1e-9)
    assert np.array_equal(rel.estimate(keys), np.median(rel.row_estimates(keys), axis=0))
    # Unsigned rows: a key's released row values are its exact counters plus their noise.
    assert np.allclose(rel.row_estimates(keys), exact.row_estimates(keys) + zk)


def test_noise_is_zero_mean_and_depends_only_on_the_stream():
    empty = CountMedianSketch(4096, 5, 0)
    other = CountMedianSketch(4096, 5, 0).update(_zipf(2000))
    a = PrivateCountMedianSketch.release(empty, PURE, SRC.stream("same-id"))
    b = PrivateCountMedianSketch.release(other, PURE, SRC.stream("same-id"))
    assert np.array_equal(a.table - empty.table, b.table - other.table)
    # 20480 discrete Laplace values of scale 5 (variance ~50): mean within 5 standard errors.
    noise = a.cells.ravel()
    assert abs(noise.mean()) <= 5 * math.sqrt(a.noise_variance / noise.size)
    assert abs(noise.var() / a.noise_variance - 1) <= 0.1
    # The median of the key's counters is centred: absent keys average 0.
    est = a.estimate([f"absent{i}" for i in range(4000)])
    assert abs(float(est.mean())) <= 5 * math.sqrt(a.noise_variance / 4000)


def test_offset_is_refused_and_the_exact_kind_is_required():
    exact = CountMedianSketch(16, 3).update([1, 2, 2])
    with pytest.raises(ValueError, match="^offset: PrivateCountMedianSketch has no offset"):
        PrivateCountMedianSketch.release(exact, PURE, SRC.stream("o"), offset=True)
    with pytest.raises(TypeError, match="needs an exact CountMedianSketch, got CountMinSketch"):
        PrivateCountMedianSketch.release(CountMinSketch(16, 3), PURE, SRC.stream("k"))
    with pytest.raises(TypeError, match="needs an exact CountMinSketch, got CountMedianSketch"):
        PrivateCountMinSketch.release(exact, PURE, SRC.stream("k"))
    rel = PrivateCountMedianSketch.release(exact, PURE, SRC.stream("r"))
    for call in (
        lambda: rel.update([1]),
        lambda: rel.merge(rel),
        lambda: rel.update_hashes([], []),
    ):
        with pytest.raises(TypeError, match="released \\(noisy\\) sketch"):
            call()


@pytest.mark.parametrize("relation", ["add_remove", "replace"])
def test_bytes_round_trip_registry_and_total(relation):
    exact = CountMedianSketch(256, 3, 9).update(_zipf(4000))
    rel = PrivateCountMedianSketch.release(
        exact, PURE, SRC.stream(("bytes", relation)), neighbouring=relation
    )
    back = PrivateCountMedianSketch.from_bytes(rel.to_bytes())
    assert back == rel and np.array_equal(back.estimate([1, 2, 3]), rel.estimate([1, 2, 3]))
    with pytest.raises(SketchFormatError):
        PrivateCountMinSketch.from_bytes(rel.to_bytes())
    assert PRIVATE_LINEAR_SKETCHES["count-median"] is PrivateCountMedianSketch
    assert {cls.SKETCH_KIND for cls in PRIVATE_LINEAR_SKETCHES.values()} == set(
        PRIVATE_LINEAR_SKETCHES
    )
    facts = rel.describe()
    assert facts["kind"] == "PrivateCountMedianSketch" and facts["offset"] == 0
    if relation == "replace":
        # The declared replace-one model publishes the exact total.
        assert rel.total() == 4000.0 and rel.total_variance() == 0.0
    else:
        # Otherwise the unbiased estimate from the noisy rows (each sums to N before noise).
        sd = math.sqrt(rel.total_variance())
        assert math.isclose(rel.total_variance(), 256 * rel.noise_variance / 3)
        assert abs(rel.total() - 4000.0) <= 6 * sd


def test_signed_tables_still_refuse_a_total_estimate():
    rel = PrivateCountSketch.release(CountSketch(64, 3).update([1, 2]), PURE, SRC.stream("cs"))
    with pytest.raises(ValueError, match="cannot estimate the total weight"):
        rel.total()


# --------------------------------------------------------------------------------------------
# Error bars of the release: coverage and width
# --------------------------------------------------------------------------------------------

SEEDS = 8


def _coverage(releases, queries, truth):
    covered, widths, p95 = [], [], []
    for released in releases:
        err = np.abs(released.estimate(list(queries)) - truth)
        bound = released.error_bound(0.95)
        covered.append(np.mean(err <= bound))
        widths.append(bound)
        p95.append(np.quantile(err, 0.95))
    return float(np.mean(covered)), float(np.mean(widths)), float(np.mean(p95))


@pytest.mark.parametrize("budget", [PURE, PrivacyBudget.approx(0.1, 1e-6)])
def test_error_bound_covers_95_percent_on_zipf_data(budget):
    keys = datasets.zipf_stream(400_000, 1.1, 50_000, seed=7)
    items, f = datasets.exact_counts(keys)
    rng = np.random.default_rng(1)
    queries = np.concatenate([datasets.top_k(items, f, 500), rng.choice(items, 1500, False)])
    truth = datasets.counts_of(items, f, queries).astype(np.float64)
    releases = [
        PrivateCountMedianSketch.release(
            CountMedianSketch(2048, 5, seed).update(keys),
            budget,
            NoiseSource.insecure_for_tests(seed).stream("cmed-bound"),
        )
        for seed in range(SEEDS)
    ]
    coverage, width, p95 = _coverage(releases, queries.tolist(), truth)
    assert 0.93 <= coverage <= 0.97, coverage
    assert width <= 3.0 * p95, (width, p95)


@pytest.mark.parametrize("sign", [1, -1])
def test_error_bound_covers_95_percent_on_general_turnstile_data(sign):
    # sign -1 mirrors the stream (mostly deletions): unsigned collisions then push the rows
    # down, and the bound must read the lower tail of the cells as well as the upper one.
    keys, weights, items, f = _turnstile(300_000, 200_000)
    weights, f = sign * weights, sign * f
    rng = np.random.default_rng(1)
    pick = np.concatenate([np.argsort(-np.abs(f))[:500], rng.choice(len(items), 1500, False)])
    releases = [
        PrivateCountMedianSketch.release(
            CountMedianSketch(2048, 5, seed).update(keys, weights),
            PURE,
            NoiseSource.insecure_for_tests(seed).stream(("cmed-turnstile", sign)),
        )
        for seed in range(SEEDS)
    ]
    coverage, width, p95 = _coverage(releases, items[pick].tolist(), f[pick].astype(np.float64))
    assert 0.93 <= coverage <= 0.97, coverage
    assert width <= 3.0 * p95, (width, p95)
