"""The public transform ``DPIntermittentQueries``: its parameters, its privacy charge, and the choice of query mode.

The two modes it expands to live in :mod:`~beam_dpsketch.transforms.intermittent.schedule`
and :mod:`~beam_dpsketch.transforms.intermittent.event_time`; the guarantee and the safety
rules are stated in :mod:`beam_dpsketch.transforms.intermittent`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches.intermittent.sketch import pure_budget_epsilon
from beam_dpsketch.transforms.base import DPTransform, as_extractor
from beam_dpsketch.transforms.intermittent.event_time import expand_event_time
from beam_dpsketch.transforms.intermittent.noise_owner import (
    CLOCKS,
    SKETCHES,
    CoreConfig,
    intermittent_sketch_id,
)
from beam_dpsketch.transforms.intermittent.queries import QuerySchedule
from beam_dpsketch.transforms.intermittent.schedule import expand_schedule
from beam_dpsketch.transforms.records import IntermittentRecord, TimedEstimate
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = ["DPIntermittentQueries"]

# One D3 state answers every query batch: repeated panes would count elements twice.
_INTERMITTENT_WINDOWING = WindowingRequirement(
    who="DPIntermittentQueries",
    default_windowing=True,
    why="one D3 state answers every batch; repeated panes would count elements twice",
)


def _ancestors(pcoll: beam.PCollection) -> Iterator[Any]:
    """Every PCollection ``pcoll`` is computed from (main and side inputs, transitively)."""
    stack, seen = [pcoll], set()
    while stack:
        current = stack.pop()
        producer = getattr(current, "producer", None)
        if producer is None or id(current) in seen:
            continue
        seen.add(id(current))
        for parent in (*producer.inputs, *producer.side_inputs):
            parent = getattr(parent, "pvalue", parent)
            yield parent
            stack.append(parent)


class DPIntermittentQueries(DPTransform):
    """Answer declared query batches at their times with a DP Count Sketch / Count-Min (D3).

    Input: the data stream. Output: ``(query_time, key, estimate)`` records (or
    :class:`IntermittentRecord` with ``with_metadata=True``), one per query, duplicates included.

    Parameters
    ----------
    width, depth, seed
        Sketch shape and public hash seed (the same cells as the exact
        :class:`~beam_dpsketch.sketches.CountSketch` / ``CountMinSketch`` of that shape).
    budget
        ``PrivacyBudget.pure(eps)``: the total for the whole stream and every batch. Without
        it, a share of ``accountant``'s pool by ``budget_weight`` (a pure accountant).
    queries
        The declared query input, independent of the data:

        * a :class:`QuerySchedule` (or a list of ``(time, keys)`` pairs, converted to one):
          data elements are ``(time, key)`` pairs or ``(times, keys)`` batches (a numeric numpy
          array of times and an equally long key batch), or any record with ``time_fn`` (and
          ``key_fn``); times are on the declared ``clock``, the same as the schedule's;
        * a ``PCollection`` of ``(time, keys)`` elements (``time`` in seconds of event time,
          ``keys`` a list or array): data elements are keys (or key batches, or records with
          ``key_fn``) whose event timestamps are their times. It must not be computed from the
          data input (refused when detectable).
    clock
        What the data's times are, declared by the caller (required; :data:`CLOCKS`):

        * ``"event_time"``: times that stay fixed when one element is added or removed (event
          timestamps). Guarantee under add/remove of one element.
        * ``"positions"``: sequence positions of an ordered input (row numbers), which shift
          when a row is removed. Guarantee under replacement of one element at a fixed
          position; the cells get noise of scale ``2 depth / epsilon``.
    sketch
        ``"count-sketch"`` (default; median of signed cells, the paper's choice) or
        ``"count-min"`` (minimum of cells, the extension of Yildirim et al., Section VII).
    time_fn, key_fn
        Extract a record's time (schedule mode only) and key: callables, or field names of
        ``dict`` / ``beam.Row`` elements.
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1; see
        :class:`~beam_dpsketch.transforms.base.DPTransform`).
    accountant
        Where the cost is charged (shared by a pipeline's DP transforms); default: a private
        accountant of exactly ``budget``.
    noise_source
        Secret noise key (default: a fresh ``os.urandom`` key). The zero-noise test source is
        refused (:func:`~beam_dpsketch.noise.check_release_source`).
    with_metadata
        Emit :class:`IntermittentRecord` (batch index, noise std, epsilon) instead of tuples.
    label
        Beam label and release label: names the charge and, through
        :func:`intermittent_sketch_id`, every noise stream. Default: the class name as Beam
        label, the transform's full label as release label. Give a stable label to reproduce
        answers.

    Raises
    ------
    ValueError, TypeError
        At construction or application for invalid parameters (named), a missing or unknown
        ``clock``, a budget that is not pure DP, non-default windowing of the data (any window
        other than the global one, or any trigger other than the default: early, late or
        count-based panes would feed one interval's elements to the state several times), a
        query PCollection derived from the data, or a label already charged to the accountant.
    BudgetExceededError
        When applied, if ``budget`` does not fit in ``accountant``.

    Notes
    -----
    **Privacy guarantee** (Yildirim et al., Theorem 4 and Lemma 1;
    Algorithm 4). The answers to all batches, at any number of
    data-independent times, are ``eps``-DP in total under the relation of the declared clock:

    * ``clock="event_time"``: add/remove of one element, every other element's time unchanged.
      Each cell is a Lemma-1 counter at ``eps/depth`` with exact discrete Laplace noise of scale
      ``depth/eps``, drawn once per batch that reads it and kept; answers are post-processing.
      Replacing one element by another (at the same time) costs ``2 eps`` (group privacy).
    * ``clock="positions"``: replacement of one element at a fixed position. The replaced
      element's old and new keys differ in the increment of one interval only, an L1 change of
      at most ``2 depth`` over the cells; with noise of scale ``2 depth / eps`` the loss is at
      most ``eps``. Add/remove is not covered: removing a row shifts one element across every
      batch boundary after it.

    The existence and times of answers are public: every declared batch is answered, whether
    or not data arrived before it.
    """

    def __init__(
        self,
        width: int,
        depth: int,
        budget: PrivacyBudget | None = None,
        *,
        queries: Any,
        clock: str,
        sketch: str = "count-sketch",
        seed: int = 0,
        time_fn: Callable[[Any], Any] | None = None,
        key_fn: Callable[[Any], Any] | None = None,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        if not isinstance(clock, str) or clock not in CLOCKS:
            raise ValueError(
                f"clock must be one of {tuple(CLOCKS)} (what the data's times are: event times "
                f"that stay fixed under add/remove, or row positions), got {clock!r}"
            )
        if sketch not in SKETCHES:
            raise ValueError(f"sketch must be one of {tuple(SKETCHES)}, got {sketch!r}")
        if budget is not None:
            pure_budget_epsilon(budget)
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        time_fn = as_extractor(time_fn, "time_fn")
        key_fn = as_extractor(key_fn, "key_fn")
        if isinstance(queries, beam.PCollection):
            if time_fn is not None:
                raise ValueError(
                    "time_fn: with a query PCollection the data's event timestamps are the times"
                )
            self._schedule: QuerySchedule | None = None
            self._queries: beam.PCollection | None = queries
        elif isinstance(queries, QuerySchedule):
            self._schedule, self._queries = queries, None
        elif isinstance(queries, list | tuple):
            self._schedule, self._queries = QuerySchedule(queries), None
        else:
            raise TypeError(
                "queries must be a QuerySchedule, a list of (time, keys) pairs or a PCollection "
                f"of (time, keys), got {type(queries).__name__}"
            )
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        self.needs_state_and_timers = self._queries is not None  # event-time state and timers
        self._kind = SKETCHES[sketch]
        self._sketch = sketch
        self._clock = clock
        self._mechanism = f"use-and-keep cell noise (D3), {sketch}, discrete Laplace"
        self._width, self._depth, self._seed = width, depth, seed
        # Validates width, depth, seed and the budget now, at construction (and warns once for
        # an even Count Sketch depth). Without a budget (the accountant's remainder, known when
        # applied) a placeholder one validates the rest.
        placeholder = budget if budget is not None else PrivacyBudget.pure(1.0)
        probe = self._config(placeholder, ("probe", "")).new(quiet=False)
        self._width, self._depth, self._seed = probe.width, probe.depth, probe.seed
        self.noise_scale: float | None = None
        if budget is not None:
            self.noise_scale = float(probe.noise_scale)
        self._time_fn, self._key_fn = time_fn, key_fn
        self._with_metadata = with_metadata

    def _config(self, budget: PrivacyBudget, sketch_id: tuple[str, str]) -> CoreConfig:
        return CoreConfig(
            self._width,
            self._depth,
            budget,
            self._clock,
            self._kind,
            self._seed,
            sketch_id,
            self._noise_source,
            self._mechanism,
        )

    @property
    def clock(self) -> str:
        """The declared clock (``"event_time"`` or ``"positions"``)."""
        return self._clock

    @property
    def neighbouring_relation(self) -> str:
        """The neighbouring relation the ``epsilon`` guarantee holds for (from the clock)."""
        return CLOCKS[self._clock]

    @property
    def schedule(self) -> QuerySchedule | None:
        """The declared schedule (``None`` with a query PCollection)."""
        return self._schedule

    def output_type(self) -> type:
        return IntermittentRecord if self._with_metadata else TimedEstimate

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def display_parameters(self) -> dict[str, Any]:
        return {
            "mechanism": self._mechanism,
            "sketch": self._sketch,
            "width": self._width,
            "depth": self._depth,
            "seed": self._seed,
            "clock": self._clock,
            "noise_scale": self.noise_scale,
            "queries": "schedule" if self._schedule is not None else "PCollection (event time)",
            "query_batches": None if self._schedule is None else len(self._schedule),
            "neighbouring_relation": CLOCKS[self._clock],
        }

    def windowing_requirement(self) -> WindowingRequirement:
        return _INTERMITTENT_WINDOWING

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._queries is not None and any(a is pcoll for a in _ancestors(self._queries)):
            raise ValueError(
                f"{name}: the query PCollection is computed from the data input; query times "
                "and sets must not depend on the private data (invariant I3). Declare queries "
                "as a separate input or a QuerySchedule"
            )
        self.check_label_free(name)
        # The budget given, or the weighted share of the accountant's pool (refused unless pure).
        budget = self.budget_for(name)
        try:
            config = self._config(budget, intermittent_sketch_id(name))
            self.noise_scale = float(config.new().noise_scale)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {exc}") from None
        self._core = config
        if self._clock == "positions":
            sensitivity = (
                f"replace-one: 1 per cell, up to {2 * self._depth} cells (L1 {2 * self._depth}) "
                "in one increment"
            )
        else:
            sensitivity = f"1 per cell, {self._depth} cells per element (L1 {self._depth})"
        return self.accountant.charge(
            name,
            self._mechanism,
            budget,
            1,
            "element",
            noise_scale=self.noise_scale,
            sensitivity=sensitivity,
            clock=self._clock,
            neighbouring_relation=CLOCKS[self._clock],
            queries="schedule" if self._schedule is not None else "PCollection (event time)",
            paper="Yildirim et al., Algorithm 4, Theorem 4, Lemma 1",
        )

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        config = self._core
        if self._schedule is not None:
            return expand_schedule(
                pcoll,
                config,
                self._schedule,
                self._time_fn,
                self._key_fn,
                self._with_metadata,
                self.run_salt,
            )
        return expand_event_time(
            pcoll, self._queries, config, self._key_fn, self._with_metadata, self.run_salt
        )
