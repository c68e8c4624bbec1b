"""Memory of ``DPSlidingWindowFrequencies``: bounded by the sketch and the window, not the stream.

The aggregator (``_SealAndQuery``) is driven directly with in-memory state so that the number
of buffered segment tables and the size of the sketch state can be asserted after every
element; the per-segment tables that Beam moves and buffers are checked by their encoded size.
Values are checked against the single-machine core (same noise source and label).
"""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.utils.timestamp import Timestamp

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import (
    _pack_cells,
    _SealAndQuery,
    _SegmentCombineFn,
    _SegmentPart,
    _sparse,
)

WIDTH, DEPTH, SEED = 32, 3, 5
WINDOW, BLOCK = 20, 2  # tiny segments: one Beam window per one or two positions
QUERIES = ["k1", "k2"]


class Bag:
    def __init__(self) -> None:
        self.items: list = []

    def add(self, value) -> None:
        self.items.append(value)

    def read(self):
        return list(self.items)

    def clear(self) -> None:
        self.items = []


class Value:
    def __init__(self) -> None:
        self.value = None

    def read(self):
        return self.value

    def write(self, value) -> None:
        self.value = value


class Timer:
    def __init__(self) -> None:
        self.at: Timestamp | None = None

    def set(self, when: Timestamp) -> None:
        self.at = when


def transform(every: int) -> DPSlidingWindowFrequencies:
    dp = DPSlidingWindowFrequencies(
        WINDOW,
        WIDTH,
        DEPTH,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=QUERIES,
        seed=SEED,
        block=BLOCK,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="sw-mem",
    )
    # Applying the transform (pipeline built, not run) sets its release label and facts.
    _ = beam.Pipeline(runner="FnApiRunner") | beam.Create([(1, "a")]) | dp
    return dp


def segments(dp: DPSlidingWindowFrequencies, keys: list[str]) -> list[tuple]:
    """The aggregator's input for positions ``1..len(keys)``, in position order."""
    steps = np.arange(1, len(keys) + 1, dtype=np.int64)
    lo, hi = dp._windows.segment_bounds(steps)
    out = []
    for first, last in sorted(set(zip((lo + 1).tolist(), hi.tolist(), strict=True))):
        rows = [k for s, k in zip(steps.tolist(), keys, strict=True) if first <= s <= last]
        table = CountMinSketch(WIDTH, DEPTH, SEED).update(rows).table
        payload = (first, last, min(last, len(keys)), len(rows), _pack_cells(*_sparse(table)))
        out.append((dp.release_label, payload))
    return out


def drive(dp: DPSlidingWindowFrequencies, keys: list[str], order=None):
    """Feed the segments (in ``order``), then fire the timer; the records and state sizes."""
    fn = _SealAndQuery(dp)
    fn.setup()
    bag, sketch, progress, ahead, timer = Bag(), Value(), Value(), Value(), Timer()
    state = {
        "segments": bag,
        "sketch_state": sketch,
        "progress": progress,
        "ahead_state": ahead,
        "timer": timer,
    }
    elements = segments(dp, keys)
    if order is not None:
        elements = [elements[i] for i in order(len(elements))]
    out, bag_sizes, sketch_sizes = [], [], []
    for element in elements:
        out += list(fn.process(element, **state))
        bag_sizes.append(len(bag.items))
        sketch_sizes.append(len(sketch.value or b""))
    if timer.at is not None:
        out += list(fn.on_query(fired=timer.at, **state))
    return [tv.value for tv in out], max(bag_sizes), max(sketch_sizes)


def core_records(dp: DPSlidingWindowFrequencies, keys: list[str], every: int) -> list[tuple]:
    ref = DPSWSketch(
        WINDOW,
        PrivacyBudget.zcdp(1.0),
        width=WIDTH,
        depth=DEPTH,
        seed=SEED,
        block=BLOCK,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(SEED).for_application(),
        label=dp.release_label,
    )
    out = []
    for t in range(every, len(keys) + 1, every):
        ref.update_at(keys[ref.t : t], np.arange(ref.t + 1, t + 1))
        ref.advance_to(t)
        out += [(t, k, v) for k, v in zip(QUERIES, ref.estimate(QUERIES).tolist(), strict=True)]
    return out


def stream(n: int) -> list[str]:
    rng = np.random.default_rng(n)
    return [f"k{v}" for v in rng.integers(0, 5, n)]


@pytest.mark.parametrize("every", [7, 100_000])
def test_aggregator_state_does_not_grow_with_the_stream(every, monkeypatch):
    dp = transform(every)
    sizes = {}
    # Blocks holding raw counts at any moment, also inside one batch of added tables.
    pending = [0]
    add = DPSWSketch.add_range_counts

    def counted(self, start, end, table):
        out = add(self, start, end, table)
        pending[0] = max(pending[0], len(self._pending))
        return out

    monkeypatch.setattr(DPSWSketch, "add_range_counts", counted)
    for n in (600, 2400):
        keys = stream(n)
        records, bag, sketch = drive(dp, keys)
        assert sorted(records) == sorted(core_records(dp, keys, every))
        sizes[n] = (bag, sketch)
    # The bag holds at most about one sketch's worth of cells; the sketch bytes are the
    # window's sealed sketches plus the pending block: neither depends on the stream length.
    fold = _SealAndQuery(dp)._fold_cells
    for bag, _ in sizes.values():
        assert bag <= fold
    assert sizes[2400][0] <= sizes[600][0] + 1
    assert sizes[2400][1] <= sizes[600][1] * 1.1
    assert 0 < pending[0] <= 2


def test_reordered_segments_give_the_same_answers():
    dp = transform(5)
    keys = stream(300)
    rng = np.random.default_rng(3)

    def shuffled(m: int) -> list[int]:
        # Local disorder (neighbouring segments swapped), as a runner delivers them.
        order = np.arange(m)
        for i in range(0, m - 1, 2):
            if rng.random() < 0.5:
                order[i], order[i + 1] = order[i + 1], order[i]
        return order.tolist()

    records, _, _ = drive(dp, keys, order=shuffled)
    assert sorted(records) == sorted(core_records(dp, keys, 5))


def test_a_one_row_segment_travels_as_its_cells():
    table = CountMinSketch(1024, 3, 1).update(["a"])
    part = _SegmentPart(table, 7)
    data = pickle.dumps(part)
    # Dense, the table alone is 1024 * 3 * 8 bytes; sparse it is 3 cells.
    assert len(data) < 1024
    back = pickle.loads(data)
    assert back.sketch == table and back.max_step == 7

    fn = _SegmentCombineFn(1024, 3, 1)
    acc = fn.add_input(fn.create_accumulator(), part)
    acc = fn.add_input(acc, [(8, "b"), (8, "a")])
    assert len(pickle.dumps(acc)) < 1024
    merged = fn.merge_accumulators([acc, pickle.loads(pickle.dumps(fn.create_accumulator()))])
    sketch, max_step = fn.extract_output(merged)
    assert sketch == CountMinSketch(1024, 3, 1).update(["a", "b", "a"]) and max_step == 8
