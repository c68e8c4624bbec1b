"""The column readers: DoFns that turn one file's key column into validated batches.

One Arrow column chunk at a time (a Parquet row group or batch, a block of CSV or JSON Lines
records, a block of text lines) becomes one pyarrow ``Array`` of keys, converted to the
requested ``key_type``, or of numbers for ``key_type=NUMBERS``. A bad cell (missing, not an int
key, not a number) fails naming the file and the column, never the cell or its position; under
``on_bad_record="drop"`` it is left out, and with a dead-letter output it goes to the
``"invalid"`` output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam import pvalue

from beam_dpsketch.io.formats import (
    DEFAULT_MAX_RECORD_BYTES,
    INVALID_TAG,
    NUMBERS,
    InputError,
    arrow_problem,
    bad_key_type_error,
    key_kind,
    missing_column_error,
)
from beam_dpsketch.io.records import (
    parquet_call,
    parquet_error,
    table_blocks,
    text_line_blocks,
)
from beam_dpsketch.io.streams import is_empty_input, open_input

__all__ = [
    "ColumnReader",
    "ParquetRowGroups",
    "column_reader",
    "csv_chunks",
    "json_chunks",
    "parquet_chunks",
    "parse_number",
]

# Read-ahead of the streamed Parquet reader (bytes).
_PARQUET_BUFFER = 1 << 20
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def parse_number(text: str) -> int | float | None:
    """A cell as a number (an int saturated to int64, else a float), or ``None``."""
    try:
        return min(max(int(text), _INT64_MIN), _INT64_MAX)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


class ColumnReader(beam.DoFn):
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
            and self._key_type in (None, key_kind(arr.type))
            and key_kind(arr.type) in ("str", "bytes")
        ):
            arr = arr.dictionary_decode()
        numbers = self._key_type == NUMBERS
        kind = key_kind(arr.type)
        if numbers and pa.types.is_floating(arr.type):
            kind = "number"
        if (kind is None or (numbers and kind == "bytes")) and not pa.types.is_null(arr.type):
            if numbers:
                exc: Exception = TypeError(
                    f"column {self._column!r} in {path} has type {arr.type}: quantile values "
                    "must be numbers"
                )
            else:
                exc = bad_key_type_error(self._column, arr.type, path)
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
                    f"{arrow_problem(exc)}"
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
            value = parse_number(text)
            if value is None:
                raise InputError(f"{self._where(path)} has a value that is not a number")
            values.append(value)
        if all(isinstance(v, int) for v in values):
            return pa.array(values, pa.int64())
        return pa.array([float(v) for v in values], pa.float64())


def _is_number_text(text: str) -> bool:
    """Whether ``text`` is a number for ``key_type=NUMBERS`` (see :func:`parse_number`)."""
    return parse_number(text) is not None


def _is_int64_text(text: str) -> bool:
    """Whether ``text`` is an int key: what Python's ``int()`` accepts, within int64."""
    try:
        return _INT64_MIN <= int(text) <= _INT64_MAX
    except ValueError:
        return False


class ParquetRowGroups(beam.DoFn):
    """One ``(path, row_group)`` per row group, so a Reshuffle can spread a file's groups."""

    def __init__(self, column: str):
        self._column = column

    def process(self, metadata: Any) -> Iterator[tuple[str, int]]:
        path = metadata.path
        names, groups = parquet_call(path, lambda pf: (pf.schema_arrow.names, pf.num_row_groups))
        if self._column not in names:
            raise missing_column_error(self._column, names, path)
        for i in range(groups):
            yield path, i


class _ReadParquetRowGroup(ColumnReader):
    def process(self, element: tuple[str, int]) -> Iterator[Any]:
        path, index = element
        # String columns stay dictionary-encoded, as Parquet usually stores them: decoding and
        # re-hashing every value costs more than the whole sketch update, and every sketch
        # takes dictionary arrays (each distinct value is converted or hashed once).
        table = parquet_call(
            path,
            lambda pf: pf.read_row_group(index, columns=[self._column]),
            read_dictionary=[self._column],
        )
        yield from self._batches(table.column(self._column), path, keep_dictionary=True)


def csv_chunks(path: str, column: str, limit: int, drop: bool) -> Iterator[pa.Array]:
    """The cells of one CSV column as strings, block by block (:func:`table_blocks`)."""
    if is_empty_input(path, "csv"):
        return
    for table in table_blocks(path, "csv", [column], strings=[column], limit=limit, drop=drop):
        yield table.column(0)


def json_chunks(
    path: str, column: str, arrow_type: pa.DataType | None, limit: int, drop: bool
) -> Iterator[pa.Array]:
    """The values of one JSON Lines field, block by block (:func:`table_blocks`).

    With ``arrow_type`` (the first file's type, or the one ``key_type`` sets) only that field
    is parsed, with that type: a record of another type is malformed instead of changing the
    type of its block.
    """
    if is_empty_input(path, "jsonl"):
        return
    schema = None if arrow_type is None else pa.schema([(column, arrow_type)])
    for table in table_blocks(path, "jsonl", [column], schema=schema, limit=limit, drop=drop):
        if column not in table.column_names:
            raise missing_column_error(column, table.column_names, path)
        yield table.column(column)


def parquet_chunks(path: str, column: str, rows: int) -> Iterator[pa.Array]:
    """The values of one Parquet column in batches of at most ``rows`` rows."""
    with open_input(path, "parquet") as f:
        try:
            # No pre-buffering: through a Python file object pyarrow would otherwise copy the
            # whole file into memory before the first batch.
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=_PARQUET_BUFFER)
            names = pf.schema_arrow.names
            if column not in names:
                raise missing_column_error(column, names, path)
            for batch in pf.iter_batches(batch_size=rows, columns=[column]):
                yield batch.column(0)
        except (pa.ArrowException, OSError) as exc:
            raise parquet_error(path, exc) from None


class _ReadCsvColumn(ColumnReader):
    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        for cells in csv_chunks(path, self._column, self._limit, self._drop):
            yield from self._batches(cells, path)


class _ReadJsonColumn(ColumnReader):
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
        for values in json_chunks(path, self._column, self._arrow_type, self._limit, self._drop):
            yield from self._batches(values, path)


class _ReadTextLines(ColumnReader):
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
        for lines in text_line_blocks(path, self._limit, self._drop):
            for start in range(0, len(lines), self._batch_size):
                part = pa.array(lines[start : start + self._batch_size], pa.string())
                yield from self._batches(part, path)


def column_reader(
    fmt: str,
    column: str | None,
    key_type: str | None,
    *,
    dead_letter: bool,
    batch_size: int,
    drop: bool,
    limit: int,
    arrow_type: pa.DataType | None,
) -> ColumnReader:
    """The DoFn that reads the key column of one file of format ``fmt`` into batches.

    Its elements are file metadata (``fileio.MatchFiles`` output), or for Parquet the
    ``(path, row_group)`` pairs of :class:`ParquetRowGroups`. ``batch_size`` sets the keys per
    batch of text input; ``arrow_type`` is the type JSON Lines keys are parsed with (``None``:
    the type of the values).
    """
    if fmt == "text":
        return _ReadTextLines(key_type, dead_letter, batch_size, drop, limit)
    assert column is not None
    if fmt == "parquet":
        return _ReadParquetRowGroup(column, key_type, dead_letter, drop, limit)
    if fmt == "csv":
        return _ReadCsvColumn(column, key_type, dead_letter, drop, limit)
    return _ReadJsonColumn(column, key_type, dead_letter, drop, limit, arrow_type)
