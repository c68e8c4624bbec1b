"""Typed outputs: every DP transform declares what it emits, and its rows carry a Beam schema.

For every case of ``tests/transform_cases.py`` the output PCollection's ``element_type`` is a
row type of ``beam_dpsketch.transforms.records`` (a ``NamedTuple`` registered with Beam's
``RowCoder``) or one of the release objects that module documents (a private sketch,
``PrivateKeyCounts``); every emitted element is of that type; rows
convert to a Beam DataFrame with one column per field; ``default_label`` shows the shape.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.linear.key_counts import PrivateKeyCounts
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch
from beam_dpsketch.transforms import DPHeavyHitters, DPQuantiles, DPSlidingWindowFrequencies
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.records import RECORD_TYPES, KeyEstimate, TimedHeavyHitters
from beam_dpsketch.transforms.sliding import SlidingLayout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from transform_cases import APPROX, CASES, EPS, POSITIONED  # noqa: E402

RUNNER = "FnApiRunner"
#: What ``beam_dpsketch.transforms.records`` documents as released objects rather than rows.
RELEASE_OBJECTS = (PrivateKeyCounts, PrivateCountMinSketch, PrivateCountSketch)


def _declared(name: str) -> tuple[beam.PTransform, Any]:
    case = CASES[name]
    pipeline = beam.Pipeline(runner=RUNNER)
    transform = case.make(f"typed-{name}")
    out = pipeline | beam.Create(case.seeded_input, reshuffle=False) | transform
    return transform, out.element_type


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_transform_declares_a_typed_output(name: str) -> None:
    transform, element_type = _declared(name)
    assert element_type != beam.typehints.Any
    if name == "bounding":
        # Contribution bounding releases nothing: it keeps some of its input rows.
        assert element_type == beam.typehints.Tuple[str, str]
        return
    if element_type in RECORD_TYPES:
        coder = beam.coders.registry.get_coder(element_type)
        assert isinstance(coder, beam.coders.RowCoder)
        assert [f.name for f in coder.schema.fields] == list(element_type._fields)
    else:
        # The documented release objects, typed as their class.
        assert element_type in RELEASE_OBJECTS, element_type


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_element_is_of_the_declared_type(name: str) -> None:
    case = CASES[name]
    with beam.Pipeline(runner=RUNNER) as p:
        out = p | beam.Create(case.seeded_input, reshuffle=False) | case.make(f"typed-{name}")
        expected = out.element_type
        check = tuple if name == "bounding" else expected

        def all_typed(elements: list[Any]) -> None:
            assert elements, "the case releases something"
            wrong = sorted({type(e).__name__ for e in elements if not isinstance(e, check)})
            assert wrong == [], f"{name}: emitted {wrong}, declared {expected}"

        assert_that(out, all_typed)


#: One case of each row type with more than one field (``count`` and ``quantiles`` are the
#: one-field and integer/float-valued rows, ``intermittent`` the time series).
DATAFRAME_CASES = ["count", "quantiles", "histogram-user-pamg-gshm", "continual", "intermittent"]


@pytest.mark.parametrize("name", DATAFRAME_CASES)
def test_rows_convert_to_a_dataframe(name: str) -> None:
    pytest.importorskip("pandas")
    from apache_beam.dataframe.convert import to_dataframe, to_pcollection

    case = CASES[name]
    with beam.Pipeline(runner=RUNNER) as p:
        out = p | beam.Create(case.seeded_input, reshuffle=False) | case.make(f"df-{name}")
        fields = list(out.element_type._fields)
        frame = to_dataframe(out)
        assert list(frame.columns) == fields
        # Back from the DataFrame: the same released values, field by field.
        back = to_pcollection(frame, include_indexes=False) | "AsTuples" >> beam.Map(tuple)
        released = out | "Released" >> beam.Map(tuple)
        assert_that(
            (back, released) | beam.Flatten() | beam.combiners.Count.PerElement(),
            lambda counts: _each_twice(counts),
        )


def _each_twice(counts: list[tuple[Any, int]]) -> None:
    assert counts, "the case releases something"
    assert all(n % 2 == 0 for _, n in counts), counts


def test_user_level_histogram_rows_keep_tuple_equality() -> None:
    row = KeyEstimate("k1", 224.5)
    assert row == ("k1", 224.5)
    key, estimate = row
    assert (key, estimate) == (row.key, row.estimate)


def test_default_label_shows_the_shape() -> None:
    by_field = DPHeavyHitters(16, APPROX, key_fn="route")
    assert by_field.default_label() == "DPHeavyHitters(route)"
    by_mechanism = DPHeavyHitters(16, APPROX, mechanism="design-b")
    assert by_mechanism.default_label() == "DPHeavyHitters(design-b)"
    by_value = DPQuantiles([0.5], 0, 15, EPS, tree=QuantileTree(width=32), value_fn="latency")
    assert by_value.default_label() == "DPQuantiles(latency)"
    for name, case in CASES.items():
        if name == "bounding":
            continue
        label = case.make(f"label-{name}").default_label()
        assert label.startswith(type(case.make(f"l-{name}")).__name__), label


def test_sliding_heavy_hitters_are_typed_rows_of_key_estimates() -> None:
    def make(label: str) -> DPSlidingWindowFrequencies:
        return DPSlidingWindowFrequencies(
            60,
            32,
            2,
            PrivacyBudget.zcdp(1.0),
            release_every=25,
            candidates=["k1", "k2", "nobody"],
            gamma=0.4,
            layout=SlidingLayout(block=10, alpha="1/2"),
            noise_source=NoiseSource.insecure_for_tests(25),
            label=label,
        )

    with beam.Pipeline(runner=RUNNER) as p:
        out = p | beam.Create(POSITIONED, reshuffle=False) | make("typed-sliding-hh")
        assert out.element_type is TimedHeavyHitters
        coder = beam.coders.registry.get_coder(TimedHeavyHitters)
        assert isinstance(coder, beam.coders.RowCoder)

        def typed(answers: list[Any]) -> None:
            assert answers and all(isinstance(a, TimedHeavyHitters) for a in answers)
            assert any(a.heavy_hitters for a in answers), "some answer names a heavy hitter"
            for answer in answers:
                assert all(isinstance(h, KeyEstimate) for h in answer.heavy_hitters)
                # Through the schema coder and back: the same answer.
                assert coder.decode(coder.encode(answer)) == answer

        assert_that(out, typed)
