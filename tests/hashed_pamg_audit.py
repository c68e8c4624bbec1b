"""Worst-case neighbouring inputs of releases over hashed one-counter PAMG sketches.

Shared by the audits of select-then-count's user-level selection and of the ``pamg-gshm``
release: both publish Gaussian-noised bucket counters cut at a threshold, calibrated by
:func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_selection_parameters` for units of at
most ``m`` distinct keys. ``release(sketch, seed)`` stands for one seeded release returning
``{key: noisy count}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.sketches.misra_gries import hashed
from beam_dpsketch.sketches.misra_gries.hashed import (
    BUCKET_SEED,
    HashedPAMG,
    HashedSelectionParameters,
    hashed_selection_parameters,
)

Release = Callable[[HashedPAMG, int], dict]


def distinct_bucket_keys(n: int, buckets: int, start: int = 0) -> list[int]:
    """``n`` integer keys from ``start`` on, no two in the same of ``buckets`` buckets."""
    width = np.uint64(buckets)
    seen: set[int] = set()
    out: list[int] = []
    x = start
    while len(out) < n:
        h1, _ = hash_keys([x], BUCKET_SEED)
        b = int(h1[0] % width)
        if b not in seen:
            seen.add(b)
            out.append(x)
        x += 1
    return out


def broken_sigma(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """The calibration for L2 sensitivity 1: ignores that one unit moves m counters."""
    good = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, good.sigma / math.sqrt(m), good.threshold)


def broken_threshold(m: int, epsilon: float, delta: float) -> HashedSelectionParameters:
    """A cut one noise standard deviation above 1: keys of one unit pass it."""
    good = hashed_selection_parameters(m, epsilon, delta)
    return HashedSelectionParameters(m, epsilon, delta, good.sigma, 1.0 + good.sigma)


def counts_audit(
    release: Release, buckets: int, m: int, epsilon: float, delta: float, trials: int
) -> float:
    """Lower bound on epsilon when one unit of ``m`` keys, each alone in its bucket, is added
    to 499 copies of itself: every one of the ``m`` counters moves by 1. The event is "the sum
    of the ``m`` released counts reaches a cut at the upper 2 % of its law on the smaller side"."""
    unit = distinct_bucket_keys(m, buckets)
    d, d2 = HashedPAMG(buckets), HashedPAMG(buckets)
    for _ in range(500):
        d.update(unit)
    for _ in range(499):
        d2.update(unit)
    sigma = hashed.hashed_selection_parameters(m, epsilon, delta).sigma
    cut = 499 * m + NormalDist(0.0, sigma * math.sqrt(m)).inv_cdf(0.98)
    outs_d = [release(d, i) for i in range(trials)]
    outs_d2 = [release(d2, 10**6 + i) for i in range(trials)]
    assert all(len(o) == m for o in outs_d + outs_d2)  # the heavy keys are released both sides
    hits_d = sum(sum(o.values()) >= cut for o in outs_d)
    hits_d2 = sum(sum(o.values()) >= cut for o in outs_d2)
    return epsilon_lower_bound(hits_d, trials, hits_d2, trials, delta, failure=FAILURE)


def keys_audit(release: Release, buckets: int, m: int, delta: float, trials: int) -> float:
    """Lower bound on epsilon when one unit of ``m`` keys that no other unit has (counter 1
    each) is added; the event is "one of those keys is released"."""
    heavy = distinct_bucket_keys(8, buckets)
    fresh = distinct_bucket_keys(m, buckets, start=10**6)
    base = HashedPAMG(buckets)
    for _ in range(200):
        base.update(heavy)
    d = HashedPAMG.from_bytes(base.to_bytes()).update(fresh)
    assert all(d.to_dict()[x] == 1 for x in fresh)
    hits_d = sum(any(x in release(d, i) for x in fresh) for i in range(trials))
    hits_d2 = sum(any(x in release(base, 10**6 + i) for x in fresh) for i in range(trials))
    return epsilon_lower_bound(hits_d, trials, hits_d2, trials, delta, failure=FAILURE)
