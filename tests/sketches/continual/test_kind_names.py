"""Continual sketches name their kind as every other sketch does, and old bytes still load.

The public names are ``"count-min"`` and ``"count-sketch"``; the short codes ``"cms"`` / ``"cs"``
live on in noise keys and serialized bytes only, so a release is identical whichever name built
it and bytes written with the short codes load unchanged.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.continual import HierarchicalLazySketch, LazySketch, PunctualSketch
from beam_dpsketch.sketches.continual.sketch import KINDS, new_continual_sketch

GOLDEN = json.loads(
    (pathlib.Path(__file__).parents[2] / "golden" / "continual_kind_codes.json").read_text()
)
BUDGET = PrivacyBudget.approx(0.5, 1e-6)


def test_public_kind_names_only():
    assert KINDS == ("count-min", "count-sketch")
    s = LazySketch(4, 2, 8, BUDGET, release_prefix="p", kind="count-sketch")
    assert s.kind == "count-sketch"
    assert LazySketch(4, 2, 8, BUDGET, release_prefix="p").kind == "count-min"
    with pytest.raises(ValueError, match="^kind must be one of"):
        LazySketch(4, 2, 8, BUDGET, release_prefix="p", kind="count_min")


def test_lazy_sketch_signature_is_explicit():
    import inspect

    params = inspect.signature(LazySketch).parameters
    assert "args" not in params and "kwargs" not in params
    assert list(params)[:4] == ["width", "depth", "horizon", "budget"]
    assert params["release_prefix"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("cls", [LazySketch, PunctualSketch])
@pytest.mark.parametrize("name,code", [("count-min", "cms"), ("count-sketch", "cs")])
def test_short_codes_are_deprecated_aliases_with_identical_noise(cls, name, code):
    data = np.array([1, 2, 2, 3, 5, 8, 13, 2], dtype=np.int64)
    new = cls(
        8,
        2,
        16,
        BUDGET,
        release_prefix="r",
        kind=name,
        seed=3,
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    with pytest.warns(DeprecationWarning, match=f"use kind='{name}'"):
        old = cls(
            8,
            2,
            16,
            BUDGET,
            release_prefix="r",
            kind=code,
            seed=3,
            noise_source=NoiseSource.insecure_for_tests(1),
        )
    assert old.kind == name
    new.update_batch(data)
    old.update_batch(data)
    assert new.to_bytes() == old.to_bytes()
    np.testing.assert_array_equal(new.estimate([1, 2, 3]), old.estimate([1, 2, 3]))


def test_bytes_written_with_short_codes_load_and_round_trip():
    src = NoiseSource.insecure_for_tests(7)
    lazy = LazySketch.from_bytes(bytes.fromhex(GOLDEN["lazy_cs"]), src)
    assert lazy.kind == "count-sketch"
    assert lazy.to_bytes().hex() == GOLDEN["lazy_cs"]
    assert lazy.estimate([1, 2, 3]).tolist() == GOLDEN["lazy_estimates"]
    hh = HierarchicalLazySketch.from_bytes(bytes.fromhex(GOLDEN["hierarchical_cms"]), src)
    assert hh.kind == "count-min" and all(lv.kind == "count-min" for lv in hh.levels)
    assert hh.to_bytes().hex() == GOLDEN["hierarchical_cms"]
    assert hh.levels[-1].estimate([1, 2, 9]).tolist() == GOLDEN["hierarchical_estimates"]


def test_factory_takes_the_same_names():
    s = new_continual_sketch(8, 2, 16, BUDGET, release_prefix="f", sketch="count-sketch")
    assert s.kind == "count-sketch"
    with pytest.raises(ValueError, match="^sketch must be one of"):
        new_continual_sketch(8, 2, 16, BUDGET, release_prefix="f", sketch="cs")
