"""Heavy-hitter mechanism objects: calibration stated up front equals what a release reports.

Each mechanism of ``beam_dpsketch.transforms.heavy_hitters`` states its noise, scale, threshold
and budget split from public parameters (``calibration``/``describe``) without running a
release; these tests compare those statements with the metadata of real releases on inexact
inputs (the sketch branch of the gated releases, whose facts the calibration states), for every
mechanism and several budgets, and check that stating them draws no noise at all.
"""

from __future__ import annotations

import re
from typing import Any

import apache_beam as beam
import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.heavy_hitters import (
    MECHANISM_CLASSES,
    MECHANISMS,
    DesignB,
    HeavyHitterMechanism,
    MergedGSHM,
    MergedLaplace,
    PamgGSHM,
    SelectThenCount,
    Sequential,
    UserExact,
)

BUDGETS = [
    PrivacyBudget.approx(1.0, 1e-6),
    PrivacyBudget.approx(0.3, 1e-8),
    PrivacyBudget.approx(4.0, 1e-5),
]
K = 16
M = 3
USER_MECHANISMS = tuple(name for name, cls in MECHANISM_CLASSES.items() if cls.levels == ("user",))
#: Mechanisms that take a declared public parameter with no default, built with one here.
DECLARED = {"user-pure-pp": {"universe": range(1000)}}


def drive(mechanism: HeavyHitterMechanism, inputs: list[Any]) -> Any:
    """The mechanism's combine step over ``inputs``, in two accumulators merged (or one)."""
    fn = mechanism.combine_fn()
    # A Design B aggregate declared for one segment takes one accumulator only.
    half = 0 if getattr(mechanism, "max_shards", 2) == 1 else len(inputs) // 2
    accs = []
    for part in (inputs[:half], inputs[half:]):
        acc = fn.create_accumulator()
        for element in part:
            acc = fn.add_input(acc, element)
        accs.append(acc)
    return fn.extract_output(fn.merge_accumulators(accs))


def element_batches() -> list[np.ndarray]:
    """Many more distinct keys than K with a heavy head: every sketch decrements."""
    rng = np.random.default_rng(7)
    tail = rng.integers(0, 50 * K, size=4000)
    head = np.repeat(np.arange(3), 400)
    keys = np.concatenate([head, tail]).astype(np.int64)
    return np.array_split(keys, 8)


def unit_key_lists() -> list[list[int]]:
    """Per-unit distinct key lists (at most M keys each), as user-level releases receive them."""
    rng = np.random.default_rng(8)
    units = [sorted({0, 1, int(rng.integers(2, 200))}) for _ in range(300)]
    return units + [sorted(set(rng.integers(0, 400, size=M).tolist())) for _ in range(300)]


def bound(mechanism: HeavyHitterMechanism) -> HeavyHitterMechanism:
    user = mechanism.key in USER_MECHANISMS
    return mechanism.bind(top=None, max_contributions=M if user else None)


def check_matches(stated: dict[str, Any], released: Any) -> None:
    assert stated["noise_scale"] == pytest.approx(float(released.noise.scale), rel=1e-12)
    if stated["threshold"] is None:
        assert released.threshold is None
    else:
        assert stated["threshold"] == pytest.approx(float(released.threshold), rel=1e-12)


@pytest.mark.parametrize("budget", BUDGETS, ids=str)
@pytest.mark.parametrize(
    "mechanism",
    [
        DesignB(K, max_shards=4),
        DesignB(K, max_shards=1, count_fraction=0.2),
        DesignB(K, count_fraction=0.0),
        Sequential(K),
        MergedGSHM(K),
        MergedLaplace(K),
    ],
    ids=repr,
)
def test_element_level_calibration_is_what_the_release_reports(mechanism, budget):
    m = bound(mechanism)
    if isinstance(m, Sequential):
        # One sequential sketch per window: fed in arrival order, never merged.
        acc = m.combine_fn().create_accumulator()
        for batch in element_batches():
            acc.update(batch)
    else:
        acc = drive(m, element_batches())
    stated = m.calibration(budget)
    released = m.release_object(acc, budget, NoiseSource.insecure_for_tests(3).stream("r"))
    # The gated releases ran their sketch branch: the input decremented every sketch.
    assert released.details.get("gate_branch", "sketch") == "sketch"
    check_matches(stated, released)
    assert stated["neighbouring_relation"] == released.neighbouring
    details = released.details
    if isinstance(m, DesignB) and m.count_fraction > 0:
        assert stated["count_noise_scale"] == pytest.approx(details["count_noise_scale"])
        assert (
            f"epsilon {details['heavy_hitter_epsilon']:.6g} for the keys"
            in (stated["budget_split"])
        )
        assert f"{details['count_epsilon']:.6g} for a DP element count" in stated["budget_split"]
    if isinstance(m, Sequential | MergedGSHM | MergedLaplace):
        split = stated["budget_split"]
        assert split.startswith(f"epsilon {details['release_epsilon']:.6g} for the release")
        assert f"{details['exactness_test_epsilon']:.6g} for a noisy test" in split
        assert f"{details['count_check_epsilon']:.6g} for a noisy upper bound" in split
    if "exactness_gate" in stated:
        gate = stated["exactness_gate"]
        assert f"epsilon {details['gate_test_epsilon']:.6g}" in gate
        assert f"eps_b = {details['gate_branch_epsilon']:.6g}" in gate
    assert stated["noise"] == released.noise.distribution


@pytest.mark.parametrize("budget", BUDGETS, ids=str)
@pytest.mark.parametrize("mechanism", [PamgGSHM(K), UserExact(K)], ids=repr)
def test_user_level_calibration_is_what_the_release_reports(mechanism, budget):
    m = bound(mechanism)
    acc = drive(m, unit_key_lists())
    stated = m.calibration(budget)
    released = m.release_object(acc, budget, NoiseSource.insecure_for_tests(4).stream("r"))
    check_matches(stated, released)
    assert stated["noise"] == released.noise.distribution == "gaussian"
    assert f"m={M}" in stated["neighbouring_relation"]


@pytest.mark.parametrize("budget", BUDGETS, ids=str)
@pytest.mark.parametrize("user", [False, True])
def test_select_then_count_calibration_is_what_both_releases_report(budget, user):
    m = SelectThenCount(K, max_shards=4, selection_fraction=0.6).bind(
        top=None, max_contributions=M if user else None
    )
    stated = m.calibration(budget)
    counts = {0: 400, 1: 37, 2: 0}
    released = m.release_object(counts, budget, NoiseSource.insecure_for_tests(5).stream("c"))
    check_matches(stated, released)
    assert stated["noise"].startswith(f"count: {released.noise.distribution}; selection:")
    if not user:
        # The element-level selection on Design B sketches that decremented: its sketch branch.
        acc = drive(DesignB(K, max_shards=4), element_batches())
        selection = m.selection.release_object(
            acc, budget, NoiseSource.insecure_for_tests(6).stream("s")
        )
        assert selection.mechanism == "APPROX_PP"  # not the exact branch
        assert stated["selection_noise_scale"] == pytest.approx(float(selection.noise.scale))
        assert stated["selection_threshold"] == pytest.approx(float(selection.threshold))


def _refuse_insecure_noise(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("stating a calibration drew noise from an insecure test source")


@pytest.mark.parametrize("name", MECHANISMS)
def test_stating_a_calibration_draws_no_noise(monkeypatch, name):
    # Calibration is computed from public parameters: no probe release, no test noise source.
    user = name in (*USER_MECHANISMS,)
    transform = DPHistogram(
        K,
        BUDGETS[0],
        mechanism=MECHANISM_CLASSES[name](K, **DECLARED[name]) if name in DECLARED else name,
        **({"privacy_unit": PrivacyUnit(id=lambda r: r[0], max_contributions=M)} if user else {}),
        **({"key_fn": lambda r: r[1]} if user else {}),
    )
    monkeypatch.setattr(NoiseSource, "insecure_for_tests", _refuse_insecure_noise)
    monkeypatch.setattr(NoiseSource, "stream", _refuse_insecure_noise)
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create([("u", "a")] if user else ["a"]) | transform
    text = transform.explain()
    assert "noise scale:" in text
    assert transform.aggregate.calibrated_mechanism.describe(BUDGETS[1])["noise"]


def test_every_name_builds_its_class_and_objects_carry_their_own_parameters():
    assert tuple(MECHANISM_CLASSES) == MECHANISMS
    for name, cls in MECHANISM_CLASSES.items():
        assert cls.key == name
    t = DPHistogram(budget=BUDGETS[0], mechanism=DesignB(32, max_shards=8, count_fraction=0.1))
    assert t.k == 32 and t.mechanism.max_shards == 8 and t.mechanism.count_fraction == 0.1
    assert t.display_data()["max_shards"].value == 8
    named = DPHistogram(32, BUDGETS[0], mechanism="design-b")
    assert named.mechanism.max_shards == 256 and named.default_label() == "DPHistogram(design-b)"
    # A state-and-timers shape is the mechanism's fact.
    assert DPHistogram(budget=BUDGETS[0], mechanism=Sequential(8)).needs_state_and_timers


def test_wrong_combinations_name_the_parameter_and_an_alternative():
    with pytest.raises(ValueError, match=re.escape("k: the mechanism object has k=32")) as info:
        DPHistogram(64, BUDGETS[0], mechanism=DesignB(32))
    assert "DesignB(k=64" in str(info.value)
    with pytest.raises(ValueError, match="mechanism: user-level releases") as info:
        DPHistogram(
            8,
            BUDGETS[0],
            mechanism=DesignB(8),
            privacy_unit=PrivacyUnit(id=lambda r: r[0]),
            key_fn=lambda r: r[1],
        )
    assert "'user-exact'" in str(info.value)
    with pytest.raises(ValueError, match="mechanism: user-level releases"):
        DPHeavyHitters(budget=BUDGETS[0], mechanism=UserExact())
    with pytest.raises(ValueError, match="mechanism must be one of") as info:
        DPHistogram(8, BUDGETS[0], mechanism="design-c")
    assert "DesignB(k=...)" in str(info.value)
    with pytest.raises(ValueError, match="max_shards"):
        DesignB(8, max_shards=0)
    with pytest.raises(ValueError, match="selection_fraction"):
        SelectThenCount(selection_fraction=0.0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        Sequential(0)


def test_select_then_count_resolves_its_defaults_by_privacy_unit():
    element = SelectThenCount().bind(top=None, max_contributions=None)
    user = SelectThenCount().bind(top=None, max_contributions=2)
    assert element.k == 131072 and element.selection.selection_fraction == 0.52
    assert user.k == 4096 and user.selection.selection_fraction == 0.75
    # The object given is not changed by binding (one object can serve several transforms).
    shared = SelectThenCount()
    DPHeavyHitters(
        budget=BUDGETS[0],
        mechanism=shared,
        privacy_unit=PrivacyUnit(id=lambda r: r[0], max_contributions=2),
        key_fn=lambda r: r[1],
    )
    assert shared.max_contributions is None and shared.k == 131072
