"""The shared parameter checks (beam_dpsketch.checks) and their use across the library."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest

from beam_dpsketch import hashing
from beam_dpsketch.checks import check_int, check_probability
from beam_dpsketch.hashing import check_key_like
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import calibration
from beam_dpsketch.privacy.budget import PrivacyBudget, group_privacy
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.continual.binary_mechanism import (
    GaussianBinaryMechanism,
    max_error_bound,
)
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch
from beam_dpsketch.transforms.combiners import SketchSpec

# --------------------------------------------------------------------------------------------
# check_int
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [7, np.int8(7), np.int64(7), np.uint64(7), np.uint32(7), 7 + 0 * 2**70]
)
def test_check_int_returns_a_python_int(value):
    out = check_int(value, "x", 0, 10)
    assert out == 7 and type(out) is int


@pytest.mark.parametrize(
    "value,type_name",
    [
        (True, "bool"),
        (np.bool_(True), "bool"),
        (1.0, "float"),
        (np.float64(2.0), "float64"),
        ("3", "str"),
        (None, "NoneType"),
        (Fraction(4, 1), "Fraction"),
        (np.array(5), "ndarray"),
    ],
)
def test_check_int_type_errors_name_parameter_and_type(value, type_name):
    with pytest.raises(TypeError) as info:
        check_int(value, "width", 1, 10)
    assert str(info.value) == f"width must be an int, got {type_name}"


@pytest.mark.parametrize(
    "value,lower,upper,message",
    [
        (0, 1, None, "n must be >= 1, got 0"),
        (-(2**70), 0, None, f"n must be >= 0, got {-(2**70)}"),
        (11, None, 10, "n must be <= 10, got 11"),
        (0, 1, 10, "n must be in [1, 10], got 0"),
        (11, 1, 10, "n must be in [1, 10], got 11"),
        (np.int64(-3), -2, 5, "n must be in [-2, 5], got -3"),
    ],
)
def test_check_int_range_errors_name_parameter_and_bound(value, lower, upper, message):
    with pytest.raises(ValueError) as info:
        check_int(value, "n", lower, upper)
    assert str(info.value) == message


def test_check_int_bounds_are_inclusive_and_optional():
    assert check_int(1, "n", 1, 1) == 1
    assert check_int(10, "n", 1, 10) == 10
    assert check_int(-(2**80), "n", None) == -(2**80)
    assert check_int(2**80, "n", None, None) == 2**80
    assert check_int(5, "n") == 5  # default: lower = 1, no upper bound
    with pytest.raises(ValueError, match=r"^n must be >= 1, got 0$"):
        check_int(0, "n")


# --------------------------------------------------------------------------------------------
# check_probability
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.5, np.float32(0.25), Fraction(1, 3), 1e-300, 1 - 2**-53])
def test_check_probability_accepts_open_unit_interval(value):
    out = check_probability(value, "beta")
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, -0.1, 1.5, math.nan, math.inf, -math.inf])
def test_check_probability_range_errors(value):
    with pytest.raises(ValueError) as info:
        check_probability(value, "beta")
    assert str(info.value) == f"beta must be in (0, 1), got {value!r}"


@pytest.mark.parametrize(
    "value,type_name",
    [(True, "bool"), (np.bool_(False), "bool"), ("0.5", "str"), (None, "NoneType")],
)
def test_check_probability_type_errors(value, type_name):
    with pytest.raises(TypeError) as info:
        check_probability(value, "beta")
    assert str(info.value) == f"beta must be a real number, got {type_name}"


# --------------------------------------------------------------------------------------------
# check_key_like (in beam_dpsketch.hashing, next to the key encoding)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["run-1", b"\x00id", 42, -(2**80), ("job", 3, (b"x", "y")), ()])
def test_check_key_like_returns_value_unchanged(value):
    assert check_key_like(value, "release_prefix") is value


@pytest.mark.parametrize("value", [1.5, ["a"], None, {"a": 1}, ("ok", 2.0), np.float64(1.0)])
def test_check_key_like_rejects_what_encode_key_rejects(value):
    with pytest.raises(TypeError) as expected:
        hashing.encode_key(value)
    with pytest.raises(TypeError) as info:
        check_key_like(value, "sketch_id")
    assert str(info.value) == f"sketch_id: {expected.value}"


# --------------------------------------------------------------------------------------------
# Call sites: one wording everywhere (sketches, transforms, privacy, hashing)
# --------------------------------------------------------------------------------------------

SRC = NoiseSource.insecure_for_tests(0)


@pytest.mark.parametrize(
    "call,exc,message",
    [
        (lambda: CountMinSketch(True, 2), TypeError, "width must be an int, got bool"),
        (lambda: CountMinSketch(2**31 + 1, 2), ValueError, "width must be in [1, 2147483648]"),
        (lambda: CountMinSketch(8, 2, -1), ValueError, "seed must be in [0, 4294967295], got -1"),
        (lambda: hashing.check_seed(1.0, "salt"), TypeError, "salt must be an int, got float"),
        (lambda: group_privacy(PrivacyBudget.pure(1.0), 0), ValueError, "group_size must be >= 1"),
        (
            lambda: calibration.geometric_split_epsilon(1.0, 0.5, 0),
            ValueError,
            "index must be >= 1",
        ),
        (
            lambda: max_error_bound(8, 1, 1, 1, 0.5, 1e-6, beta=1.0),
            ValueError,
            "beta must be in (0, 1)",
        ),
        (
            lambda: GaussianBinaryMechanism(
                1, 8, PrivacyBudget.approx(0.5, 1e-6), release_prefix=[1]
            ),
            TypeError,
            "release_prefix: ",
        ),
        (
            lambda: GaussianBinaryMechanism(
                1, 8, PrivacyBudget.approx(0.5, 1e-6), release_prefix="p", m=np.bool_(1)
            ),
            TypeError,
            "m must be an int, got bool",
        ),
        (
            lambda: UseAndKeepSketch(
                8, 2, PrivacyBudget.pure(1.0), noise_source=SRC, release_prefix=1.5
            ),
            TypeError,
            "release_prefix: ",
        ),
        # A SketchSpec reports bad parameters as the sketch classes do, same wording.
        (lambda: SketchSpec.count_min(1.5, 2), TypeError, "width must be an int, got float"),
        (lambda: SketchSpec.misra_gries(0), ValueError, "k must be in [1, "),
    ],
)
def test_call_sites_use_the_shared_wording(call, exc, message):
    with pytest.raises(exc, match="^" + re.escape(message)):
        call()


# --------------------------------------------------------------------------------------------
# check_real, check_bool, check_choice, renamed_keyword
# --------------------------------------------------------------------------------------------


def test_check_real_types_and_bounds():
    from beam_dpsketch.checks import check_real

    assert check_real(Fraction(1, 2), "q", 0.0, 1.0) == 0.5
    assert check_real(np.int64(3), "x") == 3.0
    for bad in (True, "0.5", None, np.array(0.5)):
        with pytest.raises(TypeError, match="^q must be a real number, got "):
            check_real(bad, "q")
    with pytest.raises(ValueError, match="^q must not be NaN"):
        check_real(float("nan"), "q", finite=False)
    with pytest.raises(ValueError, match="^q must be finite, got inf"):
        check_real(math.inf, "q")
    assert check_real(-math.inf, "t", finite=False) == -math.inf
    with pytest.raises(ValueError, match=re.escape("phi must be in (0, 1], got 0")):
        check_real(0, "phi", 0.0, 1.0, lower_open=True)
    with pytest.raises(ValueError, match="^rho must be > 0, got -1"):
        check_real(-1, "rho", 0.0, lower_open=True)


def test_check_bool_and_check_choice():
    from beam_dpsketch.checks import check_bool, check_choice

    assert check_bool(np.bool_(True), "flag") is True
    with pytest.raises(TypeError, match="^flag must be a bool, got int"):
        check_bool(1, "flag")
    assert check_choice("a", "mode", ("a", "b")) == "a"
    for bad in ("c", ["a"], np.array(["a", "b"]), 3):
        with pytest.raises(ValueError, match="^mode must be one of \\('a', 'b'\\), got "):
            check_choice(bad, "mode", ("a", "b"))
    with pytest.warns(DeprecationWarning, match="mode='x' is deprecated: use mode='a'"):
        assert check_choice("x", "mode", ("a", "b"), deprecated={"x": "a"}) == "a"


def test_renamed_keyword():
    from beam_dpsketch.checks import renamed_keyword

    assert renamed_keyword("new", None, "release_prefix", "label") == "new"
    with pytest.warns(DeprecationWarning, match="label= is deprecated: use release_prefix="):
        assert renamed_keyword(None, "old", "release_prefix", "label") == "old"
    with pytest.raises(TypeError, match="give release_prefix only"):
        renamed_keyword("a", "b", "release_prefix", "label")
