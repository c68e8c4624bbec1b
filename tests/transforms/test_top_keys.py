"""DPTopKeys in Beam: equal to the single-machine release, windowed, accounted, explained.

Runner: FnApiRunner in-process. Expected rows are recomputed from the same keyed noise stream
(``release_id_for``), so equality shows that the exact part is the single-machine tree and that
the noise was drawn once per window.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    IntervalWindow,
    TimestampedValue,
)
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches.prefix_tree import PrefixTreeSketch, PrivatePrefixTree
from beam_dpsketch.transforms import DPTopKeys
from beam_dpsketch.transforms.records import BoundedKeyEstimate
from beam_dpsketch.transforms.release import release_id_for

W, D, L = 512, 3, 12


@pytest.fixture
def dump(tmp_path):
    return DumpToFile(tmp_path / "out.pickle")


def _keys() -> list[str]:
    # Five heavy keys of different lengths and a light tail of 400 distinct keys.
    heavy = {"a": 3000, "bb": 2500, "checkout": 2000, "search?q=x": 1500, "héllo": 1200}
    keys = [k for k, n in heavy.items() for _ in range(n)]
    keys += [f"tail-{i}" for i in range(400)] * 2
    return keys


def test_release_equals_the_single_machine_release(dump):
    source = NoiseSource.insecure_for_tests(41)
    budget = PrivacyBudget.approx(1.0, 1e-6)
    t = DPTopKeys(
        5, budget, width=W, depth=D, max_key_bytes=L, seed=9, noise_source=source, label="tk"
    )
    keys = _keys()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | beam.Create(keys, reshuffle=True) | t
        assert_that(rows, dump)
    got = dump.load()
    assert all(isinstance(r, BoundedKeyEstimate) for r in got)
    exact = PrefixTreeSketch(W, D, L, 9).update(keys)
    stream = t.aggregate.noise_source.stream(release_id_for("tk", GlobalWindow(), 0))
    released = PrivatePrefixTree.release(exact, t.aggregate.per_release_budget, stream)
    expected = [tuple(r) for r in released.top_keys(5, beam=160)]
    assert [tuple(r) for r in got] == expected
    # The heavy keys are found with no key list, in order.
    assert [r.key for r in got] == ["a", "bb", "checkout", "search?q=x", "héllo"]
    for r in got:
        assert r.lower <= r.estimate <= r.upper and r.confidence == 0.95


def test_fixed_windows_release_each_window_top_keys(dump):
    # "Top keys of the last hour": one release per fixed window, each with its own heavy keys.
    source = NoiseSource.insecure_for_tests(42)
    events = [("x", 5)] * 800 + [("y", 5)] * 300 + [("y", 3605)] * 900 + [("z", 3610)] * 400
    t = DPTopKeys(
        2,
        PrivacyBudget.zcdp(0.5),
        width=W,
        depth=D,
        max_key_bytes=4,
        key_fn=lambda e: e[0],
        noise_source=source,
        with_metadata=True,
        label="hourly",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        windowed = (
            p
            | beam.Create(events)
            | beam.Map(lambda e: TimestampedValue(e, e[1]))
            | beam.WindowInto(FixedWindows(3600))
        )
        assert_that(windowed | t, dump)
    releases = {r.window_start: r for r in dump.load()}
    assert sorted(releases) == [0, 3600]
    assert [r.key for r in releases[0].records] == ["x", "y"]
    assert [r.key for r in releases[3600].records] == ["y", "z"]
    # Window [0, 3600)'s rows are the single-machine release of that window's tree.
    exact = PrefixTreeSketch(W, D, 4).update(["x"] * 800 + ["y"] * 300)
    rid = release_id_for("hourly", IntervalWindow(0, 3600), 0)
    released = PrivatePrefixTree.release(
        exact, t.aggregate.per_release_budget, t.aggregate.noise_source.stream(rid)
    )
    assert [tuple(r) for r in releases[0].records] == [
        tuple(r) for r in released.top_keys(2, beam=64)
    ]


def test_budget_is_charged_once_and_explained():
    acc = PrivacyAccountant(PrivacyBudget.zcdp(1.0))
    t = DPTopKeys(
        3,
        PrivacyBudget.zcdp(0.25),
        width=W,
        depth=D,
        max_key_bytes=L,
        accountant=acc,
        noise_source=NoiseSource.insecure_for_tests(43),
        label="tk-explain",
    )
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create(["a", "b"]) | t
    assert acc.spent.rho == pytest.approx(0.25)
    report = t.explain()
    assert "dp-prefix-tree/count-sketch" in report
    # The whole tree's L2 sensitivity sqrt((L + 1) d) is stated.
    assert f"{np.sqrt((L + 1) * D):g} (l2, add_remove)" in report
    params = t.display_parameters()
    assert params["max_key_bytes"] == L and params["beam"] == 96


def test_invalid_parameters_name_the_parameter():
    with pytest.raises(ValueError, match="max_key_bytes"):
        DPTopKeys(3, PrivacyBudget.pure(1.0), max_key_bytes=0)
    with pytest.raises(ValueError, match="k"):
        DPTopKeys(0, PrivacyBudget.pure(1.0))
    with pytest.raises(ValueError, match="beam"):
        DPTopKeys(3, PrivacyBudget.pure(1.0), beam=0)
    with pytest.raises(ValueError, match="kind"):
        DPTopKeys(3, PrivacyBudget.pure(1.0), sketch="misra-gries")


def test_sliding_windows_split_the_budget_over_the_windows_of_an_element(dump):
    from apache_beam.transforms.window import SlidingWindows

    t = DPTopKeys(
        1,
        PrivacyBudget.zcdp(0.5),
        width=W,
        depth=D,
        max_key_bytes=4,
        noise_source=NoiseSource.insecure_for_tests(44),
        with_metadata=True,
        label="slide",
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | beam.Create([("x", 100)] * 900 + [("y", 1900)] * 600)
            | beam.Map(lambda e: TimestampedValue(e[0], e[1]))
            | beam.WindowInto(SlidingWindows(2000, 1000))
            | t
        )
        assert_that(out, dump)
    # Each element is in size / period = 2 windows: each window's release gets half the budget.
    assert t.aggregate.per_release_budget.rho == pytest.approx(0.25)
    releases = {r.window_start: [x.key for x in r.records] for r in dump.load()}
    assert releases == {-1000: ["x"], 0: ["x"], 1000: ["y"]}
