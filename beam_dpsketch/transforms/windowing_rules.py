"""Every rule about which windowings, triggers and runners a DP transform accepts, in one place.

A DP transform's guarantee counts its releases from the windowing strategy of its input (window
function, trigger, accumulation mode, allowed lateness) and from the runner that will fire its
panes. :func:`accept_windowing` is the one function that judges a configuration: it takes the
input's windowing, the transform's :class:`WindowingDeclaration` (the bounds the user declared)
and :class:`WindowingRequirement` (what the transform's mechanism needs), and the runner's
:class:`~beam_dpsketch.transforms.engines.RunnerLimits`; it returns the
:class:`~beam_dpsketch.privacy.windowing.ReleasePlan` to charge, or raises one
:class:`WindowingRefused` that lists every rule the configuration breaks, each naming its
parameter, and then a configuration that **is** accepted (checked by running the same rules on
it before it is proposed), e.g. ``Accepted instead: trigger=AfterWatermark(early=AfterCount(1)),
max_panes_per_window=4``. Every DP transform calls it once when it is applied, before anything
is charged (:meth:`~beam_dpsketch.transforms.base.DPTransform.expand`).

The rules
---------
Runner (:mod:`~beam_dpsketch.transforms.engines` says what a runner keeps of Beam's model)
    * A runner that ignores windows and timestamps (``DaskRunner``) accepts only the global
      window with the default trigger.
    * A runner that fires no empty ON_TIME pane after early firings (Prism, and Beam's
      ``DirectRunner``, which hands pipelines to Prism) accepts no early firings: whether a
      release exists would depend on the data.
Trigger
    * No ``AfterProcessingTime`` part that can fire (unless the transform declares that panes
      are not its releases): its delay starts at a pane's first element, so removing one element
      can move any number of others into a pane and no sensitivity holds.
    * A transform that batches its input before the triggered aggregation accepts
      ``AfterCount(n)`` only for ``n = 1``: it would count batches, not rows.
    * A trigger that can fire more than once needs ``max_panes_per_window``; panes beyond it are
      withheld (:func:`~beam_dpsketch.privacy.windowing.plan_windowing`, which also holds the
      rules on the windows per unit, ``data_independent_panes`` and ``release_range``). A
      transform that takes its declaration as ``PrivacyUnit`` and ``Windowing`` objects is told
      the field of the object to give (``PrivacyUnit(max_windows=...)``).
Transform requirements (:class:`WindowingRequirement`)
    A mechanism may need a trigger that fires once per window, one that fires on the watermark
    only, no allowed lateness, DISCARDING panes, some window functions only, or the default
    windowing; when a transform offers another mechanism without that need, the refusal
    proposes it.

The trigger analysis (:func:`max_trigger_firings` and the data-driven parts of a trigger) is
here too; the accounting it feeds, :func:`~beam_dpsketch.privacy.windowing.plan_windowing`, is
pure logic in :mod:`beam_dpsketch.privacy.windowing` and imports no Beam.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw

from beam_dpsketch.privacy.declarations import PrivacyUnit, spell_accepted
from beam_dpsketch.privacy.windowing import (
    PlanRefused,
    ReleasePlan,
    TriggerShape,
    UnitLevel,
    WindowingDeclaration,
    WindowShape,
    plan_windowing,
)
from beam_dpsketch.transforms.engines import RunnerLimits, UnsupportedRunnerError

__all__ = [
    "has_window_bounds",
    "window_bounds_refusal",
    "ANY_WINDOWING",
    "BATCHED_WINDOWING",
    "WindowingDeclaration",
    "WindowingRefused",
    "WindowingRequirement",
    "accept_windowing",
    "max_trigger_firings",
    "plan_releases",
    "windowless_runner_refusal",
]

#: The runner a refusal on runner grounds proposes (it implements the whole model here).
ACCEPTED_RUNNER = "FnApiRunner"
#: The early count a refusal proposes for a transform that receives rows: an example value.
ROWS_PER_EARLY_PANE = 1000


def windowless_runner_refusal(option: str, what: str, runner: str, accepted: str) -> ValueError:
    """The refusal of a command whose releases need windows, state or timers, on ``runner``.

    For a runner that runs batch pipelines in the global window only (Beam's DaskRunner). The
    caller raises it before a pipeline or a cluster exists; ``option`` names the command-line
    option chosen, ``what`` the subcommand or option that needs windows, ``accepted`` the runners
    that would run it.
    """
    return ValueError(
        f"{option}: {what} releases per window or keeps per-key state and timers; the {runner} "
        "runs batch pipelines in the global window only (it ignores windows and timestamps and "
        f"has no state or timers). Run it on {accepted}"
    )


def has_window_bounds(windowing_or_pcoll: Any) -> bool:
    """Whether elements in this windowing have bounds a release row can carry (any window but
    the global one)."""
    return not isinstance(_windowing_of(windowing_or_pcoll).windowfn, bw.GlobalWindows)


def window_bounds_refusal(what: str) -> ValueError:
    """The refusal of ``what`` (a step adding window bounds) on a release in the global window."""
    return ValueError(f"{what}: the release is in the global window, which has no bounds")


# --------------------------------------------------------------------------------------------
# Trigger analysis
# --------------------------------------------------------------------------------------------


def lateness_micros(value: Any) -> int:
    """Allowed lateness (a Beam ``Duration`` or seconds >= 0) in microseconds."""
    if value is None:
        return 0
    micros = getattr(value, "micros", None)
    if micros is not None:
        return int(micros)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise ValueError(f"allowed_lateness must be a Duration or seconds >= 0, got {value!r}")
    return round(float(value) * 1_000_000)


def _is_synchronized_processing_time(t: Any) -> bool:
    # Beam's continuation of AfterProcessingTime has no public class.
    return type(t).__name__ == "_AfterSynchronizedProcessingTime"


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
    lateness = lateness_micros(allowed_lateness)

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
        if _is_synchronized_processing_time(t):
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


def _processing_time_parts(trigger: Any, lateness: int) -> list[str]:
    """The ``AfterProcessingTime`` components of ``trigger`` that can fire."""
    found: list[str] = []

    def walk(t: Any) -> None:
        if isinstance(t, tr.AfterProcessingTime) or _is_synchronized_processing_time(t):
            found.append(repr(t))
        elif isinstance(t, tr.AfterWatermark):
            if t.early is not None:
                walk(t.early)
            if t.late is not None and lateness > 0:
                walk(t.late)
        elif isinstance(t, tr.Repeatedly):
            walk(t.underlying)
        elif isinstance(t, tr.AfterAny | tr.AfterAll | tr.AfterEach):
            for sub in t.triggers:
                walk(sub)

    walk(trigger)
    return found


def _element_counts(trigger: Any) -> list[int]:
    """The ``n`` of every ``AfterCount(n)`` in ``trigger``, wherever it sits."""
    if isinstance(trigger, tr.AfterCount):
        return [trigger.count]
    found: list[int] = []
    for attr in ("early", "late", "underlying"):
        inner = getattr(trigger, attr, None)
        if inner is not None:
            found += _element_counts(inner)
    for inner in getattr(trigger, "triggers", None) or ():
        found += _element_counts(inner)
    return found


def _has_early_firings(trigger: Any) -> bool:
    """Whether ``trigger`` is (or wraps) an ``AfterWatermark`` with early firings."""
    if getattr(trigger, "early", None) is not None:
        return True
    inner = getattr(trigger, "underlying", None) or getattr(trigger, "triggers", None)
    if inner is None:
        return False
    parts = inner if isinstance(inner, list | tuple) else [inner]
    return any(_has_early_firings(t) for t in parts)


def _watermark_problem(trigger: Any, lateness: int) -> str | None:
    """Why ``trigger`` fires at other times than the watermark, or ``None`` if it does not.

    Accepted: the default trigger and ``AfterWatermark()`` without early firings, with no late
    firing that can fire. Everything else is refused, including compositions Beam could
    evaluate differently.
    """
    if isinstance(trigger, tr.DefaultTrigger):
        if lateness > 0:
            return "with allowed_lateness > 0 it fires a late pane whenever late data arrive"
        return None
    if isinstance(trigger, tr.AfterWatermark):
        if trigger.early is not None:
            return (
                "its early firings fire on the data (element counts, or a delay that starts at a "
                "pane's first element)"
            )
        if trigger.late is not None and lateness > 0:
            return "its late firings fire because late data arrived"
        return None
    return (
        "it does not fire on the watermark alone (count triggers count elements; processing-time "
        "triggers start their delay at a pane's first element)"
    )


def _is_on_time_only(trigger: Any) -> bool:
    """The default trigger, or ``AfterWatermark()`` with neither early nor late firings."""
    if isinstance(trigger, tr.DefaultTrigger):
        return True
    return isinstance(trigger, tr.AfterWatermark) and trigger.early is None and trigger.late is None


def _rewrite(trigger: Any, leaf: Any) -> Any:
    """``trigger`` with every leaf ``t`` replaced by ``leaf(t)`` (``None`` keeps ``t``)."""
    new = leaf(trigger)
    if new is not None:
        return new
    if isinstance(trigger, tr.AfterWatermark):
        early = None if trigger.early is None else _rewrite(trigger.early.underlying, leaf)
        late = None if trigger.late is None else _rewrite(trigger.late.underlying, leaf)
        return tr.AfterWatermark(early=early, late=late)
    if isinstance(trigger, tr.Repeatedly):
        return tr.Repeatedly(_rewrite(trigger.underlying, leaf))
    if isinstance(trigger, tr.AfterAny | tr.AfterAll | tr.AfterEach):
        return type(trigger)(*(_rewrite(t, leaf) for t in trigger.triggers))
    return trigger


def _without_early(trigger: Any) -> Any:
    if isinstance(trigger, tr.AfterWatermark):
        late = None if trigger.late is None else trigger.late.underlying
        return tr.AfterWatermark(late=late)
    return tr.AfterWatermark()


# --------------------------------------------------------------------------------------------
# Shapes for the (Beam-free) planner
# --------------------------------------------------------------------------------------------


def _public_repr(obj: Any) -> str:
    """``repr(obj)`` with default object reprs (``<module.Class object at 0x...>``) shortened to
    the class name: a memory address is no parameter and has no place in a message."""
    return re.sub(r"<(?:[\w.]+\.)?(\w+) object at 0x[0-9a-fA-F]+>", r"\1", repr(obj))


def _duration_s(micros: int) -> str:
    return f"{micros / 1_000_000:g}s"


def _window_shape(windowfn: Any) -> WindowShape | None:
    """The planner's view of ``windowfn``; ``None`` for a window function it cannot count."""
    if isinstance(windowfn, bw.GlobalWindows):
        return WindowShape("global", "GlobalWindows")
    if isinstance(windowfn, bw.FixedWindows):
        size = int(windowfn.size.micros)
        return WindowShape("fixed", f"FixedWindows(size={_duration_s(size)})", size, size)
    if isinstance(windowfn, bw.SlidingWindows):
        size, period = int(windowfn.size.micros), int(windowfn.period.micros)
        desc = f"SlidingWindows(size={_duration_s(size)}, period={_duration_s(period)})"
        return WindowShape("sliding", desc, size, period)
    if isinstance(windowfn, bw.Sessions):
        desc = f"Sessions(gap={_duration_s(int(windowfn.gap_size.micros))})"
        return WindowShape("sessions", desc)
    return None


def _window_code(windowfn: Any) -> str:
    """``windowfn`` as the code that builds it (Beam's own repr shows a memory address)."""
    shape = _window_shape(windowfn)
    if shape is None:
        return type(windowfn).__name__
    if shape.kind == "global":
        return "GlobalWindows()"
    if shape.kind == "fixed":
        return f"FixedWindows({shape.size_micros / 1_000_000:g})"
    if shape.kind == "sliding":
        return f"SlidingWindows({shape.size_micros / 1e6:g}, {shape.period_micros / 1e6:g})"
    return f"Sessions({int(windowfn.gap_size.micros) / 1_000_000:g})"


def _accumulation(mode: Any) -> str:
    if mode == tr.AccumulationMode.ACCUMULATING:
        return "accumulating"
    if mode == tr.AccumulationMode.DISCARDING:
        return "discarding"
    raise ValueError(f"unknown accumulation_mode {mode!r}")


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


# --------------------------------------------------------------------------------------------
# Declarations and requirements
# --------------------------------------------------------------------------------------------


TriggerNeed = Literal["any", "once", "watermark", "on_time"]


@dataclass(frozen=True)
class WindowingRequirement:
    """What a transform's mechanism needs of its input's windowing.

    Attributes
    ----------
    who
        Who needs it, for messages (e.g. ``"mechanism 'select-then-count'"``).
    batched
        The transform packs its input into batches before the triggered aggregation:
        ``AfterCount(n)`` with ``n > 1`` is refused.
    window_fns
        Window functions accepted (``"global"``, ``"fixed"``, ``"sliding"``, ``"sessions"``).
    triggers
        ``"any"``; ``"once"`` (fires at most once per window); ``"watermark"`` (fires on the
        watermark only: the default trigger or ``AfterWatermark()`` without early firings, no
        late firing that can fire); ``"on_time"`` (the default trigger or ``AfterWatermark()``
        with neither early nor late firings, and no allowed lateness).
    discarding
        Only DISCARDING panes are accepted.
    default_windowing
        Only the global window with the default trigger is accepted.
    processing_time
        Whether ``AfterProcessingTime`` parts are accepted (only where panes are not the
        releases, e.g. a continual release over elements).
    why
        The reason, for messages.
    instead
        Alternatives the transform offers, tried in order when this requirement refuses: pairs
        of a parameter setting as code (``"mechanism='design-b'"``) and its requirement.
    """

    who: str = "this transform"
    batched: bool = False
    window_fns: tuple[str, ...] = ("global", "fixed", "sliding", "sessions")
    triggers: TriggerNeed = "any"
    discarding: bool = False
    default_windowing: bool = False
    processing_time: bool = False
    why: str = ""
    instead: tuple[tuple[str, WindowingRequirement], ...] = field(default=())


#: The requirement of a transform that needs nothing beyond the general rules.
ANY_WINDOWING = WindowingRequirement()
# What plan_releases judges: how a windowing is accounted, whatever reads it.
_ACCOUNTING_ONLY = WindowingRequirement(processing_time=True)
#: A transform that packs its input into batches before the triggered aggregation.
BATCHED_WINDOWING = WindowingRequirement(batched=True)


class WindowingRefused(ValueError):
    """A windowing, trigger or runner a DP transform refuses.

    The message lists every rule broken, each naming its parameter, then ``Accepted instead:``
    and one or two configurations that are accepted (as code: ``parameter=value`` settings of
    ``beam.WindowInto``, the transform and the pipeline's runner).

    Attributes
    ----------
    parameters
        The parameters at fault, in the order of the message.
    accepted
        The accepted configurations, each a mapping of parameter to its value as code.
    """

    def __init__(
        self, message: str, parameters: tuple[str, ...], accepted: tuple[Mapping[str, str], ...]
    ) -> None:
        super().__init__(message)
        self.parameters = parameters
        self.accepted = accepted


class RunnerWindowingRefused(WindowingRefused, UnsupportedRunnerError):
    """A refusal in which the runner is at fault (also an ``UnsupportedRunnerError``)."""


# --------------------------------------------------------------------------------------------
# The one judgement
# --------------------------------------------------------------------------------------------


class _Code(str):
    """A parameter value already written as code (rendered as is)."""


@dataclass(frozen=True)
class _Config:
    """One candidate configuration: the input's windowing, the declaration, the runner."""

    windowfn: Any
    trigger: Any
    accumulation: str
    lateness: int
    default: bool
    declaration: WindowingDeclaration | None
    requirement: WindowingRequirement
    runner: RunnerLimits | None
    kind: str


@dataclass(frozen=True)
class _Problem:
    parameter: str
    text: str
    fixes: tuple[dict[str, Any], ...]
    runner: bool = False


_DEFAULT_WINDOWING = {
    "windowfn": bw.GlobalWindows(),
    "trigger": tr.DefaultTrigger(),
    "accumulation_mode": "discarding",
    "allowed_lateness": 0,
}


def _apply(config: _Config, fix: Mapping[str, Any]) -> _Config:
    """``config`` with the changes of one fix."""
    changes: dict[str, Any] = {}
    fields = {
        "windowfn": "windowfn",
        "trigger": "trigger",
        "accumulation_mode": "accumulation",
        "allowed_lateness": "lateness",
    }
    for key, value in fix.items():
        if key in fields:
            changes[fields[key]] = value
        elif key == "runner":
            changes["runner"] = None  # the proposed runner keeps the whole model
        elif key == "_requirement":
            changes["requirement"] = value
        elif not isinstance(value, _Code):  # a _Code is a transform choice (its requirement)
            changes["declaration"] = replace(
                config.declaration or WindowingDeclaration(), **{key: value}
            )
    if set(fix) & set(fields):
        # Only the full default windowing is Beam's default windowing.
        changes["default"] = set(_DEFAULT_WINDOWING) <= set(fix) and isinstance(
            fix["trigger"], tr.DefaultTrigger
        )
    return replace(config, **changes)


def _runner_problems(c: _Config) -> Iterator[_Problem]:
    t = _public_repr(c.trigger)
    limits = c.runner
    if limits is None:
        return
    if not limits.keeps_early_panes and _has_early_firings(c.trigger):
        yield _Problem(
            "runner",
            f"{c.kind} cannot run on {limits.name} with early firings (trigger {t}): "
            "Prism omits the on-time pane of a window that received no "
            "element after its last early pane, so whether a release exists would depend on "
            "the data (runners that fire that pane: FnApiRunner, BundleBasedDirectRunner, "
            "Flink, Spark or Dataflow; behind a --job_endpoint, declare the engine with "
            "--job_endpoint_engine)",
            ({"runner": ACCEPTED_RUNNER}, {"trigger": _without_early(c.trigger)}),
            runner=True,
        )
    if not limits.keeps_windows and not c.default:
        yield _Problem(
            "runner",
            f"{c.kind} cannot run on {limits.name} on windowed input "
            f"({type(c.windowfn).__name__}, trigger {t}): {limits.name} ignores "
            "windows, triggers and timestamps, so it would release once for the whole input "
            "while the privacy plan is per window",
            ({"runner": ACCEPTED_RUNNER}, dict(_DEFAULT_WINDOWING)),
            runner=True,
        )


def _alternatives(req: WindowingRequirement) -> tuple[dict[str, Any], ...]:
    out = []
    for setting, alt in req.instead:
        name, _, value = setting.partition("=")
        out.append({name: _Code(value), "_requirement": alt})
    return tuple(out)


def _requirement_problems(c: _Config) -> Iterator[_Problem]:
    t = _public_repr(c.trigger)
    req = c.requirement
    why = f" ({req.why})" if req.why else ""
    others = _alternatives(req)
    if req.default_windowing and not c.default:
        yield _Problem(
            "windowing",
            f"{req.who} needs the data in the global window with the default trigger{why}; "
            f"got {type(c.windowfn).__name__} with trigger {t}",
            (*others, dict(_DEFAULT_WINDOWING)),
        )
        return
    kind = (_window_shape(c.windowfn) or WindowShape("global", "")).kind
    if kind not in req.window_fns:
        if kind == "sliding" and "fixed" in req.window_fns:
            proposed: Any = bw.FixedWindows(c.windowfn.size)
        else:
            proposed = bw.GlobalWindows()
        yield _Problem(
            "windowfn",
            f"{req.who} needs {' or '.join(_WINDOW_NAMES[k] for k in req.window_fns)}{why}; "
            f"got {type(c.windowfn).__name__}",
            (*others, {"windowfn": proposed}),
        )
    if req.triggers == "once":
        firings = max_trigger_firings(c.trigger, c.lateness)
        if firings != 1:
            shown = "an unbounded number of" if firings is None else str(firings)
            yield _Problem(
                "trigger",
                f"{req.who} needs a trigger that fires once per window{why}; got {t} "
                f"with allowed lateness {_duration_s(c.lateness)}, which can fire {shown} times",
                (*others, {"trigger": tr.AfterWatermark()}),
            )
    elif req.triggers == "watermark":
        problem = _watermark_problem(c.trigger, c.lateness)
        if problem is not None:
            yield _Problem(
                "trigger",
                f"trigger {t} is refused by {req.who}: {problem}, so the pane "
                "boundaries and the number of panes would depend on the data"
                f"{why}",
                (*others, {"trigger": tr.AfterWatermark()}),
            )
    elif req.triggers == "on_time":
        if not _is_on_time_only(c.trigger):
            yield _Problem(
                "trigger",
                f"the input's trigger {t} is not the default AfterWatermark() without "
                f"early or late firings: {req.who} needs each pane final when it fires{why}",
                (*others, {"trigger": tr.AfterWatermark()}),
            )
        if c.lateness != 0:
            yield _Problem(
                "allowed_lateness",
                f"the input's allowed_lateness is {c.lateness / 1_000_000:g} s; {req.who} needs "
                f"0 (late data must never reach a sealed release){why}",
                (*others, {"allowed_lateness": 0}),
            )
    if req.discarding and c.accumulation != "discarding":
        yield _Problem(
            "accumulation_mode",
            f"{req.who} needs DISCARDING panes{why}; ACCUMULATING mode would add the same "
            "arrivals to several releases",
            (*others, {"accumulation_mode": "discarding"}),
        )


_WINDOW_NAMES = {
    "global": "GlobalWindows",
    "fixed": "FixedWindows",
    "sliding": "SlidingWindows",
    "sessions": "Sessions",
}


def _trigger_problems(c: _Config) -> Iterator[_Problem]:
    t = _public_repr(c.trigger)
    req = c.requirement
    batched = req.batched and any(n > 1 for n in _element_counts(c.trigger))
    per_early = 1 if req.batched else ROWS_PER_EARLY_PANE

    def to_count(leaf: Any) -> Any:
        if isinstance(leaf, tr.AfterProcessingTime) or _is_synchronized_processing_time(leaf):
            return tr.AfterCount(per_early)
        if isinstance(leaf, tr.AfterCount) and req.batched and leaf.count > 1:
            return tr.AfterCount(1)
        return None

    parts = [] if req.processing_time else _processing_time_parts(c.trigger, c.lateness)
    if parts:
        reason = (
            f"fires on {', '.join(parts)}, whose pane boundaries start at a pane's first "
            "element: removing one element can move any number of others into a pane, so no "
            "finite sensitivity holds"
        )
    elif batched:
        reason = (
            "counts elements, but this transform batches its input before the triggered "
            "aggregation, so AfterCount(n) would count batches of rows and its panes would not "
            "fire as declared (AfterCount(1) fires on every arrival)"
        )
    else:
        return
    # One refusal of the trigger: its proposal replaces every refused part at once.
    yield _Problem(
        "trigger", f"trigger {t} {reason}", ({"trigger": _rewrite(c.trigger, to_count)},)
    )


def _plan(c: _Config) -> ReleasePlan | _Problem | None:
    """The plan of ``c``, the planner's refusal as a problem, or ``None`` without declaration."""
    if c.declaration is None:
        return None
    shape = _window_shape(c.windowfn)
    if shape is None:
        return _Problem(
            "windowfn",
            f"unsupported WindowFn {type(c.windowfn).__name__}: supported are GlobalWindows, "
            "FixedWindows, SlidingWindows and (bounded) Sessions",
            ({"windowfn": bw.GlobalWindows()},),
        )
    trigger = TriggerShape(
        _public_repr(c.trigger),
        max_trigger_firings(c.trigger, c.lateness),
        tuple(_data_driven_reasons(c.trigger, c.lateness)),
    )
    try:
        return plan_windowing(
            shape,
            trigger,
            accumulation_mode=c.accumulation,
            allowed_lateness_micros=c.lateness,
            declaration=c.declaration,
        )
    except PlanRefused as exc:
        parameter, text = _spell_reason(exc.parameter, str(exc), c.declaration)
        return _Problem(parameter, text, (exc.accepted,))


def _spell_reason(
    parameter: str, text: str, declaration: WindowingDeclaration | None
) -> tuple[str, str]:
    """A planner refusal's parameter and reason, spelled as the transform takes its declaration.

    The planner names the declaration's fields (``max_windows_per_unit``). A transform that takes
    a :class:`~beam_dpsketch.privacy.PrivacyUnit` has no such parameter: its user is told the
    field of the object to give (``PrivacyUnit(max_windows=...)``), and the refusal is about its
    ``privacy_unit`` parameter. The proposals are spelled by
    :func:`~beam_dpsketch.privacy.declarations.spell_accepted`.
    """
    if declaration is None or not isinstance(declaration.unit, PrivacyUnit):
        return parameter, text
    text = re.sub(r"max_windows_per_unit=(\d+)", r"PrivacyUnit(max_windows=\1)", text)
    text = text.replace("max_windows_per_unit", "PrivacyUnit(max_windows=...)")
    text = text.replace("privacy_unit='user'", "a user-level PrivacyUnit")
    if parameter == "max_windows_per_unit":
        parameter = "privacy_unit"
    return parameter, text


def _judge(c: _Config) -> tuple[list[_Problem], ReleasePlan | None]:
    problems = [*_runner_problems(c), *_requirement_problems(c), *_trigger_problems(c)]
    plan: ReleasePlan | None = None
    if c.declaration is not None and not problems:
        # The declaration is judged against a windowing that passes the other rules: a bound
        # declared for a refused trigger would be beside the point.
        outcome = _plan(c)
        if isinstance(outcome, _Problem):
            problems.append(outcome)
        else:
            plan = outcome
    return problems, plan


def _accepted(c: _Config, limit: int = 2, depth: int = 6) -> list[dict[str, Any]]:
    """Up to ``limit`` sets of changes to ``c`` that every rule accepts, in order of preference.

    Depth first over the fixes each refusal proposes (the first fix of a rule keeps most of the
    user's configuration); every set returned has been judged accepted.
    """
    found: list[dict[str, Any]] = []

    def search(config: _Config, changes: dict[str, Any], left: int) -> None:
        if len(found) >= limit:
            return
        problems, _ = _judge(config)
        if not problems:
            if changes and changes not in found:
                found.append(changes)
            return
        if left == 0:
            return
        for fix in problems[0].fixes:
            search(_apply(config, fix), {**changes, **fix}, left - 1)

    search(c, {}, depth)
    return found


_ORDER = ("windowfn", "trigger", "accumulation_mode", "allowed_lateness")


def _code(key: str, value: Any) -> str:
    if isinstance(value, _Code):
        return value
    if key == "windowfn":
        return _window_code(value)
    if key == "accumulation_mode":
        return f"AccumulationMode.{str(value).upper()}"
    if key == "allowed_lateness":
        return f"{value / 1_000_000:g}"
    return repr(value)


def _render(changes: Mapping[str, Any]) -> dict[str, str]:
    """The changes as code: windowing first, then the transform's choices and declaration, then
    the runner."""
    keys = [k for k in _ORDER if k in changes]
    rest = [k for k in changes if k not in _ORDER and k not in ("runner", "_requirement")]
    keys += [k for k in rest if isinstance(changes[k], _Code)]
    keys += sorted(k for k in rest if not isinstance(changes[k], _Code))
    if "runner" in changes:
        keys.append("runner")
    return {k: _code(k, changes[k]) for k in keys}


def accept_windowing(
    windowing: Any,
    declaration: WindowingDeclaration | None,
    *,
    name: str | None = None,
    kind: str = "this transform",
    requirement: WindowingRequirement = ANY_WINDOWING,
    runner: RunnerLimits | None = None,
) -> ReleasePlan | None:
    """Judge a transform's windowing: return the release plan, or refuse with one message.

    Parameters
    ----------
    windowing
        The input's windowing strategy (``pcoll.windowing``) or the PCollection itself.
    declaration
        The transform's declared bounds; ``None`` for a transform that does not release per
        window and pane (no plan is made, only the rules are checked).
    name
        The release label the message starts with.
    kind
        The transform's class name, for runner refusals.
    requirement
        What the transform's mechanism needs (default: nothing beyond the general rules).
    runner
        What the pipeline's runner keeps of Beam's model
        (:func:`~beam_dpsketch.transforms.engines.runner_limits`); ``None`` for a runner that
        keeps all of it.

    Returns
    -------
    ReleasePlan or None
        The plan (``None`` without a declaration). Splitting the budget evenly over its
        ``releases_per_element`` releases gives the transform's guarantee.

    Raises
    ------
    WindowingRefused
        Listing every rule the configuration breaks (each names its parameter; parameters and
        public configuration only), then ``Accepted instead:`` and a configuration that every
        rule accepts. A :class:`RunnerWindowingRefused` (also an
        :class:`~beam_dpsketch.transforms.engines.UnsupportedRunnerError`) when the runner is
        at fault.
    """
    w = _windowing_of(windowing)
    config = _Config(
        windowfn=w.windowfn,
        trigger=w.triggerfn,
        accumulation=_accumulation(w.accumulation_mode),
        lateness=lateness_micros(getattr(w, "allowed_lateness", 0)),
        default=bool(getattr(w, "is_default", lambda: False)()),
        declaration=declaration,
        requirement=requirement,
        runner=runner,
        kind=kind,
    )
    problems, plan = _judge(config)
    if not problems:
        return plan
    accepted = tuple(spell_accepted(_render(c), declaration) for c in _accepted(config))
    # One sentence per rule broken, each starting with the parameter it is about.
    text = ". ".join(
        p.text if p.text.startswith(p.parameter) else f"{p.parameter}: {p.text}" for p in problems
    )
    if accepted:
        options = " or ".join(", ".join(f"{k}={v}" for k, v in a.items()) for a in accepted)
        text += f". Accepted instead: {options}"
    message = f"{name}: {text}" if name else text
    parameters = tuple(p.parameter for p in problems)
    error = RunnerWindowingRefused if any(p.runner for p in problems) else WindowingRefused
    raise error(message, parameters, accepted)


def plan_releases(
    windowing: Any,
    *,
    privacy_unit: UnitLevel = "element",
    max_panes_per_window: int | None = None,
    max_windows_per_unit: int | None = None,
    data_independent_panes: bool = False,
    release_range: tuple[float, float] | None = None,
) -> ReleasePlan:
    """The :class:`~beam_dpsketch.privacy.windowing.ReleasePlan` of a Beam windowing strategy.

    :func:`accept_windowing` with the accounting rules only: no transform requirement, no
    runner, and processing-time triggers are planned (with their data-dependent schedule) rather
    than refused, as a DP transform that releases per pane refuses them.

    Parameters
    ----------
    windowing
        ``pcoll.windowing`` (a Beam ``Windowing``) or the PCollection itself.
    privacy_unit, max_panes_per_window, max_windows_per_unit, data_independent_panes, release_range
        The declaration (:class:`WindowingDeclaration`).

    Raises
    ------
    WindowingRefused
        For a configuration the rules refuse (naming the parameter and an accepted value).
    """
    declaration = WindowingDeclaration(
        privacy_unit=privacy_unit,
        max_panes_per_window=max_panes_per_window,
        max_windows_per_unit=max_windows_per_unit,
        data_independent_panes=data_independent_panes,
        release_range=release_range,
    )
    plan = accept_windowing(windowing, declaration, requirement=_ACCOUNTING_ONLY)
    assert plan is not None  # a declaration always yields a plan
    return plan
