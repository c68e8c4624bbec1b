"""Intermittent sketches take ``release_prefix`` and the public kind names, and old bytes load.

The release id is named ``release_prefix`` as in the continual and sliding-window sketches
(``sketch_id`` stays a deprecated keyword alias); ``kind`` is ``"count-sketch"`` /
``"count-min"`` as in every other sketch, the underscored codes living on in the serialized
state only. Bytes written with the old names load and continue bit for bit.
"""

from __future__ import annotations

import inspect
import json
import pathlib

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.intermittent import UseAndForgetCellSketch, UseAndKeepSketch
from beam_dpsketch.sketches.intermittent.sketch import SKETCH_KINDS
from beam_dpsketch.sketches.intermittent.strategies import make_intermittent_sketch

GOLDEN = json.loads(
    (pathlib.Path(__file__).parents[2] / "golden" / "release_prefix_bytes.json").read_text()
)
BUDGET = PrivacyBudget.pure(1.0)
DATA = np.array([1, 2, 2, 3, 5, 8], dtype=np.int64)


def _answer(**kwargs):
    s = UseAndKeepSketch(8, 3, BUDGET, noise_source=NoiseSource.insecure_for_tests(2), **kwargs)
    s.update(DATA)
    return s, s.answer([1, 2, 9]).estimates


def test_public_names():
    assert tuple(SKETCH_KINDS) == ("count-sketch", "count-min")
    s, _ = _answer(release_prefix="a")
    assert s.kind == "count-sketch" and s.release_prefix == "a"
    with pytest.raises(ValueError, match="^kind must be one of"):
        _answer(release_prefix="a", kind="cms")
    with pytest.raises(TypeError, match="release_prefix"):
        UseAndKeepSketch(8, 3, BUDGET, noise_source=NoiseSource.insecure_for_tests(2))


def test_old_names_are_deprecated_aliases_with_identical_noise():
    new, ans_new = _answer(release_prefix=("p", 1), kind="count-min")
    with pytest.warns(DeprecationWarning) as caught:
        old, ans_old = _answer(sketch_id=("p", 1), kind="count_min")
    assert {str(w.message).split(" ")[0] for w in caught} == {"sketch_id=", "kind='count_min'"}
    assert old.kind == "count-min"
    np.testing.assert_array_equal(ans_new, ans_old)
    assert new.to_bytes() == old.to_bytes()
    with pytest.raises(TypeError, match="give release_prefix only"):
        _answer(release_prefix="a", sketch_id="a")


def test_bytes_written_with_the_old_names_load_and_round_trip():
    src = NoiseSource.insecure_for_tests(11)
    s = UseAndKeepSketch.from_bytes(bytes.fromhex(GOLDEN["use_and_keep_count_min"]), src)
    assert s.kind == "count-min" and s.release_prefix == ("golden", 1)
    assert s.to_bytes().hex() == GOLDEN["use_and_keep_count_min"]
    # The next batch's noise continues from the restored state as before.
    assert s.batches == 1


def test_factory_has_an_explicit_signature():
    params = inspect.signature(make_intermittent_sketch).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    s = make_intermittent_sketch(
        "use_and_forget_cell",
        8,
        3,
        BUDGET,
        noise_source=NoiseSource.insecure_for_tests(2),
        release_prefix="f",
        eta="1/2",
    )
    assert isinstance(s, UseAndForgetCellSketch) and s.release_prefix == "f"
    with pytest.raises(ValueError, match="^strategy must be one of"):
        make_intermittent_sketch("d3", 8, 3, BUDGET, noise_source=NoiseSource.insecure_for_tests(2))
