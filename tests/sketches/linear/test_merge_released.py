"""Merging independently released linear sketches and quantile trees (federated release).

The merged object's noise is the sum of the inputs' independent noise: its variance and its
Gaussian ``sigma`` are checked against ``sum`` and ``sqrt(sum)``, its uniform bound against
many seeded draws (coverage of the stated failure probability, with a Clopper-Pearson bound so
that a bound that is too small is caught), the Count-Min re-centring against
``0 <= f^ - f~ <= 2 E_merged``, and every mismatch is refused naming the parameter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privacy_audit import FAILURE, cp_lower

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch, DyadicCountSketch
from beam_dpsketch.sketches.linear import (
    MergedCalibration,
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
    merge_released,
)
from beam_dpsketch.sketches.linear.countmedian import CountMedianSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch

WIDTH, DEPTH, SEED = 16, 3, 7
SOURCE = NoiseSource.insecure_for_tests(29)


def _exact(cls, keys, width=WIDTH, depth=DEPTH, seed=SEED):
    sketch = cls(width, depth, seed)
    sketch.update(keys)
    return sketch


def _two_orgs(private_cls, exact_cls, budget_a, budget_b, tag, **options):
    a = _exact(exact_cls, ["x"] * 40 + ["y"] * 5)
    b = _exact(exact_cls, ["x"] * 10 + ["z"] * 20)
    pa = private_cls.release(a, budget_a, SOURCE.stream(("a", tag)), **options)
    pb = private_cls.release(b, budget_b, SOURCE.stream(("b", tag)), **options)
    return a, b, pa, pb


def test_gaussian_sigma_is_root_sum_and_bound_grows_like_sqrt_k():
    _, _, pa, pb = _two_orgs(
        PrivateCountSketch, CountSketch, PrivacyBudget.zcdp(0.5), PrivacyBudget.zcdp(0.125), "g"
    )
    merged = merge_released([pa, pb])
    assert merged.scale == pytest.approx(math.sqrt(pa.scale**2 + pb.scale**2), rel=1e-12)
    assert merged.noise_variance == pytest.approx(pa.noise_variance + pb.noise_variance)
    n = WIDTH * DEPTH
    expected = merged.scale * math.sqrt(2 * math.log(2 * n / merged.beta_noise))
    assert merged.noise_bound == pytest.approx(expected, rel=1e-12)
    # k equal releases: sqrt(k) E.
    _, _, pc, pd = _two_orgs(
        PrivateCountSketch, CountSketch, PrivacyBudget.zcdp(0.5), PrivacyBudget.zcdp(0.5), "eq"
    )
    assert merge_released([pc, pd]).noise_bound == pytest.approx(math.sqrt(2) * pc.noise_bound)


def test_merged_table_is_sum_and_estimates_cover_the_union():
    a, b, pa, pb = _two_orgs(
        PrivateCountSketch, CountSketch, PrivacyBudget.zcdp(1.0), PrivacyBudget.zcdp(1.0), "t"
    )
    merged = pa.merge_released(pb)
    assert np.array_equal(merged.table, pa.table + pb.table)
    union = a.copy().merge(b)
    exact = union.estimate(["x", "y", "z"])
    got = merged.estimate(["x", "y", "z"])
    assert np.all(np.abs(got - exact) <= merged.noise_bound)


@pytest.mark.parametrize(
    "budgets",
    [
        (PrivacyBudget.zcdp(0.5), PrivacyBudget.zcdp(0.5)),
        (PrivacyBudget.pure(1.0), PrivacyBudget.approx(1.0, 1e-6)),
        (PrivacyBudget.pure(2.0), PrivacyBudget.pure(1.0)),
    ],
    ids=["gaussian", "laplace+gaussian", "laplace"],
)
def test_uniform_bound_covers_the_merged_noise(budgets):
    """Over many seeded pairs of releases, ``max |noise| > E_merged`` at most ``beta_noise``."""
    beta = 0.3
    zero = CountSketch(WIDTH, DEPTH, SEED)
    runs, fails = 1500, 0
    for i in range(runs):
        pa = PrivateCountSketch.release(zero, budgets[0], SOURCE.stream(("cov-a", i)))
        pb = PrivateCountSketch.release(zero, budgets[1], SOURCE.stream(("cov-b", i)))
        merged = pa.merge_released(pb, beta_noise=beta)
        fails += bool(np.max(np.abs(merged.cells)) > merged.noise_bound)
    # The true failure rate is at most beta: refuse only on strong evidence that it is higher.
    assert cp_lower(fails, runs, FAILURE) <= beta, (fails, runs)


def test_count_min_is_recentred_on_the_merged_bound():
    beta = 0.3
    runs, inside = 600, 0
    a = _exact(CountMinSketch, ["x"] * 40 + ["y"] * 5)
    b = _exact(CountMinSketch, ["x"] * 10 + ["z"] * 20)
    exact = a.copy().merge(b).estimate(["x", "y", "z"]).astype(float)
    for i in range(runs):
        pa = PrivateCountMinSketch.release(a, PrivacyBudget.zcdp(0.5), SOURCE.stream(("cm-a", i)))
        pb = PrivateCountMinSketch.release(b, PrivacyBudget.zcdp(0.5), SOURCE.stream(("cm-b", i)))
        merged = merge_released([pa, pb], beta_noise=beta)
        assert merged.offset == math.ceil(merged.noise_bound)
        # Each input's own offset is gone: the table is the exact union plus noise plus ONE offset.
        assert merged.offset < pa.offset + pb.offset
        gap = merged.estimate(["x", "y", "z"]) - exact
        inside += bool(np.all((gap >= 0) & (gap <= 2 * merged.noise_bound)))
    assert cp_lower(runs - inside, runs, FAILURE) <= beta


def test_count_min_without_offsets_stays_without_one():
    a, b, pa, pb = _two_orgs(
        PrivateCountMinSketch,
        CountMinSketch,
        PrivacyBudget.pure(1.0),
        PrivacyBudget.pure(1.0),
        "nooff",
        offset=False,
        lattice=True,
    )
    merged = merge_released([pa, pb])
    assert merged.offset == 0 and merged.calibration.lattice == pa.calibration.lattice
    assert np.array_equal(merged.table, pa.table + pb.table)
    assert merged.calibration.minimum_mean(DEPTH) < 0


def test_count_median_merges_through_the_same_path():
    _, _, pa, pb = _two_orgs(
        PrivateCountMedianSketch,
        CountMedianSketch,
        PrivacyBudget.zcdp(0.5),
        PrivacyBudget.zcdp(0.5),
        "cmed",
    )
    merged = merge_released([pa, pb])
    assert type(merged) is PrivateCountMedianSketch
    assert merged.scale == pytest.approx(math.sqrt(2) * pa.scale)


def test_guarantee_per_data_set_max_when_disjoint_sum_otherwise():
    _, _, pa, pb = _two_orgs(
        PrivateCountSketch, CountSketch, PrivacyBudget.pure(1.0), PrivacyBudget.pure(0.5), "pp"
    )
    disjoint = merge_released([pa, pb])
    overlapping = merge_released([pa, pb], disjoint=False)
    assert (disjoint.epsilon, overlapping.epsilon) == (1.0, 1.5)
    assert disjoint.calibration.contributions == (
        ("pure", 1.0, 0.0, None),
        ("pure", 0.5, 0.0, None),
    )
    assert "largest single guarantee" in disjoint.calibration.describe_guarantee()
    assert "sum of the guarantees" in overlapping.calibration.describe_guarantee()
    _, _, pc, pd = _two_orgs(
        PrivateCountSketch, CountSketch, PrivacyBudget.zcdp(0.5), PrivacyBudget.zcdp(0.25), "zz"
    )
    assert merge_released([pc, pd]).rho == 0.5
    assert merge_released([pc, pd], disjoint=False).rho == 0.75
    # A merge of a merge: the declaration applies to the inputs of each call.
    nested = merge_released([merge_released([pc, pd]), pc], disjoint=False)
    assert nested.rho == 1.0 and len(nested.calibration.parts) == 3


def test_bytes_round_trip_and_rejection_of_forged_merged_calibration():
    _, _, pa, pb = _two_orgs(
        PrivateCountMinSketch, CountMinSketch, PrivacyBudget.zcdp(0.5), PrivacyBudget.pure(1.0), "b"
    )
    merged = merge_released([pa, pb])
    again = PrivateCountMinSketch.from_bytes(merged.to_bytes())
    assert again == merged and isinstance(again.calibration, MergedCalibration)
    assert again.error_bound() == merged.error_bound()
    forged = merged.calibration.to_dict()
    forged["offset"] += 5
    with pytest.raises(ValueError, match="offset"):
        MergedCalibration.from_dict(forged)


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"width": WIDTH * 2}, "width"),
        ({"depth": DEPTH + 1}, "depth"),
        ({"seed": SEED + 1}, "seed"),
    ],
)
def test_refuses_another_shape_or_seed_naming_the_parameter(change, parameter):
    budget = PrivacyBudget.zcdp(0.5)
    pa = PrivateCountSketch.release(
        _exact(CountSketch, ["secret-key"] * 3), budget, SOURCE.stream("r1")
    )
    options = {"width": WIDTH, "depth": DEPTH, "seed": SEED, **change}
    other = _exact(CountSketch, ["secret-key"] * 5, **options)
    pb = PrivateCountSketch.release(other, budget, SOURCE.stream("r2"))
    with pytest.raises(ValueError, match=parameter) as info:
        merge_released([pa, pb])
    assert "secret-key" not in str(info.value)


def test_refuses_same_seed_other_kind_or_relation():
    budget = PrivacyBudget.zcdp(0.5)
    cs = PrivateCountSketch.release(_exact(CountSketch, ["k"]), budget, SOURCE.stream("k1"))
    cm = PrivateCountMinSketch.release(_exact(CountMinSketch, ["k"]), budget, SOURCE.stream("k2"))
    with pytest.raises(ValueError, match="kind"):
        merge_released([cs, cm])
    replace = PrivateCountSketch.release(
        _exact(CountSketch, ["k"]), budget, SOURCE.stream("k3"), neighbouring="replace"
    )
    with pytest.raises(ValueError, match="neighbouring"):
        merge_released([cs, replace])
    with pytest.raises(ValueError, match="two or more"):
        merge_released([cs])
    with pytest.raises(TypeError, match="released"):
        merge_released([_exact(CountSketch, ["k"]), _exact(CountSketch, ["k"])])


def _tree(values, **options):
    layout = {"width": 32, "depth": 3, "seed": 4, "branching": 4, **options}
    sketch = DyadicCountSketch(0, 4095, **layout)
    sketch.update(np.asarray(values, dtype=np.int64))
    return sketch


def test_quantile_trees_merge_and_answer_over_the_union():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 2000, 30_000), rng.integers(1500, 4000, 30_000)
    pa = PrivateDyadicCountSketch.release(_tree(x), PrivacyBudget.pure(1.0), SOURCE.stream("qa"))
    pb = PrivateDyadicCountSketch.release(_tree(y), PrivacyBudget.pure(1.0), SOURCE.stream("qb"))
    merged = merge_released([pa, pb])
    both = np.sort(np.concatenate([x, y]))
    # Ranks over the union are within the merged rank bound of the exact union's ranks.
    probes = np.array([100, 1000, 1999, 2500, 3999])
    exact_rank = np.searchsorted(both, probes, side="right")
    assert np.all(np.abs(merged.rank(probes) - exact_rank) <= merged.rank_noise_bound(probes))
    for q, v in zip([0.1, 0.5, 0.9], merged.quantiles([0.1, 0.5, 0.9]), strict=True):
        assert abs(np.searchsorted(both, v, side="right") / len(both) - q) < 0.01
    # Each level's bound grows with the summed noise, and less than the two bounds added.
    assert np.all(merged.noise_bounds > pa.noise_bounds)
    assert np.all(merged.noise_bounds < pa.noise_bounds + pb.noise_bounds)
    assert merged.epsilon == 1.0
    assert PrivateDyadicCountSketch.from_bytes(merged.to_bytes()) == merged
    other = PrivateDyadicCountSketch.release(
        _tree(y, seed=5), PrivacyBudget.pure(1.0), SOURCE.stream("qc")
    )
    with pytest.raises(ValueError, match="seed"):
        merge_released([pa, other])
    wider = PrivateDyadicCountSketch.release(
        _tree(y, width=64), PrivacyBudget.pure(1.0), SOURCE.stream("qd")
    )
    with pytest.raises(ValueError, match="width"):
        merge_released([pa, wider])
