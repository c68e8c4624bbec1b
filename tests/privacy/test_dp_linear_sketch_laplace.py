"""DPFrequencies' sketch release under an (epsilon, delta) budget: audit on worst-case neighbours.

Spent by the discrete Laplace mechanism (smaller noise than the discrete Gaussian at the usual
depths), an approximate budget must cost ``epsilon`` alone. The mechanism audited is the one a
real ``DPFrequencies`` transform calibrates when it is applied (``calibrated_mechanism`` and
``per_release_budget``), run on the exact tables of two neighbouring inputs: ``D`` holds one
more element of a key than ``D'``, which raises that key's counter in every row by one (its sign
taken as +1: the other sign is symmetric). Every column of a table whose cells all differ by one
is such a key, so one release gives ``WIDTH`` independent trials. The event is ``S = {every one of
the key's d counters >= its value in D}``, the worst case for independent discrete Laplace noise
on ``d`` counters of L1 sensitivity ``d``: its probability ratio is exactly ``e^eps``.
:func:`privacy_audit.epsilon_lower_bound` turns the counts into a lower confidence bound on the
epsilon spent (failure probability 1e-6), which must not exceed the claimed epsilon; the power is
checked on a mutation with a tenth of the noise.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.transforms import DPFrequencies

WIDTH, DEPTH, RELEASES, BASE = 2048, 5, 20, 40


def _applied(sketch: str, budget: PrivacyBudget) -> DPFrequencies:
    """A DPFrequencies applied to a pipeline (not run): its calibration is final."""
    t = DPFrequencies(
        WIDTH,
        DEPTH,
        budget,
        sketch=sketch,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="sketch-laplace",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(["k0"]) | t
    return t


def _hits(t: DPFrequencies, exact_cls: type, value: int, tag: str, divisor: int) -> int:
    mech, budget = t.aggregate.calibrated_mechanism, t.aggregate.per_release_budget
    exact = exact_cls(WIDTH, DEPTH, 0)
    exact.table[:] = value
    hits = 0
    for i in range(RELEASES):
        stream = NoiseSource.insecure_for_tests(20_000 + i).stream((tag, i))
        (released,) = mech.release(exact, budget, stream)
        # Released counters in counts (the noise may sit on a lattice finer than one count).
        noise = released.cells - exact.table
        # Mutation for the power check: the same draws with a tenth of their size.
        table = exact.table + noise / divisor
        hits += int(np.all(table >= BASE + 1, axis=0).sum())
    return hits


@pytest.mark.parametrize(
    ("sketch", "exact_cls"), [("count-sketch", CountSketch), ("count-min", CountMinSketch)]
)
def test_approx_budget_spent_by_discrete_laplace_costs_at_most_epsilon(sketch, exact_cls):
    t = _applied(sketch, PrivacyBudget.approx(1.0, 1e-6))
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert facts["noise"] == "discrete_laplace"
    assert facts["sensitivity"].startswith(f"{DEPTH} (l1")
    assert t.accountant.spent.delta == 0.0 and t.accountant.spent.epsilon == 1.0
    trials = WIDTH * RELEASES

    def eps_lower(divisor: int) -> float:
        on_d = _hits(t, exact_cls, BASE + 1, "D", divisor)
        on_d2 = _hits(t, exact_cls, BASE, "D2", divisor)
        return epsilon_lower_bound(on_d, trials, on_d2, trials, 0.0, failure=FAILURE)

    eps_lb = eps_lower(1)
    assert eps_lb <= 1.0, eps_lb
    # Power: a tenth of the noise shows far more than the claimed epsilon.
    assert eps_lower(10) > 1.0
