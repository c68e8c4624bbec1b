"""The guarantee a merged (federated) release states, checked exactly on worst-case neighbours.

Two organisations release Count-Min sketches with discrete Laplace noise (pure budgets); the
merged table is ``C(D1) + C(D2) + Z1 + Z2`` (public offsets aside). Deterministic audit, from the
exact mass function of ``S = Z1 + Z2`` (cells are independent):

* disjoint data sets: the worst neighbour adds one record to ``D1``; its key's ``d`` counters
  move by one, and the privacy loss of the merged table is ``d * max_x ln P_S(x - 1) / P_S(x)``.
  It must not exceed the stated ``epsilon`` (the largest input's).
* overlapping data sets: one record sits in both; each published input table moves by one in
  ``d`` counters (so the merged table by two), and the losses of the inputs add up; they must
  not exceed the stated ``epsilon`` (the sum). They exceed the largest input's, so a merge that
  claimed the maximum here fails this test. With equal inputs, even the merged table alone
  loses more than one input's ``epsilon``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.linear import PrivateCountMinSketch, merge_released
from beam_dpsketch.sketches.linear.calibration import noise_pmf

WIDTH, DEPTH = 8, 3


def _released(eps: float, tag: str) -> PrivateCountMinSketch:
    sketch = CountMinSketch(WIDTH, DEPTH, seed=11)
    sketch.update(["a", "b", "a"])
    source = NoiseSource.insecure_for_tests(5)
    return PrivateCountMinSketch.release(sketch, PrivacyBudget.pure(eps), source.stream(tag))


def _sum_log_pmf(parts) -> np.ndarray:
    pmf = np.ones(1)
    for p in parts:
        _, mass = noise_pmf(p.noise, p.scale)
        pmf = np.convolve(pmf, mass)
    return np.log(pmf)


def _loss(log_pmf: np.ndarray, shift: int) -> float:
    """Privacy loss of ``DEPTH`` independent cells each shifted by ``shift`` (both directions)."""
    # Restrict to the bulk (mass above 1e-12 of the peak): there the convolved float64 mass is
    # exact to many digits; further out its rounding error, not the law, sets the ratios.
    core = log_pmf[log_pmf > log_pmf.max() - 12 * math.log(10)]
    ratio = np.abs(core[shift:] - core[:-shift])
    return DEPTH * float(ratio.max())


@pytest.mark.parametrize("eps", [(1.0, 1.0), (1.0, 0.5), (2.0, 0.25)])
def test_merged_release_meets_its_stated_guarantee(eps):
    a, b = _released(eps[0], "a"), _released(eps[1], "b")
    disjoint = merge_released([a, b])
    overlapping = merge_released([a, b], disjoint=False)
    parts = disjoint.calibration.parts
    # What the federation publishes: each input table, and their merged sum.
    each = [_loss(_sum_log_pmf([p]), 1) for p in parts]
    log_pmf = _sum_log_pmf(parts)
    assert max(each) <= disjoint.epsilon + 1e-9
    assert _loss(log_pmf, 1) <= disjoint.epsilon + 1e-9
    # A record in both data sets moves both published tables: the losses add up.
    assert math.fsum(each) <= overlapping.epsilon + 1e-9
    assert _loss(log_pmf, 2) <= overlapping.epsilon + 1e-9
    # ... to more than the largest input's: claiming the maximum there would be wrong.
    assert math.fsum(each) > max(eps) + 1e-3
    assert overlapping.epsilon == pytest.approx(math.fsum(eps))


def test_merged_table_alone_of_equal_releases_loses_more_than_one_input():
    """With equal inputs even the merged table alone loses more than ``epsilon`` when a record
    is in both data sets (its loss tends to ``2 epsilon``), so the sum is needed there."""
    a, b = _released(1.0, "c"), _released(1.0, "d")
    overlapping = merge_released([a, b], disjoint=False)
    loss = _loss(_sum_log_pmf(overlapping.calibration.parts), 2)
    assert 1.0 + 1e-3 < loss <= overlapping.epsilon + 1e-9


def test_merged_metadata_is_the_same_on_neighbouring_inputs():
    """Everything a merged object states besides its noisy table is public: neighbouring data
    sets (one more record in one of them) give equal descriptions and guarantees."""
    source = NoiseSource.insecure_for_tests(6)
    described = []
    for extra in ([], ["secret-record"]):
        one = CountMinSketch(WIDTH, DEPTH, seed=11)
        one.update(["a", "b", "a", *extra])
        two = CountMinSketch(WIDTH, DEPTH, seed=11)
        two.update(["c"])
        a = PrivateCountMinSketch.release(one, PrivacyBudget.pure(1.0), source.stream("x"))
        b = PrivateCountMinSketch.release(two, PrivacyBudget.pure(1.0), source.stream("y"))
        merged = merge_released([a, b])
        described.append((merged.describe(), repr(merged), merged.total()))
    assert described[0][:2] == described[1][:2]
    assert "secret-record" not in repr(described[1])
