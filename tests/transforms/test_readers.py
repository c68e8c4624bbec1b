"""ReadKeyBatches: Parquet, CSV, JSON Lines and text files -> batches -> sketch == direct."""

from __future__ import annotations

import gzip
import json
import pickle
import re

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from collect import DumpToFile

from beam_dpsketch.io import (
    NUMBERS,
    InputError,
    ReadOrderedKeys,
    infer_input_format,
    ordered_batches,
)
from beam_dpsketch.sketches import CountMinSketch, MisraGries
from beam_dpsketch.transforms import ReadKeyBatches, SketchGlobally

ROUTES = [f"R{i % 37:03d}" for i in range(2000)] + ["007"] * 50
IDS = [int(x) for x in np.random.default_rng(3).integers(0, 90, len(ROUTES))]


def assert_no_position(message: str, path) -> None:
    """An error names no line, row or other number besides the file's name: a position in an
    append-only file is the count of the records before it."""
    rest = message.replace(str(path), "<file>")
    # Standalone numbers only: "64-bit" and type names such as int64 are public.
    assert not re.search(r"(?<![\w-])\d+(?![\w-])", rest), message


def fnapi_pipeline() -> beam.Pipeline:
    return beam.Pipeline(runner=FnApiRunner())


def equals_sketch(expected):
    def check(actual):
        assert len(actual) == 1 and actual[0] == expected, actual

    return check


def write_parquet(path, n_files=1):
    table = pa.table({"route": ROUTES, "id": IDS, "delay": np.linspace(0, 1, len(ROUTES))})
    paths = []
    for i in range(n_files):
        p = path / f"part-{i}.parquet"
        pq.write_table(table, p, row_group_size=500)
        paths.append(p)
    return paths


def cms_of(keys, n_copies=1):
    sketch = CountMinSketch(128, 3, 1)
    for _ in range(n_copies):
        sketch.update(keys)
    return sketch


@pytest.mark.parametrize(("column", "keys"), [("route", ROUTES), ("id", IDS)])
def test_parquet_glob_of_files_with_row_groups(tmp_path, column, keys):
    write_parquet(tmp_path, n_files=2)
    reader = ReadKeyBatches(str(tmp_path / "*.parquet"), column)
    assert reader.input_format == "parquet"
    assert reader.key_type == ("str" if column == "route" else "int")
    with fnapi_pipeline() as p:
        batches = p | reader
        assert batches.element_type is pa.Array
        assert_that(
            batches | SketchGlobally.count_min(128, 3, seed=1), equals_sketch(cms_of(keys, 2))
        )


def test_csv_keeps_string_keys_and_reads_quoted_empty_string(tmp_path):
    path = tmp_path / "flights.csv"
    lines = ["id,route,delay"] + [f"{i},{r},1.5" for i, r in zip(IDS, ROUTES, strict=True)]
    lines.append('1,"",2.0')
    path.write_text("\n".join(lines) + "\n")
    reader = ReadKeyBatches(str(path), "route")
    assert reader.key_type == "str"
    mg = MisraGries(64).update([*ROUTES, ""])
    with fnapi_pipeline() as p:
        out = p | reader | SketchGlobally.misra_gries(64)

        def check(actual):
            # k exceeds the distinct keys, so any merge tree gives the exact counts; "007"
            # keeps its leading zeros as a CSV string key.
            assert [s.to_dict() for s in actual] == [mg.to_dict()]
            assert actual[0].estimate(["007", ""]).tolist() == [50, 1]

        assert_that(out, check)


def test_gzipped_csv_with_int_key_type(tmp_path):
    path = tmp_path / "ids.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("id\n" + "\n".join(map(str, IDS)) + "\n")
    reader = ReadKeyBatches(str(path), "id", key_type="int")
    assert reader.input_format == "csv" and reader.key_type == "int"
    with fnapi_pipeline() as p:
        assert_that(
            p | reader | SketchGlobally.count_min(128, 3, seed=1), equals_sketch(cms_of(IDS))
        )


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson", ".json"])
def test_json_lines(tmp_path, suffix):
    path = tmp_path / f"events{suffix}"
    path.write_text(
        "".join(
            json.dumps({"route": r, "id": i, "extra": {"x": 1}}) + "\n"
            for r, i in zip(ROUTES, IDS, strict=True)
        )
    )
    reader = ReadKeyBatches(str(path), "id")
    assert reader.input_format == "jsonl" and reader.key_type == "int"
    with fnapi_pipeline() as p:
        assert_that(
            p | reader | SketchGlobally.count_min(128, 3, seed=1), equals_sketch(cms_of(IDS))
        )


def test_text_lines_are_str_keys(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(ROUTES) + "\n")
    reader = ReadKeyBatches(str(path))
    assert reader.input_format == "text" and reader.key_type == "str"
    with fnapi_pipeline() as p:
        assert_that(
            p | reader | SketchGlobally.count_min(128, 3, seed=1), equals_sketch(cms_of(ROUTES))
        )


def test_missing_column_names_column_and_lists_available(tmp_path):
    (path,) = write_parquet(tmp_path)
    with pytest.raises(ValueError, match=r"'routes' not found.*'route', 'id', 'delay'"):
        ReadKeyBatches(str(path), "routes")
    csv = tmp_path / "a.csv"
    csv.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"column 'c' not found.*'a', 'b'"):
        ReadKeyBatches(str(csv), "c")
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match=r"column 'b' not found.*'a'"):
        ReadKeyBatches(str(jsonl), "b")


def test_missing_column_in_a_later_file_fails_at_run_time(tmp_path):
    write_parquet(tmp_path)
    pq.write_table(pa.table({"other": [1]}), tmp_path / "zz.parquet")
    with pytest.raises(ValueError, match=r"column 'route' not found in .*zz.parquet"):
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(tmp_path / "*.parquet"), "route")


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        ReadKeyBatches(str(tmp_path / "nope.parquet"), "route")
    (path,) = write_parquet(tmp_path)
    with pytest.raises(TypeError, match=r"column 'delay'.*double"):
        ReadKeyBatches(str(path), "delay")
    with pytest.raises(ValueError, match="column is required"):
        ReadKeyBatches(str(path))
    with pytest.raises(ValueError, match="input_format"):
        ReadKeyBatches(str(path), "route", input_format="xml")
    with pytest.raises(ValueError, match="key_type"):
        ReadKeyBatches(str(path), "route", key_type="float")
    with pytest.raises(ValueError, match="text input has no columns"):
        ReadKeyBatches(str(tmp_path / "x.txt"), "route", validate=False)


def _jsonl_with_nulls(tmp_path):
    path = tmp_path / "nulls.jsonl"
    path.write_text('{"user": "a"}\n{"user": null}\n{"other": 1}\n{"user": "b"}\n')
    return path


def test_nulls_are_rejected_naming_the_column(tmp_path):
    path = _jsonl_with_nulls(tmp_path)
    with pytest.raises(
        TypeError,
        match=r"None is not a valid key: column .user. of .*nulls.jsonl has a missing value",
    ) as info:
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(path), "user") | SketchGlobally.misra_gries(3)
    # Neither the row (a count of the rows before it) nor the number of missing values.
    assert "null value" not in str(info.value)
    assert_no_position(str(info.value), path)
    csv = tmp_path / "nulls.csv"
    csv.write_text("user,x\na,1\n,2\n")
    with pytest.raises(TypeError, match="column 'user'"):
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(csv), "user")


def test_nulls_go_to_dead_letter_when_asked(tmp_path):
    path = _jsonl_with_nulls(tmp_path)
    with fnapi_pipeline() as p:
        result = p | ReadKeyBatches(str(path), "user", dead_letter=True)
        assert_that(
            result["invalid"] | beam.MapTuple(lambda e, reason: (e, "'user'" in reason)),
            equal_to([(None, True), (None, True)]),
            label="invalid",
        )
        assert_that(
            result["batches"] | SketchGlobally.count_min(128, 3, seed=1),
            equals_sketch(cms_of(["a", "b"])),
            label="sketch",
        )


def test_infer_input_format():
    assert infer_input_format("gs://b/x/part-0001.parquet") == "parquet"
    assert infer_input_format("a.CSV") == "csv"
    assert infer_input_format("a.csv.gz") == "csv"
    assert infer_input_format("a.ndjson.bz2") == "jsonl"
    assert infer_input_format("words") == "text"
    assert infer_input_format("log.txt") == "text"


# ---------------------------------------------------------------------------------------------
# ReadOrderedKeys: one public order, positions and event times
# ---------------------------------------------------------------------------------------------


def test_ordered_file_order_positions_in_pipeline_equal_read(tmp_path):
    # Sorted path order (b before c), rows in file order; "007" stays a string key.
    (tmp_path / "c.csv").write_text("route\nz\n007\n")
    (tmp_path / "b.csv").write_text("route\nx\ny\nx\n")
    reader = ReadOrderedKeys(str(tmp_path / "*.csv"), "route", rows=2)
    assert reader.key_type == "str"
    keys, times = reader.read()
    assert keys.to_pylist() == ["x", "y", "x", "z", "007"] and times is None
    out = DumpToFile(str(tmp_path / "out.pickle"))
    with fnapi_pipeline() as p:
        assert_that(p | reader, out)
    got = sorted(out.load(), key=lambda b: b[0])
    assert [(pos, k.to_pylist(), t) for pos, k, t in got] == [
        (0, ["x", "y"], None),
        (2, ["x", "z"], None),
        (4, ["007"], None),
    ]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl", "text"])
def test_ordered_stream_crosses_files_and_chunks_with_compact_batches(tmp_path, fmt):
    # Three files of 2,050 rows (Parquet row groups of 500), read in batches of 333 rows: the
    # batches cut across chunks and files, positions run on, and the content is the files'
    # rows in order. Every batch owns only its rows: pickling an Arrow slice would write the
    # whole parent buffer, so a reader holding the input as one array and slicing it fails.
    n_files = 3
    for i in range(n_files):
        rows = [f"{key}-{i}" for key in ROUTES]
        path = tmp_path / f"part-{i}.{'txt' if fmt == 'text' else fmt}"
        if fmt == "parquet":
            pq.write_table(pa.table({"route": rows}), path, row_group_size=500)
        elif fmt == "csv":
            path.write_text("route\n" + "".join(f"{r}\n" for r in rows))
        elif fmt == "jsonl":
            path.write_text("".join(json.dumps({"route": r}) + "\n" for r in rows))
        else:
            path.write_text("".join(f"{r}\n" for r in rows))
    pattern = str(tmp_path / "part-*")
    reader = ReadOrderedKeys(pattern, None if fmt == "text" else "route", fmt, rows=333)
    out = DumpToFile(str(tmp_path / "out.pickle"))
    sizes = DumpToFile(str(tmp_path / "sizes.pickle"))
    with fnapi_pipeline() as p:
        batches = p | reader
        assert_that(batches, out)
        # Fused with the reader: the batch objects as emitted, before any coder.
        pickled = batches | beam.Map(lambda batch: len(pickle.dumps(batch[1])))
        assert_that(pickled, sizes, label="Sizes")
    got = sorted(out.load(), key=lambda b: b[0])
    expected = [f"{key}-{i}" for i in range(n_files) for key in ROUTES]
    assert [pos for pos, _, _ in got] == list(range(0, len(expected), 333))
    assert [k for _, keys, _ in got for k in keys.to_pylist()] == expected
    assert all(len(keys) == 333 for _, keys, _ in got[:-1])
    assert reader.read()[0].to_pylist() == expected
    one_row = len(pickle.dumps(pa.array(expected[:1])))
    assert max(sizes.load()) < one_row + 333 * 16


def test_ordered_header_only_csv_with_time_column_is_empty(tmp_path):
    # No rows, so no type to infer for the time column: an empty input, as without it.
    (tmp_path / "a.csv").write_text("k,t\n")
    keys, times = ReadOrderedKeys(str(tmp_path / "a.csv"), "k", time_column="t").read()
    assert len(keys) == 0 and times is not None and len(times) == 0


def test_ordered_timestamp_column_sorts_stably_and_gives_seconds(tmp_path):
    ts = pa.array([3_000_000_001, 1_000_000_000, 3_000_000_000, 1_000_000_000], pa.timestamp("ns"))
    pq.write_table(pa.table({"id": [10, 11, 12, 13], "ts": ts}), tmp_path / "a.parquet")
    reader = ReadOrderedKeys(str(tmp_path / "a.parquet"), "id", time_column="ts")
    keys, times = reader.read()
    # Ties (11, 13) keep file order; 12 precedes 10 by one nanosecond.
    assert keys.to_pylist() == [11, 13, 12, 10]
    np.testing.assert_array_equal(times, [1.0, 1.0, 3.0, 3.000000001])
    assert reader.key_type == "int"


def test_ordered_numeric_time_column_of_csv_and_int_key_type(tmp_path):
    (tmp_path / "a.csv").write_text("k,t\n5,2.5\n6,0.5\n7,1\n")
    keys, times = ReadOrderedKeys(
        str(tmp_path / "a.csv"), "k", key_type="int", time_column="t"
    ).read()
    assert keys.to_pylist() == [6, 7, 5]
    np.testing.assert_array_equal(times, [0.5, 1.0, 2.5])
    chunks = ordered_batches(keys, times, 2)
    assert [(pos, k.to_pylist(), t.tolist()) for pos, k, t in chunks] == [
        (0, [6, 7], [0.5, 1.0]),
        (2, [5], [2.5]),
    ]


def test_ordered_text_lines(tmp_path):
    (tmp_path / "a.txt").write_text("b\na\nb\n")
    keys, times = ReadOrderedKeys(str(tmp_path / "a.txt")).read()
    assert keys.to_pylist() == ["b", "a", "b"] and times is None


def test_ordered_errors(tmp_path):
    csv_path = tmp_path / "a.csv"
    csv_path.write_text("k,t,tag\na,1,x\n,2,y\nc,,z\n")
    with pytest.raises(ValueError, match=r"column 'nope' not found.*'k', 't', 'tag'"):
        ReadOrderedKeys(str(csv_path), "k", time_column="nope")
    with pytest.raises(ValueError, match="must differ"):
        ReadOrderedKeys(str(csv_path), "k", time_column="k")
    (tmp_path / "a.txt").write_text("a\n")
    with pytest.raises(ValueError, match="time_column needs Parquet, CSV or JSON Lines"):
        ReadOrderedKeys(str(tmp_path / "a.txt"), time_column="t")
    # Neither the row (a count of the rows before it) nor the number of missing values.
    with pytest.raises(
        TypeError, match=r"None is not a valid key: column 'k' of .*a.csv has a missing value$"
    ):
        ReadOrderedKeys(str(csv_path), "k").read()
    csv_path.write_text("k,t,tag\na,1,x\nb,2,y\n")
    with pytest.raises(TypeError, match=r"time column 'tag' .* type string"):
        ReadOrderedKeys(str(csv_path), "k", time_column="tag").read()
    csv_path.write_text("k,t\na,1\nb,\n")
    with pytest.raises(TypeError, match=r"time column 't' of .* missing values"):
        ReadOrderedKeys(str(csv_path), "k", time_column="t").read()
    with pytest.raises(FileNotFoundError, match="no file matches"):
        ReadOrderedKeys(str(tmp_path / "none*.csv"), "k")
    with pytest.raises(ValueError, match="rows must be"):
        ReadOrderedKeys(str(csv_path), "k", rows=0)


# --------------------------------------------------------------------------------------------
# The input layer: strict decompression, UTF-8, line splitting, errors naming file and column
# --------------------------------------------------------------------------------------------

TEXT = "".join(f"{r}\n" for r in ROUTES).encode()


def _compressors():
    import bz2
    import lzma

    import zstandard

    return {
        ".gz": gzip.compress,
        ".bz2": bz2.compress,
        ".xz": lzma.compress,
        ".zst": zstandard.ZstdCompressor().compress,
    }


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zst"])
def test_compressed_text_reads_whole_and_truncated_fails_naming_the_file(tmp_path, suffix):
    compress = _compressors()[suffix]
    whole = tmp_path / f"keys.txt{suffix}"
    whole.write_bytes(compress(TEXT))
    assert ReadOrderedKeys(str(whole)).read()[0].to_pylist() == ROUTES
    cut = tmp_path / f"cut.txt{suffix}"
    data = compress(TEXT)
    cut.write_bytes(data[: int(len(data) * 0.6)])
    # The ordered reader (continual, sliding-window, intermittent) and the batch reader (every
    # other subcommand) share the stream: both refuse the cut file, naming it.
    with pytest.raises(InputError, match=rf"^{re.escape(str(cut))}: the \w+ data is truncated"):
        ReadOrderedKeys(str(cut)).read()
    with pytest.raises(InputError, match=re.escape(str(cut))):
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(cut)) | SketchGlobally.count_min(128, 3, seed=1)


def test_multi_member_gzip_reads_every_member(tmp_path):
    path = tmp_path / "keys.txt.gz"
    half = len(ROUTES) // 2
    path.write_bytes(
        gzip.compress("".join(f"{r}\n" for r in ROUTES[:half]).encode())
        + gzip.compress("".join(f"{r}\n" for r in ROUTES[half:]).encode())
    )
    assert ReadOrderedKeys(str(path)).read()[0].to_pylist() == ROUTES


@pytest.mark.parametrize(("name", "column"), [("k.txt", None), ("k.csv", "k"), ("k.jsonl", "k")])
def test_invalid_utf8_names_the_file_not_the_line(tmp_path, name, column):
    rows = [f"{r}" for r in ROUTES[:50]]
    if name.endswith(".csv"):
        lines = ["k", *rows]
    elif name.endswith(".jsonl"):
        lines = [json.dumps({"k": r}) for r in rows]
    else:
        lines = rows
    data = "\n".join(lines).encode().split(b"\n")
    data[29] = data[29].replace(b"R", b"\xff\xfeR")
    path = tmp_path / name
    path.write_bytes(b"\n".join(data) + b"\n")
    expected = rf"^{re.escape(str(path))}: invalid UTF-8"
    with pytest.raises(InputError, match=expected):
        ReadOrderedKeys(str(path), column).read()
    with pytest.raises(InputError, match=expected):
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(path), column, validate=False)


def test_jsonl_errors_name_the_problem_not_the_line_in_any_block(tmp_path, monkeypatch):
    from beam_dpsketch.io import records

    # Small blocks: the problem is found in any block, and no line or row number is named.
    monkeypatch.setattr(records, "_BLOCK_SIZE", 256)
    lines = [json.dumps({"k": r}) for r in ROUTES[:200]]
    lines[150] = '{"k": "R001", '
    path = tmp_path / "k.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: a line is not valid JSON"):
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(path), "k")
    lines[150] = json.dumps({"k": 7})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(path))}: a line holds a value of another type in 'k'"
    ) as info:
        with fnapi_pipeline() as p:
            _ = p | ReadKeyBatches(str(path), "k")
    assert_no_position(str(info.value), path)


def test_text_lines_split_on_newlines_only_and_lose_a_bom(tmp_path):
    path = tmp_path / "k.txt"
    path.write_bytes(b"\xef\xbb\xbfa\r\nb\xe2\x80\xa8c\nd\re\n\xc2\x85f\n\ng")
    expected = ["a", "b\u2028c", "d\re", "\x85f", "", "g"]
    assert ReadOrderedKeys(str(path)).read()[0].to_pylist() == expected
    with fnapi_pipeline() as p:
        keys = p | ReadKeyBatches(str(path)) | beam.FlatMap(lambda b: b.to_pylist())
        assert_that(keys, equal_to(expected))
    csv_path = tmp_path / "k.csv"
    csv_path.write_bytes(b"\xef\xbb\xbfk\na\n")
    assert ReadOrderedKeys(str(csv_path), "k").read()[0].to_pylist() == ["a"]


@pytest.mark.parametrize(("name", "column"), [("e.txt", None), ("e.csv", "k"), ("e.jsonl", "k")])
def test_zero_byte_files_are_zero_rows_in_every_format(tmp_path, name, column):
    path = tmp_path / (name + ".gz")
    path.write_bytes(gzip.compress(b""))
    assert len(ReadOrderedKeys(str(path), column).read()[0]) == 0
    with fnapi_pipeline() as p:
        rows = p | ReadKeyBatches(str(path), column) | beam.Map(len)
        assert_that(rows, equal_to([]))


def test_corrupt_parquet_names_the_file(tmp_path):
    path = tmp_path / "k.parquet"
    path.write_bytes(b"PAR1" + b"SECRET" * 20)
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: cannot read as Parquet"):
        ReadKeyBatches(str(path), "k")


def test_int_keys_name_the_column_not_the_row_of_a_bad_cell(tmp_path):
    path = tmp_path / "k.csv"
    path.write_text("k\n1\n2\nSECRET\n")
    with pytest.raises(
        InputError, match=r"column 'k' of .*k.csv has a value that is not a 64-bit integer"
    ) as info:
        ReadOrderedKeys(str(path), "k", key_type="int").read()
    assert_no_position(str(info.value), path)


def test_numbers_read_ints_of_any_size_and_floats(tmp_path):
    path = tmp_path / "v.csv"
    path.write_text("v\n18446744073709551615\n-5\n1.5\nnan\n")
    values = ReadOrderedKeys(str(path), "v", key_type=NUMBERS).read()[0].to_pylist()
    assert values[:3] == [1.8446744073709552e19, -5.0, 1.5] and values[3] != values[3]
    path.write_text("v\n7\nseven\n")
    with pytest.raises(
        InputError, match=r"column 'v' of .*v.csv has a value that is not a number$"
    ):
        ReadOrderedKeys(str(path), "v", key_type=NUMBERS).read()


@pytest.mark.parametrize("data", [b"PAR1x", b"PAR1" + b"x" * 100 + b"PAR1"])
def test_damaged_parquet_message_names_no_size(tmp_path, data):
    # The size of a file (or of its footer) follows from its number of rows.
    path = tmp_path / "k.parquet"
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        ReadKeyBatches(str(path), "k")
    message = str(info.value)
    assert message == f"{path}: cannot read as Parquet (the file is truncated or is not Parquet)"
