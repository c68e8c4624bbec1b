"""Sliding-window sketches name their release id ``release_prefix`` and take a PrivacyBudget.

``label`` stays a deprecated keyword alias (and the serialized field name, so stored states
load); U-Sketch's bare float epsilon is a deprecated form of ``PrivacyBudget.pure(epsilon)``.
The noise is identical whichever spelling built the sketch.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.sliding.baselines import PCCMG, USketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch

GOLDEN = json.loads(
    (pathlib.Path(__file__).parents[2] / "golden" / "release_prefix_bytes.json").read_text()
)
KEYS = np.array([1, 2, 2, 3, 5, 8, 1, 1, 4, 2, 2, 2], dtype=np.int64)


def _dpsw(**kwargs):
    d = DPSWSketch.paper_experiments(
        20,
        PrivacyBudget.zcdp(0.5),
        width=8,
        depth=2,
        seed=3,
        noise_source=NoiseSource.insecure_for_tests(11),
        **kwargs,
    )
    d.update_batch(KEYS)
    d.advance_to(12)
    return d


def test_dpsw_release_prefix_and_its_deprecated_alias():
    new = _dpsw(release_prefix="golden-sw")
    assert new.release_prefix == "golden-sw"
    with pytest.warns(DeprecationWarning, match="label= is deprecated"):
        old = _dpsw(label="golden-sw")
    assert old.to_bytes() == new.to_bytes()
    assert new.to_bytes().hex() == GOLDEN["dpsw"]
    assert new.estimate([1, 2, 9]).tolist() == GOLDEN["dpsw_estimates"]
    assert _dpsw().release_prefix == "dpsw"
    with pytest.raises(TypeError, match="^release_prefix must be a str"):
        _dpsw(release_prefix=("a", 1))


def test_dpsw_bytes_written_with_label_load():
    d = DPSWSketch.from_bytes(bytes.fromhex(GOLDEN["dpsw"]), NoiseSource.insecure_for_tests(11))
    assert d.release_prefix == "golden-sw"
    assert d.estimate([1, 2, 9]).tolist() == GOLDEN["dpsw_estimates"]


def test_usketch_takes_a_budget_and_the_float_is_deprecated():
    def answers(budget, **kwargs):
        u = USketch(
            100,
            budget,
            width=16,
            depth=2,
            blocks_per_window=10,
            noise_source=NoiseSource.insecure_for_tests(5),
            **kwargs,
        )
        u.update_batch(np.tile(KEYS, 20))
        return u, u.estimate([1, 2, 9])

    new, est_new = answers(PrivacyBudget.pure(1.0), release_prefix="u")
    with pytest.warns(DeprecationWarning):
        old, est_old = answers(1.0, label="u")
    assert new.epsilon == old.epsilon == 1.0 and old.release_prefix == "u"
    np.testing.assert_array_equal(est_new, est_old)
    with pytest.raises(ValueError, match="^budget must be pure DP"):
        answers(PrivacyBudget.zcdp(0.5))


def test_pccmg_release_prefix():
    p = PCCMG(64, PrivacyBudget.pure(1.0), lam=0.5, universe=range(10), release_prefix="x")
    assert p.release_prefix == "x"
    assert PCCMG(64, PrivacyBudget.pure(1.0), lam=0.5, universe=range(10)).release_prefix == "pccmg"


@pytest.mark.parametrize("preset", [DPSWSketch.theory, DPSWSketch.paper_experiments])
def test_presets_have_explicit_signatures(preset):
    import inspect

    params = inspect.signature(preset).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert {"seed", "noise_source", "release_prefix", "noise", "hh_slack"} <= set(params)
    with pytest.raises(TypeError, match="unexpected keyword"):
        preset(100, PrivacyBudget.zcdp(0.5), width=8, depth=2, bogus=1)
