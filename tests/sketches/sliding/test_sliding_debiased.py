"""The default DPSW-Sketch estimator is unbiased for keys that share no cell.

[WWC24, Algorithm 3] sums, over the selected PCMSs, the minimum of ``depth`` noisy counters;
each minimum carries the minimum of ``depth`` zero-mean noise values, whose mean ``-c_a sigma``
does not depend on the data (docs/algorithms.md#dpsw-debiased). The default estimator removes
that public mean. These tests run hundreds of seeded releases and check that an absent key
averages 0 and a present key averages its count over the covered range, within a bound from the
noise sigmas; the paper's sum as written (``estimator="sum_of_mins"``) fails the same bound.

Each statistical check has a false-failure probability below 1e-6 (stated next to it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch, noise_minimum_mean

# [WWC24] technical report, Appendix B of the specification: c_a = E[max of a standard normals].
APPENDIX_B = {1: 0.0, 2: 0.5641896, 3: 0.8462844, 4: 1.0293754, 5: 1.1629645, 6: 1.2672064}


def collision_free_seed(m: int, width: int, depth: int) -> int:
    """A hash seed under which keys 0..m-1 occupy distinct cells in every row (test-only)."""
    keys = np.arange(m, dtype=np.int64)
    for seed in range(10_000):
        b = row_buckets(*hash_keys(keys, seed), depth, width)
        if all(len(np.unique(row)) == m for row in b):
            return seed
    raise AssertionError("no collision-free seed")


@pytest.mark.parametrize("depth", sorted(APPENDIX_B))
def test_noise_minimum_mean_matches_appendix_b(depth):
    assert noise_minimum_mean(depth, 1.0) == pytest.approx(-APPENDIX_B[depth], abs=1e-6)
    assert noise_minimum_mean(depth, 7.5) == pytest.approx(-7.5 * APPENDIX_B[depth], abs=1e-5)


@pytest.mark.parametrize(("depth", "sigma"), [(2, 0.7), (3, 2.0), (5, 4.5)])
def test_discrete_noise_minimum_mean_by_direct_summation(depth, sigma):
    # E[min] = sum_{k >= 1} P[min >= k] - sum_{k <= 0} P[min < k], from the pmf directly.
    support = np.arange(-200, 201)
    pmf = np.exp(-(support**2) / (2 * sigma**2))
    pmf /= pmf.sum()
    tail = {int(k): float(pmf[support >= k].sum()) for k in support}
    expected = sum(tail[k] ** depth for k in range(1, 201)) - sum(
        1 - tail[k] ** depth for k in range(-199, 1)
    )
    got = noise_minimum_mean(depth, sigma, "discrete_gaussian")
    assert got == pytest.approx(expected, abs=1e-9)
    # Close to the continuous value, and never the continuous value for small sigma.
    assert abs(got - noise_minimum_mean(depth, sigma)) < 0.2 * sigma


def test_noise_minimum_mean_refuses_bad_parameters():
    with pytest.raises(ValueError, match="depth"):
        noise_minimum_mean(0, 1.0)
    with pytest.raises(ValueError, match="sigma"):
        noise_minimum_mean(3, 0.0)
    with pytest.raises(TypeError, match="sigma"):
        noise_minimum_mean(3, "1")
    with pytest.raises(ValueError, match="noise"):
        noise_minimum_mean(3, 1.0, "laplace")


def _releases(depth: int, noise: str, estimator: str, runs: int):
    """``runs`` seeded releases at one query time: (estimates - exact counts over [u, v]).

    Keys 0..4 are in the stream, key 5 never occurs; under the chosen hash seed the six keys
    occupy distinct cells in every row, so the only error is the noise.
    """
    m, width, window = 6, 64, 100
    seed = collision_free_seed(m, width, depth)
    stream = np.random.default_rng(7).integers(0, m - 1, 263)
    diffs = []
    exact = sigma2 = None
    for r in range(runs):
        sk = DPSWSketch.paper_experiments(
            window,
            PrivacyBudget.approx(1.0, 1e-6),
            width=width,
            depth=depth,
            seed=seed,
            noise=noise,
            noise_source=NoiseSource.insecure_for_tests(5000 + r),
        )
        sk.update_batch(stream)
        if exact is None:
            sels = sk.selection()
            u, v = sels[0].start, sels[-1].end
            exact = np.bincount(stream[u - 1 : v], minlength=m)
            sigma2 = sum(sk.level_sigmas()[s.level - 1] ** 2 for s in sels)
            bias = -sum(noise_minimum_mean(depth, sk.level_sigmas()[s.level - 1]) for s in sels)
        diffs.append(sk.estimate(np.arange(m), estimator=estimator) - exact)
    return np.asarray(diffs), math.sqrt(sigma2), bias


@pytest.mark.parametrize(
    ("depth", "noise"), [(3, "gaussian"), (2, "gaussian"), (5, "discrete_gaussian")]
)
def test_absent_and_present_keys_average_their_count(depth, noise):
    runs = 240
    diffs, sd, bias = _releases(depth, noise, "debiased", runs)
    # Each release's error is a sum of independent noise minima, centred: its standard
    # deviation is at most sqrt(sum_P sigma_P^2) = sd (a minimum of normals varies less than
    # one). Mean of 240 releases: |mean| <= 5.5 sd / sqrt(240) fails with probability
    # <= 2 Phi(-5.5) < 4e-8 per key (6 keys).
    bound = 5.5 * sd / math.sqrt(runs)
    means = diffs.mean(axis=0)
    assert abs(means[5]) <= bound  # the absent key
    assert np.all(np.abs(means) <= bound)
    # The bias the estimator removes is far outside that bound: the test has power.
    assert bias > 3 * bound


def test_paper_sum_of_minima_is_biased_low_by_the_public_constant():
    runs = 240
    diffs, sd, bias = _releases(3, "gaussian", "sum_of_mins", runs)
    means = diffs.mean(axis=0)
    bound = 5.5 * sd / math.sqrt(runs)
    # The data-independent negative bias: every key, present or absent, is low by
    # sum_P c_a sigma_P (false failure < 4e-8 per key).
    assert np.all(means < -bound)
    assert np.all(np.abs(means + bias) <= bound)


def test_debiased_is_the_paper_sum_shifted_by_a_constant_and_zero_noise_is_exact():
    sk = DPSWSketch(
        60,
        PrivacyBudget.zcdp(0.5),
        width=32,
        depth=3,
        block=10,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(3),
    )
    sk.update_batch(np.random.default_rng(1).integers(0, 20, 137))
    keys = np.arange(25)
    shift = -sum(sk.noise_minimum_means()[s.level - 1] for s in sk.selection())
    assert shift > 0
    assert np.allclose(
        sk.estimate(keys), sk.estimate(keys, estimator="sum_of_mins") + shift, rtol=0, atol=1e-9
    )
    # The test-only zero-noise source has no noise to remove: estimates stay exact counts.
    zero = DPSWSketch(
        60,
        PrivacyBudget.zcdp(0.5),
        width=32,
        depth=3,
        block=10,
        alpha="1/2",
        noise_source=NoiseSource.zero_noise_for_tests(),
    )
    zero.update_batch(np.random.default_rng(1).integers(0, 20, 137))
    assert zero.noise_minimum_means() == (0.0,) * len(zero.levels)
    assert np.array_equal(zero.estimate(keys), zero.estimate(keys, estimator="sum_of_mins"))
