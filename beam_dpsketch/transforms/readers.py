"""Read one key column of Parquet, CSV, JSON Lines or text files as batches of keys.

Columnar formats never go through per-element Python (Beam costs microseconds per element):
Parquet row groups, CSV blocks (``pyarrow.csv.open_csv``) and JSON Lines blocks (``pyarrow.json.open_json``)
become one pyarrow ``Array`` each, which the sketches hash as a whole. Text files are read with
``beam.io.ReadFromText`` (one key per line) and batched by :class:`BatchKeys`.

Key types
---------
By default a column keeps the type the file gives it: Parquet and JSON integer columns give int
keys, string columns str keys, binary columns bytes keys. CSV has no types, so CSV keys are
strings (``"007"`` stays ``"007"``); text lines are strings. ``key_type="int"`` or ``"str"``
converts. Anything else (floats, timestamps, nested values) is rejected with ``TypeError``
naming the column and its type: a float is not a key.

Missing values
--------------
A null in the key column (a JSON ``null`` or missing field, an empty CSV cell, a Parquet null)
raises ``TypeError`` naming the column, or goes to the ``"invalid"`` output as ``(None, reason)``
with ``dead_letter=True``. Quoted empty CSV cells (``""``) are the empty-string key.

Public order
------------
:class:`ReadOrderedKeys` reads the same files with the same rules in one public order (files in
sorted path order, rows in file order, or stably sorted by a public time column) and numbers the
rows: the input of the order-dependent releases (continual observation, sliding windows,
intermittent queries), whose guarantees need positions and times that do not depend on the data.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator, Sequence
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
from apache_beam.io.filesystem import CompressedFile, CompressionTypes
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
    "ReadKeyBatches",
    "ReadKeyPairs",
    "ReadOrderedKeys",
    "infer_input_format",
    "ordered_batches",
]

INPUT_FORMATS = ("parquet", "csv", "jsonl", "text")
KEY_TYPES = ("int", "str")

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


class _CompressedStream(io.RawIOBase):
    """File-object view of Beam's ``CompressedFile`` for pyarrow.

    Beam 2.77's ``CompressedFile.closed`` is a method, not a property, so pyarrow sees a bound
    method (truthy) and refuses the stream as closed.
    """

    def __init__(self, raw: CompressedFile):
        super().__init__()
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def _open(path: str, compressed: bool = True):
    compression = CompressionTypes.AUTO if compressed else CompressionTypes.UNCOMPRESSED
    f = FileSystems.open(path, compression_type=compression)
    return _CompressedStream(f) if isinstance(f, CompressedFile) else f


def _csv_convert_options(
    column: str, key_type: str | None, extra: Sequence[str] = ()
) -> pa_csv.ConvertOptions:
    """Read ``column`` as keys (str, or int64 for ``key_type="int"``); ``extra`` columns (a time
    column) keep pyarrow's inferred type."""
    return pa_csv.ConvertOptions(
        include_columns=[column, *extra],
        column_types={column: pa.int64() if key_type == "int" else pa.string()},
        # An empty cell is a missing key; "NA", "null", ... are legitimate keys.
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
    )


def _csv_header(path: str) -> list[str]:
    with _open(path) as f:
        return pa_csv.open_csv(f, read_options=pa_csv.ReadOptions(block_size=1 << 16)).schema.names


def _read_json_probe(path: str) -> pa.Table:
    with _open(path) as f:
        head = f.read(_JSON_PROBE_BYTES)
        if f.read(1):
            # More follows: parse whole lines only.
            head = head[: head.rfind(b"\n") + 1] or head
    try:
        return pa_json.read_json(io.BytesIO(head))
    except pa.ArrowInvalid as exc:
        raise ValueError(
            f"cannot parse {path} as JSON Lines (one JSON object per line): {_arrow_problem(exc)}"
        ) from None


def _probe_column(path: str, fmt: str, column: str) -> pa.DataType:
    """Check that the first file has ``column`` and return its Arrow type."""
    if fmt == "parquet":
        with _open(path, compressed=False) as f:
            schema = pq.ParquetFile(f).schema_arrow
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


class _ColumnReader(beam.DoFn):
    """Base of the per-file readers: turn one Arrow column chunk into a validated key batch."""

    def __init__(self, column: str, key_type: str | None, dead_letter: bool):
        self._column = column
        self._key_type = key_type
        self._dead_letter = dead_letter

    def _batches(self, arr: Any, path: str) -> Iterator[Any]:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        kind = _key_kind(arr.type)
        if kind is None and not pa.types.is_null(arr.type):
            exc = _bad_type(self._column, arr.type, path)
            if not self._dead_letter:
                raise exc
            yield pvalue.TaggedOutput(INVALID_TAG, (arr, str(exc)))
            return
        if arr.null_count:
            reason = (
                f"None is not a valid key: column {self._column!r} in {path} has "
                f"{arr.null_count} null value(s)"
            )
            if not self._dead_letter:
                raise TypeError(reason)
            for _ in range(arr.null_count):
                yield pvalue.TaggedOutput(INVALID_TAG, (None, reason))
            arr = arr.filter(pc.is_valid(arr))
        if not len(arr):
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


class _ParquetRowGroups(beam.DoFn):
    """One ``(path, row_group)`` per row group, so a Reshuffle can spread a file's groups."""

    def __init__(self, column: str):
        self._column = column

    def process(self, metadata: Any) -> Iterator[tuple[str, int]]:
        path = metadata.path
        with _open(path, compressed=False) as f:
            pf = pq.ParquetFile(f)
            names = pf.schema_arrow.names
            if self._column not in names:
                raise _missing_column(self._column, names, path)
            n = pf.num_row_groups
        for i in range(n):
            yield path, i


class _ReadParquetRowGroup(_ColumnReader):
    def process(self, element: tuple[str, int]) -> Iterator[Any]:
        path, index = element
        with _open(path, compressed=False) as f:
            table = pq.ParquetFile(f).read_row_group(index, columns=[self._column])
        yield from self._batches(table.column(self._column), path)


class _ReadCsvColumn(_ColumnReader):
    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        with _open(path) as f:
            try:
                reader = pa_csv.open_csv(
                    f,
                    read_options=pa_csv.ReadOptions(block_size=_BLOCK_SIZE),
                    convert_options=_csv_convert_options(self._column, self._key_type),
                )
            except (pa.ArrowInvalid, KeyError) as exc:
                names = _csv_header(path)
                if self._column not in names:
                    raise _missing_column(self._column, names, path) from None
                raise ValueError(f"cannot read {path} as CSV: {_arrow_problem(exc)}") from None
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
                except pa.ArrowInvalid as exc:
                    raise ValueError(
                        f"cannot read column {self._column!r} of {path} as "
                        f"{self._key_type or 'str'} keys: {_arrow_problem(exc)}"
                    ) from None
                yield from self._batches(batch.column(0), path)


class _ReadJsonColumn(_ColumnReader):
    def __init__(
        self, column: str, key_type: str | None, dead_letter: bool, arrow_type: pa.DataType | None
    ):
        super().__init__(column, key_type, dead_letter)
        self._arrow_type = arrow_type

    def process(self, metadata: Any) -> Iterator[Any]:
        path = metadata.path
        parse = pa_json.ParseOptions()
        if self._arrow_type is not None:
            # Parse only the key column, with the type found at construction; later blocks of
            # another type fail loudly instead of being re-inferred.
            parse = pa_json.ParseOptions(
                explicit_schema=pa.schema([(self._column, self._arrow_type)]),
                unexpected_field_behavior="ignore",
            )
        with _open(path) as f:
            try:
                reader = pa_json.open_json(
                    f, read_options=pa_json.ReadOptions(block_size=_BLOCK_SIZE), parse_options=parse
                )
                for batch in reader:
                    if self._column not in batch.schema.names:
                        raise _missing_column(self._column, batch.schema.names, path)
                    yield from self._batches(batch.column(self._column), path)
            except pa.ArrowInvalid as exc:
                raise ValueError(
                    f"cannot read column {self._column!r} of {path} as JSON Lines: {_arrow_problem(exc)}"
                ) from None


def _parse_int_line(line: str) -> int:
    try:
        return int(line)
    except ValueError:
        # The line itself is data: the message names the parameter, never the value.
        raise ValueError("a text line is not an integer key (key_type='int')") from None


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _arrow_problem(exc: BaseException) -> str:
    """A data-free summary of an Arrow parse error.

    Arrow quotes the offending cell or row after the last colon ("invalid value 'x'", "Expected
    3 columns, got 2: a,b"); rows and cells are private data, so only the first two clauses are
    kept, with every quoted string removed.
    """
    clauses = str(exc).split(": ")[:2]
    return ": ".join(_QUOTED.sub("<value>", c) for c in clauses).strip() or type(exc).__name__


class ReadKeyBatches(beam.PTransform):
    """Read the keys of one column of Parquet, CSV, JSON Lines or text files, in batches.

    Parameters
    ----------
    path_or_glob
        A file path or glob, on any filesystem Beam knows (local, ``gs://``, ...). Compressed
        CSV, JSON Lines and text files (``.gz``, ``.bz2``, ...) are decompressed.
    column
        The key column (required for Parquet, CSV and JSON Lines; must be ``None`` for text,
        where each line is a key).
    input_format
        ``"parquet"``, ``"csv"``, ``"jsonl"`` or ``"text"``; by default from the extension
        (see :func:`infer_input_format`).
    key_type
        ``None`` (keep the file's type; CSV and text give str), ``"int"`` or ``"str"``.
    batch_size
        Keys per batch for text input (columnar formats batch per row group or block).
    dead_letter
        If true, null keys and unconvertible text lines go to the ``"invalid"`` output instead
        of failing the pipeline.
    validate
        Check at construction that files match and (from the first file) that the column
        exists with a key type. Turn off only when the files exist only on the workers.

    Returns
    -------
    PCollection
        pyarrow ``Array`` batches (file formats) or :class:`~beam_dpsketch.transforms.BatchKeys`
        batches (text). With ``dead_letter=True``, a tagged result: ``result["batches"]`` and
        ``result["invalid"]``.

    Raises
    ------
    FileNotFoundError
        At construction (``validate``), if no file matches.
    ValueError
        If the column is missing (the message lists the available columns) or the format or
        key type is unknown.
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
        if key_type is not None and key_type not in KEY_TYPES:
            raise ValueError(f"key_type must be None or one of {KEY_TYPES}, got {key_type!r}")
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
        self._text_batcher = BatchKeys(
            _parse_int_line if key_type == "int" else None, batch_size, dead_letter=dead_letter
        )
        if validate:
            self._validate()

    def _validate(self) -> None:
        matches = FileSystems.match([self._pattern])[0].metadata_list
        if not matches:
            raise FileNotFoundError(f"no file matches {self._pattern!r}")
        if self.input_format == "text":
            return
        first = sorted(m.path for m in matches)[0]
        arrow_type = _probe_column(first, self.input_format, self._column)
        kind = _key_kind(arrow_type)
        if kind is None:
            raise _bad_type(self._column, arrow_type, first)
        if self.input_format == "jsonl":
            self._arrow_type = arrow_type
        self.key_type = self._requested_key_type or kind

    def expand(self, pbegin):
        if self.input_format == "text":
            lines = pbegin | "ReadText" >> beam.io.ReadFromText(self._pattern, validate=False)
            return lines | "BatchLines" >> self._text_batcher
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        args = (self._column, self._requested_key_type, self._dead_letter)
        if self.input_format == "parquet":
            work = files | "RowGroups" >> beam.ParDo(_ParquetRowGroups(self._column))
            reader: beam.DoFn = _ReadParquetRowGroup(*args)
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


class _ReadPairs(beam.DoFn):
    """Read ``(privacy id, key)`` pairs from the two columns of one file."""

    def __init__(self, fmt: str, id_column: str, key_column: str):
        self._fmt, self._id, self._key = fmt, id_column, key_column

    def process(self, metadata: Any) -> Iterator[tuple[Any, Any]]:
        path, columns = metadata.path, [self._id, self._key]
        with _open(path, compressed=self._fmt != "parquet") as f:
            if self._fmt == "parquet":
                table = pq.read_table(f, columns=columns)
            elif self._fmt == "csv":
                options = pa_csv.ConvertOptions(
                    include_columns=columns,
                    column_types=dict.fromkeys(columns, pa.string()),
                    null_values=[""],
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                )
                table = pa_csv.read_csv(f, convert_options=options)
            else:
                table = pa_json.read_json(f).select(columns)
        for name in columns:
            if table.column(name).null_count:
                raise TypeError(f"column {name!r} of {path} has missing values (None)")
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


def ordered_batches(
    keys: pa.Array, times: np.ndarray | None, rows: int = ORDERED_BATCH_ROWS
) -> list[tuple[int, pa.Array, np.ndarray | None]]:
    """Cut ordered rows into ``(position, keys, times)`` batches of at most ``rows`` rows.

    ``position`` is the public 0-based position of the batch's first row; ``times`` is the
    batch's slice of ``times`` (``None`` without a time column).
    """
    return [
        (start, keys.slice(start, rows), None if times is None else times[start : start + rows])
        for start in range(0, len(keys), rows)
    ]


class _ReadInOrder(_ColumnReader):
    """Read whole files in the given order with the :class:`ReadKeyBatches` key rules."""

    def __init__(
        self, fmt: str, column: str, key_type: str | None, time_column: str | None, rows: int
    ) -> None:
        super().__init__(column, key_type, dead_letter=False)
        self._fmt, self._time_column, self._rows = fmt, time_column, rows

    def _read_file(self, path: str) -> tuple[Any, Any]:
        if self._fmt == "text":
            with _open(path) as f:
                lines = f.read().decode("utf-8").splitlines()
            return pa.array(lines, pa.string()), None
        extra = [self._time_column] if self._time_column else []
        columns = [self._column, *extra]
        with _open(path, compressed=self._fmt != "parquet") as f:
            try:
                if self._fmt == "parquet":
                    table = pq.read_table(f, columns=columns)
                elif self._fmt == "csv":
                    options = _csv_convert_options(self._column, self._key_type, extra)
                    table = pa_csv.read_csv(f, convert_options=options)
                else:
                    table = pa_json.read_json(f)
            except (pa.ArrowInvalid, KeyError) as exc:
                raise ValueError(
                    f"cannot read columns {columns} of {path}: {_arrow_problem(exc)}"
                ) from None
        for name in columns:
            if name not in table.column_names:
                raise _missing_column(name, table.column_names, path)
        times = table.column(self._time_column) if self._time_column else None
        return table.column(self._column), times

    def read_all(self, paths: Sequence[str]) -> tuple[pa.Array, np.ndarray | None]:
        """All rows of ``paths`` in public order: ``(keys, event times in seconds or None)``."""
        keys: list[Any] = []
        sort_keys: list[np.ndarray] = []
        seconds: list[np.ndarray] = []
        for path in paths:
            arr, time_arr = self._read_file(path)
            keys.extend(self._batches(arr, path))
            if time_arr is not None:
                if time_arr.null_count:
                    raise TypeError(
                        f"time column {self._time_column!r} of {path} has missing values (None)"
                    )
                exact, secs = _time_values(time_arr, self._time_column, path)
                sort_keys.append(exact)
                seconds.append(secs)
        if keys:
            column = pa.chunked_array(keys).combine_chunks()
        else:
            empty = {"int": pa.int64(), "bytes": pa.binary()}.get(self._key_type or "", pa.string())
            column = pa.array([], empty)
        if self._time_column is None:
            return column, None
        times = np.concatenate(seconds) if seconds else np.empty(0, np.float64)
        if sort_keys:
            # Stable: rows with equal times keep their file order.
            order = np.argsort(np.concatenate(sort_keys), kind="stable")
            column, times = column.take(pa.array(order)), times[order]
        return column, times

    def process(self, paths: list[str]) -> Iterator[tuple[int, pa.Array, np.ndarray | None]]:
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
            self.input_format, column or "line", self.key_type, time_column, rows
        )

    def read(self) -> tuple[pa.Array, np.ndarray | None]:
        """All rows in public order on the caller: ``(keys, event times in seconds or None)``."""
        return self._reader.read_all(self._paths)

    def expand(self, pbegin: pvalue.PBegin) -> beam.PCollection:
        return (
            pbegin
            | "Paths" >> beam.Create([self._paths])
            | "ReadInOrder" >> beam.ParDo(self._reader)
        )
