"""Baselines of [WWC24, Appendix B] (beam_dpsketch.sketches.sliding.baselines), oracle T20."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.baselines import (
    PCCMG,
    ExactSlidingWindow,
    ExactWindowCountMin,
    USketch,
)

ZERO = NoiseSource.zero_noise_for_tests


def test_exact_sliding_window_every_step_and_chunking():
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 9, 300)
    for w in (1, 5, 64):
        ex = ExactSlidingWindow(w)
        for t, x in enumerate(stream.tolist(), start=1):
            ex.update_batch(np.array([x]))
            expected = np.bincount(stream[max(0, t - w) : t], minlength=12)
            assert np.array_equal(ex.estimate(np.arange(12)), expected)
        big = ExactSlidingWindow(w).update_batch(stream)  # one batch longer than the window
        assert np.array_equal(big.estimate(np.arange(12)), ex.estimate(np.arange(12)))
    words = ExactSlidingWindow(3).update_batch(["a", "b", "a", "c", "a"])
    assert words.estimate(["a", "b", "c", "zz"]).tolist() == [2, 0, 1, 0]
    assert words.heavy_hitters(["a", "c"], 0.5) == [("a", 2.0)]
    with pytest.raises(ValueError, match="window"):
        ExactSlidingWindow(0)


def test_exact_window_countmin_equals_countmin_of_the_window():
    stream = np.random.default_rng(1).integers(0, 1000, 5000)
    cm = ExactWindowCountMin(700, width=50, depth=4, seed=3)
    pos = 0
    for chunk in (1, 699, 2, 1500, 2798):
        cm.update_batch(stream[pos : pos + chunk])
        pos += chunk
        ref = CountMinSketch(50, 4, 3).update(stream[max(0, pos - 700) : pos])
        assert np.array_equal(cm.table, ref.table)
        assert np.array_equal(cm.estimate(np.arange(20)), ref.estimate(np.arange(20)))


def _usketch(**kw):
    args = dict(width=64, depth=3, seed=1, blocks_per_window=10, noise_source=ZERO())
    args.update(kw)
    return USketch(1000, 1.0, **args)


def test_usketch_noise_free_selection():
    stream = np.random.default_rng(2).integers(0, 300, 2400)
    us = _usketch()
    assert us.block == 100 and us.checkpoints == (100, 10)
    us.update_batch(stream[:2345])
    old, x, last = us.selection()
    ws = 2345 - 1000 + 1
    assert (old, last) == (14, 23) and x == 0  # Lold = 55 > 10: the full block covers ws
    u = (old - 1) * 100 + 1 if x == 0 else old * 100 - 10 + 1
    expected = CountMinSketch(64, 3, 1).update(stream[u - 1 : old * 100]).estimate(np.arange(50))
    for kb in range(old + 1, last + 1):
        block = stream[(kb - 1) * 100 : kb * 100]
        expected = expected + CountMinSketch(64, 3, 1).update(block).estimate(np.arange(50))
    assert np.array_equal(us.estimate(np.arange(50)), expected.astype(float))
    assert u <= ws
    us2 = _usketch().update_batch(stream[:2395])  # Lold = 5 <= 10: the suffix is chosen
    assert us2.selection() == (14, 1, 23)


def test_usketch_repeated_queries_identical_and_accounted():
    src = NoiseSource.insecure_for_tests(4)
    us = _usketch(noise_source=src, domain=range(100))
    us.update_batch(np.random.default_rng(3).integers(0, 100, 1500))
    assert us.epsilon_per_answer == pytest.approx(1.0 / (2 * 32))  # ceil(sqrt(1000)) = 32
    a = us.estimate(np.arange(10))
    assert us.epsilon_spent == pytest.approx(10 * us.epsilon_per_answer)
    b = us.estimate(np.arange(10))
    assert np.array_equal(a, b)  # same selection: same noise, no extra cost
    assert us.epsilon_spent == pytest.approx(10 * us.epsilon_per_answer)
    out = us.estimate([5, 1000])  # a key outside the domain uses its own keyed stream
    assert out[0] == a[5] and us.epsilon_spent == pytest.approx(11 * us.epsilon_per_answer)
    assert np.array_equal(us.estimate([1000]), out[1:])
    us.update_batch(np.zeros(100, dtype=np.int64))  # a new block: a new selection
    assert not np.array_equal(us.estimate(np.arange(10)), a)
    capped = _usketch(noise_source=src, epsilon_budget=3 * (1 / 64))
    capped.update_batch(np.arange(200))
    capped.estimate([1, 2, 3])
    with pytest.raises(ValueError, match="epsilon_budget"):
        capped.estimate([4])


def test_usketch_noise_scale_t20():
    """Noise is Laplace(2 ceil(sqrt(w)) / eps): empirical variance 2 b^2 (T20)."""
    m = 200_000
    us = USketch(
        10_000,
        0.5,
        width=8,
        depth=2,
        noise_source=NoiseSource.insecure_for_tests(5),
        domain=range(m),
    )
    noise = us.estimate(np.arange(m))  # empty stream: pure noise
    b = 2 * 100 / 0.5
    assert us.scale == b
    # Var of Laplace(b) is 2b^2, kurtosis 6: sd of the sample variance is 2b^2 sqrt(5/n);
    # z = 5.4 (Chebyshev-free normal approx at n = 2e5) gives false failure < 1e-6.
    assert abs(noise.var() / (2 * b * b) - 1) <= 5.4 * math.sqrt(5 / m)
    assert abs(noise.mean()) <= 5.4 * math.sqrt(2) * b / math.sqrt(m)


def test_pccmg_structure_t20():
    p = PCCMG(10_000, PrivacyBudget.pure(1.0), lam=0.05, universe=range(100), noise_source=ZERO())
    assert p.levels == math.ceil(math.log2(4 / 0.05)) == 7
    assert p.w0 == math.ceil(0.05 * 10_000 / 4) == 125
    assert p.block_lengths == tuple(2**i * 125 for i in range(8))
    # docs/algorithms.md#dpsw-e24: the top level spans the window
    assert p.block_lengths[-1] >= 10_000
    assert p.epsilon_total < 1.0
    assert p.epsilon_total == pytest.approx(1 - 2**-8)
    assert p.ks == tuple(2 ** (i + 1) * 8 for i in range(8))
    assert p.noise_scales == pytest.approx(
        tuple(2 * k / e for k, e in zip(p.ks, p.level_epsilons, strict=True))
    )
    stream = np.random.default_rng(6).integers(0, 10, 23_456)  # 10 keys <= k_0: MG is exact
    p.update_batch(stream[:11_111])
    p.update_batch(stream[11_111:])
    cov = p.cover()
    t = 23_456
    a0 = ((t - 10_000) // 125) * 125 + 1
    assert cov[0][2] == a0 and cov[-1][3] == t // 125 * 125
    assert all(
        x[3] + 1 == y[2] for x, y in zip(cov, cov[1:], strict=False)
    )  # disjoint and contiguous
    for i, _c, first, last in cov:
        assert last - first + 1 == p.block_lengths[i] and (first - 1) % p.block_lengths[i] == 0
    u, v = cov[0][2], cov[-1][3]
    assert np.array_equal(p.estimate(np.arange(10)), np.bincount(stream[u - 1 : v], minlength=10))
    assert [k for k, _ in p.heavy_hitters(np.arange(10), 0.05)] == list(range(10))


def test_pccmg_noisy_release_is_deterministic_and_refuses_bad_params():
    stream = np.random.default_rng(7).integers(0, 50, 5000)
    a = PCCMG(
        2000,
        PrivacyBudget.pure(1.0),
        lam=0.1,
        universe=range(50),
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    b = PCCMG(
        2000,
        PrivacyBudget.pure(1.0),
        lam=0.1,
        universe=range(50),
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    a.update_batch(stream)
    b.update_batch(stream[:1234]).update_batch(stream[1234:])
    assert np.array_equal(a.estimate(np.arange(50)), b.estimate(np.arange(50)))
    assert np.array_equal(a.estimate(np.arange(50)), a.estimate(np.arange(50)))
    with pytest.raises(ValueError, match="lam"):
        PCCMG(100, PrivacyBudget.pure(1.0), lam=1.5, universe=range(5))
    with pytest.raises(ValueError, match="epsilon"):
        PCCMG(100, PrivacyBudget.pure(-1.0), lam=0.1, universe=range(5))
    with pytest.raises(ValueError, match="blocks_per_window"):
        USketch(10, 1.0, width=4, depth=1, blocks_per_window=11)
