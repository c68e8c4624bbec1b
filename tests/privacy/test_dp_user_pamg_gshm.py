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

from hashed_pamg_audit import (
    broken_sigma,
    broken_threshold,
    counts_audit,
    distinct_bucket_keys,
    keys_audit,
)

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.hashed import HashedPAMG, hashed_pamg_gshm
from beam_dpsketch.transforms.heavy_hitters import PamgGSHM

EPS, DELTA, M, K = 1.0, 1e-6, 16, 1 << 10
BUDGET = PrivacyBudget.approx(EPS, DELTA)
TRIALS = 6000
#: The transform's ``pamg-gshm`` release step (``4 K`` buckets).
MECHANISM = PamgGSHM(K).bind(top=None, max_contributions=M)
BUCKETS = MECHANISM.buckets


def release(sketch: HashedPAMG, seed: int) -> dict:
    stream = NoiseSource.insecure_for_tests(seed).stream("p")
    return dict(MECHANISM.release(sketch, BUDGET, stream))


def counts_audit_here() -> float:
    return counts_audit(release, BUCKETS, M, EPS, DELTA, TRIALS)


def keys_audit_here() -> float:
    return keys_audit(release, BUCKETS, M, DELTA, TRIALS)


def test_released_counts_of_one_unit_cost_at_most_epsilon():
    assert counts_audit_here() <= EPS


def test_counts_audit_catches_noise_calibrated_for_one_counter(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_sigma)
    assert counts_audit_here() > EPS


def test_keys_of_one_unit_are_never_released():
    assert keys_audit_here() <= EPS


def test_keys_audit_catches_a_low_cut(monkeypatch):
    monkeypatch.setattr(hashed, "hashed_selection_parameters", broken_threshold)
    assert keys_audit_here() > EPS


def test_release_metadata_does_not_depend_on_the_data():
    # Everything but the items is public configuration: the same with and without a unit.
    heavy = distinct_bucket_keys(8, BUCKETS)
    with_unit, without = HashedPAMG(BUCKETS), HashedPAMG(BUCKETS)
    for _ in range(100):
        with_unit.update(heavy)
        without.update(heavy)
    with_unit.update(distinct_bucket_keys(M, BUCKETS, start=10**6))
    stream = NoiseSource.insecure_for_tests(1).stream
    a = hashed_pamg_gshm(with_unit, M, PrivacyBudget.approx(EPS, DELTA), stream("a"), k=K)
    b = hashed_pamg_gshm(without, M, PrivacyBudget.approx(EPS, DELTA), stream("a"), k=K)
    assert (a.threshold, a.noise, a.k, a.neighbouring, dict(a.details)) == (
        b.threshold,
        b.noise,
        b.k,
        b.neighbouring,
        dict(b.details),
    )
