"""One ``PrivacyUnit`` declaration handed to every step of a user-level pipeline.

``BoundContributions(unit)`` enforces the unit's bound, and ``DPAggregate(...,
privacy_unit=unit)`` is charged at that unit's level: the declaration is written once.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.transforms import BoundContributions, DPCount
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.release import DPAggregate

RUNNER = "FnApiRunner"
KEY = b"s" * 32
EVENTS = [{"user": f"u{u}", "event": f"e{u}-{j}"} for u in range(6) for j in range(u + 1)]


def _kept(tmp: Path, name: str, bound: beam.PTransform) -> list:
    path = str(tmp / f"{name}.pickle")

    def write(actual):
        with open(path, "wb") as fh:
            pickle.dump(sorted(r["event"] for r in actual), fh)

    with beam.Pipeline(runner=RUNNER) as p:
        assert_that(p | beam.Create(EVENTS) | bound, write)
    with open(path, "rb") as fh:
        return pickle.load(fh)


def test_bound_contributions_takes_the_unit_it_enforces(tmp_path):
    unit = PrivacyUnit(id="user", max_contributions=2)
    by_unit = BoundContributions(unit, selection_key=KEY, element_id_fn="event")
    by_parameters = BoundContributions("user", 2, selection_key=KEY, element_id_fn="event")
    assert by_unit.max_contributions == 2
    kept = _kept(tmp_path, "unit", by_unit)
    assert kept == _kept(tmp_path, "parameters", by_parameters)
    assert len(kept) == 1 + 2 * 5  # u0 has one event, every other user keeps two


def test_bound_contributions_refuses_an_element_unit_or_a_second_bound():
    with pytest.raises(ValueError, match=r"privacy_id_fn: .* user-level unit"):
        BoundContributions(PrivacyUnit())
    with pytest.raises(TypeError, match=r"max_contributions: give it in the PrivacyUnit"):
        BoundContributions(PrivacyUnit(id="user", max_contributions=2), 3)


def test_one_declaration_for_the_bound_and_the_release():
    unit = PrivacyUnit(id="user", max_contributions=2)
    agg = DPAggregate(
        beam.combiners.CountCombineFn(),
        CountLaplaceMechanism(unit.max_contributions),
        budget=PrivacyBudget.pure(1.0),
        privacy_unit=unit,
        noise_source=NoiseSource.insecure_for_tests(5),
        label="users",
    )
    p = beam.Pipeline(runner=RUNNER)
    _ = p | beam.Create(EVENTS) | BoundContributions(unit, element_id_fn="event") | agg
    assert agg.charge.privacy_unit == "user"
    assert "unit: user (id 'user', <= 2 contributions per window)" in agg.explain()
    # DPCount bounds the same unit itself.
    count = DPCount(PrivacyBudget.pure(1.0), privacy_unit=unit, label="count")
    _ = p | "Again" >> beam.Create(EVENTS) | count
    assert count.mechanism.max_contributions == 2
    assert count.charge.privacy_unit == "user"
