"""Hashed one-counter PAMG sketches: sensitivity on neighbouring units, accuracy, calibration.

The user-level selection of select-then-count relies on three facts, each checked here:

* adding or removing one unit of at most ``m`` distinct keys changes at most ``m`` counters,
  each by exactly 1, and a key stored on one side only has counter 1 there, for sequential
  updates and for merge trees fixed in advance (exhaustive over seeded random small cases with
  many collisions);
* the counters are exact for keys alone in their bucket, and never above the true count;
* the noise scale and threshold meet the two halves of delta of the proof in
  :func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_selection_parameters`.
"""

from __future__ import annotations

import math
from collections import Counter
from statistics import NormalDist

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import gaussian_delta
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    hashed_selection,
    hashed_selection_parameters,
)


def random_units(rng: np.random.Generator, n: int, m: int, items: int) -> list[list[int]]:
    """``n`` units of 1 to ``m`` distinct keys from a skewed universe of ``items`` keys."""
    p = 1.0 / np.arange(1, items + 1)
    p /= p.sum()
    out = []
    for _ in range(n):
        size = int(rng.integers(1, min(m, items) + 1))
        out.append(sorted(int(x) for x in rng.choice(items, size=size, replace=False, p=p)))
    return out


def build(units: list[list[int]], segments: list[int], buckets: int, n_seg: int) -> HashedPAMG:
    """Sequential updates per segment, then a multi-way merge of the segments in a fixed order.

    ``segments[i]`` is the segment of unit ``i``; removing a unit keeps every segment (possibly
    empty), so the merge tree is the same on both sides.
    """
    parts = [HashedPAMG(buckets) for _ in range(n_seg)]
    for unit, s in zip(units, segments, strict=True):
        parts[s].update(unit)
    out = HashedPAMG(buckets)
    return out.merge(*parts)


def build_pairwise(units: list[list[int]], buckets: int) -> HashedPAMG:
    """One sketch per unit (the transform's shape), merged pairwise in a balanced tree."""
    level = [HashedPAMG(buckets).update(u) for u in units]
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            nxt.append(level[i].merge(*level[i + 1 : i + 2]))
        level = nxt
    return level[0] if level else HashedPAMG(buckets)


def check_neighbours(c: dict[int, int], c2: dict[int, int], m: int) -> None:
    keys = set(c) | set(c2)
    diff = {x: c.get(x, 0) - c2.get(x, 0) for x in keys}
    changed = [x for x, d in diff.items() if d]
    assert len(changed) <= m
    assert all(abs(diff[x]) == 1 for x in changed)
    assert all(c[x] == 1 for x in set(c) - set(c2))
    assert all(c2[x] == 1 for x in set(c2) - set(c))


@pytest.mark.parametrize("m", [1, 3, 6])
def test_one_unit_changes_at_most_m_counters_by_one(m):
    rng = np.random.default_rng(1000 + m)
    for _ in range(400):
        buckets = int(rng.integers(1, 7))  # few buckets: collisions everywhere
        n = int(rng.integers(1, 30))
        units = random_units(rng, n, m, items=int(rng.integers(2, 16)))
        n_seg = int(rng.integers(1, 4))
        segments = rng.integers(0, n_seg, n).tolist()
        gone = int(rng.integers(0, n))
        rest = units[:gone] + units[gone + 1 :]
        seg_rest = segments[:gone] + segments[gone + 1 :]
        c = build(units, segments, buckets, n_seg).to_dict()
        c2 = build(rest, seg_rest, buckets, n_seg).to_dict()
        check_neighbours(c, c2, m)
        # The transform's shape: the removed unit's leaf becomes an empty sketch.
        leaves = [*units[:gone], [], *units[gone + 1 :]]
        check_neighbours(
            build_pairwise(units, buckets).to_dict(), build_pairwise(leaves, buckets).to_dict(), m
        )


def test_counters_are_exact_for_keys_alone_in_their_bucket_and_never_above():
    rng = np.random.default_rng(7)
    units = random_units(rng, 3000, 5, items=300)
    sketch = HashedPAMG(1 << 14)
    for unit in units:
        sketch.update(unit)
    truth = Counter(x for u in units for x in u)
    c = sketch.to_dict()
    buckets = dict(zip(truth, sketch._bucket_of(list(truth)), strict=True))
    shared = Counter(buckets.values())
    alone = [x for x in truth if shared[buckets[x]] == 1]
    assert len(alone) > 0.9 * len(truth)
    for x in alone:
        # Alone in its bucket, but a unit with two keys in one bucket never occurs then.
        assert c.get(x, 0) == truth[x]
    assert all(c[x] <= truth[x] for x in c)
    assert len(sketch) <= sketch.buckets


def test_merge_order_of_single_key_buckets_is_exact():
    a = HashedPAMG(64).update([1, 2]).update([1])
    b = HashedPAMG(64).update([1, 3])
    ab = HashedPAMG(64).merge(a, b).to_dict()
    assert ab == {1: 3, 2: 1, 3: 1}


def test_round_trip_and_malformed_bytes():
    sketch = HashedPAMG(128)
    for unit in ([1, "a", (2, "b")], ["a"], [b"x", 1]):
        sketch.update(unit)
    back = HashedPAMG.from_bytes(sketch.to_bytes())
    assert back == sketch and back.to_dict() == sketch.to_dict()
    data = bytearray(sketch.to_bytes())
    data[-1] ^= 0xFF
    with pytest.raises(SketchFormatError):
        HashedPAMG.from_bytes(bytes(data))
    with pytest.raises(ValueError, match="different"):
        HashedPAMG(128).merge(HashedPAMG(64))
    with pytest.raises(ValueError, match="buckets"):
        HashedPAMG(0)


@pytest.mark.parametrize("m", [1, 5, 20, 100])
@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_calibration_meets_both_halves_of_delta(m, eps):
    delta = 1e-6
    p = hashed_selection_parameters(m, eps, delta)
    # The Gaussian mechanism for L2 sensitivity sqrt(m) at delta / 2.
    assert gaussian_delta(math.sqrt(m), p.sigma, eps) <= delta / 2
    # Each of at most m keys stored on one side only (counter 1) passes with q, and the proof
    # charges (|F| + e^eps |G|) q <= m e^eps q <= delta / 2.
    q = 1.0 - NormalDist(1.0, p.sigma).cdf(p.threshold)
    assert m * math.exp(eps) * q <= delta / 2


def test_selection_keeps_heavy_keys_and_hides_keys_of_one_unit():
    sketch = HashedPAMG(1 << 12)
    for _ in range(400):
        sketch.update([0, 1, 2])
    sketch.update([3, 4, 5])  # keys of one unit: counter 1
    kept = set()
    for seed in range(50):
        stream = NoiseSource.insecure_for_tests(seed).stream("sel")
        chosen = hashed_selection(sketch, 3, PrivacyBudget.approx(1.0, 1e-6), stream, k=10)
        kept |= {x for x, _ in chosen}
        assert [y for _, y in chosen] == sorted((y for _, y in chosen), reverse=True)
    assert kept == {0, 1, 2}
    stream = NoiseSource.insecure_for_tests(0).stream("sel")
    assert len(hashed_selection(sketch, 3, PrivacyBudget.approx(1.0, 1e-6), stream, k=2)) == 2


def test_memory_is_the_buckets_whatever_the_distinct_keys():
    sketch = HashedPAMG(256)
    for i in range(5000):
        sketch.update([3 * i, 3 * i + 1, 3 * i + 2])  # 15,000 distinct keys
    assert len(sketch) <= 256
    assert len(HashedPAMG.from_bytes(sketch.to_bytes())) == len(sketch)
