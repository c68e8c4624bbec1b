"""Deterministic tests of the DP Count-Min / Count Sketch releases (Zhao et al., [ZQR+22]).

Calibration vectors of [ZQR+22, Section 2.1] and docs/algorithms.md#lin-strict, the sensitivity table of docs/algorithms.md#lin-sensitivity checked by brute force
(docs/algorithms.md#linear-sketches item 2), the deterministic invariants of docs/algorithms.md#lin-oracles (noise-only differences), refusal of
updates and merges, serialization, heavy hitters over public candidates and turnstile
cancellation of the exact sketches. Statistical oracles are in ``test_dp_linear_stats.py`` and
the privacy smoke test in ``test_dp_linear_privacy.py``.
"""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import special

from beam_dpsketch import serialization
from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMinSketch,
    PrivateCountSketch,
    linear_sensitivity,
    linear_shape,
    parse_neighbouring,
    user_level,
)

SRC = NoiseSource.insecure_for_tests(20240601)
RHO1 = PrivacyBudget.zcdp(1.0)
REL = 1e-6


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel)


# --------------------------------------------------------------------------------------------
# Calibration vectors (docs/algorithms.md#lin-strict Example A, [ZQR+22, Section 2.1])
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "relation", "delta2", "sigma", "e"),
    [
        (PrivateCountMinSketch, "add_remove", 2.449490, 1.732051, 9.172202),
        (PrivateCountSketch, "add_remove", 2.449490, 1.732051, 9.172202),
        (PrivateCountMinSketch, "replace", 3.464102, 2.449490, 12.971453),
        (PrivateCountSketch, "replace", 4.898979, 3.464102, 18.344404),
    ],
)
def test_example_a_strict_calibration(cls, relation, delta2, sigma, e):
    width, depth = linear_shape(2**-9, 0.01)
    assert (width, depth) == (512, 6)
    cal = cls.calibrate(width, depth, RHO1, neighbouring=relation, beta=0.01)
    assert cal.noise == "discrete_gaussian" and cal.sensitivity_norm == "l2"
    assert close(cal.sensitivity, delta2) and close(cal.scale, sigma) and close(cal.noise_bound, e)
    assert cal.beta_noise == 0.005 and cal.rho == 1.0
    assert cal.offset == (math.ceil(e) if cls is PrivateCountMinSketch else 0)
    # Noise-event failure probability of docs/algorithms.md#lin-strict (depends on E / sigma only).
    p_fail = 1 - (1 - special.erfc(cal.noise_bound / (cal.scale * math.sqrt(2)))) ** 3072
    assert p_fail <= 0.005
    if relation == "add_remove":
        assert math.isclose(p_fail, 3.64e-4, rel_tol=5e-3)


@pytest.mark.parametrize(
    ("cls", "rho_eff"), [(PrivateCountMinSketch, 1.1324), (PrivateCountSketch, 2.2649)]
)
def test_example_a_paper_compat(cls, rho_eff):
    cal = cls.calibrate(512, 6, RHO1, neighbouring="replace", beta=0.01, paper_compat=True)
    assert cal.paper_compat
    assert close(cal.scale, 2.301807) and close(cal.noise_bound, 12.135210)
    # The effective rho (docs/algorithms.md#lin-strict): 13% over budget for CM, 2.26x for CS (docs/algorithms.md#lin-e3, docs/algorithms.md#lin-e13).
    assert round(cal.rho, 4) == rho_eff
    assert cal.offset == (13 if cls is PrivateCountMinSketch else 0)


def test_paper_compat_needs_a_zcdp_budget():
    with pytest.raises(ValueError, match="zCDP"):
        PrivateCountMinSketch.calibrate(512, 6, PrivacyBudget.pure(1.0), paper_compat=True)


@pytest.mark.parametrize(
    ("relation", "l1"), [("add_remove", 6), ("replace", 12), ("replace_update", 12), ("user:3", 18)]
)
def test_pure_budget_is_discrete_laplace_on_l1(relation, l1):
    cal = PrivateCountSketch.calibrate(512, 6, PrivacyBudget.pure(0.5), neighbouring=relation)
    assert cal.noise == "discrete_laplace" and cal.sensitivity_norm == "l1"
    assert cal.sensitivity == l1 and cal.scale == l1 / 0.5
    assert cal.epsilon == 0.5 and cal.epsilon_effective == 0.5 and cal.delta == 0.0
    assert cal.rho is None and cal.epsilon_at(1e-9) == 0.5
    # Union bound of the discrete Laplace tail: the smallest integer E.
    b, n = cal.scale, 3072
    a = math.exp(-1 / b)
    tail = lambda e: n * 2 * a ** (e + 1) / (1 + a)  # noqa: E731
    assert tail(cal.noise_bound) <= 0.005 < tail(cal.noise_bound - 1)
    # An approximate budget with delta = 0 is pure.
    assert PrivateCountSketch.calibrate(512, 6, PrivacyBudget.approx(0.5, 0.0)).noise == (
        "discrete_laplace"
    )


def test_approx_budget_is_converted_to_rho():
    cal = PrivateCountMinSketch.calibrate(512, 6, PrivacyBudget.approx(1.0, 1e-5))
    assert round(cal.rho, 6) == 0.020820  # [ZQR+22, Section 2.1] inverse example
    assert close(cal.scale, math.sqrt(6) / math.sqrt(2 * cal.rho), 1e-12)
    assert (cal.epsilon, cal.delta, cal.budget_kind) == (1.0, 1e-5, "approx")
    assert math.isclose(cal.epsilon_at(1e-5), 1.0, rel_tol=1e-9)


def test_zcdp_conversion_values():
    cal = PrivateCountSketch.calibrate(64, 3, RHO1)
    assert round(cal.epsilon_at(1e-5), 4) == 7.7861  # [ZQR+22, Section 2.1] table
    assert round(cal.epsilon_at(1e-6), 4) == 8.4338
    with_dfc = PrivateCountSketch.calibrate(64, 3, PrivacyBudget.zcdp(0.1, 1e-5))
    assert round(with_dfc.epsilon, 4) == 2.2460 and with_dfc.delta == 1e-5


# --------------------------------------------------------------------------------------------
# Sensitivities (docs/algorithms.md#lin-sensitivity and docs/algorithms.md#linear-sketches item 2)
# --------------------------------------------------------------------------------------------


def test_sensitivity_table():
    d = 6
    r = math.sqrt(d)
    for kind in ("count-min", "count-sketch"):
        assert linear_sensitivity(kind, "add_remove", d) == r
        assert linear_sensitivity(kind, "replace_update", d) == 2 * r
        assert linear_sensitivity(kind, "user:4", d) == 4 * r
        assert linear_sensitivity(kind, "add_remove", d, "l1") == d
        assert linear_sensitivity(kind, "replace", d, "l1") == 2 * d
        assert linear_sensitivity(kind, user_level(4), d, "l1") == 4 * d
    assert linear_sensitivity("count-min", "replace", d) == math.sqrt(2 * d)
    assert linear_sensitivity("count-sketch", "replace", d) == 2 * r  # docs/algorithms.md#lin-e3


@pytest.mark.parametrize("bad", ["replace-one", "user:0", "user:x", "", None, 3])
def test_neighbouring_validation_names_the_parameter(bad):
    with pytest.raises(ValueError, match="neighbouring"):
        parse_neighbouring(bad)
    with pytest.raises(ValueError, match="neighbouring"):
        PrivateCountSketch.calibrate(8, 2, RHO1, neighbouring=bad)


def _columns(cls, width, depth, seed, universe):
    """The linear map A of [ZQR+22, Section 2.2]: column x = table of the sketch of the single item x."""
    return np.stack(
        [cls(width, depth, seed).update([x]).table.ravel() for x in universe], axis=1
    ).astype(float)


def _brute_force(a):
    """Max L2 and L1 over the neighbouring pairs of each relation, for a (d*w) x U matrix."""
    cols = a.T
    single_l2 = np.linalg.norm(cols, axis=1).max()
    single_l1 = np.abs(cols).sum(axis=1).max()
    diffs = (cols[:, None, :] - cols[None, :, :]).reshape(-1, cols.shape[1])
    sums = (cols[:, None, :] + cols[None, :, :]).reshape(-1, cols.shape[1])
    return {
        "add_remove": (single_l2, single_l1),
        "replace": (np.linalg.norm(diffs, axis=1).max(), np.abs(diffs).sum(axis=1).max()),
        # (x, +1) -> (y, -1): e_x + e_y, which includes the sign flip 2 e_x (x == y).
        "replace_update": (np.linalg.norm(sums, axis=1).max(), np.abs(sums).sum(axis=1).max()),
    }


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_sensitivity_brute_force_tiny_universe(cls):
    width, depth, universe = 4, 3, range(64)
    kind = "count-min" if cls is CountMinSketch else "count-sketch"
    reached_cs_replace = False
    for seed in range(6):
        a = _columns(cls, width, depth, seed, universe)
        got = _brute_force(a)
        for relation, (l2, l1) in got.items():
            assert l2 <= linear_sensitivity(kind, relation, depth) + 1e-12
            assert l1 <= linear_sensitivity(kind, relation, depth, "l1")
        assert math.isclose(got["add_remove"][0], math.sqrt(depth))
        assert math.isclose(got["replace_update"][0], 2 * math.sqrt(depth))
        cols = a.T
        pairs = [(x, y) for x, y in itertools.combinations(range(64), 2)]
        if cls is CountMinSketch:
            # sqrt(2d) is attained iff some pair collides in no row (colliding changes cancel).
            disjoint = any(
                np.all(np.abs(cols[x] - cols[y]).reshape(depth, width).sum(1) == 2)
                for x, y in pairs
            )
            assert disjoint == math.isclose(got["replace"][0], math.sqrt(2 * depth))
        else:
            # 2 sqrt(d) is attained iff a pair collides in every row with opposite signs.
            full = any(
                np.all(np.abs(cols[x] - cols[y]).reshape(depth, width).max(1) == 2)
                for x, y in pairs
            )
            assert full == math.isclose(got["replace"][0], 2 * math.sqrt(depth))
            reached_cs_replace |= full
            # ... and then the paper's sqrt(2d) (docs/algorithms.md#lin-e3) is exceeded.
            assert not full or got["replace"][0] > math.sqrt(2 * depth)
    if cls is CountSketch:
        assert reached_cs_replace, "no seed produced a fully colliding opposite-sign pair"


# --------------------------------------------------------------------------------------------
# Releases: invariants of docs/algorithms.md#lin-oracles
# --------------------------------------------------------------------------------------------


def _data(n=5000, seed=1):
    rng = np.random.default_rng(seed)
    return rng.zipf(1.4, n) % 2000


@pytest.mark.parametrize("budget", [RHO1, PrivacyBudget.pure(1.0), PrivacyBudget.approx(1, 1e-6)])
def test_count_min_noise_only_difference(budget):
    exact = CountMinSketch(128, 5, 7).update(_data())
    rel = PrivateCountMinSketch.release(exact, budget, SRC.stream(("cm-inv", str(budget))))
    z = rel.table - exact.table - rel.offset
    keys = np.arange(-50, 3000)
    h1, h2 = hash_keys(keys, 7)
    zk = np.take_along_axis(z, row_buckets(h1, h2, 5, 128), axis=1)
    diff = rel.estimate(keys) - exact.estimate(keys)
    assert np.all(rel.offset + zk.min(0) <= diff) and np.all(diff <= rel.offset + zk.max(0))
    assert rel.offset >= rel.noise_bound  # so f^ >= f~ on the noise event
    assert np.array_equal(rel.estimate(keys), rel.row_estimates(keys).min(0))


@pytest.mark.parametrize("relation", ["add_remove", "replace", "user:2"])
def test_count_sketch_noise_only_difference(relation):
    exact = CountSketch(64, 4, 3).update(_data(), None)
    exact.update(_data(300, 2), -np.ones(300, dtype=np.int64))  # general turnstile
    rel = PrivateCountSketch.release(
        exact, RHO1, SRC.stream(("cs-inv", relation)), neighbouring=relation
    )
    z = rel.table - exact.table
    keys = list(range(2500))
    h1, h2 = hash_keys(keys, 3)
    zk = np.abs(np.take_along_axis(z, row_buckets(h1, h2, 4, 64), axis=1))
    assert np.all(np.abs(rel.estimate(keys) - exact.estimate(keys)) <= zk.max(0))
    assert np.array_equal(rel.estimate(keys), np.median(rel.row_estimates(keys), axis=0))


def test_noise_depends_only_on_the_stream():
    a = CountSketch(32, 3, 1).update([1, 2, 3])
    b = CountSketch(32, 3, 1).update(list(range(100)))
    ra = PrivateCountSketch.release(a, RHO1, SRC.stream("same-id"))
    rb = PrivateCountSketch.release(b, RHO1, SRC.stream("same-id"))
    assert np.array_equal(ra.table - a.table, rb.table - b.table)
    rc = PrivateCountSketch.release(a, RHO1, SRC.stream("other-id"))
    assert not np.array_equal(ra.table, rc.table)
    # The exact sketch is never modified.
    assert np.array_equal(a.table, CountSketch(32, 3, 1).update([1, 2, 3]).table)


def test_release_validates_its_arguments():
    cm, cs = CountMinSketch(8, 2), CountSketch(8, 2)
    stream = SRC.stream("v")
    with pytest.raises(TypeError, match="CountMinSketch"):
        PrivateCountMinSketch.release(cs, RHO1, stream)
    with pytest.raises(TypeError, match="CountSketch"):
        PrivateCountSketch.release(cm, RHO1, stream)
    with pytest.raises(TypeError, match="budget"):
        PrivateCountSketch.release(cs, 1.0, stream)
    with pytest.raises(TypeError, match="stream"):
        PrivateCountSketch.release(cs, RHO1, SRC)
    with pytest.raises(ValueError, match="beta"):
        PrivateCountSketch.release(cs, RHO1, stream, beta=1.5)
    with pytest.raises(ValueError, match="beta_noise"):
        PrivateCountSketch.release(cs, RHO1, stream, beta_noise=0.0)
    with pytest.raises(TypeError, match="release"):
        PrivateCountSketch()


@pytest.mark.parametrize("cls", [PrivateCountMinSketch, PrivateCountSketch])
def test_released_sketches_refuse_updates_and_merges(cls):
    exact = cls.EXACT(16, 2).update([1, 2])
    rel = cls.release(exact, RHO1, SRC.stream("refuse"))
    for call in (
        lambda: rel.update([1]),
        lambda: rel.update_hashes(np.zeros(1, np.uint64), np.zeros(1, np.uint64)),
        lambda: rel.merge(exact),
        lambda: rel.merge(rel),
    ):
        with pytest.raises(TypeError, match="released"):
            call()
    with pytest.raises(ValueError):
        exact.merge(rel)  # the exact sketch refuses other types too
    with pytest.raises(ValueError, match="read-only"):
        rel.table[0, 0] = 5


# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------


def _quiet(cls, keys, counts=None, relation="add_remove", width=256, depth=3):
    """A release whose noise is 0 with probability 1 - 1e-20 (sigma = 0.1)."""
    exact = cls.EXACT(width, depth, 11).update(keys, counts)
    d2 = linear_sensitivity(cls.SKETCH_KIND, relation, depth)
    rho = d2 * d2 / (2 * 0.1**2)
    return exact, cls.release(
        exact, PrivacyBudget.zcdp(rho), SRC.stream(("quiet", relation)), neighbouring=relation
    )


def test_heavy_hitters_order_threshold_top_and_duplicates():
    keys = ["a"] * 5 + ["b"] * 5 + ["c"] * 9 + ["d"] * 1
    exact, rel = _quiet(PrivateCountSketch, keys)
    assert np.all(rel.table == exact.table)
    cands = ["d", "b", "a", "c", "zz", "a"]
    got = rel.heavy_hitters(cands)
    assert got[0] == ("c", 9.0)
    assert [k for k, _ in got[1:3]] == ["a", "b"]  # tie broken by canonical key order
    assert [k for k, _ in got] == ["c", "a", "b", "d", "zz"]
    assert rel.heavy_hitters(cands, threshold=5) == [("c", 9.0), ("a", 5.0), ("b", 5.0)]
    assert rel.heavy_hitters(cands, top=2) == [("c", 9.0), ("a", 5.0)]
    assert rel.heavy_hitters(cands, threshold=6, top=5) == [("c", 9.0)]
    assert rel.heavy_hitters([]) == []
    with pytest.raises(ValueError, match="top"):
        rel.heavy_hitters(cands, top=0)
    with pytest.raises(ValueError, match="threshold"):
        rel.heavy_hitters(cands, threshold=float("nan"))


def test_count_min_offset_and_clamp():
    exact, rel = _quiet(PrivateCountMinSketch, [1, 1, 2])
    assert rel.offset == math.ceil(rel.noise_bound) >= 1
    assert np.array_equal(rel.estimate([1, 2, 3]), np.array([2, 1, 0]) + rel.offset)
    _, cs = _quiet(PrivateCountSketch, [1, 1, 2], counts=[-1, -1, 1])
    assert cs.estimate([1], clamp_nonnegative=True)[0] == 0.0
    assert cs.estimate([1])[0] == -2.0


def test_total_count():
    keys = list(range(100)) * 3
    exact, rel = _quiet(PrivateCountMinSketch, keys, relation="replace")
    assert rel.total() == 300.0 and rel.public_total == 300 and rel.total_variance() == 0.0
    _, rel = _quiet(PrivateCountMinSketch, keys)
    assert rel.public_total is None and rel.total() == 300.0
    assert math.isclose(rel.total_variance(), 256 * rel.noise_variance / 3)
    _, cs = _quiet(PrivateCountSketch, keys)
    with pytest.raises(ValueError, match="total"):
        cs.total()
    _, cs = _quiet(PrivateCountSketch, keys, relation="replace")
    assert cs.total() == 300.0


@pytest.mark.parametrize("cls", [PrivateCountMinSketch, PrivateCountSketch])
def test_publish_total_separates_calibration_from_a_public_total(cls):
    keys = list(range(100)) * 3
    exact = cls.EXACT(256, 3, 11).update(keys)
    rid = ("publish", cls.KIND)
    kept = cls.release(exact, RHO1, SRC.stream(rid), neighbouring="replace", publish_total=False)
    declared = cls.release(exact, RHO1, SRC.stream(rid), neighbouring="replace")
    # Same noise, same replace calibration; only the declared model publishes N.
    assert np.array_equal(kept.table, declared.table) and kept.calibration == declared.calibration
    assert declared.public_total == 300 and kept.public_total is None
    assert not kept.describe()["total_public"] and declared.describe()["total_public"]
    assert serialization.loads(kept.to_bytes())[1]["public_total"] is None
    assert cls.from_bytes(kept.to_bytes()) == kept != declared
    if cls is PrivateCountMinSketch:
        row_sums = kept.table.sum(axis=1) - kept.offset * kept.width
        assert kept.total() == float(row_sums.mean())
        assert kept.total_variance() > 0
    else:
        with pytest.raises(ValueError, match="not published"):
            kept.total()
    for relation in ("add_remove", "replace_update", "user:2"):
        with pytest.raises(ValueError, match="publish_total"):
            cls.release(exact, RHO1, SRC.stream(rid), neighbouring=relation, publish_total=True)
    with pytest.raises(TypeError, match="publish_total must be a bool"):
        cls.release(exact, RHO1, SRC.stream(rid), neighbouring="replace", publish_total="yes")


def test_inner_products_on_quiet_releases():
    _, a = _quiet(PrivateCountSketch, [1, 1, 2, 3], width=1024, depth=3)
    _, b = _quiet(PrivateCountSketch, [1, 2, 2, 2], width=1024, depth=3)
    assert math.isclose(a.inner_product(b), 2 * 1 + 1 * 3)
    assert math.isclose(a.squared_l2(), 4 + 1 + 1 - 1024 * a.noise_variance)
    assert math.isclose(a.l2_norm(), math.sqrt(6 - 1024 * a.noise_variance), rel_tol=1e-9)
    assert math.isclose(
        a.squared_distance(b), 1 + 4 + 1 - 1024 * (a.noise_variance + b.noise_variance)
    )
    with pytest.raises(ValueError, match="seed"):
        a.inner_product(_quiet(PrivateCountSketch, [1], width=512)[1])
    with pytest.raises(TypeError):
        a.inner_product(_quiet(PrivateCountMinSketch, [1], width=1024)[1])
    assert not hasattr(PrivateCountMinSketch, "inner_product")


# --------------------------------------------------------------------------------------------
# Serialization
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [PrivateCountMinSketch, PrivateCountSketch])
@pytest.mark.parametrize(
    ("budget", "relation"),
    [
        (RHO1, "replace"),
        (PrivacyBudget.pure(0.7), "user:3"),
        (PrivacyBudget.approx(1, 1e-6), "replace_update"),
    ],
)
def test_serialization_round_trip(cls, budget, relation):
    exact = cls.EXACT(64, 3, 5).update(_data(500))
    rel = cls.release(exact, budget, SRC.stream("ser"), neighbouring=relation)
    data = rel.to_bytes()
    back = cls.from_bytes(data)
    assert back == rel and back.calibration == rel.calibration
    assert np.array_equal(back.estimate(list(range(50))), rel.estimate(list(range(50))))
    assert pickle.loads(pickle.dumps(rel)) == rel
    assert not back.table.flags.writeable
    # Kinds are distinct from the exact sketches (and from each other).
    other = PrivateCountSketch if cls is PrivateCountMinSketch else PrivateCountMinSketch
    for wrong in (cls.EXACT, other):
        with pytest.raises(SketchFormatError):
            wrong.from_bytes(data)
    with pytest.raises(SketchFormatError):
        cls.from_bytes(exact.to_bytes())
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    with pytest.raises(SketchFormatError):
        cls.from_bytes(bytes(flipped))
    with pytest.raises(SketchFormatError):
        cls.from_bytes(data[:-7])
    assert "PrivateCount" in repr(rel)


def test_forged_parameters_are_rejected():
    exact = CountSketch(16, 2, 1).update([1, 2])
    rel = PrivateCountSketch.release(exact, RHO1, SRC.stream("forge"))
    _, params, arrays = serialization.loads(rel.to_bytes())

    def forged(**changes):
        p = dict(params)
        cal = dict(p["calibration"])
        for k, v in changes.items():
            if k in cal:
                cal[k] = v
            else:
                p[k] = v
        p["calibration"] = cal
        return serialization.dumps(PrivateCountSketch.KIND, p, arrays)

    for change in (
        {"public_total": 3},  # a public total under add_remove would leak N
        {"offset": 5},  # Count Sketch has no offset
        {"noise": "gaussian"},
        {"scale": -1.0},
        {"neighbouring": "bogus"},
        {"width": 17},
        {"scale_exact": "x"},
    ):
        with pytest.raises(SketchFormatError):
            PrivateCountSketch.from_bytes(forged(**change))


# --------------------------------------------------------------------------------------------
# Shapes and the exact sketches' turnstile behaviour
# --------------------------------------------------------------------------------------------


def test_linear_shape_presets():
    assert linear_shape(2**-9, 0.01, "paper") == (512, 6)
    assert linear_shape(2**-9, 0.01, "reference_code") == (512, 5)
    assert linear_shape(2**-9, 0.01, "textbook") == (1392, 5)
    with pytest.raises(ValueError, match="preset"):
        linear_shape(0.1, 0.1, "other")
    with pytest.raises(ValueError, match="gamma"):
        linear_shape(1.0, 0.1)


ITEMS = st.lists(st.integers(-1000, 1000), max_size=60)


@given(ITEMS, ITEMS, st.integers(0, 2**32 - 1))
@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_turnstile_insert_then_delete_leaves_the_remainder(cls, keep, remove, seed):
    sk = cls(17, 3, seed)
    sk.update(keep + remove)
    if remove:
        sk.update(remove, -np.ones(len(remove), dtype=np.int64))
    ref = cls(17, 3, seed)
    if keep:
        ref.update(keep)
    assert sk == ref


def test_describe_is_json_friendly():
    import json

    rel = PrivateCountMinSketch.release(
        CountMinSketch(8, 2), PrivacyBudget.pure(1.0), SRC.stream("d")
    )
    info = json.loads(json.dumps(rel.describe()))
    assert info["noise"] == "discrete_laplace" and info["kind"] == "PrivateCountMinSketch"
    assert info["sensitivity"] == 2 and info["neighbouring"] == "add_remove"


def test_budgets_outside_the_sampler_range_are_refused_at_calibration():
    with pytest.raises(ValueError, match="rho"):
        PrivateCountSketch.calibrate(64, 3, PrivacyBudget.zcdp(1e6))
    with pytest.raises(ValueError, match="rho"):
        PrivateCountSketch.calibrate(64, 3, PrivacyBudget.zcdp(1e-30))
