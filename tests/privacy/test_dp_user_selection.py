"""The user-level selection of select-then-count on worst-case neighbouring inputs.

``hashed_selection`` (Gaussian noise on hashed one-counter PAMG sketches, cut at a threshold)
claims ``(eps, delta)``-DP for units of at most ``m`` distinct keys. Two worst cases:

* **Gaussian part.** ``D`` holds many copies of one unit of ``m`` keys, each alone in its
  bucket, and ``D'`` one copy fewer: the ``m`` counters all move by 1. The event "the sum of the
  ``m`` noisy counters reaches a cut chosen in advance" is the most sensitive linear test; the
  Clopper-Pearson lower bound on epsilon (failure rate 1e-6) must stay below ``eps``. With the
  noise calibrated for L2 sensitivity 1 instead of ``sqrt(m)`` it does not.
* **Threshold part.** ``D`` holds one unit of ``m`` keys that no other unit has (counter 1
  each), ``D'`` does not. The event "one of those keys is selected" must never be seen; with a
  cut one standard deviation above 1 it is seen in most runs (epsilon bound infinite).

Every run draws its own seeded noise (``NoiseSource.insecure_for_tests``).
"""

from __future__ import annotations

import math
from statistics import NormalDist

from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    HashedSelectionParameters,
    hashed_selection,
    hashed_selection_parameters,
)

EPS, DELTA, M, BUCKETS = 1.0, 1e-6, 16, 1 << 12
TRIALS = 6000


def distinct_bucket_keys(n: int, start: int = 0) -> list[int]:
    """``n`` integer keys from ``start`` on, no two in the same bucket."""
    probe = HashedPAMG(BUCKETS)
    seen: set[int] = set()
    out: list[int] = []
    x = start
    while len(out) < n:
        (b,) = probe._bucket_of([x])
        if b not in seen:
            seen.add(b)
            out.append(x)
        x += 1
    return out


def selections(sketch: HashedPAMG, seed0: int) -> list[dict[int, float]]:
    return [
        dict(
            hashed_selection(
                sketch, M, EPS, DELTA, NoiseSource.insecure_for_tests(seed0 + i).stream("u"), k=64
            )
        )
        for i in range(TRIALS)
    ]


def broken_sigma(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """The calibration for L2 sensitivity 1: ignores that one unit moves m counters."""
    good = hashed_selection_parameters(m, epsilon, delta)
    sigma = good.sigma / math.sqrt(m)
    return HashedSelectionParameters(m, epsilon, delta, sigma, good.threshold)


def broken_threshold(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """A cut one noise standard deviation above 1: keys of one unit pass it."""
    good = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, good.sigma, 1.0 + good.sigma)


def gaussian_audit() -> float:
    unit = distinct_bucket_keys(M)
    d, d2 = HashedPAMG(BUCKETS), HashedPAMG(BUCKETS)
    for _ in range(500):
        d.update(unit)
    for _ in range(499):
        d2.update(unit)
    sigma = hashed.hashed_selection_parameters(M, EPS, DELTA).sigma
    # Cut at the upper 2 % of the sum's distribution on D' (sum of M counters of 499 each).
    cut = 499 * M + NormalDist(0.0, sigma * math.sqrt(M)).inv_cdf(0.98)
    outs_d, outs_d2 = selections(d, 0), selections(d2, 10**6)
    assert all(len(o) == M for o in outs_d + outs_d2)  # heavy keys selected on both sides
    hits_d = sum(sum(o.values()) >= cut for o in outs_d)
    hits_d2 = sum(sum(o.values()) >= cut for o in outs_d2)
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, DELTA, failure=FAILURE)


def threshold_audit() -> float:
    heavy = distinct_bucket_keys(8)
    fresh = distinct_bucket_keys(M, start=10**6)
    base = HashedPAMG(BUCKETS)
    for _ in range(200):
        base.update(heavy)
    d = HashedPAMG.from_bytes(base.to_bytes()).update(fresh)
    assert all(d.to_dict()[x] == 1 for x in fresh)
    hits_d = sum(any(x in o for x in fresh) for o in selections(d, 0))
    hits_d2 = sum(any(x in o for x in fresh) for o in selections(base, 10**6))
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, DELTA, failure=FAILURE)


def test_one_unit_moving_m_counters_costs_at_most_epsilon():
    assert gaussian_audit() <= EPS


def test_gaussian_audit_catches_noise_calibrated_for_one_counter(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_sigma)
    assert gaussian_audit() > EPS


def test_keys_of_one_unit_are_never_selected():
    assert threshold_audit() <= EPS


def test_threshold_audit_catches_a_low_cut(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_threshold)
    assert threshold_audit() > EPS
