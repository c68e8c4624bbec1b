"""Seeded statistical tests of the DP Misra-Gries releases (docs/algorithms.md#mg-oracles).

Every test draws its noise from ``NoiseSource.insecure_for_tests`` with fixed release ids, so it
is deterministic; each states the probability that it would fail on a correct implementation
(at most 1e-6), computed from an exact binomial tail, Hoeffding's inequality or an exact
distribution.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    PAMGSketch,
    Universe,
    approx_pp,
    merged_gshm,
    merged_laplace,
    pmg,
    postprocess,
    pure_pp,
)
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg_noisy
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.universe import sample_tail_count

SRC = NoiseSource.insecure_for_tests(77)
ALPHA = 1e-6  # largest false-failure probability allowed for each test


def stream(*rid):
    return SRC.stream(("test_dp_misragries_stats", *rid))


def binomial_ok(failures: int, runs: int, p: float) -> bool:
    """One-sided exact binomial test: False iff P[Bin(runs, p) >= failures] < ALPHA."""
    return failures == 0 or stats.binom.sf(failures - 1, runs, p) >= ALPHA


def zipf_stream(n: int, u: int, a: float, seed: int) -> list[int]:
    # Test data only (not noise): a fixed seeded Zipf-like stream over u keys.
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** a for r in range(u)]
    return rng.choices(range(u), weights=weights, k=n)


# --------------------------------------------------------------------------------------------
# PMG utility oracle (Theorem 8, [LT23, Lemma 7 and Theorem 8] and docs/algorithms.md#mg-oracles)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("noise", "lattice"),
    [("discrete_laplace", False), ("discrete_laplace", True), ("laplace", None)],
)
def test_pmg_theorem8_oracle(noise, lattice):
    # Each run fails the oracle w.p. <= beta; the binomial test on R runs fails a correct
    # implementation w.p. < 1e-6.
    k, eps, delta, beta, runs = 20, 1.0, 1e-6, 0.05, 150
    xs = zipf_stream(4000, 300, 1.2, seed=1)
    sk = MisraGries(k).update(xs)
    f = Counter(xs)
    n = len(xs)
    counters = dict(sk.slots())
    counters.pop(None, None)
    # Lattice: Theorem 8 for the counts times g and draws of scale g/eps, read in counts.
    g = 16 if lattice else 1
    if noise == "discrete_laplace":
        a = math.exp(-eps / g)
        b1 = 2 * math.ceil(math.log(2 * (k + 1) / ((1 + a) * beta)) * g / eps) / g
    else:
        b1 = 2 * math.log((k + 1) / beta) / eps
    failures = 0
    for r in range(runs):
        rel = pmg(
            sk,
            PrivacyBudget.approx(eps, delta),
            stream("thm8", noise, r),
            noise=noise,
            lattice=lattice,
        )
        tau = rel.threshold
        out = rel.as_dict()
        # Always-true checks.
        assert len(out) <= k
        assert set(out) <= set(counters)
        assert all(v >= tau for v in out.values())
        assert all(f[x] > 0 for x in out)
        assert rel.keys() == sorted(out, key=encode_key)
        if noise == "discrete_laplace":
            assert rel.details["lattice"] == g
            assert all(isinstance(v, int) for v in out.values()) or lattice
            assert all(float(v * g).is_integer() for v in out.values())
        # Events that hold w.p. >= 1 - beta.
        ok = all(abs(out[x] - counters[x]) <= b1 for x in out)
        ok &= all(counters[x] < tau + b1 for x in counters if x not in out)
        for x in set(f) | set(out):
            ok &= f[x] - n / (k + 1) - tau - b1 < out.get(x, 0) <= f[x] + b1
            if f[x] >= n / (k + 1) + tau + b1:
                ok &= x in out
        failures += not ok
    assert binomial_ok(failures, runs, beta)
    # The oracle is not vacuous: the heaviest keys pass the "must be released" bar.
    assert f.most_common(1)[0][1] >= n / (k + 1) + 33 + b1


def test_zero_count_keys_are_rarely_released_at_the_exact_rate():
    # 50 zero-count keys (50 distinct keys, then one more triggers a decrement). A zero key is
    # released iff eta + Z_x >= tau; the probability that any is released is computed exactly
    # from the discrete Laplace pmf, and a two-sided exact binomial test compares (fails a
    # correct implementation w.p. < 1e-6).
    k, eps, delta, runs = 50, 1.0, 0.05, 400
    sk = MisraGries(k).update(list(range(k)) + [999])
    assert all(c == 0 for _, c in sk.slots())
    hits = sum(
        bool(len(pmg(sk, PrivacyBudget.approx(eps, delta), stream("zero", r)))) for r in range(runs)
    )
    tau = pmg(sk, PrivacyBudget.approx(eps, delta), stream("zero", -1)).threshold
    a = math.exp(-eps)
    c = (1 - a) / (1 + a)

    def tail(t):  # P[Z >= t]
        return a**t / (1 + a) if t >= 0 else 1 - a ** (1 - t) / (1 + a)

    p_any = sum(c * a ** abs(e) * (1 - (1 - tail(tau - e)) ** k) for e in range(-200, 201))
    assert p_any < delta
    assert stats.binomtest(hits, runs, p_any).pvalue >= ALPHA


# --------------------------------------------------------------------------------------------
# One shared draw per release ([LT23, Algorithm 2] and docs/algorithms.md#noise-sampling): mutation test on the noise correlation
# --------------------------------------------------------------------------------------------


def _noise_pairs(runs, *, per_key_eta):
    sk = MisraGries(2).update(["x", "y"], [10**6, 10**6])
    out = []
    for r in range(runs):
        s = stream("corr", per_key_eta, r)
        if per_key_eta:
            items = dict(
                pmg_noisy(sk.slots(), 2, "discrete_laplace", Fraction(1), 0, s, per_key_eta=True)
            )
        else:
            items = pmg(sk, PrivacyBudget.approx(1.0, 1e-6), s).as_dict()
        out.append((items["x"] - 10**6, items["y"] - 10**6))
    return np.array(out, dtype=np.float64)


def test_one_shared_draw_gives_noise_correlation_one_half_and_per_key_eta_does_not():
    # X = eta + Z_x, Y = eta + Z_y with discrete Laplace (scale 1) draws: corr(X, Y) = 1/2 and
    # E[sign X sign Y] = sum_e P[eta=e] (P[Z > -e] - P[Z < -e])**2 = 0.2970 (exact). Drawing eta
    # per key (the mutant) makes X, Y independent: correlation 0, sign agreement 0.
    runs = 2000
    a = math.exp(-1.0)
    c = (1 - a) / (1 + a)
    support = range(-80, 81)

    def g(e):
        return sum(c * a ** abs(z) * ((z > -e) - (z < -e)) for z in support)

    expected_sign = sum(c * a ** abs(e) * g(e) ** 2 for e in support)
    assert expected_sign == pytest.approx(0.2970, abs=1e-4)
    # Hoeffding on the bounded sign product: P[|mean - E| >= 0.125] <= 2 exp(-R 0.125^2 / 2)
    # = 3.3e-7 for R = 2000. The mutant's mean is within 0.125 of 0 w.p. 1 - 3.3e-7, hence
    # outside [0.172, 0.422]: the same check must fail on it.
    band = 0.125
    assert 2 * math.exp(-runs * band**2 / 2) < ALPHA
    good = _noise_pairs(runs, per_key_eta=False)
    bad = _noise_pairs(runs, per_key_eta=True)
    sign_good = float(np.mean(np.sign(good[:, 0]) * np.sign(good[:, 1])))
    sign_bad = float(np.mean(np.sign(bad[:, 0]) * np.sign(bad[:, 1])))
    assert abs(sign_good - expected_sign) < band
    assert not abs(sign_bad - expected_sign) < band
    # Pearson correlation, 0.5 expected ([LT23, Algorithm 2]). Its standard error at R = 2000 is 0.021
    # (simulated offline: 2000 replications), so the 0.2 band is 9.5 standard errors; the
    # estimator is asymptotically normal (the noise has exponential tails), tail < 1e-6.
    assert np.corrcoef(good.T)[0, 1] == pytest.approx(0.5, abs=0.2)
    assert abs(np.corrcoef(bad.T)[0, 1]) < 0.2
    # Per-key variance 2 Var(Geo2) = 3.68 (4/eps^2 for continuous Laplace): standard error 0.16,
    # so the band [1.23, 11.0] is more than 15 standard errors wide on each side.
    assert 3.68 / 3 < good[:, 0].var() < 3.68 * 3


# --------------------------------------------------------------------------------------------
# The exact Binomial sampler and the pure-DP cutoff sampler ([LT23, Section 6])
# --------------------------------------------------------------------------------------------


def _chi_square_ok(samples, pmf):
    """Chi-square goodness of fit; bins with expected count < 5 are pooled into the tails."""
    runs = len(samples)
    counts = Counter(samples)
    support = sorted(pmf)
    exp_bins, obs_bins, e_acc, o_acc = [], [], 0.0, 0
    for j in support:
        e_acc += pmf[j] * runs
        o_acc += counts.get(j, 0)
        if e_acc >= 5:
            exp_bins.append(e_acc)
            obs_bins.append(o_acc)
            e_acc, o_acc = 0.0, 0
    exp_bins[-1] += e_acc
    obs_bins[-1] += o_acc
    assert sum(counts.values()) == sum(obs_bins)  # no sample outside the support
    chi2 = sum((o - e) ** 2 / e for o, e in zip(obs_bins, exp_bins, strict=True))
    return stats.chi2.sf(chi2, len(exp_bins) - 1) >= ALPHA


@pytest.mark.parametrize("start_bits", [128, 8])
def test_binomial_tail_count_sampler_is_exact(start_bits):
    # K ~ Binomial(40, q), q = P[Geo2(exp(-1/2)) >= 1] = a/(1+a). start_bits=8 forces the
    # precision-refinement path. Chi-square test: false failure < 1e-6.
    n, scale, t0, runs = 40, Fraction(2), 1, 1500
    a = math.exp(-0.5)
    q = a / (1 + a)
    draws = [
        sample_tail_count(
            stream("binom", start_bits, r), n, scale, t0, expected_hint=n * q, start_bits=start_bits
        )
        for r in range(runs)
    ]
    pmf = {j: stats.binom.pmf(j, n, q) for j in range(n + 1)}
    assert _chi_square_ok(draws, pmf)


def test_binomial_sampler_huge_n_matches_its_expectation():
    # n = 10**12 absent keys, q ~ 1e-11: the sum of R independent draws is exactly
    # Binomial(R n, q); a two-sided exact-binomial-approximation (Poisson) test, false
    # failure < 1e-6.
    n, scale, t0, runs = 10**12, Fraction(12), 304, 200
    q = math.exp(-t0 / 12) / (1 + math.exp(-1 / 12))
    total = sum(
        sample_tail_count(stream("huge", r), n, scale, t0, expected_hint=n * q) for r in range(runs)
    )
    mu = runs * n * q
    assert (
        stats.poisson.cdf(total, mu) >= ALPHA / 2 and stats.poisson.sf(total - 1, mu) >= ALPHA / 2
    )


def test_pure_pp_released_absent_keys_follow_the_binomial_law():
    # Empty sketch, universe of 10**9 ints: every released key is absent and the number released
    # is min(K, k) with K ~ Binomial(|U|, P[Geo2 >= t0]) ([LT23, Section 6] step 3). Chi-square against
    # the exact law of min(K, k): false failure < 1e-6.
    k, eps, runs = 6, 1.0, 400
    u = 10**9
    sk = MisraGries(k)
    universe = Universe.from_keys(range(u))
    sizes = []
    cutoff = None
    for r in range(runs):
        rel = pure_pp(sk, universe, PrivacyBudget.pure(eps), stream("absent", r))
        cutoff = rel.details["cutoff"]
        keys = rel.keys()
        assert len(set(keys)) == len(keys) and all(0 <= x < u for x in keys)
        assert all(v * (k + 1) >= cutoff for v in rel.as_dict().values())
        sizes.append(len(keys))
    scale = rel.details["integer_scale"]
    assert scale == 2 * (k + 1) / eps
    a = math.exp(-1 / scale)
    q = a**cutoff / (1 + a)
    pmf = {j: stats.binom.pmf(j, u, q) for j in range(k)}
    pmf[k] = stats.binom.sf(k - 1, u, q)
    assert _chi_square_ok(sizes, pmf)


# --------------------------------------------------------------------------------------------
# APPROX_PP, M-LAP and GSHM
# --------------------------------------------------------------------------------------------


def test_approx_pp_oracle():
    # docs/algorithms.md#mg-oracles APPROX_PP row: released x has |f~ - cbar| <= 2 ln(K/beta)/eps (K positive keys),
    # all x have |f~ - f| < n/(k+1) + tau_pp + 2 ln(K/beta)/eps; binomial test, false failure
    # < 1e-6. f~ here is the released value less the released count correction N_hat/(k+1).
    k, eps, delta, beta, runs = 20, 1.0, 1e-6, 0.05, 120
    xs = zipf_stream(4000, 300, 1.3, seed=2)
    sk = MisraGries(k).update(xs)
    f = Counter(xs)
    cbar = {x: float(v) for x, v in postprocess(sk).estimates().items()}
    bound = 2 * math.log(len(cbar) / beta) / eps
    failures = 0
    for r in range(runs):
        rel = approx_pp(sk, PrivacyBudget.approx(eps, delta), stream("pp", r))
        shift = max(rel.noisy_count, 0) / (k + 1)
        out = {x: v - shift for x, v in rel.as_dict().items()}
        assert all(v >= rel.threshold - 1e-9 for v in out.values()) and set(out) <= set(cbar)
        ok = all(abs(out[x] - cbar[x]) <= bound for x in out)
        ok &= all(abs(out.get(x, 0) - f[x]) < len(xs) / (k + 1) + rel.threshold + bound for x in f)
        failures += not ok
    assert binomial_ok(failures, runs, beta)


def test_merged_laplace_oracle():
    # docs/algorithms.md#mg-oracles M-LAP row on a merged sketch: all x |f~ - f| < N/(k+1) + tau_M + (k/eps) ln(k/beta).
    k, eps, delta, beta, runs = 8, 1.0, 1e-6, 0.05, 120
    parts = [zipf_stream(3000, 200, 1.4, seed=s) for s in (3, 4, 5)]
    m = MisraGries(k).update(parts[0])
    for p in parts[1:]:
        m.merge(MisraGries(k).update(p))
    f = Counter(x for p in parts for x in p)
    big_n = sum(len(p) for p in parts)
    failures = 0
    for r in range(runs):
        rel = merged_laplace(m, PrivacyBudget.approx(eps, delta), stream("mlap", r))
        out = rel.as_dict()
        bound = big_n / (k + 1) + rel.threshold + (k / eps) * math.log(k / beta)
        failures += not all(abs(out.get(x, 0) - f[x]) < bound for x in f)
    assert binomial_ok(failures, runs, beta)


def test_gshm_release_probability_of_a_count_one_key():
    # docs/algorithms.md#mg-oracles item 5: a count-1 key is released w.p. 1 - Phi(tau/sigma) exactly (lattice
    # Gaussian: indistinguishable at this sample size). Calibrated at a large delta so the
    # probability is measurable; two-sided exact binomial test, false failure < 1e-6.
    k, eps, delta, runs = 2, 1.0, 0.2, 1500
    sk = PAMGSketch(k, 1).update_users([{"heavy"}] * 50 + [{"one"}])
    assert sk.to_dict() == {"heavy": 50, "one": 1}
    hits = 0
    for r in range(runs):
        rel = merged_gshm(sk, PrivacyBudget.approx(eps, delta), stream("gshm", r))
        hits += "one" in rel.as_dict()
    sigma, tau = rel.details["sigma"], rel.details["tau"]
    p = stats.norm.sf(tau / sigma)
    assert 1 - (1 - p) ** k <= delta  # the first GSHM term bounds it
    assert 0.01 < p
    assert stats.binomtest(hits, runs, p).pvalue >= ALPHA
