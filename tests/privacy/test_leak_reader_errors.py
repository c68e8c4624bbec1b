"""Errors from reading input name the file and the parameter, never a value from a row.

Beam logs a failed pipeline's exception and returns it as the job error, so a message that
quoted a cell would publish it.
"""

from __future__ import annotations

import apache_beam as beam
import pytest

from beam_dpsketch.hashing import decode_key, encode_key
from beam_dpsketch.transforms.readers import ReadKeyBatches

SECRET = "SECRET-ROW-7731"
RUNNER = "FnApiRunner"


def _run(path: str, input_format: str, column: str | None, key_type: str) -> None:
    with beam.Pipeline(runner=RUNNER) as p:
        _ = p | ReadKeyBatches(path, column, input_format, key_type=key_type)


@pytest.mark.parametrize(
    ("name", "body", "fmt", "column"),
    [
        ("keys.csv", f"key\n1\n{SECRET}\n3\n", "csv", "key"),
        ("keys.txt", f"1\n{SECRET}\n3\n", "text", None),
    ],
)
def test_a_bad_cell_is_not_quoted(tmp_path, name, body, fmt, column):
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(Exception) as info:
        _run(str(path), fmt, column, "int")
    message = str(info.value)
    assert SECRET not in message
    assert "7731" not in message


def test_invalid_utf8_key_bytes_are_not_quoted():
    encoded = bytearray(encode_key("abc"))
    encoded[0] = 0xFF
    with pytest.raises(ValueError) as info:
        decode_key(bytes(encoded))
    assert "0xff" not in str(info.value).lower()
