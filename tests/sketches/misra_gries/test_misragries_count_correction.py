"""Design B's count correction, its error bounds and the Misra-Gries sizing helpers.

``approx_pp`` adds a DP count ``N_hat/(k+1)`` back to Algorithm 3's values (Lebeda and Tětek,
Algorithm 3 of Section 6, summed over shards as in Section 7): without noise every count of an
exact sketch is the true count, and the stated per-key interval holds at its confidence.
"""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    DEFAULT_K,
    HeavyHitterEstimate,
    PostProcessedSum,
    approx_pp,
    apriori_error,
    k_for_memory,
    memory_bytes,
    suggest_k,
)
from beam_dpsketch.sketches.misra_gries.sizing import MAX_K


def _sharded(keys: list, k: int, shards: int, max_shards: int | None = None) -> PostProcessedSum:
    pp = PostProcessedSum(k, max_shards=max_shards or shards)
    for part in np.array_split(np.array(keys), shards):
        pp.add_sketch(MisraGries(k).update(part.tolist()))
    return pp


KEYS = ["a"] * 900 + ["b"] * 500 + ["c"] * 300 + ["d"] * 120 + ["e"] * 80
RNG_ORDER = np.random.default_rng(3).permutation(len(KEYS))
STREAM = [KEYS[i] for i in RNG_ORDER]


def test_zero_noise_counts_are_exact_when_the_sketches_are_exact():
    # 5 distinct keys <= k in every shard: each shard's sketch is exact, and so is the estimate.
    pp = _sharded(STREAM, 8, 3)
    assert pp.n == len(STREAM)
    rel = approx_pp(
        pp, PrivacyBudget.approx(1.0, 1e-6), NoiseSource.zero_noise_for_tests().stream("z")
    )
    assert rel.noisy_count == len(STREAM)
    assert rel.as_dict() == {x: float(c) for x, c in Counter(STREAM).items() if x in rel.as_dict()}
    assert {"a", "b", "c"} <= set(rel.keys())
    # Algorithm 3 alone (count_fraction=0) is N/(k+1) low on every key of a one-shard sketch.
    plain = approx_pp(
        PostProcessedSum.from_sketch(MisraGries(8).update(STREAM)),
        PrivacyBudget.approx(1.0, 1e-6),
        NoiseSource.zero_noise_for_tests().stream("z"),
        count_fraction=0,
    )
    assert plain.as_dict()["a"] == pytest.approx(900 - len(STREAM) / 9)


def test_corrected_estimate_over_counts_by_at_most_the_decrements():
    # More distinct keys than k: f(x) <= estimate <= f(x) + N/(k+1) before noise.
    keys = [f"k{i % 40}" for i in range(2000)] + ["a"] * 700
    pp = _sharded(keys, 6, 2)
    rel = approx_pp(
        pp, PrivacyBudget.approx(1.0, 1e-6), NoiseSource.zero_noise_for_tests().stream("z")
    )
    f = Counter(keys)
    assert "a" in rel.keys()
    for x, v in rel.items:
        assert f[x] <= v <= f[x] + len(keys) / 7 + 1e-9


def test_release_metadata_states_the_split_and_the_bound():
    pp = _sharded(STREAM, 8, 2)
    rel = approx_pp(
        pp, PrivacyBudget.approx(2.0, 1e-6), NoiseSource.insecure_for_tests(0).stream("m")
    )
    d = rel.details
    assert d["count_fraction"] == 0.05
    assert d["heavy_hitter_epsilon"] + d["count_epsilon"] == pytest.approx(2.0)
    assert d["count_epsilon"] == pytest.approx(0.1) and d["count_noise_scale"] == pytest.approx(10)
    assert d["epsilon_effective"] == pytest.approx(2.0)
    e = rel.error
    assert e is not None and e.confidence == 0.95
    # below = (max(N_hat, 0) + t_Z)/(k+1) >= the offset; above is noise only.
    assert e.below >= max(rel.noisy_count, 0) / 9 > e.above > 0
    for est in rel.estimates():
        key, count = est
        assert isinstance(est, HeavyHitterEstimate) and (key, count) == est
        assert est.lower == pytest.approx(max(0.0, count - e.below))
        assert est.upper == pytest.approx(count + e.above)
        assert est.error_bound == pytest.approx(max(count - est.lower, e.above))
        assert pickle.loads(pickle.dumps(est)).upper == est.upper


def test_error_interval_covers_the_truth_at_its_confidence():
    # Each released key's interval holds with probability >= 0.95: a binomial test over keys
    # and releases (one-sided, false failure < 1e-6).
    keys = [f"k{i % 30}" for i in range(3000)] + ["a"] * 600 + ["b"] * 400
    pp = _sharded(keys, 8, 3)
    f = Counter(keys)
    misses = total = 0
    for r in range(300):
        rel = approx_pp(
            pp, PrivacyBudget.approx(0.5, 1e-6), NoiseSource.insecure_for_tests(r).stream("cover")
        )
        for est in rel.estimates():
            total += 1
            misses += not est.lower <= f[est[0]] <= est.upper
    assert total >= 300
    assert stats.binom.sf(misses - 1, total, 0.05) > 1e-6, (misses, total)


def test_count_fraction_is_checked():
    pp = _sharded(STREAM, 8, 1)
    s = NoiseSource.insecure_for_tests(0).stream("c")
    # beam_dpsketch.checks: a bound violated is a ValueError, a wrong type a TypeError.
    bad_values = [(-0.1, ValueError), (1.0, ValueError), (1.5, ValueError)]
    bad_types = [(True, TypeError), ("0.1", TypeError)]
    for bad, error in bad_values + bad_types:
        with pytest.raises(error, match="count_fraction"):
            approx_pp(pp, PrivacyBudget.approx(1.0, 1e-6), s, count_fraction=bad)
    with pytest.raises(ValueError, match="count_fraction"):
        approx_pp(
            pp, PrivacyBudget.approx(1e-5, 1e-6), s, count_fraction=0.05
        )  # a slice below 1e-6


def test_post_processed_sum_keeps_the_exact_length():
    a = _sharded(STREAM[:1000], 8, 2, max_shards=4)
    b = _sharded(STREAM[1000:], 8, 2, max_shards=4)
    merged = PostProcessedSum(8, max_shards=4).merge(a).merge(b)
    assert merged.n == len(STREAM)
    assert PostProcessedSum.from_bytes(merged.to_bytes()) == merged
    assert merged.copy().n == merged.n


# --------------------------------------------------------------------------------------------
# Sizing
# --------------------------------------------------------------------------------------------


def test_suggest_k_is_the_smallest_k_meeting_the_error():
    for n, e in [(3_000_000, 750.0), (10_000_000, 1000.0), (100, 1.0), (7, 100.0), (999, 3.0)]:
        k = suggest_k(max_error=e, n=n)
        assert apriori_error(k, n) <= e
        assert k == 1 or apriori_error(k - 1, n) > e
    assert suggest_k(max_error=732.2, n=3_000_000) == 4097  # 3e6/4097 > 732.2 >= 3e6/4098
    assert MisraGries.from_error(100.0, 1_000_000).k == suggest_k(max_error=100.0, n=1_000_000)
    with pytest.raises(ValueError, match="max_error"):
        suggest_k(max_error=0, n=10)
    with pytest.raises(ValueError, match="max_error"):
        suggest_k(max_error=1e-9, n=10**9)  # above MAX_K
    with pytest.raises(ValueError, match="n must"):
        suggest_k(max_error=1.0, n=0)


def test_memory_sizing_round_trips():
    assert memory_bytes(DEFAULT_K, max_shards=256) == 256 * DEFAULT_K * 200
    for mem in (10**6, 10**8, 123_456_789):
        k = k_for_memory(mem, max_shards=16)
        assert memory_bytes(k, max_shards=16) <= mem < memory_bytes(k + 1, max_shards=16)
    assert k_for_memory(10**15) == MAX_K
    assert MisraGries.from_memory(10**6).k == k_for_memory(10**6)
    with pytest.raises(ValueError, match="memory"):
        k_for_memory(100, max_shards=4)
