"""A newcomer's task, written from the docs only: dict records read by field name, with a user id.

The README's quick start and ``docs/guide/python-api.md`` say that extractors take the name of a
field of a dict or ``beam.Row``; ``docs/guide/choosing.md`` ("User level") says that
``privacy_unit=dps.PrivacyUnit(id=..., max_contributions=...)`` makes the privacy unit the user.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

import beam_dpsketch as dps


def user_records() -> list[dict[str, object]]:
    """300 users who each view ``home`` twice and one page of their own once."""
    rows: list[dict[str, object]] = []
    for user in range(300):
        rows.append({"user": f"u{user}", "page": "home", "ms": 10})
        rows.append({"user": f"u{user}", "page": "home", "ms": 12})
        rows.append({"user": f"u{user}", "page": f"own-{user}", "ms": 30})
    return rows


def test_dict_records_by_field_name_release_user_level_heavy_hitters() -> None:
    """The page every user visits is released; no user's own page is (each has one user)."""
    hh = dps.DPHeavyHitters(
        budget=dps.PrivacyBudget.approx(1.0, 1e-6),
        key_fn="page",
        privacy_unit=dps.PrivacyUnit(id="user", max_contributions=2),
        top=10,
        noise_source=dps.NoiseSource.insecure_for_tests(27),
        label="TopPages",
    )

    def check(released: list[tuple[str, int]]) -> None:
        keys = [key for key, _ in released]
        assert keys == ["home"], keys
        # Each user counts once for "home" (distinct keys per unit), 300 users; noise is small.
        assert abs(released[0][1] - 300) < 60

    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = p | beam.Create(user_records()) | hh
        assert_that(out, check)
    report = hh.explain()
    assert "user" in report.lower() or "privacy unit" in report.lower()
