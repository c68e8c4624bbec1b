"""The trusted aggregator: one stateful DoFn that seals each PCMS of the DPSW-Sketch once and
answers the scheduled queries as release records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import coders
from apache_beam.transforms import userstate
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.window import TimestampedValue

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms.base import DPTransform
from beam_dpsketch.transforms.records import KeyEstimate, TimedEstimate, TimedHeavyHitters
from beam_dpsketch.transforms.sliding.steps import as_seconds
from beam_dpsketch.transforms.sliding.tables import unpack_cells

__all__ = ["Queries", "SealAndQuery", "SlidingWindowRelease"]


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


_SEGMENT_CODER = coders.TupleCoder(
    [coders.VarIntCoder(), coders.VarIntCoder(), coders.VarIntCoder(), coders.VarIntCoder()]
    + [coders.BytesCoder()]
)
_PROGRESS_CODER = coders.TupleCoder([coders.VarIntCoder()] * 5)
_AHEAD_CODER = coders.IterableCoder(coders.TupleCoder([coders.VarIntCoder()] * 2))


@dataclass(frozen=True)
class Queries:
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


class SealAndQuery(beam.DoFn):
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
      ``16 depth min(keys, width)`` bytes of cells each, see
      :class:`~beam_dpsketch.transforms.sliding.DPSlidingWindowFrequencies`).

    Blocks that no query reads reach this DoFn only as one table without cells per run of such
    blocks (:class:`~beam_dpsketch.transforms.sliding.steps.SegmentWindows`): it moves the
    last step seen and, in count-based mode, the gap-free prefix, and is never added to the
    sketch. Blocks that no query from the next query step on reads are dropped unsealed
    (:meth:`DPSWSketch.advance_to` with ``next_query``), so a period longer than the window
    holds and seals only the blocks the query windows cover.

    One event-time timer is armed at the end of the latest query step ``<= max step seen``
    (time-based mode, when no query is due: at the max step seen, for the sealing). When it fires the watermark has passed the end of every step up to it, so all
    queries up to it are answered in order in that one firing, each exactly as if it had its
    own timer (same segments added, same ``advance_to(t)``, each record timestamped at the
    end of its own step ``t``); in count-based mode a query whose range lacks a complete
    segment then fails (assumption A1). Sealing earlier than a query time changes no value:
    a sealed PCMS depends only on its range's counts and its keyed noise stream.
    """

    def __init__(self, transform: DPTransform) -> None:
        """Take the plan of ``transform``, an applied ``DPSlidingWindowFrequencies``."""
        self._factory = transform._factory
        self._noise_source = transform.noise_source
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
                table = unpack_cells(cells, self._depth, self._width)
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
        when = t if self._mode == "count" else as_seconds(int(self._clock.end_of(t).micros))
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
            lo = as_seconds(int(self._clock.end_of(t - sketch.window).micros))
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
