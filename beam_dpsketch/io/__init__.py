"""Input and output: read key columns of Parquet, CSV, JSON Lines or text files; write outputs.

The readers (:class:`ReadKeyBatches`, :class:`ReadKeyPairs`, :class:`ReadOrderedKeys`) turn
files into batches of keys; :mod:`beam_dpsketch.io.sinks` writes the command line's outputs
atomically. The modules, by concern: :mod:`~beam_dpsketch.io.formats` (format names, key
types, options, errors), :mod:`~beam_dpsketch.io.streams` (decompression, UTF-8 checked
bytes), :mod:`~beam_dpsketch.io.records` (records and their parsing per format),
:mod:`~beam_dpsketch.io.columns` (the per-file column readers), :mod:`~beam_dpsketch.io.read`
(:class:`ReadKeyBatches`, :class:`ReadKeyPairs`), :mod:`~beam_dpsketch.io.ordered`
(:class:`ReadOrderedKeys`), :mod:`~beam_dpsketch.io.sinks` and
:mod:`~beam_dpsketch.io.parquet` (:class:`WriteReleaseToParquet`: a release of rows to
Beam's Parquet writer, its keys typed by ``key_type``).

No format goes through per-element Python (Beam costs microseconds per element): Parquet row
groups, and blocks of whole CSV records (parsed by ``pyarrow.csv``), JSON Lines records (parsed
by ``pyarrow.json``) and text lines become one pyarrow ``Array`` each, which the sketches hash
as a whole.

One input layer
---------------
Every reader here (:class:`ReadKeyBatches`, :class:`ReadKeyPairs`, :class:`ReadOrderedKeys`), and
so every ``beam-dpsketch`` subcommand, opens files the same way
(:func:`~beam_dpsketch.io.streams.open_input`):

* **Compression** by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``/``.zstd``,
  ``.deflate``), decompressed strictly: a truncated or corrupt file fails (Beam's own
  decompression stops silently where a cut file ends). Concatenated gzip members are read.
* **Decoding**: CSV, JSON Lines and text must be UTF-8; a UTF-8 byte order mark at the start of
  a file is dropped.
* **Lines** of text files end at ``\\n`` or ``\\r\\n`` only: a lone ``\\r``,
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

from beam_dpsketch.io.formats import (
    DEFAULT_MAX_RECORD_BYTES,
    INPUT_FORMATS,
    KEY_TYPES,
    NUMBERS,
    ON_BAD_RECORD,
    InputError,
    check_bad_record_options,
    infer_input_format,
)
from beam_dpsketch.io.ordered import ReadOrderedKeys, ordered_batches
from beam_dpsketch.io.parquet import WriteReleaseToParquet, parquet_schema
from beam_dpsketch.io.read import ReadKeyBatches, ReadKeyPairs

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
    "WriteReleaseToParquet",
    "check_bad_record_options",
    "infer_input_format",
    "ordered_batches",
    "parquet_schema",
]
