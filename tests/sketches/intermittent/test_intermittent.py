"""Core intermittent-query sketches ([YKAE]): API, exactness, calibration of every strategy, the
safety rules of docs/algorithms.md#int-beam, state round trips and the variance oracles.

Statistical tests follow tests/sketches/linear/test_dp_linear_stats.py: seeded data, hash seeds and INSECURE test
noise keys (deterministic), z-tests with ``|z| <= 5.33`` (two-sided p = 1e-7 each) whose variances
are exact (4th moments from the discrete Laplace pmf), so each test fails with probability at most
1e-6 for a correct implementation, under the CLT over >= 2000 independent terms and, for the
hashing part, MurmurHash3 under different seeds as independent random functions.
"""

from __future__ import annotations

import math
import pickle
import warnings
from fractions import Fraction

import numpy as np
import pytest

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import geometric_split_epsilon
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.intermittent.sketch import (
    NOISE_BLOCK,
    IntermittentAnswer,
    UseAndKeepSketch,
    sensitive_query_bound,
)
from beam_dpsketch.sketches.intermittent.strategies import (
    STRATEGIES,
    BatchNaiveSketch,
    BatchSensitiveSketch,
    SingleQuerySketch,
    StaticCellSketch,
    UseAndForgetCellSketch,
    UseAndForgetMedianSketch,
    make_intermittent_sketch,
)

SRC = NoiseSource.insecure_for_tests(9)
ZERO = NoiseSource.zero_noise_for_tests()
Z_MAX = 5.33
EXACT = {"count-sketch": CountSketch, "count-min": CountMinSketch}
FORGET = {"use_and_forget_cell", "use_and_forget_median"}


def make(strategy: str, width=64, depth=5, eps=1.0, source=SRC, sid=None, **kw):
    if strategy in FORGET:
        kw.setdefault("eta", 0.5)
    return make_intermittent_sketch(
        strategy,
        width,
        depth,
        PrivacyBudget.pure(float(eps)),
        noise_source=source,
        release_prefix=sid or ("t", strategy),
        **kw,
    )


def zipf_keys(n: int, seed: int, universe: int = 500) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ((rng.zipf(1.3, n) - 1) % universe).astype(np.int64)


def dlap_moments(scale: float) -> tuple[float, float]:
    """Exact variance and 4th moment of discrete Laplace(scale), from the pmf (independent)."""
    k = math.ceil(80 * scale) + 40
    z = np.arange(-k, k + 1, dtype=float)
    w = np.exp(-np.abs(z) / scale)
    p = w / w.sum()
    return float(np.sum(p * z**2)), float(np.sum(p * z**4))


def sum_moments(var: float, m4: float, r: int) -> tuple[float, float]:
    """Variance and 4th moment of a sum of r iid zero-mean draws."""
    return r * var, r * m4 + 3 * r * (r - 1) * var * var


def assert_variance(samples: np.ndarray, var: float, m4: float) -> None:
    """z-test of the mean of squares (known zero mean) against ``var``, exact SE."""
    n = samples.size
    z = (np.mean(samples.astype(float) ** 2) - var) / math.sqrt((m4 - var * var) / n)
    assert abs(z) <= Z_MAX, (z, np.mean(samples.astype(float) ** 2), var)


# --------------------------------------------------------------------------------------------
# Zero-noise oracle: every strategy answers the exact sketch's estimate
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("kind", ["count-sketch", "count-min"])
def test_zero_noise_answers_equal_exact_sketch(strategy, kind):
    data = zipf_keys(5000, 1)
    sk = make(strategy, width=32, depth=5, source=ZERO, kind=kind, seed=3)
    exact = EXACT[kind](32, 5, 3)
    sk.update(data[:3000])
    exact.update(data[:3000])
    queries = [7] if strategy == "single_query" else np.array([0, 1, 2, 3, 4, 99, 12345, 3, 0])
    ans = sk.answer(queries, time=10)
    np.testing.assert_array_equal(ans.estimates, exact.estimate(queries))
    assert ans.batch == 1 and ans.time == 10 and ans.strategy == strategy
    if strategy in ("single_query", "static_cell"):
        return
    sk.update(data[3000:])
    exact.update(data[3000:])
    ans = sk.answer(queries, time=11)
    np.testing.assert_array_equal(ans.estimates, exact.estimate(queries))


def test_update_hashes_and_counts_match_update():
    data = zipf_keys(2000, 2)
    a = make("use_and_keep", sid="same")
    b = make("use_and_keep", sid="same")
    a.update(data)
    uniq, counts = np.unique(data, return_counts=True)
    b.update_hashes(*hash_keys(uniq, 0), counts=counts)
    q = np.arange(20)
    np.testing.assert_array_equal(a.answer(q).estimates, b.answer(q).estimates)
    assert a == b


def test_string_keys_and_mixed_batches():
    sk = make("use_and_keep", source=ZERO)
    sk.update(["a", "b", "a", ("t", 1), b"x"])
    ans = sk.answer(["a", "b", "zz", ("t", 1), b"x"])
    exact = CountSketch(64, 5, 0).update(["a", "b", "a", ("t", 1), b"x"])
    np.testing.assert_array_equal(ans.estimates, exact.estimate(["a", "b", "zz", ("t", 1), b"x"]))


# --------------------------------------------------------------------------------------------
# D3 mechanics: one draw per used cell per batch, kept; use counts; details; metadata
# --------------------------------------------------------------------------------------------


def test_use_and_keep_noise_accumulates_and_is_kept():
    sk = make("use_and_keep", width=16, depth=3, eps=0.5, sid="acc")
    sk.update(zipf_keys(300, 3))
    exact = CountSketch(16, 3, 0).update(zipf_keys(300, 3))
    first = sk.answer([1, 2, 3], details=True)
    assert np.array_equal(first.cells, np.unique(first.cells))
    # Released cell values minus exact counts = kept noise, also visible in the row values.
    exact_flat = exact.table.reshape(-1)
    noise1 = first.cell_values - exact_flat[first.cells]
    assert np.any(noise1 != 0)
    second = sk.answer([1, 2, 3], details=True)
    np.testing.assert_array_equal(second.cells, first.cells)
    noise2 = second.cell_values - exact_flat[second.cells]
    # A second use adds a fresh draw on top of the kept one (not a replacement; docs/algorithms.md#int-beam).
    assert not np.array_equal(noise2, noise1)
    assert np.all(second.uses == 2) and np.all(first.uses == 1)
    # Cells not read stay exact: the noise table only holds noise where uses > 0.
    counts = sk.use_counts()
    assert counts.sum() == 2 * first.cells.size
    assert set(np.flatnonzero(counts.reshape(-1)).tolist()) == set(first.cells.tolist())
    np.testing.assert_allclose(
        second.row_noise_variance, second.uses * sk.cell_noise_variance(1), rtol=1e-12
    )


def test_duplicates_noise_each_cell_once_and_share_answers():
    # Appendix B item 5: one batch with duplicated queries noises each cell once.
    q = np.array([5, 6, 5, 5, 7, 6])
    a = make("use_and_keep", sid="dup")
    b = make("use_and_keep", sid="dup")
    data = zipf_keys(1000, 4)
    a.update(data)
    b.update(data)
    ra = a.answer(q, details=True)
    rb = b.answer(np.array([7, 6, 5]), details=True)
    assert ra.estimates[0] == ra.estimates[2] == ra.estimates[3]
    assert ra.estimates[1] == ra.estimates[5]
    assert ra.estimates[4] == rb.estimates[0] and ra.estimates[1] == rb.estimates[1]
    np.testing.assert_array_equal(ra.cells, rb.cells)
    np.testing.assert_array_equal(a.use_counts(), b.use_counts())
    assert a.use_counts().max() == 1


def test_use_counts_equal_batches_reading_each_cell():
    sk = make("use_and_keep", width=32, depth=3, sid="uc")
    rng = np.random.default_rng(5)
    expected = np.zeros((3, 32), dtype=np.int64)
    for _ in range(12):
        q = rng.integers(0, 100, rng.integers(1, 8))
        h1, h2 = hash_keys(q, 0)
        read = np.zeros((3, 32), dtype=bool)
        np.put_along_axis(read, row_buckets(h1, h2, 3, 32), True, axis=1)
        expected += read
        sk.answer(q)
    np.testing.assert_array_equal(sk.use_counts(), expected)
    assert sk.batches == 12


def test_empty_batch_releases_nothing():
    sk = make("use_and_keep", sid="empty")
    ans = sk.answer(np.array([], dtype=np.int64), time=3)
    assert ans.batch is None and len(ans) == 0 and sk.batches == 0 and sk.last_time == 3
    assert sk.use_counts().sum() == 0 and sk.epsilon_spent() == 0.0
    assert isinstance(ans, IntermittentAnswer)


def test_noise_std_summary_is_median_of_row_std():
    sk = make("use_and_keep", width=16, depth=5, sid="std")
    for q in ([1], [1, 2], [1, 2, 3]):
        ans = sk.answer(q)
    expected = np.median(np.sqrt(ans.row_noise_variance), axis=0)
    np.testing.assert_allclose(ans.noise_std, expected, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# Calibration of every strategy against the paper's formulas
# --------------------------------------------------------------------------------------------


def dlap_var(scale: float) -> float:
    a = math.exp(-1.0 / scale)
    return 2 * a / (1 - a) ** 2


def test_geometric_split_epsilon():
    # eps_k = eps (1-eta) eta^(k-1); shares telescope to eps (1 - eta^K).
    assert geometric_split_epsilon("0.1", "0.9", 1) == Fraction(1, 100)
    assert geometric_split_epsilon(1, 0.5, 3) == Fraction(1, 8)
    total = sum(geometric_split_epsilon("0.3", "0.7", k) for k in range(1, 21))
    assert total == Fraction(3, 10) * (1 - Fraction(7, 10) ** 20)
    for k in (1, 2, 5, 30):
        assert float(geometric_split_epsilon(0.8, 0.9, k)) == pytest.approx(
            0.8 * 0.1 * 0.9 ** (k - 1), rel=1e-12
        )
    for bad in (0, 1, 1.5, -0.1, "x", float("nan")):
        with pytest.raises(ValueError, match="eta"):
            geometric_split_epsilon(1, bad, 1)
    with pytest.raises(TypeError, match="eta"):
        geometric_split_epsilon(1, None, 1)
    with pytest.raises(ValueError, match="index"):
        geometric_split_epsilon(1, 0.5, 0)


def test_calibration_cell_strategies():
    d3 = make("use_and_keep", depth=5, eps="0.1")
    assert d3.noise_scale == 50  # d / eps, exact ([YKAE, Algorithm 4] line 5)
    s4 = make("static_cell", depth=5, eps="0.1")
    assert s4.noise_scale == 50
    assert d3.cell_noise_variance(3) == pytest.approx(3 * dlap_var(50), rel=1e-12)
    d2 = make("use_and_forget_cell", depth=5, eps="0.1", eta="0.5")
    for r in (1, 2, 7):
        # docs/algorithms.md#int-e10: Lap(1/eps') with eps' = (eps/d)(1-eta)eta^(r-1).
        assert d2.use_scale(r) == Fraction(5) / (Fraction(1, 10) * Fraction(1, 2) ** r)
        assert d2.cell_noise_variance(r) == pytest.approx(
            dlap_var(5 / (0.1 * 0.5 * 0.5 ** (r - 1))), rel=1e-9
        )


def test_calibration_answer_strategies():
    data = zipf_keys(3000, 6)
    q = np.arange(40)
    h1, h2 = hash_keys(q, 0)
    b = row_buckets(h1, h2, 5, 64)
    mhat = sum(max(np.bincount(row, minlength=64)) for row in b)
    mtilde = min(40, mhat)
    assert sensitive_query_bound(np.r_[q, q], 64, 5) == mtilde
    cases = {
        "batch_m_q": (mtilde, 1.0),
        "batch_naive": (40, 1.0),
        "use_and_forget_median": (mtilde, 1.0 * 0.5),
    }
    for strategy, (sens, eps_1) in cases.items():
        sk = make(strategy, depth=5, eps=1.0)
        sk.update(data)
        ans = sk.answer(np.r_[q, q[::-1]])
        np.testing.assert_allclose(ans.noise_std, math.sqrt(dlap_var(sens / eps_1)), rtol=1e-9)
    d1 = make("use_and_forget_median", depth=5, eps=1.0, eta=0.5)
    d1.update(data)
    for k in (1, 2, 3):
        ans = d1.answer(q[:3])  # n_Q = 3 <= d, so m = 3 (Prop. 1)
        eps_k = 0.5 * 0.5 ** (k - 1)
        np.testing.assert_allclose(ans.noise_std, math.sqrt(dlap_var(3 / eps_k)), rtol=1e-9)
        assert ans.epsilon_total == pytest.approx(1 - 0.5**k)
    s1 = make("single_query", depth=5, eps=0.5)
    ans = s1.answer([3, 3])
    np.testing.assert_allclose(ans.noise_std, math.sqrt(dlap_var(2.0)), rtol=1e-9)


def test_epsilon_spent_per_strategy():
    q = np.arange(10)
    spent = {}
    for strategy in sorted(STRATEGIES):
        sk = make(strategy, eps=0.8)
        assert sk.epsilon_spent() == 0.0
        batches = [[1]] if strategy == "single_query" else [q, q, q]
        for b in batches:
            ans = sk.answer(b)
        spent[strategy] = ans.epsilon_total
        assert ans.epsilon_total == sk.epsilon_spent()
    assert spent["use_and_keep"] == pytest.approx(0.8)  # eps in total for any number of batches
    assert spent["static_cell"] == pytest.approx(0.8)
    assert spent["single_query"] == pytest.approx(0.8)
    assert spent["batch_m_q"] == pytest.approx(2.4)  # eps per batch
    assert spent["batch_naive"] == pytest.approx(2.4)
    assert spent["use_and_forget_median"] == pytest.approx(0.8 * (1 - 0.5**3))
    # D2: every queried key reads its cells in all 3 batches: 3 uses in every row's worst cell.
    assert spent["use_and_forget_cell"] == pytest.approx(0.8 * (1 - 0.5**3))


def test_sensitive_query_bound_small_batches():
    # [YKAE, Proposition 1], library choice: mtilde = min(n_Q, mhat_Q); n_Q <= d gives n_Q.
    assert sensitive_query_bound([1, 2, 3], 1000, 5) == 3
    assert sensitive_query_bound([1, 1, 1], 1000, 5) == 1
    assert sensitive_query_bound([], 1000, 5) == 0
    assert sensitive_query_bound(np.arange(10_000), 16, 3) <= 3 * 10_000 // 16 * 2


# --------------------------------------------------------------------------------------------
# Variance oracles (docs/algorithms.md#int-oracles): linear in uses (D3) vs geometric (D2); per-row variance formula
# --------------------------------------------------------------------------------------------

# 60,000 keys read every cell of a 9 x 2048 table (a cell is missed with prob e^-29 per row;
# the test asserts full coverage, so the use counts below are exact).
COVER = np.arange(60_000, dtype=np.int64)


def noise_after_uses(strategy: str, uses: tuple[int, ...], objects: int, **kw) -> dict:
    """Released cell values (the noise, the data being empty) after each use count in ``uses``."""
    h1, h2 = hash_keys(COVER, 0)
    out: dict[int, list[np.ndarray]] = {r: [] for r in uses}
    for obj in range(objects):
        sk = make(strategy, width=2048, depth=9, eps=1.0, sid=("var", strategy, obj), **kw)
        for r in range(1, max(uses) + 1):
            ans = sk.answer_hashes(h1, h2, details=True)
            if r in out:
                assert ans.cells.size == 9 * 2048 and np.all(sk.use_counts() == r)
                out[r].append(ans.cell_values)
    return {r: np.concatenate(v) for r, v in out.items()}


def test_use_and_keep_variance_linear_in_uses():
    # Appendix B item 5 / R11: after r uses the kept noise is a sum of r iid Lap(d/eps) draws,
    # variance r * 2a/(1-a)^2 with a = exp(-eps/d).
    var1, m41 = dlap_moments(9.0)
    samples = noise_after_uses("use_and_keep", (1, 4), objects=3)
    for r, values in samples.items():
        assert_variance(values, *sum_moments(var1, m41, r))


def test_use_and_forget_variance_geometric_in_uses():
    # docs/algorithms.md#int-oracles: the r-th use of D2 carries fresh noise of scale d / (eps (1-eta) eta^(r-1)).
    samples = noise_after_uses("use_and_forget_cell", (1, 2, 3), objects=2, eta=0.5)
    for r, values in samples.items():
        assert_variance(values, *dlap_moments(9.0 / (0.5 * 0.5 ** (r - 1))))


@pytest.mark.parametrize("eta", [0.1, 0.5, 0.9])
def test_forget_cell_variance_exceeds_keep_for_every_use(eta):
    # [YKAE, Section IV-A], derived / Appendix B item 7 (R11): D2's r-th use is noisier than D3 after r uses.
    keep = make("use_and_keep", depth=9, eps=0.05)
    forget = make("use_and_forget_cell", depth=9, eps=0.05, eta=eta)
    for r in range(1, 21):
        assert forget.cell_noise_variance(r) > keep.cell_noise_variance(r)
    # Linear vs geometric growth.
    assert keep.cell_noise_variance(20) == pytest.approx(20 * keep.cell_noise_variance(1))
    assert forget.cell_noise_variance(3) / forget.cell_noise_variance(2) == pytest.approx(
        1 / eta**2, rel=1e-3
    )


def test_per_row_variance_formula():
    # [YKAE, Theorem 5] (docs/algorithms.md#int-e14): Var[s_i(x)(C + N)] = ||f_{-x}||^2 / w + 2 u_i d^2/eps^2 (discrete form
    # u_i * 2a/(1-a)^2), over random hash functions (one seed per trial) and the noise, with
    # E = f_x. Ideal hashing: H = sum_y f_y eps_y B_y with P(B_y) = 1/w gives the 4th moment.
    w, d, eps, u, trials = 8, 3, 0.25, 2, 2500
    counts = np.array([50, 40, 30, 20])
    others = counts[1:].astype(float)
    p = 1.0 / w
    h2_, h4 = float(np.sum(others**2) * p), float(np.sum(others**4) * p)
    h4 += 3 * p * p * (float(np.sum(others**2)) ** 2 - float(np.sum(others**4)))
    v2, v4 = sum_moments(*dlap_moments(d / eps), u)
    var = h2_ + v2
    m4 = h4 + 6 * h2_ * v2 + v4
    rows = np.empty((trials, d))
    for t in range(trials):
        sk = UseAndKeepSketch(
            8,
            d,
            PrivacyBudget.pure(float(eps)),
            noise_source=SRC,
            release_prefix=("row-var", t),
            seed=t,
        )
        sk.update(np.arange(4), counts)
        for _ in range(u):
            ans = sk.answer([0], details=True)
        assert np.all(ans.uses == u)
        rows[t] = ans.row_values[:, 0]
    for i in range(d):
        err = rows[:, i] - 50
        assert abs(err.mean()) <= Z_MAX * math.sqrt(var / trials)
        assert_variance(err, var, m4)
    # The paper's printed variance (u d^2/eps^2, no factor 2) is rejected by the same data.
    z_paper = (np.mean((rows - 50) ** 2) - (h2_ + v2 / 2)) / math.sqrt((m4 - var**2) / rows.size)
    assert z_paper > Z_MAX


# --------------------------------------------------------------------------------------------
# Reproducible keyed noise (I5): retries, restores, query order
# --------------------------------------------------------------------------------------------


def test_noise_is_pure_function_of_source_id_batch_and_cell():
    data = zipf_keys(2000, 7)
    q = np.arange(30)
    a = make("use_and_keep", sid="rep")
    a.update(data)
    before = a.to_bytes()
    first = a.answer(q, details=True)
    # Retry from the pre-batch state with the queries shuffled and duplicated: identical release.
    b = UseAndKeepSketch.from_bytes(before, SRC)
    perm = np.random.default_rng(1).permutation(np.r_[q, q[:5]])
    retry = b.answer(perm, details=True)
    np.testing.assert_array_equal(retry.cells, first.cells)
    np.testing.assert_array_equal(retry.cell_values, first.cell_values)
    np.testing.assert_array_equal(retry.estimates, first.estimates[perm])  # q[i] == i
    # A retry whose batch grew (more queries buffered) gives the SAME value to every common cell.
    c = UseAndKeepSketch.from_bytes(before, SRC)
    grown = c.answer(np.arange(200), details=True)
    common = np.isin(grown.cells, first.cells)
    np.testing.assert_array_equal(grown.cell_values[common], first.cell_values)
    # Other sources or ids give other noise.
    other = make("use_and_keep", sid="rep2")
    other.update(data)
    assert not np.array_equal(other.answer(q, details=True).cell_values, first.cell_values)


def test_noise_block_positions_fixed():
    # Cells of a block read in one batch take fixed positions: reading cell sets A and B in
    # separate objects equals reading A | B in one.
    h1, h2 = hash_keys(np.arange(50), 0)
    both = make("use_and_keep", width=NOISE_BLOCK, depth=3, sid="blk")
    left = make("use_and_keep", width=NOISE_BLOCK, depth=3, sid="blk")
    r_both = both.answer_hashes(h1, h2, details=True)
    r_left = left.answer_hashes(h1[:20], h2[:20], details=True)
    pos = np.searchsorted(r_both.cells, r_left.cells)
    np.testing.assert_array_equal(r_both.cell_values[pos], r_left.cell_values)


def test_batch_draws_are_the_noise_answer_adds():
    # batch_draws(cells, k) is exactly what the k-th batch adds to the kept noise (zero data, so
    # the released cell values after one batch are the draws), and it changes no state.
    sk = make("use_and_keep", sid="draws")
    probe = make("use_and_keep", sid="draws")
    first = sk.answer(np.arange(40), details=True)
    np.testing.assert_array_equal(probe.batch_draws(first.cells, 1), first.cell_values)
    second = sk.answer(np.arange(40), details=True)
    np.testing.assert_array_equal(
        second.cell_values - first.cell_values, probe.batch_draws(second.cells, 2)
    )
    assert probe.batches == 0 and not probe.use_counts().any()
    for bad_cells, bad_k in (([3, 2], 1), ([0, 0], 1), ([-1], 1), ([0], 0), ([0], True)):
        with pytest.raises(ValueError):
            probe.batch_draws(np.array(bad_cells), bad_k)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_state_round_trip_continues_bit_for_bit(strategy):
    data = zipf_keys(4000, 8)
    q1 = [3] if strategy == "single_query" else np.arange(25)
    sk = make(strategy, sid=("rt", strategy))
    sk.update(data[:2000])
    sk.answer(q1, time=1.5)
    restored = type(sk).from_bytes(sk.to_bytes(), SRC)
    assert restored == sk and restored.batches == sk.batches and restored.last_time == 1.5
    assert pickle.loads(pickle.dumps(sk)) == sk
    if strategy in ("single_query", "static_cell"):
        more = [[2]] if strategy == "static_cell" else []
    else:
        restored.update(data[2000:])
        sk.update(data[2000:])
        more = [np.arange(10, 40), np.arange(5)]
    for i, q in enumerate(more):
        a, b = sk.answer(q, time=2 + i), restored.answer(q, time=2 + i)
        np.testing.assert_array_equal(a.estimates, b.estimates)
    assert restored.to_bytes() == sk.to_bytes()


def test_from_bytes_refuses_wrong_source_and_malformed_bytes():
    sk = make("use_and_keep", sid="fb")
    sk.update([1, 2, 3])
    sk.answer([1])
    data = sk.to_bytes()
    with pytest.raises(ValueError, match="noise_source"):
        UseAndKeepSketch.from_bytes(data, NoiseSource.insecure_for_tests(10))
    with pytest.raises(TypeError, match="noise_source"):
        UseAndKeepSketch.from_bytes(data, None)
    with pytest.raises(SketchFormatError):
        StaticCellSketch.from_bytes(data, SRC)
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        with pytest.raises(SketchFormatError):
            UseAndKeepSketch.from_bytes(data[:cut], SRC)
    corrupted = bytearray(data)
    corrupted[len(data) // 2] ^= 0xFF
    with pytest.raises(SketchFormatError):
        UseAndKeepSketch.from_bytes(bytes(corrupted), SRC)


def test_from_bytes_checks_invariants():
    from beam_dpsketch import serialization

    sk = make("use_and_keep", width=8, depth=3, sid="inv")
    sk.answer([1])
    _, params, arrays = serialization.loads(sk.to_bytes())
    arrays = dict(arrays)
    bad_noise = arrays["noise"].copy()
    bad_noise[arrays["uses"] == 0] = 5
    forged = serialization.dumps(sk.KIND, params, {**arrays, "noise": bad_noise})
    with pytest.raises(SketchFormatError, match="never used"):
        UseAndKeepSketch.from_bytes(forged, SRC)
    forged = serialization.dumps(sk.KIND, params, {**arrays, "uses": arrays["uses"] * 7})
    with pytest.raises(SketchFormatError, match="use counts"):
        UseAndKeepSketch.from_bytes(forged, SRC)
    forged = serialization.dumps(sk.KIND, {**params, "noise_block": 8}, arrays)
    with pytest.raises(SketchFormatError, match="block"):
        UseAndKeepSketch.from_bytes(forged, SRC)


# --------------------------------------------------------------------------------------------
# Safety rules of docs/algorithms.md#int-beam: merges, deltas vs snapshots, one noise owner, schedules
# --------------------------------------------------------------------------------------------


def test_exact_shards_merge_into_private_object():
    data = zipf_keys(6000, 9)
    direct = make("use_and_keep", sid="m")
    direct.update(data)
    merged = make("use_and_keep", sid="m")
    for part in np.array_split(data, 4):
        merged.add_counts(CountSketch(64, 5, 0).update(part))
    q = np.arange(50)
    np.testing.assert_array_equal(direct.answer(q).estimates, merged.answer(q).estimates)
    # A private object that has not answered is an exact shard too.
    late = make("use_and_keep", sid="m")
    late.update(data[:100])
    direct.update(data[:100])
    merged.merge(late)
    np.testing.assert_array_equal(direct.answer(q).estimates, merged.answer(q).estimates)


def test_merging_noise_owners_is_refused():
    a = make("use_and_keep", sid="o")
    b = make("use_and_keep", sid="o")
    b.answer([1])
    with pytest.raises(ValueError, match="second owner"):
        a.merge(b)
    with pytest.raises(ValueError, match="configurations differ"):
        a.merge(make("use_and_keep", sid="other"))
    with pytest.raises(ValueError, match="configurations differ"):
        a.merge(make("static_cell", sid="o"))
    with pytest.raises(TypeError, match="cannot merge"):
        a.merge(np.zeros((5, 64), dtype=np.int64))


def test_add_counts_refuses_foreign_tables():
    sk = make("use_and_keep", sid="ac")
    with pytest.raises(TypeError, match="raw table"):
        sk.add_counts(np.zeros((5, 64), dtype=np.int64))
    with pytest.raises(TypeError, match="CountSketch"):
        sk.add_counts(CountMinSketch(64, 5, 0))
    with pytest.raises(ValueError, match="seed"):
        sk.add_counts(CountSketch(64, 5, 1))
    with pytest.raises(ValueError, match="negative"):
        sk.add_counts(CountSketch(64, 5, 0).update([1], counts=[-1]))
    cm = make("use_and_keep", sid="ac", kind="count-min")
    with pytest.raises(ValueError, match="negative"):
        cm.add_counts(CountMinSketch(64, 5, 0).update([1, 2], counts=[3, -1]))


def test_snapshots_are_converted_not_added_as_deltas():
    data = zipf_keys(3000, 10)
    exact = CountSketch(64, 5, 0)
    snap = make("use_and_keep", source=ZERO, sid="s")
    wrong = make("use_and_keep", source=ZERO, sid="s")
    for part in np.array_split(data, 3):
        exact.update(part)
        snap.add_snapshot(exact.copy())
        # docs/algorithms.md#int-beam item 2 mistake: old elements recounted
        wrong.add_counts(exact.copy())
    q = np.arange(10)
    np.testing.assert_array_equal(snap.answer(q).estimates, exact.estimate(q))
    assert not np.array_equal(wrong.answer(q).estimates, exact.estimate(q))
    assert snap.ingest_mode == "snapshot" and wrong.ingest_mode == "delta"
    with pytest.raises(ValueError, match="backwards"):
        snap.add_snapshot(CountSketch(64, 5, 0).update(data[:10]))
    with pytest.raises(ValueError, match="snapshot"):
        snap.add_counts(CountSketch(64, 5, 0).update([1]))
    with pytest.raises(ValueError, match="snapshot"):
        snap.update([1])
    with pytest.raises(ValueError, match="delta"):
        wrong.add_snapshot(exact.copy())
    cm = make("use_and_keep", sid="s", kind="count-min")
    cm.add_snapshot(CountMinSketch(64, 5, 0).update([1, 1, 2]))
    with pytest.raises(ValueError, match="backwards"):
        cm.add_snapshot(CountMinSketch(64, 5, 0).update([1, 2, 3]))


def test_negative_counts_refused():
    sk = make("use_and_keep", sid="neg")
    with pytest.raises(ValueError, match="retraction"):
        sk.update([1, 2], counts=[1, -1])
    with pytest.raises(TypeError, match="counts"):
        sk.update([1, 2], counts=[1.5, 1.0])


def test_times_must_increase_and_queries_must_be_declared():
    sk = make("use_and_keep", sid="time")
    sk.answer([1], time=5)
    for bad in (5, 4.9):
        with pytest.raises(ValueError, match="increase"):
            sk.answer([1], time=bad)
    with pytest.raises(ValueError, match="finite"):
        sk.answer([1], time=float("nan"))
    with pytest.raises(TypeError, match="time"):
        sk.answer([1], time=True)
    with pytest.raises(TypeError, match="time"):
        sk.answer([1], time="6")
    ans = sk.answer([1], time=6)
    assert sk.batches == 2 and sk.last_time == 6
    with pytest.raises(TypeError, match="derived from the sketch"):
        sk.answer(ans)
    with pytest.raises(TypeError, match="derived from the sketch"):
        sk.answer(sk)
    with pytest.raises(TypeError, match="floats are not keys"):
        sk.answer(ans.estimates)
    with pytest.raises(TypeError, match="uint64"):
        sk.answer_hashes(np.array([1, 2]), np.array([1, 2]))
    with pytest.raises(TypeError, match="NoneType"):
        sk.answer([None])
    assert sk.batches == 2  # failed calls change nothing


def test_static_and_single_query_limits():
    s4 = make("static_cell", sid="s4")
    s4.update([1, 2, 3])
    first = s4.answer([1, 2], details=True)
    with pytest.raises(ValueError, match="S4"):
        s4.update([4])
    with pytest.raises(ValueError, match="S4"):
        s4.add_counts(CountSketch(64, 5, 0))
    # More queries at the same state reuse the kept noise of the cells already read.
    again = s4.answer([2, 1, 9], details=True)
    np.testing.assert_array_equal(again.estimates[:2], first.estimates[::-1])
    assert s4.use_counts().max() == 1 and s4.epsilon_spent() == 1.0
    s1 = make("single_query", sid="s1")
    with pytest.raises(ValueError, match="one distinct key"):
        s1.answer([1, 2])
    s1.answer([1, 1])
    with pytest.raises(ValueError, match="one distinct key"):
        s1.answer([1])


def test_use_and_forget_budget_exhaustion_is_an_error():
    d2 = make("use_and_forget_cell", width=8, depth=1, eps=1.0, eta=0.001, sid="ex")
    # 6th use: scale 1/(0.999 * 0.001**5) ~ 1e15 <= 2**52; the 7th would be ~1e18.
    for _ in range(6):
        d2.answer([1])
    with pytest.raises(ValueError, match="exhausted"):
        d2.answer([1])
    assert d2.batches == 6 and d2.use_counts().max() == 6
    d1 = make("use_and_forget_median", width=8, depth=1, eps=1.0, eta=0.001, sid="ex")
    for _ in range(6):
        d1.answer([1])
    with pytest.raises(ValueError, match="exhausted"):
        d1.answer([1])


# --------------------------------------------------------------------------------------------
# Parameter errors
# --------------------------------------------------------------------------------------------


def test_parameter_errors():
    with pytest.raises(ValueError, match="width"):
        make("use_and_keep", width=1)
    with pytest.raises(ValueError, match="depth"):
        make("use_and_keep", depth=0)
    with pytest.raises(TypeError, match="width"):
        make("use_and_keep", width=2.5)
    with pytest.raises(ValueError, match="kind"):
        make("use_and_keep", kind="cms")
    with pytest.raises(ValueError, match="epsilon"):
        make("use_and_keep", eps=0)
    with pytest.raises(ValueError, match="epsilon"):
        make("use_and_keep", eps=float("inf"))
    with pytest.raises(ValueError, match="strategy"):
        make_intermittent_sketch(
            "d3", 8, 3, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1
        )
    with pytest.raises(TypeError, match="noise_source"):
        UseAndKeepSketch(8, 3, PrivacyBudget.pure(1.0), noise_source=b"key", release_prefix=1)
    with pytest.raises(TypeError, match="release_prefix"):
        UseAndKeepSketch(8, 3, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=[1])
    with pytest.raises(TypeError, match="eta"):
        # no default (docs/algorithms.md#int-a12)
        UseAndForgetCellSketch(8, 3, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1)
    for bad in (0, 1, 1.2):
        with pytest.raises(ValueError, match="eta"):
            UseAndForgetMedianSketch(
                8, 3, PrivacyBudget.pure(1.0), eta=bad, noise_source=SRC, release_prefix=1
            )
    for cls in (SingleQuerySketch, BatchNaiveSketch, BatchSensitiveSketch):
        with pytest.raises(ValueError, match="depth must be odd"):
            cls(8, 4, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1)
        cls(
            8, 4, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1, kind="count-min"
        )  # min is an integer
    with pytest.warns(UserWarning, match="even"):
        UseAndKeepSketch(8, 4, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UseAndKeepSketch(
            8, 4, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1, kind="count-min"
        )


def test_even_depth_median_is_mean_of_middle_rows():
    with pytest.warns(UserWarning):
        sk = UseAndKeepSketch(
            16, 4, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix="even"
        )
    sk.update(zipf_keys(500, 11))
    ans = sk.answer(np.arange(8), details=True)
    np.testing.assert_array_equal(ans.estimates, np.median(ans.row_values, axis=0))


def test_describe_and_repr():
    sk = make("use_and_forget_cell", sid="desc", eta="0.9")
    sk.answer([1, 2])
    info = sk.describe()
    assert info["strategy"] == "use_and_forget_cell" and info["batches"] == 1
    assert info["epsilon_spent"] == pytest.approx(sk.epsilon_spent())
    assert sk.eta == Fraction(9, 10)
    assert "UseAndForgetCellSketch" in repr(sk) and "key" not in repr(sk).lower()
    assert sk.memory_bytes() >= 5 * 64 * 12


def test_replace_one_budget_halves_the_add_remove_epsilon_exactly():
    # neighbouring="replace": a replacement is one removal plus one addition in one increment,
    # so the cells are calibrated for epsilon / 2 under add/remove (noise scale 2 d / eps).
    budget = PrivacyBudget.pure(0.5)
    add_remove = UseAndKeepSketch(8, 3, budget, noise_source=SRC, release_prefix="r")
    replace = UseAndKeepSketch(
        8, 3, budget, noise_source=SRC, release_prefix="r", neighbouring="replace"
    )
    assert (add_remove.neighbouring, replace.neighbouring) == ("add_remove", "replace")
    assert replace.epsilon == add_remove.epsilon / 2
    assert replace.noise_scale == 2 * add_remove.noise_scale
    restored = UseAndKeepSketch.from_bytes(replace.to_bytes(), SRC)
    assert (restored.neighbouring, restored.epsilon) == ("replace", replace.epsilon)
    with pytest.raises(ValueError, match="neighbouring: 'replace' is analysed for UseAndKeep"):
        UseAndForgetCellSketch(
            8, 3, budget, eta=0.5, noise_source=SRC, release_prefix=1, neighbouring="replace"
        )
    with pytest.raises(ValueError, match="neighbouring must be one of"):
        UseAndKeepSketch(8, 3, budget, noise_source=SRC, release_prefix=1, neighbouring="swap")
    with pytest.raises(ValueError, match="pure DP"):
        UseAndKeepSketch(8, 3, PrivacyBudget.approx(1.0, 1e-6), noise_source=SRC, release_prefix=1)
