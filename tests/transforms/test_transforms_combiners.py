"""SketchCombineFn, SketchSpec and SketchCoder, called directly (no pipeline)."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries
from beam_dpsketch.transforms import KeyBatch, SketchSpec
from beam_dpsketch.transforms.combiners import SketchCoder, SketchCombineFn


def _partials(fn: SketchCombineFn, parts: list) -> list:
    accs = []
    for part in parts:
        acc = fn.create_accumulator()
        for batch in part:
            acc = fn.add_input(acc, batch)
        accs.append(fn.compact(acc))
    return accs


@pytest.mark.parametrize(
    "fn", [SketchCombineFn.count_min(64, 3, 1), SketchCombineFn.count_sketch(64, 3, 1)]
)
def test_linear_merge_any_tree_equals_direct(fn):
    rng = np.random.default_rng(0)
    parts = [[rng.integers(0, 100, 200), ["a", "b", "a"]] for _ in range(5)]
    direct = fn.create_accumulator()
    for part in parts:
        for batch in part:
            direct.update(batch)
    # Fresh partials per tree: merging mutates the first accumulator.
    accs = _partials(fn, parts)
    left = fn.merge_accumulators([fn.merge_accumulators(accs[:2]), *accs[2:]])
    accs = _partials(fn, parts)
    right = fn.merge_accumulators(
        [accs[4], fn.merge_accumulators([accs[3], accs[2]]), accs[1], accs[0]]
    )
    assert fn.extract_output(left) == direct
    assert fn.extract_output(right) == direct


@pytest.mark.parametrize(
    "fn",
    [
        SketchCombineFn.count_min(64, 3, 1),
        SketchCombineFn.count_sketch(64, 3, 1),
        SketchCombineFn.misra_gries(3),
    ],
)
def test_merging_no_accumulators_gives_the_empty_sketch(fn):
    # The streaming runner does this for an empty ON_TIME pane after early DISCARDING firings.
    merged = fn.merge_accumulators(iter([]))
    assert merged == fn.create_accumulator()


def test_merge_mutates_only_the_first_accumulator():
    fn = SketchCombineFn.misra_gries(3)
    first, second, third = _partials(fn, [[["a", "b"]], [["b", "c", "d"]], [["e"]]])
    before = [second.to_bytes(), third.to_bytes()]
    merged = fn.merge_accumulators([first, second, third])
    assert merged is first
    assert [second.to_bytes(), third.to_bytes()] == before
    assert merged.merged and merged.n == 6


def test_mg_merge_skips_empty_accumulators_and_never_mutates_others():
    fn = SketchCombineFn.misra_gries(4)
    (full,) = _partials(fn, [[["x", "y", "x"]]])
    snapshot = full.to_bytes()
    direct = MisraGries(4).update(["x", "y", "x"])
    # An empty first accumulator: the result is a copy of the non-empty one, unmerged.
    result = fn.merge_accumulators([fn.create_accumulator(), full, fn.create_accumulator()])
    assert result == direct and result is not full and not result.merged
    assert full.to_bytes() == snapshot
    assert fn.merge_accumulators([full, fn.create_accumulator()]) == direct
    empty = fn.merge_accumulators([fn.create_accumulator(), fn.create_accumulator()])
    assert empty == MisraGries(4)


def test_mg_merge_tree_stays_within_bound():
    fn = SketchCombineFn.misra_gries(5)
    rng = np.random.default_rng(1)
    parts = [[rng.zipf(1.4, 300) % 40] for _ in range(6)]
    accs = _partials(fn, parts)
    merged = fn.merge_accumulators(
        [fn.merge_accumulators(accs[:3]), fn.merge_accumulators(accs[3:])]
    )
    keys, counts = np.unique(np.concatenate([p[0] for p in parts]), return_counts=True)
    est = merged.estimate(keys)
    n = counts.sum()
    assert merged.n == n
    assert np.all(est <= counts) and np.all(est >= counts - n / 6)


def test_add_input_accepts_batches_and_single_keys():
    fn = SketchCombineFn.count_min(32, 2)
    acc = fn.create_accumulator()
    for element in [
        np.array([1, 2, 3]),
        pa.array(["a", "b"]),
        KeyBatch(["c", ("t", 1)]),
        ["d", "e"],
        "single",
        ("t", 2),
    ]:
        acc = fn.add_input(acc, element)
    expected = CountMinSketch(32, 2).update([1, 2, 3, "a", "b", "c", ("t", 1), "d", "e", "single"])
    expected.update([("t", 2)])
    assert acc == expected


@pytest.mark.parametrize(
    "spec",
    [SketchSpec.count_min(16, 2, 7), SketchSpec.count_sketch(16, 3, 7), SketchSpec.misra_gries(4)],
)
def test_accumulator_coder_round_trips(spec):
    fn = SketchCombineFn(spec)
    acc = fn.add_input(fn.create_accumulator(), ["a", "b", "a", 5, b"z"])
    coder = fn.get_accumulator_coder()
    assert isinstance(coder, SketchCoder) and coder.to_type_hint() is spec.sketch_type
    encoded = coder.encode(acc)
    assert encoded == acc.to_bytes()
    assert coder.decode(encoded) == acc
    assert not coder.is_deterministic()


def test_combine_fn_pickles_small_and_builds_tables_per_accumulator():
    fn = SketchCombineFn.count_min(1 << 16, 5)
    assert len(pickle.dumps(fn)) < 2000
    a, b = fn.create_accumulator(), fn.create_accumulator()
    assert a is not b and a.table is not b.table


def test_spec_validation_and_types():
    assert SketchSpec.count_min(np.int64(8), 2)() == CountMinSketch(8, 2, 0)
    assert SketchSpec.count_sketch(8, 2, 1).sketch_type is CountSketch
    assert SketchSpec.misra_gries(3)() == MisraGries(3)
    assert hash(SketchSpec.misra_gries(3)) == hash(SketchSpec.misra_gries(3))
    with pytest.raises(ValueError, match="kind"):
        SketchSpec("space-saving", {"k": 3})
    with pytest.raises(ValueError, match="parameters"):
        SketchSpec("misra-gries", {"width": 3})
    # Same exception types as the sketch classes: TypeError for a wrong type.
    with pytest.raises(TypeError, match="^width must be an int, got float"):
        SketchSpec.count_min(1.5, 2)
    with pytest.raises(TypeError, match="^k must be an int, got bool"):
        SketchSpec.misra_gries(True)
    with pytest.raises(ValueError, match="no update"):
        SketchCombineFn(lambda: object())
