"""Records of CSV, JSON Lines and text files, and the tables and columns parsed from them.

A text or JSON Lines record is a line; a CSV record follows the CSV grammar (a quoted field may
hold newlines). Records are cut from the decompressed, checked bytes
(:func:`~beam_dpsketch.io.streams.open_input`) in one vectorised pass, in blocks of whole
records, in time linear in the size of the file and memory holding one record of at most
``max_record_bytes``; a block is parsed by ``pyarrow.csv`` or ``pyarrow.json`` in one call. A
malformed record fails the read or, under ``on_bad_record="drop"``, is left out by itself
(a block that fails to parse is halved until the failing record is found). Parquet files are
read through :func:`parquet_call`, which names a damaged file without the sizes Arrow reports.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from beam_dpsketch.io.formats import (
    DEFAULT_MAX_RECORD_BYTES,
    InputError,
    arrow_problem,
    input_error,
    missing_column_error,
)
from beam_dpsketch.io.streams import NOT_UTF8, is_empty_input, open_input

__all__ = [
    "parquet_call",
    "parquet_error",
    "probe_column",
    "read_table",
    "table_blocks",
    "text_line_blocks",
]

# Bytes per read of a CSV, JSON Lines or text file (and the size of a block of records).
_BLOCK_SIZE = 1 << 22


def _too_long(path: str, limit: int) -> InputError:
    # The limit is a public parameter; the record's own length is not named.
    return input_error(
        path,
        f"a record is longer than max_record_bytes={limit} (--max-record-bytes): raise the "
        "limit, or drop such records with on_bad_record='drop' (--on-bad-record drop)",
    )


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
    with open_input(path, fmt, check_utf8=not drop) as f:
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


def text_line_blocks(
    path: str, limit: int, drop: bool, block: int | None = None
) -> Iterator[list[str]]:
    """Blocks of the lines of a text file, each line one key (see :func:`_split_lines`); a last
    line without a newline counts. Lines longer than ``limit`` bytes, and with ``drop`` lines
    that are not UTF-8, are bad records (:func:`_record_blocks`, :func:`_parse_records`)."""

    def parse(data: bytes) -> list[str]:
        # A newline byte is always a character boundary: a block of lines decodes by itself.
        return _split_lines(data.decode("utf-8"))

    def describe(_record: bytes, _exc: BaseException) -> InputError:
        return input_error(path, NOT_UTF8)

    for data in _record_blocks(path, "text", limit, drop, block=block):
        for lines in _parse_records(data, parse, quoted=False, drop=drop, describe=describe):
            if lines:
                yield lines


def _csv_header(path: str, limit: int = DEFAULT_MAX_RECORD_BYTES) -> list[str]:
    """The column names of a CSV file: its first record."""
    held: list[bytes] = []
    size, odd = 0, False
    with open_input(path, "csv", check_utf8=False) as f:
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
        raise input_error(path, f"cannot parse the CSV header: {_describe_error(exc)}") from None
    return table.column_names


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return NOT_UTF8
    return arrow_problem(exc)


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
            return input_error(path, NOT_UTF8)
        if "columns" in str(exc):
            return input_error(path, "a record has a different number of fields than the header")
        return input_error(path, f"cannot parse a record as CSV: {arrow_problem(exc)}")

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
            return input_error(path, NOT_UTF8)
        try:
            obj = json.loads(record)
        except ValueError:
            return input_error(path, "a line is not valid JSON (one JSON object per line)")
        if not isinstance(obj, dict):
            return input_error(path, "a line is not a JSON object (one JSON object per line)")
        if schema is not None:
            fields = ", ".join(f"{f.name!r} ({f.type})" for f in schema)
            return input_error(path, f"a line holds a value of another type in {fields}")
        return input_error(path, f"cannot read a line as JSON Lines: {arrow_problem(exc)}")

    return describe


def table_blocks(
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
                raise missing_column_error(column, names, path)
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


def probe_column(
    path: str,
    fmt: str,
    column: str,
    limit: int = DEFAULT_MAX_RECORD_BYTES,
    drop: bool = False,
) -> pa.DataType:
    """Check that the first file has ``column`` and return its Arrow type (with ``drop``, for
    JSON Lines, the type of its first appearance: the caller sets the type)."""
    if fmt == "parquet":
        schema = parquet_call(path, lambda pf: pf.schema_arrow)
    elif fmt == "csv":
        names = _csv_header(path, limit)
        if column not in names:
            raise missing_column_error(column, names, path)
        return pa.string()
    else:
        schemas = _json_probe_schemas(path, limit, drop)
        for schema in schemas:
            if column in schema.names:
                return schema.field(column).type
        names = list(dict.fromkeys(n for s in schemas for n in s.names))
        raise missing_column_error(column, names, path)
    if column not in schema.names:
        raise missing_column_error(column, schema.names, path)
    return schema.field(column).type


def parquet_error(path: str, exc: BaseException) -> InputError:
    """A damaged Parquet file, named without the sizes Arrow reports (the size of a file or of
    its footer follows from the number of rows it holds)."""
    problem = arrow_problem(exc)
    if "size" in problem.lower():
        problem = "the file is truncated or is not Parquet"
    return input_error(path, f"cannot read as Parquet ({problem})")


def parquet_call(
    path: str, use: Callable[[pq.ParquetFile], Any], read_dictionary: Sequence[str] = ()
) -> Any:
    """``use(ParquetFile)`` of the file at ``path``, string or binary ``read_dictionary`` columns
    decoded as dictionary arrays; an unreadable file raises :class:`InputError` naming it."""
    with open_input(path, "parquet") as f:
        try:
            return use(pq.ParquetFile(f, read_dictionary=list(read_dictionary) or None))
        except (pa.ArrowException, OSError) as exc:
            raise parquet_error(path, exc) from None


def read_table(
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
    if is_empty_input(path, fmt):
        return None
    if fmt == "parquet":
        names = parquet_call(path, lambda pf: pf.schema_arrow.names)
        missing = [c for c in columns if c not in names]
        if missing:
            raise missing_column_error(missing[0], names, path)
        return parquet_call(path, lambda pf: pf.read(columns=list(columns)))
    tables = []
    seen: dict[str, None] = {}
    for table in table_blocks(
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
        raise input_error(path, f"column {changed!r} changes type between records") from None
    for name in columns:
        if name not in seen:
            raise missing_column_error(name, list(seen), path)
    return table
