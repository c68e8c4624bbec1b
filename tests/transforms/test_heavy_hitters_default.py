"""One default release for heavy hitters, the same in ``DPHeavyHitters`` and the command line.

``DPHeavyHitters()`` without ``mechanism`` is the ``heavy-hitters`` command's default release:
``select-then-count`` at element level, ``user-exact`` at user level. A windowing that
select-then-count refuses (early firings) is refused when applied, and the refusal states the
rule and names ``mechanism="design-b"``, which then runs. ``DPHistogram`` keeps ``design-b``.
Runner: FnApiRunner in-process.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms.window import FixedWindows, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.heavy_hitters import (
    CLI_DEFAULT_MECHANISM,
    CLI_DEFAULT_USER_MECHANISM,
)
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit, Windowing
from beam_dpsketch.transforms import DPHeavyHitters, DPHistogram

BUDGET = PrivacyBudget.approx(1.0, 1e-6)


def test_api_default_is_the_cli_default_at_both_levels():
    element = DPHeavyHitters(64, BUDGET)
    user = DPHeavyHitters(
        64, BUDGET, privacy_unit=PrivacyUnit(id="user", max_contributions=2), key_fn="key"
    )
    assert element.mechanism_name == CLI_DEFAULT_MECHANISM == "select-then-count"
    assert user.mechanism_name == CLI_DEFAULT_USER_MECHANISM == "user-exact"
    assert DPHistogram(64, BUDGET).mechanism_name == "design-b"


def test_default_releases_heavy_hitters_in_the_global_window(tmp_path):
    dump = DumpToFile(str(tmp_path / "out.pickle"))
    keys = np.repeat(np.arange(5, dtype=np.int64), [900, 700, 500, 300, 100])
    t = DPHeavyHitters(
        64, BUDGET, top=3, noise_source=NoiseSource.insecure_for_tests(2), label="hh-default"
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create([keys]) | t, dump)
    released = sorted(dump.load(), key=lambda record: -record[1])
    assert [r.key for r in released] == [0, 1, 2]
    # select-then-count: exact counts plus noise, no sketch error, with an error bound.
    for key, count, *_ in released:
        assert abs(count - (900, 700, 500)[key]) <= released[0].upper - released[0].count + 1
    assert "select-then-count" in t.explain()


def _early_firing(p, name="Data"):
    return (
        p
        | f"{name}Create" >> beam.Create([TimestampedValue(i % 3, i) for i in range(30)])
        | f"{name}Window"
        >> beam.WindowInto(
            FixedWindows(10),
            trigger=tr.AfterWatermark(early=tr.AfterCount(1)),
            accumulation_mode=tr.AccumulationMode.DISCARDING,
        )
    )


def test_windowing_the_default_refuses_names_design_b():
    p = beam.Pipeline(runner=FnApiRunner())
    with pytest.raises(ValueError, match="Accepted instead: mechanism='design-b'") as e:
        _ = _early_firing(p) | DPHeavyHitters(8, BUDGET, label="hh")
    assert "defaults to mechanism 'select-then-count'" in str(e.value)
    # Given explicitly, design-b takes this windowing (with its declared panes).
    _ = _early_firing(p, "Again") | "B" >> DPHeavyHitters(
        8, BUDGET, mechanism="design-b", windowing=Windowing(max_panes_per_window=7), label="hh-b"
    )


def test_an_explicit_select_then_count_refusal_states_no_default_rule():
    p = beam.Pipeline(runner=FnApiRunner())
    with pytest.raises(ValueError) as e:
        _ = _early_firing(p) | DPHeavyHitters(8, BUDGET, mechanism="select-then-count", label="hh")
    assert "defaults to" not in str(e.value)
