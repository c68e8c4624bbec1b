"""Interval summaries: the exact, additive tables a runner builds from pieces of a release interval.

A summary is a plain data structure that is built and merged wherever an interval's arrivals
are, apart from the sketch that finally applies it, so it lives apart from the sketches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import numpy as np

__all__ = ["IntervalSummary"]

# --------------------------------------------------------------------------------------------
# Interval summaries
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class IntervalSummary:
    """Exact, additive summary of the arrivals of one interval of time steps ``[start, end)``.

    Built by :meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.summarize_interval` from any piece of the interval's
    arrivals, summed with :meth:`merge`, and applied with :meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.apply_interval`
    once it covers every step of the interval: the sketch is then exactly as if it had processed
    the interval's arrivals one at a time, in position order (noise included, bit for bit). Its
    size is ``O(depth * width)`` whatever the number of arrivals, which lets a runner
    pre-aggregate an interval's arrivals wherever they are before they reach the sketch.

    The tables hold **exact** counts: like :meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.to_bytes`, a summary must
    stay inside the trusted boundary (it is never a release).

    Attributes
    ----------
    start, end
        The interval's public bounds (0-indexed steps, ``end`` excluded).
    ranges
        The public position ranges ``(lo, hi)`` the summary covers: sorted, disjoint and
        coalesced (adjacent ranges are joined), so a complete summary has the single range
        ``(start, end)``.
    pushed
        Flat ``depth * width`` int64 table. Punctual: the exact table of the arrivals. Lazy: the
        arrivals whose cell's column is pushed at or after their step and by ``end``.
    pending
        Lazy: flat table of the arrivals still pending at ``end``; Punctual: ``None``.
    """

    start: int
    end: int
    ranges: tuple[tuple[int, int], ...]
    pushed: np.ndarray
    pending: np.ndarray | None

    @property
    def rows(self) -> int:
        """Number of time steps (arrivals) covered."""
        return sum(hi - lo for lo, hi in self.ranges)

    @property
    def complete(self) -> bool:
        """Whether every step of ``[start, end)`` is covered (the summary can be applied)."""
        return self.ranges == ((self.start, self.end),)

    def merge(self, other: IntervalSummary) -> Self:
        """Add ``other`` (a summary of other arrivals of the same interval) into this one.

        Raises
        ------
        ValueError
            If ``other`` belongs to another interval or another sketch shape, or if the two
            cover a common step (``position``: each step has exactly one arrival).
        """
        if not isinstance(other, IntervalSummary):
            raise TypeError(f"other must be an IntervalSummary, got {type(other).__name__}")
        if (other.start, other.end) != (self.start, self.end):
            raise ValueError("other: summaries of different intervals cannot be merged")
        if other.pushed.shape != self.pushed.shape or (other.pending is None) != (
            self.pending is None
        ):
            raise ValueError("other: summaries of different sketches cannot be merged")
        self.ranges = self.merge_ranges(self.ranges, other.ranges)
        self.pushed = self.pushed + other.pushed
        if self.pending is not None:
            self.pending = self.pending + other.pending
        return self

    @staticmethod
    def merge_ranges(
        a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]
    ) -> tuple[tuple[int, int], ...]:
        """The union of two sorted, disjoint, coalesced range tuples (as :attr:`ranges`).

        Raises
        ------
        ValueError
            If a step is in both (``position``: each step has exactly one arrival).
        """
        out: list[tuple[int, int]] = []
        for lo, hi in sorted(a + b):
            if out and lo < out[-1][1]:
                # Names the parameter only: a position is not echoed into an error message.
                raise ValueError(
                    "position: two summaries cover the same time step: each step has exactly "
                    "one arrival"
                )
            if out and lo == out[-1][1]:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
        return tuple(out)

    def __reduce__(self):
        # Pickled (e.g. by a Beam coder) with only the non-zero cells when that is smaller: the
        # summary of a short interval has few of them.
        return (
            _restore_summary,
            (self.start, self.end, self.ranges, _pack(self.pushed), _pack(self.pending)),
        )


def _pack(table: np.ndarray | None) -> Any:
    if table is None:
        return None
    nz = np.flatnonzero(table)
    if 2 * nz.size < table.size:
        return (table.size, nz, table[nz])
    return table


def _unpack(packed: Any) -> np.ndarray | None:
    if packed is None or isinstance(packed, np.ndarray):
        return packed
    size, nz, values = packed
    table = np.zeros(size, dtype=np.int64)
    table[nz] = values
    return table


def _restore_summary(
    start: int, end: int, ranges: tuple[tuple[int, int], ...], pushed: Any, pending: Any
) -> IntervalSummary:
    return IntervalSummary(start, end, ranges, _unpack(pushed), _unpack(pending))
