"""SpaceSaving with a fixed tie-break: its invariants, and the structural facts behind DP.

The DP release (docs/algorithms.md#space-saving) rests on what removing one element does to a
SpaceSaving run with the tie-break "unused slot first, then the minimum-count label with the
smallest canonical key". Checked exhaustively for every stream of up to 7 elements over 4 keys
with 2 and 3 counters, every element removed in turn, and on seeded random longer streams:

1. at most 2 labels are monitored on one side only, per side;
2. each such label has count at most ``c_min + 1 <= floor(n/k) + 1`` on its own side;
3. the common labels' counts differ by at most 1 in L1 (so on at most one label).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.space_saving import SpaceSaving


def reference(k: int, stream: list[int]) -> dict[int, int]:
    """SpaceSaving straight from its definition (a linear scan for the minimum slot)."""
    slots: dict[int, int] = {}
    for x in stream:
        if x in slots:
            slots[x] += 1
        elif len(slots) < k:
            slots[x] = 1
        else:
            c_min = min(slots.values())
            old = min(y for y, c in slots.items() if c == c_min)
            del slots[old]
            slots[x] = c_min + 1
    return slots


def facts_hold(k: int, big: tuple[int, ...], small: tuple[int, ...], cache: dict) -> None:
    def run(s: tuple[int, ...]) -> SpaceSaving:
        if s not in cache:
            cache[s] = SpaceSaving(k).update(list(s))
        return cache[s]

    a, b = run(big), run(small)
    ca, cb = a.to_dict(), b.to_dict()
    only_a, only_b = set(ca) - set(cb), set(cb) - set(ca)
    assert len(only_a) <= 2 and len(only_b) <= 2, (big, small)
    for only, sketch, counts in ((only_a, a, ca), (only_b, b, cb)):
        for x in only:
            assert counts[x] <= sketch.c_min + 1 <= sketch.n // k + 1, (big, small, x)
    common = set(ca) & set(cb)
    assert sum(abs(ca[x] - cb[x]) for x in common) <= 1, (big, small)
    assert abs(a.c_min - b.c_min) <= 1


@pytest.mark.parametrize("k", [2, 3])
def test_structural_facts_hold_for_every_small_stream_and_removal(k):
    cache: dict = {}
    pairs = 0
    for length in range(1, 8):
        for big in itertools.product(range(4), repeat=length):
            for i in range(length):
                facts_hold(k, big, big[:i] + big[i + 1 :], cache)
                pairs += 1
    assert pairs == sum(n * 4**n for n in range(1, 8))


def test_structural_facts_hold_for_random_longer_streams():
    # Beyond the exhaustive range: 5,000 seeded pairs, k up to 7, up to 40 elements over up to
    # 10 keys, the removed element anywhere.
    rng = np.random.default_rng(2930)
    for _ in range(5000):
        k = int(rng.integers(2, 8))
        big = tuple(
            rng.integers(0, int(rng.integers(2, 11)), size=int(rng.integers(1, 41))).tolist()
        )
        i = int(rng.integers(0, len(big)))
        facts_hold(k, big, big[:i] + big[i + 1 :], {})


def test_matches_the_definition_and_keeps_its_invariants():
    rng = np.random.default_rng(5)
    for k in (1, 2, 5, 17):
        for _ in range(50):
            stream = (np.minimum(rng.zipf(1.4, size=int(rng.integers(1, 300))), 40)).tolist()
            sketch = SpaceSaving(k).update(stream)
            counts = sketch.to_dict()
            assert counts == reference(k, stream)
            truth = Counter(stream)
            assert sum(counts.values()) == len(stream) == sketch.n
            assert sketch.c_min <= len(stream) // k
            for x, c in counts.items():
                assert truth[x] <= c <= truth[x] + sketch.c_min
            for x, f in truth.items():
                if f > sketch.c_min:
                    assert x in counts


def test_batches_equal_one_stream_and_bytes_round_trip():
    keys = ["b", "a", "c", "a", "d", "e", "a", "b"] * 7
    whole = SpaceSaving(3).update(keys)
    parts = SpaceSaving(3)
    for chunk in (keys[:5], keys[5:20], keys[20:]):
        parts.update(chunk)
    assert parts == whole
    again = SpaceSaving.from_bytes(whole.to_bytes())
    assert again == whole
    # The rebuilt tie-break state continues the same run.
    assert again.update(["z", "y"]) == whole.copy().update(["z", "y"])
    with pytest.raises(SketchFormatError):
        SpaceSaving.from_bytes(whole.to_bytes()[:-3])


def test_merge_with_an_empty_sketch_is_the_identity_and_otherwise_flagged():
    a = SpaceSaving(4).update([1, 2, 2, 3])
    assert SpaceSaving(4).merge(a) == a
    assert a.copy().merge(SpaceSaving(4)) == a
    merged = a.copy().merge(SpaceSaving(4).update([2, 5]))
    assert merged.merged and merged.n == 6 and merged.to_dict()[2] == 3
    with pytest.raises(ValueError, match="k"):
        a.merge(SpaceSaving(5))
