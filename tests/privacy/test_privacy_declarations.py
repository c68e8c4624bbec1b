"""The declarations a user hands to every transform: ``PrivacyUnit`` and ``Windowing``.

Beam-free: the value objects, their validation (errors name the field and say what is
accepted), their ``repr`` (public fields only), the plan declaration they make, and how a
refusal's proposal is spelled for a transform that takes them.
"""

from __future__ import annotations

import dataclasses

import pytest

import beam_dpsketch as dps
from beam_dpsketch.privacy import PrivacyUnit, Windowing
from beam_dpsketch.privacy.declarations import (
    check_privacy_unit,
    check_windowing,
    spell_accepted,
    windowing_declaration,
)
from beam_dpsketch.privacy.windowing import WindowingDeclaration


def user_of(record: dict) -> str:
    return record["user"]


def test_exported_at_the_top_level():
    assert dps.PrivacyUnit is PrivacyUnit
    assert dps.Windowing is Windowing
    assert "PrivacyUnit" in dps.__all__ and "Windowing" in dps.__all__


def test_element_level_by_default():
    unit = PrivacyUnit()
    assert unit.level == "element" and not unit.is_user_level
    assert (unit.id, unit.max_contributions, unit.max_windows) == (None, 1, None)
    assert check_privacy_unit(None) == unit
    assert check_windowing(None) == Windowing()


def test_user_level_with_a_field_or_a_callable():
    by_field = PrivacyUnit(id="user", max_contributions=3, max_windows=2)
    assert by_field.level == "user" and by_field.is_user_level
    by_callable = PrivacyUnit(id=user_of, max_contributions=2)
    assert by_callable.id is user_of
    # Frozen: a declaration handed to several transforms cannot change under them.
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_field.max_contributions = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"id": 3}, TypeError, r"PrivacyUnit id must be a callable .* field name"),
        ({"id": "  "}, ValueError, r"PrivacyUnit id must be a non-empty field name"),
        ({"id": "u", "max_contributions": 0}, ValueError, r"max_contributions must be >= 1"),
        ({"id": "u", "max_contributions": 2.0}, TypeError, r"max_contributions must be an int"),
        ({"max_contributions": 3}, ValueError, r"user-level privacy unit: give PrivacyUnit\(id="),
        ({"max_windows": 0}, ValueError, r"max_windows must be >= 1"),
        ({"max_windows": True}, TypeError, r"max_windows must be an int"),
    ],
)
def test_privacy_unit_errors_name_the_field(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        PrivacyUnit(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"max_panes_per_window": 0}, ValueError, r"max_panes_per_window must be >= 1"),
        ({"max_panes_per_window": "4"}, TypeError, r"max_panes_per_window must be an int"),
        ({"data_independent_panes": 1}, TypeError, r"data_independent_panes must be a bool"),
        ({"release_range": (10, 0)}, ValueError, r"release_range must have start < end"),
        ({"release_range": 5}, TypeError, r"release_range must be a \(start, end\) pair"),
    ],
)
def test_windowing_errors_name_the_field(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Windowing(**kwargs)


def test_a_string_or_a_beam_windowing_is_refused_with_what_is_accepted():
    with pytest.raises(TypeError, match=r"privacy_unit must be a PrivacyUnit: PrivacyUnit\(\)"):
        check_privacy_unit("user")
    with pytest.raises(TypeError, match=r"windowing must be a Windowing\(...\) .*WindowInto"):
        check_windowing(object())
    with pytest.raises(ValueError, match=r"privacy_unit: this transform protects elements"):
        check_privacy_unit(PrivacyUnit(id="u"), user_level="bound upstream")


def test_repr_shows_public_fields_only():
    assert repr(PrivacyUnit()) == "PrivacyUnit()"
    assert repr(PrivacyUnit(max_windows=3)) == "PrivacyUnit(max_windows=3)"
    assert (
        repr(PrivacyUnit(id="user", max_contributions=3, max_windows=2))
        == "PrivacyUnit(id='user', max_contributions=3, max_windows=2)"
    )
    # A callable shows its name (code), never anything it would read from an element.
    assert (
        repr(PrivacyUnit(id=user_of)) == "PrivacyUnit(id=<callable user_of>, max_contributions=1)"
    )
    assert repr(Windowing()) == "Windowing()"
    assert (
        repr(Windowing(max_panes_per_window=4, data_independent_panes=True, release_range=(0, 60)))
        == "Windowing(max_panes_per_window=4, data_independent_panes=True, "
        "release_range=(0.0, 60.0))"
    )
    assert PrivacyUnit(id="user", max_contributions=3, max_windows=2).describe() == (
        "user (id 'user', <= 3 contributions per window, <= 2 windows)"
    )


def test_the_plan_declaration_joins_unit_and_windowing():
    declared = windowing_declaration(
        PrivacyUnit(id="u", max_contributions=2, max_windows=5),
        Windowing(max_panes_per_window=3, release_range=(0, 10)),
    )
    assert declared == WindowingDeclaration(
        privacy_unit="user",
        max_panes_per_window=3,
        max_windows_per_unit=5,
        release_range=(0.0, 10.0),
    )
    assert windowing_declaration() == WindowingDeclaration()


def test_a_refusal_proposes_the_objects_the_transform_takes():
    proposal = {"trigger": "AfterWatermark()", "max_panes_per_window": "4"}
    # Separate parameters (transforms that still take them): spelled by field.
    assert spell_accepted(proposal, WindowingDeclaration()) == proposal
    declared = windowing_declaration(None, Windowing(release_range=(0, 60)))
    assert spell_accepted(proposal, declared) == {
        "trigger": "AfterWatermark()",
        "windowing": "Windowing(max_panes_per_window=4, release_range=(0.0, 60.0))",
    }
    user = windowing_declaration(PrivacyUnit(id="u", max_contributions=2), None)
    assert spell_accepted({"max_windows_per_unit": "3"}, user) == {
        "privacy_unit": "PrivacyUnit(id='u', max_contributions=2, max_windows=3)"
    }
    by_callable = windowing_declaration(PrivacyUnit(id=user_of), None)
    assert spell_accepted({"max_windows_per_unit": "3"}, by_callable) == {
        "privacy_unit": "PrivacyUnit(id=..., max_contributions=1, max_windows=3)"
    }
