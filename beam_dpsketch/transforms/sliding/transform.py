"""The public transform ``DPSlidingWindowFrequencies``: its parameters, budget and charge,
and the Beam graph from stamping to the aggregator."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import apache_beam as beam
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import GlobalWindows

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_key
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms.base import DPTransform, as_extractor, with_run_salt
from beam_dpsketch.transforms.batching import FixedBatches
from beam_dpsketch.transforms.records import TimedEstimate, TimedHeavyHitters
from beam_dpsketch.transforms.sliding.aggregator import Queries, SealAndQuery, SlidingWindowRelease
from beam_dpsketch.transforms.sliding.stamp import PARTS, Stamp
from beam_dpsketch.transforms.sliding.steps import MICROS, SegmentWindows, StepClock
from beam_dpsketch.transforms.sliding.tables import (
    SegmentCombineFn,
    SegmentTables,
    by_segment,
    released_cells,
)
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "DPSlidingWindowFrequencies",
    "MODES",
    "NEIGHBOURING_RELATIONS",
    "PRESETS",
    "SlidingLayout",
]

MODES = ("count", "time")
PRESETS = (None, "theory", "paper_experiments")

# Each sketch must be sealed exactly once, when its range is complete (assumption A2 of
# DPSW-beam), and an element in k windows (SlidingWindows) would be one windowed value per
# window, counted k times while rho is charged once; any other WindowFn adds nothing, since the
# segments are the only windows the mechanism uses.
_SLIDING_WINDOWING = WindowingRequirement(
    who="DPSlidingWindowFrequencies",
    window_fns=("global",),
    triggers="on_time",
    why=(
        "each sketch is sealed once, when its range is complete, and its own segment windows "
        "follow the public step schedule: assumption A2 of DPSW-beam"
    ),
)
_BATCH = 4096

#: The neighbouring relation the transform's guarantee holds for, per mode. Replace-one in both
#: modes: in count-based mode a removal shifts every later position; in time-based mode the
#: query schedule runs to the last step holding an event, so an added event can add releases.
NEIGHBOURING_RELATIONS: dict[str, str] = {
    "count": (
        "replace one element: one element's key substituted, every position fixed "
        "(neighbouring streams have the same length); adding or removing an element is not "
        "covered (it shifts every later position)"
    ),
    "time": (
        "replace one event: one event's key substituted, its event time fixed (event times are "
        "public); adding, removing or moving an event is not covered (the query schedule runs "
        "to the last step holding an event)"
    ),
}


def _micros(value: Any, name: str, *, positive: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    micros = round(value * MICROS)
    if abs(micros - value * MICROS) > 1e-6 * max(1.0, abs(value * MICROS)):
        raise ValueError(f"{name} must be a whole number of microseconds, got {value}")
    if positive and micros <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return int(micros)


@dataclass(frozen=True)
class SlidingLayout:
    """How DPSW-Sketch cuts the window into blocks and checkpoints: public parameters, set once.

    One of three ways, each taking its own fields: explicit (``block`` or ``beta``, and
    ``alpha`` or ``checkpoints``, ``split``, ``q``), ``preset="theory"`` (``alpha``) or
    ``preset="paper_experiments"`` (``middle``, ``q``). A field left ``None`` is not passed, so
    the sketch's default applies and a field that does not belong to the chosen way is refused
    by the sketch, naming it.

    Parameters
    ----------
    preset
        ``None`` (explicit layout), ``"theory"`` or ``"paper_experiments"``
        (:meth:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch.theory`,
        :meth:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch.paper_experiments`).
    block, beta, alpha, checkpoints, split, q, middle, noise, free_prefixes
        The :class:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch` arguments of that name.

    Raises
    ------
    ValueError
        For an unknown ``preset``. The other fields are checked by the sketch when the
        transform is built (errors name the field).
    """

    preset: str | None = None
    block: int | None = None
    beta: float | None = None
    alpha: Any = None
    checkpoints: Sequence[int] | None = None
    split: str | None = None
    q: float | None = None
    middle: int | None = None
    noise: str | None = None
    free_prefixes: bool | None = None

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {self.preset!r}")

    def sketch_options(self) -> dict[str, Any]:
        """The sketch arguments given (every field but ``preset`` that is not ``None``)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "preset" and getattr(self, f.name) is not None
        }


class _SketchFactory:
    """Builds the (validated) empty DPSWSketch on a worker from small picklable parameters."""

    def __init__(self, preset: str | None, args: tuple, kwargs: dict[str, Any]) -> None:
        self.preset, self.args, self.kwargs = preset, args, kwargs

    def __call__(self, noise_source: NoiseSource) -> DPSWSketch:
        build = DPSWSketch if self.preset is None else getattr(DPSWSketch, self.preset)
        return build(*self.args, noise_source=noise_source, **self.kwargs)


class DPSlidingWindowFrequencies(DPTransform):
    """DP frequency or heavy-hitter queries over the last ``window`` steps, on a schedule.

    Runs DPSW-Sketch (Wang, Wang and Chen, Algorithms 1-3, with the corrections DPSW-E1, E4, E5,
    E7 and E9 of ``docs/algorithms.md``) across Beam workers (DPSW-beam): exact per-segment Count-Min tables are combined across shards, sealed with
    Gaussian noise once per PCMS by a single trusted aggregator, and queries are answered every
    ``release_every`` steps (``t = release_every, 2 release_every, ...`` up to the last step
    holding an element) from sealed sketches only.

    Output records (``with_metadata=False``): ``(time, key, estimate)`` for every query key at
    every query time, or ``(time, [(key, estimate), ...])`` for heavy-hitter queries (candidates
    whose estimate is ``>= (gamma - hh_slack) * window``, in candidate order). ``time`` is the
    query position ``t`` (count-based) or the event time ``origin + t * time_unit`` in seconds
    that ends the window ``[time - window * time_unit, time)`` (time-based). With
    ``with_metadata=True`` one :class:`SlidingWindowRelease` per query time. Each record is
    timestamped at the end of its query step, ``origin + t * time_unit``. An estimate is
    :meth:`DPSWSketch.estimate` with its default estimator: the paper's sum of Count-Min
    minima with the public mean of each noise minimum added back, so it is unbiased for a key
    that shares no cell with another (an absent key averages 0;
    ``docs/algorithms.md#dpsw-debiased``).

    Input elements are single rows (see ``mode``) or **batches** of rows, in any mix:

    * ``(steps_or_times, keys)``: a 1-d numpy array and as many keys (pyarrow array, numpy
      array or list). Count-based mode: integer 1-based positions; time-based mode: event times
      in seconds (numbers).
    * ``(first_position, keys, seconds)``, the element of
      :class:`~beam_dpsketch.io.ReadOrderedKeys`: ``first_position`` is the
      0-based position of the first row, so count-based positions are ``first_position + 1,
      ...``; time-based mode uses ``seconds`` (a float64 array; ``None`` is refused there and
      ignored in count-based mode).

    A batch is recognised by its shape (an array or a key batch is never a key) and bypasses
    ``key_fn``, ``position_fn`` and ``time_fn``; its rows need not be sorted or contiguous. The
    result is the same as for the same rows sent one by one.

    Parameters
    ----------
    window
        Window length ``W``: positions (count-based) or time units (time-based).
    width, depth
        Count-Min shape of every PCMS.
    budget
        ``PrivacyBudget.zcdp(rho)`` or ``PrivacyBudget.approx(eps, delta)`` (converted to
        ``rho`` by Wang, Wang and Chen, Eq. 1, the inverse of their Theorem 3.2) for the **whole
        stream and all queries**. Without it, a share of ``accountant``'s pool by
        ``budget_weight``. Pure DP is refused (the mechanism is Gaussian).
    release_every
        Query period ``N`` in steps (a public schedule; more queries cost no budget).
    seed
        Public hash seed of every PCMS.
    query_keys
        Public keys whose window frequency is estimated at every query time; or
    candidates, gamma
        A **public** candidate domain (fixed before seeing the data) and the heavy-hitter
        fraction ``gamma``; ``hh_slack`` overrides the threshold slack
        (``docs/algorithms.md#dpsw-e14``; default ``e / width``).
    mode
        ``"count"`` (default): elements carry a public, gap-free position ``1..n`` (assumption
        A1 of ``docs/algorithms.md#dpsw-beam``), by default ``(position, key)`` pairs (``position_fn``/``key_fn`` extract them).
        ``"time"``: steps are event-time units ``floor((ts - origin) / time_unit) + 1`` of the
        element timestamp (or of ``time_fn(element)`` seconds); ``key_fn`` defaults to identity.
        Each extractor is a callable or the field name of ``dict`` / ``beam.Row`` elements.
    time_unit
        Seconds per step (time-based mode only; default 1).
    origin
        Event time in seconds at which step 1 starts: **required** in time-based mode (refused
        in count-based mode). It anchors the blocks, the segments and the query times
        ``origin + release_every * time_unit, ...``, so it must be public and fixed without
        looking at the data (e.g. the start of the reporting period); an event before it is
        refused. There is no default: an origin far before the data (such as the epoch) would
        release every empty window in between.
    layout
        A :class:`SlidingLayout`: an explicit layout (``SlidingLayout(block=..., alpha=...)``)
        or a preset (``SlidingLayout(preset="theory")``,
        ``SlidingLayout(preset="paper_experiments")``). Required: the sketch has no default
        block length.
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1; see
        :class:`~beam_dpsketch.transforms.base.DPTransform`).
    accountant
        Charged once with the whole budget when the transform is applied, before anything runs
        (``BudgetExceededError`` if it does not fit); default: a private accountant of exactly
        ``budget``.
    noise_source
        :class:`~beam_dpsketch.noise.NoiseSource` (default: a fresh secret one); the zero-noise
        test source is refused.
    with_metadata
        Emit :class:`SlidingWindowRelease` records instead of plain tuples.
    label
        Beam label and release label: names the transform in the accountant and in every noise
        release id ``(label, "dpsw", block, kind, level)``. Default: the class name as Beam
        label, the applied full label as release label.

    Notes
    -----
    **Privacy guarantee.** ``rho``-zCDP, hence ``(eps, delta)``-DP, over the whole unbounded
    stream, whatever the number of queries, for **replace-one** neighbours only (the relation
    is the attribute ``neighbouring_relation``, also in :meth:`explain`): queries are
    post-processing of sealed PCMSs, each built over a fixed range and noised once (Wang, Wang
    and Chen, Lemma 4.1 and Theorem 4.4(1)).

    * Count-based mode: two streams of the same length ``n`` whose elements differ in the key of
      one element, at the same position (the paper's model: positions are the clock). Adding or
      removing an element is **not** covered: it shifts every later position, so every later
      range changes.
    * Time-based mode: two streams with the same event times whose events differ in the key of
      one event. Event times, hence the number of events at every step, are public. Adding,
      removing or moving an event is **not** covered: the sketches alone would cover adding or
      removing one event (L2 sensitivity ``sqrt(depth)``, ``docs/algorithms.md#dpsw-a6``), but
      the query schedule
      ends at the last step holding an event, so one added late event adds releases.

    The number of outputs follows the public schedule: one answer (every query key, or one
    possibly empty heavy-hitter list) at every ``t = release_every, 2 release_every, ...`` up to
    the last step holding an element, whether or not data fell in the queried range. Query times, the query
    keys and the candidates are public.
    Workers, combiners and the runner's state backend see raw counts (central DP, assumption A3).
    An instance is applied once (its label keys the noise).

    **Memory.** Segment tables keep only the cells of the query keys or candidates (nothing
    else is ever released; the noise of the other cells is drawn and discarded), and the
    aggregator's state is bounded by the sketches of the window (see :class:`SealAndQuery`).
    Not bounded by the window on the in-process batch runners (FnApiRunner, DirectRunner in
    batch mode): they materialise the whole input of the single-key aggregator, i.e. one table
    per segment of the blocks that the queries read (a query reads at most ``ceil(W / B) + 1``
    blocks of at most ``2 |I| - 1`` segments each: 11 blocks of 4 segments with the
    ``paper_experiments`` preset), each about ``40 + len(label) + 16 c`` bytes encoded,
    ``c <= depth min(keys, width)`` its non-zero query cells (``keys`` query keys or
    candidates): at most about 150 bytes per segment with two query keys and ``depth = 3``,
    at most about ``16 depth width`` bytes (48 KiB at ``width = 1024, depth = 3``) with many
    more candidates than the width; plus one small table (no cells) per run of blocks between
    query windows. So with ``release_every >= W + B`` the aggregator's input grows with the
    number of queries, not the rows; with ``release_every < W + B`` every block is read and it
    grows as ``n / B`` segments. In time-based mode on those runners the aggregator's bag holds
    the same tables until the end of the input. Time: every sealed block draws
    ``depth * width`` Gaussian samples per PCMS (up to 5 PCMSs per block with the preset),
    whatever its rows, so a period that reads every block of a small window costs that noise
    per ``B`` rows.
    """

    needs_state_and_timers = True  # stateful DoFn: sealed segments and query timers

    def __init__(
        self,
        window: int,
        width: int,
        depth: int,
        budget: PrivacyBudget | None = None,
        *,
        release_every: int,
        seed: int = 0,
        query_keys: Sequence[Any] | None = None,
        candidates: Sequence[Any] | None = None,
        gamma: float | None = None,
        hh_slack: float | None = None,
        mode: str = "count",
        key_fn: Callable[[Any], Any] | None = None,
        position_fn: Callable[[Any], Any] | None = None,
        time_fn: Callable[[Any], Any] | None = None,
        time_unit: float = 1,
        origin: float | None = None,
        layout: SlidingLayout | None = None,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if layout is None:
            layout = SlidingLayout()
        if not isinstance(layout, SlidingLayout):
            raise TypeError(
                "layout must be a SlidingLayout (e.g. SlidingLayout(block=..., alpha=...) or "
                f"SlidingLayout(preset='theory')), got {type(layout).__name__}"
            )
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        self.mode = mode
        self.release_every = check_int(release_every, "release_every")
        self.with_metadata = with_metadata

        if mode == "count":
            if time_fn is not None:
                raise ValueError("time_fn applies to mode='time' only")
            if time_unit != 1 or origin is not None:
                raise ValueError("time_unit and origin apply to mode='time' only")
            self._clock = StepClock(MICROS, 0)
        else:
            if position_fn is not None:
                raise ValueError("position_fn applies to mode='count' only")
            if origin is None:
                raise ValueError(
                    "origin is required with mode='time': the public event time (seconds) at "
                    "which step 1 starts, fixed without looking at the data"
                )
            self._clock = StepClock(
                _micros(time_unit, "time_unit", positive=True),
                _micros(origin, "origin", positive=False),
            )
        # The guarantee's relation, stated on every surface (charge, explain(), CLI).
        self.neighbouring_relation = NEIGHBOURING_RELATIONS[mode]
        key_fn = as_extractor(key_fn, "key_fn")
        position_fn = as_extractor(position_fn, "position_fn")
        self._key_fn = key_fn or ((lambda e: e[1]) if mode == "count" else (lambda e: e))
        self._position_fn = (position_fn or (lambda e: e[0])) if mode == "count" else None
        self._time_fn = as_extractor(time_fn, "time_fn")

        # Build (and so validate) the core sketch now, at construction. Its label, which keys
        # the noise, is the release label, set when the transform is applied. Without a budget
        # (the accountant's remainder, known when applied) a placeholder zCDP budget validates
        # everything but the budget: the layout (block, checkpoints) does not depend on it.
        self._factory = _SketchFactory(
            layout.preset,
            (window, budget if budget is not None else PrivacyBudget.zcdp(1.0)),
            {
                "width": width,
                "depth": depth,
                "seed": seed,
                "release_prefix": label or self.default_label(),
                **layout.sketch_options(),
            },
        )
        probe = self._factory(self._noise_source)
        self.window = probe.window
        self.rho: float | None = None
        self.epsilon: float | None = None
        self.delta: float | None = None
        if budget is not None:
            self._set_budget(budget, probe)
        self._queries = self._check_queries(probe, query_keys, candidates, gamma, hh_slack)
        # Every release reads only the cells of the public query keys or candidates (the
        # estimates of Wang, Wang and Chen, Algorithm 3; the noise of the other cells is drawn
        # and discarded): segment tables keep just those cells, so what Beam moves and buffers
        # per segment is bounded by the queries, not by the segment's rows or the width.
        cells = released_cells(self._queries.keys, self._shape())
        self._cells = None if len(cells) == probe.depth * probe.width else cells
        self._windows = SegmentWindows(
            probe.block, probe.layout.cuts, self._clock, self.release_every, probe.window
        )
        # (mechanism, noise scale, relation) of the metadata records; set when applied.
        self._release_facts: tuple[str, float, str] | None = None

        self._applied = False
        self.release_label = None

    def _set_budget(self, budget: PrivacyBudget, probe: DPSWSketch) -> None:
        self.rho = probe.rho
        self.epsilon = budget.epsilon if budget.kind == "approx" else None
        self.delta = budget.delta if budget.kind == "approx" else None

    @staticmethod
    def _check_queries(
        probe: DPSWSketch,
        query_keys: Sequence[Any] | None,
        candidates: Sequence[Any] | None,
        gamma: float | None,
        hh_slack: float | None,
    ) -> Queries:
        if (query_keys is None) == (candidates is None):
            raise ValueError("pass either query_keys or candidates (with gamma)")
        if query_keys is not None:
            if gamma is not None or hh_slack is not None:
                raise ValueError("gamma and hh_slack apply to candidates (heavy hitters) only")
            keys = tuple(canonical_key(k) for k in query_keys)
            if not keys:
                raise ValueError("query_keys must not be empty")
            return Queries(keys, None, None)
        keys = tuple(canonical_key(k) for k in candidates)  # type: ignore[union-attr]
        if not keys:
            raise ValueError("candidates must not be empty")
        if gamma is None:
            raise ValueError("gamma: heavy-hitter queries need the fraction gamma")
        if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
            raise TypeError(f"gamma must be a float, got {type(gamma).__name__}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if hh_slack is not None:
            if isinstance(hh_slack, bool) or not isinstance(hh_slack, numbers.Real):
                raise TypeError(f"hh_slack must be a float, got {type(hh_slack).__name__}")
            if not math.isfinite(hh_slack):
                raise ValueError(f"hh_slack must be finite, got {hh_slack}")
        zeta = math.e / probe.width
        if gamma < 4 * zeta:
            warnings.warn(
                f"gamma = {gamma} < 4 zeta = {4 * zeta:.4g}: the heavy-hitter guarantee of "
                "Lemma 4.3 needs gamma >= 4 zeta (DPSW-E19 in docs/algorithms.md)",
                stacklevel=3,
            )
        return Queries(keys, float(gamma), None if hh_slack is None else float(hh_slack))

    def output_type(self) -> type:
        if self.with_metadata:
            return SlidingWindowRelease
        return TimedEstimate if self._queries.gamma is None else TimedHeavyHitters

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def display_parameters(self) -> dict[str, Any]:
        width, depth, seed = self._shape()
        return {
            "mechanism": "DPSW-Sketch (Gaussian PCMS)",
            "mode": self.mode,
            "window": self.window,
            "release_every": self.release_every,
            "width": width,
            "depth": depth,
            "seed": seed,
            "rho": self.rho,
            "queries": "frequencies" if self._queries.gamma is None else "heavy hitters",
            "query_keys": len(self._queries.keys),
            "gamma": self._queries.gamma,
            "neighbouring_relation": self.neighbouring_relation,
        }

    def windowing_requirement(self) -> WindowingRequirement:
        return _SLIDING_WINDOWING

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._applied:
            # The transform holds one set of segment windows and one aggregator: a second
            # input would need its own release label, noise and charge, i.e. its own transform.
            raise ValueError(
                f"{name}: a DPSlidingWindowFrequencies instance can be applied once "
                "(its label keys the noise and its one charge covers one input); build one "
                "transform, with its own label, per input"
            )
        self.check_label_free(name)
        # The release label keys every noise stream of the sealed sketches; the budget is the
        # one given, or the transform's weighted share of the accountant's pool.
        budget = self.budget_for(name)
        self._factory = _SketchFactory(
            self._factory.preset,
            (self._factory.args[0], budget),
            {**self._factory.kwargs, "release_prefix": name},
        )
        probe = self._factory(self._noise_source)
        self._set_budget(budget, probe)
        report = probe.privacy_report()
        mechanism = "DPSW-Sketch (Gaussian PCMS; Wang, Wang and Chen, Lemma 4.1)"
        charge = self.accountant.charge(
            name,
            mechanism,
            PrivacyBudget.zcdp(self.rho, self.delta),
            1,
            "element",
            noise_scale=probe.level_sigmas()[0],
            neighbouring_relation=self.neighbouring_relation,
            queries=f"every {self.release_every} steps, unlimited (post-processing)",
            window=self.window,
            block=probe.block,
            checkpoints=list(probe.checkpoints),
            level_rhos=", ".join(f"{r:.6g}" for r in report["levels"]),
            level_sigmas=", ".join(f"{s:.6g}" for s in report["sigmas"]),
        )
        self._release_facts = (mechanism, probe.level_sigmas()[0], self.neighbouring_relation)
        self._applied = True
        return charge

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        stamp = Stamp(
            self.mode,
            self._windows,
            self._shape(),
            self._key_fn,
            self._position_fn,
            self._time_fn,
            self._cells,
        )
        stamped = pcoll | "Steps" >> beam.ParDo(stamp).with_outputs(PARTS, main="rows")

        def segment_windows() -> beam.WindowInto:
            return beam.WindowInto(
                self._windows,
                trigger=tr.AfterWatermark(),
                accumulation_mode=tr.AccumulationMode.DISCARDING,
                allowed_lateness=0,
            )

        rows = (
            stamped.rows
            | "SegmentWindows" >> segment_windows()
            # Not Beam's batching transform: its batch-size metric sums to the exact number of rows.
            | "Batch" >> FixedBatches(_BATCH)
        )
        parts = stamped[PARTS] | "PartWindows" >> segment_windows()
        tables = (
            (rows, parts)
            | "RowsAndParts" >> beam.Flatten()
            # Keyed by the segment's (public) end: a runner's grouping then handles one window
            # per key, whereas one key holding every segment window costs time quadratic in
            # their number on some runners (the FnApiRunner's trigger driver scans them all).
            | "BySegment" >> beam.Map(by_segment)
            | "ExactSegmentTables"
            >> beam.CombinePerKey(SegmentCombineFn(*self._shape(), self._cells))
            | "Tables" >> beam.Values()
            | "OnTimeOnly"
            >> beam.ParDo(SegmentTables(self.release_label, self._windows)).with_output_types(
                tuple[str, Any]
            )
        )
        aggregated = tables | "ToAggregator" >> beam.WindowInto(GlobalWindows())
        release = beam.ParDo(SealAndQuery(self)).with_output_types(Any)
        return with_run_salt(aggregated, self.run_salt) | "SealAndQuery" >> release

    def _shape(self) -> tuple[int, int, int]:
        kw = self._factory.kwargs
        return kw["width"], kw["depth"], kw["seed"]
