"""The single-key stateful ``DoFn``: the trusted aggregator that holds the sketch in Beam state,
applies the time steps in order and emits the scheduled releases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import coders
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.continual.binary_mechanism import HorizonExceededError
from beam_dpsketch.sketches.continual.sketch import CONTINUAL_ALGORITHMS, IntervalSummary
from beam_dpsketch.transforms.continual.config import ContinualConfig, new_sketch
from beam_dpsketch.transforms.continual.release import (
    ContinualRelease,
    continual_release_prefix,
    mechanism_name,
)
from beam_dpsketch.transforms.continual.steps import duplicate_position_error
from beam_dpsketch.transforms.records import StepEstimate

# The sketch's versioned bytes; the steps waiting for a predecessor; and the public schedule
# facts ``(next step t, sorted positions waiting in the buffer)``, which let an element that has
# to wait skip decoding the sketch, and an element that fills no gap skip reading the buffer.
_SKETCH_STATE = ReadModifyWriteStateSpec("sketch", coders.BytesCoder())
_BUFFER_STATE = BagStateSpec("buffer", coders.PickleCoder())
_CLOCK_STATE = ReadModifyWriteStateSpec("clock", coders.PickleCoder())
_SKETCH_PARAM = beam.DoFn.StateParam(_SKETCH_STATE)
_BUFFER_PARAM = beam.DoFn.StateParam(_BUFFER_STATE)
_CLOCK_PARAM = beam.DoFn.StateParam(_CLOCK_STATE)


class ContinualDoFn(beam.DoFn):
    """Single-key trusted aggregator: sketch in state, gap-free steps, scheduled releases."""

    def __init__(self, config: ContinualConfig, noise_source: NoiseSource) -> None:
        self._config = config
        self._noise_source = noise_source
        self._cls = CONTINUAL_ALGORITHMS[config.algorithm]
        self._qh: tuple[np.ndarray, np.ndarray] | None = None

    def setup(self) -> None:
        self._qh = hash_keys(list(self._config.queries), self._config.seed)

    def _load(self, state: Any, window: Any, source: NoiseSource) -> Any:
        data = state.read()
        if data:
            return self._cls.from_bytes(data, source)
        c = self._config
        return new_sketch(c, source, continual_release_prefix(c.label, window))

    def _check_pane(self, index: int, t: int) -> None:
        # The messages name the parameter (horizon, position) and never a position or a count
        # from the data.
        horizon = self._config.horizon
        if index + 1 > horizon:
            raise HorizonExceededError(
                f"{self._config.label}: a pane would go beyond the declared horizon T={horizon} "
                "time steps; nothing is released for steps at or beyond T (the calibration covers "
                "T steps). Declare a larger horizon."
            )
        if index < t:
            raise ValueError(
                f"{self._config.label}: position: a time step arrived after it was processed: "
                "positions must be unique (each arrival or pane exactly once)"
            )

    def process(
        self,
        element: tuple[int, tuple[bytes, Any]],
        window=beam.DoFn.WindowParam,
        sketch_state=_SKETCH_PARAM,
        buffer=_BUFFER_PARAM,
        clock=_CLOCK_PARAM,
    ) -> Iterator[Any]:
        # The run's noise: every element of a run (and every retry) carries the same salt.
        run_salt, payload = element[1]
        source = self._noise_source.for_run(run_salt)
        if self._config.time_model == "pane":
            yield from self._process_pane(payload, window, sketch_state, buffer, clock, source)
        else:
            yield from self._process_interval(payload, window, sketch_state, buffer, clock, source)

    def _process_interval(
        self,
        summary: IntervalSummary,
        window: Any,
        sketch_state: Any,
        buffer: Any,
        clock: Any,
        source: NoiseSource,
    ) -> Iterator[Any]:
        """Element model: apply the release intervals in order, each once it is complete.

        ``clock`` holds the public facts ``(next step t, {interval start: position ranges
        waiting in the buffer})``: an element that completes nothing is only added to the
        buffer, without decoding the sketch or reading the buffer. The buffer holds at most
        one merged summary per waiting interval after every read. An interval that never
        completes (a position that never arrives) holds back every later release: nothing
        after it is released.
        """
        label = self._config.label
        t, waiting = clock.read() or (0, {})
        start = summary.start
        if start < t:
            raise duplicate_position_error(label)
        try:
            ranges = IntervalSummary.merge_ranges(waiting.get(start, ()), summary.ranges)
        except ValueError:
            raise duplicate_position_error(label) from None
        if start != t or ranges != ((start, summary.end),):
            buffer.add(summary)
            waiting[start] = ranges
            clock.write((t, waiting))
            return
        held: dict[int, IntervalSummary] = {}
        if waiting:
            for item in buffer.read():
                if item.start in held:
                    held[item.start].merge(item)
                else:
                    held[item.start] = item
            buffer.clear()
        if start in held:
            summary = held.pop(start).merge(summary)
        waiting.pop(start, None)
        sketch = self._load(sketch_state, window, source)
        sketch.apply_interval(summary)
        yield from self._release(sketch, window)
        # Later intervals the buffer completed, in order.
        while sketch.t in held and held[sketch.t].complete:
            sketch.apply_interval(held.pop(sketch.t))
            yield from self._release(sketch, window)
        for item in held.values():
            buffer.add(item)
        waiting = {s: r for s, r in waiting.items() if s in held}
        clock.write((sketch.t, waiting))
        sketch_state.write(sketch.to_bytes())

    def _process_pane(
        self,
        pane: tuple[int, Any],
        window: Any,
        sketch_state: Any,
        buffer: Any,
        clock: Any,
        source: NoiseSource,
    ) -> Iterator[Any]:
        """Pane model: one step per pane index, buffered until its predecessors are done."""
        position, payload = pane
        t, waiting = clock.read() or (0, [])
        self._check_pane(position, t)
        if position != t:
            if position in waiting:
                raise ValueError(
                    f"{self._config.label}: position: a time step arrived twice: positions must "
                    "be unique (each arrival or pane exactly once)"
                )
            # A gap before this step: hold it until its predecessors arrive.
            buffer.add((position, payload))
            clock.write((t, sorted([*waiting, position])))
            return
        sketch = self._load(sketch_state, window, source)
        yield from self._apply(sketch, payload, window)
        if waiting and waiting[0] <= sketch.t:
            # The gap is filled: process the buffered steps that are now next, in order.
            items = sorted(buffer.read(), key=lambda item: item[0])
            buffer.clear()
            left: list[tuple[int, Any]] = []
            for pos, data in items:
                if pos < sketch.t:
                    self._check_pane(pos, sketch.t)
                if pos == sketch.t and not left:
                    yield from self._apply(sketch, data, window)
                else:
                    left.append((pos, data))
            for item in left:
                buffer.add(item)
            waiting = [pos for pos, _ in left]
        clock.write((sketch.t, waiting))
        sketch_state.write(sketch.to_bytes())

    def _apply(self, sketch: Any, table: Any, window: Any) -> Iterator[Any]:
        sketch.step_counts(table)
        if self._scheduled(sketch.t):
            yield from self._release(sketch, window)

    def _scheduled(self, t: int) -> bool:
        return t % self._config.release_every == 0 or t == self._config.horizon

    def _release(self, sketch: Any, window: Any) -> Iterator[Any]:
        """The records of one scheduled release: ``(t, key, estimate)`` per query key, or one
        :class:`ContinualRelease` (``with_metadata``)."""
        c = self._config
        assert self._qh is not None
        estimates = [float(v) for v in sketch.estimate_hashes(*self._qh).tolist()]
        if not c.with_metadata:
            for key, value in zip(c.queries, estimates, strict=True):
                yield StepEstimate(sketch.t, key, value)
            return
        if isinstance(window, GlobalWindow):
            start = end = None
        else:
            start, end = window.start.micros / 1e6, window.end.micros / 1e6
        yield ContinualRelease(
            transform=c.label,
            window_start=start,
            window_end=end,
            t=sketch.t,
            horizon=c.horizon,
            time_model=c.time_model,
            sketch=c.sketch,
            algorithm=c.algorithm,
            width=c.width,
            depth=c.depth,
            mechanism=mechanism_name(c.sketch, c.algorithm),
            epsilon=c.budget.epsilon,
            delta=c.budget.delta,
            noise_scale=c.noise_scale,
            neighbouring_relation=c.neighbouring_relation,
            answers=dict(zip(c.queries, estimates, strict=True)),
            noisy_table=sketch.noisy_table() if c.with_table else None,
        )
