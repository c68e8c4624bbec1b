"""Steps and segment windows: the public, data-independent map from event time to steps, and
from steps to the Beam windows of the DPSW-Sketch's segments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from apache_beam import coders
from apache_beam.coders.coders import IntervalWindowCoder
from apache_beam.transforms.window import IntervalWindow, NonMergingWindowFn
from apache_beam.utils.timestamp import Timestamp

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.sketches.sliding.dpsw import MAX_INDEX

__all__ = ["MICROS", "SegmentWindows", "StepClock", "as_seconds"]

#: Microseconds per second: Beam timestamps, steps and the clock are whole microseconds.
MICROS = 1_000_000


def as_seconds(micros: int) -> float:
    """Seconds as an int when whole (readable output), else a float."""
    return micros // MICROS if micros % MICROS == 0 else micros / MICROS


class StepClock:
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


class SegmentWindows(NonMergingWindowFn):
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
        clock: StepClock,
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
                f"an event time is before the origin {as_seconds(self.clock.origin)} s of the steps"
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
