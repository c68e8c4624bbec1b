"""Privacy of Design D and of the untrusted-aggregator sum on worst-case neighbours.

Both release PMG ([LT23, Algorithm 2]) on every shard's sequential sketch, each shard on noise
of its own (:func:`~beam_dpsketch.sketches.misra_gries.sharded.shard_stream`); Design D shards
by a fixed hash of the key and returns the union, the untrusted baseline shards by data holder
and sums the released values per key. Checked here:

* deterministic: removing any one element of a stream changes exactly one shard of the
  key-partitioned sketch, and that shard is the sequential sketch of its sub-stream without
  the element (every other shard is identical), so each shard's PMG sees a PMG neighbour;
* statistical, on the worst cases of one shard (one counter up by one, every counter down by
  one, a key of count one appearing) with a second shard beside it: half-lines of the changed
  key's value, of the difference between the changed key's value and the other shard's key in
  the same slot, of the mean value, and the event "the new key is released"; ``R`` seeded
  releases per side, Clopper-Pearson lower bound on epsilon (``privacy_audit``) at total failure
  ``1e-6`` must not exceed ``epsilon``;
* the same audit flags the broken versions whose shards share ONE noise stream (the other
  shard's release then reveals the noise of the changed one) and whose shards release without
  the PMG threshold.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from privacy_audit import FAILURE, epsilon_lower_bound

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    MisraGries,
    ShardedMisraGries,
    pmg,
    pmg_release,
    sharded,
)
from beam_dpsketch.sketches.misra_gries.sharded import (
    design_d,
    shard_ids,
    split_by_shard,
    untrusted_sum,
)

SRC = NoiseSource.insecure_for_tests(2911)
EPS, DELTA, K, C, R = 1.0, 1e-6, 8, 1000, 1200
BUDGET = PrivacyBudget.approx(EPS, DELTA)
OFFSETS = (-1.5, -0.5, 0.5, 1.5, 2.5)
# Keys of each of two shards, in increasing order (the shard hash is public and fixed).
_IDS = shard_ids(np.arange(200), 2)
SHARD_KEYS = [np.flatnonzero(_IDS == j)[:K].tolist() for j in (0, 1)]
NEW_KEY = int(np.flatnonzero(_IDS == 0)[K + 5])


def stream(*rid):
    return SRC.stream(("test_dp_sharded_pmg", *rid))


def key_stream(extra: list[int], k: int) -> ShardedMisraGries:
    """Shard 0 and shard 1 hold K keys of count C each, shard 0 then gets ``extra``."""
    keys = [x for pair in zip(*SHARD_KEYS, strict=True) for x in pair] * C
    return ShardedMisraGries(k, 2).update(keys + extra)


def holder_stream(extra: list[int], k: int) -> ShardedMisraGries:
    """The same data cut by holder: holder 0 has shard 0's keys, holder 1 shard 1's."""
    out = ShardedMisraGries(k, 2, "holder")
    out.update_shard(0, SHARD_KEYS[0] * C + extra)
    out.update_shard(1, SHARD_KEYS[1] * C)
    return out


a, b = SHARD_KEYS[0][0], SHARD_KEYS[1][0]


def value(key: int) -> Callable[[dict], float]:
    return lambda rel: float(rel.get(key, -1e9))


CASES = {
    # One more element of a stored key: one counter of shard 0 up by one (k above distinct).
    "one-counter": (lambda f: (f([a], K + 2), f([], K + 2)), [value(a)]),
    # One more element of a new key in a full shard: every counter of shard 0 down by one.
    "all-counters": (
        lambda f: (f([NEW_KEY], K), f([], K)),
        [lambda rel: float(np.mean([v for x, v in rel.items() if x in SHARD_KEYS[0]] or [0]))],
    ),
    # A new key of count one: its presence is what the threshold hides.
    "new-key": (
        lambda f: (f([NEW_KEY], K + 2), f([], K + 2)),
        [lambda rel: 1.0 if NEW_KEY in rel else 0.0],
    ),
}


def difference(rel: dict) -> float:
    """The changed key minus the other shard's key in the same slot."""
    return float(rel.get(a, -1e9)) - float(rel.get(b, -1e9))


def design(sk, st) -> dict:
    return design_d(sk, BUDGET, st).as_dict()


def untrusted(sk, st) -> dict:
    return untrusted_sum(sk, BUDGET, st).as_dict()


def max_epsilon_evidence(case: str, release, build, tag: str) -> float:
    make, statistics = CASES[case]
    statistics = [*statistics, difference]
    d, d_prime = make(build)
    worst = 0.0
    samples = []
    for name, sk in (("D", d), ("D'", d_prime)):
        rels = [release(sk, stream(tag, case, name, r)) for r in range(R)]
        samples.append([np.asarray([f(rel) for rel in rels]) for f in statistics])
    events: list[tuple[int, Callable[[np.ndarray], np.ndarray]]] = []
    for i, f in enumerate(statistics):
        centre = 0.0 if f is difference or case == "new-key" else float(C)
        for x in OFFSETS:
            events.append((i, lambda v, x=x, c=centre: v >= c + x))
            events.append((i, lambda v, x=x, c=centre: v < c + x))
    # Every event, both directions, every case and mechanism of this file's suite.
    failure = FAILURE / (2 * len(events) * 2 * len(CASES) * 2)
    for i, event in events:
        ha, hb = int(event(samples[0][i]).sum()), int(event(samples[1][i]).sum())
        worst = max(worst, epsilon_lower_bound(ha, R, hb, R, DELTA, failure))
        worst = max(worst, epsilon_lower_bound(hb, R, ha, R, DELTA, failure))
    return worst


def test_removing_one_element_changes_exactly_one_shard_by_that_deletion():
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 30, size=120).tolist()
    full = ShardedMisraGries(6, 4).update(keys)
    ids = shard_ids(keys, 4)
    for i in range(len(keys)):
        rest = keys[:i] + keys[i + 1 :]
        smaller = ShardedMisraGries(6, 4).update(rest)
        changed = [j for j in range(4) if smaller.shard(j) != full.shard(j)]
        assert changed in ([], [int(ids[i])])
        # The changed shard is the sequential sketch of its sub-stream without element i.
        sub = [
            x
            for x, j in zip(rest, ids[:i].tolist() + ids[i + 1 :].tolist(), strict=True)
            if j == ids[i]
        ]
        assert smaller.shard(int(ids[i])) == MisraGries(6).update(sub)
    # The split keeps each shard's arrival order.
    for j, part in split_by_shard(keys, 4):
        assert part == [x for x, s in zip(keys, ids.tolist(), strict=True) if s == j]


def test_each_shard_draws_its_own_noise():
    sk = key_stream([], K + 2)
    rel = design_d(sk, BUDGET, stream("own"))
    for j in (0, 1):
        alone = pmg(sk.shard(j), BUDGET, sharded.shard_stream(stream("own"), j))
        assert set(alone.items) <= set(rel.items)
    assert len(rel) == 2 * K


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(
    "release,build",
    [(design, key_stream), (untrusted, holder_stream)],
    ids=["design-d", "untrusted"],
)
def test_sharded_release_is_private_on_worst_case_neighbours(case, release, build):
    assert max_epsilon_evidence(case, release, build, "ok") <= EPS


def _one_shared_stream(stream, shard):
    """Broken: every shard draws from the release's own stream, in the same positions."""
    return stream.substream("one stream for every shard")


@pytest.mark.parametrize(
    "release,build",
    [(design, key_stream), (untrusted, holder_stream)],
    ids=["design-d", "untrusted"],
)
def test_shards_sharing_one_noise_stream_are_flagged(monkeypatch, release, build):
    monkeypatch.setattr(sharded, "shard_stream", _one_shared_stream)
    assert max_epsilon_evidence("one-counter", release, build, "shared") > EPS


def test_shards_released_without_the_threshold_are_flagged(monkeypatch):
    real = pmg_release.pmg_parameters

    def no_threshold(*args, **kwargs):
        scale, _, name = real(*args, **kwargs)
        return scale, -(10**9), name

    monkeypatch.setattr(pmg_release, "pmg_parameters", no_threshold)
    assert max_epsilon_evidence("new-key", design, key_stream, "no-threshold") > EPS
