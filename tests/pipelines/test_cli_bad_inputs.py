"""Reliability of the ``beam-dpsketch`` input layer: bad inputs x subcommands, through ``cli.main``.

Every subcommand reads through the same readers, so every bad input must fail the same way in
every subcommand: exit status 2, one stderr line naming the file and the problem, no traceback,
nothing on stdout, no ``--output`` file, and no value, count or position (line, row) from the
data in the message: in an append-only file, a position is the count of the records before it.
The CLI runs in-process (the FnApiRunner), one real process checks that Beam's own error log
stays quiet.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dpsketch.pipelines.cli import main

RUNNER = "FnApiRunner"
# A value in every bad file: no message may quote it. Keys are digits so that every subcommand
# (quantiles included) accepts the rows that are fine.
SECRET = "987654321"
N_ROWS = 3217
ROWS = [SECRET if i % 7 == 0 else str(100 + i % 50) for i in range(N_ROWS)]


def _gzip_cut(data: bytes) -> bytes:
    full = gzip.compress(data)
    return full[: int(len(full) * 0.6)]


def _text(rows: list[str]) -> bytes:
    return "".join(f"{r}\n" for r in rows).encode()


def _csv(rows: list[str]) -> bytes:
    return ("k,other\n" + "".join(f"{r},x\n" for r in rows)).encode()


def _jsonl(rows: list[str]) -> bytes:
    return "".join(json.dumps({"k": r, "other": 1}) + "\n" for r in rows).encode()


def _with_line(data: bytes, line: int, replacement: bytes) -> bytes:
    """``data`` with its 1-based ``line`` replaced."""
    lines = data.split(b"\n")
    lines[line - 1] = replacement
    return b"\n".join(lines)


# name -> (file name, column, bytes, what the message must also name besides the file)
BAD_INPUTS = {
    "truncated gzip text": ("keys.txt.gz", None, _gzip_cut(_text(ROWS)), "truncated"),
    "truncated gzip csv": ("keys.csv.gz", "k", _gzip_cut(_csv(ROWS)), "truncated"),
    "truncated gzip jsonl": ("keys.jsonl.gz", "k", _gzip_cut(_jsonl(ROWS)), "truncated"),
    "corrupt gzip csv": ("keys.csv.gz", "k", b"\x1f\x8b\x08\x00" + b"\x07" * 64, "corrupt"),
    "invalid utf-8 text": (
        "keys.txt",
        None,
        _with_line(_text(ROWS), 40, b"1\xff\xfe" + SECRET.encode()),
        "invalid UTF-8",
    ),
    "invalid utf-8 csv": (
        "keys.csv",
        "k",
        _with_line(_csv(ROWS), 41, SECRET.encode() + b"\xc3,x"),
        "invalid UTF-8",
    ),
    "invalid utf-8 jsonl": (
        "keys.jsonl",
        "k",
        _with_line(_jsonl(ROWS), 42, b'{"k": "' + SECRET.encode() + b'\xe2\x82"}'),
        "invalid UTF-8",
    ),
    "not parquet": ("keys.parquet", "k", b"PAR1" + SECRET.encode() * 10, "Parquet"),
    "ragged csv": (
        "keys.csv",
        "k",
        _with_line(_csv(ROWS), 43, f"{SECRET},x,{SECRET}".encode()),
        "a record has a different number of fields than the header",
    ),
    "jsonl not json": (
        "keys.jsonl",
        "k",
        _with_line(_jsonl(ROWS), 44, f'{{"k": "{SECRET}", '.encode()),
        "a line is not valid JSON",
    ),
    "jsonl not an object": (
        "keys.jsonl",
        "k",
        _with_line(_jsonl(ROWS), 45, f'["{SECRET}"]'.encode()),
        "a line is not a JSON object",
    ),
    "csv missing key": (
        "keys.csv",
        "k",
        _with_line(_csv(ROWS), 46, b",x"),
        "column 'k'",
    ),
}


def _subcommand(name: str, tmp_path) -> list[str]:
    """Arguments after ``--input/--column`` that make ``name`` run (nothing data-dependent)."""
    if name == "intermittent":
        queries = tmp_path / "queries.csv"
        queries.write_text("time,key\n5,101\n")
        return ["--queries", str(queries), "--epsilon", "1"]
    return {
        "heavy-hitters": ["--epsilon", "1"],
        "frequencies": ["--query", "101", "--epsilon", "1"],
        "quantiles": ["--q", "0.5", "--lower", "0", "--upper", "1000", "--epsilon", "1"],
        "sketch": ["--sketch", "misra-gries"],
        "continual": ["--horizon", "100000", "--query", "101"]
        + ["--epsilon", "0.5", "--delta", "1e-6"],
        "sliding-window": ["--window", "10", "--release-every", "5", "--query", "101"]
        + ["--rho", "1"],
    }[name]


SUBCOMMANDS = (
    "heavy-hitters",
    "frequencies",
    "quantiles",
    "sketch",
    "continual",
    "sliding-window",
    "intermittent",
)


def _write(tmp_path, name: str) -> tuple[str, list[str], str]:
    file_name, column, data, also = BAD_INPUTS[name]
    path = tmp_path / file_name
    path.write_bytes(data)
    columns = [] if column is None else ["--column", column]
    return str(path), ["--input", str(path), *columns], also


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", SUBCOMMANDS)
@pytest.mark.parametrize("bad", sorted(BAD_INPUTS))
def test_bad_input_fails_in_one_line_naming_the_file(tmp_path, capsys, command, bad):
    path, input_args, also = _write(tmp_path, bad)
    output = tmp_path / "out.json"
    argv = [command, *input_args, *_subcommand(command, tmp_path)]
    argv += ["--format", "json", "--output", str(output), f"--runner={RUNNER}"]
    code, out, err = _run(argv, capsys)
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"beam-dpsketch {command}: error: "), line
    assert path in line and also in line, line
    assert "Traceback" not in line and "while running" not in line, line
    # No value, no count and no position from the data.
    assert SECRET not in line and str(N_ROWS) not in line, line
    assert not re.search(r"(?<![\w-])\d+(?![\w-])", line.replace(path, "<input>")), line
    assert not output.exists()


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_zero_byte_csv_is_like_a_header_alone(tmp_path, capsys, command):
    """A zero-byte file is an input of zero rows (no header or schema to check), like a CSV
    header alone, in every subcommand (the readers give zero rows for it in every format:
    ``tests/transforms/test_readers.py``)."""
    empty = tmp_path / "e.csv.gz"
    empty.write_bytes(gzip.compress(b""))
    header = tmp_path / "h.csv"
    header.write_text("k,other\n")
    results = []
    for path in (empty, header):
        argv = [command, "--input", str(path), "--column", "k", *_subcommand(command, tmp_path)]
        code, out, err = _run(_seeded([*argv, "--format", "json"]), capsys)
        results.append((code, out, err.strip().replace(str(path), "<input>")))
    assert results[0] == results[1]


def test_truncated_gzip_real_process_prints_one_line_and_no_traceback(tmp_path):
    path, input_args, _ = _write(tmp_path, "truncated gzip text")
    output = tmp_path / "out.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "beam_dpsketch.pipelines.cli", "sketch", *input_args]
        + ["--sketch", "misra-gries", "--format", "csv", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"beam-dpsketch sketch: error: {path}: the gzip data is truncated or corrupt "
        "(cannot decompress)"
    ], proc.stderr
    assert not output.exists()


# --------------------------------------------------------------------------------------------
# One line splitting, decoding and BOM handling for every subcommand
# --------------------------------------------------------------------------------------------

# \n and \r\n end lines; nothing else does (\r alone, U+2028, U+0085, form feed, U+2029, ...).
AWKWARD = "a\u2028b\nc\x85d\r\ne\rf\ng\x0ch\ni\u2029j\nk\x1el\nm\x1cn\n\ufeffo\n"
AWKWARD_KEYS = ["a\u2028b", "c\x85d", "e\rf", "g\x0ch", "i\u2029j", "k\x1el", "m\x1cn", "\ufeffo"]


def _seeded(argv: list[str]) -> list[str]:
    """``argv`` with a reproducible noise key (``sketch`` adds no noise and has no seed)."""
    return argv if argv[0] == "sketch" else [*argv, "--insecure-test-seed", "1"]


def _json_out(argv, capsys) -> dict:
    code, out, err = _run(_seeded([*argv, "--format", "json"]), capsys)
    assert code == 0, err
    return json.loads(out)


def test_every_subcommand_splits_text_lines_the_same_way(tmp_path, capsys):
    path = tmp_path / "keys.txt"
    # A UTF-8 BOM opens the file (dropped); the last key keeps its inner U+FEFF.
    path.write_bytes(b"\xef\xbb\xbf" + AWKWARD.encode("utf-8"))
    exact = _json_out(
        ["sketch", "--input", str(path), "--sketch", "misra-gries", "--top", "50"], capsys
    )
    assert sorted(r["key"] for r in exact["rows"]) == sorted(AWKWARD_KEYS)
    assert all(r["estimate"] == 1 for r in exact["rows"])
    # The position of each row is public in the ordered subcommands: with the same splitting,
    # the 8 rows are 8 time steps, and a key split in two would add steps. A continual release
    # every row up to T = 8 has a release at each of the 8 positions and no more.
    series = _json_out(
        ["continual", "--input", str(path), "--horizon", "8", "--release-every", "1"]
        + ["--query", "e\rf", "--epsilon", "0.5", "--delta", "1e-6"],
        capsys,
    )
    assert [r["time"] for r in series["rows"]] == list(range(1, 9))


def test_ordered_and_batch_readers_give_the_same_rows(tmp_path):
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from beam_dpsketch.io import ReadKeyBatches, ReadOrderedKeys

    path = tmp_path / "keys.txt.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + AWKWARD.encode("utf-8")))
    keys, _ = ReadOrderedKeys(str(path)).read()
    assert keys.to_pylist() == AWKWARD_KEYS
    with beam.Pipeline(runner=RUNNER) as p:
        rows = p | ReadKeyBatches(str(path)) | beam.FlatMap(lambda b: b.to_pylist())
        assert_that(rows, equal_to(AWKWARD_KEYS))


# --------------------------------------------------------------------------------------------
# quantiles: numbers of any size and fractions, negative bounds
# --------------------------------------------------------------------------------------------


def _quantiles(path, extra, capsys, column: str | None = "v") -> list[float]:
    argv = ["quantiles", "--input", str(path), *(["--column", column] if column else [])]
    argv += ["--q", "0.5", "--epsilon", "20", *extra]
    return [r["value"] for r in _json_out(argv, capsys)["rows"]]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet", "txt"])
def test_quantiles_clamp_values_beyond_int64_to_the_bound(tmp_path, capsys, fmt):
    """2**64 - 1 (unsigned) and -2**64 are clamped into [lower, upper] like any out-of-range
    value: the documented contribution bounding, not a wrap-around and not a failure."""
    for value, expected in ((2**64 - 1, 10), (-(2**64), -10)):
        path = tmp_path / f"v.{fmt}"
        values = [value] * 400
        if fmt == "csv":
            path.write_text("v\n" + "".join(f"{v}\n" for v in values))
        elif fmt == "txt":
            path.write_text("".join(f"{v}\n" for v in values))
        elif fmt == "jsonl":
            path.write_text("".join(f'{{"v": {v}}}\n' for v in values))
        else:
            array = pa.array(values, pa.uint64()) if value > 0 else pa.array([float(value)] * 400)
            pq.write_table(pa.table({"v": array}), path)
        column = None if fmt == "txt" else "v"
        got = _quantiles(path, ["--lower", "-10", "--upper", "10"], capsys, column)
        assert got == [expected], (fmt, value, got)


def test_quantiles_resolution_reads_fractional_values(tmp_path, capsys):
    path = tmp_path / "v.csv"
    path.write_text("v\n" + "1.5\n" * 300 + "2.25\n" * 100 + "nan\n")
    got = _quantiles(path, ["--lower", "0", "--upper", "4", "--resolution", "0.25"], capsys)
    assert got == [1.5]


def test_quantiles_negative_bounds_in_exponent_notation(tmp_path, capsys):
    path = tmp_path / "v.csv"
    path.write_text("v\n" + "-5\n" * 400)
    got = _quantiles(path, ["--lower", "-1e1", "--upper", "-1e0"], capsys)
    assert got == [-5]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_on_bad_record_drop_reads_past_malformed_records_in_every_subcommand(
    tmp_path, capsys, command
):
    data = _with_line(_csv(ROWS), 43, f"{SECRET},x,{SECRET}".encode())
    data = _with_line(data, 46, b",x")
    path = tmp_path / "keys.csv"
    path.write_bytes(data)
    argv = [command, "--input", str(path), "--column", "k", *_subcommand(command, tmp_path)]
    code, out, err = _run(
        _seeded([*argv, "--on-bad-record", "drop", "--format", "json", f"--runner={RUNNER}"]),
        capsys,
    )
    assert code == 0, err
    assert "rows" in json.loads(out)
    # Nothing counts the dropped records.
    assert "drop" not in err and "malformed" not in err, err


def test_max_record_bytes_limit_message_names_the_option(tmp_path, capsys):
    path = tmp_path / "keys.txt"
    path.write_bytes(_text(ROWS[:10]) + b"1" * 5000 + b"\n")
    argv = ["frequencies", "--input", str(path), "--query", "101", "--epsilon", "1"]
    code, out, err = _run([*argv, "--max-record-bytes", "4096", f"--runner={RUNNER}"], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (
        f"beam-dpsketch frequencies: error: {path}: a record is longer than "
        "max_record_bytes=4096 (--max-record-bytes): raise the limit, or drop such records "
        "with on_bad_record='drop' (--on-bad-record drop)"
    )
    code, out, err = _run(
        [*argv, "--max-record-bytes", "4096", "--on-bad-record", "drop", "--format", "json"]
        + ["--insecure-test-seed", "1", f"--runner={RUNNER}"],
        capsys,
    )
    assert code == 0, err


def test_on_bad_record_drop_needs_key_type_for_json_lines(tmp_path, capsys):
    path = tmp_path / "keys.jsonl"
    path.write_bytes(_jsonl(ROWS[:10]))
    argv = ["frequencies", "--input", str(path), "--column", "k", "--query", "101"]
    argv += ["--epsilon", "1", "--on-bad-record", "drop", f"--runner={RUNNER}"]
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert "on_bad_record='drop' with JSON Lines input needs key_type" in err
    code, out, err = _run([*argv, "--key-type", "str", "--insecure-test-seed", "1"], capsys)
    assert code == 0, err
