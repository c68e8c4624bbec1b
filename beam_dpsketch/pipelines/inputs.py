"""What a subcommand reads: the input options, the readers they configure, and the public keys
(``--candidates`` files, ``--query`` strings) converted to match the input's keys.

Every subcommand takes the same input options (:func:`add_input_arguments`): one input layer for
Parquet, CSV, JSON Lines and text, with the same handling of malformed records everywhere.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from beam_dpsketch.io import (
    DEFAULT_MAX_RECORD_BYTES,
    INPUT_FORMATS,
    KEY_TYPES,
    ON_BAD_RECORD,
    ReadOrderedKeys,
)

__all__ = [
    "TIME_COLUMN_MEMORY",
    "add_input_arguments",
    "bad_record_options",
    "convert_query_keys",
    "ordered_input",
    "read_candidates",
]

#: Appended to every ``--time-column`` help: the one input path whose memory grows with the rows.
TIME_COLUMN_MEMORY = (
    "; the rows are sorted by it in memory (about 16 bytes per row with int keys, more with "
    "strings), whereas file order streams in bounded memory"
)


def add_input_arguments(parser: argparse.ArgumentParser, *, input_required: bool = True) -> None:
    """Add ``--input``, ``--input-format``, ``--column``, ``--key-type``, ``--on-bad-record`` and
    ``--max-record-bytes`` to ``parser``."""
    group = parser.add_argument_group("input")
    group.add_argument(
        "--input",
        required=input_required,
        metavar="PATH",
        help="input file or glob (Parquet, CSV, JSON Lines or text; any Beam filesystem)",
    )
    group.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default=None,
        help="input format (default: from the extension; .parquet, .csv, .jsonl/.ndjson/.json, "
        "anything else is text with one key per line)",
    )
    group.add_argument(
        "--column",
        metavar="NAME",
        default=None,
        help="key column (required except for text input)",
    )
    group.add_argument(
        "--key-type",
        choices=KEY_TYPES,
        default=None,
        help="convert keys to int or str (default: the column's type; CSV and text give str)",
    )
    group.add_argument(
        "--on-bad-record",
        choices=ON_BAD_RECORD,
        default="fail",
        help="a malformed record (missing key, not an int key or number, ragged CSV record, "
        "JSON line that is not an object or has another type, not UTF-8, longer than "
        "--max-record-bytes): fail the run (default), or drop it before any DP step, "
        "uncounted (JSON Lines input then needs --key-type)",
    )
    group.add_argument(
        "--max-record-bytes",
        type=int,
        metavar="N",
        default=DEFAULT_MAX_RECORD_BYTES,
        help="the longest line or CSV record read, in bytes; memory holds one such record "
        f"(default {DEFAULT_MAX_RECORD_BYTES})",
    )


def ordered_input(args: argparse.Namespace) -> ReadOrderedKeys:
    """The public-order reader of :func:`add_input_arguments`' options and ``--time-column``."""
    return ReadOrderedKeys(
        args.input,
        args.column,
        args.input_format,
        key_type=args.key_type,
        time_column=args.time_column,
        **bad_record_options(args),
    )


def bad_record_options(args: argparse.Namespace) -> dict[str, Any]:
    """The readers' ``on_bad_record`` and ``max_record_bytes`` from :func:`add_input_arguments`'
    ``--on-bad-record`` and ``--max-record-bytes``."""
    return {"on_bad_record": args.on_bad_record, "max_record_bytes": args.max_record_bytes}


def read_candidates(path: str) -> list[str]:
    """The public candidate keys of a ``--candidates`` file: one per line, blank lines skipped.

    Raises
    ------
    ValueError
        If the file has no keys.
    """
    with open(path, encoding="utf-8") as f:
        keys = [line.rstrip("\n") for line in f if line.strip()]
    if not keys:
        raise ValueError(f"--candidates file {path} has no keys")
    return keys


def convert_query_keys(queries: Sequence[str], key_type: str | None, column: str | None) -> list:
    """Convert ``--query`` strings to the key type of the input, so they can match.

    Raises
    ------
    ValueError
        If a query is not an integer but the keys are ints (the message names the column).
    """
    if key_type == "int":
        out = []
        for q in queries:
            try:
                out.append(int(q))
            except ValueError:
                where = f"column {column!r}" if column else "the input"
                raise ValueError(
                    f"--query {q!r} is not an integer, but {where} holds integer keys"
                ) from None
        return out
    if key_type == "bytes":
        return [q.encode("utf-8") for q in queries]
    return list(queries)
