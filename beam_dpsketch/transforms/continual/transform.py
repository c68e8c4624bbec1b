"""The public ``ContinualDPSketch`` PTransform: its parameters and their checks, the windowing
each time model requires, the accountant's charge and the pipeline wiring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import canonical_key
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.privacy.declarations import PrivacyUnit, check_privacy_unit
from beam_dpsketch.sketches.continual.binary_mechanism import CALIBRATIONS, DEFAULT_CALIBRATION
from beam_dpsketch.sketches.continual.sketch import (
    CONTINUAL_ALGORITHMS,
    CONTINUAL_SKETCH_KINDS,
    CS_SENSITIVITIES,
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
from beam_dpsketch.transforms.combiners import SketchCombineFn, SketchSpec
from beam_dpsketch.transforms.continual.aggregator import ContinualDoFn
from beam_dpsketch.transforms.continual.config import ContinualConfig
from beam_dpsketch.transforms.continual.release import (
    ELEMENT_RELATION,
    TIME_MODELS,
    ContinualRelease,
    mechanism_name,
    pane_relation,
)
from beam_dpsketch.transforms.continual.steps import KEYED, SummarizeIntervals, TagPane
from beam_dpsketch.transforms.records import StepEstimate
from beam_dpsketch.transforms.windowing_rules import WindowingDeclaration, WindowingRequirement

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


def _contribution_bound(privacy_unit: PrivacyUnit | None, time_model: str) -> int:
    """The arrivals ``C`` one neighbouring input may change: the part of the unit honoured here.

    Raises
    ------
    TypeError
        For a ``privacy_unit`` that is not a :class:`PrivacyUnit`.
    ValueError
        Naming the field that cannot be honoured and what is accepted instead.
    """
    unit = check_privacy_unit(privacy_unit)
    if unit.max_windows is not None:
        raise ValueError(
            "privacy_unit: ContinualDPSketch takes no max_windows (it charges every window an "
            "element falls in, as the input's windowing assigns them); accepted: PrivacyUnit() "
            "or, in the pane time model, PrivacyUnit(id=..., max_contributions=...)"
        )
    if time_model == "element" and unit.max_contributions != 1:
        raise ValueError(
            "privacy_unit: max_contributions applies to the pane time model; the element model "
            "has one arrival per step: accepted: PrivacyUnit(), or time_model='pane'"
        )
    return unit.max_contributions


class ContinualDPSketch(DPTransform):
    """A private Count-Min / Count Sketch released continually (Lazy or Punctual), on Beam.

    After every ``release_every``-th time step and after step ``T``, per window, emits one
    ``(t, key, estimate)`` record per public query key (``t`` the number of steps processed),
    or one :class:`ContinualRelease` with ``with_metadata=True`` (see
    :mod:`beam_dpsketch.transforms.continual` for the two time models and the state layout).

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
        (split over the windows one element falls in). Without it, a share of ``accountant``'s
        pool by ``budget_weight``.
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1; see
        :class:`~beam_dpsketch.transforms.base.DPTransform`).
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
    privacy_unit
        A :class:`~beam_dpsketch.privacy.PrivacyUnit`; only its contribution bound applies.
        ``PrivacyUnit()`` (the default): one arrival. Pane model only:
        ``PrivacyUnit(id=..., max_contributions=C)``, a unit whose at most ``C`` arrivals a
        neighbouring input may add, remove or replace (the sensitivity is scaled by ``C``); the
        caller bounds them upstream (e.g. ``BoundContributions(unit)``), this transform does not
        read the ``id``. Refused: ``max_contributions > 1`` in the element model (one arrival per
        step) and ``max_windows`` (the windows an element falls in come from the WindowFn).
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
        privacy_unit: PrivacyUnit | None = None,
        key_fn: Callable[[Any], Any] | None = None,
        budget_weight: float | None = None,
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
        max_contributions = _contribution_bound(privacy_unit, time_model)
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
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
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
        self._config: ContinualConfig | None = None

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
        self._config = ContinualConfig(
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
            summarize = SummarizeIntervals(config, self._noise_source)
            keyed = pcoll | "Intervals" >> beam.ParDo(summarize).with_output_types(KEYED)
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
            tag = beam.ParDo(TagPane()).with_output_types(KEYED)
            keyed = batches | "ExactPaneDelta" >> combine | "PaneIndex" >> tag
        dofn = ContinualDoFn(config, self._noise_source)
        # Typed input: the state key coder must be deterministic (VarInt for the int key).
        stateful = beam.ParDo(dofn).with_input_types(KEYED).with_output_types(Any)
        return with_run_salt(keyed, self.run_salt) | "ContinualRelease" >> stateful
