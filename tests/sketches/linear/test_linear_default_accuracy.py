"""Point queries answered by the frequencies command's default sketch: error near the noise floor.

A sketch answers keys chosen after the run; its error is the noise of ``depth`` counters plus the
hashing error. At the CLI's default shape, with the noise DPFrequencies picks for an
``(epsilon, delta)`` budget, the mean absolute error on top and random keys of a million-row
Zipf stream stays within about twice that of exact counts of the same keys with the same
budget (limits 2.1 and 2.7 at epsilon 0.1 and 1). A deeper default (5 x 32768), the discrete Gaussian for this budget,
or a narrow sketch exceed it.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.frequencies import DEFAULT_DEPTH, DEFAULT_WIDTH
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountSketch
from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts
from beam_dpsketch.transforms import DPFrequencies
from reproduction import datasets

SEEDS = 5


@pytest.fixture(scope="module")
def stream():
    keys = datasets.zipf_stream(1_000_000, 1.1, 50_000, seed=3)
    items, f = datasets.exact_counts(keys)
    rng = np.random.default_rng(2)
    queries = np.concatenate([datasets.top_k(items, f, 1000), rng.choice(items, 1000, False)])
    exact = CountSketch(DEFAULT_WIDTH, DEFAULT_DEPTH, 0).update(keys)
    index = KeyCountIndex(queries.tolist())
    counts = index.add(index.zeros(), keys)
    return exact, index, counts, queries, datasets.counts_of(items, f, queries).astype(float)


# Measured 1.75 and 2.33: at epsilon 1 the hashing error is a larger share of the error.
@pytest.mark.parametrize(("epsilon", "limit"), [(0.1, 2.1), (1.0, 2.7)])
def test_default_sketch_point_queries_near_exact_counts(stream, epsilon, limit):
    exact, index, counts, queries, truth = stream
    budget = PrivacyBudget.approx(epsilon, 1e-6)
    mechanism = DPFrequencies(DEFAULT_WIDTH, DEFAULT_DEPTH, budget).aggregate.mechanism
    sketch_mae, exact_mae = [], []
    for seed in range(SEEDS):
        src = NoiseSource.insecure_for_tests(seed)
        (released,) = mechanism.release(exact, budget, src.stream(("sketch", repr(epsilon))))
        sketch_mae.append(np.mean(np.abs(released.estimate(queries.tolist()) - truth)))
        declared = PrivateKeyCounts.release(
            index, counts.copy(), budget, src.stream(("keys", repr(epsilon)))
        )
        exact_mae.append(np.mean(np.abs(declared.estimate(queries.tolist()) - truth)))
    ratio = float(np.mean(sketch_mae) / np.mean(exact_mae))
    assert ratio <= limit, ratio
