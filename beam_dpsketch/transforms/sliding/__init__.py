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
   not by the stream or ``release_every`` (see
   :class:`~beam_dpsketch.transforms.sliding.aggregator.SealAndQuery` for the exact bound and
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

from beam_dpsketch.transforms.sliding.aggregator import SlidingWindowRelease
from beam_dpsketch.transforms.sliding.transform import MODES as MODES
from beam_dpsketch.transforms.sliding.transform import (
    NEIGHBOURING_RELATIONS as NEIGHBOURING_RELATIONS,
)
from beam_dpsketch.transforms.sliding.transform import PRESETS as PRESETS
from beam_dpsketch.transforms.sliding.transform import DPSlidingWindowFrequencies, SlidingLayout

__all__ = ["DPSlidingWindowFrequencies", "SlidingLayout", "SlidingWindowRelease"]
