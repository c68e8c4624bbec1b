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

The modules, by concern: :mod:`~beam_dpsketch.transforms.continual.release` (time models,
neighbouring relations, the release record and its release-id prefix),
:mod:`~beam_dpsketch.transforms.continual.config` (the parameters the ``DoFn`` steps share),
:mod:`~beam_dpsketch.transforms.continual.steps` (the exact steps before the aggregator),
:mod:`~beam_dpsketch.transforms.continual.aggregator` (the stateful ``DoFn``) and
:mod:`~beam_dpsketch.transforms.continual.transform` (:class:`ContinualDPSketch`).

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

from beam_dpsketch.transforms.continual.release import (
    ELEMENT_RELATION,
    TIME_MODELS,
    ContinualRelease,
    continual_release_prefix,
    mechanism_name,
    pane_relation,
)
from beam_dpsketch.transforms.continual.transform import ContinualDPSketch

__all__ = [
    "ELEMENT_RELATION",
    "TIME_MODELS",
    "ContinualDPSketch",
    "ContinualRelease",
    "continual_release_prefix",
    "mechanism_name",
    "pane_relation",
]
