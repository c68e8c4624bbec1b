"""Malformed records: ``on_bad_record="drop"`` leaves out exactly them, in every format; the
default fails naming the file and the problem, never a position; long records are read in
linear time and bounded memory, up to ``max_record_bytes``."""

from __future__ import annotations

import json
import re
import tracemalloc

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.io import InputError, ReadKeyBatches, ReadKeyPairs, ReadOrderedKeys, records

RUNNER = "FnApiRunner"
SECRET = "SECRET-7731"
LIMIT = 200
LONG = "L" * (LIMIT + 1)


def _keys_in_pipeline(path, column, **kwargs) -> list:
    """The keys a ReadKeyBatches pipeline reads (in any order)."""
    dump = DumpToFile(str(path) + ".out")
    with beam.Pipeline(runner=RUNNER) as p:
        batches = p | ReadKeyBatches(str(path), column, **kwargs)
        assert_that(batches | beam.FlatMap(lambda b: b.to_pylist()), dump)
    return dump.load()


def _no_position(message: str, path) -> None:
    """The message names the file, and no value, count or position from the data."""
    assert str(path) in message, message
    rest = message.replace(str(path), "<file>")
    assert SECRET not in rest and "7731" not in rest, message
    assert not re.search(r"(?<![\w-])\d+(?![\w-])", rest.replace(f"={LIMIT}", "")), message


# name -> (file name, bytes, column, key_type, the keys that remain after dropping)
CASES = {
    "csv": (
        "k.csv",
        b"k,other\n"
        b"a,1\n"
        b",2\n"  # missing key
        b"b,3,extra\n"  # another number of fields
        + f"c{SECRET},\xff\n".encode("latin-1")  # not UTF-8 (in the other column)
        + f"{LONG},5\n".encode()  # longer than max_record_bytes
        + b'"multi\nline",6\n'  # a quoted newline: one good record
        b'"",7\n'  # the empty-string key
        b"d,8",  # last record without a newline
        "k",
        None,
        ["a", "multi\nline", "", "d"],
    ),
    "csv int keys": (
        "k.csv",
        f"k\n1\n{SECRET}\n-3\n99999999999999999999\n\n7\n".encode(),
        "k",
        "int",
        [1, -3, 7],
    ),
    "jsonl": (
        "k.jsonl",
        b"\n".join(
            [
                b'{"k": 1}',
                b'{"k": null}',
                b'{"other": 2}',
                b'{"k": 1.5}',
                b'{"k": 99999999999999999999}',
                b'{"k": "' + SECRET.encode() + b'"}',
                b'{"k": true}',
                b"[3]",
                b'{"k": 4, ',
                b'{"k": 5, "x": "\xff"}',
                b'{"k": 6, "x": "' + LONG.encode() + b'"}',
                b"",
                b'{"k": 7, "x": "\\u00e9"}',
            ]
        )
        + b"\n",
        "k",
        "int",
        [1, 7],
    ),
    "text": (
        "k.txt",
        f"a\n\nb\r\nc\xff\n{LONG}\n{SECRET}\ne".encode("latin-1"),
        None,
        None,
        ["a", "", "b", SECRET, "e"],
    ),
    "text int keys": (
        "k.txt",
        f"1\n{SECRET}\n2\n\n3\n".encode(),
        None,
        "int",
        [1, 2, 3],
    ),
}


@pytest.mark.parametrize("block", [None, 7])
@pytest.mark.parametrize("case", sorted(CASES))
def test_drop_removes_exactly_the_malformed_records(tmp_path, monkeypatch, case, block):
    if block is not None:
        # Reads of a few bytes: records, quoted newlines and UTF-8 characters straddle reads.
        monkeypatch.setattr(records, "_BLOCK_SIZE", block)
    name, data, column, key_type, expected = CASES[case]
    path = tmp_path / name
    path.write_bytes(data)
    options = {"key_type": key_type, "on_bad_record": "drop", "max_record_bytes": LIMIT}
    keys, times = ReadOrderedKeys(str(path), column, **options).read()
    assert keys.to_pylist() == expected and times is None
    assert sorted(_keys_in_pipeline(path, column, **options), key=repr) == sorted(
        expected, key=repr
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_fail_names_the_file_and_problem_never_a_position(tmp_path, case):
    name, data, column, key_type, _ = CASES[case]
    path = tmp_path / name
    path.write_bytes(data)
    options = {"key_type": key_type}
    with pytest.raises((InputError, TypeError)) as info:
        ReadOrderedKeys(str(path), column, **options).read()
    _no_position(str(info.value), path)
    with pytest.raises(Exception) as info:
        _keys_in_pipeline(path, column, **options)
    _no_position(str(info.value).split(" [while running")[0], path)


def test_drop_parquet_nulls_and_bad_int_cells(tmp_path):
    path = tmp_path / "k.parquet"
    pq.write_table(
        pa.table({"k": ["1", None, SECRET, "2", "3"], "s": ["a", None, "b", None, "c"]}),
        path,
        row_group_size=2,
    )
    drop = {"on_bad_record": "drop"}
    assert ReadOrderedKeys(str(path), "k", key_type="int", **drop).read()[0].to_pylist() == [
        1,
        2,
        3,
    ]
    assert sorted(_keys_in_pipeline(path, "s", **drop)) == ["a", "b", "c"]
    with pytest.raises(Exception) as info:
        _keys_in_pipeline(path, "s")
    _no_position(str(info.value).split(" [while running")[0], path)


def test_drop_ordered_time_column_keeps_positions_gap_free(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text("k,t\na,3\nb,\nc,nan\nd,x\n,1\ne,2\nf,1.5\n")
    reader = ReadOrderedKeys(str(path), "k", time_column="t", on_bad_record="drop", rows=2)
    keys, times = reader.read()
    assert keys.to_pylist() == ["f", "e", "a"] and times.tolist() == [1.5, 2.0, 3.0]
    batches = list(reader.iter_batches())
    assert [b[0] for b in batches] == [0, 2]
    jsonl = tmp_path / "k.jsonl"
    jsonl.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"k": "a", "t": 3},
                {"k": "b", "t": None},
                {"k": "c", "t": "x"},
                {"k": 5, "t": 1},
                {"k": "e", "t": 2},
            ]
        )
        + "\n"
    )
    keys, times = ReadOrderedKeys(
        str(jsonl), "k", time_column="t", key_type="str", on_bad_record="drop"
    ).read()
    assert keys.to_pylist() == ["e", "a"] and times.tolist() == [2.0, 3.0]
    # Without drop, a NaN event time fails naming the column, not the row.
    path.write_text("k,t\na,3\nc,nan\n")
    with pytest.raises(ValueError, match=r"time column 't' of .*k.csv holds NaN") as info:
        ReadOrderedKeys(str(path), "k", time_column="t").read()
    _no_position(str(info.value), path)


def test_drop_pairs_and_its_refusals(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,k\n1,a\n,b\n2,\n3,c,x\n4,d\n")
    reader = ReadKeyPairs(str(path), "k", "id", on_bad_record="drop")
    dump = DumpToFile(str(tmp_path / "pairs.out"))
    with beam.Pipeline(runner=RUNNER) as p:
        assert_that(p | reader, dump)
    assert sorted(dump.load()) == [("1", "a"), ("4", "d")]
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"id": 1, "k": "a"}\n')
    with pytest.raises(ValueError, match="on_bad_record='drop' reads privacy id and key pairs"):
        ReadKeyPairs(str(jsonl), "k", "id", on_bad_record="drop")
    with pytest.raises(ValueError, match="needs key_type"):
        ReadKeyBatches(str(jsonl), "k", on_bad_record="drop")
    with pytest.raises(ValueError, match="on_bad_record must be one of"):
        ReadKeyBatches(str(path), "k", on_bad_record="skip")
    with pytest.raises(ValueError, match="max_record_bytes must be an int >= 1"):
        ReadKeyBatches(str(path), "k", max_record_bytes=0)
    with pytest.raises(ValueError, match="takes no dead_letter"):
        ReadKeyBatches(str(path), "k", on_bad_record="drop", dead_letter=True)


@pytest.mark.parametrize(("name", "column"), [("k.txt", None), ("k.csv", "k"), ("k.jsonl", "k")])
def test_a_record_over_the_limit_fails_naming_the_limit_not_the_length(tmp_path, name, column):
    path = tmp_path / name
    head = {"k.txt": "", "k.csv": "k\n", "k.jsonl": ""}[name]
    record = json.dumps({"k": "x" * 1234}) if name == "k.jsonl" else "x" * 1234
    path.write_text(f"{head}{record}\n")
    with pytest.raises(InputError) as info:
        ReadOrderedKeys(str(path), column, key_type="str", max_record_bytes=1000).read()
    message = str(info.value)
    assert message.startswith(f"{path}: a record is longer than max_record_bytes=1000")
    assert "--max-record-bytes" in message and "on_bad_record='drop'" in message
    assert "123" not in message and "1234" not in message


@pytest.mark.parametrize(("name", "column"), [("k.csv", "k"), ("k.jsonl", "k")])
def test_cells_over_arrow_block_size_read_whole(tmp_path, name, column):
    big = "y" * (5 << 20)
    path = tmp_path / name
    if name == "k.csv":
        path.write_text(f"k,o\na,1\n{big},2\nb,3\n")
    else:
        path.write_text("".join(json.dumps({"k": k}) + "\n" for k in ["a", big, "b"]))
    assert ReadOrderedKeys(str(path), column).read()[0].to_pylist() == ["a", big, "b"]


def _single_line(path, size: int) -> None:
    with open(path, "wb") as f:
        f.write(b"z" * size + b"\n")


def test_a_long_line_is_scanned_once(tmp_path, monkeypatch):
    """Linear time: every byte of a 32 MiB single-line file goes through the record-end scan
    once (a reader that re-scanned the held start of the line would be quadratic)."""
    scanned = []
    scan = records._record_ends

    def counting(data, quoted, odd=False):
        scanned.append(len(data))
        return scan(data, quoted, odd)

    monkeypatch.setattr(records, "_record_ends", counting)
    path = tmp_path / "one.txt"
    size = 32 << 20
    _single_line(path, size)
    keys = ReadOrderedKeys(str(path)).read()[0]
    assert len(keys) == 1 and len(keys[0].as_py()) == size
    assert sum(scanned) == size + 1


def test_drop_skips_an_overlong_line_without_holding_it(tmp_path):
    """Bounded memory: a 64 MiB line over a 1 MiB limit is skipped as it streams by."""
    path = tmp_path / "k.txt"
    with open(path, "wb") as f:
        f.write(b"a\n" + b"z" * (64 << 20) + b"\nb\n")
    reader = ReadOrderedKeys(str(path), on_bad_record="drop", max_record_bytes=1 << 20)
    tracemalloc.start()
    try:
        keys = reader.read()[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert keys.to_pylist() == ["a", "b"]
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_drop_refuses_a_time_column_of_timestamps(tmp_path, name):
    # Under drop, event times of CSV and JSON Lines are numbers: timestamps would all be dropped.
    path = tmp_path / name
    rows = [("a", "2001-01-01T00:00:00"), ("b", "2001-01-01T00:00:05")]
    if name.endswith(".csv"):
        path.write_text("k,t\n" + "".join(f"{k},{t}\n" for k, t in rows))
    else:
        path.write_text("".join(json.dumps({"k": k, "t": t}) + "\n" for k, t in rows))
    with pytest.raises(ValueError, match="holds timestamps, but on_bad_record='drop'"):
        ReadOrderedKeys(str(path), "k", time_column="t", key_type="str", on_bad_record="drop")
    keys, times = ReadOrderedKeys(str(path), "k", time_column="t", key_type="str").read()
    assert keys.to_pylist() == ["a", "b"] and times.tolist() == [978307200.0, 978307205.0]
