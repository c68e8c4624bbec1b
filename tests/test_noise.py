"""Tests for beam_dpsketch.noise: keyed ChaCha20 streams and the exact CKS samplers.

Every statistical test draws from ``NoiseSource.insecure_for_tests(seed)`` with a fixed seed and a
fixed release id, so it is deterministic and cannot flake. Each is built so that, for a uniformly
random key, it would fail with probability at most ``ALPHA = 1e-6`` (the split of ``ALPHA`` among
a test's assertions is stated next to them). Bounds on means and second moments are rigorous
(Bernstein / nonnegative-lower-tail inequalities on exactly computed moments, with a truncation
event), not CLT approximations; chi-square tests use the usual asymptotic chi-square law with
expected counts pooled to at least 5.
"""

from __future__ import annotations

import ast
import decimal
import functools
import hashlib
import hmac
import math
import pickle
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy import stats

from beam_dpsketch import noise
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import (
    INSECURE_TEST_KEY,
    NoiseSource,
    NoiseStream,
    check_release_source,
    discrete_gaussian,
    discrete_laplace,
    gaussian,
    laplace,
    new_secret_key,
)

ALPHA = 1e-6
N_LAPLACE = 1_000_000
N_GAUSS = 1_000_000
N_CONT = 300_000

LAPLACE_SCALES = [0.5, 1, 3.7, Fraction(10, 3), 50]
GAUSS_SIGMAS = [0.8, 2, 10, 1000]


def stream(seed: int = 0, release: object = "test") -> NoiseStream:
    return NoiseSource.insecure_for_tests(seed).stream(release)


# --------------------------------------------------------------------------------------------
# Statistical helpers
# --------------------------------------------------------------------------------------------


def pooled_chi2(
    samples: np.ndarray,
    lo: int,
    pmf: np.ndarray,
    left: float,
    right: float,
    alpha: float = ALPHA,
) -> None:
    """Chi-square goodness of fit on the integers ``lo .. lo + len(pmf) - 1``, at level alpha.

    ``left``/``right`` are the exact masses below/above the range; they join the end bins, and
    adjacent values are pooled from the left until each bin expects at least 5 samples.
    """
    n = samples.size
    expected = n * pmf.astype(np.float64)
    expected[0] += n * left
    expected[-1] += n * right
    starts = [0]
    acc = 0.0
    for i, e in enumerate(expected):
        acc += e
        if acc >= 5 and i + 1 < expected.size:
            starts.append(i + 1)
            acc = 0.0
    if acc < 5 and len(starts) > 1:
        starts.pop()
    starts_arr = np.array(starts)
    exp_bins = np.add.reduceat(expected, starts_arr)
    clipped = np.clip(samples, lo, lo + pmf.size - 1) - lo
    obs = np.add.reduceat(np.bincount(clipped, minlength=pmf.size).astype(np.float64), starts_arr)
    assert exp_bins.min() >= 5
    stat = float(((obs - exp_bins) ** 2 / exp_bins).sum())
    df = exp_bins.size - 1
    crit = float(stats.chi2.isf(alpha, df))
    assert stat < crit, f"chi-square {stat:.1f} >= critical {crit:.1f} (df={df})"


def moment_bounds(
    zs: np.ndarray, pmf: np.ndarray, n: int, delta: float
) -> tuple[float, float, float, float]:
    """Rigorous acceptance bounds for the sample mean and second moment of ``n`` iid draws.

    For a symmetric pmf on ``zs`` (mean 0). Let ``T`` be the smallest integer with
    ``n * P[|Z| > T] <= delta/3``; on the event that no draw exceeds ``T`` the draws equal their
    truncations, which are bounded. Then (each a one- or two-sided tail <= the stated share):

    * mean: Bernstein for ``|Z'| <= T``, variance ``<= mu2``: ``P[|mean| >= x_m] <= delta/3``;
    * second moment, lower tail: for nonnegative ``X = Z**2``,
      ``P[mean(X) <= mu2 - x] <= exp(-n x**2 / (2 E[X**2]))`` (``delta/6``), no truncation needed;
    * second moment, upper tail: Bernstein for ``0 <= Z'**2 <= T**2``, variance ``<= mu4``
      (``delta/6``).

    Returns ``(x_mean, mu2, x_low, x_high)``; a correct sampler fails with probability <= delta.
    """
    pmf = pmf / pmf.sum()
    z = zs.astype(np.float64)
    mu2 = float((pmf * z * z).sum())
    mu4 = float((pmf * z**4).sum())
    # tail[a] = P[|Z| > a], accumulated from the outside in.
    p_abs = np.bincount(np.abs(zs), weights=pmf)
    tail = np.append(np.cumsum(p_abs[::-1])[::-1][1:], 0.0)
    t_trunc = int(np.flatnonzero(n * tail <= delta / 3)[0])

    def bernstein(v: float, b: float, log_term: float) -> float:
        # Solve n x^2 = 2 log_term (v + b x / 3) for x > 0.
        c1 = 2 * log_term * b / 3
        return (c1 + math.sqrt(c1 * c1 + 8 * n * log_term * v)) / (2 * n)

    x_mean = bernstein(mu2, t_trunc, math.log(6 / delta))
    x_low = math.sqrt(2 * mu4 * math.log(6 / delta) / n)
    x_high = bernstein(mu4, float(t_trunc) ** 2, math.log(6 / delta))
    return x_mean, mu2, x_low, x_high


def check_moments(samples: np.ndarray, zs: np.ndarray, pmf: np.ndarray) -> None:
    x_mean, mu2, x_low, x_high = moment_bounds(zs, pmf, samples.size, ALPHA)
    mean = float(samples.mean())
    second = float((samples.astype(np.float64) ** 2).mean())
    assert abs(mean) <= x_mean, (mean, x_mean)
    assert mu2 - x_low <= second <= mu2 + x_high, (second, mu2, x_low, x_high)


def binomial_interval(n: int, p: float, alpha: float) -> tuple[float, float]:
    """Exact two-sided acceptance interval for Binomial(n, p) with total tail <= alpha."""
    return float(stats.binom.ppf(alpha / 2, n, p)), float(stats.binom.isf(alpha / 2, n, p))


# --------------------------------------------------------------------------------------------
# Exact reference distributions
# --------------------------------------------------------------------------------------------


def laplace_param(scale: object) -> float:
    """``a = exp(-1/scale)``. Independent of the module under test on purpose: its rounding of a
    float scale (relative ``< 2**-40``) is far below what any test here can detect."""
    return math.exp(-1.0 / float(scale))


def laplace_pmf(scale: object, m: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``zs = -m..m``, their pmf ``(1-a)/(1+a) a^|z|`` and the one-sided tail ``P[Z > m]``."""
    a = laplace_param(scale)
    zs = np.arange(-m, m + 1)
    pmf = (1 - a) / (1 + a) * a ** np.abs(zs).astype(np.float64)
    return zs, pmf, a ** (m + 1) / (1 + a)


def gauss_pmf(sigma: object) -> tuple[np.ndarray, np.ndarray]:
    s2 = float(sigma) ** 2  # as in laplace_param: independent of the sampler's rounding
    m = math.ceil(40 * math.sqrt(s2)) + 5
    zs = np.arange(-m, m + 1)
    w = np.exp(-(zs.astype(np.float64) ** 2) / (2 * s2))
    return zs, w / w.sum()


@functools.cache
def laplace_samples(scale: object) -> np.ndarray:
    return discrete_laplace(stream(11, ("laplace", str(scale))), scale, N_LAPLACE)


@functools.cache
def gauss_samples(sigma: object) -> np.ndarray:
    return discrete_gaussian(stream(12, ("gauss", str(sigma))), sigma, N_GAUSS)


# --------------------------------------------------------------------------------------------
# Keys and streams
# --------------------------------------------------------------------------------------------


def test_new_secret_key_is_random_32_bytes():
    a, b = new_secret_key(), new_secret_key()
    assert isinstance(a, bytes) and len(a) == 32 and a != b
    assert not NoiseSource(a).is_insecure
    assert not NoiseSource().is_insecure


def test_insecure_keys_are_marked():
    assert isinstance(INSECURE_TEST_KEY, bytes) and len(INSECURE_TEST_KEY) == 32
    assert NoiseSource(INSECURE_TEST_KEY).is_insecure
    assert NoiseSource.insecure_for_tests(5).is_insecure
    assert "INSECURE" in repr(NoiseSource.insecure_for_tests(5))


def test_stream_matches_documented_derivation():
    secret = bytes(range(32))
    rid = ("DPHeavyHitters/3", 1_700_000_000, 1_700_000_060, 0)
    key = hmac.new(secret, b"beam-dpsketch/noise/v1" + encode_key(rid), hashlib.sha256).digest()
    raw = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor().update(bytes(80))
    got = NoiseSource(secret).stream(rid).uint64(10)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, np.frombuffer(raw, dtype="<u8"))


def test_same_key_and_release_reproduce():
    for seed in (0, 7):
        a = NoiseSource.insecure_for_tests(seed).stream(("w", 3, b"x"))
        b = NoiseSource.insecure_for_tests(seed).stream(("w", 3, b"x"))
        np.testing.assert_array_equal(a.uint64(100), b.uint64(100))
        np.testing.assert_array_equal(discrete_laplace(a, 2.5, 500), discrete_laplace(b, 2.5, 500))
        np.testing.assert_array_equal(discrete_gaussian(a, 3, 500), discrete_gaussian(b, 3, 500))
        np.testing.assert_array_equal(gaussian(a, 0.3, 50), gaussian(b, 0.3, 50))


def test_different_release_or_key_differ():
    base = stream(0, "r1").uint64(8)
    assert not np.array_equal(base, stream(0, "r2").uint64(8))
    assert not np.array_equal(base, stream(1, "r1").uint64(8))
    assert not np.array_equal(base, stream(0, ("r1",)).uint64(8))
    assert not np.array_equal(base, NoiseSource(b"\x01" * 32).stream("r1").uint64(8))


def test_chunked_consumption_equals_one_call():
    a, b = stream(3, "chunks"), stream(3, "chunks")
    np.testing.assert_array_equal(np.concatenate([a.uint64(3), a.uint64(5)]), b.uint64(8))
    # Across the 64 KiB refill boundary as well.
    parts = [a.uint64(1000) for _ in range(20)]
    np.testing.assert_array_equal(np.concatenate(parts), b.uint64(20_000))
    assert a.position == b.position == 8 * 20_008


def test_large_draw_crossing_buffer():
    a, b = stream(3, "big"), stream(3, "big")
    a.uint64(1)
    first = a.uint64(100_000)
    np.testing.assert_array_equal(first, b.uint64(100_001)[1:])


def test_secret_key_validation():
    with pytest.raises(ValueError, match="secret_key"):
        NoiseSource(b"short")
    with pytest.raises(TypeError, match="secret_key"):
        NoiseSource("a string key that is long enough")
    assert NoiseSource(bytearray(16)).stream("x").uint64(1).shape == (1,)


def test_release_id_validation():
    with pytest.raises(TypeError, match="release_id"):
        NoiseSource.insecure_for_tests().stream(None)
    with pytest.raises(TypeError, match="release_id"):
        NoiseSource.insecure_for_tests().stream(("ok", 1.5))


def test_source_pickles_and_hides_key():
    secret = b"\xab" * 32
    src = NoiseSource(secret)
    assert secret.hex() not in repr(src) and "ab" * 8 not in repr(src)
    clone = pickle.loads(pickle.dumps(src))
    np.testing.assert_array_equal(clone.stream("r").uint64(4), src.stream("r").uint64(4))
    assert b"\xab" * 32 in pickle.dumps(src)  # the key is all it stores
    assert len(pickle.dumps(src)) < 200


def test_stream_pickles_mid_way():
    a, b = stream(4, "pickle"), stream(4, "pickle")
    a.uint64(9_000)
    a.random_bits(13)  # 2 bytes: an unaligned position
    b.uint64(9_000)
    b.random_bits(13)
    restored = pickle.loads(pickle.dumps(a))
    assert restored.position == a.position == 72_002
    np.testing.assert_array_equal(restored.uint64(50), b.uint64(50))
    assert "pickle" in repr(restored)


def test_random_bits():
    s = stream(5, "bits")
    bits = s.random_bits(80_000)
    assert bits.dtype == np.bool_ and bits.shape == (80_000,)
    assert s.position == 10_000
    # Two-sided binomial test, false-failure rate ALPHA.
    lo, hi = binomial_interval(80_000, 0.5, ALPHA)
    assert lo <= bits.sum() <= hi


# --------------------------------------------------------------------------------------------
# uniform_below
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [1, 2, 7, 1000, 2**26 + 1, 2**32, 2**40 + 3, 3 * 2**61, 2**63])
def test_uniform_below_range(bound):
    v = stream(6, ("range", bound)).uniform_below(bound, 20_000)
    assert v.dtype == np.int64 and v.shape == (20_000,)
    assert v.min() >= 0 and v.max() <= bound - 1


@pytest.mark.parametrize("bound", [1000, 2**40 + 3, 3 * 2**61])
def test_uniform_below_chi2(bound):
    n = 200_000
    v = stream(6, ("chi2", bound)).uniform_below(bound, n)
    bins = 100
    edges = [-(-i * bound // bins) for i in range(bins + 1)]  # ceil(i * bound / bins)
    pmf = np.array([(edges[i + 1] - edges[i]) / bound for i in range(bins)])
    # Value x lies in bin floor(x * bins / bound), exactly (Python ints: floats would round).
    idx = (v.astype(object) * bins // bound).astype(np.int64)
    pooled_chi2(idx, 0, pmf, 0.0, 0.0)


def test_uniform_below_validation():
    s = stream()
    with pytest.raises(ValueError, match="bound"):
        s.uniform_below(0, 3)
    with pytest.raises(ValueError, match="bound"):
        s.uniform_below(2**63 + 1, 3)
    with pytest.raises(TypeError, match="bound"):
        s.uniform_below(2.0, 3)
    with pytest.raises(ValueError, match="n"):
        s.uniform_below(5, -1)
    with pytest.raises(ValueError, match="n"):
        s.uint64(-2)
    assert s.uniform_below(5, 0).shape == (0,)


# --------------------------------------------------------------------------------------------
# Exact building blocks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num", "den"), [(1, 3), (999, 1000), (0, 7), (5, 2**30 + 1), (2**40, 2**41 + 1)]
)
def test_bernoulli_exp_neg_fraction(num, den):
    n = 200_000
    s = stream(7, ("bexp", num, den))
    got = noise._bernoulli_exp_neg_fraction(s, np.full(n, num, dtype=np.int64), den)
    if num == 0:
        assert got.all()  # exp(0) = 1
        return
    # Exact two-sided binomial test at level ALPHA.
    lo, hi = binomial_interval(n, math.exp(-num / den), ALPHA)
    assert lo <= got.sum() <= hi


def test_bernoulli_exp_neg_one_and_int():
    n = 200_000
    s = stream(7, "bexp-int")
    # Two assertions, ALPHA/2 each.
    lo, hi = binomial_interval(n, math.exp(-1), ALPHA / 2)
    assert lo <= noise._bernoulli_exp_neg_one(s, n).sum() <= hi
    lo, hi = binomial_interval(n, math.exp(-2), ALPHA / 2)
    assert lo <= noise._bernoulli_exp_neg_int(s, np.full(n, 2, dtype=np.int64)).sum() <= hi


def test_bernoulli_exp_neg_int_huge_m():
    s = stream(7, "huge-m")
    m = np.array([0, 3, 2**70, 2**62 + 1], dtype=object)
    got = noise._bernoulli_exp_neg_int(s, m)
    assert got.dtype == np.bool_ and got[0]
    assert not got[2] and not got[3]


def test_geometric_exp_neg_one_distribution():
    n = 200_000
    v = noise._geometric_exp_neg_one(stream(7, "geo"), n)
    m = 40
    q = math.exp(-1)
    pmf = (1 - q) * q ** np.arange(m + 1)
    pooled_chi2(v, 0, pmf, 0.0, q ** (m + 1))


# --------------------------------------------------------------------------------------------
# Bounds behind the fast exact decisions (checked against independent 80-digit arithmetic)
# --------------------------------------------------------------------------------------------

U53 = 2.0**-53


def dec_exp_neg(x: Fraction, digits: int = 80) -> decimal.Decimal:
    """``exp(-x)`` to ``digits`` significant digits with the standard library's decimal module
    (correctly rounded ``exp``; the quotient ``p/q`` is rounded at the same precision), an
    implementation independent of the module's integer series."""
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        return (-(decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator))).exp()


def dec_floor_scaled(x: Fraction, bits: int) -> int:
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        return int((dec_exp_neg(x) * (1 << bits)).to_integral_value(rounding=decimal.ROUND_FLOOR))


def test_integer_thresholds_are_exact_floors():
    # F_v = floor(exp(-v) 2**64) for v = 1..44; an off-by-one in any of them fails here.
    want = [dec_floor_scaled(Fraction(v), 64) for v in range(1, 45)]
    assert list(noise._EXP_NEG_INT_THRESHOLDS) == want
    assert dec_exp_neg(Fraction(45)) * (1 << 64) < 1  # v >= 45 is decided by U >= 1
    assert noise._INT_THRESHOLD.tolist() == [0, *want, 0]


def test_geometric_tables_match_thresholds():
    f = noise._EXP_NEG_INT_THRESHOLDS
    for bitlen in range(12, 65):
        idx = 1011 + bitlen
        assert noise._GEO_COUNT[idx] == sum(x >= 1 << bitlen for x in f)
        inside = [x for x in f if x.bit_length() == bitlen]
        assert len(inside) <= 1
        assert int(noise._GEO_THRESHOLD[idx]) == (inside[0] if inside else 0)


@pytest.mark.parametrize("prec", [2, 53, 66, 130, 300])
def test_exp_neg_interval_contains_exp(prec):
    xs = [Fraction(0), Fraction(1), Fraction(1, 3), Fraction(2**62 - 58, 2**62 - 57)]
    xs += [Fraction(7, 2), Fraction(44), Fraction(45), Fraction(2**40 + 1, 2**40) * 30]
    xs += [
        Fraction(int(a), int(b)) for a, b in np.random.default_rng(1).integers(1, 2**62, (20, 2))
    ]
    for x in xs:
        lo, hi = noise._exp_neg_interval(x, prec)
        with decimal.localcontext() as ctx:
            ctx.prec = 200
            true = dec_exp_neg(x, 200) * decimal.Decimal(2) ** prec
        assert lo <= true <= hi, (x, prec)
        assert hi - lo <= 2, (x, prec)


def test_exp_neg_float_tables_are_correctly_rounded():
    for j in range(0, 4097, 7):
        exact = dec_exp_neg(Fraction(j, 4096)) * (1 << 53)
        assert abs(decimal.Decimal(noise._EXP_TABLE[j]) - exact) <= exact * decimal.Decimal(U53)
    for m in range(65):
        exact = dec_exp_neg(Fraction(m))
        got = decimal.Decimal(float(noise._EXP_NEG_INT_HI[m]))
        assert abs(got - exact) <= exact * decimal.Decimal(U53)
    assert noise._EXP_NEG_INT_LO[64] == 0.0


@pytest.mark.parametrize("den", [2, 77, 4096, 2**26 + 1, 2**40 + 3, 3 * 2**60 + 1, 2**62 - 57])
def test_float_bounds_bracket_exp(den):
    # The error analysis in noise.py promises a relative error below 26u for exp(-num/den)*2**53;
    # the brackets add the margin 2**-40. Check both on random numerators, the ends of [0, den)
    # and the numerators next to the table's breakpoints j/4096.
    rng = np.random.default_rng(den % 1000)
    nums = {0, 1, den - 1} | {int(x) for x in rng.integers(0, den, 300)}
    for j in range(1, 4096, 97):
        b = j * den // 4096
        nums |= {max(0, b - 1), b, min(den - 1, b + 1)}
    num = np.array(sorted(nums), dtype=np.int64)
    p = noise._exp_neg_scaled(num, den)
    worst = 0.0
    for ni, pi in zip(num.tolist(), p.tolist(), strict=True):
        exact = dec_exp_neg(Fraction(ni, den)) * (1 << 53)
        rel = abs(decimal.Decimal(pi) / exact - 1)
        worst = max(worst, float(rel))
        lo, hi = pi * (1 - noise._MARGIN), pi * (1 + noise._MARGIN)
        assert decimal.Decimal(lo) <= exact <= decimal.Decimal(hi)
    assert worst <= 26 * U53, worst


# --------------------------------------------------------------------------------------------
# The exact fallback path (words the bounds leave undecided)
# --------------------------------------------------------------------------------------------


def frac_part_scaled(x: Fraction) -> float:
    """``exp(-x) * 2**64 - floor(...)``: P[R < exp(-x)] given that R's first word is the floor."""
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        v = dec_exp_neg(x) * (1 << 64)
        return float(v - v.to_integral_value(rounding=decimal.ROUND_FLOOR))


def test_geometric_words_decided_without_extra_draws():
    f = noise._EXP_NEG_INT_THRESHOLDS
    words = {x + d for x in f for d in (-2, -1, 1, 2) if x + d >= 2048}
    words |= {(1 << b) + d for b in range(11, 64) for d in (-1, 0, 1)}
    words |= {2**64 - 1}
    words = sorted(words - set(f))
    s = stream(9, "geo-words")
    v = noise._geometric_from_words(s, np.array(words, dtype=np.uint64))
    assert v.tolist() == [sum(w < x for x in f) for w in words]
    assert s.position == 0  # every one decided by the thresholds alone


@pytest.mark.parametrize("level", [1, 2, 20, 44])
def test_geometric_undecided_word_uses_more_digits(level):
    # U == F_v: R < exp(-v) with probability frac(exp(-v) 2**64) (R's remaining digits are
    # uniform), so V = v with that probability and v - 1 otherwise. Exact binomial test at ALPHA.
    n = 3000
    s = stream(9, ("geo-undecided", level))
    word = noise._EXP_NEG_INT_THRESHOLDS[level - 1]
    v = noise._geometric_from_words(s, np.full(n, word, dtype=np.uint64))
    assert set(np.unique(v).tolist()) <= {level - 1, level}
    assert s.position >= 8 * n  # each one read at least one more word
    lo, hi = binomial_interval(n, frac_part_scaled(Fraction(level)), ALPHA)
    assert lo <= np.count_nonzero(v == level) <= hi


@pytest.mark.parametrize("m", [1, 3, 44])
def test_bernoulli_exp_neg_int_undecided_words(m):
    # U == F_m: success with probability frac(exp(-m) 2**64); U = F_m -+ 1 decided at once.
    n = 3000
    f = noise._EXP_NEG_INT_THRESHOLDS[m - 1]
    ms = np.full(n, m, dtype=np.int64)
    s = stream(9, ("int-undecided", m))
    got = noise._bernoulli_exp_neg_int(s, ms, np.full(n, f, dtype=np.uint64))
    assert s.position >= 8 * n
    lo, hi = binomial_interval(n, frac_part_scaled(Fraction(m)), ALPHA)
    assert lo <= np.count_nonzero(got) <= hi
    s = stream(9, ("int-decided", m))
    edge = np.array([f - 1, f + 1], dtype=np.uint64)
    assert noise._bernoulli_exp_neg_int(s, ms[:2], edge).tolist() == [True, False]
    assert s.position == 0


def test_geometric_small_words_take_exact_path():
    # U = 0: R < 2**-64, so V >= 44 surely and V >= 45 with probability exp(-45) 2**64 (~0.53);
    # V >= 46 needs R < exp(-46) (probability exp(-1) given V >= 45). ALPHA/2 each.
    n = 2000
    s = stream(9, "geo-zero")
    v = noise._geometric_from_words(s, np.zeros(n, dtype=np.uint64))
    assert v.min() >= 44
    p45 = float(dec_exp_neg(Fraction(45)) * (1 << 64))
    lo, hi = binomial_interval(n, p45, ALPHA / 2)
    k45 = np.count_nonzero(v >= 45)
    assert lo <= k45 <= hi
    lo, hi = binomial_interval(int(k45), math.exp(-1), ALPHA / 2)
    assert lo <= np.count_nonzero(v >= 46) <= hi
    # Words in [1, 2**11) take the exact path too; U = 1 = F_44 is the undecided level 44.
    w = [1, 2, 3, 4, 1000, 1574, 1575, 2047]
    got = noise._geometric_from_words(stream(9, "geo-small"), np.array(w, dtype=np.uint64))
    f = noise._EXP_NEG_INT_THRESHOLDS
    for wi, gi in zip(w, got.tolist(), strict=True):
        count = sum(wi < x for x in f)
        assert gi == count or (wi in f and gi == count + 1), wi


def test_decide_exp_neg_boundary_words(exact_calls):
    # p = exp(-1/3): a word whose top 53 bits a satisfy a + 1 <= lo is a success and a >= hi a
    # failure, both without reading more of the stream; a word between them reads more digits.
    x = Fraction(1, 3)
    p53 = noise._exp_neg_scaled(np.array([1]), 3)
    lo, hi = p53 * (1 - noise._MARGIN), p53 * (1 + noise._MARGIN)
    inside = int((dec_exp_neg(x) * (1 << 53)).to_integral_value(rounding=decimal.ROUND_FLOOR))
    cases = [(math.floor(lo[0]) - 1, True), (math.ceil(hi[0]), False), (inside, None)]
    # The edges: a = floor(lo) has a + 1 > lo and a = ceil(hi) - 1 has a < hi: both undecided.
    cases += [(math.floor(lo[0]), None), (math.ceil(hi[0]) - 1, None)]
    for a, want in cases:
        before = exact_calls[0]
        word = np.array([a << 11 | 0x5A5], dtype=np.uint64)
        ok = noise._decide_exp_neg_words(stream(9, ("decide", a)), word, lo, hi, lambda i: x)
        if want is None:
            assert exact_calls[0] == before + 1  # undecided by the bounds: exact path
            assert bool(ok[0]) is (a < inside + 1)  # the 64-bit prefix decides these
        else:
            assert exact_calls[0] == before and bool(ok[0]) is want


def test_bernoulli_exp_neg_undecided_words_are_exact():
    # Every word whose top 53 bits equal floor(exp(-x) 2**53) is undecided by the float bounds;
    # the exact path then succeeds with probability frac(exp(-x) 2**53) (binomial test, ALPHA).
    n = 3000
    x = Fraction(2**40, 3 * 2**40 + 1)
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        v = dec_exp_neg(x) * (1 << 53)
        a = int(v.to_integral_value(rounding=decimal.ROUND_FLOOR))
        frac = float(v - a)
    s = stream(9, "undecided-bernoulli")
    low = s.uint64(n) >> np.uint64(53)  # random low 11 bits: part of R's digits
    words = (np.uint64(a) << np.uint64(11)) | low
    p = noise._exp_neg_scaled(np.full(n, x.numerator, dtype=np.int64), x.denominator)
    ok = noise._decide_exp_neg_words(
        s, words, p * (1 - noise._MARGIN), p * (1 + noise._MARGIN), lambda i: x
    )
    lo, hi = binomial_interval(n, frac, ALPHA)
    assert lo <= np.count_nonzero(ok) <= hi


@pytest.fixture
def exact_calls(monkeypatch):
    """Counts the calls of the exact path ``_exp_neg_less`` (which stays in use)."""
    calls = [0]
    inner = noise._exp_neg_less

    def counting(*args):
        calls[0] += 1
        return inner(*args)

    monkeypatch.setattr(noise, "_exp_neg_less", counting)
    return calls


@pytest.fixture
def wide_margin(monkeypatch, exact_calls):
    """Brackets of +-12.5% instead of 2**-40: still valid, but about a quarter of the float
    decisions go through the exact path, so the distribution tests below exercise it. Returns
    the exact-path call counter."""
    monkeypatch.setattr(noise, "_MARGIN", 2.0**-3)
    return exact_calls


@pytest.mark.parametrize(("num", "den"), [(1, 3), (999, 1000), (2**40, 2**41 + 1)])
def test_bernoulli_exp_neg_fraction_wide_margin(wide_margin, num, den):
    n = 20_000
    s = stream(7, ("bexp-wide", num, den))
    got = noise._bernoulli_exp_neg_fraction(s, np.full(n, num, dtype=np.int64), den)
    assert wide_margin[0] > n // 20  # the exact path decided a good share
    lo, hi = binomial_interval(n, math.exp(-num / den), ALPHA)
    assert lo <= got.sum() <= hi


def test_bernoulli_exp_neg_gamma_wide_margin(wide_margin):
    # gamma = m + r/den with m in {0, 1, 3, 70}: exp(-70) is decided by the exact path only.
    # Four binomial tests (the last one must be all-False: P[any success] < n e**-70), ALPHA/3.
    n = 20_000
    den = 2**41 + 1
    s = stream(7, "bgamma-wide")
    for m, r in ((0, 2**40), (1, 5), (3, den - 1)):
        got = noise._bernoulli_exp_neg(
            s, np.full(n, m, dtype=np.int64), np.full(n, r, dtype=np.int64), den
        )
        lo, hi = binomial_interval(n, math.exp(-(m + r / den)), ALPHA / 3)
        assert lo <= got.sum() <= hi, m
    got = noise._bernoulli_exp_neg(
        s, np.full(500, 70, dtype=np.int64), np.full(500, 1, dtype=np.int64), den
    )
    assert not got.any()


def test_samplers_wide_margin_chi2(wide_margin):
    # End to end with a large share of the float decisions taken by the exact path. Two
    # chi-square tests at ALPHA/2 each.
    z = discrete_laplace(stream(18, "wide-laplace"), 3.7, 40_000)
    assert wide_margin[0] > 4000
    m = math.ceil(60 * 3.7) + 10
    zs, pmf, tail = laplace_pmf(3.7, m)
    pooled_chi2(z, -m, pmf, tail, tail, ALPHA / 2)
    before = wide_margin[0]
    z = discrete_gaussian(stream(18, "wide-gauss"), 2, 40_000)
    assert wide_margin[0] - before > 8000
    zs, pmf = gauss_pmf(2)
    pooled_chi2(z, int(zs[0]), pmf, 0.0, 0.0, ALPHA / 2)


def test_round_up_rational():
    x = Fraction(3.7)
    r = noise._round_up(x, 2**40, 2**62)
    assert r >= x and r.denominator <= 2**40 and r - x < Fraction(1, 2**40)
    assert noise._round_up(Fraction(10, 3), 2**40, 2**62) == Fraction(10, 3)
    big = Fraction(2**100 + 1, 2**45)  # ~2**55: only a coarse denominator keeps num <= 2**62
    r = noise._round_up(big, 2**40, 2**62)
    assert r >= big and r.numerator <= 2**62 and r - big <= Fraction(1, 2**6)
    assert noise._laplace_fraction(Fraction(3.7), "scale") >= Fraction(3.7)
    assert noise._laplace_fraction(Fraction(1, 2), "scale") == Fraction(1, 2)


def test_floor_div_geometric_handles_huge_v():
    t, s = 2**52 + 12345, 7
    u = np.array([0, 5, 2**52, 17], dtype=np.int64)
    v = np.array([0, 3, 1500, 2], dtype=np.int64)
    got = noise._floor_div_geometric(u, v, t, s)
    want = [(int(a) + t * int(b)) // s for a, b in zip(u, v, strict=True)]
    assert got.tolist() == want
    with pytest.raises(OverflowError):
        noise._floor_div_geometric(u[:1], np.array([10_000], dtype=np.int64), t, 1)


@pytest.mark.parametrize("sigma", [0.0625, 0.5, 0.8, 2.5, Fraction(10, 3), 1000, 1e6, 2**30])
def test_gaussian_params_exact(sigma):
    prm = noise._gaussian_params(noise._as_positive_fraction(sigma, "sigma"), "sigma")
    exact2 = Fraction(sigma) ** 2
    assert prm.sigma2 >= exact2
    assert prm.sigma2 - exact2 <= exact2 * Fraction(1, 2**30)
    if isinstance(sigma, Fraction | int):
        assert prm.sigma2 == exact2
    c = Fraction(prm.cn, prm.cd)
    assert Fraction(prm.tn, prm.ts) == prm.sigma2 / c
    assert prm.den <= 2**62
    assert prm.ymax >= min(60 * float(sigma), 3e9)
    assert 0.5 < prm.acceptance < 0.99
    ys = [0, 1, prm.cn // prm.cd, prm.ymax, prm.ymax + 1, 10 * prm.ymax, 2**62]
    ys += [int(y) for y in stream(8, ("ys", str(sigma))).uniform_below(prm.ymax + 1, 50)]
    m, r = noise._gamma_parts(np.array(ys, dtype=np.int64), prm)
    for y, mi, ri in zip(ys, m, r, strict=True):
        gamma = (y - c) ** 2 / (2 * prm.sigma2)
        assert int(mi) == math.floor(gamma)
        assert Fraction(int(ri), prm.den) == gamma - math.floor(gamma)


# --------------------------------------------------------------------------------------------
# Discrete Laplace
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_chi2(scale):
    z = laplace_samples(scale)
    assert z.dtype == np.int64 and z.shape == (N_LAPLACE,)
    m = math.ceil(60 * float(scale)) + 10
    zs, pmf, tail = laplace_pmf(scale, m)
    pooled_chi2(z, -m, pmf, tail, tail)


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_moments(scale):
    # Rigorous bounds (see moment_bounds): false-failure rate <= ALPHA. The second moment about 0
    # is the variance 2a/(1-a)^2.
    z = laplace_samples(scale)
    m = math.ceil(80 * float(scale)) + 20
    zs, pmf, _ = laplace_pmf(scale, m)
    a = laplace_param(scale)
    assert math.isclose(float((pmf * zs.astype(float) ** 2).sum()), 2 * a / (1 - a) ** 2)
    check_moments(z, zs, pmf)


@pytest.mark.parametrize("scale", LAPLACE_SCALES, ids=str)
def test_discrete_laplace_tails(scale):
    z = np.abs(laplace_samples(scale))
    a = laplace_param(scale)
    thresholds = sorted({1, math.ceil(float(scale)), math.ceil(3 * float(scale))})
    # One exact binomial test per threshold, sharing ALPHA equally.
    for t in thresholds:
        p = 2 * a**t / (1 + a)
        lo, hi = binomial_interval(z.size, p, ALPHA / len(thresholds))
        assert lo <= (z >= t).sum() <= hi, t


def test_discrete_laplace_large_scale_and_small_scale():
    s = stream(13, "extreme-laplace")
    z = discrete_laplace(s, 2**40, 20_000)
    assert z.dtype == np.int64
    # 8 standard errors (var = 2 b^2): Bernstein's moment form with Laplace tails
    # (E|Z|^k <= k! b^k, i.e. v = 2 b^2, c = b) puts the false-failure rate below 1e-13.
    assert abs(z.mean()) < 8 * math.sqrt(2) * 2**40 / math.sqrt(z.size)
    tiny = discrete_laplace(s, 1e-9, 1000)
    assert np.all(tiny == 0)  # P[Z != 0] = 2 exp(-1e9)/(1 + ...): never


def test_discrete_laplace_validation():
    s = stream()
    for bad in (0, -1, float("nan"), float("inf"), Fraction(-1, 3), 2.0**60):
        with pytest.raises(ValueError, match="scale"):
            discrete_laplace(s, bad, 3)
    for bad in ("1", None, True):
        with pytest.raises(TypeError, match="scale"):
            discrete_laplace(s, bad, 3)
    with pytest.raises(ValueError, match="size"):
        discrete_laplace(s, 1, -1)
    with pytest.raises(TypeError, match="size"):
        discrete_laplace(s, 1, 2.0)
    out = discrete_laplace(s, 1, 0)
    assert out.shape == (0,) and out.dtype == np.int64
    assert discrete_laplace(s, np.float64(2.5), np.int64(3)).shape == (3,)


# --------------------------------------------------------------------------------------------
# Discrete Gaussian
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", GAUSS_SIGMAS, ids=str)
def test_discrete_gaussian_chi2(sigma):
    z = gauss_samples(sigma)
    assert z.dtype == np.int64 and z.shape == (N_GAUSS,)
    zs, pmf = gauss_pmf(sigma)
    pooled_chi2(z, int(zs[0]), pmf, 0.0, 0.0)


@pytest.mark.parametrize("sigma", GAUSS_SIGMAS, ids=str)
def test_discrete_gaussian_moments(sigma):
    # Rigorous bounds (see moment_bounds): false-failure rate <= ALPHA.
    zs, pmf = gauss_pmf(sigma)
    check_moments(gauss_samples(sigma), zs, pmf)


def test_discrete_gaussian_small_sigma_is_mostly_zero():
    z = discrete_gaussian(stream(14, "tiny"), 0.25, 100_000)
    zs, pmf = gauss_pmf(0.25)
    pooled_chi2(z, int(zs[0]), pmf, 0.0, 0.0)


def test_discrete_gaussian_fraction_sigma():
    z = discrete_gaussian(stream(14, "frac"), Fraction(7, 3), 200_000)
    zs, pmf = gauss_pmf(Fraction(7, 3))
    pooled_chi2(z, int(zs[0]), pmf, 0.0, 0.0)


def test_discrete_gaussian_sigma_1e6():
    sigma, n = 1e6, 20_000
    z = discrete_gaussian(stream(15, "big-sigma"), sigma, n)
    assert z.dtype == np.int64
    # The discrete Gaussian is sigma^2-subgaussian (CKS 2020), so
    # P[|mean| >= x] <= 2 exp(-n x^2 / (2 sigma^2)); ALPHA/2 for this assertion.
    x = sigma * math.sqrt(2 * math.log(4 / ALPHA) / n)
    assert abs(z.mean()) <= x
    # Wide sanity bound on the second moment: +-10% is ~7 standard errors (sqrt(2/n) = 1%) and
    # twice the Laurent-Massart chi-square deviation at ALPHA/2.
    second = float((z.astype(np.float64) ** 2).mean()) / sigma**2
    assert 0.9 < second < 1.1
    assert np.abs(z).max() < 10 * sigma


def test_discrete_gaussian_sigma_2_pow_30_uses_exact_big_ints():
    # Proposals beyond ~3.8 sigma take the Python-int path here; the output must stay sane.
    sigma = 2**30
    z = discrete_gaussian(stream(15, "huge-sigma"), sigma, 3000)
    assert z.dtype == np.int64
    assert np.abs(z).max() < 10 * sigma  # P[|Z| >= 10 sigma] ~ 1e-23 per draw
    second = float((z.astype(np.float64) ** 2).mean()) / sigma**2
    assert 0.7 < second < 1.3  # +-30% is ~12 standard errors (sqrt(2/3000) = 2.6%)


def test_discrete_gaussian_validation():
    s = stream()
    for bad in (0, -2.0, float("nan"), float("inf"), 0.01, 2.0**31):
        with pytest.raises(ValueError, match="sigma"):
            discrete_gaussian(s, bad, 3)
    with pytest.raises(TypeError, match="sigma"):
        discrete_gaussian(s, "2", 3)
    with pytest.raises(ValueError, match="size"):
        discrete_gaussian(s, 2, -5)
    assert discrete_gaussian(s, 2, 0).dtype == np.int64


# --------------------------------------------------------------------------------------------
# Real-valued noise on a fine lattice
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [1.3, 1e-3, 250.0], ids=str)
def test_gaussian_ks(sigma):
    x = gaussian(stream(16, ("gauss-ks", str(sigma))), sigma, N_CONT)
    assert x.dtype == np.float64
    # KS test at level ALPHA (the lattice 2^-k with 2^-k <= sigma 2^-20 moves the CDF by < 1e-6).
    assert stats.kstest(x, "norm", args=(0, sigma)).pvalue > ALPHA
    k = noise._lattice_exponent(Fraction(sigma))
    assert 2.0**-k <= sigma * 2.0**-20
    scaled = np.ldexp(x, k)
    np.testing.assert_array_equal(scaled, np.round(scaled))


@pytest.mark.parametrize("scale", [0.7, 1e-4, 1e4], ids=str)
def test_laplace_ks(scale):
    x = laplace(stream(17, ("laplace-ks", str(scale))), scale, N_CONT)
    assert x.dtype == np.float64
    # KS test at level ALPHA; lattice granularity <= scale * 2^-20.
    assert stats.kstest(x, "laplace", args=(0, scale)).pvalue > ALPHA


def test_continuous_validation():
    s = stream()
    with pytest.raises(ValueError, match="sigma"):
        gaussian(s, -1.0, 3)
    with pytest.raises(ValueError, match="scale"):
        laplace(s, float("inf"), 3)
    with pytest.raises(ValueError, match="size"):
        laplace(s, 1.0, -3)
    assert gaussian(s, 1.0, 0).dtype == np.float64
    assert laplace(s, 1.0, 0).shape == (0,)


# --------------------------------------------------------------------------------------------
# Module hygiene
# --------------------------------------------------------------------------------------------


def test_module_never_uses_insecure_randomness_or_hash():
    tree = ast.parse(Path(noise.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any(n == "random" or n.endswith(".random") for n in names)
        if isinstance(node, ast.Attribute):
            assert node.attr != "random", ast.dump(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "hash"
    assert set(noise.__all__) == {
        "INSECURE_TEST_KEY",
        "NoiseSource",
        "NoiseStream",
        "check_stream",
        "application_source",
        "check_release_source",
        "discrete_gaussian",
        "discrete_laplace",
        "bernoulli_dyadic",
        "discrete_laplace_per_key",
        "gaussian",
        "laplace",
        "new_run_salt",
        "new_secret_key",
    }


class TestZeroNoiseHook:
    """The test-only zero-noise source: zeros from every sampler, refused by every release path."""

    def test_samplers_return_zeros_after_validating(self):
        src = NoiseSource.zero_noise_for_tests()
        assert src.is_zero_noise and src.is_insecure
        s = src.stream("r")
        for fn, dtype in (
            (discrete_laplace, np.int64),
            (discrete_gaussian, np.int64),
            (gaussian, np.float64),
            (laplace, np.float64),
        ):
            out = fn(s, 3, 17)
            assert out.dtype == dtype and out.shape == (17,) and not out.any()
            with pytest.raises(ValueError):
                fn(s, -1, 3)

    def test_survives_pickling(self):
        src = pickle.loads(pickle.dumps(NoiseSource.zero_noise_for_tests()))
        assert src.is_zero_noise
        stream = pickle.loads(pickle.dumps(src.stream("x")))
        assert not discrete_gaussian(stream, 5, 4).any()

    def test_ordinary_sources_are_not_zero_noise(self):
        assert not NoiseSource.insecure_for_tests(1).is_zero_noise
        assert discrete_laplace(NoiseSource.insecure_for_tests(1).stream("r"), 50, 64).any()

    def test_release_paths_refuse_it(self):
        with pytest.raises(ValueError, match="zero-noise"):
            check_release_source(NoiseSource.zero_noise_for_tests())
        with pytest.raises(TypeError, match="noise_source"):
            check_release_source("key")
        assert isinstance(check_release_source(None), NoiseSource)

    def test_dp_aggregate_refuses_it(self):
        from beam_dpsketch.privacy import PrivacyBudget
        from beam_dpsketch.transforms import DPCount

        with pytest.raises(ValueError, match="zero-noise"):
            DPCount(PrivacyBudget.pure(1.0), noise_source=NoiseSource.zero_noise_for_tests())
