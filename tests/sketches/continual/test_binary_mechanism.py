"""Gaussian binary mechanism: docs/algorithms.md#lazy-oracles oracles G1-G8 and S11, errors, bytes."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import gaussian_delta
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.continual.binary_mechanism import (
    GaussianBinaryMechanism,
    HorizonExceededError,
    created_node,
    dyadic_nodes,
    gaussbm_height,
    gaussbm_sigma,
    max_error_bound,
)

SRC = NoiseSource.insecure_for_tests(7)
L_1250 = math.log(1250.0)
GBM_KIND = "GaussianBinaryMechanism"


def _gbm(n=4, horizon=20, eps=0.5, delta=1e-3, m=1, **kw):
    kw.setdefault("noise_source", SRC)
    kw.setdefault("release_prefix", "test-gbm")
    return GaussianBinaryMechanism(n, horizon, PrivacyBudget.approx(eps, delta), m, **kw)


# ------------------------------------------------------------------ G1: golden values


@pytest.mark.parametrize(
    "horizon,h", [(1, 1), (2, 2), (3, 2), (4, 3), (20, 5), (19066, 15), (2**20, 21)]
)
def test_g1_height(horizon, h):
    assert gaussbm_height(horizon) == h


@pytest.mark.parametrize(
    "horizon,m,eps,sigma",
    [
        (1, 1, 0.5, 7.5530),
        (4, 1, 0.5, 13.0821),
        (20, 1, 0.5, 16.8889),
        (19066, 6, 0.3, 119.4228),
        (19066, 12, 0.3, 168.8893),
        (2**20, 6, 0.3, 141.3029),
        (2**20, 12, 0.3, 199.8325),
    ],
)
def test_g1_sigma_table(horizon, m, eps, sigma):
    got = gaussbm_sigma(horizon, m, eps, 1e-3, calibration="paper")
    assert got == pytest.approx(sigma, rel=1e-4)
    # Independent formula of Algorithm 1 (with the factor 2 the Theorem 1 proof drops, docs/algorithms.md#lazy-e4).
    h = horizon.bit_length()
    assert got == pytest.approx(math.sqrt(2 * h * m * L_1250) / eps, rel=1e-8)
    assert _gbm(horizon=horizon, m=m, eps=eps, calibration="paper").sigma == got


def test_sigma_scales_with_max_contributions():
    base = gaussbm_sigma(100, 6, 0.5, 1e-5)
    assert gaussbm_sigma(100, 6, 0.5, 1e-5, max_contributions=3) == pytest.approx(3 * base)


def test_paper_calibration_refuses_large_epsilon():
    with pytest.raises(ValueError, match="epsilon"):
        gaussbm_sigma(100, 6, 1.0, 1e-5, calibration="paper")
    with pytest.raises(ValueError, match="epsilon"):
        _gbm(eps=2.0, calibration="paper")


def test_analytic_calibration_meets_exact_profile():
    for eps in (0.3, 1.0, 4.0):
        sigma = gaussbm_sigma(1000, 6, eps, 1e-6, calibration="analytic")
        l2 = math.sqrt(6 * gaussbm_height(1000))
        assert gaussian_delta(l2, sigma, eps) <= 1e-6
        # Tight: 1% less noise violates the target.
        assert gaussian_delta(l2, 0.99 * sigma, eps) > 1e-6
    # Analytic needs no more noise than classical where both apply.
    assert gaussbm_sigma(1000, 6, 0.5, 1e-6, calibration="analytic") < gaussbm_sigma(
        1000, 6, 0.5, 1e-6, calibration="paper"
    )


def test_max_error_bound_formula():
    # Corrected Lemma 4 (docs/algorithms.md#lazy-e8): (2h/eps) * sqrt(m L ln(2 |I| n / beta)).
    got = max_error_bound(64, 50, 64, 2, 0.5, 1e-3, 0.1)
    h = 7
    assert got == pytest.approx(2 * h / 0.5 * math.sqrt(2 * L_1250 * math.log(2 * 64 * 50 / 0.1)))


# ------------------------------------------------------------------ G2: tree structure


def _paper_literal_nodes(horizon: int) -> list[tuple[int, int]]:
    """Algorithm 1 as printed, called with the 1-indexed time (the docs/algorithms.md#lazy-e2 bug): every created node."""
    stack: list[tuple[int, int]] = []
    created = []
    for t in range(1, horizon + 1):
        stack.append((t, t))
        created.append((t, t))
        level = 0
        while len(stack) > 1 and t & (1 << level):
            right = stack.pop()
            left = stack.pop()
            stack.append((left[0], right[1]))
            created.append((left[0], right[1]))
            level += 1
    return created


def _corrected_stack(horizon: int):
    """Algorithm 1 corrected (tz(k) merges of the internal count): yields (k, stack, created)."""
    stack: list[tuple[int, int]] = []
    created = []
    for k in range(1, horizon + 1):
        stack.append((k, k))
        created.append((k, k))
        for _ in range((k & -k).bit_length() - 1):
            right = stack.pop()
            left = stack.pop()
            stack.append((left[0], right[1]))
            created.append((left[0], right[1]))
        yield k, list(stack), list(created)


def _max_nodes_per_leaf(nodes, horizon):
    cover = np.zeros(horizon + 2, dtype=np.int64)
    for a, b in nodes:
        cover[a] += 1
        cover[b + 1] -= 1
    return int(np.cumsum(cover)[1 : horizon + 1].max())


def test_g2_dyadic_decomposition():
    assert dyadic_nodes(13) == [(1, 8), (9, 12), (13, 13)]
    for k, stack, _ in _corrected_stack(1000):
        assert stack == dyadic_nodes(k)
        assert len(stack) == bin(k).count("1") <= gaussbm_height(1000)
        # The node our level slots keep for update k is the last node the stack created.
        assert stack[-1] == created_node(k)


@pytest.mark.parametrize("horizon", [3, 7, 15, 31])
def test_g2_tree_merge_at_erratum_horizons(horizon):
    h = gaussbm_height(horizon)
    *_, (_, _, created) = _corrected_stack(horizon)
    assert _max_nodes_per_leaf(created, horizon) <= h
    # Only the final node of each update is ever released, and it is the level-slot node.
    released = [created_node(k) for k in range(1, horizon + 1)]
    assert _max_nodes_per_leaf(released, horizon) == h
    # The printed algorithm puts some leaf into h + 1 nodes at exactly these horizons (docs/algorithms.md#lazy-e2).
    assert _max_nodes_per_leaf(_paper_literal_nodes(horizon), horizon) == h + 1


def test_g2_every_horizon_up_to_1000():
    created = [created_node(k) for k in range(1, 1001)]
    cover = np.zeros(1002, dtype=np.int64)
    for horizon in range(1, 1001):
        a, b = created[horizon - 1]
        cover[a : b + 1] += 1
        assert cover[1 : horizon + 1].max() <= gaussbm_height(horizon)


# ------------------------------------------------------------------ G3, G7: exactness, reference


def test_g3_zero_noise_is_exact_prefix_sum():
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, size=(100, 6))
    x[rng.random(x.shape) < 0.3] = 0
    mech = _gbm(n=6, horizon=100, noise_source=NoiseSource.zero_noise_for_tests())
    prefix = np.cumsum(x, axis=0)
    for k in range(100):
        mech.update(x[k])
        np.testing.assert_array_equal(mech.values(), prefix[k])


def test_g7_level_slots_equal_literal_stack():
    n, horizon = 5, 70
    rng = np.random.default_rng(2)
    x = rng.integers(-3, 4, size=(horizon, n))
    mech = _gbm(n=n, horizon=horizon)
    # Reference: the corrected stack ([Hol25, Algorithm 1]), each node carrying (exact sum, noise); a node's
    # noise is the keyed noise of (counter, k) of the update that created it last.
    stacks: list[list[list[float]]] = [[] for _ in range(n)]
    for k in range(1, horizon + 1):
        mech.update(x[k - 1])
        keyed = mech._node_noise(np.arange(n), np.full(n, k))
        for c in range(n):
            st = stacks[c]
            st.append([int(x[k - 1, c]), np.nan])  # the leaf's own noise is never released
            for _ in range((k & -k).bit_length() - 1):
                right = st.pop()
                left = st.pop()
                st.append([left[0] + right[0], np.nan])
            st[-1][1] = keyed[c]
            ref = sum(e + z for e, z in st)
            assert mech.values([c])[0] == pytest.approx(ref, rel=1e-12, abs=1e-9)


# ------------------------------------------------------------------ G4, G5, G8: noise statistics

R_COUNTERS = 40_000
T_STAT = 64


@pytest.fixture(scope="module")
def noise_run():
    """Errors e_k = output - prefix of 40,000 counters at every k = 1..64 (seeded)."""
    mech = _gbm(
        n=R_COUNTERS, horizon=T_STAT, eps=0.5, m=2, release_prefix="stats", calibration="paper"
    )
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=R_COUNTERS)
    errors = np.empty((T_STAT, R_COUNTERS))
    for k in range(T_STAT):
        mech.update(x)
        errors[k] = mech.values() - (k + 1) * x
    return mech, errors


def test_g4_noise_variance_is_popcount_sigma2(noise_run):
    mech, errors = noise_run
    # Two-sided chi-square bounds on the sample variance, alpha = 1e-6 split over 64 times x 2
    # tails: s^2 / (popcount(k) sigma^2) ~ chi2(R-1) exactly for Gaussian noise (the
    # lattice Gaussian is within 2**-20 sigma of it).
    alpha = 1e-6 / (2 * T_STAT)
    lo, hi = stats.chi2.ppf([alpha, 1 - alpha], R_COUNTERS - 1) / (R_COUNTERS - 1)
    for k in range(1, T_STAT + 1):
        var = bin(k).count("1") * mech.sigma**2
        ratio = errors[k - 1].var(ddof=1) / var
        assert lo < ratio < hi, (k, ratio)
        # Mean: |z| < 5.9 has probability 1 - 3.6e-9 per k (union over 64 times: < 1e-6).
        assert abs(errors[k - 1].mean()) < 5.9 * math.sqrt(var / R_COUNTERS)
    # Wrong popcount (e.g. h nodes always active) would fail: k = 1 and k = 63 differ 6x.
    assert errors[62].var() / errors[0].var() == pytest.approx(6.0, rel=0.1)


def test_g4_marginal_is_gaussian(noise_run):
    mech, errors = noise_run
    for k in (1, 7, 13, 64):
        z = errors[k - 1] / (mech.sigma * math.sqrt(bin(k).count("1")))
        # KS p-value > 1e-7 per k: false failure < 1e-6 over the four checks.
        assert stats.kstest(z, "norm").pvalue > 1e-7


@pytest.mark.parametrize(
    "k1,k2,rho", [(4, 5, 1 / math.sqrt(2)), (3, 4, 0.0), (5, 6, 0.5), (6, 7, 2 / math.sqrt(6))]
)
def test_g5_noise_reuse_correlation(noise_run, k1, k2, rho):
    _, errors = noise_run
    r = np.corrcoef(errors[k1 - 1], errors[k2 - 1])[0, 1]
    # Sample correlation has sd <= (1 - rho^2)/sqrt(R) + O(1/R) <= 0.005; 0.03 is > 6 sd.
    assert abs(r - rho) < 0.03


def test_g5_queries_without_update_are_identical():
    mech = _gbm()
    mech.update(np.arange(4))
    first = mech.values()
    assert np.array_equal(first, mech.values())
    drawn = mech.noise_values_drawn
    mech.values()
    assert mech.noise_values_drawn == drawn


def test_g8_corrected_lemma4(noise_run):
    mech, errors = noise_run
    n, beta = 50, 0.1
    # 800 independent runs of 50 counters: worst |error| of each run over all counters and k.
    worst = np.abs(errors).reshape(T_STAT, R_COUNTERS // n, n).max(axis=(0, 2))
    bound = max_error_bound(T_STAT, n, T_STAT, 2, 0.5, 1e-3, beta)
    assert bound == pytest.approx(
        mech.sigma * math.sqrt(2 * 7 * math.log(2 * T_STAT * n / beta)), rel=1e-12
    )
    # Each run exceeds B_max with probability <= beta; the union bound is loose (expected ~0),
    # and P[Binomial(800, 0.1) > 125] < 3e-7.
    assert (worst > bound).sum() <= 125
    # No run exceeds B_max at beta' = 1.25e-9 (800 runs: false failure <= 1e-6).
    assert worst.max() <= max_error_bound(T_STAT, n, T_STAT, 2, 0.5, 1e-3, 1e-6 / 800)
    # Sanity: sigma is not far too small.
    assert np.median(worst) >= bound / 4


# ------------------------------------------------------------------ G6: horizon


def test_g6_update_beyond_horizon_raises_and_changes_nothing():
    mech = _gbm(n=3, horizon=5)
    for _ in range(5):
        mech.update([1, 2, 3])
    before = mech.to_bytes()
    with pytest.raises(HorizonExceededError, match="T=5"):
        mech.update([1, 1, 1])
    with pytest.raises(HorizonExceededError, match="T=5"):
        mech.advance([1], 1, counters=[2])
    assert mech.to_bytes() == before
    mech2 = _gbm(n=3, horizon=5)
    with pytest.raises(HorizonExceededError):
        mech2.update_many(np.ones((6, 3), dtype=np.int64))
    assert int(mech2.steps.sum()) == 0


# ------------------------------------------------------------------ batching and faithfulness


def test_update_many_and_subsets_equal_single_steps():
    rng = np.random.default_rng(4)
    n, horizon = 30, 200
    x = rng.integers(-2, 5, size=(horizon, n))
    single = _gbm(n=n, horizon=horizon, release_prefix="batch")
    for row in x:
        single.update(row)
    many = _gbm(n=n, horizon=horizon, release_prefix="batch", faithful=False)
    cuts = [0, 1, 2, 3, 17, 64, 65, 150, 200]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        many.update_many(x[a:b])
    many.update_many(np.zeros((0, n), dtype=np.int64))
    assert np.array_equal(single.values(), many.values())
    assert np.array_equal(single._slots, many._slots)
    assert np.array_equal(single._total, many._total)
    # Counters advanced separately (as the lazy sketch does) reach the same state.
    sub = _gbm(n=n, horizon=horizon, release_prefix="batch")
    sub.advance(x[:5, :10].sum(axis=0), 5, counters=np.arange(10))
    sub.advance(x[:3, 10:].sum(axis=0), 3, counters=np.arange(10, n))
    sub.advance(x[3:, 10:].sum(axis=0), horizon - 3, counters=np.arange(10, n))
    sub.advance(x[5:, :10].sum(axis=0), horizon - 5, counters=np.arange(10))
    assert np.array_equal(single.values(), sub.values())


def test_faithful_draws_every_node_and_matches_collapsed():
    n, horizon = 100, 1000
    x = np.ones((horizon, n), dtype=np.int64)
    faithful = _gbm(n=n, horizon=horizon, rounds_per_block=10, release_prefix="f")
    collapsed = _gbm(n=n, horizon=horizon, rounds_per_block=10, release_prefix="f", faithful=False)
    faithful.update_many(x)
    collapsed.update_many(x)
    assert np.array_equal(faithful.values(), collapsed.values())
    # Faithful: one noise value per counter update (Algorithm 1 in level-slot form).
    assert faithful.noise_values_drawn == n * horizon
    # Collapsed: only the blocks of the popcount(1000) = 6 active nodes.
    assert collapsed.noise_values_drawn <= 6 * 10 * n


# ------------------------------------------------------------------ keyed noise (S11)


def test_noise_is_keyed_by_source_prefix_and_node():
    a = _gbm(n=8, horizon=16, release_prefix="same")
    b = _gbm(n=8, horizon=16, release_prefix="same")
    c = _gbm(n=8, horizon=16, release_prefix="other")
    d = _gbm(n=8, horizon=16, release_prefix="same", noise_source=NoiseSource.insecure_for_tests(8))
    for mech in (a, b, c, d):
        mech.update_many(np.ones((5, 8), dtype=np.int64))
    assert np.array_equal(a.values(), b.values())
    assert not np.any(a.values() == c.values())
    assert not np.any(a.values() == d.values())


def test_s11_node_noise_distinct_and_uncorrelated_across_rounds():
    n, rounds = 300, 40
    mech = _gbm(n=n, horizon=rounds, rounds_per_block=3, release_prefix="s11")
    counters = np.tile(np.arange(n), rounds)
    ks = np.repeat(np.arange(1, rounds + 1), n)
    z = mech._node_noise(counters, ks).reshape(rounds, n)
    # Values live on a 2**-k lattice with spacing <= sigma * 2**-20, so a few equal values occur
    # by chance: expected colliding pairs <= N^2/2 * 2**-20 / (2 sqrt(pi)) ~ 19.4 for N = 12,000
    # (P[Poisson(19.4) >= 60] < 1e-12). Overlapping streams (the Philox hazard of docs/algorithms.md#noise-sampling)
    # would repeat most values of a round.
    assert z.size - np.unique(z).size < 60
    r = np.corrcoef(z[:-1].ravel(), z[1:].ravel())[0, 1]
    # Independent noise: r has sd 1/sqrt(N) with N = n * (rounds - 1) pairs; 5.5 sd is a
    # two-sided false-failure probability of 4e-8 (docs/algorithms.md#lazy-oracles S11 uses 4 sd).
    assert abs(r) < 5.5 / math.sqrt(n * (rounds - 1))


# ------------------------------------------------------------------ bytes, pickling, errors


def test_round_trip_mid_stream_is_bit_identical():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, size=(40, 6))
    ref = _gbm(n=6, horizon=40, release_prefix="rt")
    ref.update_many(x)
    half = _gbm(n=6, horizon=40, release_prefix="rt")
    half.update_many(x[:23])
    restored = GaussianBinaryMechanism.from_bytes(half.to_bytes(), SRC)
    assert restored.to_bytes() == half.to_bytes()
    restored.update_many(x[23:])
    assert np.array_equal(restored.values(), ref.values())
    pickled = pickle.loads(pickle.dumps(half))
    pickled.update_many(x[23:])
    assert np.array_equal(pickled.values(), ref.values())


def test_from_bytes_rejects_wrong_source_and_malformed_bytes():
    mech = _gbm(n=6, horizon=40)
    mech.update(np.arange(6))
    data = mech.to_bytes()
    with pytest.raises(ValueError, match="noise_source"):
        GaussianBinaryMechanism.from_bytes(data, NoiseSource.insecure_for_tests(99))
    with pytest.raises(SketchFormatError):
        GaussianBinaryMechanism.from_bytes(data[:-7], SRC)
    corrupted = bytearray(data)
    corrupted[len(data) // 2] ^= 0xFF
    with pytest.raises(SketchFormatError):
        GaussianBinaryMechanism.from_bytes(bytes(corrupted), SRC)
    # Forged state: noise in an inactive level, or k beyond the horizon.
    _, params, arrays = serialization.loads(data)
    bad = dict(arrays, slots=arrays["slots"].copy())
    bad["slots"][0, 3] = 1.0
    with pytest.raises(SketchFormatError, match="inactive"):
        GaussianBinaryMechanism.from_bytes(serialization.dumps(GBM_KIND, params, bad), SRC)
    bad = dict(arrays, k=np.full(6, 41, dtype=np.int64))
    with pytest.raises(SketchFormatError, match="horizon"):
        GaussianBinaryMechanism.from_bytes(serialization.dumps(GBM_KIND, params, bad), SRC)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"n": 0}, ValueError, "n must"),
        ({"horizon": 0}, ValueError, "horizon"),
        ({"m": 0}, ValueError, "m must"),
        ({"delta": 0.0}, ValueError, "delta"),
        ({"eps": -1.0}, ValueError, "epsilon"),
        ({"calibration": "exact"}, ValueError, "calibration"),
        ({"release_prefix": ["a"]}, TypeError, "release_prefix"),
        ({"max_contributions": 0}, ValueError, "max_contributions"),
        ({"noise_source": b"key"}, TypeError, "noise_source"),
        ({"n": 2.5}, TypeError, "n must"),
    ],
)
def test_parameter_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        _gbm(**kwargs)


def test_update_errors():
    mech = _gbm(n=3)
    with pytest.raises(ValueError, match="shape"):
        mech.update([1, 2])
    with pytest.raises(TypeError, match="integers"):
        mech.update([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="counters"):
        mech.advance([1], 1, counters=[3])
    with pytest.raises(ValueError, match="at least one step"):
        mech.advance([0, 5, 0], np.array([1, 0, 1]))
    with pytest.raises(ValueError, match="distinct"):
        mech.advance([1, 1], 1, counters=[2, 2])
    with pytest.raises(ValueError, match="steps"):
        mech.advance([1, 1, 1], -1)
    assert "total" not in repr(mech) and "sigma" in repr(mech)
