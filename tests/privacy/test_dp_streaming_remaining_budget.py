"""Streaming transforms given no budget: they spend, and calibrate for, the accountant's remainder.

``DPIntermittentQueries`` and ``DPSlidingWindowFrequencies`` accept ``budget=None`` with a shared
accountant: the budget is what the accountant has left when the transform is applied. The
guarantee then holds only if the noise is calibrated for that remainder (not for the
accountant's total, nor for the placeholder budget that validates the parameters at
construction). These tests pre-charge an accountant so that its remainder differs from both.

* Deterministic: the charge is the remainder, the accountant is left with nothing, and the noise
  scale is the one of the remainder (``2 depth / eps`` for the intermittent positions clock; the
  level-1 sigma of a ``DPSWSketch`` with the remainder for the sliding window).
* Statistical (intermittent, the released records of the Beam transform): worst-case neighbours
  under the claimed relation of the positions clock (one element's key replaced at a fixed
  position), audited with the Clopper-Pearson bound of ``privacy_audit`` (failure 1e-6), which
  must not exceed the charged epsilon. This exercises the core's ``neighbouring="replace"``
  calibration (cells noised for ``eps / 2`` under add/remove).

Trials are packed: one run holds ``TRIALS`` independent trials on disjoint Count-Min cells
(depth 1; every trial's keys hash to cells no other key uses, and every cell's draw is
independent), so each trial's released values are distributed as in a run of its own.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that
from collect import DumpToFile
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies, SlidingLayout

WIDTH = 1 << 15
TRIALS = 4000
RUNS = 2  # packed runs per neighbour: 8000 trials on each side
# Batches at positions 2, 4, 6: interval k holds positions 2k - 1 and 2k.
TIMES = [2, 4, 6]
# Total 3.0, 2.5 spent before: the remainder (0.5) is neither the total nor the placeholder
# (1.0) that validates the parameters at construction.
TOTAL, SPENT, REMAINDER = 3.0, 2.5, 0.5


def _accountant(budget: PrivacyBudget, spent: PrivacyBudget) -> PrivacyAccountant:
    accountant = PrivacyAccountant(budget, name="pipeline")
    accountant.charge("earlier", "an earlier release", spent, 1, "element")
    return accountant


def _distinct_cell_keys(n: int) -> np.ndarray:
    """``n`` integer keys whose depth-1 cells are pairwise distinct."""
    candidates = np.arange(200_000, dtype=np.int64)
    h1, h2 = hash_keys(candidates, 0)
    cells = row_buckets(h1, h2, 1, WIDTH)[0]
    _, first = np.unique(cells, return_index=True)
    assert first.size >= n
    return candidates[np.sort(first)][:n]


KEYS = _distinct_cell_keys(3 * TRIALS)
A, B, F = (KEYS[i * TRIALS : (i + 1) * TRIALS] for i in range(3))


def _intermittent(label: str, accountant: PrivacyAccountant) -> DPIntermittentQueries:
    queries = np.concatenate([A, B]).tolist()
    return DPIntermittentQueries(
        WIDTH,
        1,
        queries=QuerySchedule([(t, queries) for t in TIMES]),
        clock="positions",
        sketch="count-min",
        accountant=accountant,
        noise_source=NoiseSource.insecure_for_tests(20261125),
        label=label,
    )


def test_intermittent_charges_and_calibrates_for_the_remainder():
    accountant = _accountant(PrivacyBudget.pure(TOTAL), PrivacyBudget.pure(SPENT))
    t = _intermittent("claim", accountant)
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([(1, 0)]) | t  # applying it charges the accountant (nothing runs)
    assert t.charge.total_cost.epsilon == pytest.approx(REMAINDER)
    assert accountant.remaining.epsilon == pytest.approx(0.0, abs=1e-12)
    # Replace-one at a fixed position: L1 change 2 per depth row, so scale 2 depth / eps.
    assert t.noise_scale == pytest.approx(2 * 1 / REMAINDER)
    assert t.charge.noise_scale == t.noise_scale


def _released_increments(rows: np.ndarray, label: str, tmp_path) -> np.ndarray:
    """Released increments ``(trials, batches, 2)`` of the queried keys ``A`` and ``B``.

    ``rows[i, j]`` is the key of trial ``i`` at position ``j + 1``; all trials run in one Beam
    pipeline (one ``(positions, keys)`` batch element).
    """
    accountant = _accountant(PrivacyBudget.pure(TOTAL), PrivacyBudget.pure(SPENT))
    t = _intermittent(label, accountant)
    positions = np.tile(np.arange(1, rows.shape[1] + 1, dtype=np.int64), rows.shape[0])
    out = DumpToFile(str(tmp_path / f"{label}.pickle"))
    with beam.Pipeline(runner="FnApiRunner") as p:
        assert_that(p | beam.Create([(positions, rows.ravel())], reshuffle=False) | t, out)
    assert t.charge.total_cost.epsilon == pytest.approx(REMAINDER)
    index = {int(k): i for i, k in enumerate(np.concatenate([A, B]).tolist())}
    answers = np.zeros((len(TIMES), 2 * TRIALS))
    for time, key, estimate in out.load():
        answers[TIMES.index(time), index[int(key)]] = estimate
    answers = answers.reshape(len(TIMES), 2, TRIALS).transpose(2, 0, 1)
    return np.diff(answers, axis=1, prepend=0.0)


def test_intermittent_released_records_spend_at_most_the_remainder(tmp_path):
    # D: the second row of interval 2 (position 4) has key a; D': key b at the same position.
    # Event: the increment of a at batch 2 is >= 1 and that of b is <= 0 (likelihood ratio
    # exp(2 / scale) per trial: the largest a replacement allows).
    rows = np.repeat(F[:, None], TIMES[-1], axis=1)
    hits = {}
    for name, key in (("D", A), ("D'", B)):
        rows_x = rows.copy()
        rows_x[:, TIMES[1] - 1] = key
        count = 0
        for run in range(RUNS):
            inc = _released_increments(rows_x, f"audit-{run}", tmp_path)
            count += int(np.count_nonzero((inc[:, 1, 0] >= 1) & (inc[:, 1, 1] <= 0)))
        hits[name] = count
    n = RUNS * TRIALS
    bound = epsilon_lower_bound(hits["D"], n, hits["D'"], n, failure=FAILURE)
    assert hits["D"] > hits["D'"]  # the event does separate the neighbours
    assert bound <= REMAINDER, (hits, bound)


def test_sliding_window_charges_and_calibrates_for_the_remainder():
    total, spent = PrivacyBudget.approx(3.0, 2e-6), PrivacyBudget.approx(2.5, 1e-6)
    accountant = _accountant(total, spent)
    t = DPSlidingWindowFrequencies(
        20,
        64,
        3,
        release_every=5,
        query_keys=["a"],
        accountant=accountant,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="sliding",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )
    assert t.rho is None  # nothing is known about the budget before the transform is applied
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([(1, "a")]) | t
    remainder = PrivacyBudget.approx(REMAINDER, 1e-6)
    reference = DPSWSketch(20, remainder, width=64, depth=3, block=10, alpha="1/2")
    assert (t.epsilon, t.delta) == (pytest.approx(REMAINDER), pytest.approx(1e-6))
    assert t.rho == pytest.approx(reference.rho, rel=1e-9)
    assert t.charge.noise_scale == pytest.approx(reference.level_sigmas()[0], rel=1e-9)
    assert accountant.remaining.epsilon == pytest.approx(0.0, abs=1e-9)
