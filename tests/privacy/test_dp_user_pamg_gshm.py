"""The ``pamg-gshm`` release (keys and noisy counts) on worst-case neighbouring inputs.

The transform's release mechanism publishes the noisy counters of hashed one-counter PAMG
sketches cut at a threshold, and claims ``(eps, delta)``-DP for units of at most ``m`` distinct
keys. Two worst cases, each audited with a Clopper-Pearson lower bound on epsilon (failure rate
1e-6) over seeded releases:

* **Counts.** ``D`` holds many copies of one unit of ``m`` keys, each alone in its bucket, and
  ``D'`` one copy fewer: the ``m`` released counts all move by 1. The event "the sum of the
  ``m`` released counts reaches a cut chosen in advance" is the most sensitive linear test on
  the published values. With the noise calibrated for one counter instead of ``m`` (sensitivity
  1 instead of ``sqrt(m)``) the bound exceeds epsilon.
* **Keys.** ``D`` holds one unit of ``m`` keys that no other unit has (counter 1 each), ``D'``
  does not. The event "one of those keys is released" must stay rare; with a cut one standard
  deviation above 1 it is seen in most runs.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.hashed import (
    BUCKET_SEED,
    HashedPAMG,
    HashedSelectionParameters,
    hashed_pamg_gshm,
    hashed_selection_parameters,
)
from beam_dpsketch.transforms.heavy_hitters import MisraGriesReleaseMechanism

EPS, DELTA, M, K = 1.0, 1e-6, 16, 1 << 10
BUDGET = PrivacyBudget.approx(EPS, DELTA)
TRIALS = 6000


def mechanism() -> MisraGriesReleaseMechanism:
    """The transform's ``pamg-gshm`` release step (``4 K`` buckets)."""
    return MisraGriesReleaseMechanism("pamg-gshm", K, max_contributions=M)


def distinct_bucket_keys(n: int, start: int = 0) -> list[int]:
    """``n`` integer keys from ``start`` on, no two in the same bucket of ``4 K``."""
    buckets = np.uint64(mechanism().buckets)
    seen: set[int] = set()
    out: list[int] = []
    x = start
    while len(out) < n:
        h1, _ = hash_keys([x], BUCKET_SEED)
        b = int(h1[0] % buckets)
        if b not in seen:
            seen.add(b)
            out.append(x)
        x += 1
    return out


def releases(sketch: HashedPAMG, seed0: int) -> list[dict[int, float]]:
    mech = mechanism()
    return [
        dict(mech.release(sketch, BUDGET, NoiseSource.insecure_for_tests(seed0 + i).stream("p")))
        for i in range(TRIALS)
    ]


def broken_sigma(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """The calibration for L2 sensitivity 1: ignores that one unit moves m counters."""
    good = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, good.sigma / math.sqrt(m), good.threshold)


def broken_threshold(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """A cut one noise standard deviation above 1: keys of one unit pass it."""
    good = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, good.sigma, 1.0 + good.sigma)


def counts_audit() -> float:
    unit = distinct_bucket_keys(M)
    d, d2 = HashedPAMG(mechanism().buckets), HashedPAMG(mechanism().buckets)
    for _ in range(500):
        d.update(unit)
    for _ in range(499):
        d2.update(unit)
    sigma = hashed.hashed_selection_parameters(M, EPS, DELTA).sigma
    # Cut at the upper 2 % of the sum's distribution on D' (sum of M counts of 499 each).
    cut = 499 * M + NormalDist(0.0, sigma * math.sqrt(M)).inv_cdf(0.98)
    outs_d, outs_d2 = releases(d, 0), releases(d2, 10**6)
    assert all(len(o) == M for o in outs_d + outs_d2)  # the heavy keys are released both sides
    hits_d = sum(sum(o.values()) >= cut for o in outs_d)
    hits_d2 = sum(sum(o.values()) >= cut for o in outs_d2)
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, DELTA, failure=FAILURE)


def keys_audit() -> float:
    heavy = distinct_bucket_keys(8)
    fresh = distinct_bucket_keys(M, start=10**6)
    base = HashedPAMG(mechanism().buckets)
    for _ in range(200):
        base.update(heavy)
    d = HashedPAMG.from_bytes(base.to_bytes()).update(fresh)
    assert all(d.to_dict()[x] == 1 for x in fresh)
    hits_d = sum(any(x in o for x in fresh) for o in releases(d, 0))
    hits_d2 = sum(any(x in o for x in fresh) for o in releases(base, 10**6))
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, DELTA, failure=FAILURE)


def test_released_counts_of_one_unit_cost_at_most_epsilon():
    assert counts_audit() <= EPS


def test_counts_audit_catches_noise_calibrated_for_one_counter(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_sigma)
    assert counts_audit() > EPS


def test_keys_of_one_unit_are_never_released():
    assert keys_audit() <= EPS


def test_keys_audit_catches_a_low_cut(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_threshold)
    assert keys_audit() > EPS


def test_release_metadata_does_not_depend_on_the_data():
    # Everything but the items is public configuration: the same with and without a unit.
    heavy = distinct_bucket_keys(8)
    with_unit, without = HashedPAMG(mechanism().buckets), HashedPAMG(mechanism().buckets)
    for _ in range(100):
        with_unit.update(heavy)
        without.update(heavy)
    with_unit.update(distinct_bucket_keys(M, start=10**6))
    stream = NoiseSource.insecure_for_tests(1).stream
    a = hashed_pamg_gshm(with_unit, M, EPS, DELTA, stream("a"), k=K)
    b = hashed_pamg_gshm(without, M, EPS, DELTA, stream("a"), k=K)
    assert (a.threshold, a.noise, a.k, a.neighbouring, dict(a.details)) == (
        b.threshold,
        b.noise,
        b.k,
        b.neighbouring,
        dict(b.details),
    )
