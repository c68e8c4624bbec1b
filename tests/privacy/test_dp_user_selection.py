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

from hashed_pamg_audit import broken_sigma, broken_threshold, counts_audit, keys_audit

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.hashed import HashedPAMG, hashed_selection

EPS, DELTA, M, BUCKETS = 1.0, 1e-6, 16, 1 << 12
TRIALS = 6000


def selection(sketch: HashedPAMG, seed: int) -> dict:
    stream = NoiseSource.insecure_for_tests(seed).stream("u")
    return dict(hashed_selection(sketch, M, PrivacyBudget.approx(EPS, DELTA), stream, k=64))


def gaussian_audit() -> float:
    return counts_audit(selection, BUCKETS, M, EPS, DELTA, TRIALS)


def threshold_audit() -> float:
    return keys_audit(selection, BUCKETS, M, DELTA, TRIALS)


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
