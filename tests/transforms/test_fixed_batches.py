"""FixedBatches: batch sizes, windows and timestamps as beam.BatchElements, and no metric."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, GlobalWindow, TimestampedValue
from collect import DumpToFile

from beam_dpsketch.transforms.batching import FixedBatches


def _pipeline() -> beam.Pipeline:
    return beam.Pipeline(
        runner="FnApiRunner", options=PipelineOptions(["--direct_running_mode=in_memory"])
    )


def _describe(batch, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam):
    """``(window start or None, is at the window's end, elements, size)`` of a batch."""
    start = None if isinstance(window, GlobalWindow) else int(window.start)
    return start, timestamp == window.max_timestamp(), sorted(batch), len(batch)


@pytest.fixture
def run(tmp_path):
    def _run(elements: list, transform: beam.PTransform, windowed: bool) -> tuple[list, list]:
        """The batches described by ``_describe``, and every user metric the run reports."""
        p = _pipeline()
        pcoll = p | beam.Create(elements, reshuffle=False)
        if windowed:
            pcoll = pcoll | beam.WindowInto(FixedWindows(10))
        dump = DumpToFile(str(tmp_path / "batches.pickle"))
        assert_that(pcoll | transform | beam.Map(_describe), dump)
        result = p.run()
        result.wait_until_finish()
        metrics = result.metrics().query(MetricsFilter())
        return dump.load(), [m for kind in metrics.values() for m in kind]

    return _run


def test_batches_of_at_most_batch_size_in_the_global_window(run):
    batches, _ = run(list(range(10)), FixedBatches(4), windowed=False)
    assert sorted(size for *_, size in batches) == [2, 4, 4]
    assert sorted(e for _, _, elements, _ in batches for e in elements) == list(range(10))
    assert all(start is None and at_end for start, at_end, _, _ in batches)


def test_a_batch_holds_one_window_and_carries_its_end(run):
    rows = [TimestampedValue(i, i) for i in range(25)]
    batches, _ = run(rows, FixedBatches(4), windowed=True)
    by_window: dict[int, list[int]] = {}
    for start, at_end, elements, size in batches:
        assert at_end and size <= 4
        assert all(start <= e < start + 10 for e in elements)
        by_window.setdefault(start, []).extend(elements)
    assert {s: sorted(es) for s, es in by_window.items()} == {
        0: list(range(10)),
        10: list(range(10, 20)),
        20: list(range(20, 25)),
    }


def test_max_buffered_flushes_every_window(run):
    rows = [TimestampedValue(i, i) for i in range(40)]
    batches, _ = run(rows, FixedBatches(100, max_buffered=3), windowed=True)
    assert all(size <= 4 for *_, size in batches)
    assert sorted(e for _, _, elements, _ in batches for e in elements) == list(range(40))


def test_registers_no_metric(run):
    _, metrics = run(list(range(1000)), FixedBatches(7), windowed=False)
    assert metrics == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_batch_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="batch_size"):
        FixedBatches(bad)


def test_matches_batch_elements_on_content():
    p = _pipeline()
    batches = p | beam.Create(list(range(50)), reshuffle=False) | FixedBatches(8)
    assert_that(batches | beam.FlatMap(lambda b: b), equal_to(list(range(50))))
    p.run().wait_until_finish()
