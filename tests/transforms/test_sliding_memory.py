"""Memory of ``DPSlidingWindowFrequencies``: bounded by the sketch and the window, not the stream.

The aggregator (``SealAndQuery``) is driven directly with in-memory state so that the number
of buffered segment tables and the size of the sketch state can be asserted after every
element; the per-segment tables that Beam moves and buffers are checked by their encoded size.
Values are checked against the single-machine core (same noise source and label).
"""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.utils.timestamp import Timestamp
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource, new_run_salt
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout, tables
from beam_dpsketch.transforms.sliding.aggregator import SealAndQuery
from beam_dpsketch.transforms.sliding.tables import (
    SegmentCombineFn,
    SegmentPart,
    _sparse,
    pack_cells,
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
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="sw-mem",
        layout=SlidingLayout(block=BLOCK, alpha="1/2"),
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
        payload = (first, last, min(last, len(keys)), len(rows), pack_cells(*_sparse(table)))
        # Each element carries the run salt (the aggregator is stateful).
        out.append((dp.release_label, (new_run_salt(dp.noise_source), payload)))
    return out


def drive(dp: DPSlidingWindowFrequencies, keys: list[str], order=None):
    """Feed the segments (in ``order``), then fire the timer; the records and state sizes."""
    fn = SealAndQuery(dp)
    fn.setup()
    bag, sketch, progress, ahead, timer = Bag(), Value(), Value(), Value(), Timer()
    state = {
        "segments": bag,
        "sketch_state": sketch,
        "progress": progress,
        "ahead_state": ahead,
        "salt": Value(),
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


def core_sketch(dp: DPSlidingWindowFrequencies) -> DPSWSketch:
    """The single-machine core with the transform's parameters, noise source and label."""
    return DPSWSketch(
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


def core_records(dp: DPSlidingWindowFrequencies, keys: list[str], every: int) -> list[tuple]:
    ref = core_sketch(dp)
    out = []
    for t in range(every, len(keys) + 1, every):
        ref.update_at(keys[ref.t : t], np.arange(ref.t + 1, t + 1))
        ref.advance_to(t)
        out += [(t, k, v) for k, v in zip(QUERIES, ref.estimate(QUERIES).tolist(), strict=True)]
    return out


def max_window_state_bytes(dp: DPSlidingWindowFrequencies) -> int:
    """The largest serialized core sketch over its first steps: every sealed sketch of a window."""
    ref = core_sketch(dp)
    out = 0
    for t in range(1, 4 * WINDOW):
        out = max(out, len(ref.advance_to(t).to_bytes()))
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
    # The bag holds at most about one sketch's worth of cells; the sketch bytes are at most the
    # window's sealed sketches (the most a core sketch holds at any step) plus the two pending
    # blocks: neither depends on the stream length.
    fold = SealAndQuery(dp)._fold_cells
    window_bytes = max_window_state_bytes(dp)
    segments_per_block = len(dp._windows.cuts) - 1
    pending_bytes = 2 * segments_per_block * DEPTH * WIDTH * 8
    for bag, sketch in sizes.values():
        assert bag <= fold
        assert sketch <= window_bytes + pending_bytes
    assert sizes[2400][0] <= sizes[600][0] + 1
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
    part = SegmentPart(table, 7)
    data = pickle.dumps(part)
    # Dense, the table alone is 1024 * 3 * 8 bytes; sparse it is 3 cells.
    assert len(data) < 1024
    back = pickle.loads(data)
    assert back.sketch == table and back.max_step == 7

    fn = SegmentCombineFn(1024, 3, 1)
    acc = fn.add_input(fn.create_accumulator(), part)
    acc = fn.add_input(acc, [(8, "b"), (8, "a")])
    assert len(pickle.dumps(acc)) < 1024
    merged = fn.merge_accumulators([acc, pickle.loads(pickle.dumps(fn.create_accumulator()))])
    sketch, max_step = fn.extract_output(merged)
    assert sketch == CountMinSketch(1024, 3, 1).update(["a", "b", "a"]) and max_step == 8


def test_segment_tables_hold_only_the_cells_the_queries_read(tmp_path, monkeypatch):
    """Beam moves and buffers each segment's table as the query keys' cells only.

    Every release reads the query keys' cells and nothing else, so the tables reaching the
    aggregator (which a batch runner holds for every segment of the input) are bounded by
    ``depth * len(query_keys)`` cells however many distinct keys a segment holds, and the
    releases stay bit-identical to the core fed every row.
    """
    packed: list[int] = []
    pack = tables.pack_cells

    def recording(cells: np.ndarray, counts: np.ndarray) -> bytes:
        packed.append(len(cells))
        return pack(cells, counts)

    monkeypatch.setattr(tables, "pack_cells", recording)
    window, block, n, every = 60, 20, 240, 20
    # Mostly distinct keys: a 18-row segment alone fills ~50 of the 96 cells.
    keys = [f"u{i % 97}" for i in range(n)]
    queries = ["u3", "u50", "absent"]
    dp = DPSlidingWindowFrequencies(
        window,
        WIDTH,
        DEPTH,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=queries,
        seed=SEED,
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="sw-cells",
        layout=SlidingLayout(block=block, checkpoints=[block, 1], alpha="1/2"),
    )
    half = n // 2
    # Both input paths: one batch element (partial tables) and single rows (combined rows).
    batch = (np.arange(1, half + 1, dtype=np.int64), keys[:half])
    rows = [(t, k) for t, k in enumerate(keys[half:], start=half + 1)]
    p = beam.Pipeline(runner="FnApiRunner")
    out = DumpToFile(str(tmp_path / "out.pickle"))
    assert_that(p | beam.Create([batch, *rows]) | dp, out)
    p.run().wait_until_finish()

    segments_per_block = len(dp._windows.cuts) - 1
    assert len(packed) == n // block * segments_per_block
    assert max(packed) <= DEPTH * len(queries)

    ref = DPSWSketch(
        window,
        PrivacyBudget.zcdp(1.0),
        width=WIDTH,
        depth=DEPTH,
        seed=SEED,
        block=block,
        checkpoints=[block, 1],
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(SEED).for_application(),
        label=dp.release_label,
    ).update_at(keys, np.arange(1, n + 1))
    expected = []
    for t in range(every, n + 1, every):
        ref.advance_to(t)
        expected += [
            (t, k, v) for k, v in zip(queries, ref.estimate(queries).tolist(), strict=True)
        ]
    assert sorted(out.load()) == sorted(expected)


def test_only_blocks_a_query_reads_are_sealed(monkeypatch):
    """With a period longer than the window, the blocks between query windows draw no noise.

    Their PCMSs are never selected by any query (Wang, Wang and Chen, Algorithm 3), so the
    aggregator drops their counts unsealed; the answers stay those of the core, which seals
    every block.
    """
    every, n = 50, 2400
    dp = transform(every)
    read: set[int] = set()
    ref = core_sketch(dp)
    for t in range(every, n + 1, every):
        read |= {sel.block for sel in ref.advance_to(t).selection(t)}
    sealed: set[int] = set()
    noisy = DPSWSketch._noisy

    def recording(self, raw, kb, kind, j):
        sealed.add(kb)
        return noisy(self, raw, kb, kind, j)

    monkeypatch.setattr(DPSWSketch, "_noisy", recording)
    keys = stream(n)
    records, _, _ = drive(dp, keys)
    assert sealed and sealed <= read
    assert len(read) < n // BLOCK // 2
    monkeypatch.setattr(DPSWSketch, "_noisy", noisy)
    assert sorted(records) == sorted(core_records(dp, keys, every))


def test_a_promised_next_query_survives_serialization():
    """``advance_to(t, next_query=...)`` state restores and answers like the core."""
    keys = stream(300)
    dp = transform(7)
    ref = core_sketch(dp).update_at(keys, np.arange(1, 301))
    sk = core_sketch(dp).update_at(keys[:100], np.arange(1, 101))
    sk.advance_to(100, next_query=250)
    # A block before the promised query's window is dropped, now and when counts arrive.
    assert sk.live_blocks() == []
    sk = DPSWSketch.from_bytes(sk.to_bytes(), sk.noise_source)
    sk.update_at(keys[100:], np.arange(101, 301))
    assert min(sk.live_blocks()) == (250 - WINDOW) // BLOCK + 1
    for t in (250, 300):
        assert (
            sk.advance_to(t).estimate(QUERIES).tolist()
            == ref.advance_to(t).estimate(QUERIES).tolist()
        )


def run_small_window(tmp_path, n: int, queries: int, monkeypatch) -> tuple[list, list[int], int]:
    """``DPSlidingWindowFrequencies`` with W = 100 (ten-row blocks) over ``n`` rows read as
    batch elements, ``queries`` evenly spaced queries, on the FnApiRunner: the records, the
    number of cells of each table packed for the aggregator, and the period."""
    packed: list[int] = []
    pack = tables.pack_cells

    def recording(cells: np.ndarray, counts: np.ndarray) -> bytes:
        packed.append(len(cells))
        return pack(cells, counts)

    monkeypatch.setattr(tables, "pack_cells", recording)
    every = n // queries
    dp = DPSlidingWindowFrequencies(
        100,
        WIDTH,
        DEPTH,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=QUERIES,
        seed=SEED,
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="sw-small-window",
        layout=SlidingLayout(preset="paper_experiments"),
    )
    keys = np.random.default_rng(n).integers(0, 5, n)
    # (first 0-based position, keys, seconds): the elements of ReadOrderedKeys.
    chunk = 1 << 15
    batches = [(a, [f"k{v}" for v in keys[a : a + chunk]], None) for a in range(0, n, chunk)]
    p = beam.Pipeline(runner="FnApiRunner")
    out = DumpToFile(str(tmp_path / f"out{n}.pickle"))
    assert_that(p | beam.Create(batches) | dp, out)
    p.run().wait_until_finish()
    monkeypatch.setattr(tables, "pack_cells", pack)

    ref = DPSWSketch.paper_experiments(
        100,
        PrivacyBudget.zcdp(1.0),
        width=WIDTH,
        depth=DEPTH,
        seed=SEED,
        noise_source=NoiseSource.insecure_for_tests(SEED).for_application(),
        label=dp.release_label,
    )
    names = [f"k{v}" for v in keys]
    expected = []
    for t in range(every, n + 1, every):
        ref.update_at(names[ref.t : t], np.arange(ref.t + 1, t + 1))
        ref.advance_to(t)
        expected += [
            (t, k, v) for k, v in zip(QUERIES, ref.estimate(QUERIES).tolist(), strict=True)
        ]
        # The core then seals only what the next query reads (its answers are unchanged).
        ref.advance_to(t, next_query=t + every)
    assert sorted(out.load()) == sorted(expected)
    return out.load(), packed, every


def test_a_small_window_holds_tables_per_query_not_per_row(tmp_path, monkeypatch):
    """W = 100: 10x the rows with the same queries, the same tables at the aggregator.

    A block that no query reads (Wang, Wang and Chen, Algorithm 3) reaches the aggregator only
    in the row count and last step of its run of such blocks, so the tables that a batch runner
    materialises for the single-key aggregator follow the queries' windows, not the stream.
    """
    queries = 4
    sizes = {}
    for n in (20_000, 200_000):
        records, packed, _ = run_small_window(tmp_path, n, queries, monkeypatch)
        assert len(records) == queries * len(QUERIES)
        sizes[n] = packed
    # Each query reads at most W / B + 1 = 11 blocks of 4 segments; the tables keep only the
    # query keys' cells.
    for packed in sizes.values():
        assert len(packed) <= queries * 11 * 4
        assert max(packed) <= DEPTH * len(QUERIES)
    assert len(sizes[200_000]) <= len(sizes[20_000])


@pytest.mark.parametrize("as_batch", [False, True])
def test_time_based_sparse_schedule_matches_the_core(tmp_path, as_batch):
    """Time-based mode with a period much longer than the window (most blocks unread, gaps
    in event time), single rows or one batch: the answers of the core fed every event."""
    window, block, every = 20, 10, 70
    rng = np.random.default_rng(4)
    seconds = np.sort(np.concatenate([rng.uniform(0, 200, 150), rng.uniform(400, 690, 150)]))
    keys = [f"k{v}" for v in rng.integers(0, 5, len(seconds))]
    dp = DPSlidingWindowFrequencies(
        window,
        WIDTH,
        DEPTH,
        PrivacyBudget.zcdp(1.0),
        release_every=every,
        query_keys=QUERIES,
        seed=SEED,
        mode="time",
        origin=0,
        time_fn=lambda e: e[0],
        key_fn=lambda e: e[1],
        noise_source=NoiseSource.insecure_for_tests(SEED),
        label="sw-time-sparse",
        layout=SlidingLayout(block=block, alpha="1/2"),
    )
    rows = [(float(s), k) for s, k in zip(seconds, keys, strict=True)]
    elements = [(seconds, keys)] if as_batch else rows
    p = beam.Pipeline(runner="FnApiRunner")
    out = DumpToFile(str(tmp_path / "out.pickle"))
    assert_that(p | beam.Create(elements) | dp, out)
    p.run().wait_until_finish()

    steps = np.floor(seconds).astype(np.int64) + 1
    ref = DPSWSketch(
        window,
        PrivacyBudget.zcdp(1.0),
        width=WIDTH,
        depth=DEPTH,
        seed=SEED,
        block=block,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(SEED).for_application(),
        label=dp.release_label,
    ).update_at(keys, steps)
    expected = []
    for t in range(every, int(steps.max()) + 1, every):
        ref.advance_to(t)
        expected += [
            (t, k, v) for k, v in zip(QUERIES, ref.estimate(QUERIES).tolist(), strict=True)
        ]
    assert len(expected) == 2 * (int(steps.max()) // every)
    assert sorted(out.load()) == sorted(expected)
