"""The exact steps before the stateful aggregator: element-model interval summaries and
pane-model step tags, keyed to the single aggregator; nothing here is released."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.hashing import canonical_key, hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.continual.binary_mechanism import HorizonExceededError
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch
from beam_dpsketch.transforms.batching import KeyBatch, validate_key_batch
from beam_dpsketch.transforms.continual.config import ContinualConfig, new_sketch

# All data goes to one trusted aggregator (docs/algorithms.md#lazy-beam): a single state key, typed so
# that Beam uses a deterministic key coder for the stateful step.
_STATE_KEY = 0
#: The type of what reaches the stateful step: ``(state key, payload)``.
KEYED = beam.typehints.KV[int, Any]


def _batch_len(batch: Any) -> int:
    return len(batch)


def _prepare_element(element: Any) -> tuple[int, Any]:
    """``(position, key | batch)`` -> ``(position, batch)``; bad elements raise."""
    if not isinstance(element, tuple) or len(element) != 2:
        raise TypeError(
            "the element time model expects (position, key) or (position, batch) pairs, got "
            f"an element of type {type(element).__name__!r}"
        )
    position, value = element
    if isinstance(position, np.integer):
        position = int(position)
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        # Names the type only: an element's position is not echoed into an error message.
        raise TypeError(
            "position must be an int >= 0 (a public sequence number), got a value of type "
            f"{type(position).__name__!r}"
        )
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    if isinstance(value, np.ndarray | pa.Array | KeyBatch):
        batch, invalid = validate_key_batch(value)
        if invalid:
            raise TypeError(invalid[0][1])
        if isinstance(batch, np.ndarray) and batch.dtype.kind in "iub":
            batch = batch.astype(np.int64, copy=False)
    else:
        try:
            batch = [canonical_key(value)]
        except TypeError:
            raise TypeError(
                f"invalid key of type {type(value).__name__!r}: keys must be str, bytes, int, "
                "bool or tuples of these"
            ) from None
    return position, batch


def duplicate_position_error(label: str) -> ValueError:
    """The error of a time step that arrives twice, naming the parameter ``position`` only."""
    # Names the parameter only, never a position or a count from the data. Whether the
    # duplicate is seen before or after its step was processed depends on the delivery order.
    return ValueError(
        f"{label}: position: a time step arrived twice, or arrived after it was processed: "
        "positions must be unique (each arrival or pane exactly once)"
    )


# Cells of the interval summaries one bundle holds before it sends them on (16 MiB of int64).
_MAX_HELD_CELLS = 1 << 21


class SummarizeIntervals(beam.DoFn):
    """``(position, key | batch)`` -> ``(state key, IntervalSummary)``, pre-aggregated per bundle.

    The release schedule is public (multiples of ``release_every``, and ``T``), so every batch is
    cut at the release times and each piece is summarized for its release interval
    (:meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.summarize_interval`: exact,
    additive, ``O(depth * width)``). The pieces of one interval in a bundle are merged, so what
    reaches the stateful step (and what a runner materialises before it) is at most one summary
    per interval and bundle, whatever the number of rows or batches. Nothing here is released.
    """

    def __init__(self, config: ContinualConfig, noise_source: NoiseSource) -> None:
        self._config = config
        self._noise_source = noise_source
        self._sketch: LazySketch | PunctualSketch | None = None
        self._held: dict[tuple[Any, int], list[Any]] = {}
        self._held_cells = 0

    def setup(self) -> None:
        # Only its public parameters (shape, seed, kind) are used: summaries do not depend on
        # a sketch's state, and no noise is drawn here.
        self._sketch = new_sketch(self._config, self._noise_source, ("summaries",))

    def start_bundle(self) -> None:
        self._held = {}
        self._held_cells = 0

    def process(
        self,
        element: Any,
        window=beam.DoFn.WindowParam,
        timestamp=beam.DoFn.TimestampParam,
    ) -> Iterator[WindowedValue]:
        c = self._config
        position, batch = _prepare_element(element)
        n = _batch_len(batch)
        if not n:
            return
        if position + n > c.horizon:
            # Names the parameter (horizon) and never a position or a count from the data.
            raise HorizonExceededError(
                f"{c.label}: an element's positions would go beyond the declared horizon "
                f"T={c.horizon} time steps; nothing is released for steps at or beyond T (the "
                "calibration covers T steps). Declare a larger horizon."
            )
        assert self._sketch is not None
        h1, h2 = hash_keys(batch, c.seed)
        r = c.release_every
        lo, stop = position, position + n
        while lo < stop:
            start = lo // r * r
            end = min(start + r, c.horizon)
            hi = min(stop, end)
            piece = self._sketch.summarize_interval_hashes(
                h1[lo - position : hi - position], h2[lo - position : hi - position], lo, start, end
            )
            held = self._held.get((window, start))
            if held is None:
                self._held[(window, start)] = [piece, timestamp]
                self._held_cells += piece.pushed.size * (1 if piece.pending is None else 2)
            else:
                try:
                    held[0].merge(piece)
                except ValueError:
                    raise duplicate_position_error(c.label) from None
                held[1] = max(held[1], timestamp)
            lo = hi
        if self._held_cells > _MAX_HELD_CELLS:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        yield from self._flush()

    def _flush(self) -> Iterator[WindowedValue]:
        # The latest timestamp of the merged elements: the summary is complete only once they
        # have all arrived, and it stays inside their window.
        for (window, _), (summary, timestamp) in self._held.items():
            yield WindowedValue((_STATE_KEY, summary), timestamp, [window])
        self._held = {}
        self._held_cells = 0


class TagPane(beam.DoFn):
    """Exact pane sketch -> ``(state key, (pane index, table))``: the pane index is the step."""

    def process(self, sketch: Any, pane=beam.DoFn.PaneInfoParam) -> Iterator[Any]:
        yield _STATE_KEY, (int(pane.index), sketch.table)
