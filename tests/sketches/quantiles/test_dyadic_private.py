"""Tests of the released DP Dyadic Count Sketch ([ZQR+22, Section 4.2]; docs/algorithms.md#lin-oracles).

Calibration vectors of [ZQR+22, Section 4.2], the budget split across levels, the deterministic
noise-only rank invariant of docs/algorithms.md#lin-oracles item 6, the rank error oracle of [ZQR+22, Section 4.2, Eq. (2)] (docs/algorithms.md#lin-e9 corrected),
quantile monotonicity, refusal of updates/merges and serialization.

Statistical tests are seeded (INSECURE test noise key) and deterministic; each states its
false-failure probability (<= 1e-6) under exact noise distributions: counting tests use
``binom.isf(1e-6, T, p)`` and z-tests ``|z| <= 5.33``.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy import stats

from beam_dpsketch import serialization
from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.linear.calibration import noise_tail_bound
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch

SRC = NoiseSource.insecure_for_tests(515)
RHO1 = PrivacyBudget.zcdp(1.0)
Z_MAX = 5.33


def zipf_values(n: int, universe: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.2, n) * 37) % universe


def true_rank(data: np.ndarray, x) -> np.ndarray:
    return np.searchsorted(np.sort(data), np.asarray(x), side="right").astype(float)


def noise_arrays(rel: PrivateDyadicCountSketch, exact: DyadicCountSketch):
    return rel.sketched - exact.sketched, rel.exact - exact.exact


# --------------------------------------------------------------------------------------------
# Calibration ([ZQR+22, Section 4.2])
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bits", "width", "relation", "sigma", "e_l"),
    [
        (16, 882, "add_remove", 8.000000, 47.4983),
        (16, 882, "replace", 16.000000, 94.9966),
        (32, 1308, "add_remove", 11.313708, 69.2134),
        (32, 1308, "replace", 22.627417, 138.4269),
    ],
)
def test_section_5_3_worked_values(bits, width, relation, sigma, e_l):
    sketch = DyadicCountSketch(0, 2**bits - 1, width, 8, exact_levels=False)
    cals = PrivateDyadicCountSketch.calibrate(sketch, RHO1, neighbouring=relation)
    assert len(cals) == bits
    for cal in cals:
        assert math.isclose(cal.scale, sigma, rel_tol=1e-6)
        assert abs(cal.noise_bound - e_l) < 5e-5
        assert math.isclose(cal.rho, 1.0 / bits, rel_tol=1e-12)
        # Count Sketch levels: 2 sqrt(d) under replace (docs/algorithms.md#lin-e3), not the paper's sqrt(2d).
        assert math.isclose(cal.sensitivity, (2 if relation == "replace" else 1) * math.sqrt(8))


def test_section_5_3_paper_sensitivity_rows():
    # The "replace, sqrt(2d) (paper)" rows: same formulas with Delta = sqrt(16).
    for bits, width, sigma, e_l in [(16, 882, 11.313708, 67.1727), (32, 1308, 16.0, 97.8826)]:
        s = 4.0 * math.sqrt(bits / 2.0)
        assert math.isclose(s, sigma, rel_tol=1e-6)
        e = noise_tail_bound("discrete_gaussian", s, bits * 8 * width, 0.005)
        assert abs(e - e_l) < 5e-5


@pytest.mark.parametrize(
    ("relation", "l2_exact", "l1_sk", "l1_exact"),
    [
        ("add_remove", 1.0, 5, 1),
        ("replace", math.sqrt(2), 10, 2),
        ("replace_update", 2.0, 10, 2),
        ("user:3", 3.0, 15, 3),
    ],
)
def test_level_sensitivities_and_budget_split(relation, l2_exact, l1_sk, l1_exact):
    sketch = DyadicCountSketch(0, 1023, 16, 5)  # 10 levels, 80 cells: levels 4.. are exact
    assert sketch.n_sketched == 4
    cals = PrivateDyadicCountSketch.calibrate(sketch, RHO1, neighbouring=relation)
    sk_l2 = (
        2.0
        if relation in ("replace", "replace_update")
        else float(relation[-1])
        if relation.startswith("user")
        else 1.0
    ) * math.sqrt(5)
    assert all(math.isclose(c.sensitivity, sk_l2) for c in cals[:4])
    assert all(math.isclose(c.sensitivity, l2_exact) for c in cals[4:])
    assert math.fsum(c.rho for c in cals) <= 1.0
    assert math.isclose(math.fsum(c.rho for c in cals), 1.0, rel_tol=1e-12)
    assert all(math.isclose(c.scale, c.sensitivity / math.sqrt(2 * c.rho)) for c in cals)
    pure = PrivateDyadicCountSketch.calibrate(
        sketch, PrivacyBudget.pure(0.3), neighbouring=relation
    )
    assert [c.sensitivity for c in pure] == [l1_sk] * 4 + [l1_exact] * 6
    assert math.fsum(c.epsilon_effective for c in pure) <= 0.3
    assert all(
        c.noise == "discrete_laplace"
        and math.isclose(c.scale, c.sensitivity / c.epsilon_effective, rel_tol=1e-12)
        for c in pure
    )


def test_custom_split_and_validation():
    sketch = DyadicCountSketch(0, 15, 4, 2)  # 4 levels
    cals = PrivateDyadicCountSketch.calibrate(sketch, PrivacyBudget.zcdp(2.0), split=[1, 1, 2, 4])
    assert np.allclose([c.rho for c in cals], [0.25, 0.25, 0.5, 1.0])
    approx = PrivateDyadicCountSketch.calibrate(sketch, PrivacyBudget.approx(1.0, 1e-5))
    assert math.isclose(math.fsum(c.rho for c in approx), 0.020820, rel_tol=1e-4)
    for bad in ([1, 1, 1], [1, 1, 1, 0], [1, 1, 1, float("nan")], "equal", 3):
        with pytest.raises(ValueError, match="split"):
            PrivateDyadicCountSketch.calibrate(sketch, RHO1, split=bad)
    with pytest.raises(TypeError, match="DyadicCountSketch"):
        PrivateDyadicCountSketch.calibrate("x", RHO1)
    with pytest.raises(ValueError, match="neighbouring"):
        PrivateDyadicCountSketch.calibrate(sketch, RHO1, neighbouring="swap")
    with pytest.raises(ValueError, match="beta_noise"):
        PrivateDyadicCountSketch.calibrate(sketch, RHO1, beta_noise=2)


# --------------------------------------------------------------------------------------------
# Invariants (docs/algorithms.md#lin-oracles item 6) and the rank oracle ([ZQR+22, Section 4.2, Eq. (2)], docs/algorithms.md#lin-e9)
# --------------------------------------------------------------------------------------------


def _node_noise(rel, exact, level, node):
    """``max_r |Z_level[r, h(node)]|`` (sketched) or ``|Z_level[node]|`` (exact)."""
    zs, ze = noise_arrays(rel, exact)
    if level >= rel.n_sketched:
        return abs(int(ze[rel.exact_offsets[level - rel.n_sketched] + node]))
    h1, h2 = hash_keys(np.array([node]), rel.level_seeds[level])
    b = row_buckets(h1, h2, rel.depth, rel.width)[:, 0]
    return int(np.abs(zs[level][np.arange(rel.depth), b]).max())


@pytest.mark.parametrize("exact_levels", [True, False])
def test_rank_noise_only_difference(exact_levels):
    data = zipf_values(3000, 1000, 1) - 200
    exact = DyadicCountSketch(-200, 799, 32, 3, 4, exact_levels=exact_levels).update(data)
    rel = PrivateDyadicCountSketch.release(
        exact, PrivacyBudget.zcdp(0.2), SRC.stream(("inv", exact_levels))
    )
    xs = np.arange(-200, 799, 7)
    diff = np.abs(rel.rank(xs) - exact.rank(xs))
    zs, ze = noise_arrays(rel, exact)
    event = all(np.abs(zs[j]).max() <= rel.noise_bounds[j] for j in range(rel.n_sketched)) and all(
        np.abs(
            ze[rel.exact_offsets[j - rel.n_sketched] : rel.exact_offsets[j - rel.n_sketched + 1]]
        ).max()
        <= rel.noise_bounds[j]
        for j in range(rel.n_sketched, rel.levels)
    )
    for x, dx in zip(xs.tolist(), diff.tolist(), strict=True):
        y = x + 200 + 1
        bound = sum(
            _node_noise(rel, exact, j, (y >> j) - 1) for j in range(rel.levels) if (y >> j) & 1
        )
        assert dx <= bound + 1e-9
        assert bound <= bin(y).count("1") * max(
            np.abs(zs).max(initial=0), np.abs(ze).max(initial=0)
        )
    if event:  # holds with probability >= 1 - beta_noise (it does for this seed)
        assert np.all(diff <= rel.rank_noise_bound(xs) + 1e-9)
    assert event


@pytest.mark.parametrize("preset", ["library", "paper"])
def test_rank_error_within_the_corrected_section_5_7_bound(preset):
    gamma, n = 0.01, 20000
    data = zipf_values(n, 2**16, 2)
    exact = DyadicCountSketch.from_error(0, 2**16 - 1, gamma, seed=5, preset=preset).update(data)
    srt = np.sort(data)
    m = 64
    keys = srt[np.ceil(np.arange(1, m + 1) / (m + 1) * n).astype(int) - 1]  # [ZQR+22, Section 5.2]
    truth = true_rank(data, keys)
    levels, width = exact.levels, exact.width
    for t in range(4):
        rel = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream(("rank", preset, t)))
        err = np.abs(rel.rank(keys) - truth)
        e_l = rel.noise_bounds.max()
        # Equation (2) with docs/algorithms.md#lin-e9 corrected: sqrt(L log(L/gamma)) * (N/w + E).
        assert err.max() <= math.sqrt(levels * math.log(levels / gamma)) * (n / width + e_l)
        assert err.mean() <= gamma * n  # docs/algorithms.md#lin-oracles "Total"


def test_quantiles_are_monotone_and_in_the_domain_even_with_heavy_noise():
    data = zipf_values(500, 4096, 3) + 100
    exact = DyadicCountSketch(100, 4195, 16, 3, 9).update(data)
    rng = np.random.default_rng(0)
    for t in range(10):
        rel = PrivateDyadicCountSketch.release(
            exact, PrivacyBudget.zcdp(0.001), SRC.stream(("mono", t))
        )
        qs = np.sort(rng.random(300))
        qs[:2] = [0.0, 0.0]
        got = rel.quantiles(qs)
        assert np.all(np.diff(got) >= 0)
        assert got.min() >= 100 and got.max() <= 4195
        assert rel.quantile(0.5) == rel.quantiles([0.5])[0]


def test_quiet_release_recovers_the_kth_smallest():
    data = zipf_values(2000, 512, 4)
    exact = DyadicCountSketch(0, 511, 32, 32).update(data)  # all levels exact
    # 9 levels, sensitivity 1 each: rho_j = rho / 9 gives sigma_j = 0.1, so every noise value
    # is 0 with probability 1 - 1e-20 (the sampler needs sigma >= 1/16).
    rho = 9 * (1 / (2 * 0.1**2))
    rel = PrivateDyadicCountSketch.release(exact, PrivacyBudget.zcdp(rho), SRC.stream("quiet"))
    assert np.array_equal(rel.exact, exact.exact)
    srt = np.sort(data)
    qs = np.linspace(0, 1, 51)
    k = np.minimum(np.maximum(1, np.ceil(qs * len(data))), len(data)).astype(int)
    assert np.array_equal(rel.quantiles(qs), srt[k - 1])
    assert rel.total() == 2000.0


def test_total_is_public_only_under_replace():
    exact = DyadicCountSketch(0, 255, 8, 2).update(zipf_values(700, 256, 5))
    rep = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream("t"), neighbouring="replace")
    assert rep.total() == 700.0 and rep.public_total == 700
    assert rep.rank(255) == 700.0 and rep.rank_noise_bound(255) == 0.0
    add = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream("t"))
    assert add.public_total is None
    top = add.node_estimates(add.levels - 1, [0, 1]).sum()
    assert add.total() == top and add.rank(10**6) == top
    # Calibrated for replacement without the declared model: N stays private, and ranks at the
    # top and the quantile targets use the noisy top level.
    kept = PrivateDyadicCountSketch.release(
        exact, RHO1, SRC.stream("t"), neighbouring="replace", publish_total=False
    )
    assert kept.public_total is None and kept.calibrations == rep.calibrations
    assert np.array_equal(kept.sketched, rep.sketched) and np.array_equal(kept.exact, rep.exact)
    top = kept.node_estimates(kept.levels - 1, [0, 1]).sum()
    assert kept.total() == top and kept.rank(255) == top and kept.rank_noise_bound(255) > 0
    assert PrivateDyadicCountSketch.from_bytes(kept.to_bytes()) == kept
    assert not kept.describe()["total_public"] and rep.describe()["total_public"]
    with pytest.raises(ValueError, match="publish_total"):
        PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream("t"), publish_total=True)


# --------------------------------------------------------------------------------------------
# Noise: event rate, per-level variance, soft check of the rank noise (docs/algorithms.md#lin-oracles)
# --------------------------------------------------------------------------------------------


def test_noise_event_rate_and_level_variances():
    exact = DyadicCountSketch(0, 1023, 32, 3, 1).update(zipf_values(2000, 1024, 6))
    trials, failures = 80, 0
    per_level = [[] for _ in range(exact.levels)]
    for t in range(trials):
        rel = PrivateDyadicCountSketch.release(
            exact, PrivacyBudget.zcdp(0.5), SRC.stream(("ev", t))
        )
        zs, ze = noise_arrays(rel, exact)
        fail = False
        for j in range(rel.levels):
            if j < rel.n_sketched:
                z = zs[j].ravel()
            else:
                a = rel.exact_offsets[j - rel.n_sketched]
                z = ze[a : rel.exact_offsets[j - rel.n_sketched + 1]]
            per_level[j].append(z)
            fail |= bool(np.abs(z).max() > rel.noise_bounds[j])
        failures += fail
    assert failures <= stats.binom.isf(1e-6, trials, rel.beta_noise)
    # Pooled over levels with a z-test per level would need a Bonferroni factor; 10 levels at
    # |z| <= 5.9 (two-sided 3.6e-9 each).
    for j, chunks in enumerate(per_level):
        z = np.concatenate(chunks).astype(float)
        var = rel.calibrations[j].noise_variance
        mu4 = 3 * var**2  # sigma >= 1.5 here: the discrete Gaussian's kurtosis is 3 to 1e-30
        assert rel.level_scales[j] >= 1.5
        assert abs((z**2).mean() - var) <= 5.9 * math.sqrt((mu4 - var**2) / z.size)


def test_rank_noise_std_soft_check():
    """Soft 3x check of docs/algorithms.md#lin-oracles: std(R^ - R~) ~ sigma sqrt(pi popcount(x+1) / (2d))."""
    exact = DyadicCountSketch(0, 1023, 64, 5, 2, exact_levels=False).update(
        zipf_values(3000, 1024, 7)
    )
    xs = np.array([511, 1022, 700])
    diffs = []
    for t in range(150):
        rel = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream(("soft", t)))
        diffs.append(rel.rank(xs) - exact.rank(xs))
    std = np.std(np.array(diffs), axis=0, ddof=1)
    sigma = rel.level_scales[0]
    for x, s in zip(xs.tolist(), std.tolist(), strict=True):
        expected = sigma * math.sqrt(math.pi * bin(x + 1).count("1") / (2 * 5))
        assert expected / 3 <= s <= 3 * expected


# --------------------------------------------------------------------------------------------
# Refusals and serialization
# --------------------------------------------------------------------------------------------


def test_released_dyadic_refuses_updates_merges_and_construction():
    exact = DyadicCountSketch(0, 99, 8, 2).update([1, 2, 3])
    rel = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream("r"))
    with pytest.raises(TypeError, match="released"):
        rel.update([4])
    with pytest.raises(TypeError, match="released"):
        rel.merge(exact)
    with pytest.raises(TypeError):
        exact.merge(rel)
    with pytest.raises(TypeError, match="release"):
        PrivateDyadicCountSketch()
    with pytest.raises(ValueError, match="read-only"):
        rel.exact[0] = 1
    with pytest.raises(TypeError, match="stream"):
        PrivateDyadicCountSketch.release(exact, RHO1, None)


@pytest.mark.parametrize(
    ("budget", "relation"),
    [
        (RHO1, "replace"),
        (PrivacyBudget.pure(1.0), "add_remove"),
        (PrivacyBudget.approx(1, 1e-6), "user:2"),
    ],
)
def test_serialization_round_trip(budget, relation):
    exact = DyadicCountSketch(-50, 949, 16, 3, 8).update(zipf_values(800, 1000, 8) - 50)
    rel = PrivateDyadicCountSketch.release(
        exact,
        budget,
        SRC.stream("s"),
        neighbouring=relation,
        split=list(range(1, exact.levels + 1)),
    )
    data = rel.to_bytes()
    back = PrivateDyadicCountSketch.from_bytes(data)
    assert back == rel and pickle.loads(pickle.dumps(rel)) == rel
    xs = np.arange(-60, 960, 13)
    assert np.array_equal(back.rank(xs), rel.rank(xs))
    assert np.array_equal(back.quantiles([0.1, 0.5]), rel.quantiles([0.1, 0.5]))
    assert back.describe() == rel.describe()
    assert rel.noise == ("discrete_laplace" if budget.is_pure else "discrete_gaussian")
    assert rel.epsilon_at(1e-6) >= 0
    for bad in (data[:-1], exact.to_bytes(), b"DPSK"):
        with pytest.raises(SketchFormatError):
            PrivateDyadicCountSketch.from_bytes(bad)
    with pytest.raises(SketchFormatError):
        DyadicCountSketch.from_bytes(data)
    _, params, arrays = serialization.loads(data)
    for key, value in (
        ("calibrations", params["calibrations"][:-1]),
        # A total is never published outside the replace model; under it, only as an int.
        ("public_total", True if relation == "replace" else 5),
        ("neighbouring", "other"),
        ("split", [1.0]),
        ("budget_kind", "weird"),
    ):
        forged = dict(params)
        forged[key] = value
        with pytest.raises(SketchFormatError):
            PrivateDyadicCountSketch.from_bytes(
                serialization.dumps(PrivateDyadicCountSketch.KIND, forged, arrays)
            )


def test_private_heavy_hitters_descent():
    data = np.array([5] * 400 + [700] * 300 + list(range(0, 1000, 3)))
    exact = DyadicCountSketch(0, 1023, 32, 5, 3).update(data)
    rel = PrivateDyadicCountSketch.release(exact, RHO1, SRC.stream("hh"))
    got = rel.heavy_hitters(150)
    assert [x for x, _ in got] == [5, 700]
    for x, e in got:
        assert e == rel.node_estimates(0, [x])[0]
