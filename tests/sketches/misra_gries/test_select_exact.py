"""The select-then-count selection on exact sketches: key coverage, branch choice, state.

When every Misra-Gries segment held all of its distinct keys, the selection keeps keys by
private partition selection on the exact counts (threshold about ``ln(eps/(2 delta))/eps``)
instead of the Design B threshold plus the sketch's ``N/(k+1)`` undercount; these tests check
that it does so on a seeded long-tail stream, that an inexact input goes to Design B, and that
the exactness state survives merges and serialization.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource, bernoulli_dyadic
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum, approx_pp
from beam_dpsketch.sketches.misra_gries.select_count import (
    keep_numerators,
    select_candidates,
    selection_calibration,
)
from reproduction.datasets import zipf_stream

EPS, DELTA = 0.5, 1e-6


def summed(segments, k: int, max_shards: int | None = None) -> PostProcessedSum:
    pp = PostProcessedSum(k, max_shards=max_shards or max(1, len(segments)))
    for seg in segments:
        sketch = MisraGries(k)
        sketch.update(np.asarray(seg, dtype=np.int64))
        pp.add_sketch(sketch)
    return pp


@pytest.fixture(scope="module")
def long_tail():
    keys = zipf_stream(200_000, 1.1, 20_000, 7)
    items, counts = np.unique(keys, return_counts=True)
    return keys, dict(zip(items.tolist(), counts.tolist(), strict=True))


def test_exact_sketches_release_every_key_the_partition_selection_keeps(long_tail):
    keys, truth = long_tail
    k = 1 << 15
    pp = summed(np.array_split(keys, 4), k)
    assert pp.exact
    cal = selection_calibration(EPS, DELTA, k)
    sure = {x for x, c in truth.items() if c >= cal.exact_certain}
    likely = [x for x, c in truth.items() if cal.exact_median <= c < cal.exact_certain]
    for seed in range(5):
        stream = NoiseSource.insecure_for_tests(seed).stream(("select-exact",))
        release = select_candidates(pp, PrivacyBudget.approx(EPS, DELTA), stream, k=k)
        assert release.mechanism == "EXACT-SELECTION"
        chosen = set(release.keys())
        # Certain from a count on, never a key that is absent.
        assert sure <= chosen
        assert chosen <= set(truth)
        # Keys at or above the median count are kept at least half the time (seeded; a 4-sigma
        # margin below one half).
        n = len(likely)
        kept = sum(x in chosen for x in likely)
        assert kept >= n / 2 - 4 * np.sqrt(n / 4), (kept, n)
        # Design B alone keeps only keys above rows/(k+1) plus its threshold.
        design_b = approx_pp(pp, PrivacyBudget.approx(EPS, DELTA), stream, count_fraction=0.0).top(
            k
        )
        assert len(chosen) >= 2 * len(design_b.keys())


def test_selection_does_not_depend_on_segment_order(long_tail):
    keys, _ = long_tail
    parts = np.array_split(keys, 3)
    a = summed(parts, 1 << 15)
    b = summed(parts[::-1], 1 << 15)
    s = NoiseSource.insecure_for_tests(3)
    ra = select_candidates(a, PrivacyBudget.approx(EPS, DELTA), s.stream("x"), k=1 << 15)
    rb = select_candidates(b, PrivacyBudget.approx(EPS, DELTA), s.stream("x"), k=1 << 15)
    assert ra.keys() == rb.keys()


def test_inexact_sketches_select_with_design_b(long_tail):
    keys, _ = long_tail
    pp = summed([keys], 256)  # far more distinct keys than counters: the sketch decrements
    assert not pp.exact and pp.widest == 257 and pp.exact_counts() is None
    stream = NoiseSource.insecure_for_tests(0).stream("y")
    release = select_candidates(pp, PrivacyBudget.approx(EPS, DELTA), stream, k=256)
    assert release.mechanism == "APPROX_PP"
    assert 0 < len(release.keys()) <= 256


def test_the_exactness_test_keeps_a_quarter_of_k_as_margin_for_a_small_share_of_epsilon():
    k = 1 << 17
    for eps in (0.05, 0.5, 2.0):
        cal = selection_calibration(eps, DELTA, k)
        # Inputs with up to three quarters of k distinct keys per segment pass almost surely,
        # for about ln(1/delta)/(k/4) of epsilon: 1.2% of 0.05, 0.03% of 2.
        assert k - cal.test_cut <= 0.25 * k + 2
        assert cal.test_epsilon <= 0.0007
    # A small k cannot leave that margin at a small epsilon: the share is capped and the test
    # then (safely) sends every input to Design B.
    small = selection_calibration(0.05, DELTA, 4096)
    assert small.test_epsilon <= 0.05 * 0.05 and small.test_cut < 0


def test_exactness_survives_merge_copy_and_bytes():
    exact = summed([[1, 1, 2], [2, 3]], 4, 4)
    assert exact.exact and exact.widest == 2
    assert exact.exact_counts() == {1: 2, 2: 2, 3: 1}
    back = PostProcessedSum.from_bytes(exact.to_bytes())
    assert back == exact and back.exact_counts() == {1: 2, 2: 2, 3: 1}
    assert exact.copy() == exact
    inexact = summed([[5, 6, 7, 8, 9, 5]], 4, 4)
    assert not inexact.exact and inexact.widest == 5
    merged = PostProcessedSum(4, max_shards=4).merge(exact).merge(inexact)
    assert not merged.exact and merged.widest == 5 and merged.exact_counts() is None
    assert PostProcessedSum.from_bytes(merged.to_bytes()) == merged
    both = PostProcessedSum(4, max_shards=4).merge(exact).merge(summed([[4, 4]], 4, 4))
    assert both.exact_counts() == {1: 2, 2: 2, 3: 1, 4: 2}


def test_bytes_without_exactness_fields_read_as_inexact():
    pp = summed([[1, 1, 2]], 4)
    kind, params, arrays = serialization.loads(pp.to_bytes(), expected_kind="PostProcessedSum")
    old = {key: v for key, v in params.items() if key not in ("widest", "exact")}
    arrays = {n: a for n, a in arrays.items() if not n.startswith("exact")}
    back = PostProcessedSum.from_bytes(serialization.dumps(kind, old, arrays))
    assert not back.exact and back.widest == 5


def test_malformed_exactness_fields_are_refused():
    pp = summed([[1, 1, 2]], 4)
    kind, params, arrays = serialization.loads(pp.to_bytes(), expected_kind="PostProcessedSum")
    for bad in ({"widest": 9}, {"widest": 5, "exact": 1}, {"exact": 2}, {"widest": -1}):
        with pytest.raises(serialization.SketchFormatError):
            PostProcessedSum.from_bytes(serialization.dumps(kind, {**params, **bad}, arrays))


def test_keep_probabilities_rise_to_one():
    table = keep_numerators(EPS, DELTA)
    cal = selection_calibration(EPS / 0.99, DELTA / 0.95, 4096)
    assert table[-1] == 1 << 64 and list(table) == sorted(table)
    # Half of the keys of count about ln(eps / (2 delta)) / eps are kept.
    median = next(n for n, x in enumerate(table) if 2 * x >= 1 << 64)
    assert abs(median - np.log(EPS / (2 * DELTA)) / EPS) <= 3
    assert cal.exact_median <= median + 1


def test_bernoulli_dyadic_rates_and_test_modes():
    stream = NoiseSource.insecure_for_tests(0).stream("b")
    draws = bernoulli_dyadic(stream, [1 << 62] * 20_000)
    # p = 1/4: within 5 standard deviations.
    assert abs(draws.mean() - 0.25) <= 5 * np.sqrt(0.25 * 0.75 / 20_000)
    edge = bernoulli_dyadic(stream, [0, 1 << 64] * 100)
    assert not edge[::2].any() and edge[1::2].all()
    zero = NoiseSource.zero_noise_for_tests().stream("b")
    assert bernoulli_dyadic(zero, [(1 << 63) - 1, 1 << 63]).tolist() == [False, True]
    with pytest.raises(ValueError, match="numerators"):
        bernoulli_dyadic(stream, [(1 << 64) + 1])
