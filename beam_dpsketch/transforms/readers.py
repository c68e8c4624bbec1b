"""Read one key column of Parquet, CSV, JSON Lines or text files as batches of keys.

No format goes through per-element Python (Beam costs microseconds per element): Parquet row
groups, CSV blocks (``pyarrow.csv.open_csv``), JSON Lines blocks (``pyarrow.json.open_json``) and
blocks of text lines become one pyarrow ``Array`` each, which the sketches hash as a whole.

One input layer
---------------
Every reader here (:class:`ReadKeyBatches`, :class:`ReadKeyPairs`, :class:`ReadOrderedKeys`), and
so every ``beam-dpsketch`` subcommand, opens files the same way (:func:`_open`):

* **Compression** by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``/``.zstd``,
  ``.deflate``), decompressed strictly: a truncated or corrupt file fails (Beam's own
  decompression stops silently where a cut file ends). Concatenated gzip members are read.
* **Decoding**: CSV, JSON Lines and text must be UTF-8; a UTF-8 byte order mark at the start of
  a file is dropped.
* **Lines** of text files end at ``\n`` or ``\r\n`` only (:func:`_split_lines`): a lone ``\r``,
  U+2028, U+0085, form feeds and the other characters of ``str.splitlines`` are part of the key.
  A last line without a newline is a key. Each file is read by one worker.
* **Empty input**: a zero-byte file (after decompression) is zero rows in every format, like a
  CSV header alone; its column is not checked.
* **Errors** are one line naming the file and, when one is at fault, the line (``line N``: the
  N-th ``\n``-terminated line of the file) or the row (``row N``: the N-th record, the CSV header
  not counted) and the column or parameter; never a value or a count from the data
  (:class:`InputError` for damaged files).

Key types
---------
By default a column keeps the type the file gives it: Parquet and JSON integer columns give int
keys, string columns str keys, binary columns bytes keys. CSV has no types, so CSV keys are
strings (``"007"`` stays ``"007"``); text lines are strings. ``key_type="int"`` or ``"str"``
converts (a cell that is not a 64-bit integer fails naming its row). Anything else (floats,
timestamps, nested values) is rejected with ``TypeError`` naming the column and its type: a float
is not a key. ``key_type=NUMBERS`` reads numbers instead of keys (for quantiles): integer and
float columns as they are, CSV and text cells parsed as integers (saturated to the int64 range,
which any public bound lies in) or floats (``1.5``, ``1e3``, ``nan``, ``inf``).

Missing values
--------------
A null in the key column (a JSON ``null`` or missing field, an empty CSV cell, a Parquet null)
raises ``TypeError`` naming the column and the row, or goes to the ``"invalid"`` output as
``(None, reason)`` with ``dead_letter=True``. Quoted empty CSV cells (``""``) are the empty-string key.

Public order
------------
:class:`ReadOrderedKeys` reads the same files with the same rules in one public order (files in
sorted path order, rows in file order, or stably sorted by a public time column) and numbers the
rows: the input of the order-dependent releases (continual observation, sliding windows,
intermittent queries), whose guarantees need positions and times that do not depend on the data.
"""

from __future__ import annotations

import abc
import bz2
import codecs
import io
import json
import lzma
import os
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from apache_beam import pvalue
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.transforms.batching import (
    DEFAULT_BATCH_SIZE,
    INVALID_TAG,
    MAIN_TAG,
    BatchKeys,
)

__all__ = [
    "INPUT_FORMATS",
    "KEY_TYPES",
    "NUMBERS",
    "InputError",
    "ReadKeyBatches",
    "ReadKeyPairs",
    "ReadOrderedKeys",
    "infer_input_format",
    "ordered_batches",
]

INPUT_FORMATS = ("parquet", "csv", "jsonl", "text")
KEY_TYPES = ("int", "str")
#: ``key_type`` that reads numbers (ints and floats, e.g. for quantiles) instead of keys.
NUMBERS = "number"

_EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
_COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".zstd", ".deflate", ".lzma", ".xz", ".snappy")
_FORMAT_ALIASES = {"json": "jsonl", "ndjson": "jsonl", "txt": "text", "pq": "parquet"}
# Bytes of a JSON Lines file parsed at construction to check the column and learn its type.
_JSON_PROBE_BYTES = 1 << 20
_BLOCK_SIZE = 1 << 22
# Read-ahead of the streamed Parquet reader (bytes).
_PARQUET_BUFFER = 1 << 20


def infer_input_format(path: str) -> str:
    """The input format implied by a path's extension (ignoring a compression suffix).

    ``.parquet``/``.pq`` -> parquet, ``.csv`` -> csv, ``.jsonl``/``.ndjson``/``.json`` ->
    jsonl, anything else -> text (one key per line).
    """
    name = os.path.basename(path).lower()
    for suffix in _COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return _EXTENSIONS.get(os.path.splitext(name)[1], "text")


def _normalise_format(input_format: str | None, path: str) -> str:
    if input_format is None:
        return infer_input_format(path)
    fmt = _FORMAT_ALIASES.get(str(input_format).lower(), str(input_format).lower())
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    return fmt


def _key_kind(typ: pa.DataType) -> str | None:
    """``"int"``, ``"str"`` or ``"bytes"`` for an Arrow type usable as keys, else ``None``."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return "int"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "str"
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return "bytes"
    return None


def _missing_column(column: str, available: list[str], where: str) -> ValueError:
    return ValueError(
        f"column {column!r} not found in {where}; available columns: "
        + ", ".join(repr(c) for c in available)
    )


def _bad_type(column: str, typ: pa.DataType, where: str) -> TypeError:
    return TypeError(
        f"column {column!r} in {where} has type {typ}: keys must be integers, strings or "
        "binary (floats are not keys)"
    )


class InputError(ValueError):
    """An input file that cannot be read as declared.

    The message is one line, ``"<file>[, line <n>]: <problem>"``: it names the file, the line
    when one is known, and the column or parameter, never a value or a count from the data.
    """


def _input_error(path: str, problem: str, line: int | None = None) -> InputError:
    where = path if line is None else f"{path}, line {line}"
    return InputError(f"{where}: {problem}")


def _new_decompressor(kind: str) -> Any:
    """A fresh incremental decompressor (with ``eof`` and ``unused_data``) for ``kind``."""
    if kind == CompressionTypes.GZIP:
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if kind == CompressionTypes.DEFLATE:
        return zlib.decompressobj()
    if kind == CompressionTypes.BZIP2:
        return bz2.BZ2Decompressor()
    if kind == CompressionTypes.LZMA:
        return lzma.LZMADecompressor()
    if kind == CompressionTypes.ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj()
    raise ValueError(f"unsupported compression {kind!r}")


class _PullStream(io.RawIOBase):
    """A read-only byte stream whose subclass fills ``_pending`` from ``_source`` on demand."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        self._source = source
        self._pending = b""
        self._offset = 0
        self._done = False

    def readable(self) -> bool:
        return True

    @abc.abstractmethod
    def _fill(self) -> None:
        """Make ``_pending`` non-empty, or set ``_done`` at the end of the stream."""

    def readinto(self, buffer: Any) -> int:
        self._fill()
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        if self._offset == len(self._pending):
            self._pending, self._offset = b"", 0
        return n

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


class _Decompressed(_PullStream):
    """Decompress a raw byte stream, failing on truncated or corrupt input.

    Beam's ``CompressedFile`` stops silently where a truncated file ends (a gzip file cut in the
    middle reads as a shorter file), so every compressed input goes through this stream instead:
    the end of the raw bytes must also be the end of a complete compressed stream, and a corrupt
    stream raises too, both as :class:`InputError` naming the file. Concatenated streams
    (multi-member gzip) are read one after the other.
    """

    # Raw bytes per decompression step: small, so that one step of a highly compressed file
    # (gzip expands up to about 1000x) stays small in memory.
    _CHUNK = 1 << 16

    def __init__(self, raw: Any, path: str, kind: str) -> None:
        super().__init__(raw)
        self._path, self._kind = path, kind
        self._decompressor = _new_decompressor(kind)
        self._started = False

    def _fail(self) -> InputError:
        return _input_error(
            self._path, f"the {self._kind} data is truncated or corrupt (cannot decompress)"
        )

    def _fill(self) -> None:
        while not self._pending and not self._done:
            data = self._source.read(self._CHUNK)
            if not data:
                if self._started and not self._decompressor.eof:
                    raise self._fail()
                self._done = True
                return
            while data:
                if self._decompressor.eof:
                    # Another stream follows the complete one (multi-member gzip).
                    self._decompressor = _new_decompressor(self._kind)
                self._started = True
                try:
                    self._pending += self._decompressor.decompress(data)
                except Exception:  # noqa: BLE001 - zlib, bz2, lzma and zstd errors differ
                    raise self._fail() from None
                data = self._decompressor.unused_data if self._decompressor.eof else b""


_BOM = codecs.BOM_UTF8


class _CheckedText(_PullStream):
    """The bytes of a text file (CSV, JSON Lines, text), checked as UTF-8, without a BOM.

    A UTF-8 byte order mark at the start of the file is dropped (it would stay glued to the
    first key). Bytes that are not UTF-8 raise :class:`InputError` naming the file and the line
    (1-based, counting ``\\n``), never the bytes.
    """

    _CHUNK = 1 << 20

    def __init__(self, stream: Any, path: str) -> None:
        super().__init__(stream)
        self._path = path
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._lines = 0
        self._first = True

    def _check(self, data: bytes, final: bool) -> None:
        try:
            self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            # exc.object is the decoder's held-back bytes (an incomplete character, no newline)
            # followed by ``data``.
            line = self._lines + exc.object[: exc.start].count(b"\n") + 1
            raise _input_error(
                self._path, "invalid UTF-8 (text input must be UTF-8)", line
            ) from None
        self._lines += data.count(b"\n")

    def _fill(self) -> None:
        while not self._pending and not self._done:
            data = self._source.read(self._CHUNK)
            if self._first:
                # The BOM may straddle reads of a stream that returns short reads.
                while data and len(data) < len(_BOM) and _BOM.startswith(data):
                    more = self._source.read(self._CHUNK)
                    if not more:
                        break
                    data += more
                if data.startswith(_BOM):
                    data = data[len(_BOM) :]
                self._first = False
            if not data:
                self._check(b"", True)
                self._done = True
                return
            self._check(data, False)
            self._pending = data


def _open(path: str, fmt: str) -> Any:
    """The readable bytes of ``path`` for format ``fmt``: the one way every reader opens input.

    Parquet is read as it is (random access, compression inside the format). CSV, JSON Lines and
    text are decompressed by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``,
    ``.deflate``), strictly (:class:`_Decompressed`), then checked as UTF-8 without a BOM
    (:class:`_CheckedText`).
    """
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    if fmt == "parquet":
        return raw
    kind = CompressionTypes.detect_compression_type(path)
    if kind != CompressionTypes.UNCOMPRESSED:
        raw = _Decompressed(raw, path, kind)
    return _CheckedText(raw, path)


def _is_empty(path: str, fmt: str) -> bool:
    """Whether a CSV, JSON Lines or text file holds no bytes at all (after decompression): an
    input of zero rows in every format (a zero-byte file has no header or schema to check)."""
    if fmt == "parquet":
        return False
    with _open(path, fmt) as f:
        return not f.read(1)


def _split_lines(text: str) -> list[str]:
    """The lines of ``text``: split on ``\\n``, one ``\\r`` before it dropped (``\\r\\n``).

    The one line splitting of every reader: no other character (``\\r`` alone, U+2028, U+0085,
    form feed, ...) ends a line, unlike ``str.splitlines``. ``text`` must end at a line end
    (the caller keeps the rest).
    """
    lines = text.split("\n")
    lines.pop()  # after the final newline
    if "\r" not in text:  # the common case: no per-line Python at all
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _text_line_blocks(path: str, block: int = _BLOCK_SIZE) -> Iterator[tuple[int, list[str]]]:
    """``(first line number, lines)`` blocks of a text file, each line one key (see
    :func:`_split_lines`); a last line without a newline counts. Lines are 1-based."""
    first = 1
    rest = b""
    with _open(path, "text") as f:
        while True:
            data = f.read(block)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                # Already checked as UTF-8, and a newline byte is always a character boundary.
                lines = _split_lines(data[:cut].decode("utf-8"))
                yield first, lines
                first += len(lines)
    if rest:
        yield first, _split_lines(rest.decode("utf-8") + "\n")


def _csv_convert_options(column: str, extra: Sequence[str] = ()) -> pa_csv.ConvertOptions:
    """Read ``column`` as strings (converted by :meth:`_ColumnReader._batches`, which can name
    the row of a bad cell); ``extra`` columns (a time column) keep pyarrow's inferred type."""
    return pa_csv.ConvertOptions(
        include_columns=[column, *extra],
        column_types={column: pa.string()},
        # An empty cell is a missing key; "NA", "null", ... are legitimate keys.
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )


def _csv_header(path: str) -> list[str]:
    with _open(path, "csv") as f:
        try:
            reader = pa_csv.open_csv(f, read_options=pa_csv.ReadOptions(block_size=1 << 16))
        except pa.ArrowInvalid as exc:
            raise _csv_error(path, exc) from None
        return reader.schema.names


def _read_json_probe(path: str) -> pa.Table:
    with _open(path, "jsonl") as f:
        head = f.read(_JSON_PROBE_BYTES)
        if f.read(1):
            # More follows: parse whole lines only.
            head = head[: head.rfind(b"\n") + 1] or head
    try:
        return pa_json.read_json(io.BytesIO(head))
    except pa.ArrowInvalid as exc:
        raise _json_error(path, None, None, exc) from None


def _probe_column(path: str, fmt: str, column: str) -> pa.DataType:
    """Check that the first file has ``column`` and return its Arrow type."""
    if fmt == "parquet":
        schema = _parquet_call(path, lambda pf: pf.schema_arrow)
    elif fmt == "csv":
        names = _csv_header(path)
        if column not in names:
            raise _missing_column(column, names, path)
        return pa.string()
    else:
        schema = _read_json_probe(path).schema
    if column not in schema.names:
        raise _missing_column(column, schema.names, path)
    return schema.field(column).type


def _parquet_call(
    path: str, use: Callable[[pq.ParquetFile], Any], read_dictionary: Sequence[str] = ()
) -> Any:
    """``use(ParquetFile)`` of the file at ``path``, string or binary ``read_dictionary`` columns
    decoded as dictionary arrays; an unreadable file raises :class:`InputError` naming it."""
    with _open(path, "parquet") as f:
        try:
            return use(pq.ParquetFile(f, read_dictionary=list(read_dictionary) or None))
        except (pa.ArrowInvalid, OSError) as exc:
            raise _input_error(path, f"cannot read as Parquet ({_arrow_problem(exc)})") from None


def _json_kind(value: Any) -> str | None:
    """The JSON type of a value (numbers are one type; ``None`` for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _arrow_json_kind(typ: pa.DataType | None) -> str | None:
    if typ is None:
        return None
    if pa.types.is_boolean(typ):
        return "boolean"
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        return "number"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "string"
    return None


def _locate_json_problem(
    path: str, column: str | None, typ: pa.DataType | None
) -> tuple[int, str] | None:
    """``(line, problem)`` of the first line of a JSON Lines file that is not a JSON object, or
    where a field (``column``, or any field without one) changes JSON type (from ``typ``, or
    from the earlier lines); ``None`` if no line is at fault.

    Arrow's JSON reader numbers rows within one block, so the error path scans the file itself
    to name the right line. The problem names the field and JSON types, never a value.
    """
    seen: dict[str, str] = {}
    expected = _arrow_json_kind(typ)
    if column is not None and expected is not None:
        seen[column] = expected
    for first, lines in _text_line_blocks(path):
        for i, text in enumerate(lines):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                return first + i, "not valid JSON (one JSON object per line)"
            if not isinstance(obj, dict):
                return first + i, "not a JSON object (one JSON object per line)"
            for field in [column] if column is not None else list(obj):
                kind = _json_kind(obj.get(field))
                if kind is None:
                    continue
                before = seen.setdefault(field, kind)
                if before != kind:
                    return first + i, f"column {field!r} changes type from {before} to {kind}"
    return None


def _json_error(
    path: str, column: str | None, typ: pa.DataType | None, exc: BaseException
) -> InputError:
    found = _locate_json_problem(path, column, typ)
    if found is not None:
        line, problem = found
        return _input_error(path, problem, line)
    what = f"column {column!r}" if column else "the file"
    return _input_error(path, f"cannot read {what} as JSON Lines: {_arrow_problem(exc)}")


def _locate_csv_problem(path: str) -> int | None:
    """The line of the first CSV record whose number of fields differs from the header's."""
    import csv

    with _open(path, "csv") as f:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        reader = csv.reader(text)
        try:
            header = next(reader)
            for record in reader:
                if record and len(record) != len(header):
                    return reader.line_num
        except (csv.Error, StopIteration):
            return reader.line_num or None
    return None


def _csv_error(path: str, exc: BaseException) -> InputError:
    line = _locate_csv_problem(path)
    problem = _arrow_problem(exc)
    # Arrow prefixes "Row #<n>: " when it parses serially (not with threads), which pushes the
    # "Expected <n> columns" clause out of the kept summary: look for it in the whole message.
    if line is not None and "columns" in str(exc):
        return _input_error(
            path, "the record has a different number of fields than the header", line
        )
    return _input_error(path, f"cannot parse as CSV: {problem}")


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _parse_number(text: str) -> int | float | None:
    """A cell as a number (an int saturated to int64, else a float), or ``None``."""
    try:
        return min(max(int(text), _INT64_MIN), _INT64_MAX)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


class _ColumnReader(beam.DoFn):
    """Base of the per-file readers: turn one Arrow column chunk into a validated batch.

    ``key_type`` ``"int"``/``"str"`` converts keys; ``NUMBERS`` reads numbers (ints and
    floats, for quantiles) instead of keys. ``first_row`` (1-based) locates a bad cell: the
    message names the file, the column and the row, never the cell.
    """

    def __init__(self, column: str, key_type: str | None, dead_letter: bool):
        self._column = column
        self._key_type = key_type
        self._dead_letter = dead_letter

    def _what(self) -> str:
        return f"column {self._column!r}"

    def _where(self, path: str, row: int | None) -> str:
        """``"<what> of <path>[, row <n>]"``: the cell's place, never its value."""
        return f"{self._what()} of {path}" + ("" if row is None else f", row {row}")

    def _batches(
        self, arr: Any, path: str, first_row: int | None = None, keep_dictionary: bool = False
    ) -> Iterator[Any]:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type) and not (
            keep_dictionary
            and self._key_type in (None, _key_kind(arr.type))
            and _key_kind(arr.type) in ("str", "bytes")
        ):
            arr = arr.dictionary_decode()
        numbers = self._key_type == NUMBERS
        kind = _key_kind(arr.type)
        if numbers and pa.types.is_floating(arr.type):
            kind = "number"
        if (kind is None or (numbers and kind == "bytes")) and not pa.types.is_null(arr.type):
            if numbers:
                exc: Exception = TypeError(
                    f"column {self._column!r} in {path} has type {arr.type}: quantile values "
                    "must be numbers"
                )
            else:
                exc = _bad_type(self._column, arr.type, path)
            if not self._dead_letter:
                raise exc
            yield pvalue.TaggedOutput(INVALID_TAG, (arr, str(exc)))
            return
        if arr.null_count:
            first_null = None
            if first_row is not None:
                first_null = first_row + pc.index(pc.is_null(arr), True).as_py()
            reason = f"None is not a valid key: {self._where(path, first_null)} is missing"
            if not self._dead_letter:
                raise TypeError(reason)
            for _ in range(arr.null_count):
                yield pvalue.TaggedOutput(INVALID_TAG, (None, reason))
            arr = arr.filter(pc.is_valid(arr))
        if not len(arr):
            return
        if numbers:
            if kind == "str":
                arr = self._strings_to_numbers(arr, path, first_row)
            yield arr
            return
        if self._key_type == "int" and kind == "str":
            yield from self._strings_to_ints(arr, path, first_row)
            return
        target = {"int": pa.int64(), "str": pa.string()}.get(self._key_type or "")
        if target is not None and kind != self._key_type:
            try:
                arr = pc.cast(arr, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise ValueError(
                    f"cannot convert column {self._column!r} in {path} to {self._key_type} keys: "
                    f"{_arrow_problem(exc)}"
                ) from None
        yield arr

    def _strings_to_ints(self, arr: pa.Array, path: str, first_row: int | None) -> Iterator[Any]:
        try:
            yield pc.cast(arr, pa.int64())
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # The slow path finds the bad cells; it accepts what Python's int() accepts.
        good: list[int] = []
        for i, text in enumerate(arr.to_pylist()):
            try:
                value = int(text)
                if not _INT64_MIN <= value <= _INT64_MAX:
                    raise ValueError
            except ValueError:
                row = None if first_row is None else first_row + i
                reason = f"{self._where(path, row)} is not a 64-bit integer key (key_type='int')"
                if not self._dead_letter:
                    raise InputError(reason) from None
                yield pvalue.TaggedOutput(INVALID_TAG, (text, reason))
                continue
            good.append(value)
        if good:
            yield pa.array(good, pa.int64())

    def _strings_to_numbers(self, arr: pa.Array, path: str, first_row: int | None) -> pa.Array:
        for target in (pa.int64(), pa.float64()):
            try:
                return pc.cast(arr, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        values = []
        for i, text in enumerate(arr.to_pylist()):
            value = _parse_number(text)
            if value is None:
                row = None if first_row is None else first_row + i
                raise InputError(f"{self._where(path, row)} is not a number")
            values.append(value)
        if all(isinstance(v, int) for v in values):
            return pa.array(values, pa.int64())
        return pa.array([float(v) for v in values], pa.float64())


class _ParquetRowGroups(beam.DoFn):
    """One ``(path, row_group, first_row)`` per row group, so a Reshuffle can spread a file's
    groups."""

    def __init__(self, column: str):
        self._column = column

    def process(self, metadata: Any) -> Iterator[tuple[str, int, int]]:
        path = metadata.path
        names, sizes = _parquet_call(
            path,
            lambda pf: (
                pf.schema_arrow.names,
                [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)],
            ),
        )
        if self._column not in names:
            raise _missing_column(self._column, names, path)
        first = 1
        for i, size in enumerate(sizes):
            yield path, i, first
            first += size


class _ReadParquetRowGroup(_ColumnReader):
    def process(self, element: tuple[str, int, int]) -> Iterator[Any]:
        path, index, first_row = element
        # String columns stay dictionary-encoded, as Parquet usually stores them: decoding and
        # re-hashing every value costs more than the whole sketch update, and every sketch
        # takes dictionary arrays (each distinct value is converted or hashed once).
        table = _parquet_call(
            path,
            lambda pf: pf.read_row_group(index, columns=[self._column]),
            read_dictionary=[self._column],
        )
        yield from self._batches(table.column(self._column), path, first_row, keep_dictionary=True)


def _csv_chunks(path: str, column: str) -> Iterator[tuple[int, pa.Array]]:
    """``(first row, cells)`` of one CSV column, block by block (rows are 1-based data rows)."""
    if _is_empty(path, "csv"):
        return
    with _open(path, "csv") as f:
        try:
            reader = pa_csv.open_csv(
                f,
                read_options=pa_csv.ReadOptions(block_size=_BLOCK_SIZE),
                convert_options=_csv_convert_options(column),
            )
        except (pa.ArrowInvalid, KeyError) as exc:
            names = _csv_header(path)
            if column not in names:
                raise _missing_column(column, names, path) from None
            raise _csv_error(path, exc) from None
        first_row = 1
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:
                raise _csv_error(path, exc) from None
            yield first_row, batch.column(0)
            first_row += batch.num_rows


def _json_chunks(
    path: str, column: str, arrow_type: pa.DataType | None
) -> Iterator[tuple[int, pa.Array]]:
    """``(first row, values)`` of one JSON Lines field, block by block (rows are 1-based).

    With ``arrow_type`` (found on the first file) only that field is parsed, with that type:
    a later block of another type fails loudly instead of being re-inferred.
    """
    if _is_empty(path, "jsonl"):
        return
    parse = pa_json.ParseOptions()
    if arrow_type is not None:
        parse = pa_json.ParseOptions(
            explicit_schema=pa.schema([(column, arrow_type)]),
            unexpected_field_behavior="ignore",
        )
    with _open(path, "jsonl") as f:
        first_row = 1
        try:
            reader = pa_json.open_json(
                f, read_options=pa_json.ReadOptions(block_size=_BLOCK_SIZE), parse_options=parse
            )
            for batch in reader:
                if column not in batch.schema.names:
                    raise _missing_column(column, batch.schema.names, path)
                yield first_row, batch.column(column)
                first_row += batch.num_rows
        except pa.ArrowInvalid as exc:
            raise _json_error(path, column, arrow_type, exc) from None


def _parquet_chunks(path: str, column: str, rows: int) -> Iterator[tuple[int, pa.Array]]:
    """``(first row, values)`` of one Parquet column in batches of at most ``rows`` rows."""
    with _open(path, "parquet") as f:
        try:
            # No pre-buffering: through a Python file object pyarrow would otherwise copy the
            # whole file into memory before the first batch.
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=_PARQUET_BUFFER)
            names = pf.schema_arrow.names
            if column not in names:
                raise _missing_column(column, names, path)
            first_row = 1
            for batch in pf.iter_batches(batch_size=rows, columns=[column]):
                yield first_row, batch.column(0)
                first_row += batch.num_rows
        except (pa.ArrowInvalid, OSError) as exc:
            raise _input_error(path, f"cannot read as Parquet ({_arrow_problem(exc)})") from None


class _ReadCsvColumn(_ColumnReader):
    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for first_row, cells in _csv_chunks(path, self._column):
            yield from self._batches(cells, path, first_row)


class _ReadJsonColumn(_ColumnReader):
    def __init__(
        self, column: str, key_type: str | None, dead_letter: bool, arrow_type: pa.DataType | None
    ):
        super().__init__(column, key_type, dead_letter)
        self._arrow_type = arrow_type

    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for first_row, values in _json_chunks(path, self._column, self._arrow_type):
            yield from self._batches(values, path, first_row)


class _ReadTextLines(_ColumnReader):
    """Text input: every line (see :func:`_split_lines`) is one key, in blocks of
    ``batch_size`` lines."""

    def __init__(self, key_type: str | None, dead_letter: bool, batch_size: int):
        super().__init__("line", key_type, dead_letter)
        self._batch_size = batch_size

    def _what(self) -> str:
        return "a text line"

    def _where(self, path: str, row: int | None) -> str:
        return f"a text line of {path}" if row is None else f"{path}, line {row}"

    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for first, lines in _text_line_blocks(path):
            for start in range(0, len(lines), self._batch_size):
                part = pa.array(lines[start : start + self._batch_size], pa.string())
                yield from self._batches(part, path, first + start)


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# Standalone numbers in Arrow's messages are counts or positions taken from the data ("Expected
# 3 columns, got 2", block-relative "row 5"); type names such as int64 are kept.
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


def _arrow_problem(exc: BaseException) -> str:
    """A data-free summary of an Arrow parse error.

    Arrow quotes the offending cell or row after the last colon ("invalid value 'x'", "Expected
    3 columns, got 2: a,b"); rows and cells are private data, so only the first two clauses are
    kept, with every quoted string and every standalone number removed.
    """
    clauses = str(exc).split(": ")[:2]
    text = ": ".join(_NUMBER.sub("N", _QUOTED.sub("<value>", c)) for c in clauses).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ReadKeyBatches(beam.PTransform):
    """Read the keys of one column of Parquet, CSV, JSON Lines or text files, in batches.

    Parameters
    ----------
    path_or_glob
        A file path or glob, on any filesystem Beam knows (local, ``gs://``, ...). Compressed
        CSV, JSON Lines and text files (``.gz``, ``.bz2``, ...) are decompressed (strictly:
        see "One input layer" in the module docstring).
    column
        The key column (required for Parquet, CSV and JSON Lines; must be ``None`` for text,
        where each line is a key).
    input_format
        ``"parquet"``, ``"csv"``, ``"jsonl"`` or ``"text"``; by default from the extension
        (see :func:`infer_input_format`).
    key_type
        ``None`` (keep the file's type; CSV and text give str), ``"int"`` or ``"str"``; or
        :data:`NUMBERS` to read numbers instead of keys.
    batch_size
        Keys per batch for text input (columnar formats batch per row group or block).
    dead_letter
        If true, null keys and cells or text lines that are not ``key_type="int"`` keys go to
        the ``"invalid"`` output instead of failing the pipeline.
    validate
        Check at construction that files match and (from the first file) that the column
        exists with a key type. Turn off only when the files exist only on the workers.

    Returns
    -------
    PCollection
        pyarrow ``Array`` batches; string and binary Parquet columns come dictionary-encoded
        (each distinct value of a row group stored once; every sketch takes such arrays). With
        ``dead_letter=True``, a tagged result: ``result["batches"]`` and ``result["invalid"]``.

    Raises
    ------
    FileNotFoundError
        At construction (``validate``), if no file matches.
    ValueError
        If the column is missing (the message lists the available columns) or the format or
        key type is unknown.
    InputError
        (A ``ValueError``) when a file is damaged: truncated or corrupt compression, bytes that
        are not UTF-8, a CSV record with another number of fields than the header, a JSON Lines
        line that is not a JSON object, a cell that is not an int key or a number.
    TypeError
        If the column holds values that are not keys (floats, ...) or nulls.

    Attributes
    ----------
    key_type
        ``"int"``, ``"str"`` or ``"bytes"``: the type of the keys produced (``None`` when it is
        unknown because ``validate=False``). Query keys must have this type to match.
    """

    def __init__(
        self,
        path_or_glob: str,
        column: str | None = None,
        input_format: str | None = None,
        *,
        key_type: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dead_letter: bool = False,
        validate: bool = True,
    ):
        super().__init__()
        if not isinstance(path_or_glob, str) or not path_or_glob:
            raise ValueError(f"path_or_glob must be a non-empty string, got {path_or_glob!r}")
        self._pattern = path_or_glob
        self.input_format = _normalise_format(input_format, path_or_glob)
        if key_type is not None and key_type not in (*KEY_TYPES, NUMBERS):
            raise ValueError(
                f"key_type must be None or one of {(*KEY_TYPES, NUMBERS)}, got {key_type!r}"
            )
        if self.input_format == "text":
            if column is not None:
                raise ValueError(
                    f"text input has no columns (each line is a key), but column={column!r} was "
                    "given; for a CSV or JSON Lines file, set input_format"
                )
        elif not column:
            raise ValueError(f"column is required for {self.input_format} input")
        self._column = column
        self._requested_key_type = key_type
        self._batch_size = batch_size
        self._dead_letter = bool(dead_letter)
        self._arrow_type: pa.DataType | None = None
        if self.input_format in ("csv", "text"):
            self.key_type: str | None = key_type or "str"
        else:
            self.key_type = key_type
        # Validates batch_size at construction for every format.
        BatchKeys(None, batch_size)
        if validate:
            self._validate()

    def _validate(self) -> None:
        matches = FileSystems.match([self._pattern])[0].metadata_list
        if not matches:
            raise FileNotFoundError(f"no file matches {self._pattern!r}")
        if self.input_format == "text":
            return
        # Zero-byte files are inputs of zero rows: the first file with bytes has the schema.
        paths = (m.path for m in sorted(matches, key=lambda m: m.path))
        first = next((p for p in paths if not _is_empty(p, self.input_format)), None)
        if first is None:
            return
        arrow_type = _probe_column(first, self.input_format, self._column)
        kind = _key_kind(arrow_type)
        if self._requested_key_type == NUMBERS:
            if kind not in ("int", "str") and not pa.types.is_floating(arrow_type):
                raise TypeError(
                    f"column {self._column!r} in {first} has type {arrow_type}: quantile values "
                    "must be numbers"
                )
            return
        if kind is None:
            raise _bad_type(self._column, arrow_type, first)
        if self.input_format == "jsonl":
            self._arrow_type = arrow_type
        self.key_type = self._requested_key_type or kind

    def expand(self, pbegin):
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        args = (self._column, self._requested_key_type, self._dead_letter)
        if self.input_format == "text":
            work = files
            reader: beam.DoFn = _ReadTextLines(
                self._requested_key_type, self._dead_letter, self._batch_size
            )
        elif self.input_format == "parquet":
            work = files | "RowGroups" >> beam.ParDo(_ParquetRowGroups(self._column))
            reader = _ReadParquetRowGroup(*args)
        elif self.input_format == "csv":
            work = files
            reader = _ReadCsvColumn(*args)
        else:
            work = files
            reader = _ReadJsonColumn(*args, self._arrow_type)
        # Spread files (and Parquet row groups) over workers.
        work = work | "Spread" >> beam.Reshuffle()
        read = beam.ParDo(reader).with_output_types(pa.Array)
        if self._dead_letter:
            return work | "ReadColumn" >> read.with_outputs(INVALID_TAG, main=MAIN_TAG)
        return work | "ReadColumn" >> read


def _read_table(
    path: str, fmt: str, columns: Sequence[str], strings: Sequence[str]
) -> pa.Table | None:
    """``columns`` of a whole Parquet, CSV or JSON Lines file (``None`` for a zero-byte file).

    CSV ``strings`` columns are read as strings (the others keep pyarrow's inferred type). Every
    failure raises an error naming the file (and the line, when it can be found).
    """
    if _is_empty(path, fmt):
        return None
    if fmt == "parquet":
        names = _parquet_call(path, lambda pf: pf.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise _missing_column(missing[0], names, path)
        return _parquet_call(path, lambda pf: pf.read(columns=list(columns)))
    with _open(path, fmt) as f:
        try:
            if fmt == "csv":
                options = pa_csv.ConvertOptions(
                    include_columns=list(columns),
                    column_types=dict.fromkeys(strings, pa.string()),
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                )
                table = pa_csv.read_csv(f, convert_options=options)
            else:
                table = pa_json.read_json(f)
        except (pa.ArrowInvalid, KeyError) as exc:
            if fmt == "jsonl":
                raise _json_error(path, None, None, exc) from None
            names = _csv_header(path)
            missing = [c for c in columns if c not in names]
            if missing:
                raise _missing_column(missing[0], names, path) from None
            raise _csv_error(path, exc) from None
    for name in columns:
        if name not in table.column_names:
            raise _missing_column(name, table.column_names, path)
    return table.select(list(columns))


class _ReadPairs(beam.DoFn):
    """Read ``(privacy id, key)`` pairs from the two columns of one file."""

    def __init__(self, fmt: str, id_column: str, key_column: str):
        self._fmt, self._id, self._key = fmt, id_column, key_column

    def process(self, metadata: Any) -> Iterator[tuple[Any, Any]]:
        path, columns = metadata.path, [self._id, self._key]
        table = _read_table(path, self._fmt, columns, columns)
        if table is None:
            return
        for name in columns:
            column = table.column(name)
            if column.null_count:
                row = pc.index(pc.is_null(column), True).as_py() + 1
                raise TypeError(
                    f"None is not a valid key: {path}: column {name!r}, row {row} has a missing "
                    "value"
                )
        yield from zip(
            table.column(self._id).to_pylist(), table.column(self._key).to_pylist(), strict=True
        )


class ReadKeyPairs(beam.PTransform):
    """Read ``(privacy_id, key)`` pairs from two columns of Parquet, CSV or JSON Lines files.

    The input of user-level releases (``privacy_id_fn=lambda p: p[0], key_fn=lambda p: p[1]``).
    Missing columns raise ``ValueError`` at construction, listing the available ones; missing
    values raise ``TypeError`` naming the column.
    """

    def __init__(
        self, path_or_glob: str, key_column: str, id_column: str, input_format: str | None = None
    ) -> None:
        super().__init__()
        self._pattern = path_or_glob
        self._fmt = _normalise_format(input_format, path_or_glob)
        if self._fmt == "text":
            raise ValueError("input_format: a privacy id column needs Parquet, CSV or JSON Lines")
        matches = FileSystems.match([path_or_glob])[0].metadata_list
        if not matches:
            raise FileNotFoundError(f"no file matches {path_or_glob}")
        for column in (key_column, id_column):
            _probe_column(matches[0].path, self._fmt, column)
        self._key, self._id = key_column, id_column

    def expand(self, pbegin):
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        return (
            files
            | "Spread" >> beam.Reshuffle()
            | "ReadPairs" >> beam.ParDo(_ReadPairs(self._fmt, self._id, self._key))
        )


# Rows per element of ReadOrderedKeys: big enough that Beam's per-element cost is negligible.
ORDERED_BATCH_ROWS = 1 << 16
_SECONDS_PER_UNIT = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _time_values(column: Any, name: str, path: str) -> tuple[np.ndarray, np.ndarray]:
    """``(exact sort keys, seconds as float64)`` of a numeric or timestamp time column."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not len(column):
        # A header-only CSV has no type to infer: no rows, no times.
        return np.empty(0, np.int64), np.empty(0, np.float64)
    typ = column.type
    if pa.types.is_timestamp(typ):
        # Sort on the exact integer ticks: float seconds could tie distinct nanoseconds.
        ticks = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
        return ticks, ticks.astype(np.float64) / _SECONDS_PER_UNIT[typ.unit]
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        values = column.to_numpy(zero_copy_only=False)
        return values, values.astype(np.float64)
    raise TypeError(
        f"time column {name!r} of {path} has type {typ}: it must hold numbers (seconds) or "
        "timestamps"
    )


def _compact(values: pa.Array) -> pa.Array:
    """A copy of ``values`` that owns only its own rows: pickling an Arrow slice writes the
    whole parent buffer, so every element that may be encoded must be compacted."""
    return pa.concat_arrays([values])


def ordered_batches(
    keys: pa.Array, times: np.ndarray | None, rows: int = ORDERED_BATCH_ROWS
) -> list[tuple[int, pa.Array, np.ndarray | None]]:
    """Cut ordered rows into ``(position, keys, times)`` batches of at most ``rows`` rows.

    ``position`` is the public 0-based position of the batch's first row; ``times`` is the
    batch's slice of ``times`` (``None`` without a time column). Every batch is a compact copy.
    """
    return [
        (
            start,
            _compact(keys.slice(start, rows)),
            None if times is None else times[start : start + rows].copy(),
        )
        for start in range(0, len(keys), rows)
    ]


class _ReadInOrder(_ColumnReader):
    """Read files in the given order with the :class:`ReadKeyBatches` key rules.

    Without a time column the rows stream through in file order: memory holds one batch,
    whatever the size of the input. With one, the rows are sorted by time, which holds the key
    and time columns of the whole input (about 16 bytes per row for int keys, more for strings).
    """

    def __init__(
        self,
        fmt: str,
        column: str,
        key_type: str | None,
        time_column: str | None,
        rows: int,
        arrow_type: pa.DataType | None = None,
    ) -> None:
        super().__init__(column, key_type, dead_letter=False)
        self._fmt, self._time_column, self._rows = fmt, time_column, rows
        self._arrow_type = arrow_type

    def _what(self) -> str:
        return "a text line" if self._fmt == "text" else super()._what()

    def _where(self, path: str, row: int | None) -> str:
        if self._fmt == "text":
            return f"a text line of {path}" if row is None else f"{path}, line {row}"
        return super()._where(path, row)

    def _chunks(self, path: str) -> Iterator[tuple[int, pa.Array]]:
        """``(first row, raw values)`` of the key column of one file, streamed."""
        if self._fmt == "text":
            for first, lines in _text_line_blocks(path):
                yield first, pa.array(lines, pa.string())
        elif self._fmt == "parquet":
            yield from _parquet_chunks(path, self._column, self._rows)
        elif self._fmt == "csv":
            yield from _csv_chunks(path, self._column)
        else:
            yield from _json_chunks(path, self._column, self._arrow_type)

    def _stream(self, paths: Sequence[str]) -> Iterator[tuple[int, pa.Array, None]]:
        """``(position, keys, None)`` batches of exactly ``rows`` rows (the last may be
        shorter), in file order, holding at most about two batches."""
        position = 0
        held: list[pa.Array] = []
        count = 0
        for path in paths:
            for first, values in self._chunks(path):
                for keys in self._batches(values, path, first):
                    held.append(keys)
                    count += len(keys)
                    if count < self._rows:
                        continue
                    joined = pa.concat_arrays(held)
                    cut = count - count % self._rows
                    for start in range(0, cut, self._rows):
                        yield position, _compact(joined.slice(start, self._rows)), None
                        position += self._rows
                    held = [_compact(joined.slice(cut))] if cut < count else []
                    count -= cut
        if count:
            yield position, pa.concat_arrays(held), None

    def _empty_type(self) -> pa.DataType:
        return {"int": pa.int64(), "bytes": pa.binary()}.get(self._key_type or "", pa.string())

    def _read_file(self, path: str) -> tuple[Any, Any]:
        """``(keys, times)`` of one whole file (time column given, not text); ``(None, None)``
        for a file of no rows."""
        columns = [self._column, self._time_column]
        table = _read_table(path, self._fmt, columns, [self._column])
        if table is None:
            return None, None
        return table.column(self._column), table.column(self._time_column)

    def read_all(self, paths: Sequence[str]) -> tuple[pa.Array, np.ndarray | None]:
        """All rows of ``paths`` in public order: ``(keys, event times in seconds or None)``."""
        if self._time_column is None:
            batches = [keys for _, keys, _ in self._stream(paths)]
            if batches:
                return pa.concat_arrays(batches), None
            return pa.array([], self._empty_type()), None
        keys: list[Any] = []
        sort_keys: list[np.ndarray] = []
        seconds: list[np.ndarray] = []
        for path in paths:
            arr, time_arr = self._read_file(path)
            if arr is None:
                continue
            keys.extend(self._batches(arr, path, 1))
            if time_arr.null_count:
                raise TypeError(
                    f"time column {self._time_column!r} of {path} has missing values (None)"
                )
            exact, secs = _time_values(time_arr, self._time_column, path)
            sort_keys.append(exact)
            seconds.append(secs)
        column = pa.concat_arrays(keys) if keys else pa.array([], self._empty_type())
        times = np.concatenate(seconds) if seconds else np.empty(0, np.float64)
        if sort_keys:
            # Stable: rows with equal times keep their file order.
            order = np.argsort(np.concatenate(sort_keys), kind="stable")
            column, times = column.take(pa.array(order)), times[order]
        return column, times

    def process(self, paths: list[str]) -> Iterator[tuple[int, pa.Array, np.ndarray | None]]:
        if self._time_column is None:
            yield from self._stream(paths)
        else:
            yield from ordered_batches(*self.read_all(paths), self._rows)


class ReadOrderedKeys(beam.PTransform):
    """Read one key column in a public order, with public positions and optional event times.

    The order: files matching ``path_or_glob`` in sorted path order, rows in file order; with
    ``time_column``, rows stably sorted by that column (ties keep file order). The order must be
    **public** and independent of the private values (an ingestion sequence or arrival time,
    never the key itself): the order-dependent releases state their guarantees for neighbours
    that keep every other row's position or time.

    Applied to a pipeline, one worker reads all files (a single reader is the global sequencer
    that makes positions gap-free) and emits ``(position, keys, times)`` elements (see
    :func:`ordered_batches`): ``position`` is the 0-based position of the element's first row,
    ``keys`` a pyarrow ``Array`` of keys, ``times`` the rows' event times in seconds (float64;
    ``None`` without ``time_column``). :meth:`read` returns the same rows on the caller.

    Memory: without ``time_column`` the rows stream through, one batch at a time, so the
    reader's memory does not grow with the input. Sorting by ``time_column`` holds the key and
    time columns of the whole input on the reading worker (about 16 bytes per row with int
    keys; strings add their bytes).

    Parameters
    ----------
    path_or_glob, column, input_format, key_type
        As for :class:`ReadKeyBatches`, whose format detection, column check, key typing rules
        (CSV and text keys are strings unless ``key_type="int"``) and errors apply; its
        resolved ``key_type`` is exposed as :attr:`key_type`.
    time_column
        A numeric (seconds) or timestamp column of Parquet, CSV or JSON Lines input, different
        from ``column``.
    rows
        Rows per emitted element.

    Raises
    ------
    FileNotFoundError
        At construction, if no file matches.
    ValueError
        If a column is missing (listing the available ones), ``time_column`` is given for text
        input or equals ``column``, or the format or key type is unknown.
    TypeError
        When reading: a key or time value is missing (null), or the time column is neither
        numeric nor a timestamp.
    """

    def __init__(
        self,
        path_or_glob: str,
        column: str | None = None,
        input_format: str | None = None,
        *,
        key_type: str | None = None,
        time_column: str | None = None,
        rows: int = ORDERED_BATCH_ROWS,
    ) -> None:
        super().__init__()
        probe = ReadKeyBatches(path_or_glob, column, input_format, key_type=key_type)
        self.input_format = probe.input_format
        self.key_type = probe.key_type
        if time_column is not None:
            if self.input_format == "text":
                raise ValueError(
                    "time_column needs Parquet, CSV or JSON Lines input (text has no columns)"
                )
            if time_column == column:
                raise ValueError(f"time_column {time_column!r} must differ from the key column")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise ValueError(f"rows must be an int >= 1, got {rows!r}")
        matches = FileSystems.match([path_or_glob])[0].metadata_list
        self._paths = sorted(m.path for m in matches)
        if time_column is not None:
            # Like the key column: a missing time column fails now, listing the columns.
            _probe_column(self._paths[0], self.input_format, time_column)
        self._reader = _ReadInOrder(
            self.input_format,
            column or "line",
            self.key_type,
            time_column,
            rows,
            probe._arrow_type,  # noqa: SLF001 (same module)
        )

    def read(self) -> tuple[pa.Array, np.ndarray | None]:
        """All rows in public order on the caller: ``(keys, event times in seconds or None)``."""
        return self._reader.read_all(self._paths)

    def iter_batches(self) -> Iterator[tuple[int, pa.Array, np.ndarray | None]]:
        """The pipeline's ``(position, keys, times)`` elements, in order, on the caller: one
        batch at a time without ``time_column`` (with it, the sort holds the whole input)."""
        return self._reader.process(self._paths)

    def expand(self, pbegin: pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Paths" >> beam.Create([self._paths])
            | "ReadInOrder" >> beam.ParDo(self._reader)
        )
