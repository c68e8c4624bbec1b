"""Point-query error bounds of the released linear sketches: coverage and width, seeded.

The bound is read off the released table (post-processing). On a Zipf stream whose collision
error dominates the noise, it must cover close to its stated 95 % over keys and seeds, and be at
most 3x the actual 95th-percentile error (a bound that ignores the heavy keys' robustness of the
median, or a noise-only bound, fails one of the two).
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch
from reproduction import datasets

SEEDS = 8


@pytest.fixture(scope="module")
def stream():
    keys = datasets.zipf_stream(400_000, 1.1, 50_000, seed=7)
    items, f = datasets.exact_counts(keys)
    rng = np.random.default_rng(1)
    queries = np.concatenate([datasets.top_k(items, f, 500), rng.choice(items, 1500, False)])
    return keys, queries, datasets.counts_of(items, f, queries).astype(np.float64)


@pytest.mark.parametrize(
    ("cls", "exact_cls"),
    [(PrivateCountSketch, CountSketch), (PrivateCountMinSketch, CountMinSketch)],
)
@pytest.mark.parametrize("budget", [PrivacyBudget.pure(1.0), PrivacyBudget.approx(0.1, 1e-6)])
def test_sketch_error_bound_covers_95_percent_and_is_tight(stream, cls, exact_cls, budget):
    keys, queries, truth = stream
    covered, widths, p95 = [], [], []
    for seed in range(SEEDS):
        # A fresh hash seed per run: the bound is over the hash functions and the noise.
        exact = exact_cls(2048, 5, seed).update(keys)
        src = NoiseSource.insecure_for_tests(seed)
        released = cls.release(exact, budget, src.stream(("bound", cls.KIND)), offset=False)
        err = np.abs(released.estimate(queries.tolist()) - truth)
        bound = released.error_bound(0.95)
        covered.append(np.mean(err <= bound))
        widths.append(bound)
        p95.append(np.quantile(err, 0.95))
    coverage = float(np.mean(covered))
    assert 0.93 <= coverage <= 0.97, coverage
    assert np.mean(widths) <= 3.0 * np.mean(p95), (np.mean(widths), np.mean(p95))


def test_count_min_estimate_is_centred_for_an_absent_key():
    # Keys never seen in a sketch far wider than the data read noise only: the debiased
    # minimum averages 0 (the raw minimum of 5 scale-10 discrete Laplace values averages -15.9).
    exact = CountMinSketch(1 << 16, 5, 0).update([f"k{i}" for i in range(50)])
    absent = [f"absent{i}" for i in range(4000)]
    released = PrivateCountMinSketch.release(
        exact, PrivacyBudget.pure(0.5), NoiseSource.insecure_for_tests(0).stream("cm"), offset=False
    )
    est = released.estimate(absent)
    # Standard error of the mean of 4000 minima of scale-10 noise: about 0.2.
    assert abs(float(np.mean(est))) <= 1.5, float(np.mean(est))


@pytest.mark.parametrize("budget", [PrivacyBudget.zcdp(0.05), PrivacyBudget.pure(0.3)])
def test_declared_key_error_bound_is_the_noise_quantile(budget):
    keys = [f"k{i}" for i in range(20_000)]
    index = KeyCountIndex(keys)
    counts = index.zeros()
    released = PrivateKeyCounts.release(
        index, counts, budget, NoiseSource.insecure_for_tests(5).stream("keys")
    )
    err = np.abs(released.estimate(keys))
    bound = released.error_bound(0.95)
    coverage = float(np.mean(err <= bound))
    # The integer level of an integer noise: the smallest whose coverage reaches 95 %.
    assert 0.95 <= coverage <= 0.97, coverage
    assert bound <= 1.2 * np.quantile(err, 0.95)
