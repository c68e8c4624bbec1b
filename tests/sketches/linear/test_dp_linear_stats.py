"""Probabilistic oracles for the DP linear sketch releases (docs/algorithms.md#lin-oracles).

Every test is seeded (fixed data, hash seeds and an INSECURE test noise key), so it is
deterministic; each threshold is chosen so that a correct implementation fails with probability
at most 1e-6 under the stated model (exact noise distributions; MurmurHash3 under different
seeds as independent random functions):

* z-tests use ``|z| <= 5.33`` (two-sided ``p = 1e-7``) with **exact** variances computed from the
  noise's probability mass function (4th moments included), so no normal approximation of the
  noise itself is needed, only the CLT over ``>= 300`` independent terms;
* counting tests use ``count <= binom.isf(1e-6, T, p_bound)`` for events whose probability is
  at most ``p_bound`` by the theorems of [ZQR+22] as corrected in docs/algorithms.md#linear-sketches.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.calibration import noise_minimum_mean
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch

SRC = NoiseSource.insecure_for_tests(77)
Z_MAX = 5.33  # two-sided p = 9.8e-8
FALSE_FAILURE = 1e-6


def pmf(noise: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    if noise == "discrete_laplace":
        k = math.ceil(80 * scale) + 20
        z = np.arange(-k, k + 1, dtype=float)
        w = np.exp(-np.abs(z) / scale)
    else:
        k = math.ceil(16 * scale) + 16
        z = np.arange(-k, k + 1, dtype=float)
        w = np.exp(-(z * z) / (2 * scale * scale))
    return z, w / w.sum()


def moments(noise: str, scale: float) -> tuple[float, float]:
    """Exact variance and 4th moment of one noise value."""
    z, p = pmf(noise, scale)
    return float(np.sum(p * z**2)), float(np.sum(p * z**4))


def binom_limit(trials: int, p: float) -> float:
    return stats.binom.isf(FALSE_FAILURE, trials, min(p, 1.0))


def zipf_stream(n: int, universe: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.3, n) - 1) % universe


# --------------------------------------------------------------------------------------------
# The noise: calibrated variance, added once; the noise event
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "budget", "relation"),
    [
        (PrivateCountSketch, PrivacyBudget.zcdp(0.5), "add_remove"),
        (PrivateCountMinSketch, PrivacyBudget.zcdp(2.0), "replace"),
        (PrivateCountSketch, PrivacyBudget.pure(1.0), "replace"),
        (PrivateCountMinSketch, PrivacyBudget.approx(1.0, 1e-6), "user:2"),
    ],
)
def test_cell_noise_has_the_calibrated_variance(cls, budget, relation):
    """Over 300 release ids, every cell's ``released - exact - offset`` has mean 0 and exactly
    the calibrated variance (so the noise is added once, not once per partial)."""
    exact = cls.EXACT(64, 4, 9).update(zipf_stream(2000, 500, 1))
    zs = []
    for t in range(300):
        rel = cls.release(exact, budget, SRC.stream(("var", cls.KIND, t)), neighbouring=relation)
        zs.append(rel.table - exact.table - rel.offset)
    z = np.concatenate([a.ravel() for a in zs]).astype(float)
    var, mu4 = moments(rel.noise, rel.scale)
    assert math.isclose(var, rel.noise_variance, rel_tol=1e-9)
    n = z.size
    assert abs(z.mean()) <= Z_MAX * math.sqrt(var / n)
    assert abs((z**2).mean() - var) <= Z_MAX * math.sqrt((mu4 - var**2) / n)


@pytest.mark.parametrize("budget", [PrivacyBudget.zcdp(1.0), PrivacyBudget.pure(2.0)])
def test_noise_event_rate(budget):
    """``P(max |Z| > E) <= beta_noise`` (docs/algorithms.md#lin-oracles): Example A shape, 150 releases."""
    exact = CountMinSketch(512, 6, 1).update(zipf_stream(5000, 3000, 2))
    failures = 0
    trials = 150
    for t in range(trials):
        rel = PrivateCountMinSketch.release(exact, budget, SRC.stream(("event", str(budget), t)))
        z = rel.table - exact.table - rel.offset
        failures += int(np.abs(z).max() > rel.noise_bound)
    assert failures <= binom_limit(trials, rel.beta_noise)


# --------------------------------------------------------------------------------------------
# Point queries over hash seeds (one query item per seed: independent trials)
# --------------------------------------------------------------------------------------------


def test_count_min_never_underestimates_and_error_bound():
    data = zipf_stream(3000, 1000, 3)
    freq = np.bincount(data, minlength=1000)
    query = int(np.argsort(-freq)[20])
    f, n = int(freq[query]), int(freq.sum())
    width, depth, trials = 64, 3, 300
    under = over = 0
    for s in range(trials):
        exact = CountMinSketch(width, depth, s).update(data)
        rel = PrivateCountMinSketch.release(exact, PrivacyBudget.zcdp(1.0), SRC.stream(("cm", s)))
        est = rel.estimate([query])[0]
        under += int(est < f)
        # [ZQR+22, Theorems 3.1 and 3.2] exact form: f^ - f <= e (N - f)/w + offset + E w.p. >= 1 - e^-d - beta_noise.
        over += int(est - f > math.e * (n - f) / width + rel.offset + rel.noise_bound)
    assert under <= binom_limit(trials, rel.beta_noise)
    assert over <= binom_limit(trials, math.exp(-depth) + rel.beta_noise)


def test_count_sketch_median_bound_and_unbiasedness():
    data = zipf_stream(3000, 1000, 4)
    freq = np.bincount(data, minlength=1000).astype(float)
    queries = [int(q) for q in np.argsort(-freq)[[0, 10, 200]]]
    width, depth, trials = 64, 5, 300
    errors = {q: [] for q in queries}
    violations = {q: 0 for q in queries}
    bounds = {}
    for q in queries:
        rest = freq.copy()
        rest[q] = 0
        var_row, abs_row = (rest**2).sum() / width, rest.sum() / width
        t = 2 * math.sqrt(var_row)
        p_row = min(var_row / t**2, abs_row / t)
        # docs/algorithms.md#lin-oracles: P(|f~ - f| > t) <= P(Binomial(d, p(t)) >= ceil(d/2)); plus the noise event.
        bounds[q] = (t, stats.binom.sf(math.ceil(depth / 2) - 1, depth, p_row))
    for s in range(trials):
        exact = CountSketch(width, depth, 1000 + s).update(data)
        rel = PrivateCountSketch.release(exact, PrivacyBudget.zcdp(0.5), SRC.stream(("cs", s)))
        est = rel.estimate(queries)
        for q, e in zip(queries, est, strict=True):
            errors[q].append(e - freq[q])
            violations[q] += int(abs(e - freq[q]) > bounds[q][0] + rel.noise_bound)
    for q in queries:
        assert violations[q] <= binom_limit(trials, bounds[q][1] + rel.beta_noise)
        err = np.asarray(errors[q])
        # Unbiased over hashes and noise (Theorem 3.2): z-test, 3 keys x p <= 1e-7 each.
        assert abs(err.mean()) <= Z_MAX * err.std(ddof=1) / math.sqrt(trials)


# --------------------------------------------------------------------------------------------
# Inner products and totals: the bias corrections of docs/algorithms.md#lin-extensions
# --------------------------------------------------------------------------------------------


def test_inner_product_and_norm_estimators_are_unbiased():
    """With one row the median is the row statistic, whose mean and variance are exact."""
    a = CountSketch(32, 1, 5).update(zipf_stream(400, 100, 5))
    b = CountSketch(32, 1, 5).update(zipf_stream(400, 100, 6))
    ca, cb = a.table[0].astype(float), b.table[0].astype(float)
    budget = PrivacyBudget.zcdp(0.5)  # sigma = 1 for depth 1
    sq, ip, dist = [], [], []
    trials = 300
    for t in range(trials):
        ra = PrivateCountSketch.release(a, budget, SRC.stream(("ip-a", t)))
        rb = PrivateCountSketch.release(b, budget, SRC.stream(("ip-b", t)))
        sq.append(ra.squared_l2())
        ip.append(ra.inner_product(rb))
        dist.append(ra.squared_distance(rb))
    v, mu4 = moments(ra.noise, ra.scale)
    d = ca - cb
    checks = [
        (sq, (ca**2).sum(), (4 * ca**2 * v + mu4 - v**2).sum()),
        (ip, (ca * cb).sum(), (ca**2 * v + cb**2 * v + v**2).sum()),
        (dist, (d**2).sum(), (8 * d**2 * v + 2 * mu4 + 2 * v**2).sum()),
    ]
    for values, mean, var in checks:
        assert abs(np.mean(values) - mean) <= Z_MAX * math.sqrt(var / trials)


def test_count_min_total_is_unbiased_under_add_remove():
    exact = CountMinSketch(128, 3, 2).update(zipf_stream(4000, 900, 7))
    totals = []
    trials = 300
    for t in range(trials):
        rel = PrivateCountMinSketch.release(exact, PrivacyBudget.pure(1.0), SRC.stream(("n", t)))
        totals.append(rel.total())
    assert abs(np.mean(totals) - 4000) <= Z_MAX * math.sqrt(rel.total_variance() / trials)


@pytest.mark.parametrize(
    ("private_cls", "exact_cls", "offset"),
    [
        (PrivateCountSketch, CountSketch, None),
        (PrivateCountMinSketch, CountMinSketch, False),
        (PrivateCountMinSketch, CountMinSketch, None),
    ],
)
def test_error_bound_covers_point_queries_at_its_confidence(private_cls, exact_cls, offset):
    # T independent releases (fresh hash seed and noise stream each) of skewed data; for a
    # heavy and a light probe key, |estimate - f| > error_bound(0.9) must happen in at most
    # binom.isf(1e-6, T, 0.1) releases (the bound's failure probability is <= 0.1 per query).
    trials, confidence = 300, 0.9
    rng = np.random.default_rng(5)
    data = rng.zipf(1.4, 20_000).astype(np.int64) % 3000
    truth = np.bincount(data, minlength=3000)
    probes = np.array([int(np.argmax(truth)), int(np.flatnonzero(truth == 1)[0])])
    budget = PrivacyBudget.approx(1.0, 1e-6)
    misses = np.zeros(2, dtype=np.int64)
    for t in range(trials):
        exact = exact_cls(256, 5, 1000 + t).update(data)
        rel = private_cls.release(exact, budget, SRC.stream(("bound", t)), offset=offset)
        err = np.abs(rel.estimate(probes) - truth[probes])
        misses += err > rel.error_bound(confidence)
    limit = stats.binom.isf(FALSE_FAILURE, trials, 1 - confidence)
    assert np.all(misses <= limit), (misses, limit)


def test_offset_is_optional_for_count_min_and_refused_for_count_sketch():
    budget = PrivacyBudget.pure(1.0)
    exact = CountMinSketch(64, 3, 0).update(["a"] * 10)
    plain = PrivateCountMinSketch.release(exact, budget, SRC.stream("off"), offset=False)
    paper = PrivateCountMinSketch.release(exact, budget, SRC.stream("off"))
    assert plain.offset == 0 and paper.offset > 0
    # The same noise; the paper's form only adds the public constant.
    assert np.array_equal(paper.table - paper.offset, plain.table)
    # Without the offset the estimate removes the public mean of the noise minimum instead.
    shift = noise_minimum_mean(3, plain.scale, plain.noise)
    assert paper.estimate(["a"])[0] - plain.estimate(["a"])[0] == pytest.approx(
        paper.offset + shift
    )
    # The offset moves every estimate away from the count: the paper's stated error is larger.
    assert paper.error_bound() > plain.error_bound() + paper.offset / 2
    with pytest.raises(ValueError, match="offset: PrivateCountSketch has no offset"):
        PrivateCountSketch.release(CountSketch(64, 3, 0), budget, SRC.stream("off"), offset=True)
    with pytest.raises(ValueError, match="confidence must be in"):
        plain.error_bound(1.0)
