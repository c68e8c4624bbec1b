"""What a lifted Design B combine ships to its one merging task on the ``ScalingDaskRunner``.

The runner groups a lifted combine's partial accumulators in one partition (one task merges them
all), so whatever work an accumulator still carries when it leaves its partition is done there
serially. A Design B accumulator buffers up to ``2**20`` keys before it sketches them; Beam's
lifted combine calls ``compact`` on each partial accumulator before the shuffle, and Design B's
``compact`` sketches the buffer, so an accumulator crosses the shuffle as at most ``k`` counters
and the sketching stays in the partitions. Without it, select-then-count's selection at
``k = 1024`` on ``10**8`` keys over 16 partitions would ship 8 MB accumulators and sketch 16
buffers in its one merging task. The merged sketch is the same either way.
"""

from __future__ import annotations

import pickle

import numpy as np

from beam_dpsketch.transforms.heavy_hitters.design_b import DesignBCombineFn


def _partials(fn: DesignBCombineFn, n: int) -> list:
    """``n`` partial accumulators of Zipf-like int keys (exact test data, not noise)."""
    keys = (np.arange(200_000, dtype=np.int64) * 7919) % 5000
    keys = np.minimum(keys, keys[::-1]) // 3  # skewed: small keys repeat most
    out = []
    for i in range(n):
        acc = fn.create_accumulator()
        for batch in np.array_split(np.roll(keys, 1000 * i), 4):
            acc = fn.add_input(acc, batch)
        out.append(acc)
    return out


def test_a_compacted_design_b_accumulator_carries_its_sketch_not_its_keys():
    fn = DesignBCombineFn(64, 16)
    (acc,) = _partials(fn, 1)
    raw = len(pickle.dumps(acc))
    shipped = len(pickle.dumps(fn.compact(acc)))
    # 200,000 buffered int64 keys are 1.6 MB; 64 counters are a few KB.
    assert raw > 1_000_000
    assert shipped < 20_000


def test_compacting_design_b_partials_leaves_the_merged_sketch_unchanged():
    fn = DesignBCombineFn(64, 16)
    plain = fn.extract_output(fn.merge_accumulators(_partials(fn, 5)))
    compacted = fn.extract_output(
        fn.merge_accumulators([fn.compact(acc) for acc in _partials(fn, 5)])
    )
    assert len(plain) > 0
    assert compacted == plain
    assert compacted.scaled_counts() == plain.scaled_counts()
