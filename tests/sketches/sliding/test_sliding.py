"""DPSW-Sketch (beam_dpsketch.sketches.sliding.dpsw) against the oracles of [WWC24, Section 4.2] and docs/algorithms.md#sliding-windows.

Statistical tests are seeded (insecure test noise keys) and each has a false-failure
probability <= 1e-6, stated next to its bound.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget, approx_to_zcdp
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.baselines import ExactSlidingWindow
from beam_dpsketch.sketches.sliding.dpsw import (
    DPSWSketch,
    checkpoint_list,
    level_budgets,
    position_costs,
)

ZERO = NoiseSource.zero_noise_for_tests


def zc(rho: float = 1.0) -> PrivacyBudget:
    return PrivacyBudget.zcdp(rho)


def collision_free_seed(m: int, width: int, depth: int) -> int:
    """A hash seed under which keys 0..m-1 occupy distinct cells in every row (test-only)."""
    keys = np.arange(m, dtype=np.int64)
    for seed in range(10_000):
        b = row_buckets(*hash_keys(keys, seed), depth, width)
        if all(len(np.unique(row)) == m for row in b):
            return seed
    raise AssertionError("no collision-free seed")


def paper_loop(b: int, alpha: Fraction) -> list[int]:
    """The pruning loop of Algorithm 2 with the dynamic bound (docs/algorithms.md#dpsw-e8), exact arithmetic (oracle).

    ``I[k] >= (1 - alpha) I[j]`` is compared on integers: ``I[k] den >= (den - num) I[j]``.
    """
    num, den = alpha.numerator, alpha.denominator
    out: list[int] = []
    for i in range(b, 0, -1):
        out.append(i)
        j = 0
        while j <= len(out) - 3:
            # I is decreasing, so the indices k > j passing the test form a run after j.
            k = j
            while k + 1 < len(out) and out[k + 1] * den >= (den - num) * out[j]:
                k += 1
            if k > j + 1:
                del out[j + 1 : k]
            j += 1
    return out


# ------------------------------------------------------------------------------- T1


RHO_TABLE = [
    (1.0, 1e-6, 0.01746890476912338),
    (0.5, 1e-6, 0.004443844159097062),
    (2.0, 1e-5, 0.08004537534668205),
    (1.0, 1e-10, 0.010627808461541018),
    (0.1, 1e-10, 0.00010833849386085304),
    (0.1, 1e7**-1.5, 0.00010319015382409328),
    (1.0, 1e7**-1.5, 0.010131872189633667),
    (2.0, 1e7**-1.5, 0.039734241631730415),
]


@pytest.mark.parametrize(("eps", "delta", "rho"), RHO_TABLE)
def test_t1_rho_from_eps_delta(eps, delta, rho):
    sk = DPSWSketch(10, PrivacyBudget.approx(eps, delta), width=4, depth=1, block=2, alpha="1/2")
    assert sk.rho == pytest.approx(rho, rel=1e-12)
    big_l = math.log(1 / delta)
    assert sk.rho + 2 * math.sqrt(sk.rho * big_l) == pytest.approx(eps, rel=1e-12)
    naive = eps + 2 * big_l - 2 * math.sqrt(eps * big_l + big_l**2)
    assert sk.rho == pytest.approx(naive, rel=1e-9)
    assert approx_to_zcdp(eps, delta) == sk.rho


# ------------------------------------------------------------------------------- T2


@pytest.mark.parametrize(
    ("b", "alpha", "expected"),
    [
        (10, "1/2", [10, 5, 3, 2, 1]),
        (10, "3/4", [10, 3, 1]),
        (100, "1/2", [100, 50, 25, 13, 7, 4, 2, 1]),
        (100, "3/4", [100, 25, 7, 2, 1]),
        (1000, "9/10", [1000, 100, 10, 1]),
        (1000, "99/100", [1000, 10, 1]),
        (1000, "1/2", [1000, 500, 250, 125, 63, 32, 16, 8, 4, 2, 1]),
        (100000, "3/4", [100000, 25000, 6250, 1563, 391, 98, 25, 7, 2, 1]),
        (100000, "99/100", [100000, 1000, 10, 1]),
        (100000, "999/1000", [100000, 100, 1]),
    ],
)
def test_t2_checkpoint_vectors(b, alpha, expected):
    assert list(checkpoint_list(b, alpha)) == expected


def test_t2_lengths_and_float_guard():
    alphas = [0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.997, 0.999]
    assert [len(checkpoint_list(100000, a)) for a in alphas] == [102, 41, 18, 10, 6, 4, 3, 3]
    assert [len(checkpoint_list(1000, a)) for a in alphas] == [59, 25, 11, 6, 4, 3, 3, 2]
    # docs/algorithms.md#dpsw-e9: 1 - 0.99 in binary floating point would give [1000, 11, 1].
    assert checkpoint_list(1000, 0.99) == (1000, 10, 1)
    assert checkpoint_list(100000, 0.99) == (100000, 1000, 10, 1)


def test_t2_closed_form_equals_paper_loop_and_properties():
    for k in range(1, 20):
        alpha = Fraction(k, 20)
        for b in range(1, 301 if k >= 5 else 121):
            cps = list(checkpoint_list(b, alpha))
            assert cps == paper_loop(b, alpha), (b, alpha)
            assert cps[0] == b and cps[-1] == 1
            assert all(x > y for x, y in zip(cps, cps[1:], strict=False))
            for i in range(1, len(cps)):
                assert cps[i] >= (1 - alpha) * cps[i - 1] or cps[i] == cps[i - 1] - 1
                assert cps[i - 1] - cps[i] <= max(1, math.floor(alpha * cps[i - 1]))
            for i in range(2, len(cps)):
                assert cps[i] < (1 - alpha) * cps[i - 2]
            assert len(cps) <= (math.log(b) + 1) / alpha + 2


# ------------------------------------------------------------------------------- T3


def test_t3_budgets():
    rho = 0.37
    for alpha in (Fraction(1, 2), Fraction(3, 4), Fraction(1, 10), Fraction(99, 100)):
        for b in (10, 100, 1000):
            cps = checkpoint_list(b, alpha)
            lv = level_budgets(rho, cps, alpha=alpha)
            total = lv[0] + 2 * sum(lv[1:])
            exact = rho * (1 - (1 - alpha) ** 2 * alpha ** (len(cps) - 1))
            assert total == pytest.approx(float(exact), rel=1e-12) and total < rho
            cq = level_budgets(rho, cps, split="code_q")
            assert cq[0] + 2 * sum(cq[1:]) == pytest.approx(rho, rel=1e-12)
            assert cq[0] + 2 * sum(cq[1:]) <= rho
            tight = level_budgets(rho, cps, split="tight", alpha=alpha)
            assert position_costs(tight, cps).max() <= rho * (1 + 1e-12)
            assert position_costs(tight, cps).max() == pytest.approx(rho, rel=1e-12)
    # Appendix A: B = 10, alpha = 1/2.
    lv = level_budgets(1.0, (10, 5, 3, 2, 1), alpha="1/2")
    assert lv == (0.75, 1 / 16, 1 / 32, 1 / 64, 1 / 128)
    assert lv[0] + 2 * sum(lv[1:]) == 63 / 64
    costs = position_costs(lv, (10, 5, 3, 2, 1))
    expected = [111 / 128, 55 / 64, 27 / 32, 13 / 16, 13 / 16, 13 / 16, 13 / 16, 27 / 32, 55 / 64]
    assert costs.tolist() == [*expected, 111 / 128]
    # code_q with |I| = 3 is (0.8, 0.05, 0.05) rho (Appendix A).
    assert level_budgets(1.0, (100000, 50000, 1), split="code_q") == pytest.approx(
        (0.8, 0.05, 0.05), rel=1e-15
    )


def test_appendix_b_noise_magnitudes():
    rho = approx_to_zcdp(1.0, 10**-10.5)
    assert rho == pytest.approx(0.0101319, rel=1e-5)
    paper = level_budgets(rho, (100000, 50000, 1), alpha="3/4")
    assert math.sqrt(3 / paper[0]) == pytest.approx(17.8, abs=0.05)
    assert math.sqrt(3 / paper[1]) == pytest.approx(194.7, abs=0.05)
    sk = DPSWSketch.paper_experiments(
        10**6, PrivacyBudget.approx(1.0, 10**-10.5), width=10, depth=3
    )
    assert sk.block == 100000 and sk.checkpoints == (100000, 50000, 1)
    assert sk.level_sigmas()[0] == pytest.approx(19.2, abs=0.05)
    assert sk.level_sigmas()[1] == pytest.approx(77.0, abs=0.05)
    for s, r in zip(sk.level_sigmas(), sk.levels, strict=True):
        assert Fraction(s) ** 2 >= Fraction(3) / Fraction(r)  # never less noise


def test_presets():
    th = DPSWSketch.theory(10**6, zc(), width=8, depth=2)
    assert th.block == 1000 and th.checkpoints == checkpoint_list(1000, "1/2")
    assert th.split == "paper"
    assert DPSWSketch.theory(101, zc(), width=8, depth=2).block == 11
    pe = DPSWSketch.paper_experiments(10**4, zc(0.5), width=8, depth=2)
    assert pe.block == 1000 and pe.checkpoints == (1000, 500, 1) and pe.split == "code_q"
    assert pe.levels == pytest.approx((0.4, 0.025, 0.025), rel=1e-15)
    assert DPSWSketch.paper_experiments(10**4, zc(), width=8, depth=2, middle=100).checkpoints == (
        1000,
        100,
        1,
    )


# ------------------------------------------------------------------------------- T4 / T6


def test_t4_layout_and_sealing_times():
    rng = np.random.default_rng(1)
    for _ in range(6):
        b = int(rng.integers(1, 40))
        alpha = Fraction(int(rng.integers(1, 20)), 20)
        sk = DPSWSketch(3 * b, zc(), width=4, depth=1, block=b, alpha=alpha, free_prefixes=False)
        cps = sk.checkpoints
        lay = sk.layout
        assert lay.n_segments <= 2 * len(cps) - 1
        for kind, j in lay.sketches():
            lo, hi = lay.range_of(kind, j)
            length = hi - lo + 1
            assert length == (b if kind == "F" else cps[j - 1])
            if kind == "Q":
                # docs/algorithms.md#dpsw-e1 corrected start
                assert hi == b and lo == b - cps[j - 1] + 1
        # Step one position at a time: every newly sealed sketch ends exactly now (T4, T6).
        before: set = set()
        for t in range(1, 3 * b + 1):
            sk.update(t)
            now = set(sk.sealed_keys())
            for kb, kind, j in now - before:
                lo, hi = lay.range_of(kind, j)
                assert (kb - 1) * b + hi == t
            for sel in sk.selection():
                assert sel.end <= t
            before = now


def test_t6_queries_never_touch_unsealed_sketches():
    rng = np.random.default_rng(2)
    for _ in range(20):
        w = int(rng.integers(1, 60))
        b = int(rng.integers(1, w + 1))
        sk = DPSWSketch(w, zc(), width=4, depth=1, block=b, alpha="1/2", free_prefixes=False)
        t = int(rng.integers(1, 4 * w))
        sk.update_batch(np.zeros(t, dtype=np.int64))
        for tq in range(max(1, t - 3), t + 1):
            try:
                sels = sk.selection(tq)
            except ValueError:
                continue
            assert all(s.end <= tq for s in sels)
        with pytest.raises(ValueError, match="t must be in"):
            sk.selection(t + 1)


# ------------------------------------------------------------------------------- T5 / T14


APPENDIX_A = {
    137: [
        (4, "Q", 3, 38, 40),
        *[(k, "F", 1, 10 * k - 9, 10 * k) for k in range(5, 14)],
        (14, "P", 2, 131, 135),
    ],
    134: [
        (4, "F", 1, 31, 40),
        *[(k, "F", 1, 10 * k - 9, 10 * k) for k in range(5, 14)],
        (14, "P", 3, 131, 133),
    ],
    140: [
        (5, "F", 1, 41, 50),
        *[(k, "F", 1, 10 * k - 9, 10 * k) for k in range(6, 14)],
        (14, "F", 1, 131, 140),
    ],
    55: [
        (1, "F", 1, 1, 10),
        *[(k, "F", 1, 10 * k - 9, 10 * k) for k in range(2, 6)],
        (6, "P", 2, 51, 55),
    ],
    7: [(1, "P", 2, 1, 5)],
}


def test_appendix_a_worked_example():
    sk = DPSWSketch(100, zc(), width=4, depth=1, block=10, alpha="1/2", free_prefixes=False)
    assert sk.checkpoints == (10, 5, 3, 2, 1)
    assert [sk.layout.range_of("Q", j)[0] for j in range(2, 6)] == [6, 8, 9, 10]
    sk.update_batch(np.zeros(140, dtype=np.int64))
    for t, expected in APPENDIX_A.items():
        got = [(s.block, s.kind, s.level, s.start, s.end) for s in sk.selection(t)]
        assert got == expected, t


def _prefix_counts(stream: np.ndarray, m: int) -> np.ndarray:
    onehot = np.zeros((len(stream) + 1, m), dtype=np.int64)
    onehot[np.arange(1, len(stream) + 1), stream] = 1
    return np.cumsum(onehot, axis=0)


@pytest.mark.parametrize(
    ("w", "b", "alpha"),
    [
        (20, 5, "1/2"),
        (23, 5, "1/2"),
        (10, 10, "3/4"),
        (7, 1, "1/2"),
        (1, 1, "1/2"),
        (30, 7, "1/4"),
        (16, 4, "9/10"),
    ],
)
def test_t5_t14_noise_free_selection_equals_exact_range_count(w, b, alpha):
    """Zero noise, collision-free hashing: estimate == count over [u, v] at every t."""
    m, width, depth = 6, 256, 2
    seed = collision_free_seed(m, width, depth)
    rng = np.random.default_rng(w * 100 + b)
    n = 3 * w + 2 * b
    stream = rng.integers(0, m, n)
    pref = _prefix_counts(stream, m)
    sk = DPSWSketch(
        w, zc(), width=width, depth=depth, block=b, alpha=alpha, seed=seed, noise_source=ZERO()
    )
    cps = sk.checkpoints
    keys = np.arange(m)
    for t in range(1, n + 1):
        sk.update(int(stream[t - 1]))
        sels = sk.selection()
        ws = max(t - w + 1, 1)
        u, v = sels[0].start, sels[-1].end
        assert all(a.end + 1 == c.start for a, c in zip(sels, sels[1:], strict=False))
        assert u <= ws and v <= t
        assert len(sels) <= math.ceil(w / b) + 1
        x = cps.index(sels[0].end - sels[0].start + 1) if len(sels) > 1 else None
        if x is not None and x + 1 < len(cps):
            assert ws - u <= max(0, cps[x] - cps[x + 1] - 1)
        if len(sels) == 1 or x is None:
            # l' == l branch: the window starts at the block start (docs/algorithms.md#dpsw-e7)
            assert u == ws
        y = cps.index(sels[-1].end - sels[-1].start + 1)
        assert t - v <= (0 if y == 0 else cps[y - 1] - cps[y] - 1)
        if t % b == 0:
            assert sels[-1].kind == "F"  # y = 1 at a block end (T14)
        assert np.array_equal(sk.estimate(keys), (pref[v] - pref[u - 1]).astype(float))


def test_noise_free_equals_exact_sliding_window_every_step():
    """With B = 1 every range is exact: zero-noise DPSW == exact window count at every t."""
    m, width, depth = 5, 128, 3
    seed = collision_free_seed(m, width, depth)
    rng = np.random.default_rng(3)
    stream = rng.integers(0, m, 120)
    for w in (1, 7, 16):
        sk = DPSWSketch(
            w, zc(), width=width, depth=depth, block=1, alpha="1/2", seed=seed, noise_source=ZERO()
        )
        exact = ExactSlidingWindow(w)
        for x in stream.tolist():
            sk.update(x)
            exact.update_batch(np.array([x]))
            assert np.array_equal(sk.estimate(np.arange(m)), exact.estimate(np.arange(m)))


def test_zero_noise_sealed_sketch_equals_countmin_of_its_range():
    rng = np.random.default_rng(4)
    stream = rng.integers(0, 1000, 5000)
    sk = DPSWSketch(
        2000,
        zc(),
        width=50,
        depth=4,
        block=500,
        alpha="1/2",
        seed=9,
        noise_source=ZERO(),
        free_prefixes=False,
    )
    sk.update_batch(stream)
    for kb, kind, j in sk.sealed_keys():
        lo, hi = sk.layout.range_of(kind, j)
        s = (kb - 1) * 500
        cms = CountMinSketch(50, 4, 9).update(stream[s + lo - 1 : s + hi])
        assert np.array_equal(sk.sealed_sketch(kb, kind, j), cms.table.astype(float))


def test_time_based_mode():
    """Positions are time steps with 0..many arrivals; zero noise equals exact range counts."""
    m, width, depth = 4, 128, 2
    seed = collision_free_seed(m, width, depth)
    rng = np.random.default_rng(5)
    steps = np.sort(rng.integers(1, 200, 700))  # gaps and bursts
    keys = rng.integers(0, m, 700)
    sk = DPSWSketch(
        40, zc(), width=width, depth=depth, block=8, alpha="1/2", seed=seed, noise_source=ZERO()
    )
    for t in range(1, 200):
        sel = steps == t
        sk.update_at(keys[sel], steps[sel])
        sk.advance_to(t)
        sels = sk.selection()
        u, v = sels[0].start, sels[-1].end
        inr = (steps >= u) & (steps <= v)
        expected = np.bincount(keys[inr], minlength=m)
        assert np.array_equal(sk.estimate(np.arange(m)), expected.astype(float))
    with pytest.raises(ValueError, match="current time"):
        sk.update_at(np.array([1]), np.array([199]))


# ------------------------------------------------------------------------------- T7


def test_t7_retention_and_memory():
    for w, b, alpha in ((100, 10, "1/2"), (50, 7, "3/4"), (1000, 100, "1/2")):
        sk = DPSWSketch(w, zc(), width=16, depth=3, block=b, alpha=alpha)
        nlev = len(sk.checkpoints)
        bound = (math.ceil(w / b) + 1) * nlev + nlev - 1
        for step in range(1, 3 * w + 5, max(1, w // 23)):
            sk.update_batch(np.zeros(step - sk.t, np.int64))
            t = sk.t
            lo = (max(t - w + 1, 1) - 1) // b + 1
            hi = (t - 1) // b + 1
            assert {k[0] for k in sk.sealed_keys()} <= set(range(lo, hi + 1))
            assert set(sk.live_blocks()) - {hi} <= set(range(lo, hi + 1))
            assert len(sk.sealed_keys()) <= bound
            sealed = sum(sk.sealed_sketch(*k).nbytes for k in sk.sealed_keys())
            assert sealed == len(sk.sealed_keys()) * 3 * 16 * 8
            assert sk.memory_bytes() <= sealed + 3 * 16 * 8 * sk.layout.n_segments


# ------------------------------------------------------------------------------- T8 / T9


def _build(seed_noise=1, hash_seed=0, chunks=None, stream=None):
    sk = DPSWSketch(
        300,
        zc(0.5),
        width=32,
        depth=3,
        block=40,
        alpha="1/2",
        seed=hash_seed,
        noise_source=NoiseSource.insecure_for_tests(seed_noise),
    )
    if chunks is None:
        sk.update_batch(stream)
    else:
        pos = 0
        for c in chunks:
            sk.update_batch(stream[pos : pos + c])
            pos += c
    return sk


def test_t8_determinism_batching_and_repeated_queries():
    stream = np.random.default_rng(6).integers(0, 100, 1000)
    a = _build(stream=stream)
    b = _build(stream=stream, chunks=[1, 2, 37, 400, 1, 559])
    c = _build(stream=stream, chunks=[1] * 1000)
    for other in (b, c):
        assert a.sealed_keys() == other.sealed_keys()
        for k in a.sealed_keys():
            assert np.array_equal(a.sealed_sketch(*k), other.sealed_sketch(*k))
    q = np.arange(100)
    first = a.estimate(q)
    assert np.array_equal(first, a.estimate(q))  # queries are post-processing: no fresh noise
    assert np.array_equal(first, b.estimate(q))
    d = _build(seed_noise=2, stream=stream)
    assert not np.array_equal(first, d.estimate(q))
    e = _build(hash_seed=5, stream=stream)
    h0 = row_buckets(*hash_keys(q, 0), 3, 32)
    h5 = row_buckets(*hash_keys(q, 5), 3, 32)
    assert not np.array_equal(h0, h5) and not np.array_equal(first, e.estimate(q))
    with pytest.raises(ValueError, match="read-only"):
        a.sealed_sketch(*a.sealed_keys()[0])[0, 0] = 1.0


def test_t9_shard_merge_equivalence():
    rng = np.random.default_rng(7)
    stream = rng.integers(0, 500, 1200)
    single = _build(stream=stream)
    for shards in (2, 5):
        merged = DPSWSketch(
            300,
            zc(0.5),
            width=32,
            depth=3,
            block=40,
            alpha="1/2",
            noise_source=NoiseSource.insecure_for_tests(1),
        )
        owner = rng.integers(0, shards, len(stream))
        pos = np.arange(1, len(stream) + 1)
        kb, seg = merged.locate(pos)
        tables: dict[tuple[int, int], np.ndarray] = {}
        for s in range(shards):
            for key in set(zip(kb[owner == s].tolist(), seg[owner == s].tolist(), strict=True)):
                sel = (owner == s) & (kb == key[0]) & (seg == key[1])
                cms = CountMinSketch(32, 3, 0).update(stream[sel])
                tables[key] = tables.get(key, 0) + cms.table
        # Feed segment by segment in time order, sealing as the global position passes.
        for key in sorted(tables, key=lambda k: merged.segment_end(*k)):
            merged.add_segment_counts(key[0], key[1], tables[key])
            merged.advance_to(merged.segment_end(*key))
        assert merged.t == len(stream)
        assert merged.sealed_keys() == single.sealed_keys()
        for k in single.sealed_keys():
            assert np.array_equal(merged.sealed_sketch(*k), single.sealed_sketch(*k))
    with pytest.raises(ValueError, match="ended"):
        merged.add_segment_counts(1, 0, np.zeros((3, 32), np.int64))
    with pytest.raises(ValueError, match="shape"):
        merged.add_segment_counts(100, 0, np.zeros((3, 31), np.int64))


# ------------------------------------------------------------------------------- serialization


def test_roundtrip_mid_stream_bit_identical_continuation():
    stream = np.random.default_rng(8).integers(0, 100, 1500)
    src = NoiseSource.insecure_for_tests(3)
    ref = DPSWSketch(300, zc(0.5), width=32, depth=3, block=40, alpha="1/2", noise_source=src)
    ref.update_batch(stream)
    for cut in (0, 1, 39, 40, 41, 333, 777):
        a = DPSWSketch(300, zc(0.5), width=32, depth=3, block=40, alpha="1/2", noise_source=src)
        a.update_batch(stream[:cut])
        b = DPSWSketch.from_bytes(a.to_bytes(), src)
        assert b.to_bytes() == a.to_bytes()
        b.update_batch(stream[cut:])
        assert b.to_bytes() == ref.to_bytes()
        assert np.array_equal(b.estimate(np.arange(100)), ref.estimate(np.arange(100)))


def test_from_bytes_rejects_malformed():
    sk = _build(stream=np.arange(333) % 7)
    data = sk.to_bytes()
    src = NoiseSource.insecure_for_tests(1)
    for bad in (
        data[:-5],
        data[:40],
        b"xx" + data[2:],
        data[:60] + bytes([data[60] ^ 1]) + data[61:],
    ):
        with pytest.raises(SketchFormatError):
            DPSWSketch.from_bytes(bad, src)
    # A consistent checksum but a state that contradicts the layout (t moved back a block).
    from beam_dpsketch import serialization

    kind, params, arrays = serialization.loads(data)
    params["t"] = params["t"] - 40
    with pytest.raises(SketchFormatError, match="sealed"):
        DPSWSketch.from_bytes(serialization.dumps(kind, params, arrays), src)
    params["t"] = 333
    arrays["pending"] = -arrays["pending"] - 1
    with pytest.raises(SketchFormatError, match="non-negative"):
        DPSWSketch.from_bytes(serialization.dumps(kind, params, arrays), src)
    assert "table" not in repr(sk) and "[" in repr(sk)
    with pytest.raises(TypeError, match="noise_source"):
        DPSWSketch.from_bytes(data, None)


# ------------------------------------------------------------------------------- T10 - T13


def test_t10_noise_law_on_empty_stream():
    rho = 0.25
    sk = DPSWSketch(
        600,
        zc(rho),
        width=2000,
        depth=5,
        block=100,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(10),
        free_prefixes=False,
    )
    sk.advance_to(800)
    for j in (1, 2):
        kinds = ["F"] if j == 1 else ["P", "Q"]
        vals = np.concatenate(
            [
                sk.sealed_sketch(*key).ravel()
                for key in sk.sealed_keys()
                if key[2] == j and key[1] in kinds
            ]
        )
        n = len(vals)
        assert n >= 50_000
        var = 5 / sk.levels[j - 1]
        sd = math.sqrt(var)
        # Two-sided normal tail at z = 5.4 has probability 6.7e-8 < 1e-6 per check.
        assert abs(vals.mean()) <= 5.4 * sd / math.sqrt(n)
        # Sample variance of n normals: sd(s^2) ~ var sqrt(2/n); z = 5.4 (Bernstein-safe for n>>1).
        assert abs(vals.var() / var - 1) <= 5.4 * math.sqrt(2 / n)
        # KS: accept unless p <= 1e-6 (false failure 1e-6).
        assert stats.kstest(vals[:100_000], "norm", args=(0, sd)).pvalue > 1e-6
    a = sk.sealed_sketch(8, "F", 1).ravel()
    b = sk.sealed_sketch(8, "Q", 2).ravel()
    # Independent pairs: |corr| * sqrt(n) ~ N(0, 1); z = 5.4.
    assert abs(np.corrcoef(a, b)[0, 1]) <= 5.4 / math.sqrt(len(a))


def test_t11_sensitivity_of_noise_free_arrays():
    rng = np.random.default_rng(11)
    for _ in range(5):
        stream = rng.integers(0, 50, 200)
        p = int(rng.integers(0, 200))
        other = stream.copy()
        other[p] = (stream[p] + 1 + rng.integers(0, 49)) % 50
        kw = dict(
            width=16, depth=3, block=40, alpha="1/2", noise_source=ZERO(), free_prefixes=False
        )
        a = DPSWSketch(200, zc(), **kw).update_batch(stream)
        b = DPSWSketch(200, zc(), **kw).update_batch(other)
        for key in a.sealed_keys():
            lo, hi = a.layout.range_of(key[1], key[2])
            s = (key[0] - 1) * 40
            diff = a.sealed_sketch(*key) - b.sealed_sketch(*key)
            if s + lo <= p + 1 <= s + hi:
                assert np.all(np.abs(diff).sum(axis=1) <= 2)
                assert np.all(diff.sum(axis=1) == 0)
                assert np.linalg.norm(diff) <= math.sqrt(2 * 3)
            else:
                assert not diff.any()


def test_t13_exact_estimator_law_collision_free():
    """a = 1, collision-free: fhat - cnt([u, v]) ~ N(0, sum_P 1/rho_P) exactly ([WWC24, Lemma 4.2])."""
    m, width = 3, 64
    seed = collision_free_seed(m, width, 1)
    stream = np.random.default_rng(12).integers(0, m, 13)
    runs = 600
    diffs = []
    exact = None
    for r in range(runs):
        sk = DPSWSketch(
            10,
            zc(2.0),
            width=width,
            depth=1,
            block=5,
            alpha="1/2",
            seed=seed,
            noise_source=NoiseSource.insecure_for_tests(1000 + r),
        )
        sk.update_batch(stream)
        sels = sk.selection()
        if exact is None:
            u, v = sels[0].start, sels[-1].end
            assert len(sels) == 3 and sels[0].kind == "Q" and sels[-1].kind == "P"
            exact = np.bincount(stream[u - 1 : v], minlength=m)
            var = sum(1 / sk.levels[s.level - 1] for s in sels)
        diffs.append(sk.estimate(np.arange(m)) - exact)
    dd = np.asarray(diffs)
    # KS: accept unless p <= 1e-6 (false failure 1e-6).
    assert stats.kstest(dd[:, 0], "norm", args=(0, math.sqrt(var))).pvalue > 1e-6
    # Keys are independent (distinct cells): their correlation is ~N(0, 1/n); z = 5.4.
    assert abs(np.corrcoef(dd[:, 0], dd[:, 1])[0, 1]) <= 5.4 / math.sqrt(runs)


# ------------------------------------------------------------------------------- T18


def test_t18_heavy_hitters_planted():
    m, width, depth = 40, 1024, 3
    seed = collision_free_seed(m, width, depth)
    rng = np.random.default_rng(13)
    w, b = 2000, 100
    heavy = [0, 1, 2, 3, 4]
    probs = np.full(m, 0.15 / (m - 5))
    probs[heavy] = 0.17
    stream = rng.choice(m, size=5000, p=probs)
    gamma = 0.1
    thr = gamma * w
    for r in range(5):
        sk = DPSWSketch(
            w,
            zc(200.0),
            width=width,
            depth=depth,
            block=b,
            alpha="1/2",
            seed=seed,
            hh_slack=0.0,
            noise_source=NoiseSource.insecure_for_tests(50 + r),
        )
        sk.update_batch(stream)
        sels = sk.selection()
        u, v = sels[0].start, sels[-1].end
        true = np.bincount(stream[-w:], minlength=m)
        mis = np.abs(np.bincount(stream[u - 1 : v], minlength=m) - true)
        # [WWC24, Lemma 4.2] with collision-free cells: |fhat - f| <= mis_e + sum_P max_r |Z_P,r|; with
        # z = 6.5, P[any of 40 keys x |Sel| <= 21 sketches x 3 rows exceeds] <= 2520 * 2 *
        # Phi(-6.5) < 1e-6.
        noise = sum(6.5 * sk.level_sigmas()[s.level - 1] for s in sels)
        assert all(true[h] >= thr + mis[h] + noise for h in heavy)
        assert all(true[x] < thr - mis[x] - noise for x in range(5, m))
        got = sk.heavy_hitters(np.arange(m), gamma)
        assert sorted(k for k, _ in got) == heavy
        assert [k for k, _ in sk.heavy_hitters(list(range(m)), gamma)] == heavy
    with pytest.warns(UserWarning, match="4 zeta"):
        DPSWSketch(100, zc(), width=10, depth=2, block=10, alpha="1/2").heavy_hitters([1], 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sk.heavy_hitters(["a"], 0.05)


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(window=0), ValueError, "window"),
        (dict(window=1.5), TypeError, "window"),
        (dict(block=101), ValueError, "block"),
        (dict(block=None), ValueError, "block and beta"),
        (dict(alpha=1.5), ValueError, "alpha"),
        (dict(alpha=None), ValueError, "alpha or explicit checkpoints"),
        (dict(checkpoints=[10, 5, 5, 1]), ValueError, "strictly decreasing"),
        (dict(checkpoints=[9, 1]), ValueError, "checkpoints"),
        (dict(split="foo"), ValueError, "split"),
        (dict(width=0), ValueError, "width"),
        (dict(depth=65), ValueError, "depth"),
        (dict(noise="laplace"), ValueError, "noise"),
        (dict(budget=PrivacyBudget.pure(1.0)), ValueError, "pure"),
        (dict(budget=1.0), TypeError, "budget"),
        (dict(noise_source=b"k"), TypeError, "noise_source"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_errors_name_parameters(kwargs, exc, match):
    args = dict(window=100, budget=zc(), width=8, depth=2, block=10, alpha="1/2")
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        DPSWSketch(**args)


def test_discrete_gaussian_option_and_report():
    sk = DPSWSketch(
        100,
        PrivacyBudget.approx(1.0, 1e-6),
        width=8,
        depth=2,
        block=10,
        alpha="1/2",
        noise="discrete_gaussian",
        noise_source=NoiseSource.insecure_for_tests(0),
    )
    sk.update_batch(np.arange(50))
    arr = sk.sealed_sketch(*sk.sealed_keys()[0])
    assert np.array_equal(arr, np.round(arr))
    rep = sk.privacy_report()
    assert rep["neighbouring"] == "event-level substitution"
    assert rep["block_sum"] <= rep["rho"] and rep["epsilon"] == 1.0
    with pytest.raises(TypeError, match="gamma"):
        sk.heavy_hitters([1], "x")
    with pytest.raises(ValueError, match="estimator"):
        sk.estimate([1], estimator="median")
    assert sk.estimate([1], estimator="min_of_sums").shape == (1,)
