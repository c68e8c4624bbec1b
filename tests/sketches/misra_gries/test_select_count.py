"""Beam-free parts of select-then-count and of user-level exact counts with GSHM at l = m."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from beam_dpsketch.noise import NoiseSource, discrete_laplace, gaussian
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries.exact import exact_user_gshm
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm
from beam_dpsketch.sketches.misra_gries.select_count import (
    CandidateIndex,
    count_candidates,
    count_release,
    selection_parameters,
    split_budget,
)


def stream(seed: int = 0):
    return NoiseSource.insecure_for_tests(seed).stream(("test", seed))


def test_split_budget_never_exceeds_epsilon():
    for eps in (0.1, 0.3, 1.0, 2.7, 8.0):
        for f in (0.1, 1 / 3, 0.5, 0.9):
            sel, cnt = split_budget(eps, f)
            assert sel + cnt <= eps
            assert sel == pytest.approx(f * eps) and cnt == pytest.approx((1 - f) * eps)
    # beam_dpsketch.checks: a bound violated is a ValueError, a wrong type a TypeError.
    bad_values = [(0.0, ValueError), (1.0, ValueError), (-0.5, ValueError)]
    bad_types = [(True, TypeError), ("0.5", TypeError)]
    for bad, error in bad_values + bad_types:
        with pytest.raises(error, match="selection_fraction"):
            split_budget(1.0, bad)


def test_selection_parameters_group_privacy_fits_the_budget():
    assert selection_parameters(0.5, 1e-6, None) == (0.5, 1e-6)
    for m in (1, 2, 5, 10):
        eps0, d0 = selection_parameters(0.5, 1e-6, m)
        # Group privacy of size m: (m eps0, m e^{(m-1) eps0} delta0) within (0.5, 1e-6).
        assert m * eps0 <= 0.5 + 1e-15
        assert m * math.exp((m - 1) * eps0) * d0 <= 1e-6


@pytest.mark.parametrize(
    "batch",
    [
        np.array([3, 1, 3, 7, 3, 9, 1], dtype=np.int64),
        [3, 1, 3, 7, 3, 9, 1],
        pa.array([3, 1, 3, 7, 3, 9, 1]),
    ],
)
def test_candidate_counts_equal_a_counter(batch):
    assert count_candidates(batch, [3, 9, 4, "x"]) == {3: 3, 9: 1}
    assert count_candidates(batch, []) == {}


def test_candidate_counts_of_string_and_tuple_keys():
    keys = ["a", "b", "a", ("a", 1), ("a", 1)]
    index = CandidateIndex(["a", ("a", 1), "zz"])
    assert len(index) == 3
    assert index.count(keys) == {"a": 2, ("a", 1): 2}
    big = [f"k{i % 50}" for i in range(1000)]
    truth = Counter(big)
    assert CandidateIndex(["k1", "k7"]).count(big) == {"k1": truth["k1"], "k7": truth["k7"]}


def test_count_release_adds_a_keyed_discrete_laplace_draw_to_every_candidate():
    eps, k = 0.5, 6
    rel = count_release(
        {"b": 10, "a": 4}, ["a", "b", "c"], PrivacyBudget.pure(eps), stream(3), k=k, sensitivity=2
    )
    scale = discrete_laplace_scale(2, eps)
    z = [int(discrete_laplace(stream(3).substream(key), scale, 1)[0]) for key in "abc"]
    # Canonical key order; the zero count of "c" is released too.
    assert rel.items == (("a", 4 + z[0]), ("b", 10 + z[1]), ("c", 0 + z[2]))
    assert rel.threshold is None and rel.delta == 0.0
    assert rel.noise.scale == pytest.approx(4.0)
    assert rel.details["sensitivity_l1"] == 2


def test_count_release_refuses_non_candidates_and_too_many_candidates():
    with pytest.raises(ValueError, match="counts"):
        count_release({"x": 1}, ["a"], PrivacyBudget.pure(1.0), stream(), k=2)
    with pytest.raises(ValueError, match="candidates"):
        count_release({}, ["a", "b", "c"], PrivacyBudget.pure(1.0), stream(), k=2)


def test_exact_user_gshm_uses_gshm_at_l_equals_m():
    counts = {"a": 300, "b": 2, "c": 80, "d": 0}
    m, eps, delta = 4, 1.0, 1e-6
    rel = exact_user_gshm(counts, m, PrivacyBudget.approx(eps, delta), stream(5))
    params = calibrate_gshm(m, eps, delta)
    assert rel.noise.scale == params.sigma and rel.threshold == params.threshold
    assert rel.details["l"] == m and rel.details["delta_exact"] <= delta
    z = gaussian(stream(5), params.sigma, 3).tolist()  # keys a, b, c in canonical order
    expected = {
        key: c + zi for (key, c), zi in zip([("a", 300), ("b", 2), ("c", 80)], z, strict=True)
    }
    for key, value in rel.items:
        assert value == pytest.approx(expected[key])
        assert value >= params.threshold
    assert "a" in rel.as_dict() and "c" in rel.as_dict() and "b" not in rel.as_dict()
    assert rel.privacy_unit == "user" and "m=4" in rel.neighbouring


def test_exact_user_gshm_noise_grows_with_m_not_k():
    sigmas = [
        exact_user_gshm({}, m, PrivacyBudget.approx(1.0, 1e-6), stream()).noise.scale
        for m in (1, 4, 16)
    ]
    assert sigmas[0] < sigmas[1] < sigmas[2]
    # GSHM at l = k = 100 (PAMG) has far larger sigma than at l = m = 1.
    assert calibrate_gshm(100, 1.0, 1e-6).sigma > 5 * sigmas[0]


def test_count_release_error_bound_covers_the_true_count_at_its_confidence():
    # The count is exact, so the stated bound is the noise's two-sided quantile: over many
    # seeded releases, |estimate - true| <= error_bound holds for at least 95% of the values
    # and fails for some (the bound is a quantile, not a worst case).
    eps, k, true = 0.5, 200, {"a": 40, "b": 7}
    inside = total = 0
    for seed in range(50):
        rel = count_release(
            true, ["a", "b", "c"], PrivacyBudget.pure(eps), stream(seed), k=k, sensitivity=2
        )
        for est in rel.estimates():
            assert est.confidence == 0.95
            assert est.upper - est.count == est.error_bound  # a true count is never negative:
            assert est.lower == max(0.0, est.count - est.error_bound)
            inside += abs(est.count - true.get(est.key, 0)) <= est.error_bound
            total += 1
    bound = rel.estimates()[0].error_bound
    # Scale 2/0.5 = 4: P(|Z| > t) = 2 a^(t+1) / (1 + a), a = exp(-1/4), first <= 0.05 at t = 12.
    assert bound == 12
    assert 0.93 <= inside / total < 1.0
