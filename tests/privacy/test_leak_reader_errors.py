"""Errors from reading input name the file and the parameter, never a value from a row.

Beam logs a failed pipeline's exception and returns it as the job error, so a message that
quoted a cell would publish it.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest

from beam_dpsketch.hashing import decode_key, encode_key
from beam_dpsketch.io import ReadKeyBatches

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


# --------------------------------------------------------------------------------------------
# on_bad_record="drop" keeps the neighbouring relation: dropping is a function of each record
# alone, so D and D plus one malformed record give the same input to every DP step, and with a
# seeded (insecure test) noise key the same release. D and D plus one valid record are the
# neighbours every DP test already covers.
# --------------------------------------------------------------------------------------------

ROWS = [str(100 + (i * 7) % 13) for i in range(3000)]
LIMIT = ["--max-record-bytes", "100"]
LONG = "9" * 101


def _text(rows: list[str]) -> bytes:
    return "".join(f"{r}\n" for r in rows).encode()


def _csv(rows: list[str]) -> bytes:
    return b"k,other\n" + "".join(f"{r},x\n" for r in rows).encode()


def _jsonl(rows: list[str]) -> bytes:
    return "".join(json.dumps({"k": r, "other": 1}) + "\n" for r in rows).encode()


# name -> (file name, writer, the malformed record's bytes, extra arguments)
MALFORMED = {
    "csv ragged": ("k.csv", _csv, f"{SECRET},x,{SECRET}\n".encode(), []),
    "csv missing key": ("k.csv", _csv, b",x\n", []),
    "csv not utf-8": ("k.csv", _csv, b"101,\xff\xfe\n", []),
    "csv too long": ("k.csv", _csv, f"{LONG},x\n".encode(), LIMIT),
    "csv unclosed quote at the end": ("k.csv", _csv, b'"101,x\n', []),
    "jsonl not an object": ("k.jsonl", _jsonl, f'["{SECRET}"]\n'.encode(), ["--key-type", "str"]),
    "jsonl not json": ("k.jsonl", _jsonl, b'{"k": "101", \n', ["--key-type", "str"]),
    "jsonl another type": ("k.jsonl", _jsonl, b'{"k": 101}\n', ["--key-type", "str"]),
    "text not utf-8": ("k.txt", _text, b"101\xff\n", []),
    "text too long": ("k.txt", _text, f"{LONG}\n".encode(), LIMIT),
}

COMMANDS = {
    "frequencies": ["--query", "101", "--query", "105", "--epsilon", "1"],
    "heavy-hitters": ["--epsilon", "1"],
    "quantiles": ["--q", "0.5", "--lower", "0", "--upper", "1000", "--epsilon", "1"],
    "continual": ["--horizon", "10000", "--query", "101", "--epsilon", "0.5", "--delta", "1e-6"],
    "sliding-window": ["--window", "50", "--release-every", "100", "--query", "101", "--rho", "1"],
}


def _release(
    tmp_path, capsys, command: str, name: str, data: bytes, extra: list[str]
) -> tuple[str, str]:
    """``(stdout, stderr)`` of a successful run (stderr holds notes on public parameters)."""
    from beam_dpsketch.pipelines.cli import main

    tmp_path.mkdir()
    path = tmp_path / name
    path.write_bytes(data)
    column = [] if name.endswith(".txt") else ["--column", "k"]
    argv = [command, "--input", str(path), *column, *COMMANDS[command], *extra]
    argv += ["--on-bad-record", "drop", "--insecure-test-seed", "7", "--format", "json"]
    code = main([*argv, f"--runner={RUNNER}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err.replace(str(path), "<input>")


@pytest.mark.parametrize(
    ("command", "case"),
    [
        ("frequencies", "csv ragged"),
        ("frequencies", "csv missing key"),
        ("frequencies", "csv not utf-8"),
        ("frequencies", "csv too long"),
        ("heavy-hitters", "jsonl not an object"),
        ("heavy-hitters", "jsonl another type"),
        ("quantiles", "jsonl not json"),
        ("quantiles", "csv unclosed quote at the end"),
        ("continual", "text not utf-8"),
        ("sliding-window", "text too long"),
        ("sliding-window", "csv missing key"),
    ],
)
def test_drop_gives_the_same_release_with_one_malformed_record_more(
    tmp_path, capsys, command, case
):
    name, write, bad, extra = MALFORMED[case]
    if command == "quantiles" and name.endswith(".jsonl"):
        extra = []  # quantiles read numbers: the JSON type is set without --key-type
    data = write(ROWS)
    # The malformed record goes in the middle (the unclosed quote last: it joins what follows).
    at = len(data) if case.endswith("at the end") else data.index(b"\n", len(data) // 2) + 1
    with_bad = data[:at] + bad + data[at:]
    plain = _release(tmp_path / "d", capsys, command, name, data, extra)
    assert plain[0].startswith("{") and '"rows": []' not in plain[0]
    assert _release(tmp_path / "d_bad", capsys, command, name, with_bad, extra) == plain
