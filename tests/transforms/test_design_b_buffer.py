"""Design B accumulators sketch buffered batches: the same sketch, far fewer O(k) updates."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import PostProcessedSum
from beam_dpsketch.transforms.heavy_hitters import DesignBCombineFn


def _run(combine: DesignBCombineFn, parts: list[list]) -> PostProcessedSum:
    accs = []
    for part in parts:
        acc = combine.create_accumulator()
        for element in part:
            acc = combine.add_input(acc, element)
        accs.append(acc)
    return combine.extract_output(combine.merge_accumulators(accs))


def _expected(k: int, parts: list[list]) -> PostProcessedSum:
    pp = PostProcessedSum(k, max_shards=8)
    for part in parts:
        sketch = MisraGries(k)
        for element in part:
            sketch.update(element if not np.isscalar(element) else [element])
        if not sketch.is_empty():
            pp.add_sketch(sketch)
    return pp


def test_buffered_batches_give_the_sketch_of_each_batch_in_turn():
    rng = np.random.default_rng(0)
    k = 50
    parts = [
        [rng.integers(0, 400, 300).astype(np.int64) for _ in range(7)],
        # Kinds that do not concatenate with each other flush the buffer first: int32, uint64,
        # a pyarrow string array, a plain list and a single key, in arrival order.
        [
            rng.integers(0, 400, 200).astype(np.int32),
            np.arange(5, dtype=np.uint64),
            pa.array([f"s{i % 60}" for i in range(300)]),
            pa.array([f"s{i % 70}" for i in range(100)]),
            ["a", "b", "a"],
            "c",
            rng.integers(0, 400, 100).astype(np.int64),
        ],
    ]
    assert _run(DesignBCombineFn(k, 8), parts) == _expected(k, parts)


def test_many_small_batches_are_sketched_in_one_update(monkeypatch):
    calls = []
    update = MisraGries.update

    def counting(self, keys, counts=None):
        calls.append(len(keys))
        return update(self, keys, counts)

    monkeypatch.setattr(MisraGries, "update", counting)
    batches = [np.arange(i, i + 1000, dtype=np.int64) for i in range(40)]
    out = _run(DesignBCombineFn(1 << 17, 4), [batches])
    # Each update costs O(k) outside the C loop: 40 batches, one update.
    assert calls == [40_000]
    assert out.exact_counts() == {
        x: c for x, c in _expected(1 << 17, [batches]).exact_counts().items()
    }
