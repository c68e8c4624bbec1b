"""What a user declares once and hands to every transform: the privacy unit and the windowing bounds.

Two value objects, each stating one declaration in one place:

* :class:`PrivacyUnit`: *whom* the guarantee protects. Element level by default (neighbouring
  inputs differ by one element); user level with an ``id`` (a callable of the element or the
  name of a field) and the bounds the transform enforces or relies on: ``max_contributions``
  elements per unit and window, and ``max_windows`` windows per unit.
* :class:`Windowing`: the bounds the release plan relies on about *panes and windows*:
  ``max_panes_per_window``, ``data_independent_panes`` and the public ``release_range``. It does
  not window anything: the windowing strategy is the input's (``beam.WindowInto``); this object
  only declares what the accountant may assume about it.

:func:`windowing_declaration` joins the two into the
:class:`~beam_dpsketch.privacy.windowing.WindowingDeclaration` that
:func:`~beam_dpsketch.privacy.windowing.plan_windowing` reads. Both objects are frozen, validated
at construction (through :mod:`beam_dpsketch.checks`, errors naming the field), and hold public
parameters only, so their ``repr`` may be shown in reports and runner UIs. Nothing here imports
Beam.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from beam_dpsketch.checks import check_bool, check_int

from .windowing import UnitLevel, WindowingDeclaration, check_release_range

__all__ = [
    "PrivacyUnit",
    "Windowing",
    "check_privacy_unit",
    "check_windowing",
    "spell_accepted",
    "windowing_declaration",
]

#: The declaration fields a :class:`Windowing` holds (the others are the privacy unit's).
WINDOWING_FIELDS = ("max_panes_per_window", "data_independent_panes", "release_range")


def _id_text(unit_id: Any) -> str:
    """The ``id`` as shown in reports: a field name, or a callable's name (code, never data)."""
    if isinstance(unit_id, str):
        return repr(unit_id)
    name = getattr(unit_id, "__qualname__", None) or type(unit_id).__name__
    return f"<callable {name}>"


@dataclass(frozen=True, repr=False)
class PrivacyUnit:
    """Whom a transform's guarantee protects: one element, or all contributions of one user.

    ``PrivacyUnit()`` is element level: neighbouring inputs differ by one element.
    ``PrivacyUnit(id="user_id", max_contributions=3)`` is user level: neighbouring inputs differ
    by every element of one privacy unit, identified by ``id``, of which a transform keeps (or
    relies on) at most ``max_contributions`` per window.

    Parameters
    ----------
    id
        ``None`` (element level), or how to read the unit of an element: a callable of the
        element, or the name (``str``) of a field of ``dict`` or ``beam.Row`` elements. A
        transform resolves it with :func:`~beam_dpsketch.transforms.base.as_extractor`.
    max_contributions
        Elements one unit contributes per window (user level; 1 at element level). A transform
        that bounds contributions keeps at most this many, chosen by a secret keyed hash; one
        that does not (``DPAggregate``) relies on the caller having bounded them.
    max_windows
        Windows one unit can influence. Required at user level for fixed and sliding windows and
        for sessions at either level; the accountant charges every one of them (sequential
        composition), and the caller must make it true (e.g. one window per unit by the data's
        design). ``None``: not declared.

    Raises
    ------
    TypeError, ValueError
        Naming the field: an ``id`` that is neither ``None``, a callable nor a non-empty string;
        a count that is not an int >= 1; ``max_contributions`` other than 1 at element level.

    Notes
    -----
    The object holds public declarations only; ``repr`` shows the field name or the callable's
    name, never an element.
    """

    id: str | Callable[[Any], Any] | None = None
    max_contributions: int = 1
    max_windows: int | None = None

    def __post_init__(self) -> None:
        unit_id = self.id
        if unit_id is not None and not callable(unit_id):
            if not isinstance(unit_id, str):
                raise TypeError(
                    "PrivacyUnit id must be a callable of the element, a field name (str) or "
                    f"None for element level, got {type(unit_id).__name__}"
                )
            if not unit_id.strip():
                raise ValueError("PrivacyUnit id must be a non-empty field name")
        contributions = check_int(self.max_contributions, "max_contributions")
        if unit_id is None and contributions != 1:
            raise ValueError(
                "max_contributions applies to a user-level privacy unit: give "
                "PrivacyUnit(id=..., max_contributions=...); at element level each element "
                "contributes once"
            )
        windows = None if self.max_windows is None else check_int(self.max_windows, "max_windows")
        object.__setattr__(self, "max_contributions", contributions)
        object.__setattr__(self, "max_windows", windows)

    @property
    def level(self) -> UnitLevel:
        """``"element"`` (no ``id``) or ``"user"``."""
        return "element" if self.id is None else "user"

    @property
    def is_user_level(self) -> bool:
        """Whether the unit is a user (an ``id`` is given)."""
        return self.id is not None

    def describe(self) -> str:
        """One line for reports: the level and its bounds (public parameters only)."""
        parts = []
        if self.id is not None:
            parts.append(f"id {_id_text(self.id)}")
            parts.append(f"<= {self.max_contributions} contributions per window")
        if self.max_windows is not None:
            parts.append(f"<= {self.max_windows} windows")
        return self.level if not parts else f"{self.level} ({', '.join(parts)})"

    def __repr__(self) -> str:
        fields = []
        if self.id is not None:
            fields.append(f"id={_id_text(self.id)}")
            fields.append(f"max_contributions={self.max_contributions}")
        if self.max_windows is not None:
            fields.append(f"max_windows={self.max_windows}")
        return f"PrivacyUnit({', '.join(fields)})"


@dataclass(frozen=True, repr=False)
class Windowing:
    """The declared bounds of the input's windowing that the release plan relies on.

    It does not window the data (``beam.WindowInto`` does); it states what the accountant may
    assume about the windowing it finds on the transform's input. The defaults declare nothing,
    which the plan accepts for the default trigger (one pane per window).

    Parameters
    ----------
    max_panes_per_window
        Maximum panes released per window; required when the trigger can fire more than once.
        Panes with index ``>= max_panes_per_window`` are withheld: never emitted, and not counted
        anywhere (their number depends on the data). ``None``: not declared.
    data_independent_panes
        The caller's assertion that pane boundaries do not depend on the data (refused for
        triggers with a built-in data-driven part). Only with it does DISCARDING mode at element
        level charge one pane per window.
    release_range
        Public event-time range ``(start, end)`` in seconds, for fixed or sliding windows: every
        window that starts in ``[start, end)`` is released, empty ones included, and every other
        window is withheld. Without it only windows with data are released, and whether a window
        was released reveals that it had data.

    Raises
    ------
    TypeError, ValueError
        Naming the field, for a value of the wrong type or range.
    """

    max_panes_per_window: int | None = None
    data_independent_panes: bool = False
    release_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        panes = self.max_panes_per_window
        if panes is not None:
            panes = check_int(panes, "max_panes_per_window")
        object.__setattr__(self, "max_panes_per_window", panes)
        object.__setattr__(
            self,
            "data_independent_panes",
            check_bool(self.data_independent_panes, "data_independent_panes"),
        )
        object.__setattr__(self, "release_range", check_release_range(self.release_range))

    def __repr__(self) -> str:
        fields = []
        if self.max_panes_per_window is not None:
            fields.append(f"max_panes_per_window={self.max_panes_per_window}")
        if self.data_independent_panes:
            fields.append("data_independent_panes=True")
        if self.release_range is not None:
            fields.append(f"release_range={self.release_range!r}")
        return f"Windowing({', '.join(fields)})"


def check_privacy_unit(
    value: Any, name: str = "privacy_unit", *, user_level: str | None = None
) -> PrivacyUnit:
    """``value`` as a :class:`PrivacyUnit`: ``None`` is element level (``PrivacyUnit()``).

    Parameters
    ----------
    value
        The parameter's value.
    name
        The parameter's name, for errors.
    user_level
        For a transform that protects elements only: what to do instead of a user-level unit
        (the refusal's message). ``None``: user level is accepted.

    Raises
    ------
    TypeError
        Naming ``name`` and what is accepted, for any other type (a string such as ``"user"``
        included: a user-level unit needs its ``id`` and bounds).
    ValueError
        For a user-level unit when ``user_level`` is given.
    """
    if value is None:
        return PrivacyUnit()
    if not isinstance(value, PrivacyUnit):
        raise TypeError(
            f"{name} must be a PrivacyUnit: PrivacyUnit() for element level or "
            "PrivacyUnit(id=..., max_contributions=..., max_windows=...) for user level, got "
            f"{type(value).__name__}"
        )
    if user_level is not None and value.is_user_level:
        raise ValueError(
            f"{name}: this transform protects elements: give PrivacyUnit() or "
            f"PrivacyUnit(max_windows=...); {user_level}"
        )
    return value


def check_windowing(value: Any, name: str = "windowing") -> Windowing:
    """``value`` as a :class:`Windowing`: ``None`` declares nothing (``Windowing()``).

    Raises
    ------
    TypeError
        Naming ``name`` and what is accepted, for any other type (a Beam windowing strategy
        included: that is set on the input with ``beam.WindowInto``).
    """
    if value is None:
        return Windowing()
    if not isinstance(value, Windowing):
        raise TypeError(
            f"{name} must be a Windowing(...) declaration of the bounds the release plan relies "
            "on, or None (the windowing strategy itself is set on the input with "
            f"beam.WindowInto), got {type(value).__name__}"
        )
    return value


def windowing_declaration(
    privacy_unit: PrivacyUnit | None = None, windowing: Windowing | None = None
) -> WindowingDeclaration:
    """The declaration :func:`~beam_dpsketch.privacy.windowing.plan_windowing` reads.

    Parameters
    ----------
    privacy_unit
        The unit (default: element level); its ``level`` and ``max_windows`` are used.
    windowing
        The windowing bounds (default: none declared).
    """
    unit = check_privacy_unit(privacy_unit)
    bounds = check_windowing(windowing)
    return WindowingDeclaration(
        privacy_unit=unit.level,
        max_panes_per_window=bounds.max_panes_per_window,
        max_windows_per_unit=unit.max_windows,
        data_independent_panes=bounds.data_independent_panes,
        release_range=bounds.release_range,
        unit=unit,
    )


def spell_accepted(
    changes: Mapping[str, str], declaration: WindowingDeclaration | None
) -> dict[str, str]:
    """A refusal's proposed changes, spelled as the transform takes its declaration.

    The windowing rules propose declaration changes by field (``max_panes_per_window=4``). A
    transform that takes :class:`PrivacyUnit` and :class:`Windowing` objects is told the same
    change as the objects to pass, the user's other declared bounds kept:
    ``windowing=Windowing(max_panes_per_window=4)``, ``privacy_unit=PrivacyUnit(max_windows=2)``
    (a callable ``id`` is shown as ``id=...``: keep yours).

    Parameters
    ----------
    changes
        Parameter to its value as code, in the order of the proposal.
    declaration
        The declaration refused; spelled by field unless it was made from a :class:`PrivacyUnit`.
    """
    unit = None if declaration is None else declaration.unit
    if not isinstance(unit, PrivacyUnit):
        return dict(changes)
    assert declaration is not None
    out: dict[str, str] = {}
    for key, code in changes.items():
        if key in WINDOWING_FIELDS:
            if "windowing" not in out:
                out["windowing"] = ""
            continue
        if key == "max_windows_per_unit":
            out["privacy_unit"] = ""
            continue
        out[key] = code
    if "windowing" in out:
        fields = {f: repr(getattr(declaration, f)) for f in WINDOWING_FIELDS}
        fields.update({k: v for k, v in changes.items() if k in WINDOWING_FIELDS})
        shown = [
            f"{f}={v}" for f, v in fields.items() if v not in ("None", "False") or f in changes
        ]
        out["windowing"] = f"Windowing({', '.join(shown)})"
    if "privacy_unit" in out:
        shown = []
        if unit.id is not None:
            shown.append(f"id={unit.id!r}" if isinstance(unit.id, str) else "id=...")
            shown.append(f"max_contributions={unit.max_contributions}")
        shown.append(f"max_windows={changes['max_windows_per_unit']}")
        out["privacy_unit"] = f"PrivacyUnit({', '.join(shown)})"
    return out
