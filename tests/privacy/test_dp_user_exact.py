"""User-level exact counts with GSHM at l = m are (eps, delta)-DP: audit on worst-case neighbours.

Two worst-case pairs of neighbours. Gaussian part: ``D'`` is ``D`` without one privacy unit
whose ``m`` distinct keys are all heavy, so ``m`` counts drop by 1; event: the sum of those noisy
counts reaches its true value in ``D``. Threshold part: the removed unit is the only one with
some key; event: that key is released. The audit's lower bound on epsilon (claimed delta
subtracted) must stay below epsilon; with the noise standard deviation divided by 10 (Gaussian
part) or the threshold divided by 10 (threshold part) it does not.

Each trial runs the transform's release mechanism on the exact histogram with its own seeded
noise source.
"""

from __future__ import annotations

from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.heavy_hitters import UserExact

EPS, DELTA, M = 1.0, 1e-6, 3
TRIALS = 3000
HEAVY = [0, 1, 2]  # the removed unit's m keys
ONLY = 99  # the key only the removed unit has


def released(counts: dict[int, int], seed: int) -> dict[int, float]:
    mech = UserExact().bind(top=None, max_contributions=M)
    stream = NoiseSource.insecure_for_tests(seed).stream(("exact",))
    return dict(mech.release(counts, PrivacyBudget.approx(EPS, DELTA), stream))


def audit(d: dict[int, int], d2: dict[int, int], event) -> float:
    hits = sum(event(released(d, seed)) for seed in range(TRIALS))
    hits2 = sum(event(released(d2, 10**6 + seed)) for seed in range(TRIALS))
    return epsilon_lower_bound(hits, TRIALS, hits2, TRIALS, DELTA, failure=FAILURE)


def test_gaussian_part_one_unit_lowers_m_counts():
    d = {0: 200, 1: 200, 2: 200, 5: 50}
    d2 = {0: 199, 1: 199, 2: 199, 5: 50}  # the unit with keys {0, 1, 2} removed
    target = sum(d[k] for k in HEAVY)

    def event(out: dict[int, float]) -> bool:
        return all(k in out for k in HEAVY) and sum(out[k] for k in HEAVY) >= target

    bound = audit(d, d2, event)
    assert bound <= EPS, bound


def test_threshold_part_a_key_only_the_unit_has():
    d2 = {0: 200, 5: 50}
    d = {**d2, ONLY: 1}  # the removed unit contributed ONLY

    bound = audit(d, d2, lambda out: ONLY in out)
    assert bound <= EPS, bound
