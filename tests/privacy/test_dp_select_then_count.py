"""Select-then-count is (eps_sel + eps_count, delta)-DP: audit of the count release.

Worst-case neighbours for the count step: ``D'`` is ``D`` without one element of a heavy key
(element level), or without one privacy unit whose ``m`` distinct keys are all heavy (user level).
The heavy keys are selected on both sides (with probability ~1), so the event "every one of the
unit's keys has a noisy count at least its count in ``D``" isolates the count step, whose claimed
cost given the candidates is ``eps_count`` (discrete Laplace of scale ``Delta_1 / eps_count``).
The audit's lower bound on epsilon must stay below that claim; with the count noise scale divided
by 10 (element level) or without the factor ``m`` (user level) it does not.

Each trial runs the transform's own release mechanisms (selection, then count) on the exact
aggregates of one window with its own seeded noise source.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum
from beam_dpsketch.sketches.misra_gries.hashed import HashedPAMG
from beam_dpsketch.sketches.misra_gries.select_count import split_budget
from beam_dpsketch.transforms.heavy_hitters import SelectThenCount

EPS, DELTA, K = 1.0, 1e-6, 5
BUDGET = PrivacyBudget.approx(EPS, DELTA)
EPS_COUNT = split_budget(EPS, 0.5)[1]
TRIALS = 3000


def aggregate(
    units: list[list[int]], m: int | None = None
) -> tuple[PostProcessedSum | HashedPAMG, Counter]:
    """The exact aggregates of one window: the selection's sketch and the true counts.

    Element level: Design B's post-processed sketch; user level: hashed one-counter PAMG
    sketches of ``4 K`` buckets, as the transform builds them.
    """
    sketch = MisraGries(K)
    hashed = HashedPAMG(4 * K)
    truth: Counter = Counter()
    for keys in units:
        if m is None:
            sketch.update(keys)
        else:
            hashed.update(keys)
        truth.update(keys)
    return (PostProcessedSum.from_sketch(sketch) if m is None else hashed), truth


def release(pp: Any, truth: Counter, m: int | None, seed: int) -> dict[int, int]:
    """One select-then-count release (selection, then count) with its own noise source."""
    source = NoiseSource.insecure_for_tests(seed)
    mechanism = SelectThenCount(K, max_shards=1, selection_fraction=0.5).bind(
        top=None, max_contributions=m
    )
    (marker,) = mechanism.selection.release(pp, BUDGET, source.stream(("selection",)))
    counts = {key: truth[key] for key in marker.keys}
    out = mechanism.release(counts, BUDGET, source.stream(("count",)))
    return dict(r[:2] for r in out)


def audit(d: list[list[int]], d2: list[list[int]], heavy: list[int], m: int | None) -> float:
    """Lower bound on epsilon from the event: every heavy key's noisy count >= its count in D."""
    pp, truth = aggregate(d, m)
    pp2, truth2 = aggregate(d2, m)

    outs_d = [release(pp, truth, m, seed) for seed in range(TRIALS)]
    outs_d2 = [release(pp2, truth2, m, 10**6 + seed) for seed in range(TRIALS)]
    # The event isolates the count step only if the heavy keys are candidates on both sides.
    assert all(set(heavy) <= out.keys() for out in outs_d + outs_d2)
    hits_d = sum(all(out[key] >= truth[key] for key in heavy) for out in outs_d)
    hits_d2 = sum(all(out[key] >= truth[key] for key in heavy) for out in outs_d2)
    return epsilon_lower_bound(hits_d, TRIALS, hits_d2, TRIALS, 0.0, failure=FAILURE)


def test_element_level_count_noise_is_calibrated_to_one_element():
    rng = np.random.default_rng(0)
    d = [[0] * 400 + [1] * 300 + rng.integers(2, 40, 200).tolist()]
    d2 = [d[0][1:]]  # one element of key 0 removed
    bound = audit(d, d2, [0], None)
    # Given the (here certain) selection, the event costs at most eps_count.
    assert bound <= EPS_COUNT, bound


def test_user_level_count_noise_scales_with_m():
    m = 3
    # Keys in distinct buckets of the user-level selection sketch (0 and 1 share one of 20).
    unit = [0, 2, 3]
    d = [unit] * 1000 + [[4], [5]] * 50
    d2 = d[1:]  # one unit with m heavy keys removed
    bound = audit(d, d2, unit, m)
    assert bound <= EPS_COUNT, bound
