"""Stamping: each input element (a row or a batch) gets its step and goes to its segment
window, a batch as one exact partial table per segment it touches."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from beam_dpsketch.hashing import canonical_key, hash_keys, row_buckets
from beam_dpsketch.transforms.batching import is_key_batch
from beam_dpsketch.transforms.combiners import sum_by_cell
from beam_dpsketch.transforms.sliding.steps import MICROS, SegmentWindows, as_seconds
from beam_dpsketch.transforms.sliding.tables import SegmentPart, cell_mask

__all__ = ["PARTS", "Stamp"]

#: Tag of the per-segment partial tables that :class:`Stamp` builds from batch elements.
PARTS = "segment_parts"


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


class Stamp(beam.DoFn):
    """Give each element its step and route it to its segment window.

    A single row becomes ``(step, key)`` timestamped at its event time (count-based: the step's
    start). A batch element (see :func:`_as_batch`) is split with numpy by segment: its keys are
    hashed once, and one exact partial table per segment it touches goes to the ``PARTS``
    output, timestamped at the earliest event time of its rows in that segment, so Beam moves a
    handful of elements per segment instead of one per row. With ``cells`` (sorted flat cell
    indices), a partial table keeps only those cells (its row count stays exact).
    """

    def __init__(
        self,
        mode: str,
        windows: SegmentWindows,
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
            timestamp = Timestamp(micros=math.floor(float(value) * MICROS))
        step = self._clock.step_of(timestamp)
        if step < 1:
            raise ValueError(
                f"an event time is before the origin {as_seconds(self._clock.origin)} s of the "
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
            part = SegmentPart.from_cells(
                self._shape, cells, counts, int(totals[g]), int(max_steps[g])
            )
            when = Timestamp(micros=int(first_micros[g]))
            yield beam.pvalue.TaggedOutput(PARTS, TimestampedValue(part, when))

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
                self._mask = cell_mask(self._cells, self._shape)
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
        micros = np.floor(values * MICROS).astype(np.int64)
        steps = (micros - clock.origin) // clock.unit + 1
        if n and steps.min() < 1:
            raise ValueError(
                f"a batch event time is before the origin {as_seconds(clock.origin)} s of the "
                "time steps"
            )
        return steps, micros
