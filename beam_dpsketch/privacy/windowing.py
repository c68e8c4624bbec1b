"""How many releases one privacy unit can influence, from the shape of a windowing.

In Beam every window and every trigger firing (pane) of a windowed aggregation is a separate
release (docs/privacy-model.md#how-windows-and-panes-are-charged). :func:`plan_windowing` takes
the shape of a windowing strategy (a :class:`WindowShape`, a :class:`TriggerShape`, the
accumulation mode and the allowed lateness) and the declared bounds, and returns a
:class:`ReleasePlan`: windows per unit x panes charged per window = releases per unit, which a
transform passes to :meth:`~beam_dpsketch.privacy.accountant.PrivacyAccountant.charge_plan`. A
declaration the plan cannot account for raises :class:`PlanRefused`, which names the parameter
and a value of it that is accepted.

This module is pure logic and never imports Beam. Reading a Beam windowing strategy into these
shapes (``pcoll.windowing``: ``windowfn``, ``triggerfn``, ``accumulation_mode``,
``allowed_lateness``), the trigger analysis, and every rule about which windowings, triggers
and runners a transform accepts are in :mod:`beam_dpsketch.transforms.windowing_rules`
(:func:`~beam_dpsketch.transforms.windowing_rules.plan_releases`,
:func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing`).

Windows
    * ``GlobalWindows``: one window.
    * ``FixedWindows``: an element is in exactly one window; windows that do not contain it
      release the same distribution on both neighbours, so windows compose in parallel and cost
      1 window per element (docs/algorithms.md#lin-merge; docs/algorithms.md#int-beam). At user level a unit may appear in many windows:
      windows then compose sequentially over the declared ``max_windows_per_unit``, which the
      contribution-bounding step must enforce.
    * ``SlidingWindows(size, period)``: an element is in ``ceil(size/period)`` windows, which
      compose sequentially (docs/algorithms.md#int-beam).
    * ``Sessions``: window boundaries are a function of the data (one element can merge or split
      sessions), so the number of windows an element influences is unbounded in general; the
      planner refuses unless ``max_windows_per_unit`` declares a bound, and reports the schedule
      as data-dependent.

Panes
    The trigger's maximum number of firings per window is derived from its structure
    (:func:`~beam_dpsketch.transforms.windowing_rules.max_trigger_firings`). A trigger that can fire more than once needs a declared
    ``max_panes_per_window``; the release step must withhold every pane with index
    ``>= max_panes_per_window`` (never release it unaccounted). How many panes were withheld
    depends on the data, so it is not counted in a Beam metric either.
    Every pane counts, including an empty ON_TIME pane (DISCARDING mode emits one under the
    default trigger, as measured on the Beam 2.77 DirectRunner and checked in the tests).

    * ACCUMULATING: each later pane re-releases every element seen so far, so all panes of a
      window compose sequentially for an element.
    * DISCARDING: each element is in exactly one pane, but with Beam's built-in multi-firing
      triggers the pane *boundaries* depend on the data (``AfterCount`` counts elements,
      ``AfterProcessingTime`` starts its delay at a pane's first element, late panes fire because
      late data arrived). Removing one element then shifts later elements into other panes, so
      every pane of the window can differ. The planner therefore charges all panes in both modes.
      Only if the caller asserts ``data_independent_panes=True`` (allowed only for triggers with
      no built-in data-driven component) does an element at element level cost a single pane in
      DISCARDING mode: the panes then partition the window's data in a fixed way (parallel
      composition).

    When pane boundaries shift, a pane's input differs between neighbours by one element removed
    *and* another added, so the plan's ``pane_relation`` is ``"replace"`` and the mechanism must be
    calibrated for replacement (e.g. docs/algorithms.md#lin-sensitivity ``replace`` sensitivities, or
    group privacy of size 2, [LT23, Definition 1]). With one pane per window, or data-
    independent panes, it is ``"add_remove"``.

Data-dependent schedules
    The noise covers the released *values*, not *whether or when* a release happens. Beam emits no
    pane for a window that received no elements, and count or first-element triggers fire at
    data-dependent times, so the existence and timing of panes can reveal data (docs/algorithms.md#int-beam). The plan lists every such reason in
    ``data_dependent_schedule``. With a declared ``release_range`` (a public event-time range),
    every Fixed or Sliding window that starts in the range is released, empty ones included (the
    release step injects one public heartbeat per window), and no other window is: the set of
    windows released is then public.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .budget import PrivacyBudget

__all__ = [
    "PANES_EXAMPLE",
    "WINDOW_KINDS",
    "PlanRefused",
    "ReleasePlan",
    "TriggerShape",
    "UnitLevel",
    "WindowShape",
    "WindowingDeclaration",
    "check_release_range",
    "plan_windowing",
]

#: The level of a privacy unit: one element, or all contributions of one user.
UnitLevel = Literal["element", "user"]

#: Window functions a plan can account for: ``GlobalWindows``, ``FixedWindows``,
#: ``SlidingWindows`` and (bounded) ``Sessions``.
WINDOW_KINDS = ("global", "fixed", "sliding", "sessions")

#: The ``max_panes_per_window`` a refusal proposes for a trigger without a finite bound: an
#: example of an accepted value (each pane up to it is charged, later ones are withheld).
PANES_EXAMPLE = 4


class PlanRefused(ValueError):
    """A declaration the release plan cannot account for.

    Attributes
    ----------
    parameter
        The declaration parameter at fault (e.g. ``"max_panes_per_window"``).
    accepted
        Declaration values with which the same windowing is accepted, e.g.
        ``{"max_panes_per_window": 4}`` (public parameters only).
    """

    def __init__(self, parameter: str, reason: str, accepted: Mapping[str, Any]) -> None:
        super().__init__(reason)
        self.parameter = parameter
        self.accepted = dict(accepted)


@dataclass(frozen=True)
class WindowShape:
    """What a plan needs of a window function.

    Attributes
    ----------
    kind
        One of :data:`WINDOW_KINDS`.
    description
        For reports, e.g. ``"SlidingWindows(size=30s, period=10s)"``.
    size_micros, period_micros
        Window size and period (``FixedWindows``: period = size; 0 where not applicable).
    """

    kind: str
    description: str
    size_micros: int = 0
    period_micros: int = 0

    def __post_init__(self) -> None:
        if self.kind not in WINDOW_KINDS:
            raise ValueError(f"kind must be one of {WINDOW_KINDS}, got {self.kind!r}")

    @property
    def windows_per_element(self) -> int | None:
        """Windows one element is assigned to; ``None`` for sessions (data-dependent)."""
        if self.kind in ("global", "fixed"):
            return 1
        if self.kind == "sliding":
            return -(-self.size_micros // self.period_micros)  # ceil(size / period), exact
        return None


@dataclass(frozen=True)
class TriggerShape:
    """What a plan needs of a trigger.

    Attributes
    ----------
    description
        ``repr`` of the trigger.
    max_firings
        Upper bound on the panes it can fire per window under the allowed lateness, ``None`` if
        unbounded.
    data_driven
        Reasons why its firings depend on the data (empty if none).
    """

    description: str
    max_firings: int | None
    data_driven: tuple[str, ...] = ()


def _optional_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class WindowingDeclaration:
    """What the user declares about the windowing: the bounds the release plan relies on.

    The same parameters of the same name on every DP transform that releases per window and
    pane (``DPAggregate``, ``DPCount``, ``DPHistogram``, ``DPHeavyHitters``, ``DPFrequencies``,
    ``DPQuantiles``); a value object, so that a transform states it once.

    Attributes
    ----------
    privacy_unit
        ``"element"`` or ``"user"``.
    max_panes_per_window
        Maximum panes released per window (required when the trigger can fire more than once;
        later panes are withheld).
    max_windows_per_unit
        Maximum windows one privacy unit influences (required at user level for fixed and
        sliding windows, and for sessions).
    data_independent_panes
        The caller's assertion that pane boundaries do not depend on the data.
    release_range
        Public event-time range ``(start, end)`` in seconds whose windows are all released.
    unit
        The :class:`~beam_dpsketch.privacy.declarations.PrivacyUnit` this declaration was made
        from, when the transform took one (``None`` for separate parameters): a refusal then
        proposes its changes as ``privacy_unit=PrivacyUnit(...)`` and ``windowing=Windowing(...)``
        (:func:`~beam_dpsketch.privacy.declarations.spell_accepted`).

    Raises
    ------
    ValueError, TypeError
        Naming the parameter, for a value of the wrong type or range.
    """

    privacy_unit: UnitLevel = "element"
    max_panes_per_window: int | None = None
    max_windows_per_unit: int | None = None
    data_independent_panes: bool = False
    release_range: tuple[float, float] | None = None
    unit: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.privacy_unit not in ("element", "user"):
            raise ValueError(f"privacy_unit must be 'element' or 'user', got {self.privacy_unit!r}")
        panes = _optional_count(self.max_panes_per_window, "max_panes_per_window")
        windows = _optional_count(self.max_windows_per_unit, "max_windows_per_unit")
        if not isinstance(self.data_independent_panes, bool):
            raise TypeError("data_independent_panes must be a bool")
        object.__setattr__(self, "max_panes_per_window", panes)
        object.__setattr__(self, "max_windows_per_unit", windows)
        object.__setattr__(self, "release_range", check_release_range(self.release_range))


@dataclass(frozen=True)
class ReleasePlan:
    """How many releases one privacy unit can influence under a windowing strategy.

    Attributes
    ----------
    window_fn
        Description of the WindowFn, e.g. ``"SlidingWindows(size=30s, period=10s)"``.
    trigger
        ``repr`` of the trigger.
    accumulation_mode
        ``"discarding"`` or ``"accumulating"``.
    allowed_lateness
        Allowed lateness in seconds.
    privacy_unit
        ``"element"`` (add/remove one element) or ``"user"`` (one privacy unit, after
        contribution bounding).
    windows_per_element
        Windows one privacy unit can influence (sequential composition across them).
    panes_per_window
        Maximum panes any window may release: the cap the release step enforces.
    panes_charged_per_window
        Panes per window that one privacy unit influences (``panes_per_window``, or 1 for
        data-independent DISCARDING panes at element level).
    releases_per_element
        ``windows_per_element * panes_charged_per_window``: the count to charge.
    composition
        One-line summary of the composition.
    pane_relation
        ``"add_remove"`` or ``"replace"``: the neighbouring relation each pane's input obeys.
    data_dependent_schedule
        Reasons why the existence or timing of releases depends on the data (empty if none).
    explanation
        Multi-line reasoning, for reports.
    release_range
        Declared public event-time range ``(start, end)`` in seconds whose windows are all
        released (empty ones included), or ``None``.
    """

    window_fn: str
    trigger: str
    accumulation_mode: str
    allowed_lateness: float
    privacy_unit: str
    windows_per_element: int
    panes_per_window: int
    panes_charged_per_window: int
    releases_per_element: int
    composition: str
    pane_relation: str
    data_dependent_schedule: tuple[str, ...]
    explanation: str
    release_range: tuple[float, float] | None = None

    def allows_pane(self, pane_index: int) -> bool:
        """Whether a pane with Beam ``PaneInfo.index`` ``pane_index`` may be released.

        Panes ``0 .. panes_per_window - 1`` may; later ones must be withheld.
        """
        if isinstance(pane_index, bool) or not isinstance(pane_index, numbers.Integral):
            raise TypeError(f"pane_index must be an int, got {type(pane_index).__name__}")
        if pane_index < 0:
            raise ValueError(f"pane_index must be >= 0, got {pane_index}")
        return int(pane_index) < self.panes_per_window

    def per_release_budget(self, total: PrivacyBudget) -> PrivacyBudget:
        """Split ``total`` evenly over :attr:`releases_per_element` (rounded down)."""
        return total.divide(self.releases_per_element)


def _duration_s(micros: int) -> str:
    return f"{micros / 1_000_000:g}s"


def check_release_range(release_range: Any) -> tuple[float, float] | None:
    """``release_range`` as ``(start, end)`` seconds with ``start < end``, or ``None``."""
    if release_range is None:
        return None
    try:
        start, end = release_range
    except (TypeError, ValueError):
        raise TypeError("release_range must be a (start, end) pair of seconds or None") from None
    out = []
    for value in (start, end):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError("release_range must hold real numbers of seconds")
        if not float(value) == float(value) or abs(float(value)) == float("inf"):
            raise ValueError("release_range must be finite")
        out.append(float(value))
    if not out[0] < out[1]:
        raise ValueError(f"release_range must have start < end, got {tuple(out)!r}")
    return out[0], out[1]


def _empty_window_note(
    release_range: tuple[float, float] | None, notes: list[str], schedule: list[str]
) -> None:
    if release_range is None:
        schedule.append(
            "Beam emits no pane for a window without elements: whether a window is released "
            "reveals that it had data (declare release_range to release every window of a "
            "public event-time range, empty ones included)"
        )
        return
    notes.append(
        f"release_range [{release_range[0]:g}s, {release_range[1]:g}s): every window starting "
        "in it is released, empty ones included (one public heartbeat per window), and no "
        "other window is."
    )


def plan_windowing(
    window: WindowShape,
    trigger: TriggerShape,
    *,
    accumulation_mode: str,
    allowed_lateness_micros: int = 0,
    declaration: WindowingDeclaration | None = None,
) -> ReleasePlan:
    """Build the :class:`ReleasePlan` of a windowing's shape, at pipeline construction.

    Parameters
    ----------
    window, trigger
        The shapes of the window function and the trigger
        (:func:`~beam_dpsketch.transforms.windowing_rules.plan_releases` reads them from a Beam
        windowing strategy).
    accumulation_mode
        ``"discarding"`` or ``"accumulating"``.
    allowed_lateness_micros
        Allowed lateness in microseconds.
    declaration
        The declared bounds (default: none declared, element level). ``max_panes_per_window``
        is required when the trigger can fire more than once (panes beyond it must be withheld
        by the release step); ``max_windows_per_unit`` at user level for every window function
        but the global window, and for sessions at either level (at element level for fixed and
        sliding windows the count is computed, and a smaller declared value is refused);
        ``data_independent_panes`` is refused for triggers with a built-in data-driven
        component, and only with it does DISCARDING mode at element level charge one pane per
        window; ``release_range`` (fixed and sliding windows only) makes the release step
        release every window that starts in it, empty ones included, and no other window.

    Returns
    -------
    ReleasePlan
        Every release one privacy unit can influence is counted in
        :attr:`ReleasePlan.releases_per_element`; splitting the budget evenly over them gives
        the stated guarantee by basic composition.

    Raises
    ------
    PlanRefused
        Naming the parameter and an accepted value of it: a trigger that can fire more than
        once without ``max_panes_per_window``, sessions or user level without
        ``max_windows_per_unit``, a ``release_range`` for the global window or sessions, ...
    TypeError, ValueError
        For an argument of the wrong type or value.
    """
    if not isinstance(window, WindowShape) or not isinstance(trigger, TriggerShape):
        raise TypeError("window and trigger must be a WindowShape and a TriggerShape")
    d = WindowingDeclaration() if declaration is None else declaration
    if not isinstance(d, WindowingDeclaration):
        raise TypeError(f"declaration must be a WindowingDeclaration, got {type(d).__name__}")
    privacy_unit = d.privacy_unit
    max_panes = d.max_panes_per_window
    max_windows = d.max_windows_per_unit
    data_independent_panes = d.data_independent_panes
    release_range = d.release_range
    if accumulation_mode not in ("discarding", "accumulating"):
        raise ValueError(f"unknown accumulation_mode {accumulation_mode!r}")
    accumulation = accumulation_mode
    lateness = int(allowed_lateness_micros)
    window_desc = window.description
    trigger_desc = trigger.description

    notes: list[str] = []
    schedule: list[str] = []

    # ---- windows ------------------------------------------------------------------------------
    if window.kind == "global":
        if release_range is not None:
            raise PlanRefused(
                "release_range",
                "release_range applies to FixedWindows and SlidingWindows only: the global "
                "window is always released",
                {"release_range": None},
            )
        windows = 1
        notes.append("GlobalWindows: every element is in the single global window.")
    elif window.kind == "fixed":
        if privacy_unit == "element":
            windows = 1
            notes.append(
                "FixedWindows: an element is in exactly one window; the other windows are "
                "unaffected by it, so windows compose in parallel (1 window per element)."
            )
        else:
            if max_windows is None:
                raise PlanRefused(
                    "max_windows_per_unit",
                    "max_windows_per_unit is required for privacy_unit='user' with "
                    "FixedWindows: one user can appear in many windows, which compose "
                    "sequentially; declare and enforce a bound",
                    {"max_windows_per_unit": 1},
                )
            windows = max_windows
            notes.append(
                f"FixedWindows, user level: a user may appear in up to {windows} windows "
                "(declared max_windows_per_unit, enforced by contribution bounding), which "
                "compose sequentially."
            )
        _empty_window_note(release_range, notes, schedule)
    elif window.kind == "sliding":
        per_element = window.windows_per_element
        assert per_element is not None
        if privacy_unit == "element":
            windows = per_element
            notes.append(
                f"SlidingWindows: an element is in ceil(size/period) = {per_element} windows, "
                "which compose sequentially."
            )
        else:
            if max_windows is None:
                raise PlanRefused(
                    "max_windows_per_unit",
                    "max_windows_per_unit is required for privacy_unit='user' with "
                    f"SlidingWindows: each of a user's elements is in {per_element} windows and "
                    "a user can have elements at many times; declare and enforce a bound",
                    {"max_windows_per_unit": per_element},
                )
            windows = max_windows
            notes.append(
                f"SlidingWindows, user level: a user may appear in up to {windows} windows "
                f"(declared; each element alone is in {per_element}), composed sequentially."
            )
        _empty_window_note(release_range, notes, schedule)
    else:  # sessions
        if release_range is not None:
            raise PlanRefused(
                "release_range",
                "release_range applies to FixedWindows and SlidingWindows only",
                {"release_range": None},
            )
        if max_windows is None:
            raise PlanRefused(
                "max_windows_per_unit",
                "Sessions are refused unless bounded: session boundaries depend on the data (one "
                "element can merge or split sessions), so declare max_windows_per_unit, the "
                "maximum number of session windows one privacy unit can influence",
                {"max_windows_per_unit": 1},
            )
        windows = max_windows
        notes.append(
            f"Sessions: up to {windows} session windows per privacy unit (declared "
            "max_windows_per_unit), composed sequentially."
        )
        schedule.append(
            "Sessions: which windows exist depends on the data (an element can merge two "
            "sessions or open a new one)"
        )
    if privacy_unit == "element" and max_windows is not None and window.kind != "sessions":
        if max_windows < windows:
            raise PlanRefused(
                "max_windows_per_unit",
                f"max_windows_per_unit={max_windows} is below the {windows} windows every element "
                f"is assigned to by {window_desc}",
                {"max_windows_per_unit": windows},
            )
        notes.append(
            f"max_windows_per_unit={max_windows} ignored at element level: the WindowFn fixes "
            f"{windows}."
        )
    if privacy_unit == "user" and window.kind == "global" and max_windows:
        notes.append("max_windows_per_unit ignored: GlobalWindows has one window.")

    # ---- panes --------------------------------------------------------------------------------
    firings = trigger.max_firings
    trigger_reasons = list(trigger.data_driven)
    if firings == 1:
        panes = 1
        notes.append(f"Trigger {trigger_desc} fires at most once per window: 1 pane.")
        if max_panes is not None and max_panes > 1:
            notes.append(f"max_panes_per_window={max_panes} not needed: the trigger fires once.")
    else:
        shown = "an unbounded number of" if firings is None else f"up to {firings}"
        if max_panes is None:
            raise PlanRefused(
                "max_panes_per_window",
                f"trigger {trigger_desc} (allowed_lateness={_duration_s(lateness)}) can fire "
                f"{shown} panes per window; declare max_panes_per_window (panes beyond it are "
                "withheld)",
                {"max_panes_per_window": PANES_EXAMPLE if firings is None else firings},
            )
        panes = max_panes
        notes.append(
            f"Trigger {trigger_desc} can fire {shown} panes per window; the declared maximum "
            f"{panes} is charged and any further pane is withheld. Every pane counts, "
            "including an empty ON_TIME pane."
        )
    if data_independent_panes and trigger_reasons:
        raise PlanRefused(
            "data_independent_panes",
            "data_independent_panes=True contradicts the trigger: " + "; ".join(trigger_reasons),
            {"data_independent_panes": False},
        )
    schedule.extend(trigger_reasons)

    if panes == 1:
        charged = 1
        relation = "add_remove"
    elif accumulation == "accumulating":
        charged = panes
        relation = "add_remove" if data_independent_panes else "replace"
        notes.append(
            "ACCUMULATING: every later pane re-releases the element, so all "
            f"{panes} panes of a window compose sequentially."
        )
    elif data_independent_panes and privacy_unit == "element":
        charged = 1
        relation = "add_remove"
        notes.append(
            "DISCARDING with data-independent pane boundaries (asserted): an element is in "
            "exactly one pane and the other panes are unchanged, so panes compose in parallel "
            "(1 pane per element); empty panes are still released and noised."
        )
    else:
        charged = panes
        relation = "add_remove" if data_independent_panes else "replace"
        if privacy_unit == "user":
            why = "a user's elements can fall into different panes"
        else:
            why = (
                "pane boundaries depend on the data, so removing one element shifts later "
                "elements between panes"
            )
        notes.append(
            f"DISCARDING: each element is in one pane, but {why}; all {panes} panes of a "
            "window are charged sequentially."
        )
    if relation == "replace":
        notes.append(
            "Pane relation 'replace': a pane's input can differ by one element removed and "
            "another added; calibrate each release for replacement."
        )

    releases = windows * charged
    if releases == 1:
        composition = "single release"
    else:
        composition = (
            f"sequential over {releases} releases ({windows} window(s) x {charged} pane(s))"
        )
    if privacy_unit == "element" and window.kind in ("fixed", "sliding"):
        composition += "; windows not containing the element compose in parallel"

    header = (
        f"{window_desc}, trigger {trigger_desc}, {accumulation}, allowed lateness "
        f"{_duration_s(lateness)}, privacy unit {privacy_unit}: {windows} window(s) x "
        f"{charged} pane(s) = {releases} release(s) per {privacy_unit}."
    )
    lines = [header, *("  - " + n for n in notes)]
    if schedule:
        lines.append("  Data-dependent release schedule (noise does not hide these):")
        lines.extend("  - " + s for s in schedule)

    return ReleasePlan(
        window_fn=window_desc,
        trigger=trigger_desc,
        accumulation_mode=accumulation,
        allowed_lateness=lateness / 1_000_000,
        privacy_unit=privacy_unit,
        windows_per_element=windows,
        panes_per_window=panes,
        panes_charged_per_window=charged,
        releases_per_element=releases,
        composition=composition,
        pane_relation=relation,
        data_dependent_schedule=tuple(schedule),
        explanation="\n".join(lines),
        release_range=release_range,
    )
