"""Continual heavy hitters: public candidate domain and hierarchical prefix LazySketch (docs/algorithms.md#lazy-e23)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.continual.binary_mechanism import gaussbm_sigma
from beam_dpsketch.sketches.continual.heavy_hitters import (
    CandidateHeavyHitters,
    HierarchicalLazySketch,
)
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch

SRC = NoiseSource.insecure_for_tests(21)
ZERO = NoiseSource.zero_noise_for_tests()
HEAVY = np.array([0xC0A80001, 0x0A000001, 0x08080808, 0xFFFFFFFF], dtype=np.int64)


def _stream(n, seed=0):
    """Arrivals: 40% split over the four HEAVY keys, the rest uniform 32-bit keys."""
    rng = np.random.default_rng(seed)
    light = rng.integers(0, 2**32, n)
    return np.where(rng.random(n) < 0.4, HEAVY[rng.integers(0, 4, n)], light).astype(np.int64)


def _hier(horizon=20_000, width=64, depth=3, kind="cms", **kw):
    kw.setdefault("noise_source", SRC)
    kw.setdefault("release_prefix", "hh")
    return HierarchicalLazySketch(
        32, 8, width, depth, horizon, PrivacyBudget.approx(0.5, 1e-3), kind=kind, **kw
    )


# ------------------------------------------------------------------ calibration


@pytest.mark.parametrize("kind,per_row", [("cms", 2), ("cs", 4)])
def test_hierarchy_is_one_n_counters_instance(kind, per_row):
    h = _hier(kind=kind)
    assert len(h.levels) == 4 and h.prefix_bits == (8, 16, 24, 32)
    # One replaced arrival changes <= 2 (CS: same cell +-2, so 4) cells per row per level.
    assert h.m == per_row * 3 * 4
    t_loc = -(-20_000 // 64)
    assert h.sigma == pytest.approx(gaussbm_sigma(t_loc, per_row * 3 * 4, 0.5, 1e-3))
    # Twice the levels' sigma of a single LazySketch: sqrt(4) more sensitivity.
    single = LazySketch(
        64, 3, 20_000, PrivacyBudget.approx(0.5, 1e-3), kind=kind, release_prefix="x"
    )
    assert h.sigma == pytest.approx(2 * single.sigma)
    assert all(lv.sigma == h.sigma for lv in h.levels)
    assert len({lv.seed for lv in h.levels}) == 4


# ------------------------------------------------------------------ noise-free oracles


def test_noise_free_levels_track_exact_prefix_counts():
    keys = _stream(5_000, seed=1)
    h = _hier(horizon=5_000, noise_source=ZERO)
    h.update_batch(keys)
    for level, bits in enumerate(h.prefix_bits):
        prefixes = keys >> (32 - bits)
        exact = CountMinSketch(64, 3, level).update(prefixes)
        probe = np.unique(prefixes)[:200]
        diff = h.estimate(probe, level) - exact.estimate(probe)
        assert diff.min() >= -63 and diff.max() <= 0


def test_noise_free_recall_is_deterministic():
    # With zero noise every prefix estimate is >= its exact count - (w-1) (CMS, lazy delay), so
    # every key with f >= threshold + w - 1 is reported, whatever the collisions.
    keys = _stream(8_000, seed=2)
    h = _hier(horizon=8_000, noise_source=ZERO)
    h.update_batch(keys)
    threshold = 500.0
    counts = {int(k): int((keys == k).sum()) for k in HEAVY}
    expected = {k for k, f in counts.items() if f >= threshold + 63}
    assert expected == set(HEAVY.tolist())
    reported = dict(h.heavy_hitters(threshold=threshold))
    assert expected <= set(reported)
    for key in expected:
        assert counts[key] - 63 <= reported[key]


# ------------------------------------------------------------------ with noise


def test_noisy_recall_and_ranking():
    keys = _stream(100_000, seed=3)
    h = _hier(horizon=100_000)
    h.update_batch(keys)
    # Every counter's noise stays below noise_bound(beta) with probability >= 1 - beta/2 over
    # the whole run; beta = 1e-6 makes a missed heavy key a < 1e-6 event (f - 63 - B > thr).
    bound = h.noise_bound(1e-6)
    threshold = 0.05 * h.t
    counts = {int(k): int((keys == k).sum()) for k in HEAVY}
    assert min(counts.values()) - 63 - bound > threshold
    result = h.heavy_hitters(phi=0.05)
    assert set(HEAVY.tolist()) <= {k for k, _ in result}
    values = [v for _, v in result]
    assert values == sorted(values, reverse=True)
    # Light keys have frequency ~0; a reported light key needs a collision in every row at every
    # level or noise above the bound.
    light = [k for k, _ in result if k not in counts]
    assert len(light) <= 2


def test_max_candidates_caps_expansion():
    keys = _stream(20_000, seed=4)
    h = _hier()
    h.update_batch(keys)
    capped = h.heavy_hitters(threshold=-1e9, max_candidates=3)
    assert len(capped) == 3
    # A threshold nothing reaches returns nothing.
    assert h.heavy_hitters(threshold=1e9) == []


def test_batch_equals_sequential_and_round_trip():
    keys = _stream(300, seed=5)
    a = _hier(horizon=300, width=16)
    b = _hier(horizon=300, width=16)
    for key in keys.tolist():
        a.update(key)
    b.update_batch(keys[:100])
    data = b.to_bytes()
    c = HierarchicalLazySketch.from_bytes(data, SRC)
    assert c.to_bytes() == data
    b.update_batch(keys[100:])
    c.update_batch(keys[100:])
    for x, y, z in zip(a.levels, b.levels, c.levels, strict=True):
        assert np.array_equal(x.noisy_table(), y.noisy_table())
        assert np.array_equal(x.noisy_table(), z.noisy_table())
    assert a.heavy_hitters(phi=0.1) == c.heavy_hitters(phi=0.1)
    with pytest.raises(ValueError, match="noise_source"):
        HierarchicalLazySketch.from_bytes(data, NoiseSource.insecure_for_tests(1))
    with pytest.raises(SketchFormatError):
        HierarchicalLazySketch.from_bytes(data[:-1], SRC)


@pytest.mark.parametrize(
    "keys,exc,match",
    [
        ([-1], ValueError, r"\[0, 2\*\*32\)"),
        ([2**32], ValueError, r"\[0, 2\*\*32\)"),
        (["a"], TypeError, "str"),
        ([1.5], TypeError, "float"),
    ],
)
def test_key_validation(keys, exc, match):
    h = _hier()
    with pytest.raises(exc, match=match):
        h.update_batch(keys)
    assert h.t == 0


def test_parameter_errors():
    with pytest.raises(ValueError, match="bits_per_level"):
        HierarchicalLazySketch(
            32, 24, 64, 3, 100, PrivacyBudget.approx(0.5, 1e-3), release_prefix="x"
        )
    with pytest.raises(ValueError, match="domain_bits"):
        HierarchicalLazySketch(
            63, 8, 64, 3, 100, PrivacyBudget.approx(0.5, 1e-3), release_prefix="x"
        )
    h = _hier()
    with pytest.raises(ValueError, match="exactly one"):
        h.heavy_hitters()
    with pytest.raises(ValueError, match="exactly one"):
        h.heavy_hitters(phi=0.1, threshold=3.0)
    with pytest.raises(ValueError, match="phi"):
        h.heavy_hitters(phi=1.5)


# ------------------------------------------------------------------ public candidate domain


@pytest.mark.parametrize("cls,kind", [(LazySketch, "cms"), (PunctualSketch, "cs")])
def test_candidate_domain_is_post_processing(cls, kind):
    rng = np.random.default_rng(6)
    words = [f"item{i}" for i in range(40)]
    stream = [words[i] for i in (rng.zipf(1.5, 2_000) % 40)]
    sketch = cls(
        32,
        3,
        2_000,
        PrivacyBudget.approx(0.5, 1e-3),
        kind=kind,
        release_prefix="cand",
        noise_source=SRC,
    )
    sketch.update_batch(stream)
    hh = CandidateHeavyHitters(sketch, words)
    est = sketch.estimate(words)
    assert np.array_equal(hh.estimates(), est)
    thr = 0.05 * sketch.t
    result = hh.heavy_hitters(phi=0.05)
    assert {k for k, _ in result} == {w for w, e in zip(words, est, strict=True) if e >= thr}
    assert [v for _, v in result] == sorted((v for _, v in result), reverse=True)
    assert hh.heavy_hitters(threshold=thr, top=2) == result[:2]
    # The true top item (frequency ~ 1/zeta(1.5) of the stream) is far above noise and threshold.
    assert result[0][0] == "item1"
    assert math.isfinite(result[0][1])


def test_candidate_domain_errors():
    sketch = LazySketch(
        8, 3, 100, PrivacyBudget.approx(0.5, 1e-3), release_prefix="c", noise_source=SRC
    )
    with pytest.raises(TypeError, match="sketch"):
        CandidateHeavyHitters(CountMinSketch(8, 3), [1])
    with pytest.raises(ValueError, match="empty"):
        CandidateHeavyHitters(sketch, [])
    with pytest.raises(TypeError, match="NoneType"):
        CandidateHeavyHitters(sketch, [1, None])
