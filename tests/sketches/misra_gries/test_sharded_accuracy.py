"""Accuracy of Design D and of the untrusted-aggregator sum against their stated bounds.

* Design D, simultaneous bound (docs/algorithms.md#mg-design-d): with probability at least
  ``1 - beta`` every key, released or not (estimate 0), has
  ``|f~(x) - f(x)| < n_j(x)/(k+1) + tau + 2 ln(s (k+1)/beta)/eps``; over ``R`` seeded runs the
  failures must stay within a binomial bound at ``beta``;
* both releases, the stated per-value bound: each released value's interval
  ``[lower, upper]`` holds the true count at least at its confidence (95 %), counted over all
  released values of ``R`` runs (one-sided binomial test at ``1e-6``);
* the untrusted sum's error grows with the number of holders, as [LT23, Section 7] says, while
  Design D's does not exceed one sketch's.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    ERROR_CONFIDENCE,
    MisraGries,
    ShardedMisraGries,
    design_d,
    pmg,
    untrusted_sum,
)
from beam_dpsketch.sketches.misra_gries.sharded import shard_ids

SRC = NoiseSource.insecure_for_tests(3011)
EPS, DELTA, K, R = 1.0, 1e-6, 32, 60
BUDGET = PrivacyBudget.approx(EPS, DELTA)


def zipf_keys(n: int, seed: int, items: int = 3000, s: float = 1.1) -> np.ndarray:
    ranks = np.arange(1, items + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(items, size=n, p=pmf).astype(np.int64)


def holders(keys: np.ndarray, s: int) -> ShardedMisraGries:
    """The stream cut into ``s`` holders of consecutive elements (disjoint data)."""
    out = ShardedMisraGries(K, s, "holder")
    for j, part in enumerate(np.array_split(keys, s)):
        out.update_shard(j, part)
    return out


def test_design_d_meets_its_simultaneous_bound():
    keys = zipf_keys(20000, 1)
    f = np.bincount(keys, minlength=3000)
    s, beta = 4, 0.05
    sk = ShardedMisraGries(K, s).update(keys)
    n_j = np.bincount(shard_ids(np.arange(3000), s)[keys], minlength=s)
    shard_of = shard_ids(np.arange(3000), s)
    failures = 0
    for r in range(R):
        rel = design_d(sk, BUDGET, SRC.stream(("dd-utility", r)))
        est = np.zeros(3000)
        for x, v in rel.items:
            est[x] = v
        bound = n_j[shard_of] / (K + 1) + rel.threshold + 2 * math.log(s * (K + 1) / beta) / EPS
        failures += bool(np.any(np.abs(est - f) >= bound))
    assert failures <= stats.binom.isf(1e-6, R, beta)


def coverage(releases, f: np.ndarray) -> tuple[int, int]:
    held = total = 0
    for rel in releases:
        for e in rel.estimates():
            total += 1
            held += e.lower <= f[e.key] <= e.upper
    return held, total


def test_stated_per_value_bounds_hold_at_their_confidence():
    keys = zipf_keys(20000, 2)
    f = np.bincount(keys, minlength=3000)
    d = ShardedMisraGries(K, 4).update(keys)
    u = holders(keys, 4)
    for name, release in (
        ("d", lambda st: design_d(d, BUDGET, st, error_confidence=ERROR_CONFIDENCE)),
        ("u", lambda st: untrusted_sum(u, BUDGET, st, error_confidence=ERROR_CONFIDENCE)),
    ):
        runs = range(4 * R)
        held, total = coverage([release(SRC.stream(("cover", name, r))) for r in runs], f)
        assert total > 2 * len(runs)
        # Fewer misses than a 95 % rate would give, except with probability 1e-6.
        assert total - held <= stats.binom.isf(1e-6, total, 1 - ERROR_CONFIDENCE)


def test_the_untrusted_bound_covers_keys_kept_under_the_threshold_by_other_holders():
    # Every holder has 16 keys of count about the threshold (its sketch is exact, so no sketch
    # error): a key that passes in one holder is often missing from the others' releases, and
    # only the bound's (s - 1) thresholds cover those counts.
    counts = np.arange(24, 40)
    # k large enough for the private exactness test to pass on 16 distinct keys.
    u = ShardedMisraGries(1024, 4, "holder")
    for j in range(4):
        u.update_shard(j, np.repeat(np.arange(16), counts))
    f = np.zeros(3000, dtype=np.int64)
    f[:16] = 4 * counts
    rels = [
        untrusted_sum(u, BUDGET, SRC.stream(("near", r)), error_confidence=ERROR_CONFIDENCE)
        for r in range(4 * R)
    ]
    assert rels[0].details["exactness_tests_passed"] == 4
    held, total = coverage(rels, f)
    assert total > 2 * len(rels)
    assert total - held <= stats.binom.isf(1e-6, total, 1 - ERROR_CONFIDENCE)


def mean_abs_error(releases, f: np.ndarray, top: list[int]) -> float:
    errors = []
    for rel in releases:
        est = rel.as_dict()
        errors += [abs(float(est.get(x, 0.0)) - f[x]) for x in top]
    return float(np.mean(errors))


def test_untrusted_error_grows_with_the_holders_and_design_d_stays_close_to_one_sketch():
    keys = zipf_keys(20000, 3)
    f = np.bincount(keys, minlength=3000)
    top = np.argsort(-f)[:20].tolist()
    runs = range(20)
    one = mean_abs_error(
        [pmg(MisraGries(K).update(keys), BUDGET, SRC.stream(("one", r))) for r in runs], f, top
    )
    dd = mean_abs_error(
        [
            design_d(ShardedMisraGries(K, 8).update(keys), BUDGET, SRC.stream(("d8", r)))
            for r in runs
        ],
        f,
        top,
    )
    u2 = mean_abs_error(
        [untrusted_sum(holders(keys, 2), BUDGET, SRC.stream(("u2", r))) for r in runs], f, top
    )
    u8 = mean_abs_error(
        [untrusted_sum(holders(keys, 8), BUDGET, SRC.stream(("u8", r))) for r in runs], f, top
    )
    # Each Design D shard counts about 1/8 of the elements: its sketch error is smaller.
    assert dd <= one
    # More holders: more noise terms and more sub-threshold losses per key.
    assert u2 < u8
