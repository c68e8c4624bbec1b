"""Read a key column, or privacy id and key pairs, of Parquet, CSV, JSON Lines or text files.

:class:`ReadKeyBatches` reads one column as pyarrow ``Array`` batches, spread over workers by
file (and Parquet row group); :class:`ReadKeyPairs` reads ``(privacy_id, key)`` pairs for
user-level releases. Both open, split and parse files as every reader of
:mod:`beam_dpsketch.io` does (its docstring states the rules).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.io.columns import ParquetRowGroups, column_reader
from beam_dpsketch.io.formats import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_RECORD_BYTES,
    INVALID_TAG,
    KEY_TYPES,
    MAIN_TAG,
    NUMBERS,
    bad_key_type_error,
    check_bad_record_options,
    check_batch_size,
    key_kind,
    normalise_input_format,
)
from beam_dpsketch.io.records import probe_column, read_table
from beam_dpsketch.io.streams import is_empty_input

__all__ = ["ReadKeyBatches", "ReadKeyPairs"]


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
        self.input_format = normalise_input_format(input_format, path_or_glob)
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
        check_batch_size(batch_size)
        if validate:
            self._validate()

    @property
    def arrow_type(self) -> pa.DataType | None:
        """The Arrow type JSON Lines keys are parsed with, so that a record of another type is
        malformed: the type ``key_type`` sets under ``on_bad_record="drop"``, else the first
        file's type once its keys are validated; ``None`` otherwise (other formats)."""
        return self._arrow_type

    def _validate(self) -> None:
        matches = FileSystems.match([self._pattern])[0].metadata_list
        if not matches:
            raise FileNotFoundError(f"no file matches {self._pattern!r}")
        if self.input_format == "text":
            return
        # Zero-byte files are inputs of zero rows: the first file with bytes has the schema.
        paths = (m.path for m in sorted(matches, key=lambda m: m.path))
        first = next((p for p in paths if not is_empty_input(p, self.input_format)), None)
        if first is None:
            return
        arrow_type = probe_column(first, self.input_format, self._column, self._limit, self._drop)
        if self._arrow_type is not None:
            # The type key_type sets (on_bad_record="drop"), not the first values' type.
            arrow_type = self._arrow_type
        kind = key_kind(arrow_type)
        if self._requested_key_type == NUMBERS:
            if kind not in ("int", "str") and not pa.types.is_floating(arrow_type):
                raise TypeError(
                    f"column {self._column!r} in {first} has type {arrow_type}: quantile values "
                    "must be numbers"
                )
            return
        if kind is None:
            raise bad_key_type_error(self._column, arrow_type, first)
        if self.input_format == "jsonl":
            self._arrow_type = arrow_type
        self.key_type = self._requested_key_type or kind

    def expand(self, pbegin):
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        reader = column_reader(
            self.input_format,
            self._column,
            self._requested_key_type,
            dead_letter=self._dead_letter,
            batch_size=self._batch_size,
            drop=self._drop,
            limit=self._limit,
            arrow_type=self._arrow_type,
        )
        work = files
        if self.input_format == "parquet":
            work = files | "RowGroups" >> beam.ParDo(ParquetRowGroups(self._column))
        # Spread files (and Parquet row groups) over workers.
        work = work | "Spread" >> beam.Reshuffle()
        read = beam.ParDo(reader).with_output_types(pa.Array)
        if self._dead_letter:
            return work | "ReadColumn" >> read.with_outputs(INVALID_TAG, main=MAIN_TAG)
        return work | "ReadColumn" >> read


class _ReadPairs(beam.DoFn):
    """Read ``(privacy id, key)`` pairs from the two columns of one file."""

    def __init__(self, fmt: str, id_column: str, key_column: str, drop: bool, limit: int):
        self._fmt, self._id, self._key = fmt, id_column, key_column
        self._drop, self._limit = drop, limit

    def process(self, metadata: Any) -> Iterator[tuple[Any, Any]]:
        path, columns = metadata.path, [self._id, self._key]
        table = read_table(path, self._fmt, columns, columns, limit=self._limit, drop=self._drop)
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
        self._fmt = normalise_input_format(input_format, path_or_glob)
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
            probe_column(matches[0].path, self._fmt, column, self._limit)
        self._key, self._id = key_column, id_column

    def expand(self, pbegin):
        files = pbegin | "Match" >> fileio.MatchFiles(
            self._pattern, fileio.EmptyMatchTreatment.DISALLOW
        )
        reader = _ReadPairs(self._fmt, self._id, self._key, self._drop, self._limit)
        return files | "Spread" >> beam.Reshuffle() | "ReadPairs" >> beam.ParDo(reader)
