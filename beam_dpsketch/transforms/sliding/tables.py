"""Exact segment tables: the sparse Count-Min counts of each segment, their combine across
shards, and their encoding for the aggregator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.transforms.combiners import sum_by_cell
from beam_dpsketch.transforms.sliding.steps import SegmentWindows

__all__ = [
    "SegmentCombineFn",
    "SegmentPart",
    "SegmentTables",
    "by_segment",
    "cell_mask",
    "pack_cells",
    "released_cells",
    "unpack_cells",
]


def released_cells(keys: Sequence[Any], shape: tuple[int, int, int]) -> np.ndarray:
    """Sorted distinct flat cells ``row * width + bucket`` of ``keys`` in a ``(width, depth,
    seed)`` Count-Min table: the only cells that an estimate of one of ``keys`` reads."""
    width, depth, seed = shape
    h1, h2 = hash_keys(list(keys), seed)
    buckets = row_buckets(h1, h2, depth, width)
    buckets += (np.arange(depth, dtype=np.int64) * width)[:, None]
    return np.unique(buckets)


def cell_mask(cells: np.ndarray | None, shape: tuple[int, int, int]) -> np.ndarray | None:
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


def pack_cells(cells: np.ndarray, counts: np.ndarray) -> bytes:
    """One bytes value holding the int64 ``cells`` then the int64 ``counts`` (same length)."""
    return np.concatenate([cells, counts]).astype("<i8", copy=False).tobytes()


def unpack_cells(data: bytes, depth: int, width: int) -> np.ndarray:
    """The dense int64 ``(depth, width)`` table of :func:`pack_cells` bytes."""
    both = np.frombuffer(data, dtype="<i8")
    half = len(both) // 2
    table = np.zeros(depth * width, dtype=np.int64)
    table[both[:half]] = both[half:]
    return table.reshape(depth, width)


def _rebuild_part(shape: tuple[int, int, int], total: int, max_step: int, cells, counts):
    return SegmentPart.from_cells(shape, cells, counts, total, max_step)


class SegmentPart:
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
    ) -> SegmentPart:
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


class SegmentCombineFn(beam.CombineFn):
    """Exact Count-Min table and last step of one segment, from batches of ``(step, key)`` rows
    or from :class:`SegmentPart` partial tables.

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
            self._mask = cell_mask(self._cells, self._shape)
        keep = self._mask[cells]
        return cells[keep], counts[keep]

    def create_accumulator(self) -> _SegmentAccumulator:
        return _SegmentAccumulator()

    def add_input(self, mutable_accumulator: _SegmentAccumulator, element: Any):
        acc = mutable_accumulator
        if isinstance(element, SegmentPart):
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


def by_segment(element: Any, window=beam.DoFn.WindowParam) -> tuple[int, Any]:
    """``(end of the element's segment window in microseconds, element)``."""
    return int(window.end.micros), element


class SegmentTables(beam.DoFn):
    """Check that a segment's table is its single ON_TIME pane; key it for the aggregator."""

    def __init__(self, label: str, windows: SegmentWindows) -> None:
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
        cells = pack_cells(*_sparse(sketch.table)) if read else b""
        yield self._label, (lo + 1, hi, int(max_step), int(sketch.total_weight), cells)
