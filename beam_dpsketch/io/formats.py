"""Input formats and reader options: format names and inference, key types, errors, bad records.

What every reader of :mod:`beam_dpsketch.io` agrees on: the format names (and the extensions
that imply them), the key types, the ``on_bad_record`` and ``max_record_bytes`` options, the
dead-letter output tags, and the errors. An error names the file, the column or the parameter,
never a value, a count or a position from the data (:class:`InputError`, :func:`arrow_problem`).
"""

from __future__ import annotations

import os
import re
from typing import Any

import pyarrow as pa

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_RECORD_BYTES",
    "INPUT_FORMATS",
    "INVALID_TAG",
    "KEY_TYPES",
    "MAIN_TAG",
    "NUMBERS",
    "ON_BAD_RECORD",
    "InputError",
    "arrow_problem",
    "bad_key_type_error",
    "check_bad_record_options",
    "check_batch_size",
    "infer_input_format",
    "input_error",
    "key_kind",
    "missing_column_error",
    "normalise_input_format",
]

#: Keys per batch when a step batches keys itself (text readers, :class:`BatchKeys`).
DEFAULT_BATCH_SIZE = 4096
#: Output tag of the bad elements when a step has a dead-letter output.
INVALID_TAG = "invalid"
#: Output tag of the key batches when a step has a dead-letter output.
MAIN_TAG = "batches"

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


def normalise_input_format(input_format: str | None, path: str) -> str:
    """The format name of ``input_format`` (aliases such as ``"json"`` or ``"txt"`` accepted),
    or the one :func:`infer_input_format` gives ``path`` when it is ``None``.

    Raises
    ------
    ValueError
        Naming ``input_format``, if it is not a known format.
    """
    if input_format is None:
        return infer_input_format(path)
    fmt = _FORMAT_ALIASES.get(str(input_format).lower(), str(input_format).lower())
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"input_format must be one of {INPUT_FORMATS}, got {input_format!r}")
    return fmt


def key_kind(typ: pa.DataType) -> str | None:
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


def missing_column_error(column: str, available: list[str], where: str) -> ValueError:
    """The error for a column missing from ``where`` (a file), listing the file's columns
    (column names are its schema, not its data)."""
    return ValueError(
        f"column {column!r} not found in {where}; available columns: "
        + ", ".join(repr(c) for c in available)
    )


def bad_key_type_error(column: str, typ: pa.DataType, where: str) -> TypeError:
    """The error for a column of ``where`` whose Arrow type ``typ`` is not a key type."""
    return TypeError(
        f"column {column!r} in {where} has type {typ}: keys must be integers, strings or "
        "binary (floats are not keys)"
    )


class InputError(ValueError):
    """An input file that cannot be read as declared.

    The message is one line, ``"<file>: <problem>"``: it names the file and the column or
    parameter, never a value, a count or a position (line, row, byte offset) from the data.
    """


def input_error(path: str, problem: str) -> InputError:
    """The :class:`InputError` ``"<path>: <problem>"``; ``problem`` must name no value, count or
    position from the data."""
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


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
# Numbers in Arrow's messages are counts, sizes, positions or cells taken from the data
# ("Expected 3 columns, got 2", block-relative "row 5", "couldn't parse:1.5"): every token that
# starts with a digit goes; type names such as int64 are kept.
_NUMBER = re.compile(r"(?<![\w.])(?<!UTF-)\d[\w.]*")


def arrow_problem(exc: BaseException) -> str:
    """A data-free summary of an Arrow parse error.

    Arrow quotes the offending cell or row after the last colon ("invalid value 'x'", "Expected
    3 columns, got 2: a,b"); rows and cells are private data, so only the first two clauses are
    kept, with every quoted string and every number removed.
    """
    clauses = str(exc).split(": ")[:2]
    text = ": ".join(_NUMBER.sub("N", _QUOTED.sub("<value>", c)) for c in clauses).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_batch_size(batch_size: Any) -> int:
    """Check a ``batch_size`` parameter (keys per batch): an int >= 1, not a bool.

    Raises
    ------
    ValueError
        Naming the parameter, if ``batch_size`` is not an int >= 1.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return batch_size
