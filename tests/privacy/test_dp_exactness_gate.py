"""The exactness gate of Design B and the merged releases, on worst-case neighbours.

:func:`~beam_dpsketch.sketches.misra_gries.gate.exactness_gated` tests with noise whether no
Misra-Gries sketch decremented and then releases the exact counts at sensitivity 1; otherwise
the paper's release. Its privacy rests on facts checked here:

* ``widest`` of a ``MERGE_k``-merged sketch changes by at most 1 between neighbours whatever
  the merge tree, and ``widest <= k`` exactly when the counters are the true histogram
  (deterministic, exhaustive over the removed element);
* the calibration: test and branch budgets add up to at most the budget, a decremented sketch
  passes with probability at most ``test_delta``, the exact branch's noise is that of
  sensitivity 1 and its threshold lets a one-sided key (count 1) through with probability at
  most ``delta_b`` (deterministic);
* audits (Clopper-Pearson, failure ``1e-6``, seeded) of the worst cases: a key present once
  against absent, a count ``n`` against ``n + 1`` in the exact branch, and the element whose
  arrival makes a merged sketch (or one of a Design B sum's segments) decrement. Each fails on a
  deliberately broken gate (see the ``broken`` parameters: no threshold; noise of sensitivity
  0.5; a noiseless test).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import analytic_gaussian_sigma, noise_lattice
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum
from beam_dpsketch.sketches.misra_gries.gate import exact_histogram_release, gated_approx_pp
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm
from beam_dpsketch.sketches.misra_gries.merged import merged_gshm, merged_laplace
from beam_dpsketch.sketches.misra_gries.select_count import exactness_test_calibration

TRIALS = 3000
#: The decrement audit's two sides differ by a near-certain event when the gate is broken.
DECREMENT_TRIALS = 400
EPS, DELTA = 1.0, 1e-6
#: Large enough that the test passes below about 3k/4 distinct keys at EPS (its margin).
K = 2048


def merged_of(segments: list[list[int]], k: int) -> MisraGries:
    """``MERGE_k`` of one sketch per segment, merged left to right (a fixed tree)."""
    out = MisraGries(k)
    for seg in segments:
        out.merge(MisraGries(k).update(seg))
    return out


def summed(segments: list[list[int]], k: int) -> PostProcessedSum:
    """The Design B sum of one Misra-Gries sketch per segment."""
    pp = PostProcessedSum(k, max_shards=max(1, len(segments)))
    for seg in segments:
        pp.add_sketch(MisraGries(k).update(seg))
    return pp


def test_merged_widest_changes_by_at_most_one_whatever_the_merge_tree():
    rng = np.random.default_rng(0)
    k = 4
    streams = [list(range(k)) * 3 + [k]]  # exactly k distinct keys, then one more
    streams += [rng.integers(0, 7, rng.integers(3, 14)).tolist() for _ in range(200)]
    for stream in streams:
        for cuts in ((), (len(stream) // 2,), (len(stream) // 3, 2 * len(stream) // 3)):
            bounds = [0, *cuts, len(stream)]
            segs = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
            base = merged_of(segs, k)
            truth = Counter(stream)
            # widest <= k exactly when the counters are the true histogram.
            assert (base.widest <= k) == (base.to_dict() == dict(truth))
            for i in range(len(stream)):
                cut = [seg[:] for seg in segs]
                j, pos = 0, i
                while pos >= len(cut[j]):
                    pos -= len(cut[j])
                    j += 1
                del cut[j][pos]
                assert abs(merged_of(cut, k).widest - base.widest) <= 1


@pytest.mark.parametrize("eps,delta,k", [(0.1, 1e-6, 1 << 17), (1.0, 1e-6, 4096), (4.0, 1e-9, 64)])
def test_gate_calibration_composes_to_the_budget(eps, delta, k):
    gate = exactness_test_calibration(eps, delta, k)
    assert gate.epsilon + gate.branch_epsilon <= eps
    assert gate.branch_delta + (1 + math.exp(eps)) * gate.test_delta <= delta * (1 + 1e-12)
    # A decremented sketch (widest = k + 1) passes iff Z >= k + 1 - cut.
    a = math.exp(-1.0 / float(gate.scale))
    t = k + 1 - gate.cut
    assert t >= 1 and a**t / (1 + a) <= gate.test_delta
    assert gate.scale >= Fraction(1) / Fraction(gate.epsilon)


@pytest.mark.parametrize("eps,delta", [(0.05, 1e-6), (0.98, 9.9e-7), (3.9, 1e-9)])
def test_exact_branch_is_calibrated_for_sensitivity_one(eps, delta):
    stream = NoiseSource.insecure_for_tests(0).stream("calibration")
    _, scale, tau, _ = exact_histogram_release(
        {}, PrivacyBudget.approx(eps, delta), stream, noise="discrete_laplace", k=8
    )
    assert scale >= 1 / Fraction(eps)  # L1 sensitivity 1 (scale in counts)
    # On the lattice of step 1/g: a key present on one side only has g steps and passes iff
    # Z >= g (tau - 1), Z discrete Laplace of g * scale steps.
    g = noise_lattice(1.0 / eps)
    assert (g * (tau - 1)).is_integer()
    a = math.exp(-1.0 / float(g * scale))
    assert a ** (g * (tau - 1)) / (1 + a) <= delta
    _, scale, tau, _ = exact_histogram_release(
        {}, PrivacyBudget.approx(eps, delta), stream, noise="laplace", k=8
    )
    assert scale >= 1 / Fraction(eps)
    assert math.exp(-(tau - 1) / float(scale)) / 2 <= delta
    _, sigma, tau, _ = exact_histogram_release(
        {}, PrivacyBudget.approx(eps, delta), stream, noise="gaussian", k=8
    )
    params = calibrate_gshm(1, eps, delta)
    assert (sigma, tau) == (params.sigma, params.threshold)
    assert params.l == 1 and params.delta_exact <= delta
    # GSHM's Gaussian part alone needs more than the L2-sensitivity-1 Gaussian mechanism.
    assert sigma > analytic_gaussian_sigma(1.0, eps, delta)


def _released(release_fn, source, key, seed: int, tag: str) -> tuple[bool, float]:
    stream = NoiseSource.insecure_for_tests(seed).stream(("exactness-gate-audit", tag))
    values = dict(release_fn(source, EPS, DELTA, stream).items)
    return key in values, values.get(key, -math.inf)


RELEASES = {
    "merged-laplace": lambda s, e, d, st: merged_laplace(
        s, PrivacyBudget.approx(e, d), st, exactness_gate=True
    ),
    "merged-gshm": lambda s, e, d, st: merged_gshm(
        s, PrivacyBudget.approx(e, d), st, exactness_gate=True
    ),
    "design-b": lambda s, e, d, st: gated_approx_pp(
        s, PrivacyBudget.approx(e, d), st, count_fraction=0.0
    ),
}


def _source(name: str, segments: list[list[int]], k: int):
    return summed(segments, k) if name == "design-b" else merged_of(segments, k)


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_audit_key_present_once_against_absent(name):
    k = K
    base = [[1] * 50 + [2] * 30, [3] * 5]
    d = _source(name, base, k)
    d2 = _source(name, [base[0], base[1] + [99]], k)  # key 99 once, in the second segment
    fn = RELEASES[name]
    hits_d2 = sum(_released(fn, d2, 99, s, "a")[0] for s in range(TRIALS))
    hits_d = sum(_released(fn, d, 99, 10**6 + s, "a")[0] for s in range(TRIALS))
    bound = epsilon_lower_bound(hits_d2, TRIALS, hits_d, TRIALS, DELTA, failure=FAILURE)
    assert bound <= EPS, bound


@pytest.mark.parametrize("name", ["merged-laplace", "design-b"])
def test_audit_count_n_against_n_plus_one_in_the_exact_branch(name):
    # One more element of key 1: its released value shifts by one. The event {value >= n + 1}
    # has probability ratio e^{eps_b} at scale 1/eps_b, e^{2 eps_b} at sensitivity 0.5.
    k, n = K, 50
    d = _source(name, [[1] * n + [2] * 30], k)
    d2 = _source(name, [[1] * (n + 1) + [2] * 30], k)
    fn = RELEASES[name]
    hits_d2 = sum(_released(fn, d2, 1, s, "b")[1] >= n + 1 for s in range(TRIALS))
    hits_d = sum(_released(fn, d, 1, 10**6 + s, "b")[1] >= n + 1 for s in range(TRIALS))
    bound = epsilon_lower_bound(hits_d2, TRIALS, hits_d, TRIALS, DELTA, failure=FAILURE)
    assert bound <= EPS, bound


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_audit_the_element_that_makes_a_sketch_decrement(name):
    # D: k distinct keys of count 40 over two segments (exact); D': one new key more, so the
    # merged sketch (or the second segment's for Design B) decrements. From exact counts key 0
    # is released almost surely, from the sketches never at this k: only the noisy test keeps
    # the two close.
    k = K
    if name == "design-b":
        # Design B tests its widest segment: the second one holds all k keys.
        segments = [[0] * 5, [x for x in range(k) for _ in range(40)]]
    else:
        half = k // 2
        segments = [
            [x for x in range(half) for _ in range(40)],
            [x for x in range(half, k) for _ in range(40)],
        ]
    d = _source(name, segments, k)
    d2 = _source(name, [segments[0], segments[1] + [k]], k)
    assert d.widest == k and d2.widest == k + 1
    fn = RELEASES[name]
    n = DECREMENT_TRIALS
    hits_d = sum(_released(fn, d, 0, s, "c")[0] for s in range(n))
    hits_d2 = sum(_released(fn, d2, 0, 10**6 + s, "c")[0] for s in range(n))
    for a, b in ((hits_d, hits_d2), (hits_d2, hits_d)):
        bound = epsilon_lower_bound(a, n, b, n, DELTA, failure=FAILURE)
        assert bound <= EPS, bound
