"""Memory of ``DPIntermittentQueries`` (schedule mode): bounded by the sketch and the queries.

Each count of a row goes to the first batch at or after the row's time that reads its cell, or
nowhere; so what the single owner receives is at most one count per (cell, batch) read, whatever
the number of rows, query batches or distinct keys, and no dense table is built per interval.
The routing and combining steps are checked directly on many rows and batches; a pipeline with
thousands of batches is checked for its peak traced memory (one dense table per interval, the
former layout, takes several times the bound).
"""

from __future__ import annotations

import pickle
import tracemalloc

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPIntermittentQueries
from beam_dpsketch.transforms.intermittent import QuerySchedule
from beam_dpsketch.transforms.intermittent.schedule import (
    _flat_cells,
    _ReadCountsFn,
    _RouteToReads,
    _ScheduleReads,
)

WIDTH, DEPTH, SEED = 2048, 5, 3


def _schedule(batches: int, keys_per_batch: int = 2, pool: int = 10_000) -> QuerySchedule:
    rng = np.random.default_rng(batches)
    return QuerySchedule(
        (10 * (k + 1), rng.integers(0, pool, keys_per_batch).tolist()) for k in range(batches)
    )


def _rows(n: int, horizon: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    times = np.sort(rng.integers(1, horizon + 1, n))
    return times.astype(np.int64), (rng.zipf(1.3, n) % 10_000).astype(np.int64)


def _owner_input(schedule: QuerySchedule, times, keys, signed: bool, chunk: int):
    """What the owner receives: every chunk routed, then combined as Beam would (lifted)."""
    reads = _ScheduleReads.of(schedule, WIDTH, DEPTH, SEED)
    route = _RouteToReads(schedule.times, reads, signed, SEED, None, None)
    fn = _ReadCountsFn()
    partials = []
    for start in range(0, times.size, chunk):
        acc = fn.create_accumulator()
        for _, part in route.process((times[start : start + chunk], keys[start : start + chunk])):
            acc = fn.add_input(acc, part)
        partials.append(fn.compact(acc))
    return reads, partials, fn.extract_output(fn.merge_accumulators(partials))


@pytest.mark.parametrize("signed", [True, False])
def test_owner_input_is_bounded_by_the_queries_not_the_rows_or_batches(signed):
    schedule = _schedule(5000)
    bound = DEPTH * schedule.num_queries  # one count per (cell, batch) read at most
    for n in (20_000, 200_000):
        times, keys = _rows(n, 10 * 5000 + 500)
        reads, partials, (index, counts) = _owner_input(schedule, times, keys, signed, 8192)
        assert index.size <= bound
        assert (np.diff(index) > 0).all() and (counts != 0).all()
        # Each partial crosses the shuffle as its summed entries (16 bytes each).
        for acc in partials:
            assert len(pickle.dumps(acc)) <= 16 * bound + 1024
        # Nothing is routed to a batch that does not read the cell.
        cells, batch = reads.cell_and_batch(index)
        for k in np.unique(batch)[:50].tolist():
            lo, hi = reads.bounds[k - 1], reads.bounds[k]
            read_by_k = _flat_cells(reads.h1[lo:hi], reads.h2[lo:hi], DEPTH, WIDTH)
            assert np.isin(cells[batch == k], read_by_k).all()


def test_thousands_of_batches_keep_the_peak_within_the_sketch_and_queries():
    # 2000 batches of 2 keys over 20,000 rows, one Count-Min row of 4096 cells (one noise block
    # per batch, to stay fast). One dense table per interval holds 2000 * 32 KiB = 62.5 MiB (a
    # peak of about 128 MiB with Beam's copies); the routed counts are at most 4000 (16 bytes
    # each), the query index a few hundred KiB: the peak is about 11 MiB.
    batches, width = 2000, 4096
    schedule = _schedule(batches)
    times, keys = _rows(20_000, 10 * batches)
    t = DPIntermittentQueries(
        width,
        1,
        PrivacyBudget.pure(1.0),
        queries=schedule,
        clock="event_time",
        sketch="count-min",
        seed=SEED,
        noise_source=NoiseSource.insecure_for_tests(1),
        label="memory",
    )
    chunks = [(times[a : a + 1000], keys[a : a + 1000]) for a in range(0, times.size, 1000)]
    tracemalloc.start()
    try:
        with beam.Pipeline(runner=FnApiRunner()) as p:
            answers = p | beam.Create(chunks, reshuffle=False) | t
            assert_that(answers | beam.combiners.Count.Globally(), equal_to([schedule.num_queries]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"peak traced memory {peak / 2**20:.0f} MiB"
