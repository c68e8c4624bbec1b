"""DP counts of declared public keys (``DPFrequencies(query_keys=...)``): audit on worst-case
neighbours.

The mechanism audited is the one a real ``DPFrequencies`` transform calibrates when it is
applied (its ``calibrated_mechanism`` and ``per_release_budget``), run on the exact count
vectors of two neighbouring inputs: ``D`` holds one more element of a declared key than ``D'``
(element level), or one user's ``k`` elements all on one key (user level ``"user:k"``, the worst
case: a whole contribution on one count). Each release uses a fresh seeded stream and draws one
independent noise value per declared key; the audit declares ``N_KEYS`` keys and compares every
key's released count across the two inputs, so one release gives ``N_KEYS`` independent trials
of the same single-key comparison (the noise scale does not depend on the number of keys: one
element changes one count). The event is the threshold ``S = {released count >= count in D}``,
the worst case for the discrete Laplace mechanism (its probability ratio between the two inputs
is exactly ``e^eps``); :func:`privacy_audit.epsilon_lower_bound` turns the counts into a lower
confidence bound on the epsilon really spent (failure probability 1e-6), which must not exceed
the claimed epsilon. Every test also checks its power on a mutation with a tenth of the noise.

Deterministic checks: every declared key is released (zero counts included) and nothing else,
and the noise is drawn from the release's stream for a fixed number of keys whatever the data.
"""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts
from beam_dpsketch.transforms import DPFrequencies

KEYS = ["a", "b", "c"]
N_KEYS = 1000
AUDIT_KEYS = [f"k{i}" for i in range(N_KEYS)]
RELEASES = 20
TRIALS = N_KEYS * RELEASES
BASE = 40  # exact count of every audited key in D'


def _applied(budget: PrivacyBudget, neighbouring: str = "add_remove") -> DPFrequencies:
    """A DPFrequencies(query_keys) applied to a pipeline (not run): its calibration is final."""
    t = DPFrequencies(
        budget=budget,
        query_keys=AUDIT_KEYS,
        neighbouring=neighbouring,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="public-keys",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(["k0"]) | t
    return t


def _released(mechanism, budget, counts, tag, noise_divisor=1):
    """Released counts of every audited key over RELEASES releases with fresh streams."""
    out = []
    for i in range(RELEASES):
        stream = NoiseSource.insecure_for_tests(10_000 + i).stream((tag, i))
        (released,) = mechanism.release(counts, budget, stream)
        noise = released.counts - counts
        # Mutation for the power check: the same draws with a tenth of their size (the noise
        # may sit on a lattice finer than one count: no rounding).
        out.append(counts + noise / noise_divisor)
    return np.concatenate(out)


def _epsilon_lower(t: DPFrequencies, gap: int, delta: float, noise_divisor: int = 1) -> float:
    mech, budget = t.aggregate.calibrated_mechanism, t.aggregate.per_release_budget
    d = np.full(N_KEYS, BASE + gap, dtype=np.int64)
    d2 = np.full(N_KEYS, BASE, dtype=np.int64)
    on_d = _released(mech, budget, d, "D", noise_divisor)
    on_d2 = _released(mech, budget, d2, "D2", noise_divisor)
    threshold = BASE + gap
    hits_d, hits_d2 = int((on_d >= threshold).sum()), int((on_d2 >= threshold).sum())
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, delta, failure=FAILURE)


def test_element_level_pure_counts_spend_at_most_epsilon():
    t = _applied(PrivacyBudget.pure(1.0))
    assert t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)[
        "sensitivity"
    ].startswith("1 (l1")
    eps_lb = _epsilon_lower(t, gap=1, delta=0.0)
    assert eps_lb <= 1.0, eps_lb
    # Power: a tenth of the noise shows far more than the claimed epsilon.
    assert _epsilon_lower(t, gap=1, delta=0.0, noise_divisor=10) > 1.0


def test_element_level_approx_counts_spend_at_most_epsilon():
    # An (eps, delta) budget is spent by the discrete Laplace (smaller variance for a count
    # vector): the audit then holds it to eps with delta = 0.
    t = _applied(PrivacyBudget.approx(1.0, 1e-6))
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert facts["noise"] == "discrete_laplace"
    assert t.accountant.spent.delta == 0.0 and t.accountant.spent.epsilon == 1.0
    eps_lb = _epsilon_lower(t, gap=1, delta=0.0)
    assert eps_lb <= 1.0, eps_lb
    assert _epsilon_lower(t, gap=1, delta=0.0, noise_divisor=10) > 1.0


def test_zcdp_counts_use_the_discrete_gaussian_and_spend_at_most_the_converted_epsilon():
    # rho = 0.02, converted at delta = 1e-6 by Lemma 2.9: eps = rho + 2 sqrt(rho ln(1/delta)).
    rho, delta = 0.02, 1e-6
    t = _applied(PrivacyBudget.zcdp(rho, delta))
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert facts["noise"] == "discrete_gaussian"
    eps = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    eps_lb = _epsilon_lower(t, gap=1, delta=delta)
    assert eps_lb <= eps, eps_lb
    assert _epsilon_lower(t, gap=1, delta=delta, noise_divisor=10) > eps


def test_user_level_counts_cover_a_whole_contribution_on_one_key():
    # user:3: one user's three elements all on "a" move that count by 3 (L1 = L2 = 3).
    t = _applied(PrivacyBudget.pure(1.0), neighbouring="user:3")
    eps_lb = _epsilon_lower(t, gap=3, delta=0.0)
    assert eps_lb <= 1.0, eps_lb
    assert _epsilon_lower(t, gap=3, delta=0.0, noise_divisor=10) > 1.0


def test_every_declared_key_is_released_and_nothing_else():
    budget = PrivacyBudget.pure(1.0)
    index = KeyCountIndex(KEYS)
    counts = index.add(index.zeros(), ["a", "a", "zz", "not-declared", "c"])
    assert counts.tolist() == [2, 0, 1]
    stream = NoiseSource.insecure_for_tests(3).stream("x")
    released = PrivateKeyCounts.release(index, counts, budget, stream)
    # Which keys appear is fixed by the declaration: zero counts included, undeclared dropped.
    assert list(released.as_dict()) == KEYS
    empty = PrivateKeyCounts.release(
        index, index.zeros(), budget, NoiseSource.insecure_for_tests(3).stream("x")
    )
    # The same stream gives the same noise whatever the data: released - exact is identical.
    assert np.array_equal(released.counts - counts, empty.counts)
    assert math.isfinite(released.error_bound()) and released.error_bound() > 0
