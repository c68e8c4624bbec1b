"""The exact branch of the select-then-count selection, and the switch to it, on worst-case neighbours.

:func:`~beam_dpsketch.sketches.misra_gries.select_count.select_candidates` tests with noise
whether every Misra-Gries segment held all of its distinct keys, and then selects from the exact
counts by private partition selection. Its privacy rests on three facts, each checked here:

* the tested quantity ``widest`` changes by at most 1 between neighbours, including the element
  that makes a segment of exactly ``k`` distinct keys decrement (deterministic, exhaustive over
  the removed element);
* the keep probabilities satisfy the ``(eps, delta)`` inequalities between counts ``n`` and
  ``n + 1`` exactly (integer arithmetic), and a decremented input passes the test with
  probability at most ``test_delta``;
* audits (Clopper-Pearson, failure ``1e-6``) of the two worst cases: a key absent on one side and
  present once on the other, and the input whose one extra element flips "never decremented".
  Each audit fails on a deliberately broken mechanism (a delta 10^5 times too large; a
  noiseless exactness test).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum
from beam_dpsketch.sketches.misra_gries.select_count import (
    keep_numerators,
    select_candidates,
    selection_calibration,
)

ONE = 1 << 64
TRIALS = 3000


def summed(segments: list[list[int]], k: int) -> PostProcessedSum:
    """The Design B sum of one Misra-Gries sketch per segment."""
    pp = PostProcessedSum(k, max_shards=max(1, len(segments)))
    for seg in segments:
        sketch = MisraGries(k)
        sketch.update(seg)
        pp.add_sketch(sketch)
    return pp


def test_keep_probabilities_satisfy_the_dp_inequalities():
    for eps, delta in [(0.05, 1e-6), (0.5, 1e-6), (1.0, 1e-9), (4.0, 1e-5), (0.0123, 3e-7)]:
        table = keep_numerators(eps, delta)
        e = Fraction(math.exp(eps))
        d = Fraction(delta) * ONE
        assert table[0] == 0 and table[-1] == ONE
        # Absent on one side, count 1 on the other.
        assert table[1] <= d
        for lo, hi in zip(table, table[1:], strict=False):
            assert lo <= hi
            assert hi <= e * lo + d
            assert ONE - lo <= e * (ONE - hi) + d


def test_widest_changes_by_at_most_one_between_neighbours():
    rng = np.random.default_rng(0)
    k = 4
    streams = [list(range(k)) * 3 + [k]]  # exactly k distinct keys, then one more
    streams += [rng.integers(0, 7, rng.integers(3, 14)).tolist() for _ in range(300)]
    for stream in streams:
        for split in (None, len(stream) // 2):
            segs = [stream] if split is None else [stream[:split], stream[split:]]
            base = summed(segs, k)
            truth = Counter(stream)
            # widest <= k exactly when the sums are the true histogram.
            assert (base.widest <= k) == base.exact
            if base.exact:
                assert base.exact_counts() == {x: truth[x] for x in base.exact_counts()}
                assert set(base.exact_counts()) == set(truth)
            for i in range(len(stream)):
                # Remove element i from its segment (A-PART: the others are unchanged).
                cut = [seg[:] for seg in segs]
                j, pos = 0, i
                while pos >= len(cut[j]):
                    pos -= len(cut[j])
                    j += 1
                del cut[j][pos]
                assert abs(summed(cut, k).widest - base.widest) <= 1


def test_a_decremented_input_passes_the_exactness_test_rarely():
    for eps, delta, k in [(0.05, 1e-6, 1 << 17), (1.0, 1e-6, 4096), (4.0, 1e-6, 64)]:
        cal = selection_calibration(eps, delta, k)
        a = math.exp(-1.0 / float(cal.test_scale))
        # Passing with widest = k + 1 needs Z <= cut - k - 1 = -t, probability a**t / (1 + a).
        t = k + 1 - cal.test_cut
        assert t >= 1
        assert a**t / (1 + a) <= cal.test_delta
        # delta splits exactly as the composition in select_candidates states.
        assert cal.branch_delta + (1 + math.exp(eps)) * cal.test_delta <= delta * (1 + 1e-12)
        assert cal.test_epsilon + cal.branch_epsilon <= eps


def _selected(pp: PostProcessedSum, key: int, eps: float, k: int, seed: int) -> bool:
    stream = NoiseSource.insecure_for_tests(seed).stream(("select-exact-audit",))
    release = select_candidates(pp, PrivacyBudget.approx(eps, 1e-6), stream, k=k)
    return key in release.keys()


def test_audit_key_present_once_against_absent():
    eps, k = 1.0, 4096
    base = [[1] * 50 + [2] * 30 + [3] * 5]
    d = summed(base, k)
    d2 = summed([base[0] + [99]], k)  # key 99 once
    assert d.exact and d2.exact
    hits_d2 = sum(_selected(d2, 99, eps, k, s) for s in range(TRIALS))
    hits_d = sum(_selected(d, 99, eps, k, 10**6 + s) for s in range(TRIALS))
    bound = epsilon_lower_bound(hits_d2, TRIALS, hits_d, TRIALS, 1e-6, failure=FAILURE)
    assert bound <= eps, bound


def test_audit_the_element_that_makes_a_segment_decrement():
    # D: one segment with exactly k distinct keys of count 40 (exact); D': one new key more (the
    # sketch decrements). Selecting key 0 from exact counts is near certain, from the sketch
    # impossible (Algorithm 3 leaves it about 40): only the noisy test keeps the two close.
    eps, k = 4.0, 64
    seg = [x for x in range(k) for _ in range(40)]
    d = summed([seg], k)
    d2 = summed([seg + [k]], k)
    assert d.exact and not d2.exact
    hits_d = sum(_selected(d, 0, eps, k, s) for s in range(TRIALS))
    hits_d2 = sum(_selected(d2, 0, eps, k, 10**6 + s) for s in range(TRIALS))
    for a, b in ((hits_d, hits_d2), (hits_d2, hits_d)):
        bound = epsilon_lower_bound(a, TRIALS, b, TRIALS, 1e-6, failure=FAILURE)
        assert bound <= eps, bound
