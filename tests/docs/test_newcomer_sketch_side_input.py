"""A newcomer's task, written from the docs only: a released sketch as a side input.

``docs/guide/frequencies.md`` says that ``DPFrequencies`` without ``query_keys`` releases one
private Count Sketch per window, whose ``estimate(keys)`` answers a batch of keys chosen
afterwards, for instance as a side input, with a per-estimate ``error_bound``.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

import beam_dpsketch as dps


def test_released_sketch_answers_a_later_step_as_a_side_input() -> None:
    """Keys chosen after the release are looked up in the released sketch, within its bound."""
    events = ["JFK"] * 500 + ["LAX"] * 200 + [f"k{i}" for i in range(300)]
    truth = {"JFK": 500, "LAX": 200, "SFO": 0}
    frequencies = dps.DPFrequencies(
        width=1024,
        depth=3,
        budget=dps.PrivacyBudget.pure(1.0),
        noise_source=dps.NoiseSource.insecure_for_tests(27),
    )

    def lookup(key: str, sketch: Any) -> tuple[str, float, float]:
        return key, float(sketch.estimate([key])[0]), float(sketch.error_bound(0.95))

    def check(answers: list[tuple[str, float, float]]) -> None:
        assert sorted(key for key, _, _ in answers) == sorted(truth)
        for key, estimate, bound in answers:
            # A 95 % bound: a loose multiple keeps this deterministic check meaningful.
            if abs(estimate - truth[key]) > 3 * bound:
                pytest.fail(f"{key}: {estimate} vs {truth[key]} (bound {bound})")

    with beam.Pipeline(runner=FnApiRunner()) as p:
        sketch = p | "Events" >> beam.Create(events) | frequencies
        questions = p | "Questions" >> beam.Create(sorted(truth))
        answers = questions | beam.Map(lookup, sketch=beam.pvalue.AsSingleton(sketch))
        assert_that(answers, check)
