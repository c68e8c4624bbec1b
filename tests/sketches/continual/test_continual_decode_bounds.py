"""Continual-observation decoders raise the format error on out-of-range numbers, never another
exception (such as an ``OverflowError`` from the float arithmetic of the noise calibration for a
forged ``m`` or ``max_contributions`` of 10**400)."""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.continual.binary_mechanism import (
    GaussianBinaryMechanism,
    gaussbm_sigma,
)
from beam_dpsketch.sketches.continual.heavy_hitters import HierarchicalLazySketch
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch

SRC = NoiseSource.insecure_for_tests(11)
BUDGET = PrivacyBudget.approx(0.5, 1e-3)
HUGE = [10**400, -(10**400), 2**64]


def _objects() -> dict:
    out = {
        "GaussianBinaryMechanism": GaussianBinaryMechanism(
            4, 16, BUDGET, 1, noise_source=SRC, release_prefix="p"
        )
    }
    for cls in (LazySketch, PunctualSketch):
        for kind in ("cms", "cs"):
            s = cls(7, 3, 400, BUDGET, kind=kind, noise_source=SRC, release_prefix="p")
            s.update_batch([1, 2, 3, 1])
            out[f"{cls.__name__}-{kind}"] = s
    out["HierarchicalLazySketch"] = HierarchicalLazySketch(
        8, 4, 7, 3, 100, BUDGET, release_prefix="p", noise_source=SRC
    )
    return out


OBJECTS = _objects()


def _numeric_fields(params: dict, path: tuple = ()) -> list[tuple]:
    fields = []
    for name, value in params.items():
        if isinstance(value, dict):
            fields += _numeric_fields(value, (*path, name))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            fields.append((*path, name))
    return fields


def _cases() -> list:
    cases = []
    for name, obj in OBJECTS.items():
        _, params, _ = serialization.loads(obj.to_bytes())
        cases += [(name, ".".join(path)) for path in _numeric_fields(params)]
    return cases


@pytest.mark.parametrize("name,field", _cases())
@pytest.mark.parametrize("value", HUGE + [float("inf"), float("nan")], ids=str)
def test_out_of_range_numbers_are_format_errors(name, field, value):
    obj = OBJECTS[name]
    kind, params, arrays = serialization.loads(obj.to_bytes())
    target = params
    *parents, last = field.split(".")
    for part in parents:
        target = target[part]
    target[last] = value
    blob = serialization.dumps(kind, params, arrays)
    try:
        type(obj).from_bytes(blob, SRC)
    except SketchFormatError:
        pass  # refused as malformed bytes: the only exception a decoder may raise
    # Loading is fine where the value is a legitimate parameter (a seed of 2**64, say).


def _sensitivity_cases() -> list[tuple[str, str]]:
    cases = []
    for name, obj in OBJECTS.items():
        _, params, _ = serialization.loads(obj.to_bytes())
        stored = set(params) | set(params.get("mechanism", {}))
        cases += [(name, f) for f in ("m", "max_contributions") if f in stored]
    return cases


@pytest.mark.parametrize("name,field", _sensitivity_cases())
def test_huge_sensitivity_factors_refused(name, field):
    obj = OBJECTS[name]
    kind, params, arrays = serialization.loads(obj.to_bytes())
    for target in (params, params.get("mechanism", {})):
        if field in target:
            target[field] = 10**400
    with pytest.raises(SketchFormatError):
        type(obj).from_bytes(serialization.dumps(kind, params, arrays), SRC)


@pytest.mark.parametrize("field", ["m", "max_contributions"])
def test_constructors_name_an_absurd_sensitivity_factor(field):
    with pytest.raises(ValueError, match=field):
        GaussianBinaryMechanism(
            4, 16, BUDGET, noise_source=SRC, release_prefix="p", **{field: 10**400}
        )
    with pytest.raises(ValueError, match=field):
        gaussbm_sigma(
            16, **{"m": 1, "max_contributions": 1, field: 10**400}, epsilon=0.5, delta=1e-3
        )
    with pytest.raises(ValueError, match=field):
        LazySketch(7, 3, 400, BUDGET, noise_source=SRC, release_prefix="p", **{field: 10**400})


INT64_MAX = (1 << 63) - 1


@pytest.mark.parametrize("name", [n for n in OBJECTS if n.endswith("-cms")])
def test_count_min_totals_that_wrap_around_int64_refused(name):
    # Row 0 sums to 2**64 + 2, which int64 wraps to 2: with the other rows forged to 2 as well,
    # the equal-row-sums check alone would pass.
    obj = OBJECTS[name]
    kind, params, arrays = serialization.loads(obj.to_bytes())
    total = np.zeros((obj.depth, obj.width), dtype="<i8")
    total[0, :3] = [INT64_MAX, INT64_MAX, 4]
    total[1:, 0] = 2
    arrays["mech_total"] = total.reshape(-1)
    if "pending" in arrays:
        arrays["pending"] = np.zeros_like(arrays["pending"])
    with pytest.raises(SketchFormatError, match="int64"):
        type(obj).from_bytes(serialization.dumps(kind, params, arrays), SRC)


def test_lazy_pending_counts_beyond_int64_refused():
    obj = OBJECTS["LazySketch-cs"]
    kind, params, arrays = serialization.loads(obj.to_bytes())
    pending = np.zeros((obj.depth, obj.width), dtype="<i8")
    # Away from the column pushed last, which must have no pending count.
    pending[:, (obj.t - 2) % obj.width] = INT64_MAX
    arrays["pending"] = pending
    with pytest.raises(SketchFormatError, match="int64"):
        type(obj).from_bytes(serialization.dumps(kind, params, arrays), SRC)
