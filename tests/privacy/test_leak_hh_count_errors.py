"""Errors on the heavy-hitter, count and bounding paths never quote the data.

Exception messages and the worker logs that repeat them leave a pipeline outside any release. A
bad element whose text is a distinctive marker is fed through each path; the marker (or the
distinctive number derived from the data) must not appear in the raised message, in the
formatted traceback or in the captured logs. Pipelines run on the FnApiRunner.
"""

from __future__ import annotations

import logging
import traceback

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that

from beam_dpsketch import serialization
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
from beam_dpsketch.privacy.bounding import bounded_mask, contribution_ranks
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    PAMGSketch,
    PostProcessedSum,
    stability_histogram,
)
from beam_dpsketch.transforms import BatchKeys, BoundContributions, DPCount, DPHeavyHitters
from beam_dpsketch.transforms.batching import validate_key_batch

RUNNER = "FnApiRunner"
#: The bad element: ``int(SECRET)`` raises a ValueError that quotes it.
SECRET = "SECRET-alice-7731"
APPROX = PrivacyBudget.approx(1.0, 1e-6)
KEY = b"error-message-test-key-000000001"


def _to_int(value: str) -> int:
    return int(value)


def _run_and_capture(transform: beam.PTransform, elements: list, caplog) -> str:
    """Run ``elements | transform``; return the failure's message, traceback and the logs."""
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Exception) as info:  # noqa: PT011 - any failure; its text is checked
        with beam.Pipeline(runner=RUNNER) as p:
            _ = p | beam.Create(elements, reshuffle=False) | transform
    exc = info.value
    return "\n".join([str(exc), "".join(traceback.format_exception(exc)), caplog.text])


# --------------------------------------------------------------------------------------------
# User functions failing inside pipelines
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, elements, name",
    [
        (lambda: BoundContributions(_to_int, 1), [SECRET], "privacy_id_fn"),
        (
            lambda: BoundContributions(len, 1, key_fn=_to_int, max_partitions=1),
            [SECRET],
            "key_fn",
        ),
        (lambda: BoundContributions(len, 1, element_id_fn=_to_int), [SECRET], "element_id_fn"),
        (
            lambda: DPHeavyHitters(4, APPROX, mechanism="design-b", key_fn=_to_int),
            [SECRET],
            "key_fn",
        ),
        (
            lambda: DPHeavyHitters(4, APPROX, privacy_unit=PrivacyUnit(id=_to_int), key_fn=len),
            [SECRET],
            "privacy_unit.id",
        ),
        (
            lambda: DPCount(
                PrivacyBudget.pure(1.0),
                privacy_unit=PrivacyUnit(id=_to_int),
            ),
            [SECRET],
            "privacy_unit.id",
        ),
    ],
    ids=[
        "bound-privacy-id",
        "bound-key",
        "bound-element-id",
        "heavy-hitters-key",
        "heavy-hitters-user-id",
        "count-user-id",
    ],
)
def test_failing_user_function_names_itself_not_the_element(make, elements, name, caplog):
    text = _run_and_capture(make(), elements, caplog)
    assert SECRET not in text
    assert f"{name} raised ValueError" in text


def test_dead_letter_reason_does_not_quote_the_element():
    def keep(actual):
        assert len(actual) == 1 and SECRET not in actual[0][1]
        assert actual[0][1] == "key_fn failed: ValueError"

    with beam.Pipeline(runner=RUNNER) as p:
        result = p | beam.Create([SECRET]) | BatchKeys(key_fn=_to_int, dead_letter=True)
        assert_that(result["invalid"], keep)


# --------------------------------------------------------------------------------------------
# Counts and totals of the data in messages of the core objects
# --------------------------------------------------------------------------------------------


def test_pamg_user_over_the_bound_does_not_state_the_users_count():
    with pytest.raises(ValueError, match="more than m=2") as info:
        PAMGSketch(4, 2).update_user([f"x{i}" for i in range(4321)])
    assert "4321" not in str(info.value)


def test_misra_gries_bytes_with_impossible_totals_do_not_state_them():
    params = {"k": 1, "n": 987_654, "d": 987_653, "merged": False}
    data, offsets = serialization.pack_bytes_list([])
    arrays = {
        "key_data": data,
        "key_offsets": offsets,
        "counts": np.zeros(0, np.int64),
        "dummy_ids": np.array([0], np.int64),
    }
    blob = serialization.dumps(MisraGries.KIND, params, arrays)
    with pytest.raises(serialization.SketchFormatError, match="impossible") as info:
        MisraGries.from_bytes(blob)
    assert "987654" not in str(info.value) and "987653" not in str(info.value)


def _bad_utf8_key(position: int) -> bytes:
    """A str-key encoding whose payload has an invalid UTF-8 byte at ``position``."""
    enc = bytearray(encode_key("a" * (position + 10)))
    enc[position] = 0xFF  # the payload comes first, the type tag last
    return bytes(enc)


@pytest.mark.parametrize("kind", ["misra-gries", "post-processed-sum", "pamg"])
def test_malformed_key_bytes_are_not_quoted(kind):
    # The decoder's own message names the bad byte and its position in the key.
    data, offsets = serialization.pack_bytes_list([_bad_utf8_key(4321)])
    one = np.array([1], np.int64)
    if kind == "misra-gries":
        params = {"k": 1, "n": 1, "d": 0, "merged": False}
        arrays = {"counts": one, "dummy_ids": np.zeros(0, np.int64)}
        cls = MisraGries
    elif kind == "post-processed-sum":
        params = {"k": 1, "max_shards": 1, "shards": 1, "n": 1}
        arrays = {"scaled": one}
        cls = PostProcessedSum
    else:
        params = {"k": 1, "m": 1, "n_users": 1, "total": 1, "merged": False}
        arrays = {"counts": one}
        cls = PAMGSketch
    arrays.update(key_data=data, key_offsets=offsets)
    blob = serialization.dumps(cls.KIND, params, arrays)
    with pytest.raises(serialization.SketchFormatError, match="malformed key") as info:
        cls.from_bytes(blob)
    assert "4321" not in str(info.value) and "0xff" not in str(info.value)


def test_design_b_over_max_shards_does_not_state_the_shard_count():
    # How many non-empty segments a window has depends on the data (one element can be a
    # bundle's only one); the message names the declared bound only.
    full = PostProcessedSum(2, max_shards=40)
    for i in range(40):
        full.add_sketch(MisraGries(2).update([i]))
    with pytest.raises(ValueError, match="max_shards=40 exceeded") as info:
        full.add_sketch(MisraGries(2).update([1]))
    assert "41" not in str(info.value)


def test_histogram_count_value_is_not_quoted():
    from beam_dpsketch.noise import NoiseSource

    stream = NoiseSource.insecure_for_tests(0).stream("errors")
    with pytest.raises(ValueError, match="non-negative") as info:
        stability_histogram({"a": -424_242}, PrivacyBudget.approx(1.0, 1e-6), stream)
    assert "424242" not in str(info.value)


@pytest.mark.parametrize("fn", [contribution_ranks, bounded_mask])
def test_bounding_length_mismatch_does_not_state_the_lengths(fn):
    args = (KEY, ["u"] * 4321, list(range(4322)))
    with pytest.raises(ValueError, match="same length") as info:
        fn(*args) if fn is contribution_ranks else fn(*args, 1)
    assert "4321" not in str(info.value) and "4322" not in str(info.value)


def test_key_batch_shape_is_not_stated():
    _, invalid = validate_key_batch(np.zeros((4321, 2), np.int64))
    (reason,) = [r for _, r in invalid]
    assert "one-dimensional" in reason and "4321" not in reason
