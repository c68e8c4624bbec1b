"""PMG's threshold is named for what it is: ``"union_bound"`` (the default) or ``"paper"``.

``"union_bound"`` is the union bound over the draws that can differ between neighbouring
sketches on the exact tail of the noise (docs/algorithms.md#mg-e5); ``"paper"`` the probable
printed constant. No other name is accepted.
"""

from __future__ import annotations

import warnings

import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import THRESHOLD_FORMS, MisraGries, pmg
from beam_dpsketch.sketches.misra_gries.calibration import pmg_geometric_threshold
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg_parameters

SRC = NoiseSource.insecure_for_tests(27)


def _sketch() -> MisraGries:
    return MisraGries(8).update(["a"] * 300 + ["b"] * 120 + ["c"] * 40 + list(range(30)))


def test_the_default_threshold_is_the_union_bound():
    assert THRESHOLD_FORMS == ("union_bound", "paper")
    default = pmg(_sketch(), PrivacyBudget.approx(1.0, 1e-6), SRC.stream("form"))
    named = pmg(
        _sketch(), PrivacyBudget.approx(1.0, 1e-6), SRC.stream("form"), threshold_form="union_bound"
    )
    assert named == default
    assert default.details["threshold_form"] == "union_bound"
    # On the integer form it is the library's tau_geo = 1 + 2 t* of docs/algorithms.md#mg-e5.
    integer = pmg(
        _sketch(),
        PrivacyBudget.approx(1.0, 1e-6),
        SRC.stream("i"),
        threshold_form="union_bound",
        lattice=False,
    )
    assert integer.threshold == pmg_geometric_threshold(1.0, 1e-6)[0]


def test_the_former_name_is_refused_naming_the_parameter():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="threshold_form") as raised:
            pmg(
                _sketch(), PrivacyBudget.approx(1.0, 1e-6), SRC.stream("old"), threshold_form="spec"
            )
    assert "union_bound" in str(raised.value)
    with pytest.raises(ValueError, match="threshold_form"):
        pmg_parameters(1.0, 1e-6, noise="discrete_laplace", threshold_form="spec", draws=6)


def test_the_paper_form_is_unchanged_and_warns_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rel = pmg(
            _sketch(), PrivacyBudget.approx(1.0, 1e-6), SRC.stream("p"), threshold_form="paper"
        )
    assert rel.details["threshold_form"] == "paper" and rel.threshold == 32


def test_an_unknown_form_names_the_accepted_ones():
    with pytest.raises(
        ValueError, match=r"threshold_form must be one of \('union_bound', 'paper'\)"
    ):
        pmg(_sketch(), PrivacyBudget.approx(1.0, 1e-6), SRC.stream("x"), threshold_form="tight")
