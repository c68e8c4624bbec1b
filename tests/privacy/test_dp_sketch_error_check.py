"""The private checks behind the error bounds of sequential, merged-gshm and merged-laplace.

With ``error_confidence`` set, :func:`~beam_dpsketch.sketches.misra_gries.pmg`,
:func:`~beam_dpsketch.sketches.misra_gries.merged_gshm` and
:func:`~beam_dpsketch.sketches.misra_gries.merged_laplace` release two more numbers
(through the stated bound): a noisy test of ``widest = min(distinct keys, k + 1)`` and a noisy
upper bound on the element count ``n``, each with discrete Laplace noise for sensitivity 1, on a
small share of epsilon; the release runs on the rest (basic composition). Their privacy rests on
facts checked here on worst-case neighbours:

* ``widest`` changes by at most 1 when one element is added or removed, for one stream and for
  any merge tree of segments, including the element that makes a stream of exactly ``k``
  distinct keys decrement (exhaustive over the removed element); ``n`` changes by exactly 1.
  The test fails on a broken statistic (the number of positive counters, which one element can
  change by up to ``k``).
* the shares compose: ``test_epsilon + count_epsilon + release_epsilon <= epsilon``, the checks'
  noise has scale ``1 / share``, and a sketch that decremented passes the test with probability
  at most the stated failure.
* the checks draw from their own substream, exactly two draws whatever the data: the release's
  keys and values are those of the mechanism run alone at ``release_epsilon``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import merged_gshm, merged_laplace, pmg
from beam_dpsketch.sketches.misra_gries.error_check import (
    SKETCH_CHECK_FAILURE,
    sketch_check_calibration,
)


def merged_sketch(segments: list[list[int]], k: int) -> MisraGries:
    """One sketch per segment, merged left to right with ``MERGE_k`` (a fixed merge tree)."""
    out = MisraGries(k)
    for seg in segments:
        part = MisraGries(k)
        if seg:
            part.update(seg)
        out.merge(part)
    return out


def _neighbour_pairs(widest, k: int = 4):
    """Every stream of the family with each one element removed: ``(|change|, n change)``."""
    rng = np.random.default_rng(0)
    streams = [list(range(k)) * 3 + [k]]  # exactly k distinct keys, then one more
    streams += [list(range(k + 1)) + list(range(k)) * 2]  # the extra key first
    streams += [rng.integers(0, 7, rng.integers(3, 14)).tolist() for _ in range(300)]
    worst = 0
    for stream in streams:
        for cuts in ((), (len(stream) // 2,), (len(stream) // 3, 2 * len(stream) // 3)):
            bounds = [0, *cuts, len(stream)]
            segs = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
            base = merged_sketch(segs, k)
            if base.d == 0:
                # d == 0 exactly when the elements have at most k distinct keys: exact counts.
                assert base.to_dict() == {x: stream.count(x) for x in set(stream)}
            assert (base.widest <= k) == (base.d == 0) == (len(set(stream)) <= k)
            for i in range(len(stream)):
                cut = [seg[:] for seg in segs]
                j, pos = 0, i
                while pos >= len(cut[j]):
                    pos -= len(cut[j])
                    j += 1
                del cut[j][pos]
                other = merged_sketch(cut, k)
                assert base.n - other.n == 1
                worst = max(worst, abs(widest(base) - widest(other)))
    return worst


def test_widest_changes_by_at_most_one_between_neighbours():
    assert _neighbour_pairs(lambda s: s.widest) <= 1


def test_the_neighbour_check_catches_a_statistic_of_higher_sensitivity():
    # Positive counters: a decrement can zero all k of them at once.
    assert _neighbour_pairs(lambda s: len(s.to_dict())) > 1


def test_the_shares_compose_and_a_decremented_sketch_passes_rarely():
    for eps, k in [(0.1, 1 << 17), (1.0, 1 << 17), (1.0, 4096), (0.1, 64), (4.0, 8), (2e-4, 1)]:
        cal = sketch_check_calibration(eps, k)
        micro = Fraction(1, 10**6)
        parts = [Fraction(cal.test_epsilon), Fraction(cal.count_epsilon)]
        assert all(p >= micro for p in parts)
        assert sum(parts) + Fraction(cal.release_epsilon) <= Fraction(eps)
        assert cal.test_scale == 1 / Fraction(cal.test_epsilon).limit_denominator(10**6)
        assert cal.count_scale == 1 / Fraction(cal.count_epsilon).limit_denominator(10**6)
        assert cal.failure == SKETCH_CHECK_FAILURE
        a = math.exp(-1.0 / float(cal.test_scale))
        # widest = k + 1 passes iff Z <= cut - k - 1 = -t: probability a**t / (1 + a).
        t = k + 1 - cal.test_cut
        assert t >= 1 and a**t / (1 + a) <= cal.failure
        # The count's margin: P[W < -margin] <= failure, so n + W + margin >= n.
        b = math.exp(-1.0 / float(cal.count_scale))
        assert b ** (cal.count_margin + 1) / (1 + b) <= cal.failure
    # At the default k both checks cost well under a thousandth of the budget.
    assert sketch_check_calibration(1.0, 1 << 17).release_epsilon >= 0.999


def test_the_checks_leave_the_release_noise_unchanged():
    rng = np.random.default_rng(1)
    keys = rng.zipf(1.3, 20_000) % 300
    for k in (64, 512):  # decremented, then exact
        sketch = MisraGries(k)
        sketch.update(keys)
        merged = merged_sketch([keys[:7000].tolist(), keys[7000:].tolist()], k)
        for eps in (0.5, 3.0):
            cal = sketch_check_calibration(eps, k)
            cases = [
                (pmg, sketch, {}),
                (merged_laplace, merged, {}),
                (merged_gshm, merged, {"sigma": 2000.0}),
            ]
            for fn, source, kw in cases:
                stream = ("error-check", fn.__name__, k, repr(eps))
                src = NoiseSource.insecure_for_tests(3)
                budget = PrivacyBudget.approx(eps, 1e-6)
                full = fn(source, budget, src.stream(stream), error_confidence=0.95, **kw)
                rest = PrivacyBudget.approx(cal.release_epsilon, 1e-6)
                alone = fn(source, rest, src.stream(stream), **kw)
                assert full.items == alone.items
                assert full.threshold == alone.threshold
                assert full.error is not None and alone.error is None
                assert full.epsilon == eps
                # The release may round its share down onto the 1e-6 grid, never up.
                assert 0 <= cal.release_epsilon - full.details["release_epsilon"] <= 1.01e-6
                assert full.details.get("epsilon_effective", 0.0) <= eps
