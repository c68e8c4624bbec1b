"""DP Count Sketch / Count-Min answering intermittent query batches in Beam: ``DPIntermittentQueries``.

A thin adapter over :class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` (paper
Algorithm 4, "use-and-keep" cell noise; Yildirim et al., "Differentially Private Frequency Sketches
for Intermittent Queries on Large Data Streams"; ``docs/algorithms.md#int-beam``). Exact partial
sketches are built and merged by Beam (linear sketches merge by addition); the noisy state has **one owner**, a single-key step that runs the D3 loop
"add the exact delta of the interval, answer batch ``k``" in order and emits
``(query_time, key, estimate)`` records. The whole stream costs one ``epsilon``, however many
batches are answered (Theorem 4), and is charged once to the accountant when the transform is
applied (at pipeline construction).

Clocks and neighbouring relations
---------------------------------
The caller declares what the element times are (``clock``); the guarantee and the calibration
follow from it:

``"event_time"``
    Times that stay fixed when one element is added or removed (event timestamps, or any public
    clock that does not count elements). Guarantee: ``epsilon``-DP under **add/remove of one
    element**, every other element's time unchanged (Yildirim et al., Theorem 4 with Lemma 1).
    Cell noise of scale ``depth / epsilon``.
``"positions"``
    Sequence positions ``1, 2, ...`` of an ordered input (row numbers). Removing one row
    renumbers every later row: at each of the ``B`` batch boundaries one element moves into the
    neighbouring interval, and the loss of the use-and-keep sketch grows to up to
    ``(2B + 1) epsilon``, so add/remove is **not** covered. The relation this clock supports is
    **replacement of one element at a fixed position** (its key changes, every position stays).
    Derivation: the replaced element is in the same interval ``k`` on both sides, so only the
    increment of batch ``k`` differs, by ``-1`` on the ``depth`` cells of the old key and ``+1``
    on the ``depth`` cells of the new one (fewer where they share a cell): an L1 change of at most
    ``2 depth`` on the increments between uses, each of which is released once with fresh
    discrete Laplace noise (Lemma 1). The cells are therefore noised at scale
    ``2 depth / epsilon`` (the core sketch run at ``epsilon / 2``), which gives ``epsilon``-DP
    under replace-one.

Two ways to declare the queries:

* **A schedule** (:class:`QuerySchedule`, batch or replay with known query times). Each data
  element carries a time ``t`` on the declared clock and is assigned to interval
  ``k(t) = 1 + #{l : t_l < t}`` (:func:`interval_index`), so interval ``(t_{k-1}, t_k]`` feeds
  batch ``k``. Batch ``j``'s answers read only the cells of ``Q_j``, as counts of the
  intervals ``<= j``, and the schedule is public: so each count an element adds to a cell is
  routed, in the step that reads the data, to the first batch at or after its interval that
  reads the cell, and dropped if none does (before any shuffle). ``CombinePerKey`` sums the routed counts
  exactly, sparsely: at most one per (cell, batch) read, O(depth * queries) whatever the numbers
  of rows, batches and distinct keys; one step then runs the D3 loop in batch order, adding
  before batch ``k`` the counts routed to it. The cells ``Q_k`` reads then hold exactly the
  counts of the intervals ``<= k``, as in the core fed every interval's full delta, so the
  answers are the same. Fully deterministic: equal to the core fed those deltas with the
  transform's noise source (:attr:`DPIntermittentQueries.noise_source`). Elements after the
  last query time affect no answer and are dropped without being counted. Only the answers are
  released (no table, no count of elements), so the cells no later batch reads are never needed.
* **A query PCollection** (streaming, event time). Elements of ``(time, keys)`` give the batches;
  the data elements' event timestamps are their times (on the declared clock). A stateful
  ``DoFn`` on one key buffers the hashed data and the pending queries, and an event-time timer
  answers the batch at ``time`` once the watermark has passed it: data with timestamps ``<= time``
  enter that batch. Data arriving late (after its batch was answered) is added anyway and enters
  the **next** batch; an old batch is never re-released. A query arriving after
  a later batch was answered cannot be answered at its time and fails the pipeline with
  ``ValueError`` (never dropped). On a batch runner every element is present before the timers
  fire, so the answers equal those of the schedule mode.

Every declared batch is answered (with noise only if no data arrived before it): the number and
times of the answers depend on the declared queries alone.

Safety rules (invariants I1-I6 of ``docs/algorithms.md#int-beam``), and how they are kept here:

* Query times and sets come from a declared, separate input (the schedule, or the query
  PCollection), never from the data: a query PCollection computed from the data input is refused
  when the transform is applied (the data PCollection is among its ancestors). The rule itself
  (do not choose queries from the private data, e.g. "the current top items") cannot be checked
  in general: only released answers may guide later queries.
* Times must be a public clock that does not depend on the data's content, and the clock must be
  declared (``clock``): positions are safe only under replace-one, see above.
* One noise owner per cell (I1): noise exists only in the single-key step; CombineFns carry exact,
  noise-free partial counts.
* Each element is counted once (I2): each of its cell counts goes to one batch (the first that
  reads the cell at or after its time), or is drained from the buffer once; never cumulative
  snapshots.
* Reproducible noise (I5): all draws come from the transform's noise source under the public
  :func:`intermittent_sketch_id` of the transform's label, a pure function of (key, label, batch
  index, cell) (see :mod:`beam_dpsketch.sketches.intermittent.sketch`), so a retried bundle re-draws
  identical noise.
* Non-global windows and non-default triggers are refused: one D3 state per transform (P-7).
* Nothing about the data leaves except the answers: no Beam metric counts elements, and error
  messages name the offending parameter, never a value from the data.

The package's modules, by concern:

* :mod:`~beam_dpsketch.transforms.intermittent.queries`: the declared queries
  (:class:`QuerySchedule`, :func:`interval_index`);
* :mod:`~beam_dpsketch.transforms.intermittent.noise_owner`: the clocks and the noise owner, the
  single-key core both modes share (:data:`CLOCKS`, :func:`intermittent_sketch_id`);
* :mod:`~beam_dpsketch.transforms.intermittent.schedule`: the schedule mode;
* :mod:`~beam_dpsketch.transforms.intermittent.event_time`: the query-PCollection mode;
* :mod:`~beam_dpsketch.transforms.intermittent.transform`: :class:`DPIntermittentQueries`.
"""

from beam_dpsketch.transforms.intermittent.noise_owner import (
    CLOCKS,
    SKETCHES,
    intermittent_sketch_id,
)
from beam_dpsketch.transforms.intermittent.queries import QuerySchedule, interval_index
from beam_dpsketch.transforms.intermittent.transform import DPIntermittentQueries
from beam_dpsketch.transforms.records import IntermittentRecord

__all__ = [
    "CLOCKS",
    "SKETCHES",
    "DPIntermittentQueries",
    "IntermittentRecord",
    "QuerySchedule",
    "intermittent_sketch_id",
    "interval_index",
]
