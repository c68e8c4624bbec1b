"""DPSlidingWindowFrequencies counts each element once: its input must be in the global window.

The transform re-windows its input into the public segment windows of DPSW-Sketch (Wang, Wang
and Chen, KDD 2024, Section 4.1) and charges ``rho`` once. An element of an input windowed with
``SlidingWindows(size, period)`` is one windowed value per window it belongs to, so re-windowing
would count it ``size / period`` times (or more) while the single charge assumes one. Any
non-global WindowFn is therefore refused when the transform is applied, with a ``ValueError``
naming the WindowFn; on the trigger side only the default trigger (or ``AfterWatermark()``
without early or late firings) is accepted, in both modes.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindows,
    Sessions,
    SlidingWindows,
    TimestampedValue,
)

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout


def transform(mode: str) -> DPSlidingWindowFrequencies:
    return DPSlidingWindowFrequencies(
        20,
        16,
        2,
        PrivacyBudget.zcdp(1.0),
        release_every=5,
        query_keys=["a"],
        mode=mode,
        origin=0 if mode == "time" else None,
        noise_source=NoiseSource.insecure_for_tests(3),
        label=f"sw-windowing-{mode}",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )


def windowed_input(
    p: beam.Pipeline, windowing: beam.WindowInto, name: str = "Input"
) -> beam.PCollection:
    rows = [TimestampedValue((i, "a"), float(i)) for i in range(1, 21)]
    return p | f"Create{name}" >> beam.Create(rows) | f"Window{name}" >> windowing


@pytest.mark.parametrize("mode", ["count", "time"])
@pytest.mark.parametrize(
    "windowfn",
    [SlidingWindows(10, 2), SlidingWindows(10, 5), FixedWindows(10), Sessions(5)],
    ids=["sliding-10-2", "sliding-10-5", "fixed", "sessions"],
)
def test_non_global_windowfn_is_refused_at_application(mode, windowfn):
    p = beam.Pipeline(runner="FnApiRunner")
    pcoll = windowed_input(p, beam.WindowInto(windowfn))
    dp = transform(mode)
    with pytest.raises(
        ValueError, match=r"windowfn: DPSlidingWindowFrequencies needs GlobalWindows"
    ):
        _ = pcoll | dp
    # Nothing was applied, so the same instance still accepts a correctly windowed input.
    _ = windowed_input(p, beam.WindowInto(GlobalWindows()), "Global") | "Global" >> dp


@pytest.mark.parametrize("mode", ["count", "time"])
@pytest.mark.parametrize(
    "trigger",
    [
        tr.AfterWatermark(early=tr.AfterCount(1)),
        tr.AfterWatermark(late=tr.AfterCount(1)),
        tr.Repeatedly(tr.AfterCount(2)),
        tr.AfterProcessingTime(5),
    ],
    ids=["early", "late", "repeated-count", "processing-time"],
)
def test_data_dependent_triggers_are_refused_in_both_modes(mode, trigger):
    p = beam.Pipeline(runner="FnApiRunner")
    pcoll = windowed_input(
        p,
        beam.WindowInto(
            GlobalWindows(), trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
        ),
    )
    with pytest.raises(ValueError, match="the input's trigger"):
        _ = pcoll | transform(mode)


@pytest.mark.parametrize("mode", ["count", "time"])
@pytest.mark.parametrize("trigger", [tr.DefaultTrigger(), tr.AfterWatermark()])
def test_global_window_with_a_data_independent_trigger_is_accepted(mode, trigger):
    p = beam.Pipeline(runner="FnApiRunner")
    pcoll = windowed_input(
        p,
        beam.WindowInto(
            GlobalWindows(), trigger=trigger, accumulation_mode=tr.AccumulationMode.DISCARDING
        ),
    )
    _ = pcoll | transform(mode)
