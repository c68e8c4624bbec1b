"""Private sketches under continual observation in Beam: ``ContinualDPSketch``.

A thin adapter over :class:`~beam_dpsketch.sketches.continual.sketch.LazySketch` and
:class:`~beam_dpsketch.sketches.continual.sketch.PunctualSketch` (Holland, "Faster Differentially Private
Sketches under Continual Observation", Algorithms 3-5; ``docs/algorithms.md#lazy-beam``): a stateful
``DoFn`` on a single key is the trusted aggregator. It holds the sketch (exact pending counts,
running totals and noise slots) in Beam state, serialized with the versioned format
(``to_bytes``/``from_bytes``), so a runner checkpoint restores it, and it emits the noisy
estimates of the declared public query keys at time ``t`` (``(t, key, estimate)`` records, or a
:class:`ContinualRelease` with ``with_metadata=True``) on a public schedule. Nothing exact ever
leaves the state.

Time models
-----------
Beam does not order elements, so the transform never uses arrival order as time. What defines the
time step is explicit and public, and each model states the neighbouring relation it supports:

``"element"`` (the paper's model: one time step per arrival)
    Elements are ``(position, key)`` or ``(position, batch_of_keys)`` pairs. ``position`` is the
    public 0-based index of the (first) arrival in its window's stream (e.g. an ingestion sequence
    number, or the row number of an ordered file); a batch covers positions ``position ..
    position + len(batch) - 1``. The release schedule is public, so before the stateful step
    every batch is cut at the release times and each piece is summarized exactly for its release
    interval (:class:`~beam_dpsketch.sketches.continual.sketch.IntervalSummary`, ``O(depth *
    width)``), merged with the other pieces of that interval in the same bundle. The ``DoFn``
    buffers the summaries of intervals that are not yet complete or not yet next in
    ``BagState`` and applies each interval as soon as it and all earlier ones are complete
    (``apply_interval``): the result equals the core sketch fed the whole stream in position
    order with ``update_batch``, bit for bit, whatever Beam's bundling. A position that arrives
    twice (overlapping ranges) fails the pipeline naming ``position``; a position that never
    arrives holds back its interval and every later one (nothing after it is released).
    Triggers play no part (neither step groups by pane: the stateful ``DoFn`` sees every
    element once, whatever the panes). **Relation: event-level replacement with public
    positions** (Holland, Theorem 2; ``docs/algorithms.md#lazy-beam``): neighbouring streams
    differ in the key of one arrival, while every arrival's position and event timestamp (hence
    its window) are public and the same on both sides. The positions must not depend on the
    data (never sort by key or by a private timestamp). Add/remove is **not** covered: removing
    one arrival shifts the time step of every later arrival. Releases happen at public
    positions (every ``release_every``-th arrival and ``T``), so which releases exist depends on
    the public positions only.

``"pane"`` (one time step per trigger firing)
    Elements are keys (or key batches, or records with ``key_fn``) in the **global window**. An
    exact ``CountMinSketch``/``CountSketch`` of the pane is built by ``SketchCombineFn`` (no noise
    there), and the pane is time step ``PaneInfo.index``; the ``DoFn`` advances with
    ``step_counts``. Only triggers whose firings do not depend on the data are accepted: the
    default trigger or ``AfterWatermark()`` without early firings, with ``allowed_lateness = 0``
    (or late firings that cannot fire); Beam itself refuses the default trigger on an unbounded
    global window, so streaming inputs use ``AfterWatermark()``. Count triggers (``AfterCount``,
    ``Repeatedly``, early firings), processing-time triggers (their delay starts at a pane's
    first element) and late firings (they fire because late data arrived) make the pane
    boundaries and the number of panes depend on the data: removing one element would move
    others between time steps, which no step sensitivity covers. They are refused when the
    transform is applied, as are non-global windows (Beam emits no pane for a window without
    data, so whether a window's release exists would depend on the data). What remains is one
    step for the whole input, and it always exists: with the default windowing ``CombineGlobally``
    emits the empty sketch for an empty input, and with ``AfterWatermark()`` one public, empty key
    batch joins the data so that the pane fires. **Relation:** neighbouring inputs differ by
    adding, removing or replacing at most ``max_contributions`` arrivals (the core's
    ``step_counts`` sensitivity).

Privacy accounting
------------------
The whole time series of a window (all ``T`` steps, every release on the schedule, which is
post-processing of the per-step outputs) is **one** ``(epsilon, delta)`` release (Holland,
Theorems 1-2). The transform charges the accountant once at pipeline construction, before
anything runs. A windowing whose element falls in several windows (``SlidingWindows``) splits
the budget over those windows (``plan_releases``); windows not containing an element compose in
parallel. The horizon ``T`` is declared up front: a step at or beyond ``T`` raises
:class:`~beam_dpsketch.sketches.continual.binary_mechanism.HorizonExceededError` naming ``T`` (the pipeline
fails; nothing is released for that step).

Noise
-----
The sketch of a window draws all its noise from the keyed streams of the core's scheme under the
release-id prefix :func:`continual_release_prefix` ``(label, window)`` (the transform label and
the window bounds), so the same ``(noise source, label)`` reproduces identical releases, and a
retried bundle (whose state change is rolled back) re-derives exactly the same noise instead of
drawing fresh noise.

Memory
------
The state of a window is its sketch (``width * depth`` counters, each with ``ceil(log2(T + 1))``
noise slots, plus the lazy sketch's pending table), whatever the stream length, **plus** (element
model) the interval summaries waiting for an earlier interval to complete: at most one
``O(depth * width)`` summary per release interval after every buffer read. What reaches the
stateful step (and what a runner may materialise before it) is one summary per release interval
and bundle, whatever the number of rows or batches; a bundle holds at most about 16 MiB of
summaries before sending them on. Memory is thus bounded by the sketch and the release schedule
(``ceil(T / release_every)`` intervals), never by the input; with a fine schedule (small
``release_every``) a summary has few non-zero cells and is sent sparse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.transforms.userstate import BagStateSpec, ReadModifyWriteStateSpec
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_key, hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches.continual.binary_mechanism import (
    CALIBRATIONS,
    DEFAULT_CALIBRATION,
    HorizonExceededError,
)
from beam_dpsketch.sketches.continual.sketch import (
    CONTINUAL_ALGORITHMS,
    CONTINUAL_SKETCH_KINDS,
    CS_SENSITIVITIES,
    IntervalSummary,
    LazySketch,
    PunctualSketch,
    check_continual_budget,
    new_continual_sketch,
)
from beam_dpsketch.transforms.base import (
    DPTransform,
    as_extractor,
    same_windowing,
    with_run_salt,
)
from beam_dpsketch.transforms.batching import KeyBatch, validate_key_batch
from beam_dpsketch.transforms.combiners import SketchCombineFn, SketchSpec
from beam_dpsketch.transforms.records import StepEstimate
from beam_dpsketch.transforms.release import release_id_for
from beam_dpsketch.transforms.windowing_rules import WindowingDeclaration, WindowingRequirement

__all__ = [
    "ELEMENT_RELATION",
    "TIME_MODELS",
    "ContinualDPSketch",
    "ContinualRelease",
    "continual_release_prefix",
    "mechanism_name",
    "pane_relation",
]

TIME_MODELS = ("element", "pane")

#: The neighbouring relation of the element time model (Holland, Theorem 2).
ELEMENT_RELATION = (
    "replace the key of one arrival; every arrival's position and event timestamp (hence its "
    "window) public and unchanged (add/remove is not covered: it shifts every later position)"
)


def pane_relation(max_contributions: int) -> str:
    """The neighbouring relation of the pane time model (one pane: the whole global window)."""
    return (
        f"add, remove or replace up to {max_contributions} arrival(s) of the input (the single "
        "pane of the global window, one time step)"
    )


# All data goes to one trusted aggregator (docs/algorithms.md#lazy-beam): a single state key, typed so
# that Beam uses a deterministic key coder for the stateful step.
_STATE_KEY = 0
_KEYED = beam.typehints.KV[int, Any]


@dataclass(frozen=True)
class ContinualRelease:
    """One release of a :class:`ContinualDPSketch` (``with_metadata=True``): noisy estimates
    after time step ``t``, with the public facts of the release it belongs to.

    Every field is public information or noisy output; exact counts are never released. The
    fields shared with :class:`~beam_dpsketch.transforms.release.Release` (``transform``,
    ``window_start``, ``window_end``, ``mechanism``, ``epsilon``, ``delta``, ``noise_scale``)
    mean the same there: the release here is the whole time series of one window.

    Attributes
    ----------
    transform
        Label of the releasing transform (part of the noise's release-id prefix).
    window_start, window_end
        Window bounds in seconds; ``None`` for the global window.
    t
        Time steps processed so far (``1..horizon``): the release is the sketch's output after
        step ``t - 1`` (0-indexed), i.e. after ``t`` arrivals (element model) or ``t`` panes.
    horizon
        The declared horizon ``T`` of the calibration.
    time_model
        ``"element"`` or ``"pane"``.
    sketch
        ``"count-min"`` or ``"count-sketch"``.
    algorithm
        ``"lazy"`` or ``"punctual"``.
    width, depth
        Sketch shape.
    mechanism
        Mechanism name (as in the accountant's report).
    epsilon, delta
        Cost of the release this record belongs to: the ``(epsilon, delta)`` of this window's
        whole time series (all ``T`` steps, every record of the window), not per record.
    noise_scale
        Standard deviation of the Gaussian noise of one tree node.
    neighbouring_relation
        The neighbouring relation the guarantee holds for (from the time model).
    answers
        ``{query key: noisy estimate}`` for the declared public query keys.
    noisy_table
        The released ``(depth, width)`` noisy table (``with_table=True``), else ``None``. Not
        part of equality.
    """

    transform: str
    window_start: float | None
    window_end: float | None
    t: int
    horizon: int
    time_model: str
    sketch: str
    algorithm: str
    width: int
    depth: int
    mechanism: str
    epsilon: float
    delta: float
    noise_scale: float
    neighbouring_relation: str
    answers: Mapping[Any, float]
    noisy_table: np.ndarray | None = field(default=None, compare=False, repr=False)


def mechanism_name(sketch: str, algorithm: str) -> str:
    """The mechanism name of a continual ``sketch`` / ``algorithm`` pair (accountant, metadata)."""
    return f"continual {algorithm} {sketch} (Gaussian binary mechanism)"


def continual_release_prefix(label: str, window: Any) -> tuple[Any, ...]:
    """The release-id prefix of the continual sketch of ``window`` in the transform ``label``.

    ``release_id_for(label, window, 0)``: the window's time series is one release (pane 0 of the
    release-id scheme), and the core sketch keys every tree node's noise under this prefix.
    """
    return release_id_for(label, window, 0)


# The element model: positions are the time steps, so triggers play no part in them (panes are
# not releases) and the general rules apply. Sessions would need a declared bound on the windows
# a unit influences, which this transform does not take.
_ELEMENT_MODEL_WINDOWING = WindowingRequirement(
    who="ContinualDPSketch",
    window_fns=("global", "fixed", "sliding"),
    processing_time=True,
)
# The pane model: a pane is a time step, so the pane boundaries and their number must not depend
# on the data, and every step must exist whether or not data arrived.
_PANE_MODEL_WINDOWING = WindowingRequirement(
    who="the pane time model",
    window_fns=("global",),
    triggers="watermark",
    discarding=True,
    processing_time=True,
    why=(
        "its panes are the time steps: removing one element must not move others between "
        "steps, and Beam emits no pane for a window without data"
    ),
    instead=(("time_model='element'", _ELEMENT_MODEL_WINDOWING),),
)


# --------------------------------------------------------------------------------------------
# Element preparation
# --------------------------------------------------------------------------------------------


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


def _duplicate_error(label: str) -> ValueError:
    # Names the parameter only, never a position or a count from the data. Whether the
    # duplicate is seen before or after its step was processed depends on the delivery order.
    return ValueError(
        f"{label}: position: a time step arrived twice, or arrived after it was processed: "
        "positions must be unique (each arrival or pane exactly once)"
    )


# Cells of the interval summaries one bundle holds before it sends them on (16 MiB of int64).
_MAX_HELD_CELLS = 1 << 21


class _SummarizeIntervals(beam.DoFn):
    """``(position, key | batch)`` -> ``(state key, IntervalSummary)``, pre-aggregated per bundle.

    The release schedule is public (multiples of ``release_every``, and ``T``), so every batch is
    cut at the release times and each piece is summarized for its release interval
    (:meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.summarize_interval`: exact,
    additive, ``O(depth * width)``). The pieces of one interval in a bundle are merged, so what
    reaches the stateful step (and what a runner materialises before it) is at most one summary
    per interval and bundle, whatever the number of rows or batches. Nothing here is released.
    """

    def __init__(self, config: _Config, noise_source: NoiseSource) -> None:
        self._config = config
        self._noise_source = noise_source
        self._sketch: LazySketch | PunctualSketch | None = None
        self._held: dict[tuple[Any, int], list[Any]] = {}
        self._held_cells = 0

    def setup(self) -> None:
        # Only its public parameters (shape, seed, kind) are used: summaries do not depend on
        # a sketch's state, and no noise is drawn here.
        self._sketch = _new_sketch(self._config, self._noise_source, ("summaries",))

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
                    raise _duplicate_error(c.label) from None
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


class _TagPane(beam.DoFn):
    """Exact pane sketch -> ``(state key, (pane index, table))``: the pane index is the step."""

    def process(self, sketch: Any, pane=beam.DoFn.PaneInfoParam) -> Iterator[Any]:
        yield _STATE_KEY, (int(pane.index), sketch.table)


# --------------------------------------------------------------------------------------------
# The stateful release DoFn
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    label: str
    sketch: str
    algorithm: str
    width: int
    depth: int
    horizon: int
    budget: PrivacyBudget
    seed: int
    calibration: str
    cs_sensitivity: str
    max_contributions: int
    time_model: str
    release_every: int
    queries: tuple[Any, ...]
    with_metadata: bool
    with_table: bool
    noise_scale: float
    neighbouring_relation: str


# The sketch's versioned bytes; the steps waiting for a predecessor; and the public schedule
# facts ``(next step t, sorted positions waiting in the buffer)``, which let an element that has
# to wait skip decoding the sketch, and an element that fills no gap skip reading the buffer.
_SKETCH_STATE = ReadModifyWriteStateSpec("sketch", coders.BytesCoder())
_BUFFER_STATE = BagStateSpec("buffer", coders.PickleCoder())
_CLOCK_STATE = ReadModifyWriteStateSpec("clock", coders.PickleCoder())
_SKETCH_PARAM = beam.DoFn.StateParam(_SKETCH_STATE)
_BUFFER_PARAM = beam.DoFn.StateParam(_BUFFER_STATE)
_CLOCK_PARAM = beam.DoFn.StateParam(_CLOCK_STATE)


def _new_sketch(
    config: _Config, noise_source: NoiseSource, release_prefix: Any
) -> LazySketch | PunctualSketch:
    c = config
    return new_continual_sketch(
        c.width,
        c.depth,
        c.horizon,
        c.budget,
        release_prefix=release_prefix,
        sketch=c.sketch,
        algorithm=c.algorithm,
        seed=c.seed,
        noise_source=noise_source,
        calibration=c.calibration,
        cs_sensitivity=c.cs_sensitivity,
        max_contributions=c.max_contributions,
    )


class _ContinualDoFn(beam.DoFn):
    """Single-key trusted aggregator: sketch in state, gap-free steps, scheduled releases."""

    def __init__(self, config: _Config, noise_source: NoiseSource) -> None:
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
        return _new_sketch(c, source, continual_release_prefix(c.label, window))

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
            raise _duplicate_error(label)
        try:
            ranges = IntervalSummary.merge_ranges(waiting.get(start, ()), summary.ranges)
        except ValueError:
            raise _duplicate_error(label) from None
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


# --------------------------------------------------------------------------------------------
# The PTransform
# --------------------------------------------------------------------------------------------


class ContinualDPSketch(DPTransform):
    """A private Count-Min / Count Sketch released continually (Lazy or Punctual), on Beam.

    After every ``release_every``-th time step and after step ``T``, per window, emits one
    ``(t, key, estimate)`` record per public query key (``t`` the number of steps processed),
    or one :class:`ContinualRelease` with ``with_metadata=True`` (see the module docstring for
    the two time models and the state layout).

    Parameters
    ----------
    width, depth
        Sketch shape; cells are hashed as :class:`~beam_dpsketch.sketches.CountMinSketch` /
        :class:`~beam_dpsketch.sketches.CountSketch` with the same ``(width, depth, seed)``.
    horizon
        ``T``: the number of time steps (arrivals, or panes) per window the calibration covers,
        declared up front. A step at or beyond ``T`` fails the pipeline with
        :class:`~beam_dpsketch.sketches.continual.binary_mechanism.HorizonExceededError`.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` for the whole time series of the transform
        (split over the windows one element falls in). Without it, the accountant's remaining
        budget.
    query_keys
        Public query keys whose estimates every release carries (non-empty).
    sketch
        ``"count-min"`` (default) or ``"count-sketch"``.
    algorithm
        ``"lazy"`` (default; Holland, Algorithm 5) or ``"punctual"`` (the baseline,
        Algorithms 3-4).
    time_model
        ``"element"`` (input: ``(position, key | batch)`` pairs; any windowing) or ``"pane"``
        (input: keys, key batches or records with ``key_fn``, in the global window with the
        default trigger or ``AfterWatermark()``: one time step for the whole input).
    release_every
        Release after steps ``t = release_every, 2 * release_every, ...`` (and ``T``): a public
        schedule. Releasing more often costs no budget (post-processing of the per-step outputs).
    seed
        Public hash seed.
    calibration
        ``"analytic"`` (default: the Balle-Wang analytic Gaussian, the smallest noise whose
        exact privacy profile meets ``(epsilon, delta)``; any ``epsilon > 0``) or ``"paper"``
        (Holland's classical Gaussian of Lemma 1, to reproduce the paper; needs
        ``epsilon < 1`` per window, ``docs/algorithms.md#lazy-e5``, and is never less noisy).
    cs_sensitivity
        ``"corrected_4d"`` (default, ``docs/algorithms.md#lazy-e10``) or ``"paper_2d"`` (NOT
        private; reproduction).
    max_contributions
        Pane model: how many arrivals a neighbouring input may add, remove or replace (``C``;
        the sensitivity is scaled by it). Must be 1 in the element model.
    key_fn
        Pane model: extracts the key of a record, a callable or the field name of ``dict`` /
        ``beam.Row`` elements (default: elements are keys or key batches).
    accountant
        Shared :class:`~beam_dpsketch.privacy.PrivacyAccountant` to charge (default: a private
        one with exactly ``budget``).
    noise_source
        Secret :class:`~beam_dpsketch.noise.NoiseSource` (default: a fresh random key). The
        test-only zero-noise source is refused.
    with_metadata
        Emit one :class:`ContinualRelease` per release (window, ``t``, mechanism, cost, noise
        scale, relation, answers) instead of ``(t, key, estimate)`` records.
    with_table
        With ``with_metadata=True``: also put the released noisy ``(depth, width)`` table in
        every :class:`ContinualRelease` (post-processing of the same noisy cells; no extra
        cost, but ``depth * width`` floats per record).
    label
        Beam label and release label (default: the class name as Beam label, the applied full
        label as release label); the release label keys the noise.

    Raises
    ------
    ValueError, TypeError
        Invalid parameters (naming them), a pure or zCDP budget, ``epsilon >= 1`` with the paper
        calibration; when applied, a windowing the rules of
        :func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing` refuse, which in the
        pane model include ACCUMULATING mode, a trigger whose firings depend on the data (count,
        processing-time, early or late firings; the message names the trigger) and a
        non-global window.
    BudgetExceededError
        When applied, if the charge does not fit in the accountant (before anything runs).

    Notes
    -----
    **Privacy guarantee.** Every window's releases at all times are jointly ``budget / W``-DP,
    ``W`` the number of windows one element falls in (1 for global and fixed windows), so the
    transform's output is ``budget``-DP (Holland, Theorem 2 with ``m = 2d`` for CMS and ``m = 4d``
    for CS, ``docs/algorithms.md#lazy-e10``) under:

    * element model: replacement of the key of one arrival, every arrival's position and event
      timestamp public and unchanged (:data:`ELEMENT_RELATION`). Not add/remove: removing one
      arrival shifts every later time step.
    * pane model: adding, removing or replacing up to ``max_contributions`` arrivals of the
      input, whose single pane is the one time step (:func:`pane_relation`).

    Which releases exist depends only on public facts: the positions and ``release_every``,
    ``T`` (element model), or nothing at all (pane model: the one step always exists).
    """

    needs_state_and_timers = True  # one stateful DoFn per key (the continual release loop)

    def __init__(
        self,
        width: int,
        depth: int,
        horizon: int,
        budget: PrivacyBudget | None = None,
        *,
        query_keys: Sequence[Any],
        sketch: str = "count-min",
        algorithm: str = "lazy",
        time_model: str = "element",
        release_every: int = 1,
        seed: int = 0,
        calibration: str = DEFAULT_CALIBRATION,
        cs_sensitivity: str = "corrected_4d",
        max_contributions: int = 1,
        key_fn: Callable[[Any], Any] | None = None,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        with_table: bool = False,
        label: str | None = None,
    ) -> None:
        if sketch not in CONTINUAL_SKETCH_KINDS:
            raise ValueError(
                f"sketch must be one of {tuple(CONTINUAL_SKETCH_KINDS)}, got {sketch!r}"
            )
        if algorithm not in CONTINUAL_ALGORITHMS:
            raise ValueError(
                f"algorithm must be one of {tuple(CONTINUAL_ALGORITHMS)}, got {algorithm!r}"
            )
        if time_model not in TIME_MODELS:
            raise ValueError(f"time_model must be one of {TIME_MODELS}, got {time_model!r}")
        if calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
        if cs_sensitivity not in CS_SENSITIVITIES:
            raise ValueError(
                f"cs_sensitivity must be one of {CS_SENSITIVITIES}, got {cs_sensitivity!r}"
            )
        self._horizon = check_int(horizon, "horizon")
        self._release_every = check_int(release_every, "release_every")
        max_contributions = check_int(max_contributions, "max_contributions")
        if time_model == "element" and max_contributions != 1:
            raise ValueError(
                "max_contributions applies to the pane time model; the element model has one "
                "arrival per step (max_contributions must be 1)"
            )
        key_fn = as_extractor(key_fn, "key_fn")
        if key_fn is not None and time_model != "pane":
            raise ValueError("key_fn applies to the pane time model only")
        if isinstance(query_keys, str | bytes) or not isinstance(query_keys, Sequence):
            raise TypeError(
                f"query_keys must be a sequence of keys, got {type(query_keys).__name__} (wrap a "
                "single key in a list)"
            )
        if not query_keys:
            raise ValueError("query_keys must hold at least one public query key")
        try:
            self._queries = tuple(canonical_key(q) for q in query_keys)
        except TypeError as exc:
            raise TypeError(f"query_keys: {exc}") from None
        if budget is None and accountant is None:
            raise ValueError("budget: pass a PrivacyBudget, an accountant, or both")
        if budget is not None:
            check_continual_budget(budget)
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        if not isinstance(with_table, bool):
            raise TypeError("with_table must be a bool")
        if with_table and not with_metadata:
            raise ValueError(
                "with_table: the noisy table is part of the release metadata; pass "
                "with_metadata=True as well"
            )
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
        self._sketch = sketch
        self._algorithm = algorithm
        self._width, self._depth, self._seed = width, depth, seed
        self._time_model = time_model
        self._calibration = calibration
        self._cs_sensitivity = cs_sensitivity
        self._max_contributions = max_contributions
        self._key_fn = key_fn
        self._with_metadata = with_metadata
        self._with_table = with_table
        if budget is not None:
            # Validates width, depth, seed and the calibration (epsilon < 1 for "paper") now.
            self._probe(budget)
        # Filled in when applied.
        self.plan = None
        self.window_budget: PrivacyBudget | None = None
        self._config: _Config | None = None

    def _probe(self, budget: PrivacyBudget) -> LazySketch | PunctualSketch:
        return new_continual_sketch(
            self._width,
            self._depth,
            self._horizon,
            budget,
            release_prefix=("probe",),
            sketch=self._sketch,
            algorithm=self._algorithm,
            seed=self._seed,
            noise_source=self._noise_source,
            calibration=self._calibration,
            cs_sensitivity=self._cs_sensitivity,
            max_contributions=self._max_contributions,
        )

    @property
    def neighbouring_relation(self) -> str:
        """The neighbouring relation of the guarantee (from the time model)."""
        if self._time_model == "element":
            return ELEMENT_RELATION
        return pane_relation(self._max_contributions)

    def output_type(self) -> type:
        return ContinualRelease if self._with_metadata else StepEstimate

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def display_parameters(self) -> dict[str, Any]:
        return {
            "mechanism": mechanism_name(self._sketch, self._algorithm),
            "sketch": self._sketch,
            "algorithm": self._algorithm,
            "width": self._width,
            "depth": self._depth,
            "seed": self._seed,
            "horizon": self._horizon,
            "time_model": self._time_model,
            "release_every": self._release_every,
            "calibration": self._calibration,
            "cs_sensitivity": self._cs_sensitivity,
            "max_contributions": self._max_contributions,
            "query_keys": len(self._queries),
            "neighbouring_relation": self.neighbouring_relation,
        }

    def windowing_declaration(self) -> WindowingDeclaration:
        # Panes are the steps of one continual release (bounded by the horizon), not separate
        # releases: only the windows per element are composed.
        return WindowingDeclaration(max_panes_per_window=self._horizon)

    def windowing_requirement(self) -> WindowingRequirement:
        if self._time_model == "pane":
            return _PANE_MODEL_WINDOWING
        return _ELEMENT_MODEL_WINDOWING

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        plan = self.windowing_plan
        assert plan is not None  # judged by DPTransform.expand from windowing_declaration()
        self.check_label_free(name)
        budget = self.budget_for(name)
        check_continual_budget(budget)
        windows = plan.windows_per_element
        per_window = budget.divide(windows)
        probe = self._probe(per_window)
        relation = self.neighbouring_relation
        details: dict[str, Any] = {
            "horizon": self._horizon,
            "time_model": self._time_model,
            "release_schedule": f"after every {self._release_every} step(s) and at T",
            "sensitivity": f"sqrt(m h) * C, m={probe.m}, h={probe.tree_height}, "
            f"C={self._max_contributions}",
            "neighbouring_relation": relation,
            "calibration": self._calibration,
            "paper": "Holland, Algorithms 3-5, Theorems 1-2; Count Sketch m: docs/algorithms.md#lazy-e10",
        }
        if self._time_model == "pane" and plan.data_dependent_schedule:
            details["data_dependent_schedule"] = "; ".join(plan.data_dependent_schedule)
        charge = self.accountant.charge(
            name,
            mechanism_name(self._sketch, self._algorithm),
            per_window,
            releases=windows,
            privacy_unit="element",
            noise_scale=probe.sigma,
            windows=windows,
            **details,
        )
        self.plan = plan
        self.window_budget = per_window
        self._config = _Config(
            label=name,
            sketch=self._sketch,
            algorithm=self._algorithm,
            width=self._width,
            depth=self._depth,
            horizon=self._horizon,
            budget=per_window,
            seed=self._seed,
            calibration=self._calibration,
            cs_sensitivity=self._cs_sensitivity,
            max_contributions=self._max_contributions,
            time_model=self._time_model,
            release_every=self._release_every,
            queries=self._queries,
            with_metadata=self._with_metadata,
            with_table=self._with_table,
            noise_scale=probe.sigma,
            neighbouring_relation=relation,
        )
        return charge

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        config = self._config
        assert config is not None
        if self._time_model == "element":
            summarize = _SummarizeIntervals(config, self._noise_source)
            keyed = pcoll | "Intervals" >> beam.ParDo(summarize).with_output_types(_KEYED)
        else:
            batches = pcoll
            if self._key_fn is not None:
                batches = batches | "Keys" >> beam.Map(self._key_fn)
            kind = CONTINUAL_SKETCH_KINDS[self._sketch]
            spec = (SketchSpec.count_min if kind == "cms" else SketchSpec.count_sketch)(
                self._width, self._depth, self._seed
            )
            combine = beam.CombineGlobally(SketchCombineFn(spec))
            windowing = pcoll.windowing
            if not windowing.is_default():
                # The one step must exist whether or not data arrived. With the default
                # windowing CombineGlobally emits the empty sketch for an empty input; with an
                # accepted watermark trigger it cannot (and Beam refuses the default trigger on
                # an unbounded input), so one public, empty key batch joins the data and makes
                # the pane fire. It adds nothing to the sketch.
                heartbeat = (
                    pcoll.pipeline
                    | "Heartbeat" >> beam.Create([[]])
                    | "HeartbeatWindow" >> same_windowing(windowing)
                )
                batches = (batches, heartbeat) | "WithHeartbeat" >> beam.Flatten()
                combine = combine.without_defaults()
            tag = beam.ParDo(_TagPane()).with_output_types(_KEYED)
            keyed = batches | "ExactPaneDelta" >> combine | "PaneIndex" >> tag
        dofn = _ContinualDoFn(config, self._noise_source)
        # Typed input: the state key coder must be deterministic (VarInt for the int key).
        stateful = beam.ParDo(dofn).with_input_types(_KEYED).with_output_types(Any)
        return with_run_salt(keyed, self.run_salt) | "ContinualRelease" >> stateful
