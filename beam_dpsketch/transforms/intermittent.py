"""DP Count Sketch / Count-Min answering intermittent query batches in Beam: ``DPIntermittentQueries``.

A thin adapter over :class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` (paper
Algorithm 4, "use-and-keep" cell noise; Yildirim et al., "Differentially Private Frequency Sketches
for Intermittent Queries on Large Data Streams"; ``docs/algorithms.md#int-beam``). Exact partial
sketches are built and merged by Beam (linear sketches merge by addition); the noisy state has **one owner**, a single-key step that runs the D3 loop
"add the exact delta of the interval, answer batch ``k``" in order and emits
``(query_time, key, estimate)`` records. The whole stream costs one ``epsilon``, however many
batches are answered (Theorem 4), and is charged once to the accountant when the transform is
applied (at pipeline construction).

Clocks and neighbouring relations
---------------------------------
The caller declares what the element times are (``clock``); the guarantee and the calibration
follow from it:

``"event_time"``
    Times that stay fixed when one element is added or removed (event timestamps, or any public
    clock that does not count elements). Guarantee: ``epsilon``-DP under **add/remove of one
    element**, every other element's time unchanged (Yildirim et al., Theorem 4 with Lemma 1).
    Cell noise of scale ``depth / epsilon``.
``"positions"``
    Sequence positions ``1, 2, ...`` of an ordered input (row numbers). Removing one row
    renumbers every later row: at each of the ``B`` batch boundaries one element moves into the
    neighbouring interval, and the loss of the use-and-keep sketch grows to up to
    ``(2B + 1) epsilon``, so add/remove is **not** covered. The relation this clock supports is
    **replacement of one element at a fixed position** (its key changes, every position stays).
    Derivation: the replaced element is in the same interval ``k`` on both sides, so only the
    increment of batch ``k`` differs, by ``-1`` on the ``depth`` cells of the old key and ``+1``
    on the ``depth`` cells of the new one (fewer where they share a cell): an L1 change of at most
    ``2 depth`` on the increments between uses, each of which is released once with fresh
    discrete Laplace noise (Lemma 1). The cells are therefore noised at scale
    ``2 depth / epsilon`` (the core sketch run at ``epsilon / 2``), which gives ``epsilon``-DP
    under replace-one.

Two ways to declare the queries:

* **A schedule** (:class:`QuerySchedule`, batch or replay with known query times). Each data
  element carries a time ``t`` on the declared clock and is assigned to interval
  ``k(t) = 1 + #{l : t_l < t}`` (:func:`interval_index`), so interval ``(t_{k-1}, t_k]`` feeds
  batch ``k``. Batch ``j``'s answers read only the cells of ``Q_j``, as counts of the
  intervals ``<= j``, and the schedule is public: so each count an element adds to a cell is
  routed, in the step that reads the data, to the first batch at or after its interval that
  reads the cell, and dropped if none does (before any shuffle). ``CombinePerKey`` sums the routed counts
  exactly, sparsely: at most one per (cell, batch) read, O(depth * queries) whatever the numbers
  of rows, batches and distinct keys; one step then runs the D3 loop in batch order, adding
  before batch ``k`` the counts routed to it. The cells ``Q_k`` reads then hold exactly the
  counts of the intervals ``<= k``, as in the core fed every interval's full delta, so the
  answers are the same. Fully deterministic: equal to the core fed those deltas with the
  transform's noise source (:attr:`DPIntermittentQueries.noise_source`). Elements after the
  last query time affect no answer and are dropped without being counted. Only the answers are
  released (no table, no count of elements), so the cells no later batch reads are never needed.
* **A query PCollection** (streaming, event time). Elements of ``(time, keys)`` give the batches;
  the data elements' event timestamps are their times (on the declared clock). A stateful
  ``DoFn`` on one key buffers the hashed data and the pending queries, and an event-time timer
  answers the batch at ``time`` once the watermark has passed it: data with timestamps ``<= time``
  enter that batch. Data arriving late (after its batch was answered) is added anyway and enters
  the **next** batch; an old batch is never re-released. A query arriving after
  a later batch was answered cannot be answered at its time and fails the pipeline with
  ``ValueError`` (never dropped). On a batch runner every element is present before the timers
  fire, so the answers equal those of the schedule mode.

Every declared batch is answered (with noise only if no data arrived before it): the number and
times of the answers depend on the declared queries alone.

Safety rules (invariants I1-I6 of ``docs/algorithms.md#int-beam``), and how they are kept here:

* Query times and sets come from a declared, separate input (the schedule, or the query
  PCollection), never from the data: a query PCollection computed from the data input is refused
  when the transform is applied (the data PCollection is among its ancestors). The rule itself
  (do not choose queries from the private data, e.g. "the current top items") cannot be checked
  in general: only released answers may guide later queries.
* Times must be a public clock that does not depend on the data's content, and the clock must be
  declared (``clock``): positions are safe only under replace-one, see above.
* One noise owner per cell (I1): noise exists only in the single-key step; CombineFns carry exact,
  noise-free partial counts.
* Each element is counted once (I2): each of its cell counts goes to one batch (the first that
  reads the cell at or after its time), or is drained from the buffer once; never cumulative
  snapshots.
* Reproducible noise (I5): all draws come from the transform's noise source under the public
  :func:`intermittent_sketch_id` of the transform's label, a pure function of (key, label, batch
  index, cell) (see :mod:`beam_dpsketch.sketches.intermittent.sketch`), so a retried bundle re-draws
  identical noise.
* Non-global windows and non-default triggers are refused: one D3 state per transform (P-7).
* Nothing about the data leaves except the answers: no Beam metric counts elements, and error
  messages name the offending parameter, never a value from the data.
"""

from __future__ import annotations

import math
import numbers
import pickle
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.hashing import (
    canonical_key,
    canonical_keys,
    hash_keys,
    row_buckets,
    row_signs,
)
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches.intermittent.sketch import (
    SKETCH_KINDS,
    UseAndKeepSketch,
    pure_budget_epsilon,
)
from beam_dpsketch.transforms.base import DPTransform, as_extractor, with_run_salt
from beam_dpsketch.transforms.batching import is_key_batch
from beam_dpsketch.transforms.combiners import sum_by_cell
from beam_dpsketch.transforms.records import IntermittentRecord, TimedEstimate
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "CLOCKS",
    "SKETCHES",
    "DPIntermittentQueries",
    "IntermittentRecord",
    "QuerySchedule",
    "intermittent_sketch_id",
    "interval_index",
]

#: ``sketch`` names of the transform and the core ``kind`` each maps to.
SKETCHES = {"count-sketch": "count-sketch", "count-min": "count-min"}

#: The clocks a caller can declare, and the neighbouring relation each one's guarantee holds for
#: (module docstring: "Clocks and neighbouring relations").
CLOCKS: dict[str, str] = {
    "event_time": "add/remove one element; every other element's time unchanged",
    "positions": (
        "replace one element (its key) at a fixed position; every position unchanged "
        "(add/remove is not covered: it renumbers later positions)"
    ),
}

#: Factor between a clock's per-element add/remove loss and its claimed relation: under
#: "positions" a replacement is one removal plus one addition in the same interval, so the cells
#: are calibrated for ``epsilon / 2``.
_CLOCK_SPLIT = {"event_time": 1, "positions": 2}
#: The core's ``neighbouring`` for each clock.
_CLOCK_NEIGHBOURING = {"event_time": "add_remove", "positions": "replace"}

# Every delta and query of one transform goes to this single key (one noise owner, P-7).
_SINGLE_KEY = 0

# One D3 state answers every query batch: repeated panes would count elements twice.
_INTERMITTENT_WINDOWING = WindowingRequirement(
    who="DPIntermittentQueries",
    default_windowing=True,
    why="one D3 state answers every batch; repeated panes would count elements twice",
)
_DATA, _QUERY = "data", "query"


def intermittent_sketch_id(label: str) -> tuple[str, str]:
    """The public ``sketch_id`` (noise-stream prefix) of the transform labelled ``label``.

    Feeding a :class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` built with this id
    and the same noise source the same deltas reproduces the transform's answers exactly.
    """
    if not isinstance(label, str) or not label:
        raise ValueError(f"label must be a non-empty string, got {label!r}")
    return ("dp-intermittent", label)


def _check_time(value: Any, what: str) -> float | int:
    # Data times reach this check too: the messages name the parameter and the type, never the
    # value.
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}")
    out = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(out, float) and not math.isfinite(out):
        raise ValueError(f"{what} must be finite")
    return out


def _query_keys(keys: Any, what: str) -> tuple[Any, ...]:
    """A query batch's keys as canonical Python keys (a tuple is one composite key, not a batch)."""
    if isinstance(keys, tuple) or not (is_key_batch(keys) or isinstance(keys, list)):
        raise TypeError(
            f"{what} must be a list or array of keys, got {type(keys).__name__} (a tuple is one "
            "composite key: wrap it in a list)"
        )
    return tuple(canonical_keys(keys))


def interval_index(query_times: Any, times: Any) -> np.ndarray:
    """Batch index ``k(t) = 1 + #{l : t_l < t}`` of each time ``t``.

    ``query_times`` are the sorted batch times ``t_1 < t_2 < ... < t_K``; an element at time ``t``
    belongs to the interval ``(t_{k-1}, t_k]`` and enters batch ``k`` (``K + 1``: after the last
    query). A public function of the time alone, so it never depends on the data.
    """
    q = np.asarray(query_times, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if q.ndim != 1 or (q.size > 1 and not (np.diff(q) > 0).all()):
        raise ValueError("query_times must be a strictly increasing one-dimensional sequence")
    if np.isnan(t).any():
        raise ValueError("times must not be NaN")
    return np.searchsorted(q, t, side="left").astype(np.int64) + 1


@dataclass(frozen=True)
class QuerySchedule:
    """A declared, data-independent list of query batches ``(time, keys)``.

    Parameters
    ----------
    batches
        ``(time, keys)`` pairs: ``time`` a real number (event time in seconds, or a public
        position), ``keys`` a list or array of keys (duplicates allowed; they share cells and get
        the same answer). Batches are sorted by time; batches with equal times are merged into
        one (answered simultaneously, as the paper's query batches).

    Raises
    ------
    ValueError
        For no batches, or a non-finite time.
    TypeError
        For a time that is not a number, keys that are not a list/array, or an invalid key (the
        message names its type).
    """

    batches: tuple[tuple[float | int, tuple[Any, ...]], ...]

    def __init__(self, batches: Iterable[tuple[Any, Any]]) -> None:
        merged: dict[float | int, list[Any]] = {}
        for i, item in enumerate(batches):
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise TypeError(
                    f"batches[{i}] must be a (time, keys) pair, got {type(item).__name__}"
                )
            t = _check_time(item[0], f"batches[{i}] time")
            merged.setdefault(t, []).extend(_query_keys(item[1], f"batches[{i}] keys"))
        if not merged:
            raise ValueError("batches: a schedule needs at least one query batch")
        ordered = tuple((t, tuple(merged[t])) for t in sorted(merged))
        object.__setattr__(self, "batches", ordered)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, Any]]) -> QuerySchedule:
        """A schedule from ``(time, key)`` pairs, one query each (grouped by time)."""
        return cls((t, [k]) for t, k in pairs)

    @property
    def times(self) -> np.ndarray:
        """Batch times ``t_1 < ... < t_K`` as float64."""
        return np.asarray([t for t, _ in self.batches], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def num_queries(self) -> int:
        """Total number of (time, key) queries, duplicates included."""
        return sum(len(keys) for _, keys in self.batches)


def _records(
    answer: Any, keys: Any, t: Any, with_metadata: bool, config: _CoreConfig
) -> Iterator[Any]:
    """The records of one answered batch; ``config.split`` turns the core's add/remove epsilon
    into the guarantee under the clock's relation."""
    estimates = answer.estimates.tolist()
    if not with_metadata:
        for key, est in zip(keys, estimates, strict=True):
            yield TimedEstimate(t, key, est)
        return
    stds = answer.noise_std.tolist()
    epsilon = answer.epsilon_total * config.split
    for key, est, std in zip(keys, estimates, stds, strict=True):
        yield IntermittentRecord(
            t, key, est, answer.batch, std, epsilon, config.mechanism, CLOCKS[config.clock]
        )


@dataclass(frozen=True)
class _CoreConfig:
    """What every worker needs to build the single-key core (small, picklable).

    ``budget`` is the transform's pure budget under the relation of ``clock``; the core is
    built for that relation (``neighbouring="replace"`` for the positions clock), so its
    add/remove epsilon is the budget divided by ``split``.
    """

    width: int
    depth: int
    budget: PrivacyBudget
    clock: str
    kind: str
    seed: int
    sketch_id: tuple[str, str]
    noise_source: NoiseSource
    mechanism: str

    @property
    def split(self) -> int:
        return _CLOCK_SPLIT[self.clock]

    def new(self, quiet: bool = True, source: NoiseSource | None = None) -> UseAndKeepSketch:
        """An empty core drawing from ``source`` (a run's source; default: the application's)."""
        with warnings.catch_warnings():
            if quiet:
                # The even-depth warning was shown once, at pipeline construction.
                warnings.simplefilter("ignore", UserWarning)
            return UseAndKeepSketch(
                self.width,
                self.depth,
                self.budget,
                noise_source=self.noise_source if source is None else source,
                release_prefix=self.sketch_id,
                kind=self.kind,
                seed=self.seed,
                neighbouring=_CLOCK_NEIGHBOURING[self.clock],
            )

    def restore(self, data: bytes | None, source: NoiseSource) -> UseAndKeepSketch:
        """The core saved as ``data`` (an empty one for ``None``), drawing from ``source``."""
        if data is None:
            return self.new(source=source)
        return UseAndKeepSketch.from_bytes(data, source)


# --------------------------------------------------------------------------------------------
# Schedule mode
# --------------------------------------------------------------------------------------------


def _split_timed(element: Any, time_fn: Any, key_fn: Any) -> tuple[np.ndarray, Any]:
    """``(times float64, keys)`` of one data element of the schedule mode."""
    if time_fn is not None:
        t = _check_time(time_fn(element), "time_fn(element)")
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
    t = _check_time(times, "element time")
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
            yield _SINGLE_KEY, (at, count)


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
        config: _CoreConfig,
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
            yield from _records(answer, keys, t, self._with_metadata, config)


# --------------------------------------------------------------------------------------------
# Query-PCollection mode
# --------------------------------------------------------------------------------------------


class _StampData(beam.DoFn):
    """Hash a bundle's data keys once, with their event times: ``(times_us, (h1, h2))`` batches."""

    def __init__(self, seed: int, key_fn: Any) -> None:
        self._seed, self._key_fn = seed, key_fn

    def start_bundle(self) -> None:
        # Integer arrays hash as arrays; everything else is collected into one list of keys.
        self._int_keys: list[np.ndarray] = []
        self._int_times: list[np.ndarray] = []
        self._keys: list[Any] = []
        self._key_times: list[int] = []

    def process(self, element: Any, timestamp: Any = beam.DoFn.TimestampParam) -> None:
        value = self._key_fn(element) if self._key_fn is not None else element
        micros = int(timestamp.micros)
        if isinstance(value, np.ndarray) and value.dtype.kind == "i" and value.ndim == 1:
            self._int_keys.append(value.astype(np.int64, copy=False))
            self._int_times.append(np.full(value.size, micros, dtype=np.int64))
        elif is_key_batch(value):
            batch = canonical_keys(value)
            self._keys.extend(batch)
            self._key_times.extend([micros] * len(batch))
        else:
            self._keys.append(canonical_key(value))
            self._key_times.append(micros)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        parts = [hash_keys(arr, self._seed) for arr in self._int_keys]
        times = list(self._int_times)
        if self._keys:
            parts.append(hash_keys(self._keys, self._seed))
            times.append(np.asarray(self._key_times, dtype=np.int64))
        self.start_bundle()
        if not parts:
            return
        all_times = np.concatenate(times)
        if all_times.size == 0:
            return
        h1 = np.concatenate([p[0] for p in parts])
        h2 = np.concatenate([p[1] for p in parts])
        # Stamped with the earliest time it holds: the downstream watermark cannot pass any of
        # its elements' times before it is processed.
        stamp = Timestamp(micros=int(all_times.min()))
        yield WindowedValue((_SINGLE_KEY, (_DATA, all_times, (h1, h2))), stamp, (GlobalWindow(),))


def _micros(t: float | int) -> int:
    return int(Timestamp.of(t).micros)


class _ParseQuery(beam.DoFn):
    """``(time, keys)`` query elements -> ``(single key, ("query", time, keys))``."""

    def process(self, element: Any) -> Iterator[tuple[int, tuple[str, Any, Any]]]:
        if not isinstance(element, tuple | list) or len(element) != 2:
            raise TypeError(
                f"a query element must be a (time, keys) pair, got {type(element).__name__}"
            )
        t = _check_time(element[0], "query time")
        yield _SINGLE_KEY, (_QUERY, t, _query_keys(element[1], "query keys"))


_SKETCH_STATE = ReadModifyWriteStateSpec("sketch", BytesCoder())
_DATA_STATE = BagStateSpec("data", PickleCoder())
_QUERY_STATE = BagStateSpec("queries", PickleCoder())
_NEXT_STATE = ReadModifyWriteStateSpec("next", PickleCoder())
_LAST_STATE = ReadModifyWriteStateSpec("last", PickleCoder())
# The run salt, for the timer (Beam hands side inputs to process only).
_SALT_STATE = ReadModifyWriteStateSpec("run_salt", BytesCoder())
_ANSWER_TIMER = TimerSpec("answer", TimeDomain.WATERMARK)
# Module-level parameter singletons (Beam reads them from the signature's defaults).
_SKETCH_PARAM = beam.DoFn.StateParam(_SKETCH_STATE)
_DATA_PARAM = beam.DoFn.StateParam(_DATA_STATE)
_QUERY_PARAM = beam.DoFn.StateParam(_QUERY_STATE)
_NEXT_PARAM = beam.DoFn.StateParam(_NEXT_STATE)
_LAST_PARAM = beam.DoFn.StateParam(_LAST_STATE)
_SALT_PARAM = beam.DoFn.StateParam(_SALT_STATE)
_TIMER_PARAM = beam.DoFn.TimerParam(_ANSWER_TIMER)


class _AnswerAtEventTime(beam.DoFn):
    """The single noise owner: buffer hashed data and queries; answer each batch at its time.

    An event-time timer is kept at the earliest pending query time. When it fires, the pending
    batches due by then are answered in time order; before each, the buffered data with event
    times ``<=`` the batch time is added to the core (as one exact delta). Later data stays
    buffered for later batches; data that arrives after its batch was answered enters the next
    one. The core's state (exact table, kept noise, use counts) lives in Beam state through its
    versioned ``to_bytes`` format, so a runner checkpoint restores it bit for bit.
    """

    def __init__(self, config: _CoreConfig, with_metadata: bool) -> None:
        self._config, self._with_metadata = config, with_metadata

    def process(
        self,
        element: tuple[int, tuple[bytes, tuple[str, Any, Any]]],
        data=_DATA_PARAM,
        queries=_QUERY_PARAM,
        next_time=_NEXT_PARAM,
        last=_LAST_PARAM,
        salt=_SALT_PARAM,
        timer=_TIMER_PARAM,
    ) -> None:
        _, (run_salt, (tag, t, payload)) = element
        # The timer answers; it reads the run's salt from state, written before it is set.
        if salt.read() != run_salt:
            salt.write(run_salt)
        if tag == _DATA:
            data.add((t, payload))
            return
        micros = _micros(t)
        answered = last.read()
        if answered is not None and micros <= answered[0]:
            # Answering it now would put it at a later time than it declares; answering it at
            # its time is impossible (batch times must increase). Fail loudly, drop nothing.
            raise ValueError(
                f"query batch at time {t!r} arrived after the batch at time {answered[1]!r} was "
                "answered: query times must reach the transform before the watermark passes them"
            )
        queries.add((micros, t, payload))
        pending = next_time.read()
        if pending is None or micros < pending:
            timer.set(Timestamp(micros=micros))
            next_time.write(micros)

    @on_timer(_ANSWER_TIMER)
    def answer(
        self,
        fired=beam.DoFn.TimestampParam,
        sketch=_SKETCH_PARAM,
        data=_DATA_PARAM,
        queries=_QUERY_PARAM,
        next_time=_NEXT_PARAM,
        last=_LAST_PARAM,
        salt=_SALT_PARAM,
        timer=_TIMER_PARAM,
    ) -> Iterator[Any]:
        now = next_time.read()
        now = int(fired.micros) if now is None else now
        pending = list(queries.read())
        due = sorted((q for q in pending if q[0] <= now), key=lambda q: q[0])
        rest = [q for q in pending if q[0] > now]
        if not due:
            return
        config = self._config
        core = config.restore(sketch.read(), config.noise_source.for_run(salt.read()))
        buffered = list(data.read())
        if buffered:
            times = np.concatenate([b[0] for b in buffered])
            h1 = np.concatenate([b[1][0] for b in buffered])
            h2 = np.concatenate([b[1][1] for b in buffered])
        else:
            times = np.zeros(0, np.int64)
            h1 = h2 = np.zeros(0, np.uint64)
        added = np.zeros(times.size, dtype=np.bool_)
        i = 0
        while i < len(due):
            micros, t = due[i][0], due[i][1]
            keys: list[Any] = []
            while i < len(due) and due[i][0] == micros:  # equal times form one batch
                keys.extend(due[i][2])
                i += 1
            delta = (times <= micros) & ~added
            if delta.any():
                core.update_hashes(h1[delta], h2[delta])
                added |= delta
            answer = core.answer(keys, time=t)
            yield from _records(answer, keys, t, self._with_metadata, self._config)
        sketch.write(core.to_bytes())
        last.write((due[-1][0], due[-1][1]))
        data.clear()
        keep = ~added
        if keep.any():
            data.add((times[keep], (h1[keep], h2[keep])))
        queries.clear()
        for q in rest:
            queries.add(q)
        if rest:
            upcoming = min(q[0] for q in rest)
            timer.set(Timestamp(micros=upcoming))
            next_time.write(upcoming)
        else:
            next_time.clear()


# --------------------------------------------------------------------------------------------
# The transform
# --------------------------------------------------------------------------------------------


def _ancestors(pcoll: beam.PCollection) -> Iterator[Any]:
    """Every PCollection ``pcoll`` is computed from (main and side inputs, transitively)."""
    stack, seen = [pcoll], set()
    while stack:
        current = stack.pop()
        producer = getattr(current, "producer", None)
        if producer is None or id(current) in seen:
            continue
        seen.add(id(current))
        for parent in (*producer.inputs, *producer.side_inputs):
            parent = getattr(parent, "pvalue", parent)
            yield parent
            stack.append(parent)


class DPIntermittentQueries(DPTransform):
    """Answer declared query batches at their times with a DP Count Sketch / Count-Min (D3).

    Input: the data stream. Output: ``(query_time, key, estimate)`` records (or
    :class:`IntermittentRecord` with ``with_metadata=True``), one per query, duplicates included.

    Parameters
    ----------
    width, depth, seed
        Sketch shape and public hash seed (the same cells as the exact
        :class:`~beam_dpsketch.sketches.CountSketch` / ``CountMinSketch`` of that shape).
    budget
        ``PrivacyBudget.pure(eps)``: the total for the whole stream and every batch. Without
        it, what ``accountant`` has left when the transform is applied (a pure accountant).
    queries
        The declared query input, independent of the data:

        * a :class:`QuerySchedule` (or a list of ``(time, keys)`` pairs, converted to one):
          data elements are ``(time, key)`` pairs or ``(times, keys)`` batches (a numeric numpy
          array of times and an equally long key batch), or any record with ``time_fn`` (and
          ``key_fn``); times are on the declared ``clock``, the same as the schedule's;
        * a ``PCollection`` of ``(time, keys)`` elements (``time`` in seconds of event time,
          ``keys`` a list or array): data elements are keys (or key batches, or records with
          ``key_fn``) whose event timestamps are their times. It must not be computed from the
          data input (refused when detectable).
    clock
        What the data's times are, declared by the caller (required; :data:`CLOCKS`):

        * ``"event_time"``: times that stay fixed when one element is added or removed (event
          timestamps). Guarantee under add/remove of one element.
        * ``"positions"``: sequence positions of an ordered input (row numbers), which shift
          when a row is removed. Guarantee under replacement of one element at a fixed
          position; the cells get noise of scale ``2 depth / epsilon``.
    sketch
        ``"count-sketch"`` (default; median of signed cells, the paper's choice) or
        ``"count-min"`` (minimum of cells, the extension of Yildirim et al., Section VII).
    time_fn, key_fn
        Extract a record's time (schedule mode only) and key: callables, or field names of
        ``dict`` / ``beam.Row`` elements.
    accountant
        Where the cost is charged (shared by a pipeline's DP transforms); default: a private
        accountant of exactly ``budget``.
    noise_source
        Secret noise key (default: a fresh ``os.urandom`` key). The zero-noise test source is
        refused (:func:`~beam_dpsketch.noise.check_release_source`).
    with_metadata
        Emit :class:`IntermittentRecord` (batch index, noise std, epsilon) instead of tuples.
    label
        Beam label and release label: names the charge and, through
        :func:`intermittent_sketch_id`, every noise stream. Default: the class name as Beam
        label, the transform's full label as release label. Give a stable label to reproduce
        answers.

    Raises
    ------
    ValueError, TypeError
        At construction or application for invalid parameters (named), a missing or unknown
        ``clock``, a budget that is not pure DP, non-default windowing of the data (any window
        other than the global one, or any trigger other than the default: early, late or
        count-based panes would feed one interval's elements to the state several times), a
        query PCollection derived from the data, or a label already charged to the accountant.
    BudgetExceededError
        When applied, if ``budget`` does not fit in ``accountant``.

    Notes
    -----
    **Privacy guarantee** (Yildirim et al., Theorem 4 and Lemma 1;
    Algorithm 4). The answers to all batches, at any number of
    data-independent times, are ``eps``-DP in total under the relation of the declared clock:

    * ``clock="event_time"``: add/remove of one element, every other element's time unchanged.
      Each cell is a Lemma-1 counter at ``eps/depth`` with exact discrete Laplace noise of scale
      ``depth/eps``, drawn once per batch that reads it and kept; answers are post-processing.
      Replacing one element by another (at the same time) costs ``2 eps`` (group privacy).
    * ``clock="positions"``: replacement of one element at a fixed position. The replaced
      element's old and new keys differ in the increment of one interval only, an L1 change of
      at most ``2 depth`` over the cells; with noise of scale ``2 depth / eps`` the loss is at
      most ``eps``. Add/remove is not covered: removing a row shifts one element across every
      batch boundary after it.

    The existence and times of answers are public: every declared batch is answered, whether
    or not data arrived before it.
    """

    def __init__(
        self,
        width: int,
        depth: int,
        budget: PrivacyBudget | None = None,
        *,
        queries: Any,
        clock: str,
        sketch: str = "count-sketch",
        seed: int = 0,
        time_fn: Callable[[Any], Any] | None = None,
        key_fn: Callable[[Any], Any] | None = None,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        if not isinstance(clock, str) or clock not in CLOCKS:
            raise ValueError(
                f"clock must be one of {tuple(CLOCKS)} (what the data's times are: event times "
                f"that stay fixed under add/remove, or row positions), got {clock!r}"
            )
        if sketch not in SKETCHES:
            raise ValueError(f"sketch must be one of {tuple(SKETCHES)}, got {sketch!r}")
        if budget is not None:
            pure_budget_epsilon(budget)
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        time_fn = as_extractor(time_fn, "time_fn")
        key_fn = as_extractor(key_fn, "key_fn")
        if isinstance(queries, beam.PCollection):
            if time_fn is not None:
                raise ValueError(
                    "time_fn: with a query PCollection the data's event timestamps are the times"
                )
            self._schedule: QuerySchedule | None = None
            self._queries: beam.PCollection | None = queries
        elif isinstance(queries, QuerySchedule):
            self._schedule, self._queries = queries, None
        elif isinstance(queries, list | tuple):
            self._schedule, self._queries = QuerySchedule(queries), None
        else:
            raise TypeError(
                "queries must be a QuerySchedule, a list of (time, keys) pairs or a PCollection "
                f"of (time, keys), got {type(queries).__name__}"
            )
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
        self.needs_state_and_timers = self._queries is not None  # event-time state and timers
        self._kind = SKETCHES[sketch]
        self._sketch = sketch
        self._clock = clock
        self._split = _CLOCK_SPLIT[clock]
        self._mechanism = f"use-and-keep cell noise (D3), {sketch}, discrete Laplace"
        self._width, self._depth, self._seed = width, depth, seed
        # Validates width, depth, seed and the budget now, at construction (and warns once for
        # an even Count Sketch depth). Without a budget (the accountant's remainder, known when
        # applied) a placeholder one validates the rest.
        placeholder = budget if budget is not None else PrivacyBudget.pure(1.0)
        probe = self._config(placeholder, ("probe", "")).new(quiet=False)
        self._width, self._depth, self._seed = probe.width, probe.depth, probe.seed
        self.noise_scale: float | None = None
        if budget is not None:
            self.noise_scale = float(probe.noise_scale)
        self._time_fn, self._key_fn = time_fn, key_fn
        self._with_metadata = with_metadata

    def _config(self, budget: PrivacyBudget, sketch_id: tuple[str, str]) -> _CoreConfig:
        return _CoreConfig(
            self._width,
            self._depth,
            budget,
            self._clock,
            self._kind,
            self._seed,
            sketch_id,
            self._noise_source,
            self._mechanism,
        )

    @property
    def clock(self) -> str:
        """The declared clock (``"event_time"`` or ``"positions"``)."""
        return self._clock

    @property
    def neighbouring_relation(self) -> str:
        """The neighbouring relation the ``epsilon`` guarantee holds for (from the clock)."""
        return CLOCKS[self._clock]

    @property
    def schedule(self) -> QuerySchedule | None:
        """The declared schedule (``None`` with a query PCollection)."""
        return self._schedule

    def output_type(self) -> type:
        return IntermittentRecord if self._with_metadata else TimedEstimate

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def display_parameters(self) -> dict[str, Any]:
        return {
            "mechanism": self._mechanism,
            "sketch": self._sketch,
            "width": self._width,
            "depth": self._depth,
            "seed": self._seed,
            "clock": self._clock,
            "noise_scale": self.noise_scale,
            "queries": "schedule" if self._schedule is not None else "PCollection (event time)",
            "query_batches": None if self._schedule is None else len(self._schedule),
            "neighbouring_relation": CLOCKS[self._clock],
        }

    def windowing_requirement(self) -> WindowingRequirement:
        return _INTERMITTENT_WINDOWING

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._queries is not None and any(a is pcoll for a in _ancestors(self._queries)):
            raise ValueError(
                f"{name}: the query PCollection is computed from the data input; query times "
                "and sets must not depend on the private data (invariant I3). Declare queries "
                "as a separate input or a QuerySchedule"
            )
        self.check_label_free(name)
        # The budget given, or what the accountant has left now (refused unless pure).
        budget = self.budget_for(name)
        try:
            config = self._config(budget, intermittent_sketch_id(name))
            self.noise_scale = float(config.new().noise_scale)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
        self._core = config
        if self._clock == "positions":
            sensitivity = (
                f"replace-one: 1 per cell, up to {2 * self._depth} cells (L1 {2 * self._depth}) "
                "in one increment"
            )
        else:
            sensitivity = f"1 per cell, {self._depth} cells per element (L1 {self._depth})"
        return self.accountant.charge(
            name,
            self._mechanism,
            budget,
            1,
            "element",
            noise_scale=self.noise_scale,
            sensitivity=sensitivity,
            clock=self._clock,
            neighbouring_relation=CLOCKS[self._clock],
            queries="schedule" if self._schedule is not None else "PCollection (event time)",
            paper="Yildirim et al., Algorithm 4, Theorem 4, Lemma 1",
        )

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        config = self._core
        if self._schedule is not None:
            return self._expand_schedule(pcoll, config)
        return self._expand_event_time(pcoll, config)

    def _expand_schedule(self, pcoll: beam.PCollection, config: _CoreConfig) -> Any:
        schedule: QuerySchedule = self._schedule  # type: ignore[assignment]
        reads = _ScheduleReads.of(schedule, self._width, self._depth, self._seed)
        signed = SKETCH_KINDS[self._kind].SIGNED
        routed = pcoll | "RouteToReads" >> beam.ParDo(
            _RouteToReads(schedule.times, reads, signed, self._seed, self._time_fn, self._key_fn)
        )
        # Makes the loop run (and answer every batch) even when no data arrives at all.
        empty = np.zeros(0, dtype=np.int64)
        anchor = pcoll.pipeline | "Anchor" >> beam.Create([(_SINGLE_KEY, (empty, empty))])
        return (
            (routed, anchor)
            | "Flatten" >> beam.Flatten()
            | "ExactReads" >> beam.CombinePerKey(_ReadCountsFn())
            | "AnswerBatches"
            >> beam.ParDo(
                _RunSchedule(config, schedule, reads, self._with_metadata), self.run_salt
            ).with_output_types(  # type: ignore[arg-type]
                Any
            )
        )

    def _expand_event_time(self, pcoll: beam.PCollection, config: _CoreConfig) -> Any:
        data = pcoll | "HashData" >> beam.ParDo(_StampData(self._seed, self._key_fn))
        queries = (
            self._queries
            | "GlobalQueries" >> beam.WindowInto(GlobalWindows())
            | "ParseQueries" >> beam.ParDo(_ParseQuery())
        )
        both = (data, queries) | "Flatten" >> beam.Flatten()
        return with_run_salt(both, self.run_salt) | "AnswerAtEventTime" >> beam.ParDo(
            _AnswerAtEventTime(config, self._with_metadata)
        ).with_input_types(tuple[int, Any]).with_output_types(Any)
