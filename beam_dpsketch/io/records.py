"""Read one key column of Parquet, CSV, JSON Lines or text files as batches of keys.

No format goes through per-element Python (Beam costs microseconds per element): Parquet row
groups, and blocks of whole CSV records (parsed by ``pyarrow.csv``), JSON Lines records (parsed
by ``pyarrow.json``) and text lines become one pyarrow ``Array`` each, which the sketches hash
as a whole.

One input layer
---------------
Every reader here (:class:`ReadKeyBatches`, :class:`ReadKeyPairs`, :class:`ReadOrderedKeys`), and
so every ``beam-dpsketch`` subcommand, opens files the same way (:func:`_open`):

* **Compression** by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``/``.zstd``,
  ``.deflate``), decompressed strictly: a truncated or corrupt file fails (Beam's own
  decompression stops silently where a cut file ends). Concatenated gzip members are read.
* **Decoding**: CSV, JSON Lines and text must be UTF-8; a UTF-8 byte order mark at the start of
  a file is dropped.
* **Lines** of text files end at ``\\n`` or ``\\r\\n`` only (:func:`_split_lines`): a lone ``\\r``,
  U+2028, U+0085, form feeds and the other characters of ``str.splitlines`` are part of the key.
  A last line without a newline is a key. Each file is read by one worker. JSON Lines records
  are lines too; CSV records follow the CSV grammar (a quoted field may hold newlines, so an
  unclosed quote joins the lines after it into one record).
* **Record length**: text, CSV and JSON Lines files are read in time linear in their size
  whatever the length of their lines, and memory holds one record of at most
  ``max_record_bytes`` (default :data:`DEFAULT_MAX_RECORD_BYTES`, 64 MiB). A longer record is
  malformed: the error names the parameter and its value, not the record's length.
* **Empty input**: a zero-byte file (after decompression) is zero rows in every format, like a
  CSV header alone; its column is not checked.
* **Errors** are one line naming the file, the problem and the column or parameter; never a
  value, a count or a position (line, row, offset) from the data, since in an append-only file
  the position of a record is the number of records before it (:class:`InputError` for
  damaged files).

Malformed records
-----------------
A malformed record is one that cannot give a key (or a number, or an event time) by itself: a
missing key (an empty CSV cell, a JSON ``null`` or missing field, a Parquet null), a cell that
is not a 64-bit integer with ``key_type="int"`` or not a number for quantiles, a CSV record
with another number of fields than the header, a JSON Lines line that is not a JSON object or
holds a value of another type, a record that is not UTF-8, a record longer than
``max_record_bytes``, and for :class:`ReadOrderedKeys` a missing, NaN or non-numeric event
time. ``on_bad_record="fail"`` (default) fails the read at the first one. ``"drop"`` leaves each
out before any DP step: whether a record is dropped depends on that record and the public
parameters only, so removing one record from an input removes at most one record from what
the DP transforms see, and their guarantees hold unchanged on the filtered input. Nothing
counts, logs or outputs the dropped records (a count would be a release). Under ``"drop"``
the types that decide malformedness are public: JSON Lines keys take the type of
``key_type`` (required), and event times of CSV and JSON Lines are numbers (seconds).
Damage that is not one record's (truncated or corrupt compression, a file that is not Parquet,
a missing column, a column whose type is not a key type) fails in both modes.

Key types
---------
By default a column keeps the type the file gives it: Parquet and JSON integer columns give int
keys, string columns str keys, binary columns bytes keys. CSV has no types, so CSV keys are
strings (``"007"`` stays ``"007"``); text lines are strings. ``key_type="int"`` or ``"str"``
converts (a cell that is not a 64-bit integer is malformed). Anything else (floats,
timestamps, nested values) is rejected with ``TypeError`` naming the column and its type: a float
is not a key. ``key_type=NUMBERS`` reads numbers instead of keys (for quantiles): integer and
float columns as they are, CSV and text cells parsed as integers (saturated to the int64 range,
which any public bound lies in) or floats (``1.5``, ``1e3``, ``nan``, ``inf``).

Missing values
--------------
A null in the key column (a JSON ``null`` or missing field, an empty CSV cell, a Parquet null)
raises ``TypeError`` naming the column, is dropped with ``on_bad_record="drop"``, or goes to
the ``"invalid"`` output as ``(None, reason)`` with ``dead_letter=True``. Quoted empty CSV
cells (``""``) are the empty-string key.

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
    "DEFAULT_MAX_RECORD_BYTES",
    "NUMBERS",
    "ON_BAD_RECORD",
    "InputError",
    "ReadKeyBatches",
    "ReadKeyPairs",
    "ReadOrderedKeys",
    "check_bad_record_options",
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
#: ``on_bad_record`` values: fail the read at a malformed record, or drop the record.
ON_BAD_RECORD = ("fail", "drop")
#: Default ``max_record_bytes``: the longest line or CSV record a reader holds in memory.
DEFAULT_MAX_RECORD_BYTES = 1 << 26
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

    The message is one line, ``"<file>: <problem>"``: it names the file and the column or
    parameter, never a value, a count or a position (line, row, byte offset) from the data.
    """


def _input_error(path: str, problem: str) -> InputError:
    return InputError(f"{path}: {problem}")


def check_bad_record_options(on_bad_record: str, max_record_bytes: int) -> None:
    """Check the ``on_bad_record`` and ``max_record_bytes`` parameters of the readers.

    Raises
    ------
    ValueError
        Naming the parameter, if ``on_bad_record`` is not one of :data:`ON_BAD_RECORD` or
        ``max_record_bytes`` is not an int >= 1.
    """
    if on_bad_record not in ON_BAD_RECORD:
        raise ValueError(f"on_bad_record must be one of {ON_BAD_RECORD}, got {on_bad_record!r}")
    if (
        isinstance(max_record_bytes, bool)
        or not isinstance(max_record_bytes, int)
        or max_record_bytes < 1
    ):
        raise ValueError(f"max_record_bytes must be an int >= 1, got {max_record_bytes!r}")


def _too_long(path: str, limit: int) -> InputError:
    # The limit is a public parameter; the record's own length is not named.
    return _input_error(
        path,
        f"a record is longer than max_record_bytes={limit} (--max-record-bytes): raise the "
        "limit, or drop such records with on_bad_record='drop' (--on-bad-record drop)",
    )


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
    first key). With ``check``, bytes that are not UTF-8 raise :class:`InputError` naming the
    file, never the bytes or where they are; without it the bytes pass unchecked (the
    ``on_bad_record="drop"`` readers check each record instead).
    """

    _CHUNK = 1 << 20

    def __init__(self, stream: Any, path: str, check: bool = True) -> None:
        super().__init__(stream)
        self._path = path
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict") if check else None
        self._first = True

    def _check(self, data: bytes, final: bool) -> None:
        if self._decoder is None:
            return
        try:
            self._decoder.decode(data, final)
        except UnicodeDecodeError:
            raise _input_error(self._path, _NOT_UTF8) from None

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


def _open(path: str, fmt: str, check_utf8: bool = True) -> Any:
    """The readable bytes of ``path`` for format ``fmt``: the one way every reader opens input.

    Parquet is read as it is (random access, compression inside the format). CSV, JSON Lines and
    text are decompressed by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``,
    ``.deflate``), strictly (:class:`_Decompressed`), then checked as UTF-8 without a BOM
    (:class:`_CheckedText`; unchecked without ``check_utf8``).
    """
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    if fmt == "parquet":
        return raw
    kind = CompressionTypes.detect_compression_type(path)
    if kind != CompressionTypes.UNCOMPRESSED:
        raw = _Decompressed(raw, path, kind)
    return _CheckedText(raw, path, check_utf8)


def _is_empty(path: str, fmt: str) -> bool:
    """Whether a CSV, JSON Lines or text file holds no bytes at all (after decompression): an
    input of zero rows in every format (a zero-byte file has no header or schema to check)."""
    if fmt == "parquet":
        return False
    with _open(path, fmt, check_utf8=False) as f:
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


_NEWLINE, _QUOTE = ord("\n"), ord('"')
_NOT_UTF8 = "invalid UTF-8 (text input must be UTF-8)"
# Errors of a parse of records that one malformed record causes.
_RECORD_ERRORS = (pa.ArrowInvalid, UnicodeDecodeError)


def _record_ends(data: bytes, quoted: bool, odd: bool = False) -> np.ndarray:
    """Offsets of the ``\\n`` bytes of ``data`` that end a record, in one vectorised pass.

    Every ``\\n`` ends a line. With ``quoted`` (CSV), a ``\\n`` inside double quotes does not:
    the records of the CSV grammar, where the quotes before a record end are even in number
    (a doubled quote ``""`` counts twice and keeps the parity); ``odd`` says that ``data``
    starts inside quotes.
    """
    arr = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(arr == _NEWLINE)
    if quoted and len(ends):
        quotes = np.flatnonzero(arr == _QUOTE)
        if len(quotes) or odd:
            ends = ends[(np.searchsorted(quotes, ends) + odd) % 2 == 0]
    return ends


def _record_blocks(
    path: str,
    fmt: str,
    limit: int,
    drop: bool,
    *,
    header: bool = False,
    block: int | None = None,
) -> Iterator[bytes]:
    """Blocks of whole records of a CSV, JSON Lines or text file, each record ending in ``\\n``.

    Records are lines (text, JSON Lines) or CSV records (see :func:`_record_ends`); a last
    record without a line end gets one. Every byte is scanned once and copied a bounded number
    of times, so the time is linear in the size of the file whatever the length of its records,
    and memory holds about one block and one record of at most ``limit`` bytes (its line end
    not counted). A longer record raises :class:`InputError` naming ``max_record_bytes`` (not
    the record's length), or with ``drop`` is skipped without being held. With ``header`` the
    first record (a CSV header) is left out; a header over the limit always raises. Without
    ``drop`` the bytes are checked as UTF-8 on the way (:class:`_CheckedText`).
    """
    block = block or _BLOCK_SIZE
    quoted = fmt == "csv"
    held: list[bytes] = []  # the start of the record being read
    held_bytes = 0
    skipping = False  # inside an overlong record that is dropped
    odd = False  # inside quotes (CSV)
    out: list[bytes] = []
    out_bytes = 0
    with _open(path, fmt, check_utf8=not drop) as f:
        while True:
            data = f.read(block)
            if not data:
                break
            ends = _record_ends(data, quoted, odd)
            if quoted:
                odd ^= data.count(b'"') % 2 == 1
            if not len(ends):
                if not skipping:
                    held.append(data)
                    held_bytes += len(data)
                    if held_bytes > limit:
                        if header or not drop:
                            raise _too_long(path, limit)
                        held, held_bytes, skipping = [], 0, True
                continue
            first, last = int(ends[0]), int(ends[-1])
            if skipping:
                skipping = False
            elif held_bytes + first > limit:
                if header or not drop:
                    raise _too_long(path, limit)
            elif header:
                header = False
            else:
                out.extend(held)
                out.append(data[: first + 1])
                out_bytes += held_bytes + first + 1
            held, held_bytes = [], 0
            if last > first:
                lengths = np.diff(ends) - 1
                if int(lengths.max()) <= limit:
                    out.append(data[first + 1 : last + 1])
                    out_bytes += last - first
                elif not drop:
                    raise _too_long(path, limit)
                else:
                    for start, end in zip(ends[:-1].tolist(), ends[1:].tolist(), strict=True):
                        if end - start - 1 <= limit:
                            out.append(data[start + 1 : end + 1])
                            out_bytes += end - start
            if last + 1 < len(data):
                held, held_bytes = [data[last + 1 :]], len(data) - last - 1
                if held_bytes > limit:
                    if not drop:
                        raise _too_long(path, limit)
                    held, held_bytes, skipping = [], 0, True
            if out_bytes >= block:
                yield b"".join(out)
                out, out_bytes = [], 0
    if held and not header:
        out.extend(held)
        out.append(b"\n")
    if out:
        yield b"".join(out)


def _parse_records(
    block: bytes,
    parse: Callable[[bytes], Any],
    *,
    quoted: bool,
    drop: bool,
    describe: Callable[[bytes, BaseException], InputError],
) -> list[Any]:
    """``parse`` of a block of whole records, leaving out its malformed records.

    ``parse`` takes the bytes of whole records and raises one of ``_RECORD_ERRORS`` when one of
    them is malformed; it must judge each record by itself and the public parameters only. A
    block that fails is halved at record boundaries until every failing part is one record:
    with ``drop`` that record is left out (nothing counts or logs it), otherwise it raises
    ``describe(record, error)``. The cost is that of one parse when no record is malformed.
    """
    try:
        return [parse(block)]
    except _RECORD_ERRORS:
        pass
    bounds = [0, *(_record_ends(block, quoted) + 1).tolist()]
    if bounds[-1] != len(block):
        bounds.append(len(block))
    results: list[Any] = []

    def visit(lo: int, hi: int) -> None:
        piece = block[bounds[lo] : bounds[hi]]
        try:
            results.append(parse(piece))
            return
        except _RECORD_ERRORS as exc:
            if hi - lo == 1:
                if drop:
                    return
                raise describe(piece, exc) from None
        mid = (lo + hi) // 2
        visit(lo, mid)
        visit(mid, hi)

    visit(0, len(bounds) - 1)
    return results


def _text_line_blocks(
    path: str, limit: int, drop: bool, block: int | None = None
) -> Iterator[list[str]]:
    """Blocks of the lines of a text file, each line one key (see :func:`_split_lines`); a last
    line without a newline counts. Lines longer than ``limit`` bytes, and with ``drop`` lines
    that are not UTF-8, are bad records (:func:`_record_blocks`, :func:`_parse_records`)."""

    def parse(data: bytes) -> list[str]:
        # A newline byte is always a character boundary: a block of lines decodes by itself.
        return _split_lines(data.decode("utf-8"))

    def describe(_record: bytes, _exc: BaseException) -> InputError:
        return _input_error(path, _NOT_UTF8)

    for data in _record_blocks(path, "text", limit, drop, block=block):
        for lines in _parse_records(data, parse, quoted=False, drop=drop, describe=describe):
            if lines:
                yield lines


def _csv_header(path: str, limit: int = DEFAULT_MAX_RECORD_BYTES) -> list[str]:
    """The column names of a CSV file: its first record."""
    held: list[bytes] = []
    size, odd = 0, False
    with _open(path, "csv", check_utf8=False) as f:
        while True:
            data = f.read(_BLOCK_SIZE)
            if not data:
                break
            ends = _record_ends(data, True, odd)
            if len(ends):
                held.append(data[: int(ends[0]) + 1])
                break
            odd ^= data.count(b'"') % 2 == 1
            held.append(data)
            size += len(data)
            if size > limit:
                raise _too_long(path, limit)
    first = b"".join(held)
    try:
        first.decode("utf-8")
        table = pa_csv.read_csv(
            io.BytesIO(first),
            read_options=pa_csv.ReadOptions(block_size=max(len(first) + 1, 1 << 16)),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        )
    except _RECORD_ERRORS as exc:
        raise _input_error(path, f"cannot parse the CSV header: {_describe_error(exc)}") from None
    return table.column_names


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return _NOT_UTF8
    return _arrow_problem(exc)


def _csv_parser(
    names: Sequence[str], columns: Sequence[str], strings: Sequence[str], check_utf8: bool
) -> Callable[[bytes], pa.Table]:
    """Parse blocks of whole CSV data records (no header) into ``columns``; ``strings`` columns
    as strings, the others with pyarrow's inferred types."""
    parse_options = pa_csv.ParseOptions(newlines_in_values=True)
    convert = pa_csv.ConvertOptions(
        include_columns=list(columns),
        column_types=dict.fromkeys(strings, pa.string()),
        # An empty cell is a missing value; "NA", "null", ... are legitimate keys.
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )

    def parse(data: bytes) -> pa.Table:
        if check_utf8:
            # Every column of a record, as without drop (where the whole file is checked).
            data.decode("utf-8")
        # One Arrow block per call: a record never straddles Arrow's block boundaries.
        read = pa_csv.ReadOptions(column_names=list(names), block_size=max(len(data) + 1, 1 << 16))
        return pa_csv.read_csv(
            io.BytesIO(data),
            read_options=read,
            parse_options=parse_options,
            convert_options=convert,
        )

    return parse


def _describe_csv_record(path: str) -> Callable[[bytes, BaseException], InputError]:
    def describe(_record: bytes, exc: BaseException) -> InputError:
        if isinstance(exc, UnicodeDecodeError):
            return _input_error(path, _NOT_UTF8)
        if "columns" in str(exc):
            return _input_error(path, "a record has a different number of fields than the header")
        return _input_error(path, f"cannot parse a record as CSV: {_arrow_problem(exc)}")

    return describe


def _json_parser(schema: pa.Schema | None, check_utf8: bool) -> Callable[[bytes], pa.Table]:
    """Parse blocks of whole JSON Lines records; ``schema`` sets the types of its fields (the
    others are skipped), without it pyarrow infers every field's type."""
    options = pa_json.ParseOptions()
    if schema is not None:
        options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")

    def parse(data: bytes) -> pa.Table:
        if check_utf8:
            data.decode("utf-8")
        read = pa_json.ReadOptions(block_size=max(len(data) + 1, 1 << 16))
        return pa_json.read_json(io.BytesIO(data), read_options=read, parse_options=options)

    return parse


def _describe_json_record(
    path: str, schema: pa.Schema | None
) -> Callable[[bytes, BaseException], InputError]:
    def describe(record: bytes, exc: BaseException) -> InputError:
        if isinstance(exc, UnicodeDecodeError):
            return _input_error(path, _NOT_UTF8)
        try:
            obj = json.loads(record)
        except ValueError:
            return _input_error(path, "a line is not valid JSON (one JSON object per line)")
        if not isinstance(obj, dict):
            return _input_error(path, "a line is not a JSON object (one JSON object per line)")
        if schema is not None:
            fields = ", ".join(f"{f.name!r} ({f.type})" for f in schema)
            return _input_error(path, f"a line holds a value of another type in {fields}")
        return _input_error(path, f"cannot read a line as JSON Lines: {_arrow_problem(exc)}")

    return describe


def _table_blocks(
    path: str,
    fmt: str,
    columns: Sequence[str],
    *,
    strings: Sequence[str] = (),
    schema: pa.Schema | None = None,
    limit: int = DEFAULT_MAX_RECORD_BYTES,
    drop: bool = False,
) -> Iterator[pa.Table]:
    """Tables of the records of a CSV or JSON Lines file, block by block, in file order.

    CSV: ``columns`` (checked against the header), ``strings`` ones as strings. JSON Lines:
    every field, or the fields of ``schema`` with those types. Malformed records fail the read
    or, with ``drop``, are left out (:func:`_parse_records`); zero-row tables are skipped.
    """
    if fmt == "csv":
        names = _csv_header(path, limit)
        for column in columns:
            if column not in names:
                raise _missing_column(column, names, path)
        parse = _csv_parser(names, columns, strings, check_utf8=drop)
        describe = _describe_csv_record(path)
    else:
        parse = _json_parser(schema, check_utf8=drop)
        describe = _describe_json_record(path, schema)
    quoted = fmt == "csv"
    for data in _record_blocks(path, fmt, limit, drop, header=quoted):
        for table in _parse_records(data, parse, quoted=quoted, drop=drop, describe=describe):
            if table.num_rows:
                yield table


def _json_probe_schemas(path: str, limit: int, drop: bool) -> list[pa.Schema]:
    """The inferred schemas of the first block of a JSON Lines file (several when, with
    ``drop``, records of conflicting types had to be parsed apart)."""
    blocks = _record_blocks(path, "jsonl", limit, drop)
    try:
        head = next(blocks, b"")
    finally:
        blocks.close()
    tables = _parse_records(
        head,
        _json_parser(None, check_utf8=drop),
        quoted=False,
        drop=drop,
        describe=_describe_json_record(path, None),
    )
    return [t.schema for t in tables]


def _probe_column(
    path: str,
    fmt: str,
    column: str,
    limit: int = DEFAULT_MAX_RECORD_BYTES,
    drop: bool = False,
) -> pa.DataType:
    """Check that the first file has ``column`` and return its Arrow type (with ``drop``, for
    JSON Lines, the type of its first appearance: the caller sets the type)."""
    if fmt == "parquet":
        schema = _parquet_call(path, lambda pf: pf.schema_arrow)
    elif fmt == "csv":
        names = _csv_header(path, limit)
        if column not in names:
            raise _missing_column(column, names, path)
        return pa.string()
    else:
        schemas = _json_probe_schemas(path, limit, drop)
        for schema in schemas:
            if column in schema.names:
                return schema.field(column).type
        names = list(dict.fromkeys(n for s in schemas for n in s.names))
        raise _missing_column(column, names, path)
    if column not in schema.names:
        raise _missing_column(column, schema.names, path)
    return schema.field(column).type


def _parquet_error(path: str, exc: BaseException) -> InputError:
    """A damaged Parquet file, named without the sizes Arrow reports (the size of a file or of
    its footer follows from the number of rows it holds)."""
    problem = _arrow_problem(exc)
    if "size" in problem.lower():
        problem = "the file is truncated or is not Parquet"
    return _input_error(path, f"cannot read as Parquet ({problem})")


def _parquet_call(
    path: str, use: Callable[[pq.ParquetFile], Any], read_dictionary: Sequence[str] = ()
) -> Any:
    """``use(ParquetFile)`` of the file at ``path``, string or binary ``read_dictionary`` columns
    decoded as dictionary arrays; an unreadable file raises :class:`InputError` naming it."""
    with _open(path, "parquet") as f:
        try:
            return use(pq.ParquetFile(f, read_dictionary=list(read_dictionary) or None))
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None


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
    floats, for quantiles) instead of keys. A bad cell (missing, not an int key, not a number)
    fails naming the file and the column, never the cell or its position; with ``drop`` it is
    left out, and with ``dead_letter`` it goes to the ``"invalid"`` output.
    """

    def __init__(
        self,
        column: str,
        key_type: str | None,
        dead_letter: bool,
        drop: bool = False,
        limit: int = DEFAULT_MAX_RECORD_BYTES,
    ):
        self._column = column
        self._key_type = key_type
        self._dead_letter = dead_letter
        self._drop = drop
        self._limit = limit

    def _what(self) -> str:
        return f"column {self._column!r}"

    def _where(self, path: str) -> str:
        """``"<what> of <path>"``: the cell's column and file, never its value or position."""
        return f"{self._what()} of {path}"

    def _valid_mask(self, arr: pa.Array, kind: str | None) -> pa.Array | None:
        """Which cells are good keys (or numbers) of ``key_type``; ``None`` when all are.

        Judges each cell by itself (a missing value, a string that is not an int64 key or not
        a number), so dropping the others removes exactly the malformed records.
        """
        valid = pc.is_valid(arr)
        if self._key_type == NUMBERS and kind == "str":
            check: Callable[[str], bool] | None = _is_number_text
            targets = (pa.int64(), pa.float64())
        elif self._key_type == "int" and kind == "str":
            check = _is_int64_text
            targets = (pa.int64(),)
        else:
            check, targets = None, ()
        if check is not None:
            present = arr.filter(valid)
            for target in targets:
                try:
                    pc.cast(present, target)
                    check = None
                    break
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    pass
        if check is not None:
            # The slow path, only for a chunk with a bad cell: what Python's int() and float()
            # accept.
            valid = pa.array([t is not None and check(t) for t in arr.to_pylist()], pa.bool_())
        if valid.false_count == 0:
            return None
        return valid

    def _batches(self, arr: Any, path: str, keep_dictionary: bool = False) -> Iterator[Any]:
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
        if self._drop:
            mask = self._valid_mask(arr, kind)
            if mask is not None:
                arr = arr.filter(mask)
        if arr.null_count:
            reason = f"None is not a valid key: {self._where(path)} has a missing value"
            if not self._dead_letter:
                raise TypeError(reason)
            for _ in range(arr.null_count):
                yield pvalue.TaggedOutput(INVALID_TAG, (None, reason))
            arr = arr.filter(pc.is_valid(arr))
        if not len(arr):
            return
        if numbers:
            if kind == "str":
                arr = self._strings_to_numbers(arr, path)
            yield arr
            return
        if self._key_type == "int" and kind == "str":
            yield from self._strings_to_ints(arr, path)
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

    def _strings_to_ints(self, arr: pa.Array, path: str) -> Iterator[Any]:
        try:
            yield pc.cast(arr, pa.int64())
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # The slow path finds the bad cells; it accepts what Python's int() accepts.
        good: list[int] = []
        reason = (
            f"{self._where(path)} has a value that is not a 64-bit integer key (key_type='int')"
        )
        for text in arr.to_pylist():
            if not _is_int64_text(text):
                if not self._dead_letter:
                    raise InputError(reason) from None
                yield pvalue.TaggedOutput(INVALID_TAG, (text, reason))
                continue
            good.append(int(text))
        if good:
            yield pa.array(good, pa.int64())

    def _strings_to_numbers(self, arr: pa.Array, path: str) -> pa.Array:
        for target in (pa.int64(), pa.float64()):
            try:
                return pc.cast(arr, target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
        values = []
        for text in arr.to_pylist():
            value = _parse_number(text)
            if value is None:
                raise InputError(f"{self._where(path)} has a value that is not a number")
            values.append(value)
        if all(isinstance(v, int) for v in values):
            return pa.array(values, pa.int64())
        return pa.array([float(v) for v in values], pa.float64())


def _is_number_text(text: str) -> bool:
    """Whether ``text`` is a number for ``key_type=NUMBERS`` (see :func:`_parse_number`)."""
    return _parse_number(text) is not None


def _is_int64_text(text: str) -> bool:
    """Whether ``text`` is an int key: what Python's ``int()`` accepts, within int64."""
    try:
        return _INT64_MIN <= int(text) <= _INT64_MAX
    except ValueError:
        return False


class _ParquetRowGroups(beam.DoFn):
    """One ``(path, row_group)`` per row group, so a Reshuffle can spread a file's groups."""

    def __init__(self, column: str):
        self._column = column

    def process(self, metadata: Any) -> Iterator[tuple[str, int]]:
        path = metadata.path
        names, groups = _parquet_call(path, lambda pf: (pf.schema_arrow.names, pf.num_row_groups))
        if self._column not in names:
            raise _missing_column(self._column, names, path)
        for i in range(groups):
            yield path, i


class _ReadParquetRowGroup(_ColumnReader):
    def process(self, element: tuple[str, int]) -> Iterator[Any]:
        path, index = element
        # String columns stay dictionary-encoded, as Parquet usually stores them: decoding and
        # re-hashing every value costs more than the whole sketch update, and every sketch
        # takes dictionary arrays (each distinct value is converted or hashed once).
        table = _parquet_call(
            path,
            lambda pf: pf.read_row_group(index, columns=[self._column]),
            read_dictionary=[self._column],
        )
        yield from self._batches(table.column(self._column), path, keep_dictionary=True)


def _csv_chunks(path: str, column: str, limit: int, drop: bool) -> Iterator[pa.Array]:
    """The cells of one CSV column as strings, block by block (:func:`_table_blocks`)."""
    if _is_empty(path, "csv"):
        return
    for table in _table_blocks(path, "csv", [column], strings=[column], limit=limit, drop=drop):
        yield table.column(0)


def _json_chunks(
    path: str, column: str, arrow_type: pa.DataType | None, limit: int, drop: bool
) -> Iterator[pa.Array]:
    """The values of one JSON Lines field, block by block (:func:`_table_blocks`).

    With ``arrow_type`` (the first file's type, or the one ``key_type`` sets) only that field
    is parsed, with that type: a record of another type is malformed instead of changing the
    type of its block.
    """
    if _is_empty(path, "jsonl"):
        return
    schema = None if arrow_type is None else pa.schema([(column, arrow_type)])
    for table in _table_blocks(path, "jsonl", [column], schema=schema, limit=limit, drop=drop):
        if column not in table.column_names:
            raise _missing_column(column, table.column_names, path)
        yield table.column(column)


def _parquet_chunks(path: str, column: str, rows: int) -> Iterator[pa.Array]:
    """The values of one Parquet column in batches of at most ``rows`` rows."""
    with _open(path, "parquet") as f:
        try:
            # No pre-buffering: through a Python file object pyarrow would otherwise copy the
            # whole file into memory before the first batch.
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=_PARQUET_BUFFER)
            names = pf.schema_arrow.names
            if column not in names:
                raise _missing_column(column, names, path)
            for batch in pf.iter_batches(batch_size=rows, columns=[column]):
                yield batch.column(0)
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(path, exc) from None


class _ReadCsvColumn(_ColumnReader):
    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for cells in _csv_chunks(path, self._column, self._limit, self._drop):
            yield from self._batches(cells, path)


class _ReadJsonColumn(_ColumnReader):
    def __init__(
        self,
        column: str,
        key_type: str | None,
        dead_letter: bool,
        drop: bool,
        limit: int,
        arrow_type: pa.DataType | None,
    ):
        super().__init__(column, key_type, dead_letter, drop, limit)
        self._arrow_type = arrow_type

    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for values in _json_chunks(path, self._column, self._arrow_type, self._limit, self._drop):
            yield from self._batches(values, path)


class _ReadTextLines(_ColumnReader):
    """Text input: every line (see :func:`_split_lines`) is one key, in blocks of
    ``batch_size`` lines."""

    def __init__(
        self, key_type: str | None, dead_letter: bool, batch_size: int, drop: bool, limit: int
    ):
        super().__init__("line", key_type, dead_letter, drop, limit)
        self._batch_size = batch_size

    def _what(self) -> str:
        return "a text line"

    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for lines in _text_line_blocks(path, self._limit, self._drop):
            for start in range(0, len(lines), self._batch_size):
                part = pa.array(lines[start : start + self._batch_size], pa.string())
                yield from self._batches(part, path)


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# Numbers in Arrow's messages are counts, sizes, positions or cells taken from the data
# ("Expected 3 columns, got 2", block-relative "row 5", "couldn't parse:1.5"): every token that
# starts with a digit goes; type names such as int64 are kept.
_NUMBER = re.compile(r"(?<![\w.])(?<!UTF-)\d[\w.]*")


def _arrow_problem(exc: BaseException) -> str:
    """A data-free summary of an Arrow parse error.

    Arrow quotes the offending cell or row after the last colon ("invalid value 'x'", "Expected
    3 columns, got 2: a,b"); rows and cells are private data, so only the first two clauses are
    kept, with every quoted string and every number removed.
    """
    clauses = str(exc).split(": ")[:2]
    text = ": ".join(_NUMBER.sub("N", _QUOTED.sub("<value>", c)) for c in clauses).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _drop_json_type(key_type: str | None) -> pa.DataType:
    """The Arrow type a JSON Lines key field is parsed with under ``on_bad_record="drop"``.

    Which records are malformed must not depend on other records, so the field's type comes
    from the public ``key_type``, not from the values in the file (where one record could
    change the type inferred for all).
    """
    types = {"int": pa.int64(), "str": pa.string(), NUMBERS: pa.float64()}
    if key_type not in types:
        raise ValueError(
            "on_bad_record='drop' with JSON Lines input needs key_type ('int' or 'str'): the "
            "type that decides which records are malformed must be public"
        )
    return types[key_type]


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
    on_bad_record
        ``"fail"`` (default): a malformed record fails the read, with an error naming the file
        and the column, never the record's value or position. ``"drop"``: malformed records
        are left out before any DP step, and nothing counts, logs or outputs them (see
        "Malformed records" in the module docstring). Not with ``dead_letter``; JSON Lines
        input needs ``key_type``.
    max_record_bytes
        The longest line (text, JSON Lines) or CSV record read, in bytes (line end not
        counted): memory holds one such record at most. A longer record is malformed.
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
        line that is not a JSON object, a cell that is not an int key or a number, a record
        longer than ``max_record_bytes`` (all but the first two are malformed records, which
        ``on_bad_record="drop"`` leaves out).
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
        on_bad_record: str = "fail",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        validate: bool = True,
    ):
        super().__init__()
        check_bad_record_options(on_bad_record, max_record_bytes)
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
        self._drop = on_bad_record == "drop"
        self._limit = max_record_bytes
        if self._drop and self._dead_letter:
            raise ValueError(
                "on_bad_record='drop' leaves malformed records out: it takes no dead_letter"
            )
        self._arrow_type: pa.DataType | None = None
        if self._drop and self.input_format == "jsonl":
            self._arrow_type = _drop_json_type(key_type)
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
        arrow_type = _probe_column(first, self.input_format, self._column, self._limit, self._drop)
        if self._arrow_type is not None:
            # The type key_type sets (on_bad_record="drop"), not the first values' type.
            arrow_type = self._arrow_type
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
        args = (
            self._column,
            self._requested_key_type,
            self._dead_letter,
            self._drop,
            self._limit,
        )
        if self.input_format == "text":
            work = files
            reader: beam.DoFn = _ReadTextLines(
                self._requested_key_type,
                self._dead_letter,
                self._batch_size,
                self._drop,
                self._limit,
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
    path: str,
    fmt: str,
    columns: Sequence[str],
    strings: Sequence[str],
    *,
    schema: pa.Schema | None = None,
    limit: int = DEFAULT_MAX_RECORD_BYTES,
    drop: bool = False,
) -> pa.Table | None:
    """``columns`` of a whole Parquet, CSV or JSON Lines file (``None`` for a file of no rows).

    CSV ``strings`` columns are read as strings (the others keep pyarrow's inferred type); JSON
    Lines fields have the types of ``schema`` when given. Every failure raises an error naming
    the file; with ``drop``, malformed records of CSV and JSON Lines are left out.
    """
    if _is_empty(path, fmt):
        return None
    if fmt == "parquet":
        names = _parquet_call(path, lambda pf: pf.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise _missing_column(missing[0], names, path)
        return _parquet_call(path, lambda pf: pf.read(columns=list(columns)))
    tables = []
    seen: dict[str, None] = {}
    for table in _table_blocks(
        path, fmt, columns, strings=strings, schema=schema, limit=limit, drop=drop
    ):
        seen.update(dict.fromkeys(table.column_names))
        # A JSON field absent from every record of a block is null there.
        for name in columns:
            if name not in table.column_names:
                table = table.append_column(name, pa.nulls(table.num_rows))
        tables.append(table.select(list(columns)))
    if not tables:
        return None
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        changed = next(n for n in columns if len({str(t.schema.field(n).type) for t in tables}) > 1)
        raise _input_error(path, f"column {changed!r} changes type between records") from None
    for name in columns:
        if name not in seen:
            raise _missing_column(name, list(seen), path)
    return table


class _ReadPairs(beam.DoFn):
    """Read ``(privacy id, key)`` pairs from the two columns of one file."""

    def __init__(self, fmt: str, id_column: str, key_column: str, drop: bool, limit: int):
        self._fmt, self._id, self._key = fmt, id_column, key_column
        self._drop, self._limit = drop, limit

    def process(self, metadata: Any) -> Iterator[tuple[Any, Any]]:
        path, columns = metadata.path, [self._id, self._key]
        table = _read_table(path, self._fmt, columns, columns, limit=self._limit, drop=self._drop)
        if table is None:
            return
        if self._drop:
            # A record missing either value is malformed: both columns lose the row.
            table = table.filter(
                pc.and_(pc.is_valid(table.column(self._id)), pc.is_valid(table.column(self._key)))
            )
        for name in columns:
            if table.column(name).null_count:
                raise TypeError(
                    f"None is not a valid key: column {name!r} of {path} has a missing value"
                )
        yield from zip(
            table.column(self._id).to_pylist(), table.column(self._key).to_pylist(), strict=True
        )


class ReadKeyPairs(beam.PTransform):
    """Read ``(privacy_id, key)`` pairs from two columns of Parquet, CSV or JSON Lines files.

    The input of user-level releases (``privacy_id_fn=lambda p: p[0], key_fn=lambda p: p[1]``).
    Missing columns raise ``ValueError`` at construction, listing the available ones; missing
    values raise ``TypeError`` naming the column. ``on_bad_record`` and ``max_record_bytes``
    are those of :class:`ReadKeyBatches`; ``on_bad_record="drop"`` (a record with a missing id
    or key is malformed) reads Parquet and CSV, whose types do not depend on other records.
    """

    def __init__(
        self,
        path_or_glob: str,
        key_column: str,
        id_column: str,
        input_format: str | None = None,
        *,
        on_bad_record: str = "fail",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        super().__init__()
        check_bad_record_options(on_bad_record, max_record_bytes)
        self._pattern = path_or_glob
        self._fmt = _normalise_format(input_format, path_or_glob)
        if self._fmt == "text":
            raise ValueError("input_format: a privacy id column needs Parquet, CSV or JSON Lines")
        self._drop, self._limit = on_bad_record == "drop", max_record_bytes
        if self._drop and self._fmt == "jsonl":
            raise ValueError(
                "on_bad_record='drop' reads privacy id and key pairs from Parquet or CSV: JSON "
                "Lines infers the types of the two fields from the records"
            )
        matches = FileSystems.match([path_or_glob])[0].metadata_list
        if not matches:
            raise FileNotFoundError(f"no file matches {path_or_glob}")
        for column in (key_column, id_column):
            _probe_column(matches[0].path, self._fmt, column, self._limit)
        self._key, self._id = key_column, id_column

    def expand(self, pbegin):
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        reader = _ReadPairs(self._fmt, self._id, self._key, self._drop, self._limit)
        return files | "Spread" >> beam.Reshuffle() | "ReadPairs" >> beam.ParDo(reader)


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


def _refuse_timestamps(path: str, fmt: str, column: str, limit: int) -> None:
    """Refuse a CSV or JSON Lines time column of timestamps under ``on_bad_record="drop"``,
    which reads event times as numbers: every row would be dropped. Looks at the first block
    of the first file only (a guard against a wrong setting, not a check of every value)."""
    if _is_empty(path, fmt):
        return
    blocks = _table_blocks(path, fmt, [column], limit=limit, drop=True)
    try:
        first = next(blocks, None)
    finally:
        blocks.close()
    if first is not None and column in first.column_names:
        if pa.types.is_timestamp(first.schema.field(column).type):
            raise ValueError(
                f"time column {column!r} of {path} holds timestamps, but on_bad_record='drop' "
                "reads event times of CSV and JSON Lines as numbers (seconds): convert them, "
                "or read with on_bad_record='fail'"
            )


def _numbers_or_null(texts: pa.Array) -> pa.Array:
    """Strings as numbers (int64, else float64), a string that is not a number as null."""
    for target in (pa.int64(), pa.float64()):
        try:
            return pc.cast(texts, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    values = [None if t is None else _parse_number(t) for t in texts.to_pylist()]
    return pa.array([None if v is None else float(v) for v in values], pa.float64())


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
        drop: bool = False,
        limit: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        super().__init__(column, key_type, False, drop, limit)
        self._fmt, self._time_column, self._rows = fmt, time_column, rows
        self._arrow_type = arrow_type

    def _what(self) -> str:
        return "a text line" if self._fmt == "text" else super()._what()

    def _chunks(self, path: str) -> Iterator[pa.Array]:
        """The raw values of the key column of one file, streamed."""
        if self._fmt == "text":
            for lines in _text_line_blocks(path, self._limit, self._drop):
                yield pa.array(lines, pa.string())
        elif self._fmt == "parquet":
            yield from _parquet_chunks(path, self._column, self._rows)
        elif self._fmt == "csv":
            yield from _csv_chunks(path, self._column, self._limit, self._drop)
        else:
            yield from _json_chunks(path, self._column, self._arrow_type, self._limit, self._drop)

    def _stream(self, paths: Sequence[str]) -> Iterator[tuple[int, pa.Array, None]]:
        """``(position, keys, None)`` batches of exactly ``rows`` rows (the last may be
        shorter), in file order, holding at most about two batches."""
        position = 0
        held: list[pa.Array] = []
        count = 0
        for path in paths:
            for values in self._chunks(path):
                for keys in self._batches(values, path):
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
        strings = columns if self._drop else [self._column]
        schema = None
        if self._drop and self._fmt == "jsonl":
            # Public types (see _drop_json_type): the time field holds numbers (seconds).
            schema = pa.schema(
                [(self._column, self._arrow_type), (self._time_column, pa.float64())]
            )
        table = _read_table(
            path, self._fmt, columns, strings, schema=schema, limit=self._limit, drop=self._drop
        )
        if table is None:
            return None, None
        keys = table.column(self._column).combine_chunks()
        times = table.column(self._time_column).combine_chunks()
        if self._drop:
            # A record is malformed when its key or its time is: both columns lose the row.
            if pa.types.is_string(times.type):
                times = _numbers_or_null(times)
            valid = pc.is_valid(times)
            if pa.types.is_floating(times.type):
                valid = pc.and_(valid, pc.invert(pc.is_nan(times)))
            kind = "number" if pa.types.is_floating(keys.type) else _key_kind(keys.type)
            key_valid = self._valid_mask(keys, kind)
            if key_valid is not None:
                valid = pc.and_(valid, key_valid)
            # is_nan of a null is null: a missing time is malformed too.
            valid = pc.fill_null(valid, False)
            if valid.false_count:
                keys, times = keys.filter(valid), times.filter(valid)
        return keys, times

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
            keys.extend(self._batches(arr, path))
            if time_arr.null_count:
                raise TypeError(
                    f"time column {self._time_column!r} of {path} has missing values (None)"
                )
            if pa.types.is_floating(time_arr.type) and pc.any(pc.is_nan(time_arr)).as_py():
                raise ValueError(
                    f"time column {self._time_column!r} of {path} holds NaN: event times must "
                    "be numbers"
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
        resolved ``key_type`` is exposed as the attribute ``key_type``.
    time_column
        A numeric (seconds) or timestamp column of Parquet, CSV or JSON Lines input, different
        from ``column``.
    rows
        Rows per emitted element.
    on_bad_record, max_record_bytes
        As for :class:`ReadKeyBatches`. With ``"drop"``, a record whose key or time is
        malformed (missing, NaN, not a number) is left out before positions are numbered, so
        the positions of the other rows do not depend on it; the time column of CSV and JSON
        Lines input must then hold numbers (seconds).

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
        on_bad_record: str = "fail",
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        super().__init__()
        probe = ReadKeyBatches(
            path_or_glob,
            column,
            input_format,
            key_type=key_type,
            on_bad_record=on_bad_record,
            max_record_bytes=max_record_bytes,
        )
        drop = on_bad_record == "drop"
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
            _probe_column(self._paths[0], self.input_format, time_column, max_record_bytes, drop)
            if drop and self.input_format in ("csv", "jsonl"):
                _refuse_timestamps(self._paths[0], self.input_format, time_column, max_record_bytes)
        self._reader = _ReadInOrder(
            self.input_format,
            column or "line",
            self.key_type,
            time_column,
            rows,
            probe._arrow_type,  # noqa: SLF001 (same module)
            drop,
            max_record_bytes,
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
