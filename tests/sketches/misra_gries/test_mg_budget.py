"""Every Misra-Gries release spends a :class:`~beam_dpsketch.privacy.PrivacyBudget` of its kind.

The ``(epsilon, delta)`` releases take ``PrivacyBudget.approx(epsilon, delta)`` with
``delta > 0`` (thresholding needs ``delta`` to hide keys); the pure releases take
``PrivacyBudget.pure(epsilon)``. Any other budget is refused with a ``ValueError`` that names
``budget`` and the kind the release accepts, and bare floats are refused with a ``TypeError``
naming ``budget``. A release states at most the budget it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import misra_gries as mg
from beam_dpsketch.sketches.misra_gries.exact import exact_user_gshm
from beam_dpsketch.sketches.misra_gries.gate import exact_histogram_release
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    hashed_pamg_gshm,
    hashed_selection,
)
from beam_dpsketch.sketches.misra_gries.select_count import count_release, select_candidates

SRC = NoiseSource.insecure_for_tests(7)
KEYS = ["a"] * 40 + ["b"] * 25 + ["c"] * 9 + list(range(12))
UNIVERSE = ["a", "b", "c", *range(12)]


def _mg() -> mg.MisraGries:
    return mg.MisraGries(8).update(KEYS)


def _merged() -> mg.MisraGries:
    return mg.MisraGries(8).update(KEYS[:30]).merge(mg.MisraGries(8).update(KEYS[30:]))


def _pp() -> mg.PostProcessedSum:
    return mg.PostProcessedSum.from_sketch(_mg())


def _pamg() -> mg.PAMGSketch:
    return mg.PAMGSketch(8, 2).update_users([["a", "b"], ["a"], ["c", "a"]] * 5)


def _hashed() -> HashedPAMG:
    sketch = HashedPAMG(32)
    for unit in [["a", "b"], ["a"], ["c", "a"]] * 5:
        sketch.update(unit)
    return sketch


#: Every (epsilon, delta) release, as ``budget, stream -> release``.
APPROX: dict[str, Callable[[Any, Any], Any]] = {
    "pmg": lambda b, s: mg.pmg(_mg(), b, s),
    "pmg_standard": lambda b, s: mg.pmg_standard(_mg(), b, s),
    "approx_pp": lambda b, s: mg.approx_pp(_pp(), b, s),
    "gated_approx_pp": lambda b, s: mg.gated_approx_pp(_pp(), b, s),
    "exactness_gated": lambda b, s: mg.exactness_gated(
        _mg(),
        b,
        s,
        lambda branch: mg.merged_laplace(_mg(), branch, s),
        noise="discrete_laplace",
        neighbouring=mg.NEIGHBOURING_SHARDED,
    ),
    "merged_laplace": lambda b, s: mg.merged_laplace(_merged(), b, s),
    "merged_gshm": lambda b, s: mg.merged_gshm(_merged(), b, s),
    "pamg_gshm": lambda b, s: mg.pamg_gshm(_pamg(), b, s),
    "user_level_pmg": lambda b, s: mg.user_level_pmg(_mg(), b, 2, s),
    "chan_thresholded": lambda b, s: mg.chan_thresholded(_mg(), b, s),
    "stability_histogram": lambda b, s: mg.stability_histogram(KEYS, b, s),
    "gaussian_histogram": lambda b, s: mg.gaussian_histogram(KEYS, b, s),
    "exact_user_gshm": lambda b, s: exact_user_gshm({"a": 5, "b": 3}, 2, b, s),
    "exact_histogram_release": lambda b, s: exact_histogram_release(
        {"a": 5, "b": 3}, b, s, noise="discrete_laplace", k=8
    ),
    "hashed_selection": lambda b, s: hashed_selection(_hashed(), 2, b, s, k=4),
    "hashed_pamg_gshm": lambda b, s: hashed_pamg_gshm(_hashed(), 2, b, s, k=4),
    "select_candidates": lambda b, s: select_candidates(_pp(), b, s, k=8),
}

#: Every pure release, as ``budget, stream -> release``.
PURE: dict[str, Callable[[Any, Any], Any]] = {
    "pure_pp": lambda b, s: mg.pure_pp(_pp(), UNIVERSE, b, s),
    "merged_pure": lambda b, s: mg.merged_pure(_merged(), UNIVERSE, b, s),
    "chan_pure": lambda b, s: mg.chan_pure(_mg(), UNIVERSE, b, s),
    "count_release": lambda b, s: count_release({"a": 40}, ["a", "b"], b, s, k=8),
}

NOT_APPROX = {
    "pure": PrivacyBudget.pure(1.0),
    "zcdp": PrivacyBudget.zcdp(0.5),
    "approx without delta": PrivacyBudget.approx(1.0, 0.0),
}
NOT_PURE = {
    "approx": PrivacyBudget.approx(1.0, 1e-6),
    "approx without delta": PrivacyBudget.approx(1.0, 0.0),
    "zcdp": PrivacyBudget.zcdp(0.5),
}


def test_every_release_of_the_package_face_is_covered():
    releases = {
        "pmg",
        "pmg_standard",
        "approx_pp",
        "pure_pp",
        "gated_approx_pp",
        "exactness_gated",
        "merged_laplace",
        "merged_pure",
        "merged_gshm",
        "pamg_gshm",
        "user_level_pmg",
        "chan_pure",
        "chan_thresholded",
        "stability_histogram",
        "gaussian_histogram",
    }
    assert releases <= set(mg.__all__)
    assert releases <= set(APPROX) | set(PURE)


@pytest.mark.parametrize("name", sorted(APPROX))
def test_approximate_releases_spend_an_approximate_budget(name):
    budget = PrivacyBudget.approx(1.0, 1e-6)
    out = APPROX[name](budget, SRC.stream(("approx", name)))
    if isinstance(out, mg.HeavyHitterRelease):
        # A gated release whose sketch branch ran states that branch's share of the budget.
        assert 0.0 < out.epsilon <= budget.epsilon and 0.0 < out.delta <= budget.delta


@pytest.mark.parametrize("kind", sorted(NOT_APPROX))
@pytest.mark.parametrize("name", sorted(APPROX))
def test_approximate_releases_refuse_other_budgets_naming_budget(name, kind):
    with pytest.raises(ValueError, match=r"budget must be PrivacyBudget\.approx\(epsilon, delta\)"):
        APPROX[name](NOT_APPROX[kind], SRC.stream(("refused", name)))


@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_releases_spend_a_pure_budget(name):
    budget = PrivacyBudget.pure(1.0)
    out = PURE[name](budget, SRC.stream(("pure", name)))
    assert out.budget == budget and out.delta == 0.0


@pytest.mark.parametrize("kind", sorted(NOT_PURE))
@pytest.mark.parametrize("name", sorted(PURE))
def test_pure_releases_refuse_other_budgets_naming_budget(name, kind):
    with pytest.raises(ValueError, match=r"budget must be PrivacyBudget\.pure\(epsilon\)"):
        PURE[name](NOT_PURE[kind], SRC.stream(("refused", name)))


@pytest.mark.parametrize("name", sorted(APPROX) + sorted(PURE))
def test_a_bare_epsilon_is_refused_naming_budget(name):
    release = APPROX.get(name) or PURE[name]
    with pytest.raises(TypeError, match=r"budget must be a beam_dpsketch\.privacy\.PrivacyBudget"):
        release(1.0, SRC.stream(("float", name)))
