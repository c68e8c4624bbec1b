"""The accounted release step every differentially private transform uses.

A DP transform in this library is *exact aggregation, then one noisy release per window and pane*
(``docs/algorithms.md#exact-partials``):

1. :class:`DPAggregate` reads the windowing strategy of its **input** PCollection at pipeline
   construction and turns it into a :class:`~beam_dpsketch.privacy.windowing.ReleasePlan`
   (windows per privacy unit x panes per window = releases per unit) with
   :func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing`, which holds every
   windowing rule. The plan is read from the input, not from the combine's output, because after
   a ``GroupByKey`` Beam replaces the trigger with its *continuation* trigger, which no longer
   says how often the user's trigger fires.
2. It splits the transform's budget evenly over those releases and charges the
   :class:`~beam_dpsketch.privacy.accountant.PrivacyAccountant` **before anything runs**: an
   over-budget configuration raises :class:`~beam_dpsketch.privacy.BudgetExceededError` naming
   the transform, and a windowing the rules refuse (e.g. a trigger that can fire an unbounded
   number of panes without a declared ``max_panes_per_window``) raises
   :class:`~beam_dpsketch.transforms.windowing_rules.WindowingRefused`, a ``ValueError``.
3. ``CombineGlobally(combine_fn)`` builds the exact aggregate of every pane (no noise there:
   Beam makes one accumulator per bundle, so noise in ``add_input`` would stack).
4. A release ``DoFn`` adds noise **once** per pane with a :class:`ReleaseMechanism`. Its random
   bits come from ``noise_source.for_run(salt).stream(release_id)`` with ``release_id = (label,
   window bounds, pane index)``, where ``noise_source`` carries a key derived for this transform
   application alone (two transforms never share noise, whatever their labels) and ``salt`` is
   the run salt side input (:func:`~beam_dpsketch.transforms.base.run_salt_input`), drawn once
   when the run starts: a retried bundle re-draws exactly the same noise instead of publishing a
   second draw of the same data, and a second run of the same pipeline draws new noise. A pane whose
   index is at or beyond the declared maximum is **withheld** (never emitted): no pane is ever
   released without being accounted. No Beam metric counts panes: how many there are depends on
   the data.
5. With a declared ``release_range`` (Fixed or Sliding windows), one public heartbeat element per
   window is flattened into the input and ignored by the combine, so every window that starts in
   the range is released, empty ones included, and windows outside it are withheld: which
   windows are released is then public.

Empty panes (an ON_TIME pane after early panes in DISCARDING mode, or the global window of an
empty input) are releases too and get noise like any other. Noisy values and accumulators are
never logged.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import PaneInfoTiming

from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy.accountant import Charge, PrivacyAccountant
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
    windowing_declaration,
)
from beam_dpsketch.privacy.windowing import ReleasePlan
from beam_dpsketch.transforms.base import DPTransform, same_windowing
from beam_dpsketch.transforms.windowing_rules import WindowingDeclaration, accept_windowing

__all__ = [
    "PANE_RELATIONS",
    "AccountedTransform",
    "DPAggregate",
    "GroupPrivacyReplace",
    "Release",
    "ReleaseMechanism",
    "ReleaseStep",
    "explain_pipeline",
    "release_id_for",
]

#: Neighbouring relations a pane's input can obey (``ReleasePlan.pane_relation``).
PANE_RELATIONS = ("add_remove", "replace")


# --------------------------------------------------------------------------------------------
# Mechanisms
# --------------------------------------------------------------------------------------------


class ReleaseMechanism(abc.ABC):
    """How one exact aggregate becomes one noisy release.

    Subclasses set :attr:`name` and implement :meth:`release` and :meth:`describe`. A mechanism
    is pickled into the release ``DoFn``, so keep it small (plain parameters, no tables).

    Notes
    -----
    * :meth:`release` adds noise **once**, drawing every random bit from the ``stream`` it is
      given (never from ``random``, ``numpy.random`` or ``os.urandom``): the same stream must give
      the same output, which is what makes retries safe.
    * It is calibrated for the neighbouring relation of a pane's input,
      ``ReleasePlan.pane_relation``: ``"add_remove"`` (one element, or one privacy unit's bounded
      contributions, added or removed) or ``"replace"`` (a pane may also gain other elements that
      shifted in from a neighbouring pane). :meth:`for_pane_relation` returns the mechanism to use
      for a relation. The default handles ``"replace"`` by group privacy of size 2 (a replacement
      is a removal plus an addition: group privacy of size 2); a mechanism whose sensitivity is
      known under replacement overrides it (e.g. a count, whose value a swap does not change).
    * :meth:`privacy_cost` is what one release actually costs given the budget it was calibrated
      for (at most that budget); it is what the accountant is charged.
    """

    #: Mechanism name shown in reports and release metadata.
    name: str = "mechanism"
    #: Neighbouring relation this instance is calibrated for.
    pane_relation: str = "add_remove"

    @property
    def record_type(self) -> Any:
        """The type of every record :meth:`release` returns (``Any`` unless a subclass says)."""
        return Any

    def check_budget(self, budget: PrivacyBudget) -> None:  # noqa: B027 (optional hook)
        """Raise ``ValueError`` if this mechanism cannot spend a budget of ``budget.kind``."""

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        """The mechanism to use when a pane's input obeys ``pane_relation``."""
        _check_relation(pane_relation)
        if pane_relation == self.pane_relation:
            return self
        if pane_relation == "replace":
            return GroupPrivacyReplace(self)
        raise ValueError(
            f"{type(self).__name__} is calibrated for {self.pane_relation!r} and cannot be "
            f"recalibrated for {pane_relation!r}"
        )

    def privacy_cost(self, budget: PrivacyBudget) -> PrivacyBudget:
        """Cost of one release calibrated for ``budget`` (default: the whole ``budget``)."""
        return budget

    @abc.abstractmethod
    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        """Release ``accumulator`` (the combine's output for one pane) with ``budget``.

        Returns the released records (a list, possibly of one record).
        """

    @abc.abstractmethod
    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        """Calibration facts for reports: at least ``noise``, ``noise_scale``, ``threshold``,
        ``sensitivity`` and ``neighbouring_relation`` (values must be JSON-friendly)."""


class GroupPrivacyReplace(ReleaseMechanism):
    """Run an add/remove-calibrated mechanism so that it is private under replacement.

    A replacement is one removal plus one addition, so a mechanism that is ``b``-private under
    add/remove is ``group_privacy(b, 2)``-private under replacement (group privacy of size 2;
    :func:`beam_dpsketch.privacy.group_privacy`). To spend ``budget`` under replacement, the
    inner mechanism is therefore run with the budget whose group-of-2 guarantee fits in it:
    ``eps/2`` (pure), ``(eps/2, delta / (2 e^(eps/2)))`` (approximate) or ``rho/4`` (zCDP).
    """

    pane_relation = "replace"

    @property
    def record_type(self) -> Any:
        """The wrapped mechanism's records: group privacy changes the calibration only."""
        return self.inner.record_type

    def __init__(self, inner: ReleaseMechanism) -> None:
        if not isinstance(inner, ReleaseMechanism):
            raise TypeError(f"inner must be a ReleaseMechanism, got {type(inner).__name__}")
        self.inner = inner
        self.name = f"{inner.name} (group privacy 2 for replacement)"

    @staticmethod
    def shrink(budget: PrivacyBudget) -> PrivacyBudget:
        """The add/remove budget whose group-of-2 guarantee is within ``budget``."""
        if budget.kind == "zcdp":
            return PrivacyBudget.zcdp(budget.rho / 4.0, budget.delta_for_conversion)  # type: ignore[operator]
        eps = budget.epsilon / 2.0  # type: ignore[operator]
        if budget.kind == "pure":
            return PrivacyBudget.pure(eps)
        return PrivacyBudget.approx(eps, budget.delta / (2.0 * math.exp(eps)))

    def check_budget(self, budget: PrivacyBudget) -> None:
        self.inner.check_budget(budget)

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        _check_relation(pane_relation)
        return self if pane_relation == "replace" else self.inner

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        return self.inner.release(accumulator, self.shrink(budget), stream)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        out = dict(self.inner.describe(self.shrink(budget)))
        out["neighbouring_relation"] = (
            f"replace one element (calibrated by group privacy of size 2 from: "
            f"{out.get('neighbouring_relation', 'add/remove')})"
        )
        out["pane_relation"] = "replace"
        return out


def _check_relation(pane_relation: str) -> None:
    if pane_relation not in PANE_RELATIONS:
        raise ValueError(f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}")


# --------------------------------------------------------------------------------------------
# Release ids and metadata
# --------------------------------------------------------------------------------------------


def _window_bounds(window: Any) -> tuple[Any, ...]:
    if isinstance(window, GlobalWindow):
        return ("global",)
    start = getattr(window, "start", None)
    end = getattr(window, "end", None)
    if start is None or end is None:
        raise TypeError(f"cannot name a release in a window of type {type(window).__name__}")
    # Integer microseconds: exact, and accepted by the canonical key encoding.
    return (int(start.micros), int(end.micros))


def release_id_for(label: str, window: Any, pane_index: int) -> tuple[Any, ...]:
    """The release id of pane ``pane_index`` of ``window`` in the transform labelled ``label``.

    ``(label, "global", pane_index)`` in the global window, else
    ``(label, start_micros, end_micros, pane_index)``. The noise of that release is drawn from
    ``noise_source.stream(release_id_for(...))``.
    """
    return (str(label), *_window_bounds(window), int(pane_index))


@dataclass(frozen=True)
class Release:
    """One released pane with its metadata (output of ``DPAggregate(..., with_metadata=True)``).

    Not to be confused with :class:`beam_dpsketch.privacy.accountant.Charge`, the accountant's
    record of a charge. Every field here is public information or noisy output.

    Attributes
    ----------
    transform
        Label of the releasing transform (part of the release id).
    window_start, window_end
        Window bounds in seconds; ``None`` for the global window.
    pane_index
        Beam ``PaneInfo.index`` (0 for the first pane of the window).
    pane_timing
        ``"EARLY"``, ``"ON_TIME"``, ``"LATE"`` or ``"UNKNOWN"``.
    is_last_pane
        Beam's ``PaneInfo.is_last``.
    mechanism
        Mechanism name.
    privacy_unit
        ``"element"`` or ``"user"``.
    pane_relation
        ``"add_remove"`` or ``"replace"``: the relation the release is calibrated for.
    epsilon, delta, rho
        Cost of this release (``epsilon``/``delta`` for pure or approximate DP, ``rho`` for zCDP).
    noise_scale, threshold
        Calibrated noise parameter and release threshold (``None`` if not applicable).
    records
        The released records.
    """

    transform: str
    window_start: float | None
    window_end: float | None
    pane_index: int
    pane_timing: str
    is_last_pane: bool
    mechanism: str
    privacy_unit: str
    pane_relation: str
    epsilon: float | None
    delta: float
    rho: float | None
    noise_scale: float | None
    threshold: float | None
    records: tuple[Any, ...]


# --------------------------------------------------------------------------------------------
# The release DoFn
# --------------------------------------------------------------------------------------------


class _ReleaseDoFn(beam.DoFn):
    """Withhold panes beyond the plan's maximum; add noise once to every other pane."""

    def __init__(
        self,
        label: str,
        mechanism: ReleaseMechanism,
        plan: ReleasePlan,
        budget: PrivacyBudget,
        cost: PrivacyBudget,
        noise_source: NoiseSource,
        with_metadata: bool,
        noise_scale: float | None,
        threshold: float | None,
    ) -> None:
        self._label = label
        self._mechanism = mechanism
        self._plan = plan
        self._budget = budget
        self._cost = cost
        self._noise_source = noise_source
        self._with_metadata = with_metadata
        self._noise_scale = noise_scale
        self._threshold = threshold
        # Window starts (microseconds) that may be released, from the public release_range.
        self._start_range = _micros_range(plan.release_range)

    def process(
        self,
        accumulator,
        run_salt: bytes,
        window=beam.DoFn.WindowParam,
        pane=beam.DoFn.PaneInfoParam,
    ):
        index = int(pane.index)
        if not self._plan.allows_pane(index):
            # Only the declared number of panes was charged: a further pane would be an
            # unaccounted release. Nothing counts it either, since the count depends on the data.
            return
        if self._start_range is not None and not (
            self._start_range[0] <= int(window.start.micros) < self._start_range[1]
        ):
            # Outside the declared range no heartbeat guarantees a release, so releasing a
            # window there would reveal that it had data.
            return
        source = self._noise_source.for_run(run_salt)
        stream = source.stream(release_id_for(self._label, window, index))
        records = self._mechanism.release(accumulator, self._budget, stream)
        if not self._with_metadata:
            yield from records
            return
        if isinstance(window, GlobalWindow):
            start = end = None
        else:
            start, end = window.start.micros / 1e6, window.end.micros / 1e6
        cost = self._cost
        yield Release(
            transform=self._label,
            window_start=start,
            window_end=end,
            pane_index=index,
            pane_timing=PaneInfoTiming.to_string(pane.timing),
            is_last_pane=bool(pane.is_last),
            mechanism=self._mechanism.name,
            privacy_unit=self._plan.privacy_unit,
            pane_relation=self._plan.pane_relation,
            epsilon=cost.epsilon,
            delta=cost.delta,
            rho=cost.rho,
            noise_scale=self._noise_scale,
            threshold=self._threshold,
            records=tuple(records),
        )


# --------------------------------------------------------------------------------------------
# DPAggregate
# --------------------------------------------------------------------------------------------


def _micros_range(release_range: tuple[float, float] | None) -> tuple[int, int] | None:
    if release_range is None:
        return None
    return (round(release_range[0] * 1_000_000), round(release_range[1] * 1_000_000))


class _Heartbeat:
    """The public element injected once per window of a declared ``release_range``.

    It carries nothing; :class:`_SkipHeartbeats` drops it before the exact combine, so it only
    makes Beam fire a pane for windows without data.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Heartbeat)

    def __hash__(self) -> int:
        return 0x4842

    def __repr__(self) -> str:
        return "<release heartbeat>"


class _SkipHeartbeats(beam.CombineFn):
    """Delegate to ``inner``, ignoring heartbeat elements."""

    def __init__(self, inner: beam.CombineFn) -> None:
        self._inner = inner

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self._inner.setup(*args, **kwargs)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._inner.teardown(*args, **kwargs)

    def create_accumulator(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.create_accumulator(*args, **kwargs)

    def add_input(self, mutable_accumulator: Any, element: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(element, _Heartbeat):
            return mutable_accumulator
        return self._inner.add_input(mutable_accumulator, element, *args, **kwargs)

    def merge_accumulators(self, accumulators: Any, *args: Any, **kwargs: Any) -> Any:
        return self._inner.merge_accumulators(accumulators, *args, **kwargs)

    def compact(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self._inner.compact(accumulator, *args, **kwargs)

    def extract_output(self, accumulator: Any, *args: Any, **kwargs: Any) -> Any:
        return self._inner.extract_output(accumulator, *args, **kwargs)

    def get_accumulator_coder(self) -> Any:
        return self._inner.get_accumulator_coder()


def _window_starts(windowfn: Any, release_range: tuple[float, float]) -> list[int]:
    """Start (microseconds) of every window of ``windowfn`` that starts in ``release_range``."""
    from apache_beam.transforms import window as bw

    lo, hi = _micros_range(release_range)  # type: ignore[misc]
    if isinstance(windowfn, bw.FixedWindows):
        step, offset = int(windowfn.size.micros), int(windowfn.offset.micros)
    elif isinstance(windowfn, bw.SlidingWindows):
        step, offset = int(windowfn.period.micros), int(windowfn.offset.micros)
    else:
        raise ValueError("release_range applies to FixedWindows and SlidingWindows only")
    first = lo + (offset - lo) % step
    return list(range(first, hi, step))


class _EmitHeartbeats(beam.DoFn):
    """One heartbeat per public window start, timestamped at the start (inside that window)."""

    def __init__(self, starts: list[int]) -> None:
        self._starts = starts

    def process(self, _unused: Any):
        from apache_beam.utils.timestamp import Timestamp

        for start in self._starts:
            yield beam.window.TimestampedValue(_Heartbeat(), Timestamp(micros=start))


def explain_pipeline(accountant: PrivacyAccountant) -> str:
    """The privacy report of a pipeline: every charge of ``accountant`` with running budgets.

    The report holds public facts only (parameters, calibrations, costs). It never states how
    many panes or windows a run released or withheld: those numbers depend on the data.

    Parameters
    ----------
    accountant
        The pipeline's accountant (shared by its DP transforms).
    """
    if not isinstance(accountant, PrivacyAccountant):
        raise TypeError(f"accountant must be a PrivacyAccountant, got {type(accountant).__name__}")
    return accountant.explain()


class ReleaseStep:
    """The accounted release of one DP transform: plan, charge, exact combine, noisy release.

    Not a transform itself: :class:`DPAggregate` and every :class:`AccountedTransform` hold
    one. :meth:`plan` reads the windowing of the transform's **input** and charges the
    accountant (once per application, at pipeline construction); :meth:`expand` then builds the
    exact ``CombineGlobally`` and the release ``DoFn`` (see the module docstring).

    After :meth:`plan`, the public facts of the release are attributes: ``plan`` (the
    :class:`~beam_dpsketch.privacy.windowing.ReleasePlan`), ``charge``, ``per_release_budget``,
    ``calibrated_mechanism`` (the mechanism for the plan's pane relation) and ``release_label``.

    The declaration is either the value objects ``privacy_unit=PrivacyUnit(...)`` and
    ``windowing=Windowing(...)``, or (for the transforms that still take them) the loose
    ``privacy_unit="element" | "user"``, ``max_panes_per_window``, ``max_windows_per_unit``,
    ``data_independent_panes`` and ``release_range``; not both.
    """

    def __init__(
        self,
        combine_fn: Any,
        mechanism: ReleaseMechanism,
        *,
        accountant: PrivacyAccountant,
        noise_source: NoiseSource,
        privacy_unit: str | PrivacyUnit = "element",
        max_panes_per_window: int | None = None,
        max_windows_per_unit: int | None = None,
        data_independent_panes: bool = False,
        with_metadata: bool = False,
        release_range: tuple[float, float] | None = None,
        windowing: Windowing | None = None,
    ) -> None:
        if not isinstance(mechanism, ReleaseMechanism):
            raise TypeError(f"mechanism must be a ReleaseMechanism, got {type(mechanism).__name__}")
        if not isinstance(with_metadata, bool):
            raise TypeError("with_metadata must be a bool")
        self.combine_fn = combine_fn
        self.mechanism = mechanism
        self.accountant = accountant
        self.noise_source = noise_source
        #: The declared privacy unit, when given as a :class:`PrivacyUnit` (else ``None``).
        self.unit: PrivacyUnit | None = None
        if isinstance(privacy_unit, PrivacyUnit) or windowing is not None:
            loose = (max_panes_per_window, max_windows_per_unit, release_range)
            if any(v is not None for v in loose) or data_independent_panes:
                raise TypeError(
                    "windowing: declare the windowing bounds in windowing=Windowing(...) and the "
                    "windows per unit in privacy_unit=PrivacyUnit(max_windows=...), not as "
                    "separate parameters too"
                )
            self.unit = check_privacy_unit(None if privacy_unit == "element" else privacy_unit)
            declaration = windowing_declaration(self.unit, windowing)
        else:
            declaration = WindowingDeclaration(
                privacy_unit=privacy_unit,  # type: ignore[arg-type]
                max_panes_per_window=max_panes_per_window,
                max_windows_per_unit=max_windows_per_unit,
                data_independent_panes=data_independent_panes,
                release_range=release_range,
            )
        #: The windowing bounds declared for this release.
        self.declaration = declaration
        self.with_metadata = with_metadata
        # Filled in by plan().
        self.plan: ReleasePlan | None = None
        self.charge: Charge | None = None
        self.per_release_budget: PrivacyBudget | None = None
        self.calibrated_mechanism: ReleaseMechanism | None = None
        self.release_label: str | None = None
        self._cost: PrivacyBudget | None = None
        self._noise_scale: float | None = None
        self._threshold: float | None = None

    @property
    def privacy_unit(self) -> str:
        """``"element"`` or ``"user"`` (from the declaration)."""
        return self.declaration.privacy_unit

    @property
    def max_panes_per_window(self) -> int | None:
        """Declared maximum panes per window."""
        return self.declaration.max_panes_per_window

    @property
    def max_windows_per_unit(self) -> int | None:
        """Declared maximum windows per privacy unit."""
        return self.declaration.max_windows_per_unit

    @property
    def data_independent_panes(self) -> bool:
        """The caller's assertion that pane boundaries do not depend on the data."""
        return self.declaration.data_independent_panes

    @property
    def release_range(self) -> tuple[float, float] | None:
        """Declared public event-time range whose windows are all released."""
        return self.declaration.release_range

    def explain(self) -> str:
        """The accountant's report (see :meth:`DPTransform.explain`)."""
        if self.charge is None:
            raise RuntimeError(
                "explain() is available once the transform is applied to a PCollection: its "
                "cost depends on the input's windowing"
            )
        return explain_pipeline(self.accountant)

    def plan_for(self, windowing: Any, name: str, owner: DPTransform) -> Charge:
        """Plan the releases of ``windowing`` and charge ``owner``'s accountant for ``name``.

        Raises
        ------
        WindowingRefused
            For a windowing the rules of
            :func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing` refuse (the
            message starts with ``name``).
        ValueError, TypeError
            For a label already charged, or a budget kind the mechanism cannot spend.
        BudgetExceededError
            If the charge does not fit in the accountant.
        """
        plan = accept_windowing(windowing, self.declaration, name=name)
        assert plan is not None  # a declaration always yields a plan
        owner.check_label_free(name)
        budget = owner.budget_for(name)
        self.mechanism.check_budget(budget)
        mechanism = self.mechanism.for_pane_relation(plan.pane_relation)
        per_release = plan.per_release_budget(budget)
        cost = mechanism.privacy_cost(per_release)
        desc = dict(mechanism.describe(per_release))
        noise_scale = desc.pop("noise_scale", None)
        threshold = desc.pop("threshold", None)
        for reserved in ("mechanism", "privacy_unit", "windows", "panes", "releases"):
            desc.pop(reserved, None)
        if self.unit is not None and self.unit.is_user_level:
            # The report states the declared unit as display_data does: id and bounds.
            desc.setdefault("unit", self.unit.describe())
        self.charge = self.accountant.charge_plan(
            name,
            mechanism.name,
            cost,
            plan,
            noise_scale=noise_scale,
            threshold=threshold,
            **desc,
        )
        self.plan = plan
        self.per_release_budget = per_release
        self.calibrated_mechanism = mechanism
        self.release_label = name
        self._cost = cost
        self._noise_scale = noise_scale
        self._threshold = threshold
        return self.charge

    def _with_heartbeats(self, pcoll: beam.PCollection) -> beam.PCollection:
        """``pcoll`` plus one public heartbeat per window of the declared range."""
        starts = _window_starts(pcoll.windowing.windowfn, self.release_range)  # type: ignore[arg-type]
        beats = (
            pcoll.pipeline
            | "HeartbeatImpulse" >> beam.Impulse()
            | "Heartbeats" >> beam.ParDo(_EmitHeartbeats(starts))
            | "HeartbeatWindows" >> same_windowing(pcoll.windowing)
        )
        return (pcoll, beats) | "WithHeartbeats" >> beam.Flatten()

    def expand(
        self, pcoll: beam.PCollection, run_salt: beam.pvalue.AsSingleton
    ) -> beam.PCollection:
        """The exact combine and the noisy release of the planned release, applied to ``pcoll``.

        ``run_salt`` is the owner's run salt side input
        (:func:`~beam_dpsketch.transforms.base.run_salt_input`): the release draws its noise
        from ``noise_source.for_run(salt)``.
        """
        if self.plan is None or self.release_label is None:
            raise RuntimeError("a release step is expanded only after plan_for()")
        combine_fn = self.combine_fn
        if self.release_range is not None:
            pcoll = self._with_heartbeats(pcoll)
            combine_fn = _SkipHeartbeats(beam.CombineFn.maybe_from_callable(combine_fn))
        combine = beam.CombineGlobally(combine_fn)
        if not pcoll.windowing.is_default():
            # Defaults exist only for the default global windowing; elsewhere Beam's default
            # injection would drop pane information (and refuses non-global windows).
            combine = combine.without_defaults()
        combined = pcoll | "ExactCombine" >> combine
        release = _ReleaseDoFn(
            self.release_label,
            self.calibrated_mechanism,  # type: ignore[arg-type]
            self.plan,
            self.per_release_budget,  # type: ignore[arg-type]
            self._cost,  # type: ignore[arg-type]
            self.noise_source,
            self.with_metadata,
            self._noise_scale,
            self._threshold,
        )
        return combined | "NoisyRelease" >> beam.ParDo(release, run_salt).with_output_types(Any)


class _ApplyReleaseStep(beam.PTransform):
    """Apply a planned :class:`ReleaseStep` (the composite that owns it charged already)."""

    def __init__(self, step: ReleaseStep, run_salt: beam.pvalue.AsSingleton) -> None:
        super().__init__()
        self._step = step
        self._run_salt = run_salt

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return self._step.expand(pcoll, self._run_salt)


class DPAggregate(DPTransform):
    """Exact ``CombineGlobally`` per window and pane, then one accounted, noisy release per pane.

    Parameters
    ----------
    combine_fn
        Exact ``CombineFn`` (or callable) building the aggregate of a pane; it must not add noise.
    mechanism
        The :class:`ReleaseMechanism` turning each pane's aggregate into released records.
    budget
        Total budget of this transform for one privacy unit, split evenly over the releases the
        unit can influence. If ``None``, the transform gets a share of ``accountant``'s pool by
        ``budget_weight`` (see :class:`~beam_dpsketch.transforms.base.DPTransform`).
    budget_weight
        Without ``budget``: the transform's weight in ``accountant``'s pool (default 1).
    accountant
        Where the cost is charged (shared by the transforms of a pipeline to enforce a pipeline
        budget). If ``None``, a private accountant with exactly ``budget`` is created.
    privacy_unit
        A :class:`~beam_dpsketch.privacy.PrivacyUnit`. ``PrivacyUnit()`` (the default): element
        level, neighbouring inputs differ by one element. A user-level unit
        (``PrivacyUnit(id=..., max_contributions=..., max_windows=...)``): neighbouring inputs
        differ by all contributions of one unit, which the caller must have bounded upstream
        (e.g. with :class:`~beam_dpsketch.transforms.BoundContributions`) and reflected in the
        mechanism's sensitivity; this transform does not read the ``id``. ``max_windows`` is the
        declared maximum of windows one unit influences.
    windowing
        A :class:`~beam_dpsketch.privacy.Windowing` declaring ``max_panes_per_window`` (required
        when the trigger can fire more than once; panes beyond it are withheld, never emitted and
        not counted anywhere), ``data_independent_panes`` and ``release_range`` (every window of
        a public event-time range is released, empty ones included, and no other window).
        Default: nothing declared.
    noise_source
        Secret key of the noise. Default: ``NoiseSource()`` with a fresh ``os.urandom`` key.
        Either way the transform derives its own key from it here, once
        (:func:`~beam_dpsketch.noise.application_source`), which travels pickled to the workers;
        each run salts it with a value drawn when the run starts, so a retry reuses the noise of
        its run and another run draws new noise.
    with_metadata
        If true, emit one :class:`Release` per pane instead of the bare records.
    label
        Beam label of the transform and name of its release (part of every release id, and the
        name charged to the accountant). Default: the class name as Beam label, and the
        transform's full label in the pipeline as release name. The noise key is derived per
        transform application (:meth:`~beam_dpsketch.noise.NoiseSource.for_application`) and
        salted per run (:meth:`~beam_dpsketch.noise.NoiseSource.for_run`), so a label never
        makes two transforms, or two runs of one pipeline, draw the same noise; only an insecure
        test source (``NoiseSource.insecure_for_tests``) reproduces noise.
    input_windowing
        The Beam windowing strategy the release plan is read from; default: the input's. A
        composite that transforms its input before aggregating (e.g. with a ``GroupByKey``)
        passes its own input's windowing here.

    Raises
    ------
    ValueError
        At construction or application: invalid parameters, a trigger that needs
        ``Windowing(max_panes_per_window=...)``, a budget kind the mechanism cannot spend, or a trigger with
        an ``AfterProcessingTime`` part (pane contents shift unboundedly when one element is
        removed).
    BudgetExceededError
        When applied, if the charge does not fit in the accountant (before anything runs).

    Notes
    -----
    **Privacy guarantee.** If ``mechanism`` is ``b``-private for one release under the pane
    relation of the plan, the transform's output is ``budget``-DP (pure/approximate DP or zCDP,
    as ``budget``) under the add/remove relation of the chosen privacy unit (one element by
    default; one unit's bounded contributions with a user-level ``privacy_unit``): each of the ``R``
    releases one unit can influence gets ``budget / R`` (basic composition), panes beyond the
    declared maximum are never emitted, and windows that do not contain a unit compose in
    parallel.

    **Conditions.** Noise protects the released values. Which windows are released is protected
    only with a declared ``release_range`` (or in the global window, which is always released);
    otherwise a window without data is not released. With a trigger whose firings depend on the
    data (count-based early firings, late firings), the number and timing of panes are not
    protected either. :meth:`explain` lists every such condition of the actual configuration
    (see ``docs/privacy-model.md``, "What the noise does not hide").
    """

    def __init__(
        self,
        combine_fn: Any,
        mechanism: ReleaseMechanism,
        *,
        budget: PrivacyBudget | None = None,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        input_windowing: Any = None,
    ) -> None:
        if not isinstance(mechanism, ReleaseMechanism):
            raise TypeError(f"mechanism must be a ReleaseMechanism, got {type(mechanism).__name__}")
        unit = check_privacy_unit(privacy_unit)
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        mechanism.check_budget(budget if budget is not None else self.accountant.budget)
        self._step = ReleaseStep(
            combine_fn,
            mechanism,
            accountant=self.accountant,
            noise_source=self.noise_source,
            privacy_unit=unit,
            windowing=check_windowing(windowing),
            with_metadata=with_metadata,
        )
        self._windowing = input_windowing

    @property
    def plan(self) -> ReleasePlan | None:
        """The release plan (once applied)."""
        return self._step.plan

    @property
    def per_release_budget(self) -> PrivacyBudget | None:
        """The budget of one release (once applied)."""
        return self._step.per_release_budget

    @property
    def calibrated_mechanism(self) -> ReleaseMechanism | None:
        """The mechanism calibrated for the plan's pane relation (once applied)."""
        return self._step.calibrated_mechanism

    def output_type(self) -> Any:
        return step_output_type(self._step)

    def display_parameters(self) -> dict[str, Any]:
        return _step_parameters(self._step)

    def windowing_declaration(self) -> WindowingDeclaration:
        return self._step.declaration

    def judged_windowing(self, pcoll: beam.PCollection) -> Any:
        return self._windowing if self._windowing is not None else pcoll.windowing

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        return self._step.plan_for(self.judged_windowing(pcoll), name, self)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        return self._step.expand(pcoll, self.run_salt)  # type: ignore[arg-type]


def step_output_type(step: ReleaseStep) -> Any:
    """What a release step emits: :class:`Release` objects with metadata, else its records."""
    return Release if step.with_metadata else step.mechanism.record_type


def _step_parameters(step: ReleaseStep) -> dict[str, Any]:
    # The same facts the accountant's report shows for the charge: unit, panes, windows, range.
    return {
        "mechanism": step.mechanism.name,
        "privacy_unit": step.privacy_unit if step.unit is None else step.unit.describe(),
        "max_panes_per_window": step.max_panes_per_window,
        "max_windows_per_unit": step.max_windows_per_unit,
        "data_independent_panes": step.data_independent_panes or None,
        "release_range": None if step.release_range is None else str(step.release_range),
    }


class AccountedTransform(DPTransform):
    """Base of the DP transforms built on one :class:`ReleaseStep` (``self._step``).

    A composite builds its step with :meth:`_build_step` and applies it with
    :meth:`_apply_step` at the end of its :meth:`expand_release`. The release plan is read from
    the composite's *input* windowing, which is the user's (a ``GroupByKey`` inside the
    composite would replace the trigger by its continuation), and charged when the composite is
    applied.
    """

    _step: ReleaseStep

    @property
    def aggregate(self) -> ReleaseStep:
        """The release step (plan, charge and calibrated mechanism once applied)."""
        return self._step

    def display_parameters(self) -> dict[str, Any]:
        return _step_parameters(self._step)

    def windowing_declaration(self) -> WindowingDeclaration:
        return self._step.declaration

    def output_type(self) -> Any:
        return step_output_type(self._step)

    def _build_step(self, combine_fn: Any, mechanism: ReleaseMechanism, **options: Any) -> None:
        """Create the release step with this transform's accountant and noise source."""
        mechanism.check_budget(self.budget if self.budget is not None else self.accountant.budget)
        self._step = ReleaseStep(
            combine_fn,
            mechanism,
            accountant=self.accountant,
            noise_source=self.noise_source,
            **options,
        )

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        return self._step.plan_for(pcoll.windowing, name, self)

    def _apply_step(self, pcoll: beam.PCollection) -> beam.PCollection:
        return pcoll | "DPAggregate" >> _ApplyReleaseStep(self._step, self.run_salt)  # type: ignore[arg-type]
