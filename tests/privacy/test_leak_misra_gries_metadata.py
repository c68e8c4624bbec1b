"""Misra-Gries release objects carry no exact fact about the data beyond the noisy counts.

A :class:`HeavyHitterRelease` is publishable as a whole (``details``, ``neighbouring`` and all).
Everything in it besides the noisy items must therefore be the same on neighbouring inputs. The
worst cases are inputs where one element is the only element of a Beam accumulator (a segment):
with it, Design B folds in one more non-empty segment and a merged release sees a real merge;
without it, neither happens. The release metadata of both must agree exactly. The relation that
``describe()`` and ``explain()`` state for the Beam shapes must be the sharded one (A-PART,
Lebeda and Tetek's Design B and merged releases), whatever the data.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pytest

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    PAMGSketch,
    approx_pp,
    merged_gshm,
    merged_laplace,
    merged_pure,
    pamg_gshm,
    pure_pp,
)
from beam_dpsketch.transforms import DPHeavyHitters
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn, SketchCombineFn
from beam_dpsketch.transforms.heavy_hitters import MECHANISM_CLASSES, DesignBCombineFn

EPS, DELTA = 1.0, 1e-6
K = 8
BIG = np.random.default_rng(5).integers(0, 40, size=2000).tolist()
#: The element that is alone in its accumulator on one side of the neighbouring pair.
LONE = -1
#: A declared universe holding every key above (for the pure releases).
UNIVERSE = range(-1, 50)


def stream(name: str):
    return NoiseSource.insecure_for_tests(11).stream(name)


def metadata(release) -> dict:
    """Everything a release publishes except its noisy values: the items, Design B's noisy
    element count and the error bound computed from it."""
    out = {f.name: getattr(release, f.name) for f in dataclasses.fields(release)}
    for noisy in ("items", "noisy_count", "error"):
        out.pop(noisy)
    out["details"] = dict(release.details)
    return out


def design_b_aggregate(with_lone_element: bool):
    """DesignBCombineFn on two accumulators; the second holds one element or nothing."""
    fn = DesignBCombineFn(K, max_shards=4)
    first = fn.add_input(fn.create_accumulator(), BIG)
    second = fn.create_accumulator()
    if with_lone_element:
        second = fn.add_input(second, [LONE])
    return fn.extract_output(fn.merge_accumulators([first, second]))


def merged_aggregate(with_lone_element: bool) -> MisraGries:
    """SketchCombineFn on two accumulators; the second holds one element or nothing."""
    fn = SketchCombineFn.misra_gries(K)
    first = fn.add_input(fn.create_accumulator(), BIG)
    second = fn.create_accumulator()
    if with_lone_element:
        second = fn.add_input(second, [LONE])
    return fn.extract_output(fn.merge_accumulators([first, second]))


def pamg_aggregate(with_user: bool) -> PAMGSketch:
    """The user-level combine: one PAMG sketch per user merged into the accumulator."""
    fn = MergeSketchesCombineFn(lambda: PAMGSketch(K, 2))
    acc = fn.create_accumulator()
    if with_user:
        acc = fn.add_input(acc, PAMGSketch(K, 2).update_user(["a", "b"]))
    return fn.extract_output(acc)


@pytest.mark.parametrize(
    "release",
    [
        lambda agg: approx_pp(agg, PrivacyBudget.approx(EPS, DELTA), stream("approx")),
        lambda agg: pure_pp(
            agg, UNIVERSE, PrivacyBudget.pure(EPS), stream("pure"), method="enumerate"
        ),
    ],
    ids=["approx_pp", "pure_pp"],
)
def test_design_b_release_metadata_is_the_same_on_neighbours(release):
    with_it, without = design_b_aggregate(True), design_b_aggregate(False)
    # The neighbouring aggregates really differ in the number of non-empty segments.
    assert (with_it.shards, without.shards) == (2, 1)
    assert metadata(release(with_it)) == metadata(release(without))


@pytest.mark.parametrize(
    "release",
    [
        lambda agg: merged_gshm(agg, PrivacyBudget.approx(EPS, DELTA), stream("gshm")),
        lambda agg: merged_laplace(agg, PrivacyBudget.approx(EPS, DELTA), stream("lap")),
    ],
    ids=["merged_gshm", "merged_laplace"],
)
def test_merged_release_metadata_is_the_same_on_neighbours(release):
    with_it, without = merged_aggregate(True), merged_aggregate(False)
    # The neighbouring aggregates really differ in provenance: a real merge, or none.
    assert (with_it.merged, without.merged) == (True, False)
    assert metadata(release(with_it)) == metadata(release(without))


def test_merged_pure_metadata_is_the_same_on_neighbours():
    fn = SketchCombineFn.misra_gries(K)
    first = fn.add_input(fn.create_accumulator(), BIG)
    lone = fn.add_input(fn.create_accumulator(), [LONE])
    with_it = fn.merge_accumulators([first, lone])
    without = fn.merge_accumulators([fn.add_input(fn.create_accumulator(), BIG)])
    assert (with_it.merged, without.merged) == (True, False)
    a = merged_pure(with_it, UNIVERSE, PrivacyBudget.pure(EPS), stream("mpure"), method="enumerate")
    b = merged_pure(without, UNIVERSE, PrivacyBudget.pure(EPS), stream("mpure"), method="enumerate")
    assert metadata(a) == metadata(b)


def test_pamg_release_metadata_is_the_same_with_and_without_a_user():
    with_user, without = pamg_aggregate(True), pamg_aggregate(False)
    assert (with_user.merged, without.merged) == (True, False)
    a = pamg_gshm(with_user, PrivacyBudget.approx(EPS, DELTA), stream("pamg"))
    b = pamg_gshm(without, PrivacyBudget.approx(EPS, DELTA), stream("pamg"))
    assert metadata(a) == metadata(b)


@pytest.mark.parametrize("mechanism", ["design-b", "merged-gshm", "merged-laplace"])
def test_beam_shapes_state_the_sharded_relation(mechanism):
    # Beam splits a pane into accumulators: these releases hold under A-PART only, and must say
    # so in describe() and explain() rather than claim the single-stream relation.
    budget = PrivacyBudget.approx(EPS, DELTA)
    dp = DPHeavyHitters(K, budget, mechanism=mechanism, label=f"hh-{mechanism}")
    p = beam.Pipeline(runner="FnApiRunner")
    _ = p | beam.Create(["a"]) | dp
    assert "A-PART" in dp.explain()
    described = MECHANISM_CLASSES[mechanism](K).describe(budget)
    assert "A-PART" in described["neighbouring_relation"]
