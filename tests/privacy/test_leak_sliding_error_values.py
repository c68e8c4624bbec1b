"""Errors of DPSlidingWindowFrequencies and DPSWSketch name the parameter, never a data value.

A runner logs an exception raised on a worker and returns it as the job error, so the message is
a release: it must not contain keys, positions, event times, window bounds or counts taken from
the data. Each case feeds a distinctive value and checks that its text is absent from the
message (and that the message still names what is wrong).
"""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.transforms.window import IntervalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import PaneInfo, PaneInfoTiming

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from beam_dpsketch.transforms import DPSlidingWindowFrequencies
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.transforms.sliding.stamp import Stamp
from beam_dpsketch.transforms.sliding.steps import SegmentWindows, StepClock
from beam_dpsketch.transforms.sliding.tables import SegmentTables

# B = 10, alpha = 1/2: segments cut at {0, 1, 2, 3, 5, 7, 8, 9, 10}.
CUTS = (0, 1, 2, 3, 5, 7, 8, 9, 10)
SECRET = "secret-key-7f3a"


def stamp(mode: str, origin_micros: int = 0, **fns) -> Stamp:
    windows = SegmentWindows(10, CUTS, StepClock(1_000_000, origin_micros))
    key_fn = fns.pop("key_fn", lambda e: e[1])
    return Stamp(mode, windows, (16, 2, 5), key_fn, fns.get("position_fn"), fns.get("time_fn"))


@pytest.mark.parametrize(
    ("make", "element", "error", "names", "values"),
    [
        # Count-based rows: (position, key).
        (
            lambda: stamp("count", position_fn=lambda e: e[0]),
            (-7341, SECRET),
            ValueError,
            "position_fn",
            ["-7341", SECRET],
        ),
        (
            lambda: stamp("count", position_fn=lambda e: e[0]),
            (7341.5, SECRET),
            TypeError,
            "position_fn",
            ["7341.5", SECRET],
        ),
        # Time-based rows: (seconds, key) through time_fn.
        (
            lambda: stamp("time", time_fn=lambda e: e[0]),
            (float("nan"), SECRET),
            ValueError,
            "time_fn",
            ["nan", SECRET],
        ),
        (
            lambda: stamp("time", time_fn=lambda e: e[0]),
            ("12.25", SECRET),
            TypeError,
            "time_fn",
            ["12.25", SECRET],
        ),
        (
            lambda: stamp("time", 100_000_000, time_fn=lambda e: e[0]),
            (12.345678, SECRET),
            ValueError,
            "before the origin",
            ["12.345678", SECRET],
        ),
        # Batches.
        (
            lambda: stamp("count"),
            (-98765, pa.array([SECRET]), None),
            ValueError,
            "first position",
            ["-98765"],
        ),
        (
            lambda: stamp("count"),
            (np.array([5, -4242]), [SECRET, "b"]),
            ValueError,
            "1-based",
            ["-4242"],
        ),
        (
            lambda: stamp("count"),
            (np.array([5, 6, 7]), [SECRET]),
            ValueError,
            "one entry per key",
            ["(3,)", "1 keys"],
        ),
        (
            lambda: stamp("time", 100_000_000),
            (np.array([7.654321]), [SECRET]),
            ValueError,
            "before the origin",
            ["7.654321"],
        ),
    ],
    ids=[
        "neg-position",
        "float-position",
        "nan-time",
        "str-time",
        "row-before-origin",
        "batch-first-position",
        "batch-position",
        "batch-shape",
        "batch-before-origin",
    ],
)
def test_element_errors_hide_the_values(make, element, error, names, values):
    with pytest.raises(error) as info:
        list(make().process(element))
    message = str(info.value)
    assert names in message
    for value in values:
        assert value not in message


def test_segment_window_bounds_are_not_in_pane_errors():
    windows = SegmentWindows(10, CUTS, StepClock(1_000_000, 0))
    fn = SegmentTables("sw", windows)
    # Steps 4..5 of block 137: the window bounds locate data in time.
    window = IntervalWindow(Timestamp(1363), Timestamp(1365))
    early = PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1)
    with pytest.raises(RuntimeError, match="only one ON_TIME pane") as info:
        list(fn.process([CountMinSketch(8, 2), 1365], window=window, pane=early))
    assert "1363" not in str(info.value) and "1365" not in str(info.value)


def test_core_segment_errors_hide_positions():
    sk = DPSWSketch(
        20,
        PrivacyBudget.zcdp(1.0),
        width=8,
        depth=2,
        block=10,
        alpha="1/2",
        noise_source=NoiseSource.insecure_for_tests(1),
    )
    table = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(ValueError, match="one segment") as info:
        sk.add_range_counts(1364, 1369, table)
    assert "1364" not in str(info.value) and "1369" not in str(info.value)
    sk.advance_to(30)
    with pytest.raises(ValueError, match="ended at or before") as info:
        sk.add_segment_counts(2, 5, table)  # positions 18..18, sealed at t = 30
    assert "block 2" not in str(info.value) and "segment 5" not in str(info.value)
    with pytest.raises(ValueError, match="start is out of range") as info:
        sk.add_range_counts(-6173, 2, table)
    assert "6173" not in str(info.value)


class Dump:
    """assert_that matcher writing the output to a file (Beam pickles matchers)."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __call__(self, actual) -> None:
        with open(self.path, "wb") as f:
            pickle.dump(list(actual), f)


@pytest.mark.parametrize(
    ("positions", "counts"),
    [
        # Position 17 missing: at t = 30 the 30 positions hold 29 elements.
        ([p for p in range(1, 32) if p != 17], ["29 elements", "1..30"]),
        # Position 5 thirteen times more: its segment (positions 4..5) holds 15 elements.
        (list(range(1, 31)) + [5] * 13, ["15 elements", "4..5"]),
    ],
    ids=["gap", "duplicates"],
)
def test_count_mode_position_errors_hide_the_counts(tmp_path, positions, counts):
    dp = DPSlidingWindowFrequencies(
        20,
        16,
        2,
        PrivacyBudget.zcdp(1.0),
        release_every=30,
        query_keys=["a"],
        noise_source=NoiseSource.insecure_for_tests(3),
        label="sw",
        layout=SlidingLayout(block=10, alpha="1/2"),
    )
    p = beam.Pipeline(runner="FnApiRunner")
    out = p | beam.Create([(t, "a") for t in positions]) | dp
    assert_that(out, Dump(tmp_path / "out.pickle"))
    with pytest.raises(Exception, match="each position 1..n exactly once") as info:
        p.run().wait_until_finish()
    for text in counts:
        assert text not in str(info.value)
