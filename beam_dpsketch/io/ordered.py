"""Read a key column in a public order, with public positions and optional event times.

:class:`ReadOrderedKeys` is the input of the order-dependent releases (continual observation,
sliding windows, intermittent queries): one worker reads the files in sorted path order, rows
in file order or stably sorted by a public time column, and numbers the rows, with the key
rules, errors and bad-record handling of :class:`~beam_dpsketch.io.read.ReadKeyBatches`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam import pvalue
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.io.columns import (
    ColumnReader,
    csv_chunks,
    json_chunks,
    parquet_chunks,
    parse_number,
)
from beam_dpsketch.io.formats import DEFAULT_MAX_RECORD_BYTES, key_kind
from beam_dpsketch.io.read import ReadKeyBatches
from beam_dpsketch.io.records import probe_column, read_table, table_blocks, text_line_blocks
from beam_dpsketch.io.streams import is_empty_input

__all__ = ["ORDERED_BATCH_ROWS", "ReadOrderedKeys", "ordered_batches"]

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
    if is_empty_input(path, fmt):
        return
    blocks = table_blocks(path, fmt, [column], limit=limit, drop=True)
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
    values = [None if t is None else parse_number(t) for t in texts.to_pylist()]
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


class _ReadInOrder(ColumnReader):
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
            for lines in text_line_blocks(path, self._limit, self._drop):
                yield pa.array(lines, pa.string())
        elif self._fmt == "parquet":
            yield from parquet_chunks(path, self._column, self._rows)
        elif self._fmt == "csv":
            yield from csv_chunks(path, self._column, self._limit, self._drop)
        else:
            yield from json_chunks(path, self._column, self._arrow_type, self._limit, self._drop)

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
        table = read_table(
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
            kind = "number" if pa.types.is_floating(keys.type) else key_kind(keys.type)
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
            probe_column(self._paths[0], self.input_format, time_column, max_record_bytes, drop)
            if drop and self.input_format in ("csv", "jsonl"):
                _refuse_timestamps(self._paths[0], self.input_format, time_column, max_record_bytes)
        self._reader = _ReadInOrder(
            self.input_format,
            column or "line",
            self.key_type,
            time_column,
            rows,
            probe.arrow_type,
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
