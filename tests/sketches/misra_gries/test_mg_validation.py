"""Misra-Gries parameters are validated by the library's one rule, :mod:`beam_dpsketch.checks`.

A value of the wrong type raises ``TypeError`` and a value out of bounds ``ValueError``, with the
message the shared check produces for that parameter, whichever function of the family the user
called (a sketch, a release, a calibration or a sizing helper).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from beam_dpsketch import checks
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    MisraGries,
    PAMGSketch,
    Universe,
    approx_pp,
    apriori_error,
    calibrate_gshm,
    gshm_parameters,
    memory_bytes,
    merged_laplace,
    pmg,
    recommend_merged_mechanism,
    suggest_k,
)
from beam_dpsketch.sketches.misra_gries.calibration import gshm_delta
from beam_dpsketch.sketches.misra_gries.sizing import MAX_K

STREAM = NoiseSource.insecure_for_tests(5).stream("validation")


def _sketch() -> MisraGries:
    return MisraGries(4).update(["a"] * 20 + ["b"] * 5)


def _message(check: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[type, str]:
    """The exception type and message the shared check gives for the same value."""
    with pytest.raises((TypeError, ValueError)) as info:
        check(*args, **kwargs)
    return info.type, str(info.value)


CASES = [
    # (call, the shared check that defines the error)
    (
        lambda: suggest_k(max_error="1", n=10),
        lambda: checks.check_real("1", "max_error", 0.0, lower_open=True),
    ),
    (lambda: apriori_error(4, -1), lambda: checks.check_int(-1, "n", lower=0)),
    (lambda: memory_bytes(4, max_shards=1.5), lambda: checks.check_int(1.5, "max_shards")),
    (lambda: MisraGries("5"), lambda: checks.check_int("5", "k", upper=MAX_K)),
    (lambda: PAMGSketch(MAX_K + 1, 1), lambda: checks.check_int(MAX_K + 1, "k", upper=MAX_K)),
    (
        lambda: recommend_merged_mechanism("5", 2, 1.0, 1e-6),
        lambda: checks.check_int("5", "k"),
    ),
    (
        lambda: calibrate_gshm(4, 1.0, 1e-6, beta=True),
        lambda: checks.check_probability(True, "beta"),
    ),
    (
        lambda: gshm_parameters(4, 1.0, 1e-6, "3"),
        lambda: checks.check_real("3", "sigma", 0.0, lower_open=True),
    ),
    (lambda: gshm_delta(4, 3.0, "1", 1.0), lambda: checks.check_real("1", "tau")),
    (
        lambda: pmg(_sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM, lattice=1),
        lambda: checks.check_bool(1, "lattice"),
    ),
    (
        lambda: pmg(_sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM, noise="gaussian"),
        lambda: checks.check_choice("gaussian", "noise", ("discrete_laplace", "laplace")),
    ),
    (
        lambda: merged_laplace(
            _sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM, noise="gaussian"
        ),
        lambda: checks.check_choice("gaussian", "noise", ("discrete_laplace", "laplace")),
    ),
    (
        lambda: approx_pp(_sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM, tight_sensitivity=1),
        lambda: checks.check_bool(1, "tight_sensitivity"),
    ),
    (
        lambda: approx_pp(
            _sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM, error_confidence="0.9"
        ),
        lambda: checks.check_probability("0.9", "error_confidence"),
    ),
    (
        lambda: pmg(_sketch(), PrivacyBudget.approx(1.0, 1e-6), STREAM).top("2"),
        lambda: checks.check_int("2", "m", lower=0),
    ),
    (
        lambda: Universe(2.0, lambda i: i, lambda x: True),
        lambda: checks.check_int(2.0, "size", upper=(1 << 63) - 1),
    ),
]


IDS = [
    "suggest_k-max_error-type",
    "apriori_error-n-bound",
    "memory_bytes-max_shards-type",
    "MisraGries-k-type",
    "PAMGSketch-k-bound",
    "recommend-k-type",
    "calibrate_gshm-beta-type",
    "gshm_parameters-sigma-type",
    "gshm_delta-tau-type",
    "pmg-lattice-type",
    "pmg-noise-choice",
    "merged_laplace-noise-choice",
    "approx_pp-tight_sensitivity-type",
    "approx_pp-error_confidence-type",
    "top-m-type",
    "Universe-size-type",
]


@pytest.mark.parametrize(("call", "rule"), CASES, ids=IDS)
def test_errors_are_those_of_the_shared_checks(call, rule):
    expected_type, expected_message = _message(rule)
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert info.type is expected_type
    assert str(info.value) == expected_message


def test_a_string_k_is_a_type_error_in_every_sketch_and_sizing_helper():
    for build in (
        lambda: MisraGries("5"),
        lambda: PAMGSketch("5", 1),
        lambda: memory_bytes("5"),
        lambda: apriori_error("5", 10),
        lambda: recommend_merged_mechanism("5", 2, 1.0, 1e-6),
    ):
        with pytest.raises(TypeError, match="^k must be an int, got str$"):
            build()
