"""Accuracy of ``hashed_pamg_gshm`` (the ``pamg-gshm`` release) on a ratings-like input.

943 users each rate ``m`` distinct items of 1,682 drawn by popularity (Zipf 0.9), the shape of
the user-level benchmark. Over seeded releases at eps 4, delta 1e-6, with the transform's
``4 k`` buckets at ``k = 4096``:

* it releases at least half as many keys as the exact-count release ``exact_user_gshm``
  (memory growing with the distinct keys); calibrated for ``k`` differing counters, as a
  ``k``-counter PAMG sketch needs, it releases almost nothing;
* about 95 % of the released estimates lie within ``1.96 sigma`` of the true unit counts
  (the counters are exact for keys alone in their bucket); with the noise doubled, far fewer.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.exact import exact_user_gshm
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    HashedSelectionParameters,
    hashed_pamg_gshm,
    hashed_selection_parameters,
)

USERS, ITEMS, K, EPS, DELTA, SEEDS = 943, 1682, 4096, 4.0, 1e-6, 5
Z95 = 1.959964


def units(m: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, ITEMS + 1) ** 0.9
    weights /= weights.sum()
    return [
        sorted(int(x) for x in rng.choice(ITEMS, size=m, replace=False, p=weights))
        for _ in range(USERS)
    ]


def releases(m: int) -> list[tuple[Counter, dict, dict, float]]:
    """Per seed: true counts, the pamg-gshm release, the exact release, and sigma."""
    out = []
    for seed in range(SEEDS):
        data = units(m, seed)
        sketch = HashedPAMG(4 * K)
        for unit in data:
            sketch.update(unit)
        counts = Counter(x for unit in data for x in unit)
        stream = NoiseSource.insecure_for_tests(seed).stream
        ours = hashed_pamg_gshm(sketch, m, PrivacyBudget.approx(EPS, DELTA), stream("pamg"), k=K)
        exact = exact_user_gshm(counts, m, PrivacyBudget.approx(EPS, DELTA), stream("exact"))
        out.append((counts, ours.as_dict(), exact.as_dict(), ours.noise.scale))
    return out


def key_ratio(m: int) -> float:
    runs = releases(m)
    return sum(len(o) for _, o, _, _ in runs) / sum(len(e) for _, _, e, _ in runs)


def coverage(m: int) -> float:
    inside = total = 0
    for counts, ours, _, sigma in releases(m):
        for x, y in ours.items():
            total += 1
            inside += abs(y - counts[x]) <= Z95 * sigma
    assert total >= 100
    return inside / total


def calibrated_for_k(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """Noise and cut for k differing counters (a k-counter PAMG sketch's sensitivity)."""
    p = hashed_selection_parameters(K, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, p.sigma, p.threshold)


def noise_doubled(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    p = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, 2 * p.sigma, p.threshold)


@pytest.mark.parametrize("m", [5, 20])
def test_releases_at_least_half_of_the_exact_releases_keys(m):
    assert key_ratio(m) >= 0.5


def test_key_count_test_catches_a_calibration_for_k_counters(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", calibrated_for_k)
    assert key_ratio(5) < 0.5


def test_estimates_cover_the_unit_counts_at_95_percent():
    assert 0.92 <= coverage(5) <= 0.98


def test_coverage_test_catches_doubled_noise(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", noise_doubled)
    assert not 0.92 <= coverage(5) <= 0.98
