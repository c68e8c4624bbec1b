"""BatchKeys: batch shapes, windows, bad elements (TypeError naming the type) and dead letters."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import FixedWindows, IntervalWindow, TimestampedValue
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.transforms import BatchKeys, KeyBatch, SketchGlobally, SketchPerKey
from beam_dpsketch.transforms.batching import _BatchKeysDoFn, validate_key_batch


def fnapi_pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner())


def _run_dofn(elements, batch_size=3, max_buffered=100, grouped=False, window=None):
    """Drive the DoFn by hand, as a runner would within one bundle."""
    from apache_beam.transforms.window import GlobalWindow

    window = window or GlobalWindow()
    fn = _BatchKeysDoFn(None, batch_size, max_buffered, False, grouped)
    fn.start_bundle()
    out = []
    for e in elements:
        out.extend(fn.process(e, window=window))
    out.extend(fn.finish_bundle())
    return out


def test_batches_ints_as_int64_arrays_and_others_as_key_batches():
    out = _run_dofn([1, 2, 3, 4, "a", 5], batch_size=3)
    values = [wv.value for wv in out]
    assert isinstance(values[0], np.ndarray) and values[0].dtype == np.int64
    assert values[0].tolist() == [1, 2, 3]
    assert isinstance(values[1], KeyBatch) and values[1] == [4, "a", 5]
    # Every batch carries its window's end, like Beam's BatchElements.
    assert all(wv.timestamp == wv.windows[0].max_timestamp() for wv in out)


def test_canonicalises_keys_and_keeps_big_ints_out_of_int64():
    out = _run_dofn([True, np.int32(7), 2**70, bytearray(b"x"), ("a", np.int64(1))], batch_size=10)
    (batch,) = [wv.value for wv in out]
    assert batch == [1, 7, 2**70, b"x", ("a", 1)]
    assert [type(k) for k in batch[:2]] == [int, int]


def test_max_buffered_flushes_everything():
    w1, w2 = IntervalWindow(0, 10), IntervalWindow(10, 20)
    fn = _BatchKeysDoFn(None, 100, 3, False, False)
    fn.start_bundle()
    out = list(fn.process(1, window=w1)) + list(fn.process(2, window=w2))
    out += list(fn.process(3, window=w1))
    assert out == []
    out += list(fn.process(4, window=w2))
    assert sorted((wv.windows[0].start, wv.value.tolist()) for wv in out) == [
        (0, [1, 3]),
        (10, [2, 4]),
    ]
    assert list(fn.finish_bundle()) == []


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [(None, "NoneType"), (1.5, "float"), ([1, 2], "list"), ({"a": 1}, "dict")],
)
def test_bad_key_raises_type_error_naming_the_type(bad, type_name):
    with pytest.raises(TypeError, match=type_name):
        _run_dofn(["ok", bad])


def test_validate_key_batch():
    assert validate_key_batch(np.array([True, False]))[0].dtype == np.int64
    valid, invalid = validate_key_batch(pa.array(["a", None, "b"]))
    assert valid.to_pylist() == ["a", "b"] and invalid[0][0] is None
    valid, invalid = validate_key_batch(np.array(["a", 1.5, None], dtype=object))
    assert valid == ["a"] and [type(x) for x, _ in invalid] == [float, type(None)]
    _, invalid = validate_key_batch(np.array([1.0, 2.0]))
    assert "float64" in invalid[0][1]
    _, invalid = validate_key_batch(pa.array([1.0]))
    assert "double" in invalid[0][1]


@pytest.mark.parametrize(("bad", "type_name"), [(None, "NoneType"), (2.5, "float"), ([3], "list")])
def test_bad_key_fails_the_pipeline(bad, type_name):
    with pytest.raises(TypeError, match=f"invalid key of type '{type_name}'"):
        with fnapi_pipeline() as p:
            _ = p | beam.Create(["a", bad, "b"]) | SketchGlobally.count_min(8, 2)


def test_null_in_prebatched_array_fails_the_pipeline():
    with pytest.raises(TypeError, match="None is not a valid key"):
        with fnapi_pipeline() as p:
            arrays = p | beam.Create([0]) | beam.Map(lambda _: pa.array(["a", None]))
            _ = arrays | SketchGlobally.misra_gries(3)


def test_dead_letter_collects_bad_elements_and_sketches_the_rest():
    elements = ["a", None, 2.5, "b", [1], "a", np.float32(1.0)]
    with fnapi_pipeline() as p:
        result = p | beam.Create(elements) | SketchGlobally.misra_gries(5, dead_letter=True)
        invalid_types = result["invalid"] | beam.MapTuple(lambda e, reason: type(e).__name__)
        assert_that(
            invalid_types, equal_to(["NoneType", "float", "list", "float32"]), label="invalid"
        )
        reasons_name_types = result["invalid"] | beam.MapTuple(
            lambda e, reason: type(e).__name__ in reason
        )
        assert_that(reasons_name_types, equal_to([True] * 4), label="reasons")

        def check(actual):
            assert [mg.to_dict() for mg in actual] == [{"a": 2, "b": 1}]

        assert_that(result["sketches"], check, label="sketch")


def test_dead_letter_catches_key_fn_errors_and_nulls_in_arrays():
    records = [{"k": "a"}, {"x": 1}, {"k": "b"}]
    with fnapi_pipeline() as p:
        result = (
            p
            | beam.Create(records)
            | "Keys" >> BatchKeys(key_fn=lambda r: r["k"], dead_letter=True)
        )
        assert_that(
            result["invalid"] | beam.MapTuple(lambda e, reason: (e, reason.split(":")[0])),
            equal_to([({"x": 1}, "key_fn failed")]),
            label="invalid",
        )
        nulls = (
            p
            | "Arrays" >> beam.Create([0])
            | beam.Map(lambda _: pa.array(["a", None, None]))
            | "Nulls" >> BatchKeys(dead_letter=True)
        )
        assert_that(
            nulls["invalid"] | beam.MapTuple(lambda e, reason: e),
            equal_to([None, None]),
            label="nulls",
        )


def test_per_key_rejects_non_pairs():
    with pytest.raises(TypeError, match="expected a \\(group, key\\) pair.*'str'"):
        with fnapi_pipeline() as p:
            _ = p | beam.Create(["not-a-pair"]) | SketchPerKey.misra_gries(2)


def test_batches_are_per_window_in_a_pipeline():
    def windows_and_sizes(batch, window=beam.DoFn.WindowParam):
        return (window.start, sorted(batch.tolist()))

    with fnapi_pipeline() as p:
        out = (
            p
            | beam.Create([(1, 1), (2, 12), (3, 3), (4, 14), (5, 25)], reshuffle=False)
            | beam.MapTuple(TimestampedValue)
            | beam.WindowInto(FixedWindows(10))
            | BatchKeys(batch_size=100)
            | beam.Map(windows_and_sizes)
        )
        assert_that(out, equal_to([(0, [1, 3]), (10, [2, 4]), (20, [5])]))


def test_windowed_value_output_keeps_a_single_window():
    out = _run_dofn([1, 2], batch_size=2, window=IntervalWindow(0, 5))
    assert len(out) == 1 and isinstance(out[0], WindowedValue)
    assert out[0].windows == (IntervalWindow(0, 5),)


def test_invalid_batch_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        BatchKeys(batch_size=0)
    with pytest.raises(ValueError, match="key_fn"):
        BatchKeys(key_fn="route")
    with pytest.raises(ValueError, match="max_buffered"):
        BatchKeys(max_buffered=-1)


def test_grouped_batches_and_unhashable_groups():
    out = _run_dofn([("g", 1), (np.int64(2), "a"), ("g", 3)], batch_size=10, grouped=True)
    got = {wv.value[0]: wv.value[1] for wv in out}
    assert got["g"].tolist() == [1, 3] and got[2] == ["a"] and type(next(iter(got))) is str
    with pytest.raises(TypeError, match="group of type 'list' is not hashable"):
        _run_dofn([(["g"], 1)], grouped=True)
