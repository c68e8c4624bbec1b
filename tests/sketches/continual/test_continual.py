"""PunctualSketch and LazySketch: docs/algorithms.md#lazy-oracles oracles S1-S9, errors, bytes, input types."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from beam_dpsketch import serialization
from beam_dpsketch.hashing import hash_keys, row_buckets, row_signs
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import gaussian_delta
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.continual.binary_mechanism import HorizonExceededError
from beam_dpsketch.sketches.continual.sketch import (
    IntervalSummary,
    LazySketch,
    PunctualSketch,
    lazy_noise_bound,
    lazy_noise_bound_paper,
    lazy_shape,
)

SRC = NoiseSource.insecure_for_tests(11)
ZERO = NoiseSource.zero_noise_for_tests()
L_1250 = math.log(1250.0)
EXACT = {"cms": CountMinSketch, "cs": CountSketch}
BOTH = [(cls, kind) for cls in (LazySketch, PunctualSketch) for kind in ("cms", "cs")]


def _sketch(cls, kind="cms", width=7, depth=3, horizon=400, eps=0.5, delta=1e-3, **kw):
    kw.setdefault("noise_source", SRC)
    kw.setdefault("release_prefix", "test-continual")
    return cls(width, depth, horizon, PrivacyBudget.approx(eps, delta), kind=kind, **kw)


def _stream(n, universe=60, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.4, n) % universe).astype(np.int64)


def _state(sketch):
    arrays = dict(sketch._mech._arrays())
    if isinstance(sketch, LazySketch):
        arrays["pending"] = sketch._pending
    return arrays


def _assert_same_state(a, b):
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for name in sa:
        assert np.array_equal(sa[name], sb[name]), name
    assert a.t == b.t
    assert np.array_equal(a.noisy_table(), b.noisy_table())


# ------------------------------------------------------------------ S4: calibration


@pytest.mark.parametrize(
    "cls,width,kind,sigma",
    [
        (LazySketch, 55, "cms", 119.4228),
        (LazySketch, 55, "cs", 168.8893),
        (PunctualSketch, 33, "cms", 141.3029),
        (PunctualSketch, 33, "cs", 199.8325),
    ],
)
def test_s4_sigma_of_paper_configs(cls, width, kind, sigma):
    s = _sketch(cls, kind, width=width, depth=3, horizon=2**20, eps=0.3, calibration="paper")
    assert s.sigma == pytest.approx(sigma, rel=1e-4)
    m = 6 if kind == "cms" else 12
    h = (-(-(2**20) // width)).bit_length() if cls is LazySketch else 21
    assert s.m == m and s.tree_height == h
    assert s.sigma == pytest.approx(math.sqrt(2 * h * m * L_1250) / 0.3, rel=1e-8)
    if cls is LazySketch:
        assert s.local_horizon == 19066


def test_noise_bound_golden_values():
    # [Hol25, Lemma 5]: B_noise for the 24KB config, and the paper's gamma for comparison.
    args = (2**20, 55, 3, 0.3, 1e-3, 0.05)
    assert lazy_noise_bound(*args) == pytest.approx(2876.8, abs=0.1)
    assert lazy_noise_bound(*args, kind="cs") == pytest.approx(4068.5, abs=0.1)
    assert lazy_noise_bound_paper(*args) == pytest.approx(2840.1, abs=0.1)
    s = _sketch(LazySketch, width=55, depth=3, horizon=2**20, eps=0.3, calibration="paper")
    assert s.noise_bound(0.05) == pytest.approx(2876.8, abs=0.1)


def test_lazy_shape_lemma5():
    assert lazy_shape(0.01, 0.05, 2**20) == (200, 26)
    assert lazy_shape(0.05, 0.2, 4096) == (40, 16)
    assert lazy_shape(0.01, 0.05, 2**20, "cs")[0] == 30000
    w, d = lazy_shape(0.01, 0.05, 2**20, "cs", preset="rigorous")
    kl = 0.5 * math.log(1.5) + 0.5 * math.log(0.75)  # KL(1/2 || 1/3) ~ 0.0589 ([Hol25, Lemma 5])
    assert w == 30000 and d == math.ceil(math.log(2 * 2**20 / 0.05) / kl) == 299


def test_max_contributions_scales_sigma_and_analytic_allows_large_eps():
    one = _sketch(LazySketch)
    three = _sketch(LazySketch, max_contributions=3)
    assert three.sigma == pytest.approx(3 * one.sigma)
    with pytest.raises(ValueError, match="epsilon"):
        _sketch(LazySketch, eps=1.5, calibration="paper")
    big = _sketch(LazySketch, eps=1.5, calibration="analytic")
    assert gaussian_delta(math.sqrt(big.m * big.tree_height), big.sigma, 1.5) <= 1e-3


# ------------------------------------------------------------------ S6: analytic privacy oracle


def test_s6_cs_needs_m_4d():
    # Worst-case CS pair: one cell differs by 2 in every row, so D^2 = 4 d h ([Hol25, Section 4.1]).
    for delta in (1e-3, 1e-6):
        s = _sketch(LazySketch, "cs", width=55, depth=3, horizon=2**20, eps=0.3, delta=delta)
        d_true = math.sqrt(4 * 3 * s.tree_height)
        assert gaussian_delta(d_true, s.sigma, 0.3) <= delta
    with pytest.warns(UserWarning, match="NOT formally"):
        paper = _sketch(
            LazySketch,
            "cs",
            width=55,
            depth=3,
            horizon=2**20,
            eps=0.3,
            delta=1e-6,
            cs_sensitivity="paper_2d",
            calibration="paper",
        )
    assert not paper.formally_private and paper.m == 6
    exact = gaussian_delta(math.sqrt(12 * paper.tree_height), paper.sigma, 0.3)
    assert exact == pytest.approx(2.0e-6, rel=0.05) and exact > 1e-6


# ------------------------------------------------------------------ S1, S3: noise-free oracles


@pytest.mark.parametrize("kind", ["cms", "cs"])
def test_s1_punctual_noise_free_equals_exact_at_every_t(kind):
    keys = _stream(150)
    s = _sketch(PunctualSketch, kind, horizon=150, noise_source=ZERO)
    exact = EXACT[kind](7, 3, 0)
    for key in keys.tolist():
        s.update(key)
        exact.update([key])
        assert np.array_equal(s.noisy_table(), exact.table)
    probe = np.arange(60)
    assert np.array_equal(s.estimate(probe), exact.estimate(probe))


@pytest.mark.parametrize("kind", ["cms", "cs"])
def test_s1_s3_lazy_noise_free_delay_and_pending(kind):
    w, horizon = 9, 500
    keys = _stream(horizon, seed=1)
    s = _sketch(LazySketch, kind, width=w, horizon=horizon, noise_source=ZERO)
    exact = EXACT[kind](w, 3, 0)
    probe = np.arange(60)
    lo = hi = 0.0
    for t, key in enumerate(keys.tolist()):
        s.update(key)
        exact.update([key])
        pushed = s._mech._total.reshape(3, w)
        # Conservation E + P == C_exact ([Hol25, Section 4.2]).
        assert np.array_equal(pushed + s._pending, exact.table)
        assert np.array_equal(s.noisy_table(), pushed)
        # Pending bounds and the just-pushed column (S3).
        assert not s._pending[:, t % w].any()
        if kind == "cms":
            assert s._pending.min() >= 0 and s._pending.max() <= w - 1
        else:
            assert np.abs(s._pending).max() <= w - 1
        diff = s.estimate(probe) - exact.estimate(probe)
        lo, hi = min(lo, diff.min()), max(hi, diff.max())
    # Delay range: [-(w-1), 0] for CMS and [-(w-1), w-1] for CS (docs/algorithms.md#lazy-oracles S1).
    assert -(w - 1) <= lo
    assert hi <= (0 if kind == "cms" else w - 1)
    assert lo < 0  # the delay is real: the test would notice a sketch that pushes everything


# ------------------------------------------------------------------ S2: schedule


def test_s2_schedule_and_push_windows():
    w, d, horizon = 7, 3, 100
    keys = _stream(horizon, seed=2)
    s = _sketch(LazySketch, width=w, depth=d, horizon=horizon, noise_source=ZERO)
    buckets = row_buckets(*hash_keys(keys, 0), d, w)
    for t, key in enumerate(keys.tolist()):
        k_before = s._mech.steps.reshape(d, w)
        e_before = s._mech._total.reshape(d, w).copy()
        s.update(key)
        moved = s._mech.steps.reshape(d, w) - k_before
        # Exactly column t mod w is pushed, in every row.
        expected = np.zeros((d, w), dtype=np.int64)
        expected[:, t % w] = 1
        assert np.array_equal(moved, expected)
        # The k-th push of column j carries arrivals in ((k-2)w + j, (k-1)w + j] ([Hol25, Section 4.2]).
        j = t % w
        k = t // w + 1
        lo_t, hi_t = max((k - 2) * w + j + 1, 0), (k - 1) * w + j
        assert hi_t == t
        window = buckets[:, lo_t : hi_t + 1]
        pushed = s._mech._total.reshape(d, w)[:, j] - e_before[:, j]
        assert np.array_equal(pushed, (window == j).sum(axis=1))
    assert s.counter_updates == d * horizon  # P1: d GaussBM updates per arrival
    pushes = s.column_pushes()
    assert np.array_equal(pushes, (horizon - 1 - np.arange(w)) // w + 1)
    assert pushes.max() == -(-horizon // w) == s.local_horizon
    p = _sketch(PunctualSketch, width=w, depth=d, horizon=horizon)
    p.update_batch(keys[:10])
    assert p.counter_updates == d * w * 10  # Punctual: d * w per arrival


# ------------------------------------------------------------------ S5: white-box sensitivity


def _push_sequences(kind, keys, w, d):
    s = _sketch(LazySketch, kind, width=w, depth=d, horizon=len(keys), noise_source=ZERO)
    seq = []
    prev = s._mech._total.copy()
    for key in keys.tolist():
        s.update(key)
        seq.append(s._mech._total - prev)
        prev = s._mech._total.copy()
    return np.array(seq).reshape(len(keys), d, w)


def _local_leaves(seq, w):
    """Per-cell push sequences indexed by local time k (T_loc leaves)."""
    horizon, d, _ = seq.shape
    t_loc = -(-horizon // w)
    leaves = np.zeros((d, w, t_loc), dtype=np.int64)
    for t in range(horizon):
        leaves[:, t % w, t // w] = seq[t, :, t % w]
    return leaves


def _tree_sq_norm(leaves):
    """Squared L2 norm of all dyadic tree nodes over the leaves (last axis)."""
    total = 0
    t_loc = leaves.shape[-1]
    for k in range(1, t_loc + 1):
        a, b = k - (k & -k), k
        total += int((leaves[..., a:b].sum(axis=-1) ** 2).sum())
    return total


def _adversarial_cs_key(x, w, d):
    """A key colliding with x in row 0 with the opposite sign."""
    cand = np.arange(1000, 200_000, dtype=np.int64)
    h1, h2 = hash_keys(cand, 0)
    b = row_buckets(h1, h2, d, w)
    g = row_signs(h2, d)
    xb = row_buckets(*hash_keys(np.array([x]), 0), d, w)[:, 0]
    xg = row_signs(hash_keys(np.array([x]), 0)[1], d)[:, 0]
    ok = (b[0] == xb[0]) & (g[0] == -xg[0])
    return int(cand[np.flatnonzero(ok)[0]])


@pytest.mark.parametrize("kind", ["cms", "cs"])
def test_s5_neighbouring_streams_change_few_counters(kind):
    w, d, horizon = 5, 3, 60
    rng = np.random.default_rng(3)
    h_loc = (-(-horizon // w)).bit_length()
    m = 2 * d if kind == "cms" else 4 * d
    worst_row = 0
    for trial in range(12):
        keys = _stream(horizon, seed=10 + trial)
        other = keys.copy()
        pos = int(rng.integers(horizon))
        if kind == "cs" and trial % 2:
            other[pos] = _adversarial_cs_key(int(keys[pos]), w, d)
        else:
            other[pos] = 10_000 + trial
        diff = _push_sequences(kind, other, w, d) - _push_sequences(kind, keys, w, d)
        per_cell = np.abs(diff).sum(axis=0)
        if kind == "cms":
            assert (per_cell > 0).sum() <= 2 * d
            # Each differing counter differs in exactly one push, by +-1.
            assert set(np.abs(diff[diff != 0]).tolist()) <= {1}
            assert per_cell.max() <= 1
        row_sq = (diff.astype(np.int64) ** 2).sum(axis=(0, 2))
        assert row_sq.max() <= 4
        worst_row = max(worst_row, int(row_sq.max()))
        assert _tree_sq_norm(_local_leaves(diff, w)) <= m * h_loc
    if kind == "cs":
        assert worst_row == 4  # the adversarial pair puts +-2 in one cell: why m = 4d


# ------------------------------------------------------------------ S4: noise std, empirically


def test_s4_counter_noise_std():
    w, d = 2000, 5
    s = _sketch(LazySketch, width=w, depth=d, horizon=7 * w, release_prefix="s4")
    keys = _stream(7 * w, seed=4)
    alpha = 1e-6 / (2 * 7)
    n = w * d
    lo, hi = stats.chi2.ppf([alpha, 1 - alpha], n) / n
    for k in range(1, 8):
        s.update_batch(keys[(k - 1) * w : k * w])
        noise = s.noisy_table() - s._mech._total.reshape(d, w)
        var = bin(k).count("1") * s.sigma**2
        # Noise has mean 0 exactly, so sum(noise^2)/var ~ chi2(n): two-sided alpha = 1e-6 over
        # the seven k.
        assert lo < (noise**2).mean() / var < hi, k
        assert np.allclose(s.noise_std(), math.sqrt(var))


# ------------------------------------------------------------------ S7: batch == sequential


@pytest.mark.parametrize("cls,kind", BOTH)
def test_s7_batch_equals_sequential_with_real_noise(cls, kind):
    w, horizon = 37, 1200
    keys = _stream(horizon, universe=500, seed=5)
    seq = _sketch(cls, kind, width=w, horizon=horizon, release_prefix="s7")
    bat = _sketch(cls, kind, width=w, horizon=horizon, release_prefix="s7")
    cuts = [0, 0, 1, 3, 3 + w - 1, 3 + 2 * w - 1, 3 + 3 * w, 3 + 4 * w + 1, 700, 701, 1200]
    done = 0
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        for key in keys[a:b].tolist():
            seq.update(key)
        bat.update_batch(keys[a:b])
        done = b
        _assert_same_state(seq, bat)
    assert done == horizon
    probe = np.arange(500)
    assert np.array_equal(seq.estimate(probe), bat.estimate(probe))


def _pieces(n, sizes, every, horizon, rng):
    """``(first, stop, start, end)`` pieces covering ``[0, n)`` in runs of ``sizes`` (cycled),
    cut at the interval bounds (multiples of ``every`` and ``horizon``), in shuffled order."""
    out, pos, i = [], 0, 0
    while pos < n:
        stop = min(n, pos + sizes[i % len(sizes)])
        lo = pos
        while lo < stop:
            start = lo // every * every
            end = min(start + every, horizon)
            hi = min(stop, end)
            out.append((lo, hi, start, end))
            lo = hi
        pos, i = stop, i + 1
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("cls,kind", BOTH)
@pytest.mark.parametrize(
    ("sizes", "every", "horizon"),
    [
        # Intervals shorter than, equal to, longer than the width; batches crossing them; the
        # horizon not a multiple of release_every (last interval shorter).
        ([1, 5, 13], 4, 1000),
        ([64, 3, 250], 37, 1000),
        ([97], 300, 1000),
        ([1000], 1, 1000),
        ([11, 200], 173, 989),
    ],
)
def test_apply_interval_equals_update_batch_with_real_noise(cls, kind, sizes, every, horizon):
    # Pieces summarized in shuffled order, merged per interval in that order, and applied one
    # interval at a time: the sketch equals the one fed the stream with update_batch, bit for
    # bit, at every interval end.
    w, n = 37, min(horizon, 1000)
    keys = _stream(n, universe=500, seed=7)
    ref = _sketch(cls, kind, width=w, horizon=horizon, release_prefix="iv")
    got = _sketch(cls, kind, width=w, horizon=horizon, release_prefix="iv")
    # Summaries do not depend on the summarizing sketch's state or noise.
    other = _sketch(cls, kind, width=w, horizon=horizon, release_prefix="x", noise_source=ZERO)
    other.update_batch(keys[:10])
    summaries: dict[int, IntervalSummary] = {}
    for first, stop, start, end in _pieces(n, sizes, every, horizon, np.random.default_rng(3)):
        piece = other.summarize_interval(keys[first:stop], first, start, end)
        if start in summaries:
            summaries[start].merge(piece)
        else:
            summaries[start] = piece
    for start in sorted(summaries):
        summary = summaries[start]
        if not summary.complete:
            assert start == max(summaries) and n < summary.end  # the stream ends inside it
            break
        got.apply_interval(summary)
        ref.update_batch(keys[start : summary.end])
        _assert_same_state(ref, got)
    assert got.t == n // every * every or got.t == horizon


@pytest.mark.parametrize("cls,kind", BOTH)
def test_interval_summary_pickles_compactly_and_exactly(cls, kind):
    s = _sketch(cls, kind, width=50, depth=4, horizon=1000)
    small = s.summarize_interval([1, 2], 3, 0, 10)
    dense = s.summarize_interval(_stream(900, universe=10**6), 0, 0, 900)
    assert np.count_nonzero(dense.pushed) > 100  # sent whole
    for summary in (small, dense):
        back = pickle.loads(pickle.dumps(summary))
        assert (back.start, back.end, back.ranges) == (summary.start, summary.end, summary.ranges)
        assert np.array_equal(back.pushed, summary.pushed)
        if summary.pending is None:
            assert back.pending is None
        else:
            assert np.array_equal(back.pending, summary.pending)
    # Two arrivals touch at most 2 * depth of the 200 cells: only those travel.
    assert len(pickle.dumps(small)) < 200 * 8


@pytest.mark.parametrize("cls", [LazySketch, PunctualSketch])
def test_interval_summary_errors(cls):
    s = _sketch(cls, horizon=100)
    a = s.summarize_interval([1, 2, 3], 10, 10, 20)
    # Overlapping positions (a duplicate step) are refused, whatever the counts.
    with pytest.raises(ValueError, match="position: two summaries cover the same time step"):
        a.merge(s.summarize_interval([4, 5], 12, 10, 20))
    with pytest.raises(ValueError, match="different intervals"):
        a.merge(s.summarize_interval([4], 0, 0, 10))
    with pytest.raises(ValueError, match="position: the arrivals' steps must lie inside"):
        s.summarize_interval([1, 2], 19, 10, 20)
    with pytest.raises(HorizonExceededError, match="T=100"):
        s.summarize_interval([1], 100, 100, 110)
    # Applied only complete, and only at t.
    with pytest.raises(ValueError, match="must start at the current time step t"):
        s.apply_interval(s.summarize_interval(list(range(10)), 10, 10, 20))
    with pytest.raises(ValueError, match="must cover every one of its time steps"):
        s.apply_interval(s.summarize_interval([1, 2], 0, 0, 10))
    other = LazySketch if cls is PunctualSketch else PunctualSketch
    with pytest.raises(ValueError, match="another shape or algorithm"):
        s.apply_interval(_sketch(other, horizon=100).summarize_interval(list(range(10)), 0, 0, 10))
    assert s.t == 0
    # Adjacent pieces coalesce into one complete range.
    b = s.summarize_interval([1, 2], 0, 0, 4).merge(s.summarize_interval([3, 4], 2, 0, 4))
    assert b.ranges == ((0, 4),) and b.complete and b.rows == 4
    s.apply_interval(b)
    assert s.t == 4


def test_s7_large_batches_chunked_and_collapsed():
    w, horizon = 50, 150_000
    keys = _stream(horizon, universe=5000, seed=6)
    one = _sketch(LazySketch, "cs", width=w, horizon=horizon, release_prefix="big")
    one.update_batch(keys)
    parts = _sketch(LazySketch, "cs", width=w, horizon=horizon, release_prefix="big")
    for a in range(0, horizon, 9_999):
        parts.update_batch(keys[a : a + 9_999])
    faithful = _sketch(
        LazySketch, "cs", width=w, horizon=horizon, release_prefix="big", faithful=True
    )
    faithful.update_batch(keys)
    _assert_same_state(one, parts)
    _assert_same_state(one, faithful)
    # Collapsing rounds draws far less noise than one value per counter update.
    assert one.noise_values_drawn < faithful.noise_values_drawn / 50
    assert faithful.noise_values_drawn >= 3 * horizon


def test_punctual_faithful_and_collapsed_agree():
    keys = _stream(1000, seed=7)
    a = _sketch(PunctualSketch, width=100, horizon=1000, release_prefix="pf")
    b = _sketch(PunctualSketch, width=100, horizon=1000, release_prefix="pf", faithful=False)
    a.update_batch(keys[:500])
    a.update_batch(keys[500:])
    b.update_batch(keys)
    _assert_same_state(a, b)
    # Faithful: d * w values per arrival (Theta(d w) per step, [Hol25, Section 4.1]); collapsed: only the
    # blocks of the popcount(1000) = 6 active nodes.
    assert a.noise_values_drawn >= 3 * 100 * 1000
    assert b.noise_values_drawn < a.noise_values_drawn / 2


# ------------------------------------------------------------------ S8: query semantics


@pytest.mark.parametrize("cls,kind", BOTH)
def test_s8_query_semantics(cls, kind):
    s = _sketch(cls, kind, horizon=300)
    s.update_batch(_stream(200, seed=8))
    probe = np.arange(60)
    h1, h2 = hash_keys(probe, 0)
    cells = row_buckets(h1, h2, 3, 7)
    rows = np.take_along_axis(s.noisy_table(), cells, axis=1)
    if kind == "cms":
        expected = rows.min(axis=0)
    else:
        expected = np.median(rows * row_signs(h2, 3), axis=0)
    got = s.estimate(probe)
    assert np.array_equal(got, expected)
    assert np.array_equal(got, s.estimate(probe))  # repeated queries are identical
    assert s.estimate_one(5) == got[5]
    drawn = s.noise_values_drawn
    s.estimate(probe)
    assert s.noise_values_drawn == drawn


# ------------------------------------------------------------------ S9: Lemma 5 (corrected)


def test_s9_lemma5_cms_error_bounds():
    horizon, eta, beta, eps = 4096, 0.05, 0.2, 0.9
    w, d = lazy_shape(eta, beta, horizon)
    assert (w, d) == (40, 16)
    bound = lazy_noise_bound(horizon, w, d, eps, 1e-3, beta)
    runs, step = 30, 64
    violations = 0
    worst_noise = []
    for r in range(runs):
        keys = (np.random.default_rng(100 + r).zipf(1.3, horizon) % 10_000).astype(np.int64)
        top = np.argsort(-np.bincount(keys, minlength=10_000), kind="stable")[:5]
        s = _sketch(
            LazySketch, width=w, depth=d, horizon=horizon, eps=eps, release_prefix=("s9", r)
        )
        bad = False
        worst = 0.0
        for t in range(step, horizon + 1, step):
            s.update_batch(keys[t - step : t])
            f = (keys[:t, None] == top[None, :]).sum(axis=0)
            err = s.estimate(top) - f
            if np.any(err < -bound - (w - 1)) or np.any(err > eta * t + bound):
                bad = True
            noise = s.noisy_table() - s._mech._total.reshape(d, w)
            worst = max(worst, float(np.abs(noise).max()))
        violations += bad
        worst_noise.append(worst)
    # Each run violates with probability <= beta (expected ~0: union bounds are loose);
    # P[Binomial(30, 0.2) > 18] < 3e-7.
    assert violations <= 18
    # Noise term alone: B_noise(beta') bounds every counter's noise at all times of a run with
    # probability >= 1 - beta'/2; beta' = 2e-6 / runs makes a failure over all runs <= 1e-6.
    strict = lazy_noise_bound(horizon, w, d, eps, 1e-3, 2e-6 / runs)
    assert max(worst_noise) <= strict
    assert np.median(worst_noise) >= bound / 4


# ------------------------------------------------------------------ tick model: step_counts


@pytest.mark.parametrize("cls,kind", BOTH)
def test_step_counts_with_single_arrivals_equals_update(cls, kind):
    keys = _stream(60, seed=9)
    a = _sketch(cls, kind, horizon=60, release_prefix="tick")
    b = _sketch(cls, kind, horizon=60, release_prefix="tick")
    for key in keys.tolist():
        a.update(key)
        pane = EXACT[kind](7, 3, 0)
        pane.update([key])
        b.step_counts(pane if key % 2 else pane.table)
    _assert_same_state(a, b)


def test_step_counts_panes_noise_free():
    w, d = 5, 3
    rng = np.random.default_rng(10)
    s = _sketch(LazySketch, width=w, depth=d, horizon=30, noise_source=ZERO, max_contributions=4)
    exact = CountMinSketch(w, d, 0)
    for _ in range(30):
        pane = CountMinSketch(w, d, 0).update(rng.integers(0, 40, rng.integers(0, 9)))
        exact.merge(pane)
        s.step_counts(pane)
        assert np.array_equal(s._mech._total.reshape(d, w) + s._pending, exact.table)
    assert s.t == 30


@pytest.mark.parametrize(
    "bad,exc,match",
    [
        (np.zeros((3, 6), dtype=np.int64), ValueError, "shape"),
        (np.zeros((3, 7)), TypeError, "integer"),
        (-np.ones((3, 7), dtype=np.int64), ValueError, "non-negative"),
        (np.eye(3, 7, dtype=np.int64) * np.array([[1], [1], [2]]), ValueError, "row"),
        (CountSketch(7, 3, 0), TypeError, "CountMinSketch"),
        (CountMinSketch(7, 3, 1), ValueError, "seed"),
    ],
)
def test_step_counts_validation(bad, exc, match):
    s = _sketch(LazySketch)
    with pytest.raises(exc, match=match):
        s.step_counts(bad)
    assert s.t == 0


# ------------------------------------------------------------------ horizon


@pytest.mark.parametrize("cls", [LazySketch, PunctualSketch])
def test_horizon_is_enforced_and_nothing_changes(cls):
    s = _sketch(cls, horizon=20)
    s.update_batch(_stream(18))
    before = s.to_bytes()
    with pytest.raises(HorizonExceededError, match="T=20"):
        s.update_batch(_stream(3))
    assert s.to_bytes() == before
    s.update_batch(_stream(2))
    with pytest.raises(HorizonExceededError, match="T=20"):
        s.update(1)
    with pytest.raises(HorizonExceededError, match="T=20"):
        s.step_counts(np.zeros((3, 7), dtype=np.int64))
    assert s.t == 20


# ------------------------------------------------------------------ inputs


@pytest.mark.parametrize("cls,kind", BOTH)
def test_key_types_and_prehashed_agree(cls, kind):
    words = [f"w{i % 13}" for i in range(50)]
    ref = _sketch(cls, kind, horizon=300, release_prefix="types")
    for word in words:
        ref.update(word)
    for batch in (words, pa.array(words), np.array(words, dtype=object)):
        other = _sketch(cls, kind, horizon=300, release_prefix="types")
        other.update_batch(batch)
        _assert_same_state(ref, other)
    hashed = _sketch(cls, kind, horizon=300, release_prefix="types")
    hashed.update_batch_hashes(*hash_keys(words, 0))
    _assert_same_state(ref, hashed)
    with pytest.raises(TypeError, match="float"):
        hashed.update(1.5)
    with pytest.raises(TypeError, match="NoneType"):
        hashed.update_batch(["a", None])
    assert hashed.t == 50


# ------------------------------------------------------------------ bytes


@pytest.mark.parametrize("cls,kind", BOTH)
def test_round_trip_mid_stream_is_bit_identical(cls, kind):
    keys = _stream(300, seed=12)
    ref = _sketch(cls, kind, horizon=300, release_prefix="rt")
    ref.update_batch(keys)
    half = _sketch(cls, kind, horizon=300, release_prefix="rt")
    half.update_batch(keys[:131])
    data = half.to_bytes()
    restored = cls.from_bytes(data, SRC)
    assert restored.to_bytes() == data
    restored.update_batch(keys[131:])
    _assert_same_state(ref, restored)
    unpickled = pickle.loads(pickle.dumps(half))
    unpickled.update_batch(keys[131:])
    _assert_same_state(ref, unpickled)


def test_from_bytes_rejects_bad_input():
    s = _sketch(LazySketch, horizon=300)
    s.update_batch(_stream(100))
    data = s.to_bytes()
    with pytest.raises(ValueError, match="noise_source"):
        LazySketch.from_bytes(data, NoiseSource.insecure_for_tests(12))
    with pytest.raises(SketchFormatError):
        PunctualSketch.from_bytes(data, SRC)
    with pytest.raises(SketchFormatError):
        LazySketch.from_bytes(data[:-3], SRC)
    _, params, arrays = serialization.loads(data)
    forged = dict(arrays, pending=arrays["pending"].copy())
    forged["pending"][0, 3] += 1  # row sums no longer agree
    with pytest.raises(SketchFormatError, match="row sums"):
        LazySketch.from_bytes(serialization.dumps("LazySketch", params, forged), SRC)
    with pytest.raises(SketchFormatError, match="match t"):
        LazySketch.from_bytes(serialization.dumps("LazySketch", dict(params, t=7), arrays), SRC)


# ------------------------------------------------------------------ parameter errors


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        ({"width": 0}, ValueError, "width"),
        ({"depth": 65}, ValueError, "depth"),
        ({"horizon": 0}, ValueError, "horizon"),
        ({"kind": "count_min"}, ValueError, "kind"),
        ({"seed": -1}, ValueError, "seed"),
        ({"m": 5}, ValueError, "m must"),
        ({"cs_sensitivity": "2d"}, ValueError, "cs_sensitivity"),
        ({"max_contributions": 0}, ValueError, "max_contributions"),
        ({"release_prefix": None}, TypeError, "release_prefix"),
        ({"delta": 1.0}, ValueError, "delta"),
    ],
)
def test_parameter_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        _sketch(LazySketch, **kwargs)


def test_repr_hides_counts():
    s = _sketch(LazySketch)
    s.update_batch(_stream(50))
    text = repr(s)
    assert "t=50" in text and "pending" not in text and "table" not in text
