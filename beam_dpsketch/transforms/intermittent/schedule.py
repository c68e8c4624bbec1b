"""Schedule mode: route each data count to the first batch that reads its cell, sum the routes exactly, and run the use-and-keep loop in batch order.

The query times and keys are a declared :class:`~beam_dpsketch.transforms.intermittent.queries.QuerySchedule`, so which
cells each batch reads is known at pipeline construction; the counts are routed and summed
exactly before any noise, and one single-key step owns the noise.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.hashing import (
    canonical_key,
    canonical_keys,
    hash_keys,
    row_buckets,
    row_signs,
)
from beam_dpsketch.sketches.intermittent.sketch import SKETCH_KINDS
from beam_dpsketch.transforms.combiners import sum_by_cell
from beam_dpsketch.transforms.intermittent.noise_owner import SINGLE_KEY, CoreConfig, answer_records
from beam_dpsketch.transforms.intermittent.queries import (
    QuerySchedule,
    check_time,
    interval_index,
)

__all__ = ["expand_schedule"]


def _split_timed(element: Any, time_fn: Any, key_fn: Any) -> tuple[np.ndarray, Any]:
    """``(times float64, keys)`` of one data element of the schedule mode."""
    if time_fn is not None:
        t = check_time(time_fn(element), "time_fn(element)")
        key = canonical_key(key_fn(element) if key_fn is not None else element)
        return np.asarray([t], dtype=np.float64), [key]
    if not isinstance(element, tuple) or len(element) != 2:
        raise TypeError(
            f"a data element must be a (time, key) pair or a (times, keys) batch, got "
            f"{type(element).__name__} (or pass time_fn/key_fn)"
        )
    times, keys = element
    if isinstance(times, np.ndarray):
        if times.ndim != 1 or times.dtype.kind not in "iuf":
            raise TypeError(f"batch times must be a 1-d numeric array, got dtype {times.dtype}")
        n = len(keys)
        if times.size != n:
            raise ValueError("a (times, keys) batch must have as many times as keys")
        if times.dtype.kind == "f" and not np.isfinite(times).all():
            raise ValueError("batch times must be finite")
        if isinstance(keys, np.ndarray) and keys.dtype.kind == "i":
            return times.astype(np.float64), keys.astype(np.int64, copy=False)
        return times.astype(np.float64), canonical_keys(keys)
    t = check_time(times, "element time")
    key = canonical_key(key_fn(keys) if key_fn is not None else keys)
    return np.asarray([t], dtype=np.float64), [key]


# Data rows hashed and routed at a time: bounds the ``(depth, rows)`` temporaries of one element.
_ROUTE_CHUNK = 1 << 16
# Entries a read-count accumulator may buffer before it sums them, whatever its size.
_PENDING_MIN = 1 << 12


def _flat_cells(h1: np.ndarray, h2: np.ndarray, depth: int, width: int) -> np.ndarray:
    """Flat cell ``row * width + bucket`` of each key in each row, ``(depth, n)`` int64.

    The cells :class:`~beam_dpsketch.sketches.CountSketch` / ``CountMinSketch`` of that shape
    count a key in, and that the core reads to answer it.
    """
    cells = row_buckets(h1, h2, depth, width)
    cells += (np.arange(depth, dtype=np.int64) * width)[:, None]
    return cells


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an int64 array (a sort: cheaper than ``np.unique``)."""
    out = np.sort(values, axis=None)
    if out.size:
        out = out[np.r_[True, out[1:] != out[:-1]]]
    return out


class _ScheduleReads:
    """The cells each batch of a schedule reads, and a cell's next read after any interval.

    A function of the public schedule (query keys, width, depth, seed) alone, never of the data.
    ``cells`` are the sorted distinct flat cells any batch reads; ``reads`` the sorted codes
    ``cell_id * stride + k`` (``cell_id`` the position in ``cells``, ``stride = K + 1``) of every
    cell read by batch ``k``. Both cost O(depth * queries) whatever the data. ``h1``, ``h2`` hold
    the query keys' hashes in schedule order, batch ``k`` in ``[bounds[k-1], bounds[k])``, so
    the owner hashes each query key once. Pickled as those hashes; the index is built on first
    use (Beam unpickles several copies of a ``DoFn``, most of which never process anything).
    """

    def __init__(
        self, h1: np.ndarray, h2: np.ndarray, bounds: np.ndarray, width: int, depth: int
    ) -> None:
        self.h1, self.h2, self.bounds = h1, h2, bounds
        self.width, self.depth = width, depth
        self.stride = bounds.size  # K + 1
        self._index: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def of(cls, schedule: QuerySchedule, width: int, depth: int, seed: int) -> _ScheduleReads:
        keys = [key for _, batch in schedule.batches for key in batch]
        h1, h2 = hash_keys(keys, seed)
        sizes = [len(batch) for _, batch in schedule.batches]
        bounds = np.r_[0, np.cumsum(sizes, dtype=np.int64)].astype(np.int64)
        reads = cls(h1, h2, bounds, width, depth)
        reads.index()  # fails now, at pipeline construction, if the schedule cannot be indexed
        return reads

    def __reduce__(self) -> tuple:
        return (type(self), (self.h1, self.h2, self.bounds, self.width, self.depth))

    def index(self) -> tuple[np.ndarray, np.ndarray]:
        """``(cells, reads)``, built once."""
        if self._index is None:
            flat = _flat_cells(self.h1, self.h2, self.depth, self.width)
            cells = _sorted_distinct(flat)
            if cells.size > np.iinfo(np.int64).max // self.stride:
                raise ValueError("queries: too many query batches and keys to index their cells")
            batch = np.repeat(np.arange(1, self.stride, dtype=np.int64), np.diff(self.bounds))
            reads = _sorted_distinct(np.searchsorted(cells, flat) * self.stride + batch)
            self._index = (cells, reads)
        return self._index

    def next_read(self, flat: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each (cell ``flat[i]``, interval ``k[i]``) count is next read.

        Returns ``(read, found)``: ``found[i]`` is whether some batch ``>= k[i]`` reads cell
        ``flat[i]``, and ``read[j]`` (for the found entries, in order) the position in
        ``reads`` of the first such batch.
        """
        cells, reads = self.index()
        if cells.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(flat.size, dtype=np.bool_)
        ids = np.minimum(np.searchsorted(cells, flat), cells.size - 1)
        queried = cells[ids] == flat
        ids = ids[queried]
        read = np.searchsorted(reads, ids * self.stride + k[queried])
        found = read < reads.size
        found[found] = reads[read[found]] // self.stride == ids[found]
        queried[queried] = found
        return read[found], queried

    def cell_and_batch(self, read: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat cell and batch index of each position in ``reads``."""
        cells, reads = self.index()
        code = reads[read]
        return cells[code // self.stride], code % self.stride


class _RouteToReads(beam.DoFn):
    """Route each count of a data element (or batch) to the next batch that reads its cell.

    A row of interval ``k`` adds ``+1`` (Count-Min) or its sign (Count Sketch) to each of its
    ``depth`` cells. The answers of batch ``j`` read the cells of ``Q_j`` only, as counts of
    the rows of intervals ``<= j``; so a cell's count from interval ``k`` is needed first by the
    first batch ``j >= k`` that reads the cell, and by no batch if there is none. It is sent
    there, as ``(position in reads, count)``; the others are dropped, here, before any shuffle.
    Which counts are dropped depends on the public schedule and the row's time only.
    """

    def __init__(
        self,
        query_times: np.ndarray,
        reads: _ScheduleReads,
        signed: bool,
        seed: int,
        time_fn: Any,
        key_fn: Any,
    ) -> None:
        self._query_times, self._reads, self._signed = query_times, reads, signed
        self._seed = seed
        self._time_fn, self._key_fn = time_fn, key_fn

    def process(self, element: Any) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
        times, keys = _split_timed(element, self._time_fn, self._key_fn)
        if times.size == 0:
            return
        k = interval_index(self._query_times, times)
        # After the last query: no answer depends on them. They are dropped without being
        # counted anywhere (a count of them would be an exact, unnoised release).
        live = np.flatnonzero(k <= self._query_times.size)
        if live.size < k.size:
            k = k[live]
            keys = keys[live] if isinstance(keys, np.ndarray) else [keys[i] for i in live.tolist()]
        reads, depth = self._reads, self._reads.depth
        index: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        for start in range(0, k.size, _ROUTE_CHUNK):
            stop = start + _ROUTE_CHUNK
            h1, h2 = hash_keys(keys[start:stop], self._seed)
            flat = _flat_cells(h1, h2, depth, reads.width)
            at, found = reads.next_read(
                flat.ravel(), np.broadcast_to(k[start:stop], flat.shape).ravel()
            )
            index.append(at)
            if self._signed:
                counts.append(row_signs(h2, depth).ravel()[found])
            else:
                counts.append(np.ones(at.size, dtype=np.int64))
        if not index:
            return
        at, count = sum_by_cell(np.concatenate(index), np.concatenate(counts))
        if at.size:
            yield SINGLE_KEY, (at, count)


def _read_counts(index: np.ndarray, counts: np.ndarray) -> _ReadCounts:
    acc = _ReadCounts()
    acc.index, acc.counts = index, counts
    return acc


class _ReadCounts:
    """Exact counts per (cell, batch) read (:class:`_ScheduleReads`), sparse.

    ``index`` (sorted, distinct positions in ``reads``) and ``counts`` are the summed entries;
    parts added since are buffered in ``pending`` and summed once they outgrow the summed ones,
    so the accumulator holds at most about twice the number of distinct reads, plus one part:
    O(depth * queries), whatever the number of rows, batches or distinct keys.
    """

    __slots__ = ("index", "counts", "pending", "pending_size")

    def __init__(self) -> None:
        self.index = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_size = 0

    def add(self, index: np.ndarray, counts: np.ndarray) -> None:
        self.pending.append((index, counts))
        self.pending_size += index.size
        if self.pending_size > max(self.index.size, _PENDING_MIN):
            self.compact()

    def parts(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield self.index, self.counts
        yield from self.pending

    def compact(self) -> _ReadCounts:
        if self.pending:
            self.index, self.counts = sum_by_cell(
                np.concatenate([p[0] for p in self.parts()]),
                np.concatenate([p[1] for p in self.parts()]),
            )
            self.pending, self.pending_size = [], 0
        return self

    def __reduce__(self) -> tuple:
        self.compact()
        return (_read_counts, (self.index, self.counts))


class _ReadCountsFn(beam.CombineFn):
    """Sum the routed ``(reads positions, counts)`` parts exactly (no noise, invariant I1)."""

    def create_accumulator(self) -> _ReadCounts:
        return _ReadCounts()

    def add_input(self, mutable_accumulator: _ReadCounts, element: Any) -> _ReadCounts:
        mutable_accumulator.add(*element)
        return mutable_accumulator

    def merge_accumulators(self, accumulators: Iterable[_ReadCounts]) -> _ReadCounts:
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return self.create_accumulator()
        for acc in it:
            # Only the first accumulator may be mutated: the others' parts are added to it.
            for index, counts in acc.parts():
                first.add(index, counts)
        return first

    def compact(self, accumulator: _ReadCounts) -> _ReadCounts:
        return accumulator.compact()

    def extract_output(self, accumulator: _ReadCounts) -> tuple[np.ndarray, np.ndarray]:
        accumulator.compact()
        return accumulator.index, accumulator.counts


class _RunSchedule(beam.DoFn):
    """The D3 loop over the routed counts: add the counts batch ``k`` reads first, answer it.

    Before batch ``k`` the core's exact table holds, in every cell ``Q_k`` reads, the count of
    the rows of intervals ``<= k`` (each such count was routed to the first batch at or after
    its interval that reads the cell, hence to ``k`` or to an earlier batch reading it): the
    values the answers and the kept noise need, so the release equals the core fed every
    interval's full delta. Cells no later batch reads are not kept up to date; nothing reads
    them. Memory: the routed counts (O(depth * queries)) and one dense table for the core plus
    one scratch table.
    """

    def __init__(
        self,
        config: CoreConfig,
        schedule: QuerySchedule,
        reads: _ScheduleReads,
        with_metadata: bool,
    ) -> None:
        self._config, self._reads, self._with_metadata = config, reads, with_metadata
        # Kept pickled until the loop runs: Beam unpickles several copies of a DoFn, and the
        # schedule's keys as Python objects cost about ten times their pickle.
        self._batches = pickle.dumps(schedule.batches, protocol=pickle.HIGHEST_PROTOCOL)

    def process(
        self, element: tuple[int, tuple[np.ndarray, np.ndarray]], run_salt: bytes
    ) -> Iterator[Any]:
        _, (index, counts) = element
        config, reads = self._config, self._reads
        batches = pickle.loads(self._batches)
        cells, batch = reads.cell_and_batch(index)
        order = np.argsort(batch, kind="stable")
        cells, counts, batch = cells[order], counts[order], batch[order]
        starts = np.searchsorted(batch, np.arange(1, len(batches) + 2))
        core = config.new(source=config.noise_source.for_run(run_salt))
        # One scratch delta, reset after each use: no table is allocated per batch.
        delta = SKETCH_KINDS[config.kind](config.width, config.depth, config.seed)
        flat = delta.table.reshape(-1)
        for k, (t, keys) in enumerate(batches, start=1):
            lo, hi = int(starts[k - 1]), int(starts[k])
            if hi > lo:
                flat[cells[lo:hi]] = counts[lo:hi]
                core.add_counts(delta)
                flat[cells[lo:hi]] = 0
            a, b = int(reads.bounds[k - 1]), int(reads.bounds[k])
            answer = core.answer_hashes(reads.h1[a:b], reads.h2[a:b], time=t)
            yield from answer_records(answer, keys, t, self._with_metadata, config)


def expand_schedule(
    pcoll: beam.PCollection,
    config: CoreConfig,
    schedule: QuerySchedule,
    time_fn: Any,
    key_fn: Any,
    with_metadata: bool,
    run_salt: beam.pvalue.AsSingleton,
) -> Any:
    """Answer every batch of ``schedule`` from the data ``pcoll`` with the core of ``config``.

    Every batch is answered, whether or not data arrives; the noise is drawn once, in the one
    single-key step, from ``config.noise_source`` for the run of ``run_salt``.
    """
    reads = _ScheduleReads.of(schedule, config.width, config.depth, config.seed)
    signed = SKETCH_KINDS[config.kind].SIGNED
    routed = pcoll | "RouteToReads" >> beam.ParDo(
        _RouteToReads(schedule.times, reads, signed, config.seed, time_fn, key_fn)
    )
    # Makes the loop run (and answer every batch) even when no data arrives at all.
    empty = np.zeros(0, dtype=np.int64)
    anchor = pcoll.pipeline | "Anchor" >> beam.Create([(SINGLE_KEY, (empty, empty))])
    return (
        (routed, anchor)
        | "Flatten" >> beam.Flatten()
        | "ExactReads" >> beam.CombinePerKey(_ReadCountsFn())
        | "AnswerBatches"
        >> beam.ParDo(
            _RunSchedule(config, schedule, reads, with_metadata), run_salt
        ).with_output_types(  # type: ignore[arg-type]
            Any
        )
    )
