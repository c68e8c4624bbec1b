"""DPFrequencies' Count-Median release: audit on worst-case neighbours (docs/algorithms.md#lin-count-median).

The mechanism audited is the one a real ``DPFrequencies(sketch="count-median")`` calibrates when
it is applied (``calibrated_mechanism`` and ``per_release_budget``), run on the exact tables of
two neighbouring inputs. Count-Median releases the Count-Min table with zero-mean noise, so its
worst cases are Count-Min's:

* ``add_remove``: ``D`` holds one more element of a key than ``D'``, which raises that key's
  counter in every row by one. Every column of a table whose cells all differ by one is such a
  key (``WIDTH`` trials per release). Event ``S = {each of the key's d counters >= its value in
  D}``.
* ``replace`` (the paper's replace-one relation, L1 sensitivity ``2d``): ``D`` holds key ``x``
  where ``D'`` holds key ``y``, the two in different cells of every row: ``x``'s ``d`` counters
  are one higher in ``D``, ``y``'s one higher in ``D'``. Columns ``j`` and ``j + WIDTH/2`` stand
  for ``x`` and ``y`` (``WIDTH/2`` trials per release). Event ``S = {x's counters >= their value
  in D and y's counters <= their value in D}``.

For independent discrete Laplace noise on counters of L1 sensitivity ``Delta_1`` these events
have probability ratio exactly ``e^eps``. :func:`privacy_audit.epsilon_lower_bound` turns the
counts into a lower confidence bound on the epsilon spent (failure probability 1e-6), which must
not exceed the claimed epsilon; the power is checked on a mutation with a tenth of the noise.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMedianSketch
from beam_dpsketch.transforms import DPFrequencies

WIDTH, BASE = 2048, 40
EPSILON = 1.0
#: Rows and releases per relation: the replace-one event spans 2d counters of half the columns,
#: so a shallower sketch and more releases keep enough hits (probability about 2^-2d per trial)
#: for the audit to have power.
DEPTH = {"add_remove": 5, "replace": 3}
RELEASES = {"add_remove": 20, "replace": 40}


def _applied(neighbouring: str) -> DPFrequencies:
    """A DPFrequencies applied to a pipeline (not run): its calibration is final."""
    t = DPFrequencies(
        WIDTH,
        DEPTH[neighbouring],
        PrivacyBudget.approx(EPSILON, 1e-6),
        sketch="count-median",
        neighbouring=neighbouring,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="count-median-audit",
    )
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(["k0"]) | t
    return t


def _hits(t: DPFrequencies, table: np.ndarray, event, tag: str, divisor: int, releases: int) -> int:
    mech, budget = t.aggregate.calibrated_mechanism, t.aggregate.per_release_budget
    exact = CountMedianSketch(WIDTH, table.shape[0], 0)
    exact.table[:] = table
    hits = 0
    for i in range(releases):
        stream = NoiseSource.insecure_for_tests(30_000 + i).stream((tag, i))
        (released,) = mech.release(exact, budget, stream)
        assert type(released).__name__ == "PrivateCountMedianSketch" and released.offset == 0
        # Released counters in counts (the noise may sit on a lattice finer than one count).
        noise = released.cells - exact.table
        # Mutation for the power check: the same draws with a tenth of their size.
        hits += int(event(exact.table + noise / divisor).sum())
    return hits


def _add_remove_event(cells: np.ndarray) -> np.ndarray:
    return np.all(cells >= BASE + 1, axis=0)


def _replace_event(cells: np.ndarray) -> np.ndarray:
    half = WIDTH // 2
    x, y = cells[:, :half], cells[:, half:]
    return np.all(x >= BASE + 1, axis=0) & np.all(y <= BASE, axis=0)


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_count_median_release_spends_at_most_its_epsilon(neighbouring):
    t = _applied(neighbouring)
    facts = t.aggregate.calibrated_mechanism.describe(t.aggregate.per_release_budget)
    assert facts["noise"] == "discrete_laplace"
    depth = DEPTH[neighbouring]
    l1 = depth if neighbouring == "add_remove" else 2 * depth
    assert facts["sensitivity"].startswith(f"{l1} (l1")
    assert t.accountant.spent.delta == 0.0 and t.accountant.spent.epsilon == EPSILON
    if neighbouring == "add_remove":
        d_table = np.full((depth, WIDTH), BASE + 1)
        d2_table = np.full((depth, WIDTH), BASE)
        event, trials = _add_remove_event, WIDTH * RELEASES[neighbouring]
    else:
        # x in the first half of the columns, y in the second half.
        d_table = np.full((depth, WIDTH), BASE)
        d_table[:, : WIDTH // 2] += 1
        d2_table = np.full((depth, WIDTH), BASE)
        d2_table[:, WIDTH // 2 :] += 1
        event, trials = _replace_event, WIDTH // 2 * RELEASES[neighbouring]

    def eps_lower(divisor: int) -> float:
        n = RELEASES[neighbouring]
        on_d = _hits(t, d_table, event, f"D/{neighbouring}", divisor, n)
        on_d2 = _hits(t, d2_table, event, f"D2/{neighbouring}", divisor, n)
        return epsilon_lower_bound(on_d, trials, on_d2, trials, 0.0, failure=FAILURE)

    eps_lb = eps_lower(1)
    assert eps_lb <= EPSILON, eps_lb
    # Power: a tenth of the noise shows far more than the claimed epsilon.
    assert eps_lower(10) > EPSILON
