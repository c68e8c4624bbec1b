"""Transforms that batch their input refuse ``AfterCount(n > 1)``: it would count batches, not rows.

A transform charges every pane its trigger can fire; with keys packed into batches of thousands
of rows before the triggered aggregation, ``AfterCount(n)`` counts batches, so the declared early
panes would almost never fire. The refusal happens when the transform is applied, before any
budget is charged.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, GlobalWindows

from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, Windowing
from beam_dpsketch.transforms import DPFrequencies, DPHeavyHitters, DPQuantiles

BUDGET = PrivacyBudget.approx(1.0, 1e-6)


def _transforms(accountant: PrivacyAccountant) -> dict[str, beam.PTransform]:
    return {
        "heavy-hitters": DPHeavyHitters(
            16,
            mechanism="design-b",
            accountant=accountant,
            windowing=Windowing(max_panes_per_window=4),
            label="hh",
        ),
        "frequencies": DPFrequencies(
            64, 3, accountant=accountant, windowing=Windowing(max_panes_per_window=4), label="freq"
        ),
        "quantiles": DPQuantiles(
            [0.5],
            0,
            100,
            accountant=accountant,
            windowing=Windowing(max_panes_per_window=4),
            label="q",
        ),
    }


def _windowed(trigger):
    p = beam.Pipeline(runner=FnApiRunner())
    return (
        p
        | beam.Create([1, 2, 3])
        | beam.WindowInto(
            FixedWindows(10), trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
        )
    )


@pytest.mark.parametrize("name", ["heavy-hitters", "frequencies", "quantiles"])
@pytest.mark.parametrize(
    "trigger",
    [
        tr.AfterWatermark(early=tr.AfterCount(100)),
        tr.AfterWatermark(late=tr.AfterCount(2)),
        tr.Repeatedly(tr.AfterAny(tr.AfterCount(5), tr.AfterWatermark())),
    ],
)
def test_element_count_triggers_are_refused_before_charging(name, trigger):
    accountant = PrivacyAccountant(BUDGET, name="run")
    transform = _transforms(accountant)[name]
    with pytest.raises(ValueError, match="AfterCount"):
        _ = _windowed(trigger) | transform
    assert accountant.all_charges() == []


@pytest.mark.parametrize("name", ["heavy-hitters", "frequencies", "quantiles"])
def test_after_count_one_and_watermark_triggers_are_accepted(name):
    for trigger in (tr.AfterWatermark(early=tr.AfterCount(1)), tr.AfterWatermark()):
        accountant = PrivacyAccountant(BUDGET, name="run")
        _ = _windowed(trigger) | _transforms(accountant)[name]
        assert len(accountant.all_charges()) == 1


def test_global_window_default_trigger_is_accepted():
    accountant = PrivacyAccountant(BUDGET, name="run")
    p = beam.Pipeline(runner=FnApiRunner())
    keys = p | beam.Create([1, 2]) | beam.WindowInto(GlobalWindows())
    _ = keys | _transforms(accountant)["heavy-hitters"]
    assert len(accountant.all_charges()) == 1
