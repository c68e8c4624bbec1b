"""Write a release of rows to Parquet with Beam's writer, whatever the type of its keys.

``beam.io.WriteToParquet`` derives its Arrow schema from the row schema only when every field
has a concrete type. The release rows of :mod:`beam_dpsketch.transforms.records` have two kinds
of fields that have none: ``key`` (typed ``Any``: the keys are whatever the input's keys are)
and an estimate that is an ``int`` for discrete noise and a ``float`` otherwise.
:func:`parquet_schema` gives such a row type an Arrow schema from one public choice, the type
of the keys (``key_type``), and :class:`WriteReleaseToParquet` writes a release with it, with
no ``Map`` in the user's pipeline.

Field types map as follows: ``int`` to ``int64``, ``float`` to ``float64``, ``str`` to
``string``, ``bytes`` to ``binary``, ``bool`` to ``bool``; an ``int``-or-``float`` estimate to
``float64`` (exact for integers up to ``2**53``); ``Any`` (the key) to ``key_type``; an
``Optional`` field to the same type, nullable; a nested row to a ``struct`` and a sequence of
rows (``TimedHeavyHitters.heavy_hitters``) to a ``list`` of ``struct``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa

__all__ = ["KEY_ARROW_TYPES", "WriteReleaseToParquet", "parquet_schema"]

#: The ``key_type`` choices and the Arrow type of their column.
KEY_ARROW_TYPES: dict[type, pa.DataType] = {str: pa.string(), int: pa.int64(), bytes: pa.binary()}

_ATOMIC: dict[type, pa.DataType] = {
    bool: pa.bool_(),
    int: pa.int64(),
    float: pa.float64(),
    str: pa.string(),
    bytes: pa.binary(),
}


def _is_row_type(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def _members(hint: Any) -> tuple[Any, ...] | None:
    """The members of a union hint (``int | float``, ``Optional[float]``), else ``None``."""
    if typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType):
        return typing.get_args(hint)
    return None


def _check_key_type(key_type: Any) -> type | None:
    if key_type is None:
        return None
    if key_type not in KEY_ARROW_TYPES:
        raise ValueError(f"key_type must be one of str, int or bytes, got {key_type!r}")
    return key_type


def _arrow_type(hint: Any, key_type: type | None, field: str) -> tuple[pa.DataType, bool]:
    """The Arrow type of a field annotated ``hint`` and whether it is nullable."""
    members = _members(hint)
    if members is not None:
        present = tuple(m for m in members if m is not type(None))
        nullable = len(present) < len(members)
        if set(present) == {int, float}:
            return pa.float64(), nullable
        if len(present) == 1:
            return _arrow_type(present[0], key_type, field)[0], nullable
        raise ValueError(f"{field}: a union of {present} has no Arrow type")
    if hint is Any:
        if key_type is None:
            raise ValueError(
                f"key_type: the release's field {field!r} takes keys of any type; pass "
                "key_type=str, int or bytes (the type of the released keys)"
            )
        return KEY_ARROW_TYPES[key_type], False
    if hint in _ATOMIC:
        return _ATOMIC[hint], False
    if _is_row_type(hint):
        return pa.struct(_fields(hint, key_type)), False
    origin = typing.get_origin(hint)
    if isinstance(origin, type) and issubclass(origin, Sequence) and origin not in (str, bytes):
        (item,) = typing.get_args(hint) or (Any,)
        return pa.list_(_arrow_type(item, key_type, field)[0]), False
    raise ValueError(f"{field}: the field type {hint!r} has no Arrow type")


def _fields(row_type: type, key_type: type | None) -> list[pa.Field]:
    out = []
    for name, hint in typing.get_type_hints(row_type).items():
        arrow, nullable = _arrow_type(hint, key_type, name)
        out.append(pa.field(name, arrow, nullable=nullable))
    return out


def parquet_schema(row_type: Any, *, key_type: type | None = None) -> pa.Schema:
    """The Arrow schema of the release rows of type ``row_type`` (see the module docstring).

    Parameters
    ----------
    row_type
        A row type of :mod:`beam_dpsketch.transforms.records` (a release's ``element_type``).
    key_type
        ``str``, ``int`` or ``bytes``: the type of the released keys, required when the rows
        carry keys. A public choice made with the pipeline, never read from the data.

    Raises
    ------
    ValueError
        Naming ``key_type`` when it is needed and missing or not one of the three, or naming
        the field whose type has no Arrow type (e.g. a release object that is not a row).
    """
    key_type = _check_key_type(key_type)
    if not _is_row_type(row_type):
        raise ValueError(
            f"row_type: {row_type} is not a row type; DPFrequencies releases rows with "
            'output="rows"'
        )
    return pa.schema(_fields(row_type, key_type))


def _converter(hint: Any, key_type: type | None) -> Any:
    """A function turning a field's value into what Arrow stores for ``_arrow_type(hint)``."""
    members = _members(hint)
    if members is not None:
        present = tuple(m for m in members if m is not type(None))
        inner = float if set(present) == {int, float} else present[0]
        convert = _converter(inner, key_type)
        return lambda v: None if v is None else convert(v)
    if hint is Any:
        wanted = key_type

        def key(value: Any) -> Any:
            # Only exactly the declared type: a bool is no int key, and a str is not parsed.
            # The message names the parameter, never the key.
            if type(value) is not wanted and not (wanted is bytes and type(value) is bytearray):
                raise TypeError(f"key_type: a released key is not of type {wanted.__name__}")  # type: ignore[union-attr]
            return bytes(value) if wanted is bytes else value

        return key
    if hint is float:
        return float
    if hint is int:
        return int
    if _is_row_type(hint):
        parts = [(n, _converter(h, key_type)) for n, h in typing.get_type_hints(hint).items()]
        return lambda v: {n: f(getattr(v, n)) for n, f in parts}
    if hint in _ATOMIC:
        return lambda v: v
    (item,) = typing.get_args(hint) or (Any,)
    convert = _converter(item, key_type)
    return lambda v: [convert(x) for x in v]


class _ToColumns(beam.DoFn):
    """Each release row as the ``dict`` Beam's Parquet writer takes, with the schema's types."""

    def __init__(self, row_type: type, key_type: type | None) -> None:
        self._row_type = row_type
        self._key_type = key_type
        self._convert: Any = None

    def setup(self) -> None:
        # Built on the worker: closures are not pickled with the DoFn.
        self._convert = _converter(self._row_type, self._key_type)

    def process(self, row: Any) -> Iterator[dict[str, Any]]:
        yield self._convert(row)


class WriteReleaseToParquet(beam.PTransform):
    """Write a DP transform's release of rows to Parquet files (``beam.io.WriteToParquet``).

    The Arrow schema is :func:`parquet_schema` of the release's element type: one column per
    field, in field order, with the released keys typed ``key_type``. Windowed rows
    (:class:`~beam_dpsketch.transforms.records.WithWindowBounds`) keep their window columns.

    Parameters
    ----------
    file_path_prefix
        As for ``beam.io.WriteToParquet``.
    key_type
        ``str``, ``int`` or ``bytes``: the type of the released keys (required for rows with a
        ``key``). A released key of another type fails the write with a ``TypeError`` naming
        ``key_type``.
    **parquet_options
        Passed to ``beam.io.WriteToParquet`` (``num_shards``, ``file_name_suffix``, ``codec``,
        ...), except ``schema``.

    Notes
    -----
    **Privacy.** Post-processing of the release: the columns hold the released values as they
    are (an integer estimate as a float), and the schema comes from the row type and
    ``key_type``, both fixed with the pipeline. No budget is spent.

    Raises
    ------
    ValueError
        At construction for an invalid ``key_type``; when applied, for a release that is not
        rows, or rows with keys and no ``key_type`` (naming ``key_type``).
    """

    def __init__(
        self, file_path_prefix: str, *, key_type: type | None = None, **parquet_options: Any
    ) -> None:
        super().__init__()
        if "schema" in parquet_options:
            raise TypeError("schema: WriteReleaseToParquet derives the schema from the rows")
        self._path = file_path_prefix
        self._key_type = _check_key_type(key_type)
        self._options = parquet_options

    def expand(self, pcoll: beam.PCollection) -> beam.pvalue.PDone:
        schema = parquet_schema(pcoll.element_type, key_type=self._key_type)
        columns = pcoll | "ToColumns" >> beam.ParDo(_ToColumns(pcoll.element_type, self._key_type))
        return columns | "WriteToParquet" >> beam.io.WriteToParquet(
            self._path, schema, **self._options
        )
