"""DP frequencies and heavy hitters over a sliding window in Beam: ``DPSlidingWindowFrequencies``.

A thin adapter over :class:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch` (Wang, Wang and Chen,
"DPSW-Sketch", KDD 2024) under the distributed-execution assumptions A1-A6 of
``docs/algorithms.md#dpsw-beam``:

1. **Steps.** Every element gets a 1-based *step*: its public position ``t`` (count-based mode,
   assumption A1: a global sequencer numbered the stream ``1..n``), or its event-time unit
   ``floor((timestamp - origin) / time_unit) + 1`` (time-based mode). A count-based element at
   position ``t`` is given the event time ``t - 1`` seconds, so both modes run the same
   event-time pipeline below. A **batch element** (many rows, see
   :class:`DPSlidingWindowFrequencies`) is split with numpy by window instead (no Python loop
   over its rows): its keys are hashed once and it becomes one exact partial table per window
   it touches, so Beam moves a handful of elements per window, not one per row.
2. **Segments as windows.** A non-merging ``WindowFn`` puts each element into the window of its
   ``(block, segment)`` (``docs/algorithms.md#dpsw-segments``; segments are the elementary
   intervals of the cut points
   ``{0, B} U {I[j], B - I[j]}``) when a query of the public schedule reads its block, and
   otherwise into one window per maximal run of blocks that no query reads (with
   ``release_every`` longer than the window, the blocks between query windows): such a
   window's table carries only its row count and last step (the end of the schedule and, in
   count-based mode, the gap-free check), never cells, since nothing of those blocks is
   released. Windowing uses the default ``AfterWatermark()`` trigger,
   ``allowed_lateness = 0`` and ``DISCARDING``: a segment's table is emitted once, when the
   watermark has passed its end (assumption A2). The input must be in
   ``GlobalWindows()`` (an element of ``k`` overlapping windows would be counted ``k`` times)
   with the default trigger (or ``AfterWatermark()`` without early or late firings) and
   ``allowed_lateness = 0``; any other input windowing is refused (``ValueError``) when the
   transform is applied.
3. **Exact raw counts.** A combine per segment window (keyed by the segment's public end)
   builds an exact int64 Count-Min table (the cells of a ``CountMinSketch`` with the sketch's
   ``(width, depth, seed)``); partial tables of different bundles and workers add exactly
   (linearity). Every release reads only the cells of the public query keys or candidates
   (Wang, Wang and Chen, Algorithm 3: estimates are minima over those keys' cells), so the
   tables keep only those cells (the row counts stay exact) and travel and wait as their
   non-zero cells: a segment costs at most ``16 depth min(keys, width)`` bytes of cells,
   ``keys`` the number of query keys or candidates, whatever its rows. The released values are
   those of the full tables, bit for bit: the noise of every cell is still drawn, from the same
   keyed stream. **No noise here** (assumption A3).
   A pane that is not the single ``ON_TIME`` pane raises (assumption A2): nothing is released.
4. **Seal and query.** One single-key stateful ``DoFn`` (the trusted aggregator, assumption A3)
   holds a :class:`DPSWSketch` in state, adds segment tables to it in batches and seals it as
   soon as a range is known complete, so its state is bounded by the sketch and the window,
   not by the stream or ``release_every`` (see :class:`_SealAndQuery` for the exact bound and
   its one exception, time-based mode on a batch runner). It answers every declared query step
   ``t = release_every, 2 release_every, ...`` (up to the last step holding an element), in order: in
   count-based mode as soon as complete segments cover it (assumption A1), and in any case
   from an event-time timer at the end of the latest query step the data has reached: when it
   fires the
   watermark guarantees that every segment ending at or before each such ``t`` has arrived.
   For each ``t`` the DoFn adds those segment tables (:meth:`DPSWSketch.add_segment_counts`),
   seals with :meth:`DPSWSketch.advance_to` (noise drawn once per PCMS from
   ``noise_source.stream((label, "dpsw", block, kind, level))``, so a retried bundle re-draws the
   same noise, assumption A5) and answers the public query keys or heavy hitters over the public
   candidate set from the sealed sketches only (Wang, Wang and Chen, Algorithm 3). Blocks that no
   remaining query reads (with ``release_every`` longer than the window, those between query
   windows) are dropped unsealed: their noise, never released, is not drawn.

Results equal the single-machine core fed with ``update_at(keys, steps)`` and ``advance_to(t)``
at the same query steps, with the same noise source and label.

Late data (time-based mode): an element behind the watermark when it reaches the segment windows
is dropped by Beam (allowed lateness 0, assumption A2), which counts it in its
``droppedDueToLateness`` metric; it never changes a sealed sketch. The rows of a batch that fall
in one segment share its window, hence its fate: their partial table is dropped as a whole (one
count in the metric). A segment table reaching the aggregator after its range was sealed would
make :meth:`DPSWSketch.add_range_counts` raise: it is never added silently.

Runner note: on the DirectRunner with ``--streaming`` (TestStream), a query timer that only
becomes due at the final advance of the watermark to +infinity fires, but its output is lost
downstream; a test stream should advance the watermark past its last query time before ending.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import coders
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import (
    GlobalWindows,
    IntervalWindow,
    NonMergingWindowFn,
    TimestampedValue,
)
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_key, hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.dpsw import MAX_INDEX, DPSWSketch
from beam_dpsketch.transforms.base import DPTransform, as_extractor, with_run_salt
from beam_dpsketch.transforms.batching import FixedBatches, is_key_batch
from beam_dpsketch.transforms.combiners import sum_by_cell
from beam_dpsketch.transforms.records import KeyEstimate, TimedEstimate, TimedHeavyHitters
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = ["DPSlidingWindowFrequencies", "SlidingWindowRelease"]

MODES = ("count", "time")
PRESETS = (None, "theory", "paper_experiments")
_MICROS = 1_000_000

# Each sketch must be sealed exactly once, when its range is complete (assumption A2 of
# DPSW-beam), and an element in k windows (SlidingWindows) would be one windowed value per
# window, counted k times while rho is charged once; any other WindowFn adds nothing, since the
# segments are the only windows the mechanism uses.
_SLIDING_WINDOWING = WindowingRequirement(
    who="DPSlidingWindowFrequencies",
    window_fns=("global",),
    triggers="on_time",
    why=(
        "each sketch is sealed once, when its range is complete, and its own segment windows "
        "follow the public step schedule: assumption A2 of DPSW-beam"
    ),
)
_BATCH = 4096

#: The neighbouring relation the transform's guarantee holds for, per mode. Replace-one in both
#: modes: in count-based mode a removal shifts every later position; in time-based mode the
#: query schedule runs to the last step holding an event, so an added event can add releases.
NEIGHBOURING_RELATIONS: dict[str, str] = {
    "count": (
        "replace one element: one element's key substituted, every position fixed "
        "(neighbouring streams have the same length); adding or removing an element is not "
        "covered (it shifts every later position)"
    ),
    "time": (
        "replace one event: one event's key substituted, its event time fixed (event times are "
        "public); adding, removing or moving an event is not covered (the query schedule runs "
        "to the last step holding an event)"
    ),
}


@dataclass(frozen=True)
class SlidingWindowRelease:
    """One answered query (output of ``DPSlidingWindowFrequencies(..., with_metadata=True)``).

    Every field is public or post-processing of sealed sketches.

    Attributes
    ----------
    transform
        Label of the transform (part of the noise release ids).
    mode
        ``"count"`` or ``"time"``.
    step
        Query step ``t`` (count-based: the position of the last element in the window).
    time
        The query time as in the plain records: ``t`` (count-based) or the event time
        ``origin + t * time_unit`` in seconds that ends the window (time-based).
    window_start, window_end
        Count-based: positions ``max(t - W + 1, 1)`` and ``t`` (inclusive). Time-based: event
        times ``origin + (t - W) * time_unit`` and ``origin + t * time_unit`` (half-open).
    covered
        ``(first, last)`` step actually summed by the query (its covered range,
        ``docs/algorithms.md#dpsw-e5``).
    kind
        ``"frequencies"`` or ``"heavy_hitters"``.
    records
        ``(key, estimate)`` pairs: every query key, or the heavy hitters among the candidates.
    mechanism
        Mechanism name (as in the accountant's report).
    rho, epsilon, delta
        Cost of the release this record belongs to, which is the whole transform: every query
        of the stream is post-processing of the same sealed sketches, so this is the guarantee
        of all records together, not per record (``epsilon``/``delta`` when the budget was
        given as (eps, delta), else ``None``).
    noise_scale
        Standard deviation of the Gaussian noise of the full-block PCMS (level 1).
    neighbouring_relation
        The neighbouring relation the guarantee holds for (from the mode).
    """

    transform: str
    mode: str
    step: int
    time: float
    window_start: float
    window_end: float
    covered: tuple[int, int]
    kind: str
    records: tuple[tuple[Any, float], ...]
    mechanism: str
    rho: float
    epsilon: float | None
    delta: float | None
    noise_scale: float
    neighbouring_relation: str


# --------------------------------------------------------------------------------------------
# Steps and segment windows
# --------------------------------------------------------------------------------------------


def _micros(value: Any, name: str, *, positive: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    micros = round(value * _MICROS)
    if abs(micros - value * _MICROS) > 1e-6 * max(1.0, abs(value * _MICROS)):
        raise ValueError(f"{name} must be a whole number of microseconds, got {value}")
    if positive and micros <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return int(micros)


def _seconds(micros: int) -> float:
    """Seconds as an int when whole (readable output), else a float."""
    return micros // _MICROS if micros % _MICROS == 0 else micros / _MICROS


class _StepClock:
    """The public map between steps and event time: step ``s`` is
    ``[origin + (s-1) unit, origin + s unit)``; count-based mode uses ``unit = 1 s, origin = 0``.
    """

    def __init__(self, unit_micros: int, origin_micros: int) -> None:
        self.unit, self.origin = unit_micros, origin_micros

    def step_of(self, ts: Timestamp) -> int:
        return (int(ts.micros) - self.origin) // self.unit + 1

    def start_of(self, step: int) -> Timestamp:
        """Event time at which ``step`` begins (``end_of(step - 1)``)."""
        return Timestamp(micros=self.origin + (step - 1) * self.unit)

    def end_of(self, step: int) -> Timestamp:
        return Timestamp(micros=self.origin + step * self.unit)


class _SegmentWindows(NonMergingWindowFn):
    """Assigns each element to the window of its ``(block, segment)`` (DPSW-segments), or to
    the window of a *skipped run* of blocks that no query reads.

    The queries run at ``t = every, 2 every, ...`` and a query at ``t`` reads the blocks that
    meet ``[max(t - W + 1, 1), t]`` (Wang, Wang and Chen, Algorithm 3). A block that no query
    reads contributes nothing to any release: its rows only tell the aggregator the last step
    holding an element (the end of the schedule) and, in count-based mode, that the positions
    are gap-free. So the steps of a maximal run of such blocks share one window, whose table
    carries those two facts and no cells, and Beam moves one element per run instead of one per
    segment (a period much longer than the window then costs per query, not per row).

    Data independent: a window depends only on the element's timestamp and the public schedule
    ``(every, window)``, never on its key, so every range is fixed before any data is seen.
    """

    def __init__(
        self,
        block: int,
        cuts: Sequence[int],
        clock: _StepClock,
        every: int = 1,
        window: int = 1,
    ) -> None:
        self.block, self.cuts, self.clock = block, tuple(cuts), clock
        # A period beyond any step has no query: the same windows as the largest exact one.
        self.every, self.window = min(every, MAX_INDEX), window

    def segment_steps(self, step: int) -> tuple[int, int]:
        """``(last step before the segment, last step of the segment)`` of ``step``."""
        lo, hi = self.segment_bounds(np.array([step], dtype=np.int64))
        return int(lo[0]), int(hi[0])

    def _check_steps(self, steps: np.ndarray) -> None:
        if steps.size and steps.min() < 1:
            # The offending time is data: name the rule, not the value.
            raise ValueError(
                f"an event time is before the origin {_seconds(self.clock.origin)} s of the steps"
            )

    def segment_bounds(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised :meth:`segment_steps` of int64 ``steps`` (the core's ``locate``)."""
        self._check_steps(steps)
        base = (steps - 1) // self.block * self.block
        cuts = np.asarray(self.cuts, dtype=np.int64)
        # Same rule as DPSWLayout.segment_of: relative position c_g < rel <= c_{g+1}.
        g = np.searchsorted(cuts[1:-1], steps - base, side="left")
        return base + cuts[g], base + cuts[g + 1]

    def read_blocks(self, blocks: np.ndarray) -> np.ndarray:
        """Whether a query at some ``t = m every`` (``m >= 1``) reads each 1-based block.

        Block ``k`` meets the window ``[max(t - W + 1, 1), t]`` of ``t`` iff
        ``(k - 1) B < t <= k B + W - 1``: some multiple of ``every`` lies there.
        """
        b, n = self.block, self.every
        first = np.maximum((blocks - 1) * b // n + 1, 1)
        return (blocks * b + self.window - 1) // n >= first

    def _oldest_block(self, t: np.ndarray) -> np.ndarray:
        """The oldest block the query at ``t >= 1`` reads (the block of its window start)."""
        return (np.maximum(t - self.window + 1, 1) - 1) // self.block + 1

    def window_bounds(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(last step before, last step of the window, is a segment)`` of int64 ``steps``.

        A step of a block that a query reads lies in its segment's window; any other step in
        the window of the maximal run of unread blocks around it: from the block after the
        newest block of the last query at or before the block's start (block 1 if there is
        none) to the block before the oldest block of the next query.
        """
        lo, hi = self.segment_bounds(steps)
        blocks = (steps - 1) // self.block + 1
        read = self.read_blocks(blocks)
        if read.all():
            return lo, hi, read
        skip = ~read
        b, n = self.block, self.every
        m = (blocks[skip] - 1) * b // n
        # The newest block read by the query m * every (none for m = 0) and the oldest block
        # read by the next one.
        newest = np.where(m > 0, (m * n - 1) // b + 1, 0)
        oldest = self._oldest_block((m + 1) * n)
        lo[skip] = newest * b
        hi[skip] = (oldest - 1) * b
        return lo, hi, read

    def window_steps(self, step: int) -> tuple[int, int, bool]:
        """Scalar :meth:`window_bounds`."""
        lo, hi, read = self.window_bounds(np.array([step], dtype=np.int64))
        return int(lo[0]), int(hi[0]), bool(read[0])

    def assign(self, context: Any) -> list[IntervalWindow]:
        lo, hi, _ = self.window_steps(self.clock.step_of(context.timestamp))
        return [IntervalWindow(self.clock.end_of(lo), self.clock.end_of(hi))]

    def get_window_coder(self) -> coders.Coder:
        return IntervalWindowCoder()

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self) and self._identity() == other._identity()  # type: ignore[attr-defined]
        )

    def _identity(self) -> tuple:
        return (self.block, self.cuts, self.clock.unit, self.clock.origin, self.every, self.window)

    def __hash__(self) -> int:
        return hash_keys([self._identity()], 0)[0][0].item()


# Tag of the per-segment partial tables that :class:`_Stamp` builds from batch elements.
_PARTS = "segment_parts"


def _released_cells(keys: Sequence[Any], shape: tuple[int, int, int]) -> np.ndarray:
    """Sorted distinct flat cells ``row * width + bucket`` of ``keys`` in a ``(width, depth,
    seed)`` Count-Min table: the only cells that an estimate of one of ``keys`` reads."""
    width, depth, seed = shape
    h1, h2 = hash_keys(list(keys), seed)
    buckets = row_buckets(h1, h2, depth, width)
    buckets += (np.arange(depth, dtype=np.int64) * width)[:, None]
    return np.unique(buckets)


def _cell_mask(cells: np.ndarray | None, shape: tuple[int, int, int]) -> np.ndarray | None:
    """Boolean ``depth * width`` mask of ``cells`` (``None``: every cell is kept)."""
    if cells is None:
        return None
    width, depth, _ = shape
    mask = np.zeros(depth * width, dtype=bool)
    mask[cells] = True
    return mask


def _sparse(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(flat cell indices, counts)`` of the non-zero cells of an int64 table."""
    flat = table.ravel()
    cells = np.flatnonzero(flat).astype(np.int64)
    return cells, flat[cells]


def _table_from_sparse(shape: tuple[int, int, int], total: int, cells: Any, counts: Any):
    """The :class:`CountMinSketch` of shape ``(width, depth, seed)`` with those non-zero cells."""
    sketch = CountMinSketch(*shape)
    sketch.table.ravel()[cells] = counts
    sketch.total_weight = total
    return sketch


def _sketch_reduce_args(sketch: CountMinSketch) -> tuple:
    # A segment's table is mostly zeros (a segment may hold a single row): Beam moves and
    # buffers it as its non-zero cells, so a step costs O(rows * depth) bytes, not O(width).
    cells, counts = _sparse(sketch.table)
    return (sketch.width, sketch.depth, sketch.seed), sketch.total_weight, cells, counts


def _pack_cells(cells: np.ndarray, counts: np.ndarray) -> bytes:
    """One bytes value holding the int64 ``cells`` then the int64 ``counts`` (same length)."""
    return np.concatenate([cells, counts]).astype("<i8", copy=False).tobytes()


def _unpack_cells(data: bytes, depth: int, width: int) -> np.ndarray:
    """The dense int64 ``(depth, width)`` table of :func:`_pack_cells` bytes."""
    both = np.frombuffer(data, dtype="<i8")
    half = len(both) // 2
    table = np.zeros(depth * width, dtype=np.int64)
    table[both[:half]] = both[half:]
    return table.reshape(depth, width)


def _rebuild_part(shape: tuple[int, int, int], total: int, max_step: int, cells, counts):
    return _SegmentPart.from_cells(shape, cells, counts, total, max_step)


class _SegmentPart:
    """Exact Count-Min counts of the rows of one batch that fall in one segment window.

    Held and pickled (hence moved and buffered by Beam) as its non-zero cells: ``cells`` (flat
    ``row * width + bucket``, sorted, distinct) and their ``counts``, with ``total`` rows and
    ``max_step`` the last step among them (the aggregator's query schedule needs it), for a
    table of ``shape`` ``(width, depth, seed)``.
    """

    __slots__ = ("shape", "cells", "counts", "total", "max_step")

    def __init__(self, sketch: CountMinSketch, max_step: int) -> None:
        self.shape = (sketch.width, sketch.depth, sketch.seed)
        self.cells, self.counts = _sparse(sketch.table)
        self.total, self.max_step = int(sketch.total_weight), int(max_step)

    @classmethod
    def from_cells(
        cls, shape: tuple[int, int, int], cells: Any, counts: Any, total: int, max_step: int
    ) -> _SegmentPart:
        part = cls.__new__(cls)
        part.shape = tuple(shape)
        part.cells = np.asarray(cells, dtype=np.int64)
        part.counts = np.asarray(counts, dtype=np.int64)
        part.total, part.max_step = int(total), int(max_step)
        return part

    @property
    def sketch(self) -> CountMinSketch:
        """The dense :class:`CountMinSketch` of these cells."""
        return _table_from_sparse(self.shape, self.total, self.cells, self.counts)

    def __reduce__(self):
        return _rebuild_part, (self.shape, self.total, self.max_step, self.cells, self.counts)


class _SegmentAccumulator:
    """Exact Count-Min counts and last step of one segment being combined, held sparsely.

    ``cells`` (flat ``row * width + bucket``, sorted, distinct) and ``counts`` are the non-zero
    cells of the segment's ``CountMinSketch``: a segment may hold a single row, and a runner
    may keep many segments' accumulators at once, so each costs O(rows * depth), not O(width).
    """

    __slots__ = ("cells", "counts", "total", "max_step")

    def __init__(self) -> None:
        self.cells = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros(0, dtype=np.int64)
        self.total = 0
        self.max_step = 0

    def add(self, cells: np.ndarray, counts: np.ndarray, total: int, max_step: int) -> None:
        self.cells, self.counts = sum_by_cell(
            np.concatenate([self.cells, cells]), np.concatenate([self.counts, counts])
        )
        self.total += total
        self.max_step = max(self.max_step, max_step)


def _as_batch(element: Any) -> tuple[int | np.ndarray, Any, np.ndarray | None] | None:
    """``(first 0-based position or step/time array, keys, seconds or None)`` of a batch element.

    ``None`` for a single row. A batch is ``(ndarray, keys)`` or the
    :class:`~beam_dpsketch.io.ReadOrderedKeys` element
    ``(first_position, keys, seconds or None)``. Neither can be a row: an ndarray, an array of
    keys or a list is never a valid key (:func:`beam_dpsketch.hashing.encode_key`).
    """
    if not isinstance(element, tuple):
        return None
    if len(element) == 2 and isinstance(element[0], np.ndarray):
        return element[0], element[1], None
    if (
        len(element) == 3
        and isinstance(element[0], int | np.integer)
        and not isinstance(element[0], bool | np.bool_)
        and (is_key_batch(element[1]) or isinstance(element[1], list))
        and (element[2] is None or isinstance(element[2], np.ndarray))
    ):
        return int(element[0]), element[1], element[2]
    return None


class _Stamp(beam.DoFn):
    """Give each element its step and route it to its segment window.

    A single row becomes ``(step, key)`` timestamped at its event time (count-based: the step's
    start). A batch element (see :func:`_as_batch`) is split with numpy by segment: its keys are
    hashed once, and one exact partial table per segment it touches goes to the ``_PARTS``
    output, timestamped at the earliest event time of its rows in that segment, so Beam moves a
    handful of elements per segment instead of one per row. With ``cells`` (sorted flat cell
    indices), a partial table keeps only those cells (its row count stays exact).
    """

    def __init__(
        self,
        mode: str,
        windows: _SegmentWindows,
        shape: tuple[int, int, int],
        key_fn: Callable[[Any], Any],
        position_fn: Callable[[Any], Any] | None,
        time_fn: Callable[[Any], Any] | None,
        cells: np.ndarray | None = None,
    ) -> None:
        self._mode, self._windows, self._clock = mode, windows, windows.clock
        self._shape = shape
        self._key_fn, self._position_fn, self._time_fn = key_fn, position_fn, time_fn
        self._cells = cells
        self._mask: np.ndarray | None = None

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam):
        batch = _as_batch(element)
        if batch is not None:
            yield from self._batch(*batch)
            return
        key = canonical_key(self._key_fn(element))
        if self._mode == "count":
            pos = self._position_fn(element)  # type: ignore[misc]
            if isinstance(pos, bool | np.bool_) or not isinstance(pos, int | np.integer):
                raise TypeError(
                    f"position_fn must return an int position, got {type(pos).__name__}"
                )
            if pos < 1:
                raise ValueError("position_fn must return a 1-based position (>= 1)")
            step = int(pos)
            yield TimestampedValue((step, key), self._clock.start_of(step))
            return
        if self._time_fn is not None:
            value = self._time_fn(element)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(
                    f"time_fn must return a number of seconds, got {type(value).__name__}"
                )
            if not math.isfinite(value):
                raise ValueError("time_fn must return a finite number of seconds")
            timestamp = Timestamp(micros=math.floor(float(value) * _MICROS))
        step = self._clock.step_of(timestamp)
        if step < 1:
            raise ValueError(
                f"an event time is before the origin {_seconds(self._clock.origin)} s of the "
                "time steps"
            )
        yield TimestampedValue((step, key), timestamp)

    def _batch(self, where: int | np.ndarray, keys: Any, seconds: np.ndarray | None):
        if not (is_key_batch(keys) or isinstance(keys, list)):
            raise TypeError(
                "the keys of a batch element must be a pyarrow array, a numpy array or a list, "
                f"got {type(keys).__name__}"
            )
        n = len(keys)
        steps, micros = self._batch_steps(where, n, seconds)
        if not n:
            return
        # Hashing validates every key (a None or float raises TypeError naming its type), also
        # those of rows in blocks that no query reads.
        h1, h2 = hash_keys(keys, self._shape[2])
        lo, _, read = self._windows.window_bounds(steps)
        # Rows grouped by window (stable): one partial table per window the batch touches.
        order = np.argsort(lo, kind="stable")
        lo = lo[order]
        starts = np.flatnonzero(np.r_[True, lo[1:] != lo[:-1]])
        totals = np.diff(np.append(starts, n))
        max_steps = np.maximum.reduceat(steps[order], starts)
        first_micros = np.minimum.reduceat(micros[order], starts)
        group_read = read[order][starts]
        group_cells, group_counts = self._group_cells(h1, h2, order, starts, read)
        for g in range(len(starts)):
            if group_read[g]:
                cells, counts = group_cells[g], group_counts[g]
            else:
                # A run of blocks that no query reads: its row count and last step only.
                cells = counts = np.zeros(0, dtype=np.int64)
            part = _SegmentPart.from_cells(
                self._shape, cells, counts, int(totals[g]), int(max_steps[g])
            )
            when = Timestamp(micros=int(first_micros[g]))
            yield beam.pvalue.TaggedOutput(_PARTS, TimestampedValue(part, when))

    def _group_cells(
        self,
        h1: np.ndarray,
        h2: np.ndarray,
        order: np.ndarray,
        starts: np.ndarray,
        read: np.ndarray,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per group of rows (``order`` split at ``starts``), the sorted non-zero kept cells of
        its Count-Min table and their counts; groups of unread rows get empty arrays.

        One ``sum_by_cell`` over ``group * depth * width + cell`` for the whole batch: no
        dense table and no Python loop over rows.
        """
        width, depth, _ = self._shape
        size = depth * width
        groups = len(starts)
        group_of_row = np.repeat(
            np.arange(groups, dtype=np.int64), np.diff(np.append(starts, len(order)))
        )
        rows = order[read[order]]
        group_of_row = group_of_row[read[order]]
        buckets = row_buckets(h1[rows], h2[rows], depth, width)
        buckets += (np.arange(depth, dtype=np.int64) * width)[:, None]
        flat = buckets.ravel()
        owner = np.tile(group_of_row, depth)
        if self._cells is not None:
            if self._mask is None:
                self._mask = _cell_mask(self._cells, self._shape)
            keep = self._mask[flat]
            flat, owner = flat[keep], owner[keep]
        keys, counts = sum_by_cell(owner * size + flat, np.ones(len(flat), dtype=np.int64))
        bounds = np.searchsorted(keys, np.arange(groups + 1, dtype=np.int64) * size)
        cells = [
            keys[a:b] - g * size
            for g, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
        ]
        return cells, [counts[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def _batch_steps(
        self, where: int | np.ndarray, n: int, seconds: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, event times in microseconds)`` of the ``n`` rows of a batch element."""
        clock = self._clock
        if isinstance(where, int):
            if where < 0:
                raise ValueError("the first position of a batch element must be >= 0")
            if self._mode == "count":
                where = np.arange(where + 1, where + 1 + n, dtype=np.int64)
            elif seconds is None:
                raise ValueError(
                    "mode='time' needs event times: a (position, keys, seconds) batch with "
                    "seconds None (read with time_column=...) has none"
                )
            else:
                where = seconds
        if where.ndim != 1 or where.shape[0] != n:
            raise ValueError(
                "a batch element needs a one-dimensional array of positions or times with one "
                "entry per key"
            )
        if self._mode == "count":
            if where.dtype.kind not in "iu":
                raise TypeError(f"batch positions must be integers, got dtype {where.dtype}")
            steps = where.astype(np.int64)
            if n and steps.min() < 1:
                raise ValueError("batch positions must be 1-based (>= 1)")
            return steps, clock.origin + (steps - 1) * clock.unit
        if where.dtype.kind not in "iuf":
            raise TypeError(f"batch event times must be numbers of seconds, got {where.dtype}")
        values = where.astype(np.float64)
        if not np.isfinite(values).all():
            raise ValueError("batch event times must be finite")
        # Bit for bit the row path: floor(float(value) * 1e6) in float64.
        micros = np.floor(values * _MICROS).astype(np.int64)
        steps = (micros - clock.origin) // clock.unit + 1
        if n and steps.min() < 1:
            raise ValueError(
                f"a batch event time is before the origin {_seconds(clock.origin)} s of the "
                "time steps"
            )
        return steps, micros


class _SegmentCombineFn(beam.CombineFn):
    """Exact Count-Min table and last step of one segment, from batches of ``(step, key)`` rows
    or from :class:`_SegmentPart` partial tables.

    The accumulator (:class:`_SegmentAccumulator`, the non-zero cells; output
    ``[CountMinSketch, max_step]``) is exact (no noise, assumption A3); partial tables merge by
    addition whatever Beam's merge tree. With ``cells`` (sorted flat cell indices) only those
    cells are kept: every other cell of the output is 0, the row count stays exact.
    """

    def __init__(self, width: int, depth: int, seed: int, cells: np.ndarray | None = None) -> None:
        self._shape = (width, depth, seed)
        self._cells = cells
        self._mask: np.ndarray | None = None

    def _keep(self, cells: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of ``(cells, counts)`` at the kept cells."""
        if self._cells is None:
            return cells, counts
        if self._mask is None:
            self._mask = _cell_mask(self._cells, self._shape)
        keep = self._mask[cells]
        return cells[keep], counts[keep]

    def create_accumulator(self) -> _SegmentAccumulator:
        return _SegmentAccumulator()

    def add_input(self, mutable_accumulator: _SegmentAccumulator, element: Any):
        acc = mutable_accumulator
        if isinstance(element, _SegmentPart):
            cells, counts = self._keep(element.cells, element.counts)
            acc.add(cells, counts, element.total, element.max_step)
            return acc
        pairs = element if isinstance(element, list) else [element]
        if pairs:
            width, depth, seed = self._shape
            # The cells CountMinSketch(width, depth, seed).update(keys) increments.
            h1, h2 = hash_keys([key for _, key in pairs], seed)
            buckets = row_buckets(h1, h2, depth, width)
            buckets += (np.arange(depth, dtype=np.int64) * width)[:, None]
            cells, counts = self._keep(buckets.ravel(), np.ones(buckets.size, dtype=np.int64))
            acc.add(cells, counts, len(pairs), max(s for s, _ in pairs))
        return acc

    def merge_accumulators(self, accumulators: Any) -> _SegmentAccumulator:
        it = iter(accumulators)
        # Beam may merge nothing (e.g. an empty final pane): that is the empty table.
        first = next(it, None)
        if first is None:
            return self.create_accumulator()
        rest = list(it)
        if rest:
            first.cells, first.counts = sum_by_cell(
                np.concatenate([first.cells, *(a.cells for a in rest)]),
                np.concatenate([first.counts, *(a.counts for a in rest)]),
            )
            first.total += sum(a.total for a in rest)
            first.max_step = max(first.max_step, *(a.max_step for a in rest))
        return first

    def extract_output(self, accumulator: _SegmentAccumulator) -> list:
        sketch = _table_from_sparse(
            self._shape, accumulator.total, accumulator.cells, accumulator.counts
        )
        return [sketch, accumulator.max_step]


def _by_segment(element: Any, window=beam.DoFn.WindowParam) -> tuple[int, Any]:
    """``(end of the element's segment window in microseconds, element)``."""
    return int(window.end.micros), element


class _SegmentTables(beam.DoFn):
    """Check that a segment's table is its single ON_TIME pane; key it for the aggregator."""

    def __init__(self, label: str, windows: _SegmentWindows) -> None:
        self._label, self._windows = label, windows

    def process(
        self, accumulator: list, window=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam
    ):
        # Assumption A2: only the final ON_TIME pane may be sealed. Batch runners report the one
        # pane of a bounded input as UNKNOWN timing, first and last; anything else (an early or
        # late pane, a second firing) would release a range twice or before it is complete.
        timing = pane.timing
        if (
            not pane.is_last
            or not pane.is_first
            or timing
            not in (
                PaneInfoTiming.ON_TIME,
                PaneInfoTiming.UNKNOWN,
            )
        ):
            # The window's bounds follow the data's event times: not in the message.
            raise RuntimeError(
                f"{self._label}: a segment window produced a "
                f"{PaneInfoTiming.to_string(timing)} pane (first={pane.is_first}, "
                f"last={pane.is_last}); only one ON_TIME pane per segment may be sealed"
            )
        clock = self._windows.clock
        lo = clock.step_of(window.start) - 1
        hi = clock.step_of(window.end) - 1
        first, last, read = self._windows.window_steps(lo + 1)
        if (first, last) != (lo, hi):
            raise RuntimeError(f"{self._label}: a window reaching the aggregator is not a segment")
        sketch, max_step = accumulator
        # The table travels to the aggregator as its non-zero cells (a segment may hold one row);
        # a run of blocks that no query reads as its row count and last step only.
        cells = _pack_cells(*_sparse(sketch.table)) if read else b""
        yield self._label, (lo + 1, hi, int(max_step), int(sketch.total_weight), cells)


_SEGMENT_CODER = coders.TupleCoder(
    [coders.VarIntCoder(), coders.VarIntCoder(), coders.VarIntCoder(), coders.VarIntCoder()]
    + [coders.BytesCoder()]
)
_PROGRESS_CODER = coders.TupleCoder([coders.VarIntCoder()] * 5)
_AHEAD_CODER = coders.IterableCoder(coders.TupleCoder([coders.VarIntCoder()] * 2))


@dataclass(frozen=True)
class _Queries:
    """The public query workload: keys (frequencies) or candidates + gamma (heavy hitters)."""

    keys: tuple[Any, ...]
    gamma: float | None
    hh_slack: float | None


_SEGMENTS_STATE = userstate.BagStateSpec("segments", _SEGMENT_CODER)
_SKETCH_STATE = userstate.ReadModifyWriteStateSpec("sketch", coders.BytesCoder())
_PROGRESS_STATE = userstate.ReadModifyWriteStateSpec("progress", _PROGRESS_CODER)
_AHEAD_STATE = userstate.ReadModifyWriteStateSpec("ahead", _AHEAD_CODER)
# The run salt, for the timer (Beam hands side inputs to process only).
_SALT_STATE = userstate.ReadModifyWriteStateSpec("run_salt", coders.BytesCoder())
_QUERY_TIMER = userstate.TimerSpec("query", TimeDomain.WATERMARK)
_SEGMENTS_PARAM = beam.DoFn.StateParam(_SEGMENTS_STATE)
_SKETCH_PARAM = beam.DoFn.StateParam(_SKETCH_STATE)
_PROGRESS_PARAM = beam.DoFn.StateParam(_PROGRESS_STATE)
_AHEAD_PARAM = beam.DoFn.StateParam(_AHEAD_STATE)
_SALT_PARAM = beam.DoFn.StateParam(_SALT_STATE)
_QUERY_PARAM = beam.DoFn.TimerParam(_QUERY_TIMER)

_GAP_MESSAGE = (
    "a completed range of positions does not hold one element per position: position_fn "
    "must give each position 1..n exactly once (assumption A1 of DPSW-beam)"
)


def _extend_frontier(
    frontier: int, ahead: list[tuple[int, int]], first: int, last: int
) -> tuple[int, list[tuple[int, int]]] | None:
    """Add the full segment ``first..last`` to the gap-free prefix ``1..frontier``.

    ``ahead`` holds the disjoint, sorted ranges of full segments beyond the prefix, merged when
    adjacent. Returns the new ``(frontier, ahead)``, or ``None`` if the segment overlaps what is
    already covered (a position given twice).
    """
    if first <= frontier or any(a <= last and first <= b for a, b in ahead):
        return None
    ranges = sorted([*ahead, (first, last)])
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and merged[-1][1] + 1 == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    if merged[0][0] == frontier + 1:
        frontier = merged.pop(0)[1]
    return frontier, merged


class _SealAndQuery(beam.DoFn):
    """The single-key trusted aggregator: seals PCMSs once and answers the scheduled queries.

    State: the :class:`DPSWSketch` bytes; a bag of segment tables not yet added to it
    (``(first step, last step, max step, items, non-zero cells)``); progress ``(next query
    step, max step seen, step of the armed timer or 0, gap-free prefix, cells in the bag)``; and
    (count-based mode) the ranges of complete segments beyond the gap-free prefix. Raw counts
    live only in the runner's state backend (assumption A3).

    **Memory.** Segment tables are added to the sketch in batches, when the timer fires and
    (count-based mode) as soon as the bag holds as many cells as :attr:`_fold_cells` (about the
    size of the sketch's held tables), and the sketch is advanced (sealed, old blocks
    discarded) as soon as that is known to be safe: so in count-based mode the state is the
    sketch plus a bag of bounded size, whatever the stream length or ``release_every``.
    Sealing at ``s`` needs every segment ending at or before ``s`` and no unanswered query at
    or before ``s``:

    * count-based mode: a segment holding as many elements as positions is complete
      (assumption A1), so the gap-free prefix ``1..frontier`` of complete segments is known
      from the data that arrived, and every query inside it is answered and sealed at once.
      Segments that arrive ahead of a missing one wait as raw counts in the sketch (pending
      blocks): with out-of-order delivery the state grows with the disorder, at most one
      ``(segments, depth, width)`` int64 table per block between the prefix and the last
      step seen;
    * time-based mode: only the watermark says that a range is complete, so segment tables
      wait in the bag, as their non-zero cells, until the timer (armed at the last step seen)
      fires, and are then added and sealed in step order. In a streaming pipeline the bag spans
      the watermark's lag; a batch runner advances the watermark once, at the end, so the bag
      then holds every segment of the blocks the queries read (at most
      ``16 depth min(keys, width)`` bytes of cells each, see :class:`DPSlidingWindowFrequencies`).

    Blocks that no query reads reach this DoFn only as one table without cells per run of such
    blocks (:class:`_SegmentWindows`): it moves the last step seen and, in count-based mode,
    the gap-free prefix, and is never added to the sketch. Blocks that no query from the next
    query step on reads are dropped unsealed (:meth:`DPSWSketch.advance_to` with
    ``next_query``), so a period longer than the window holds and seals only the blocks the
    query windows cover.

    One event-time timer is armed at the end of the latest query step ``<= max step seen``
    (time-based mode, when no query is due: at the max step seen, for the sealing). When it fires the watermark has passed the end of every step up to it, so all
    queries up to it are answered in order in that one firing, each exactly as if it had its
    own timer (same segments added, same ``advance_to(t)``, each record timestamped at the
    end of its own step ``t``); in count-based mode a query whose range lacks a complete
    segment then fails (assumption A1). Sealing earlier than a query time changes no value:
    a sealed PCMS depends only on its range's counts and its keyed noise stream.
    """

    def __init__(self, transform: DPSlidingWindowFrequencies) -> None:
        self._factory = transform._factory
        self._noise_source = transform._noise_source
        # The run's noise source (noise_source.for_run(salt)), set by process and on_query
        # before they fold: the sketch draws its noise from it.
        self._run_source: NoiseSource | None = None
        self._mode = transform.mode
        self._every = transform.release_every
        self._clock = transform._clock
        self._windows = transform._windows
        self._queries = transform._queries
        self._label = transform.release_label
        self._with_metadata = transform.with_metadata
        self._guarantee = (transform.rho, transform.epsilon, transform.delta)
        self._facts = transform._release_facts
        self._hashes: tuple[np.ndarray, np.ndarray] | None = None
        kw = self._factory.kwargs
        self._depth, self._width = kw["depth"], kw["width"]
        windows = self._windows
        blocks = -(-transform.window // windows.block) + 1
        #: Cells buffered before they are added to the sketch: about the sketch's own size, so
        #: decoding and encoding the sketch costs O(1) per buffered cell.
        self._fold_cells = blocks * (len(windows.cuts) - 1) * self._depth * self._width

    def setup(self) -> None:
        # Query keys are public and fixed: hash them once per worker, not per query.
        self._hashes = hash_keys(list(self._queries.keys), self._factory.kwargs["seed"])

    def _arm(self, timer: Any, next_q: int, seen: int, armed: int) -> int:
        """Arm (or move later) the timer at the step the queries or the sealing wait for."""
        target = seen // self._every * self._every
        if target < next_q:
            if self._mode == "count":
                return 0
            # Time-based mode: no query is due, the timer seals what the watermark completes.
            target = seen
        if target != armed:
            timer.set(self._clock.end_of(target))
        return target

    def _settled(self, t: int) -> int:
        """The last step of the last segment ending at or before ``t``."""
        lo, hi = self._windows.segment_steps(t)
        return t if hi == t else lo

    def process(
        self,
        element: Any,
        segments=_SEGMENTS_PARAM,
        sketch_state=_SKETCH_PARAM,
        progress=_PROGRESS_PARAM,
        ahead_state=_AHEAD_PARAM,
        salt=_SALT_PARAM,
        timer=_QUERY_PARAM,
    ):
        _, (run_salt, segment) = element
        # The timer folds too; it reads the run's salt from state, written here first.
        if salt.read() != run_salt:
            salt.write(run_salt)
        self._run_source = self._noise_source.for_run(run_salt)
        first, last, max_step, items, cells = segment
        if self._mode == "count" and items > last - first + 1:
            # Counts and positions come from the data: the message names the rule only.
            raise ValueError(
                f"{self._label}: a segment holds more elements than positions: position_fn "
                "must give each position 1..n exactly once (assumption A1 of DPSW-beam)"
            )
        segments.add((first, last, max_step, items, cells))
        next_q, seen, armed, frontier, buffered = progress.read() or (self._every, 0, 0, 0, 0)
        seen = max(seen, max_step)
        buffered += len(cells) // 16 + 1
        released: list[Any] = []
        # Time-based mode seals nothing without the watermark (the timer): a fold here would
        # only turn the bag's sparse tables into dense pending ones, so they wait in the bag.
        if buffered >= self._fold_cells and self._mode == "count":
            next_q, frontier = self._fold(
                segments, sketch_state, ahead_state, next_q, seen, frontier, None, released
            )
            buffered = 0
        armed = self._arm(timer, next_q, seen, armed)
        progress.write((next_q, seen, armed, frontier, buffered))
        yield from released

    @userstate.on_timer(_QUERY_TIMER)
    def on_query(
        self,
        fired=beam.DoFn.TimestampParam,
        segments=_SEGMENTS_PARAM,
        sketch_state=_SKETCH_PARAM,
        progress=_PROGRESS_PARAM,
        ahead_state=_AHEAD_PARAM,
        salt=_SALT_PARAM,
        timer=_QUERY_PARAM,
    ):
        self._run_source = self._noise_source.for_run(salt.read())
        next_q, seen, armed, frontier, _ = progress.read()
        # The watermark has passed the end of the fired step (a runner that fires a timer it
        # has since moved later gives an earlier step: only what is up to it is complete).
        limit = min((int(fired.micros) - self._clock.origin) // self._clock.unit, seen)
        released: list[Any] = []
        next_q, frontier = self._fold(
            segments, sketch_state, ahead_state, next_q, seen, frontier, limit, released
        )
        if self._mode == "time" and limit >= seen:
            # Everything seen is sealed: the timer waits for a later step.
            armed = seen
        else:
            armed = self._arm(timer, next_q, seen, 0)
        progress.write((next_q, seen, armed, frontier, 0))
        yield from released

    def _fold(
        self,
        segments: Any,
        sketch_state: Any,
        ahead_state: Any,
        next_q: int,
        seen: int,
        frontier: int,
        limit: int | None,
        released: list[Any],
    ) -> tuple[int, int]:
        """Add the bagged tables to the sketch, answer the due queries, seal what is complete.

        ``limit`` is the step the watermark has passed (timer) or ``None`` (an element: only
        the count-based gap-free prefix is known complete). Returns ``(next query step,
        gap-free prefix)``; records go to ``released``.
        """
        data = sketch_state.read()
        source = self._run_source
        assert source is not None
        if data is None:
            sketch = self._factory(source)
        else:
            sketch = DPSWSketch.from_bytes(data, source)
        count = self._mode == "count"
        ahead = list(ahead_state.read() or ()) if count else []
        # In step order, sealing as the tables go in: the sketch then holds raw counts for a
        # few blocks at a time, not for every block the bag spans.
        for first, last, _, items, cells in sorted(segments.read(), key=lambda seg: seg[0]):
            if not count and limit is not None:
                # Every segment ending before this one starts is in (sorted, and the
                # watermark has passed them).
                bound = min(limit, first - 1)
                next_q = self._catch_up(sketch, next_q, seen, frontier, bound, released)
            if cells or self._windows.window_steps(first)[2]:
                table = _unpack_cells(cells, self._depth, self._width)
                sketch.add_range_counts(first, last, table)
            # else: a run of blocks that no query reads; only its steps and count matter.
            if count and items == last - first + 1:
                extended = _extend_frontier(frontier, ahead, first, last)
                if extended is None:
                    raise ValueError(f"{self._label}: {_GAP_MESSAGE}")
                if extended[0] != frontier:
                    frontier, ahead = extended
                    next_q = self._catch_up(sketch, next_q, seen, frontier, None, released)
                else:
                    ahead = extended[1]
        segments.clear()
        next_q = self._catch_up(sketch, next_q, seen, frontier, limit, released, final=True)
        sketch_state.write(sketch.to_bytes())
        if count:
            ahead_state.write(ahead)
        return next_q, frontier

    def _catch_up(
        self,
        sketch: DPSWSketch,
        next_q: int,
        seen: int,
        frontier: int,
        limit: int | None,
        released: list[Any],
        *,
        final: bool = False,
    ) -> int:
        """Answer the queries that are due and seal what is complete; the next query step.

        Count-based mode: everything up to the gap-free prefix ``frontier`` is complete; with
        ``final`` and a ``limit`` (the watermark has passed it) a query up to ``limit`` whose
        range the prefix does not cover fails (assumption A1). Time-based mode: everything up
        to ``limit`` (``None``: nothing is known complete).
        """
        count = self._mode == "count"
        if count:
            bound, due = frontier, seen if limit is None else min(limit, seen)
        elif limit is None:
            return next_q
        else:
            bound, due = limit, min(limit, seen)
        t = next_q
        while t <= due:
            if count and self._settled(t) > frontier:
                if final and limit is not None:
                    raise ValueError(f"{self._label}: {_GAP_MESSAGE}")
                break
            sketch.advance_to(t)
            when = self._clock.end_of(t)
            released += [TimestampedValue(r, when) for r in self._answer(sketch, t)]
            t += self._every
        # Seal everything known complete that no unanswered query still needs; blocks that no
        # query from t on reads are dropped unsealed (with a period longer than the window,
        # most blocks): their noise is never drawn, which changes no released value.
        safe = min(bound, t - 1)
        sketch.advance_to(max(safe, sketch.t), next_query=t)
        return t

    def _answer(self, sketch: DPSWSketch, t: int):
        h1, h2 = self._hashes  # type: ignore[misc]
        est = sketch.estimate_hashes(h1, h2, t).tolist()
        keys = self._queries.keys
        if self._queries.gamma is None:
            records = tuple(zip(keys, est, strict=True))
        else:
            # The threshold of DPSWSketch.heavy_hitters (Wang, Wang and Chen, Algorithm 3 lines
            # 6-9): nominal w even in warm-up.
            slack = sketch.hh_slack if self._queries.hh_slack is None else self._queries.hh_slack
            threshold = (self._queries.gamma - slack) * sketch.window
            records = tuple((k, e) for k, e in zip(keys, est, strict=True) if e >= threshold)
        when = t if self._mode == "count" else _seconds(int(self._clock.end_of(t).micros))
        if not self._with_metadata:
            if self._queries.gamma is None:
                for key, value in records:
                    yield TimedEstimate(when, key, value)
            else:
                yield TimedHeavyHitters(when, [KeyEstimate(k, e) for k, e in records])
            return
        sel = sketch.selection(t)
        if self._mode == "count":
            lo, hi = max(t - sketch.window + 1, 1), t
        else:
            lo = _seconds(int(self._clock.end_of(t - sketch.window).micros))
            hi = when
        rho, eps, delta = self._guarantee
        mechanism, noise_scale, relation = self._facts
        yield SlidingWindowRelease(
            transform=self._label,
            mode=self._mode,
            step=t,
            time=when,
            window_start=lo,
            window_end=hi,
            covered=(sel[0].start, sel[-1].end) if sel else (0, 0),
            kind="frequencies" if self._queries.gamma is None else "heavy_hitters",
            records=records,
            mechanism=mechanism,
            rho=rho,
            epsilon=eps,
            delta=delta,
            noise_scale=noise_scale,
            neighbouring_relation=relation,
        )


# --------------------------------------------------------------------------------------------
# The transform
# --------------------------------------------------------------------------------------------


class _SketchFactory:
    """Builds the (validated) empty DPSWSketch on a worker from small picklable parameters."""

    def __init__(self, preset: str | None, args: tuple, kwargs: dict[str, Any]) -> None:
        self.preset, self.args, self.kwargs = preset, args, kwargs

    def __call__(self, noise_source: NoiseSource) -> DPSWSketch:
        build = DPSWSketch if self.preset is None else getattr(DPSWSketch, self.preset)
        return build(*self.args, noise_source=noise_source, **self.kwargs)


class DPSlidingWindowFrequencies(DPTransform):
    """DP frequency or heavy-hitter queries over the last ``window`` steps, on a schedule.

    Runs DPSW-Sketch (Wang, Wang and Chen, Algorithms 1-3, with the corrections DPSW-E1, E4, E5,
    E7 and E9 of ``docs/algorithms.md``) across Beam workers (DPSW-beam): exact per-segment Count-Min tables are combined across shards, sealed with
    Gaussian noise once per PCMS by a single trusted aggregator, and queries are answered every
    ``release_every`` steps (``t = release_every, 2 release_every, ...`` up to the last step
    holding an element) from sealed sketches only.

    Output records (``with_metadata=False``): ``(time, key, estimate)`` for every query key at
    every query time, or ``(time, [(key, estimate), ...])`` for heavy-hitter queries (candidates
    whose estimate is ``>= (gamma - hh_slack) * window``, in candidate order). ``time`` is the
    query position ``t`` (count-based) or the event time ``origin + t * time_unit`` in seconds
    that ends the window ``[time - window * time_unit, time)`` (time-based). With
    ``with_metadata=True`` one :class:`SlidingWindowRelease` per query time. Each record is
    timestamped at the end of its query step, ``origin + t * time_unit``. An estimate is
    :meth:`DPSWSketch.estimate` with its default estimator: the paper's sum of Count-Min
    minima with the public mean of each noise minimum added back, so it is unbiased for a key
    that shares no cell with another (an absent key averages 0;
    ``docs/algorithms.md#dpsw-debiased``).

    Input elements are single rows (see ``mode``) or **batches** of rows, in any mix:

    * ``(steps_or_times, keys)``: a 1-d numpy array and as many keys (pyarrow array, numpy
      array or list). Count-based mode: integer 1-based positions; time-based mode: event times
      in seconds (numbers).
    * ``(first_position, keys, seconds)``, the element of
      :class:`~beam_dpsketch.io.ReadOrderedKeys`: ``first_position`` is the
      0-based position of the first row, so count-based positions are ``first_position + 1,
      ...``; time-based mode uses ``seconds`` (a float64 array; ``None`` is refused there and
      ignored in count-based mode).

    A batch is recognised by its shape (an array or a key batch is never a key) and bypasses
    ``key_fn``, ``position_fn`` and ``time_fn``; its rows need not be sorted or contiguous. The
    result is the same as for the same rows sent one by one.

    Parameters
    ----------
    window
        Window length ``W``: positions (count-based) or time units (time-based).
    width, depth
        Count-Min shape of every PCMS.
    budget
        ``PrivacyBudget.zcdp(rho)`` or ``PrivacyBudget.approx(eps, delta)`` (converted to
        ``rho`` by Wang, Wang and Chen, Eq. 1, the inverse of their Theorem 3.2) for the **whole
        stream and all queries**. Without it, what ``accountant`` has left when the transform
        is applied. Pure DP is refused (the mechanism is Gaussian).
    release_every
        Query period ``N`` in steps (a public schedule; more queries cost no budget).
    seed
        Public hash seed of every PCMS.
    query_keys
        Public keys whose window frequency is estimated at every query time; or
    candidates, gamma
        A **public** candidate domain (fixed before seeing the data) and the heavy-hitter
        fraction ``gamma``; ``hh_slack`` overrides the threshold slack
        (``docs/algorithms.md#dpsw-e14``; default ``e / width``).
    mode
        ``"count"`` (default): elements carry a public, gap-free position ``1..n`` (assumption
        A1 of ``docs/algorithms.md#dpsw-beam``), by default ``(position, key)`` pairs (``position_fn``/``key_fn`` extract them).
        ``"time"``: steps are event-time units ``floor((ts - origin) / time_unit) + 1`` of the
        element timestamp (or of ``time_fn(element)`` seconds); ``key_fn`` defaults to identity.
        Each extractor is a callable or the field name of ``dict`` / ``beam.Row`` elements.
    time_unit
        Seconds per step (time-based mode only; default 1).
    origin
        Event time in seconds at which step 1 starts: **required** in time-based mode (refused
        in count-based mode). It anchors the blocks, the segments and the query times
        ``origin + release_every * time_unit, ...``, so it must be public and fixed without
        looking at the data (e.g. the start of the reporting period); an event before it is
        refused. There is no default: an origin far before the data (such as the epoch) would
        release every empty window in between.
    preset
        ``None`` (explicit ``block``/``beta``, ``alpha``/``checkpoints``, ``split``...),
        ``"theory"`` or ``"paper_experiments"`` (:meth:`DPSWSketch.theory`,
        :meth:`DPSWSketch.paper_experiments`).
    sketch_options
        Further :class:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch` arguments: ``block``,
        ``beta``, ``alpha``, ``checkpoints``, ``split``, ``q``, ``noise``, ``middle``...
    accountant
        Charged once with the whole budget when the transform is applied, before anything runs
        (``BudgetExceededError`` if it does not fit); default: a private accountant of exactly
        ``budget``.
    noise_source
        :class:`~beam_dpsketch.noise.NoiseSource` (default: a fresh secret one); the zero-noise
        test source is refused.
    with_metadata
        Emit :class:`SlidingWindowRelease` records instead of plain tuples.
    label
        Beam label and release label: names the transform in the accountant and in every noise
        release id ``(label, "dpsw", block, kind, level)``. Default: the class name as Beam
        label, the applied full label as release label.

    Notes
    -----
    **Privacy guarantee.** ``rho``-zCDP, hence ``(eps, delta)``-DP, over the whole unbounded
    stream, whatever the number of queries, for **replace-one** neighbours only (the relation
    is the attribute ``neighbouring_relation``, also in :meth:`explain`): queries are
    post-processing of sealed PCMSs, each built over a fixed range and noised once (Wang, Wang
    and Chen, Lemma 4.1 and Theorem 4.4(1)).

    * Count-based mode: two streams of the same length ``n`` whose elements differ in the key of
      one element, at the same position (the paper's model: positions are the clock). Adding or
      removing an element is **not** covered: it shifts every later position, so every later
      range changes.
    * Time-based mode: two streams with the same event times whose events differ in the key of
      one event. Event times, hence the number of events at every step, are public. Adding,
      removing or moving an event is **not** covered: the sketches alone would cover adding or
      removing one event (L2 sensitivity ``sqrt(depth)``, ``docs/algorithms.md#dpsw-a6``), but
      the query schedule
      ends at the last step holding an event, so one added late event adds releases.

    The number of outputs follows the public schedule: one answer (every query key, or one
    possibly empty heavy-hitter list) at every ``t = release_every, 2 release_every, ...`` up to
    the last step holding an element, whether or not data fell in the queried range. Query times, the query
    keys and the candidates are public.
    Workers, combiners and the runner's state backend see raw counts (central DP, assumption A3).
    An instance is applied once (its label keys the noise).

    **Memory.** Segment tables keep only the cells of the query keys or candidates (nothing
    else is ever released; the noise of the other cells is drawn and discarded), and the
    aggregator's state is bounded by the sketches of the window (see :class:`_SealAndQuery`).
    Not bounded by the window on the in-process batch runners (FnApiRunner, DirectRunner in
    batch mode): they materialise the whole input of the single-key aggregator, i.e. one table
    per segment of the blocks that the queries read (a query reads at most ``ceil(W / B) + 1``
    blocks of at most ``2 |I| - 1`` segments each: 11 blocks of 4 segments with the
    ``paper_experiments`` preset), each about ``40 + len(label) + 16 c`` bytes encoded,
    ``c <= depth min(keys, width)`` its non-zero query cells (``keys`` query keys or
    candidates): at most about 150 bytes per segment with two query keys and ``depth = 3``,
    at most about ``16 depth width`` bytes (48 KiB at ``width = 1024, depth = 3``) with many
    more candidates than the width; plus one small table (no cells) per run of blocks between
    query windows. So with ``release_every >= W + B`` the aggregator's input grows with the
    number of queries, not the rows; with ``release_every < W + B`` every block is read and it
    grows as ``n / B`` segments. In time-based mode on those runners the aggregator's bag holds
    the same tables until the end of the input. Time: every sealed block draws
    ``depth * width`` Gaussian samples per PCMS (up to 5 PCMSs per block with the preset),
    whatever its rows, so a period that reads every block of a small window costs that noise
    per ``B`` rows.
    """

    needs_state_and_timers = True  # stateful DoFn: sealed segments and query timers

    def __init__(
        self,
        window: int,
        width: int,
        depth: int,
        budget: PrivacyBudget | None = None,
        *,
        release_every: int,
        seed: int = 0,
        query_keys: Sequence[Any] | None = None,
        candidates: Sequence[Any] | None = None,
        gamma: float | None = None,
        hh_slack: float | None = None,
        mode: str = "count",
        key_fn: Callable[[Any], Any] | None = None,
        position_fn: Callable[[Any], Any] | None = None,
        time_fn: Callable[[Any], Any] | None = None,
        time_unit: float = 1,
        origin: float | None = None,
        preset: str | None = None,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        **sketch_options: Any,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
        self.mode = mode
        self.release_every = check_int(release_every, "release_every")
        self.with_metadata = with_metadata

        if mode == "count":
            if time_fn is not None:
                raise ValueError("time_fn applies to mode='time' only")
            if time_unit != 1 or origin is not None:
                raise ValueError("time_unit and origin apply to mode='time' only")
            self._clock = _StepClock(_MICROS, 0)
        else:
            if position_fn is not None:
                raise ValueError("position_fn applies to mode='count' only")
            if origin is None:
                raise ValueError(
                    "origin is required with mode='time': the public event time (seconds) at "
                    "which step 1 starts, fixed without looking at the data"
                )
            self._clock = _StepClock(
                _micros(time_unit, "time_unit", positive=True),
                _micros(origin, "origin", positive=False),
            )
        # The guarantee's relation, stated on every surface (charge, explain(), CLI).
        self.neighbouring_relation = NEIGHBOURING_RELATIONS[mode]
        key_fn = as_extractor(key_fn, "key_fn")
        position_fn = as_extractor(position_fn, "position_fn")
        self._key_fn = key_fn or ((lambda e: e[1]) if mode == "count" else (lambda e: e))
        self._position_fn = (position_fn or (lambda e: e[0])) if mode == "count" else None
        self._time_fn = as_extractor(time_fn, "time_fn")

        # Build (and so validate) the core sketch now, at construction. Its label, which keys
        # the noise, is the release label, set when the transform is applied. Without a budget
        # (the accountant's remainder, known when applied) a placeholder zCDP budget validates
        # everything but the budget: the layout (block, checkpoints) does not depend on it.
        self._factory = _SketchFactory(
            preset,
            (window, budget if budget is not None else PrivacyBudget.zcdp(1.0)),
            {
                "width": width,
                "depth": depth,
                "seed": seed,
                "release_prefix": label or self.default_label(),
                **sketch_options,
            },
        )
        probe = self._factory(self._noise_source)
        self.window = probe.window
        self.rho: float | None = None
        self.epsilon: float | None = None
        self.delta: float | None = None
        if budget is not None:
            self._set_budget(budget, probe)
        self._queries = self._check_queries(probe, query_keys, candidates, gamma, hh_slack)
        # Every release reads only the cells of the public query keys or candidates (the
        # estimates of Wang, Wang and Chen, Algorithm 3; the noise of the other cells is drawn
        # and discarded): segment tables keep just those cells, so what Beam moves and buffers
        # per segment is bounded by the queries, not by the segment's rows or the width.
        cells = _released_cells(self._queries.keys, self._shape())
        self._cells = None if len(cells) == probe.depth * probe.width else cells
        self._windows = _SegmentWindows(
            probe.block, probe.layout.cuts, self._clock, self.release_every, probe.window
        )
        # (mechanism, noise scale, relation) of the metadata records; set when applied.
        self._release_facts: tuple[str, float, str] | None = None

        self._applied = False
        self.release_label = None

    def _set_budget(self, budget: PrivacyBudget, probe: DPSWSketch) -> None:
        self.rho = probe.rho
        self.epsilon = budget.epsilon if budget.kind == "approx" else None
        self.delta = budget.delta if budget.kind == "approx" else None

    @staticmethod
    def _check_queries(
        probe: DPSWSketch,
        query_keys: Sequence[Any] | None,
        candidates: Sequence[Any] | None,
        gamma: float | None,
        hh_slack: float | None,
    ) -> _Queries:
        if (query_keys is None) == (candidates is None):
            raise ValueError("pass either query_keys or candidates (with gamma)")
        if query_keys is not None:
            if gamma is not None or hh_slack is not None:
                raise ValueError("gamma and hh_slack apply to candidates (heavy hitters) only")
            keys = tuple(canonical_key(k) for k in query_keys)
            if not keys:
                raise ValueError("query_keys must not be empty")
            return _Queries(keys, None, None)
        keys = tuple(canonical_key(k) for k in candidates)  # type: ignore[union-attr]
        if not keys:
            raise ValueError("candidates must not be empty")
        if gamma is None:
            raise ValueError("gamma: heavy-hitter queries need the fraction gamma")
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
            raise TypeError(f"gamma must be a float, got {type(gamma).__name__}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if hh_slack is not None:
            if isinstance(hh_slack, bool) or not isinstance(hh_slack, numbers.Real):
                raise TypeError(f"hh_slack must be a float, got {type(hh_slack).__name__}")
            if not math.isfinite(hh_slack):
                raise ValueError(f"hh_slack must be finite, got {hh_slack}")
        zeta = math.e / probe.width
        if gamma < 4 * zeta:
            warnings.warn(
                f"gamma = {gamma} < 4 zeta = {4 * zeta:.4g}: the heavy-hitter guarantee of "
                "Lemma 4.3 needs gamma >= 4 zeta (DPSW-E19 in docs/algorithms.md)",
                stacklevel=3,
            )
        return _Queries(keys, float(gamma), None if hh_slack is None else float(hh_slack))

    def output_type(self) -> type:
        if self.with_metadata:
            return SlidingWindowRelease
        return TimedEstimate if self._queries.gamma is None else TimedHeavyHitters

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def display_parameters(self) -> dict[str, Any]:
        width, depth, seed = self._shape()
        return {
            "mechanism": "DPSW-Sketch (Gaussian PCMS)",
            "mode": self.mode,
            "window": self.window,
            "release_every": self.release_every,
            "width": width,
            "depth": depth,
            "seed": seed,
            "rho": self.rho,
            "queries": "frequencies" if self._queries.gamma is None else "heavy hitters",
            "query_keys": len(self._queries.keys),
            "gamma": self._queries.gamma,
            "neighbouring_relation": self.neighbouring_relation,
        }

    def windowing_requirement(self) -> WindowingRequirement:
        return _SLIDING_WINDOWING

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._applied:
            # The transform holds one set of segment windows and one aggregator: a second
            # input would need its own release label, noise and charge, i.e. its own transform.
            raise ValueError(
                f"{name}: a DPSlidingWindowFrequencies instance can be applied once "
                "(its label keys the noise and its one charge covers one input); build one "
                "transform, with its own label, per input"
            )
        self.check_label_free(name)
        # The release label keys every noise stream of the sealed sketches; the budget is the
        # one given, or what the accountant has left now.
        budget = self.budget_for(name)
        self._factory = _SketchFactory(
            self._factory.preset,
            (self._factory.args[0], budget),
            {**self._factory.kwargs, "release_prefix": name},
        )
        probe = self._factory(self._noise_source)
        self._set_budget(budget, probe)
        report = probe.privacy_report()
        mechanism = "DPSW-Sketch (Gaussian PCMS; Wang, Wang and Chen, Lemma 4.1)"
        charge = self.accountant.charge(
            name,
            mechanism,
            PrivacyBudget.zcdp(self.rho, self.delta),
            1,
            "element",
            noise_scale=probe.level_sigmas()[0],
            neighbouring_relation=self.neighbouring_relation,
            queries=f"every {self.release_every} steps, unlimited (post-processing)",
            window=self.window,
            block=probe.block,
            checkpoints=list(probe.checkpoints),
            level_rhos=", ".join(f"{r:.6g}" for r in report["levels"]),
            level_sigmas=", ".join(f"{s:.6g}" for s in report["sigmas"]),
        )
        self._release_facts = (mechanism, probe.level_sigmas()[0], self.neighbouring_relation)
        self._applied = True
        return charge

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        stamp = _Stamp(
            self.mode,
            self._windows,
            self._shape(),
            self._key_fn,
            self._position_fn,
            self._time_fn,
            self._cells,
        )
        stamped = pcoll | "Steps" >> beam.ParDo(stamp).with_outputs(_PARTS, main="rows")

        def segment_windows() -> beam.WindowInto:
            return beam.WindowInto(
                self._windows,
                trigger=tr.AfterWatermark(),
                accumulation_mode=tr.AccumulationMode.DISCARDING,
                allowed_lateness=0,
            )

        rows = (
            stamped.rows
            | "SegmentWindows" >> segment_windows()
            # Not Beam's batching transform: its batch-size metric sums to the exact number of rows.
            | "Batch" >> FixedBatches(_BATCH)
        )
        parts = stamped[_PARTS] | "PartWindows" >> segment_windows()
        tables = (
            (rows, parts)
            | "RowsAndParts" >> beam.Flatten()
            # Keyed by the segment's (public) end: a runner's grouping then handles one window
            # per key, whereas one key holding every segment window costs time quadratic in
            # their number on some runners (the FnApiRunner's trigger driver scans them all).
            | "BySegment" >> beam.Map(_by_segment)
            | "ExactSegmentTables"
            >> beam.CombinePerKey(_SegmentCombineFn(*self._shape(), self._cells))
            | "Tables" >> beam.Values()
            | "OnTimeOnly"
            >> beam.ParDo(_SegmentTables(self.release_label, self._windows)).with_output_types(
                tuple[str, Any]
            )
        )
        aggregated = tables | "ToAggregator" >> beam.WindowInto(GlobalWindows())
        release = beam.ParDo(_SealAndQuery(self)).with_output_types(Any)
        return with_run_salt(aggregated, self.run_salt) | "SealAndQuery" >> release

    def _shape(self) -> tuple[int, int, int]:
        kw = self._factory.kwargs
        return kw["width"], kw["depth"], kw["seed"]
