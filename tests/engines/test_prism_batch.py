"""Every DP transform in batch on Prism, against the FnApiRunner under the same seeded noise.

Each test builds the same pipeline twice, each time with a fresh transform over a fresh
``NoiseSource.insecure_for_tests(seed)`` (a fresh seeded source gives the same application key,
so both runs draw from the same keyed noise streams), runs it on the FnApiRunner and on Prism
(``prism_args`` of ``conftest.py``), and compares the outputs as multisets. The tests in
``tests/transforms`` show that the FnApiRunner's output equals the single-machine core release,
so equality here carries that over to Prism: same exact aggregate, noise added once, from the
same release ids.

Equality is asserted where the release does not depend on Beam's bundling: linear sketches,
counts, the stateful (ordered) mechanisms, and Misra-Gries Design B fed a single batch (one
segment). Design B over many bundles post-processes one segment per Beam accumulator, so its
noise-free part depends on how the runner bundles; there each runner's output is checked against
the mechanism's stated error bound instead (``test_design_b_many_bundles_within_the_bound``).
"""

from __future__ import annotations

import math
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.transforms.window import TimestampedValue
from matrix import (
    assert_equal_and_nonempty,
    frequency_chunks,
    on_both,
    spread_chunks,
    zipf_keys,
)

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPCount,
    DPFrequencies,
    DPHeavyHitters,
    DPIntermittentQueries,
    DPQuantiles,
    DPSlidingWindowFrequencies,
    QuerySchedule,
)
from beam_dpsketch.transforms.heavy_hitters import DesignB
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout

APPROX = PrivacyBudget.approx(1.0, 1e-6)


# ------------------------------------------------------------------------------------------------
# Misra-Gries heavy hitters
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["design-b", "select-then-count", "sequential"])
def test_heavy_hitters_single_batch_equal_fnapi(mechanism, tmp_path, prism_args):
    keys = zipf_keys(6000, 3, items=300, s=1.3)

    def build(p):
        t = DPHeavyHitters(
            30,
            APPROX,
            top=10,
            mechanism=mechanism,
            noise_source=NoiseSource.insecure_for_tests(4),
            label="hh",
        )
        return p | beam.Create([keys], reshuffle=False) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert_equal_and_nonempty(ref, got)
    assert len(got) >= 3  # the heavy keys of a Zipf(1.3) stream are released


def test_design_b_many_bundles_within_the_bound(tmp_path, prism_args):
    # 24 chunks spread by a Reshuffle: each runner picks its own bundles, hence its own segments.
    seeds, k, shards = list(range(6)), 100, 64
    keys = np.concatenate([c for s in seeds for c in spread_chunks(s)])
    truth, n = Counter(keys.tolist()), len(keys)

    def build(p):
        t = DPHeavyHitters(
            k,
            APPROX,
            top=10,
            mechanism=DesignB(k, max_shards=shards),
            noise_source=NoiseSource.insecure_for_tests(5),
            label="hh-spread",
        )
        return p | beam.Create(seeds) | beam.Reshuffle() | beam.FlatMap(spread_chunks) | t

    for out in on_both(build, tmp_path, prism_args):
        assert len(out) == 10
        # Design B with the count correction: f(x) - noise <= released <= f(x) + n/(k+1) + noise,
        # whatever the segmentation; noise bounds as in tests/transforms (union bound over the
        # 11 draws of scale 2/eps_hh and (1/eps_c)/(k+1): failure probability <= 1.1e-8).
        noise = (2 / 0.95 + 1 / 0.05 / (k + 1)) * math.log(1e9)
        for key, count, *_ in out:
            assert truth[key] - noise <= count <= truth[key] + n / (k + 1) + noise
        assert {key for key, _ in truth.most_common(5)} <= {row[0] for row in out}


# ------------------------------------------------------------------------------------------------
# Linear sketches and counts
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sketch", "budget"),
    [("count-min", PrivacyBudget.pure(1.0)), ("count-sketch", PrivacyBudget.zcdp(0.5))],
)
def test_frequencies_equal_fnapi(sketch, budget, tmp_path, prism_args):
    def build(p):
        t = DPFrequencies(
            256,
            4,
            budget,
            sketch=sketch,
            seed=7,
            noise_source=NoiseSource.insecure_for_tests(3),
            label="f",
        )
        return p | beam.Create([1, 2, 3]) | beam.FlatMap(frequency_chunks) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(ref) == len(got) == 1
    assert got[0] == ref[0]
    np.testing.assert_array_equal(np.asarray(got[0].table), np.asarray(ref[0].table))


def test_quantiles_equal_fnapi(tmp_path, prism_args):
    values = np.clip(np.round(np.random.default_rng(8).normal(100, 30, 50_000)), 0, 255)
    chunks = np.array_split(values.astype(np.int64), 5)

    def build(p):
        t = DPQuantiles(
            [0.1, 0.5, 0.9],
            0,
            255,
            PrivacyBudget.zcdp(0.5),
            tree=QuantileTree(width=64, depth=3),
            noise_source=NoiseSource.insecure_for_tests(6),
            label="q",
        )
        return p | beam.Create(chunks) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(got) == 3
    assert_equal_and_nonempty(ref, got)


@pytest.mark.parametrize("user_level", [False, True], ids=["element", "user"])
def test_count_equal_fnapi(user_level, tmp_path, prism_args):
    # User level: 5 users with 1, 3, 5, 7, 9 events, bounded to 2 contributions each.
    events = [(u, j) for u in range(5) for j in range(2 * u + 1)]
    kwargs = (
        {"privacy_unit": PrivacyUnit(id=lambda e: e[0], max_contributions=2)} if user_level else {}
    )

    def build(p):
        t = DPCount(
            PrivacyBudget.pure(1.0),
            noise_source=NoiseSource.insecure_for_tests(11),
            label="count",
            **kwargs,
        )
        return p | beam.Create(events) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(got) == 1
    assert_equal_and_nonempty(ref, got)


# ------------------------------------------------------------------------------------------------
# Stateful, ordered mechanisms
# ------------------------------------------------------------------------------------------------


def continual_elements(n: int, sizes: list[int]) -> list:
    """``(position, batch)`` runs of a Zipf stream, in reverse order (later runs wait in state)."""
    keys = (np.random.default_rng(1).zipf(1.3, n) % 200).astype(np.int64)
    out, pos, i = [], 0, 0
    while pos < n:
        run_ = keys[pos : pos + sizes[i % len(sizes)]]
        out.append((pos, int(run_[0]) if len(run_) == 1 else run_))
        pos, i = pos + len(run_), i + 1
    return out[::-1]


@pytest.mark.parametrize(
    ("algorithm", "sketch"), [("lazy", "count-min"), ("punctual", "count-sketch")]
)
def test_continual_equal_fnapi(algorithm, sketch, tmp_path, prism_args):
    elements = continual_elements(1200, [173, 1, 40, 97, 1, 11])

    def build(p):
        t = ContinualDPSketch(
            32,
            3,
            1200,
            PrivacyBudget.approx(0.5, 1e-6),
            query_keys=[0, 1, 2, 7, 123],
            sketch=sketch,
            algorithm=algorithm,
            release_every=150,
            noise_source=NoiseSource.insecure_for_tests(20261122),
            label="cont",
            with_metadata=True,
            with_table=True,
        )
        return p | beam.Create(elements) | t

    ref, got = (sorted(out, key=lambda r: r.t) for out in on_both(build, tmp_path, prism_args))
    assert [r.t for r in got] == [r.t for r in ref] == list(range(150, 1201, 150))
    for a, b in zip(got, ref, strict=True):
        assert a.answers == b.answers
        np.testing.assert_array_equal(a.noisy_table, b.noisy_table)


def test_sliding_window_frequencies_equal_fnapi(tmp_path, prism_args):
    keys = (np.random.default_rng(1).zipf(1.6, 400) % 30).tolist()

    def build(p):
        t = DPSlidingWindowFrequencies(
            60,
            64,
            3,
            APPROX,
            release_every=7,
            query_keys=[0, 1, 2, 7, 29],
            noise_source=NoiseSource.insecure_for_tests(5),
            label="sw",
            seed=5,
            layout=SlidingLayout(block=10, alpha="1/2"),
        )
        return p | beam.Create(list(enumerate(keys, start=1))) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(got) == 57 * 5
    assert_equal_and_nonempty(ref, got)


INTERMITTENT = QuerySchedule(
    [(1000, [1, 2, 3]), (2500, [1, 7, 7, 2]), (2600, [5]), (4000, [2, 99, (1, "t")]), (5500, [1])]
)


def intermittent_stream() -> tuple[np.ndarray, np.ndarray]:
    pos = np.arange(1, 6001, dtype=np.int64)
    return pos, np.random.default_rng(11).zipf(1.4, 6000).astype(np.int64) % 300


def intermittent_chunks(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    pos, keys = intermittent_stream()
    return list(zip(np.array_split(pos, 12), np.array_split(keys, 12), strict=True))[seed::2]


def test_intermittent_schedule_equal_fnapi(tmp_path, prism_args):
    def build(p):
        t = DPIntermittentQueries(
            64,
            5,
            PrivacyBudget.pure(1.0),
            queries=INTERMITTENT,
            clock="positions",
            noise_source=NoiseSource.insecure_for_tests(3),
            label="iq",
        )
        return p | beam.Create([0, 1]) | beam.FlatMap(intermittent_chunks) | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(got) == INTERMITTENT.num_queries
    assert_equal_and_nonempty(ref, got)


def test_intermittent_query_pcollection_equal_fnapi(tmp_path, prism_args):
    # Query batches as a PCollection: event-time timers per batch; data stamped with its position.
    pos, keys = intermittent_stream()
    records = list(zip(pos.tolist(), keys.tolist(), strict=True))

    def build(p):
        queries = p | "Queries" >> beam.Create([(t, list(q)) for t, q in INTERMITTENT.batches])
        data = (
            p
            | "Data" >> beam.Create(records)
            | "Stamp" >> beam.Map(lambda r: TimestampedValue(r[1], r[0]))
        )
        t = DPIntermittentQueries(
            64,
            5,
            PrivacyBudget.pure(1.0),
            queries=queries,
            clock="positions",
            noise_source=NoiseSource.insecure_for_tests(6),
            label="ev",
        )
        return data | t

    ref, got = on_both(build, tmp_path, prism_args)
    assert len(got) == INTERMITTENT.num_queries
    assert_equal_and_nonempty(ref, got)
