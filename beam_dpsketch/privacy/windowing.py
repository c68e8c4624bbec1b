"""How many releases one privacy unit can influence, read from a PCollection's windowing.

In Beam every window and every trigger firing (pane) of a windowed aggregation is a separate
release (docs/privacy-model.md#how-windows-and-panes-are-charged). :func:`plan_releases` reads a real windowing strategy
(``pcoll.windowing``: ``windowfn``, ``triggerfn``, ``accumulation_mode``, ``allowed_lateness``) at
pipeline construction and returns a :class:`ReleasePlan`: windows per unit x panes charged per
window = releases per unit, which a transform passes to
:meth:`~beam_dpsketch.privacy.accountant.PrivacyAccountant.charge_plan`.

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
    (:func:`max_trigger_firings`). A trigger that can fire more than once needs a declared
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

Nothing here imports Beam at module import time (the ``sketches`` layer may import ``privacy``);
Beam classes are imported inside the functions that inspect them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Literal

from ..checks import check_int
from .budget import PrivacyBudget

__all__ = [
    "PrivacyUnit",
    "ReleasePlan",
    "check_element_count_trigger",
    "check_release_range",
    "max_trigger_firings",
    "plan_releases",
]

PrivacyUnit = Literal["element", "user"]
_PRIVACY_UNITS = ("element", "user")


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


# --------------------------------------------------------------------------------------------
# Trigger analysis
# --------------------------------------------------------------------------------------------


def _lateness_micros(value: Any) -> int:
    if value is None:
        return 0
    micros = getattr(value, "micros", None)
    if micros is not None:
        return int(micros)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ValueError(f"allowed_lateness must be a Duration or seconds >= 0, got {value!r}")
    return round(float(value) * 1_000_000)


def max_trigger_firings(trigger: Any, allowed_lateness: Any = 0) -> int | None:
    """Upper bound on the panes ``trigger`` can emit per window, or ``None`` if unbounded.

    Rules (Beam Python SDK 2.77 semantics, ``apache_beam/transforms/trigger.py``):

    * ``DefaultTrigger``: the on-time pane; with ``allowed_lateness > 0`` also one late pane per
      late arrival, so unbounded.
    * ``AfterWatermark(early, late)``: the on-time pane, plus unbounded early firings if ``early``
      is set (Beam wraps it in ``Repeatedly``), plus unbounded late firings if ``late`` is set and
      ``allowed_lateness > 0``. Without ``late`` the trigger finishes on time.
    * ``AfterCount``, ``AfterProcessingTime`` (and Beam's internal synchronized processing-time
      continuation), ``Never``: at most once (a once-trigger that finishes closes the window; a
      final pane at expiry replaces, never adds to, its single firing).
    * ``Repeatedly``, ``Always``: unbounded.
    * ``AfterAny``/``AfterAll``/``OrFinally``: 1 if every sub-trigger fires at most once, else
      the sum of the sub-triggers' bounds (unbounded if any is).
    * ``AfterEach``: the sum of its sub-triggers' bounds.
    * any other ``TriggerFn``: unbounded (conservative).

    Parameters
    ----------
    trigger
        A Beam ``TriggerFn``.
    allowed_lateness
        ``apache_beam.utils.timestamp.Duration`` or seconds.
    """
    from apache_beam.transforms import trigger as tr

    lateness = _lateness_micros(allowed_lateness)

    def bound(t: Any) -> int | None:
        if isinstance(t, tr.DefaultTrigger):
            return 1 if lateness == 0 else None
        if isinstance(t, tr.AfterWatermark):
            if t.early is not None:
                return None
            if t.late is not None and lateness > 0:
                return None
            return 1
        if isinstance(t, tr.AfterCount | tr.AfterProcessingTime | tr._Never):
            return 1
        if type(t).__name__ == "_AfterSynchronizedProcessingTime":
            return 1
        if isinstance(t, tr.Repeatedly | tr.Always):
            return None
        if isinstance(t, tr.AfterAny | tr.AfterAll):  # OrFinally subclasses AfterAny
            subs = [bound(s) for s in t.triggers]
            if all(s == 1 for s in subs):
                return 1
            if any(s is None for s in subs):
                return None
            return sum(subs)  # type: ignore[arg-type]
        if isinstance(t, tr.AfterEach):
            subs = [bound(s) for s in t.triggers]
            if any(s is None for s in subs):
                return None
            return sum(subs)  # type: ignore[arg-type]
        return None

    return bound(trigger)


def _data_driven_reasons(trigger: Any, lateness: int) -> list[str]:
    """Built-in trigger components whose firing depends on the data."""
    from apache_beam.transforms import trigger as tr

    reasons: list[str] = []

    def walk(t: Any, where: str) -> None:
        if isinstance(t, tr.AfterCount):
            reasons.append(
                f"{where}AfterCount({t.count}) fires after a number of elements, so pane times, "
                "contents and the number of panes depend on the data"
            )
        elif isinstance(t, tr.AfterProcessingTime):
            reasons.append(
                f"{where}AfterProcessingTime({t.delay}) starts its delay at the first element of "
                "a pane, so pane boundaries depend on the data"
            )
        elif isinstance(t, tr.Always):
            reasons.append(f"{where}Always() fires on every element")
        elif isinstance(t, tr.DefaultTrigger):
            if lateness > 0:
                reasons.append(
                    f"{where}DefaultTrigger with allowed_lateness > 0 fires a late pane for each "
                    "late arrival"
                )
        elif isinstance(t, tr.AfterWatermark):
            if t.early is not None:
                walk(t.early.underlying, f"{where}early firing ")
            if t.late is not None and lateness > 0:
                reasons.append(f"{where}late firings happen only when late data arrive")
                walk(t.late.underlying, f"{where}late firing ")
        elif isinstance(t, tr.Repeatedly):
            walk(t.underlying, where)
        elif isinstance(t, tr.AfterAny | tr.AfterAll | tr.AfterEach):
            for s in t.triggers:
                walk(s, where)

    walk(trigger, "")
    return reasons


def check_element_count_trigger(windowing: Any, name: str) -> None:
    """Refuse ``AfterCount(n)`` with ``n > 1`` where a transform triggers on its own batches.

    A transform that packs its input into key batches before the aggregation it triggers
    (DPHeavyHitters, DPFrequencies, DPQuantiles) reaches the trigger with batches, not rows:
    ``AfterCount(n)`` would count batches of thousands of rows, so an early pane declared (and
    charged) for every ``n`` rows would in practice almost never fire. ``AfterCount(1)`` fires on
    every arrival either way and is accepted.

    Raises
    ------
    ValueError
        Naming ``name`` and the trigger (a public parameter).
    """
    from apache_beam.transforms import trigger as tr

    def counts(t: Any) -> list[int]:
        if isinstance(t, tr.AfterCount):
            return [t.count]
        found: list[int] = []
        for attr in ("early", "late", "underlying"):
            inner = getattr(t, attr, None)
            if inner is not None:
                found += counts(inner)
        for inner in getattr(t, "triggers", None) or ():
            found += counts(inner)
        return found

    trigger = windowing.triggerfn
    if any(n > 1 for n in counts(trigger)):
        raise ValueError(
            f"{name}: the trigger {trigger!r} counts elements, but this transform batches its "
            "input before the triggered aggregation, so AfterCount(n) would count batches of "
            "rows and its panes would not fire as declared. Use AfterCount(1), a processing-time "
            "or watermark trigger, or trigger a transform that receives rows"
        )


# --------------------------------------------------------------------------------------------
# Window analysis
# --------------------------------------------------------------------------------------------


def _duration_s(micros: int) -> str:
    return f"{micros / 1_000_000:g}s"


def _check_optional_int(value: object, name: str) -> int | None:
    return None if value is None else check_int(value, name)


def _windowing_of(windowing_or_pcoll: Any) -> Any:
    windowing = getattr(windowing_or_pcoll, "windowing", None)
    if windowing is not None and not hasattr(windowing_or_pcoll, "windowfn"):
        return windowing
    for attr in ("windowfn", "triggerfn", "accumulation_mode"):
        if not hasattr(windowing_or_pcoll, attr):
            raise TypeError(
                "expected a PCollection or a Beam Windowing (with windowfn, triggerfn, "
                f"accumulation_mode, allowed_lateness), got {type(windowing_or_pcoll).__name__}"
            )
    return windowing_or_pcoll


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


def plan_releases(
    windowing: Any,
    *,
    privacy_unit: PrivacyUnit = "element",
    max_panes_per_window: int | None = None,
    max_windows_per_unit: int | None = None,
    data_independent_panes: bool = False,
    release_range: tuple[float, float] | None = None,
) -> ReleasePlan:
    """Build the :class:`ReleasePlan` of a windowing strategy, at pipeline construction.

    Parameters
    ----------
    windowing
        ``pcoll.windowing`` (a Beam ``Windowing``) or the PCollection itself.
    privacy_unit
        ``"element"`` (default: neighbours add or remove one element) or ``"user"`` (one
        privacy unit's bounded contributions; see :mod:`beam_dpsketch.privacy.bounding`).
    max_panes_per_window
        Declared maximum panes per window. Required when the trigger can fire more than once;
        panes beyond it must be withheld by the release step.
    max_windows_per_unit
        Declared maximum windows one privacy unit influences. Required at user level for every
        WindowFn but ``GlobalWindows``, and for ``Sessions`` at either level. At element level for
        Fixed/Sliding windows the count is computed, and a smaller declared value is an error.
    data_independent_panes
        Caller's assertion that pane boundaries do not depend on the data. Refused for triggers
        with a built-in data-driven component. Only then does DISCARDING mode at element level
        charge one pane per window.
    release_range
        Public event-time range ``(start, end)`` in seconds for Fixed and Sliding windows: the
        release step then releases every window that starts in ``[start, end)``, empty ones
        included, and no other window, so that whether a window is released no longer depends on
        the data. Refused for other WindowFns.

    Returns
    -------
    ReleasePlan

    Raises
    ------
    ValueError
        Naming the parameter: an unbounded trigger without ``max_panes_per_window``, Sessions or
        user level without ``max_windows_per_unit``, an unsupported WindowFn, ...
    """
    from apache_beam.transforms import trigger as tr
    from apache_beam.transforms import window as bw

    w = _windowing_of(windowing)
    if privacy_unit not in _PRIVACY_UNITS:
        raise ValueError(f"privacy_unit must be one of {_PRIVACY_UNITS}, got {privacy_unit!r}")
    max_panes = _check_optional_int(max_panes_per_window, "max_panes_per_window")
    max_windows = _check_optional_int(max_windows_per_unit, "max_windows_per_unit")
    if not isinstance(data_independent_panes, bool):
        raise TypeError("data_independent_panes must be a bool")
    release_range = check_release_range(release_range)

    lateness = _lateness_micros(getattr(w, "allowed_lateness", 0))
    windowfn = w.windowfn
    triggerfn = w.triggerfn
    if w.accumulation_mode == tr.AccumulationMode.ACCUMULATING:
        accumulation = "accumulating"
    elif w.accumulation_mode == tr.AccumulationMode.DISCARDING:
        accumulation = "discarding"
    else:
        raise ValueError(f"unknown accumulation_mode {w.accumulation_mode!r}")

    notes: list[str] = []
    schedule: list[str] = []

    # ---- windows ------------------------------------------------------------------------------
    if isinstance(windowfn, bw.GlobalWindows):
        if release_range is not None:
            raise ValueError(
                "release_range applies to FixedWindows and SlidingWindows only: the global "
                "window is always released"
            )
        window_desc = "GlobalWindows"
        windows = 1
        notes.append("GlobalWindows: every element is in the single global window.")
    elif isinstance(windowfn, bw.FixedWindows):
        size = int(windowfn.size.micros)
        window_desc = f"FixedWindows(size={_duration_s(size)})"
        if privacy_unit == "element":
            windows = 1
            notes.append(
                "FixedWindows: an element is in exactly one window; the other windows are "
                "unaffected by it, so windows compose in parallel (1 window per element)."
            )
        else:
            if max_windows is None:
                raise ValueError(
                    "max_windows_per_unit is required for privacy_unit='user' with "
                    "FixedWindows: one user can appear in many windows, which compose "
                    "sequentially; declare and enforce a bound"
                )
            windows = max_windows
            notes.append(
                f"FixedWindows, user level: a user may appear in up to {windows} windows "
                "(declared max_windows_per_unit, enforced by contribution bounding), which "
                "compose sequentially."
            )
        _empty_window_note(release_range, notes, schedule)
    elif isinstance(windowfn, bw.SlidingWindows):
        size = int(windowfn.size.micros)
        period = int(windowfn.period.micros)
        window_desc = f"SlidingWindows(size={_duration_s(size)}, period={_duration_s(period)})"
        per_element = -(-size // period)  # ceil(size / period), exact in integers
        if privacy_unit == "element":
            windows = per_element
            notes.append(
                f"SlidingWindows: an element is in ceil(size/period) = {per_element} windows, "
                "which compose sequentially."
            )
        else:
            if max_windows is None:
                raise ValueError(
                    "max_windows_per_unit is required for privacy_unit='user' with "
                    f"SlidingWindows: each of a user's elements is in {per_element} windows and "
                    "a user can have elements at many times; declare and enforce a bound"
                )
            windows = max_windows
            notes.append(
                f"SlidingWindows, user level: a user may appear in up to {windows} windows "
                f"(declared; each element alone is in {per_element}), composed sequentially."
            )
        _empty_window_note(release_range, notes, schedule)
    elif isinstance(windowfn, bw.Sessions):
        if release_range is not None:
            raise ValueError("release_range applies to FixedWindows and SlidingWindows only")
        window_desc = f"Sessions(gap={_duration_s(int(windowfn.gap_size.micros))})"
        if max_windows is None:
            raise ValueError(
                "Sessions are refused unless bounded: session boundaries depend on the data (one "
                "element can merge or split sessions), so declare max_windows_per_unit, the "
                "maximum number of session windows one privacy unit can influence"
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
    else:
        raise ValueError(
            f"unsupported WindowFn {type(windowfn).__name__}: supported are GlobalWindows, "
            "FixedWindows, SlidingWindows and (bounded) Sessions"
        )
    if (
        privacy_unit == "element"
        and max_windows is not None
        and not isinstance(windowfn, bw.Sessions)
    ):
        if max_windows < windows:
            raise ValueError(
                f"max_windows_per_unit={max_windows} is below the {windows} windows every element "
                f"is assigned to by {window_desc}"
            )
        notes.append(
            f"max_windows_per_unit={max_windows} ignored at element level: the WindowFn fixes "
            f"{windows}."
        )
    if privacy_unit == "user" and isinstance(windowfn, bw.GlobalWindows) and max_windows:
        notes.append("max_windows_per_unit ignored: GlobalWindows has one window.")

    # ---- panes --------------------------------------------------------------------------------
    firings = max_trigger_firings(triggerfn, lateness)
    trigger_reasons = _data_driven_reasons(triggerfn, lateness)
    if firings == 1:
        panes = 1
        notes.append(f"Trigger {triggerfn!r} fires at most once per window: 1 pane.")
        if max_panes is not None and max_panes > 1:
            notes.append(f"max_panes_per_window={max_panes} not needed: the trigger fires once.")
    else:
        shown = "an unbounded number of" if firings is None else f"up to {firings}"
        if max_panes is None:
            raise ValueError(
                f"trigger {triggerfn!r} (allowed_lateness={_duration_s(lateness)}) can fire "
                f"{shown} panes per window; declare max_panes_per_window (panes beyond it are "
                "withheld)"
            )
        panes = max_panes
        notes.append(
            f"Trigger {triggerfn!r} can fire {shown} panes per window; the declared maximum "
            f"{panes} is charged and any further pane is withheld. Every pane counts, "
            "including an empty ON_TIME pane."
        )
    if data_independent_panes and trigger_reasons:
        raise ValueError(
            "data_independent_panes=True contradicts the trigger: " + "; ".join(trigger_reasons)
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
    if privacy_unit == "element" and not isinstance(windowfn, bw.GlobalWindows | bw.Sessions):
        composition += "; windows not containing the element compose in parallel"

    header = (
        f"{window_desc}, trigger {triggerfn!r}, {accumulation}, allowed lateness "
        f"{_duration_s(lateness)}, privacy unit {privacy_unit}: {windows} window(s) x "
        f"{charged} pane(s) = {releases} release(s) per {privacy_unit}."
    )
    lines = [header, *("  - " + n for n in notes)]
    if schedule:
        lines.append("  Data-dependent release schedule (noise does not hide these):")
        lines.extend("  - " + s for s in schedule)

    return ReleasePlan(
        window_fn=window_desc,
        trigger=repr(triggerfn),
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
