"""Turn a PCollection of keys (or records) into batches of keys, so sketches see arrays.

Beam costs about 1.6 us per element while numpy hashes and counts tens of millions of keys per
second, so every sketch transform first groups keys into batches: one
Beam element per ``batch_size`` keys. A batch is a numpy ``int64`` array when every key in it is
an int that fits in 64 bits, and otherwise a list of canonical keys
(:func:`beam_dpsketch.hashing.canonical_key`: ``str``, ``bytes``, ``int`` or tuples of these).

Batching is per bundle and per window: an element only ever joins a batch of its own window
(and, for :class:`BatchKeysPerGroup`, of its own group), and each batch carries its window's
``max_timestamp()``, as Beam's own batching transform does. Elements that are already batches
(numpy arrays, pyarrow arrays) are validated and passed through unchanged.

Invalid keys (``None``, floats, lists, ...) raise ``TypeError`` naming their type. With
``dead_letter=True`` they go to the ``"invalid"`` output instead, as ``(element, reason)`` pairs;
they are never dropped silently.

:class:`FixedBatches` batches arbitrary elements (records, ``(value, weight)`` pairs) into lists
with the same window and timestamp rules. No batching step here registers a Beam metric or
writes a log line: Beam's own batching transform reports a batch-size distribution whose sum is
the exact number of input elements, and Beam metrics leave the pipeline outside any release.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Union

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam import pvalue
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.hashing import canonical_key
from beam_dpsketch.io.formats import DEFAULT_BATCH_SIZE, INVALID_TAG, MAIN_TAG, check_batch_size

__all__ = [
    "BATCH_TYPE",
    "DEFAULT_BATCH_SIZE",
    "INVALID_TAG",
    "MAIN_TAG",
    "BatchKeys",
    "BatchKeysPerGroup",
    "FixedBatches",
    "KeyBatch",
    "is_batch_type",
    "is_key_batch",
    "unit_weight",
    "validate_key_batch",
]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
# Arrow key column types the hashing layer accepts (dictionary arrays are checked by value type).
_ARROW_KEY_TYPES = (
    pa.types.is_integer,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


class KeyBatch(list):
    """A list of already canonical, validated keys: what :class:`BatchKeys` emits for keys that
    are not all 64-bit ints. The subclass marks it as a batch; a plain list is not a key either,
    but a tuple is (a composite key), so batches must be recognisable by type.
    """

    __slots__ = ()


_BATCH_CLASSES = (np.ndarray, pa.Array, pa.ChunkedArray, KeyBatch)
#: Element type of :class:`BatchKeys` output.
BATCH_TYPE = Union[np.ndarray, KeyBatch]  # noqa: UP007 - Beam type hints need typing.Union


def is_key_batch(value: Any) -> bool:
    """True for values the sketch transforms treat as a ready-made batch of keys.

    Those are numpy arrays, pyarrow arrays and :class:`KeyBatch` lists. A tuple is a
    (composite) key, and a plain list is never mistaken for a batch.
    """
    return isinstance(value, _BATCH_CLASSES)


def is_batch_type(type_hint: Any) -> bool:
    """True if a PCollection element type guarantees batches (array types, :data:`BATCH_TYPE`)."""
    members = getattr(type_hint, "union_types", None)
    if members is not None:
        return bool(members) and all(is_batch_type(t) for t in members)
    return isinstance(type_hint, type) and issubclass(type_hint, _BATCH_CLASSES)


def _arrow_type_ok(typ: pa.DataType) -> bool:
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return any(check(typ) for check in _ARROW_KEY_TYPES)


def user_fn_error(name: str, exc: BaseException) -> ValueError:
    """The error to raise when the user function ``name`` failed on an element with ``exc``.

    It names the function and the exception type only: the original message can quote the
    element (``int("alice")``, ``KeyError('alice')``), and exception messages leave the pipeline
    through logs and job status. Raise it ``from None`` so the original is not chained into the
    traceback.
    """
    return ValueError(
        f"{name} raised {type(exc).__name__} on an element (its message is not shown: it can "
        "quote the element)"
    )


def call_user_fn(fn: Callable[[Any], Any], value: Any, name: str) -> Any:
    """``fn(value)``; a failure raises :func:`user_fn_error` (no data in the message)."""
    try:
        return fn(value)
    except Exception as exc:  # noqa: BLE001 - any failure of user code on an element
        raise user_fn_error(name, exc) from None


def _invalid_key_message(key: Any, what: str = "key") -> str:
    return (
        f"invalid {what} of type {type(key).__name__!r}: keys must be str, bytes, int, bool or "
        "tuples of these"
    )


def validate_key_batch(batch: Any, what: str = "key batch") -> tuple[Any, list[tuple[Any, str]]]:
    """Check a ready-made batch; return ``(valid_keys, invalid)``.

    Parameters
    ----------
    batch
        A numpy array or a pyarrow ``Array``/``ChunkedArray``.
    what
        How to name the batch in messages (e.g. ``"column 'route'"``).

    Returns
    -------
    (valid, invalid)
        ``valid`` is the batch itself when every key is valid, else the valid subset (same kind
        of container where possible); ``invalid`` lists ``(element, reason)`` pairs. A float or
        otherwise unsupported array is invalid as a whole: ``([], [(batch, reason)])``.
    """
    if isinstance(batch, KeyBatch):
        return batch, []
    if isinstance(batch, pa.ChunkedArray):
        batch = batch.combine_chunks()
    if isinstance(batch, pa.Array):
        if not _arrow_type_ok(batch.type):
            reason = f"{what} has Arrow type {batch.type}: keys must be integers, strings or binary"
            return np.empty(0, np.int64), [(batch, reason)]
        if batch.null_count:
            reason = f"None is not a valid key ({what} has null values)"
            nulls = [(None, reason)] * batch.null_count
            return batch.filter(pc.is_valid(batch)), nulls
        return batch, []
    if isinstance(batch, np.ndarray):
        if batch.ndim != 1:
            # The shape counts the data's keys: name the dimensionality only.
            reason = f"{what} must be one-dimensional, got {batch.ndim} dimensions"
            return np.empty(0, np.int64), [(batch, reason)]
        kind = batch.dtype.kind
        if kind in "iubUS":
            return (batch.astype(np.int64) if kind == "b" else batch), []
        if kind == "O":
            valid, invalid = _split_keys(batch.tolist(), what)
            return KeyBatch(valid), invalid
        reason = f"{what} has dtype {batch.dtype}: keys must be integers, strings or bytes"
        return np.empty(0, np.int64), [(batch, reason)]
    raise TypeError(
        f"{what} must be a numpy array, pyarrow array or KeyBatch, got {type(batch).__name__}"
    )


def _split_keys(keys: list[Any], what: str) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Canonicalise ``keys``; invalid ones are returned as ``(key, reason)`` pairs."""
    valid: list[Any] = []
    invalid: list[tuple[Any, str]] = []
    for key in keys:
        try:
            valid.append(canonical_key(key))
        except TypeError:
            invalid.append((key, _invalid_key_message(key, f"key in {what}")))
    return valid, invalid


_INVALID = object()


def _canonical_or_invalid(key: Any) -> Any:
    # Returning a sentinel (not raising from inside ``except``) keeps the user-facing
    # TypeError free of a chained "during handling" traceback.
    try:
        return canonical_key(key)
    except TypeError:
        return _INVALID


class _Buffer:
    """Keys of one (window[, group]) waiting to be emitted; tracks whether all are int64."""

    __slots__ = ("keys", "all_int64")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.all_int64 = True

    def to_batch(self) -> Any:
        if self.all_int64:
            return np.array(self.keys, dtype=np.int64)
        return KeyBatch(self.keys)


def _at_window_end(batch: Any, window: Any) -> WindowedValue:
    """``batch`` in exactly ``window``, at its ``max_timestamp()`` (as Beam's batching transform)."""
    # WindowedValue (not TimestampedValue) keeps the batch in exactly this window; a
    # TimestampedValue would be re-assigned to windows by the input's WindowFn.
    return WindowedValue(batch, window.max_timestamp(), (window,))


class _BatchKeysDoFn(beam.DoFn):
    """Buffers canonical keys per (window, group) within a bundle and emits batches.

    ``grouped=False``: elements are keys (or records for ``key_fn``); outputs are batches.
    ``grouped=True``: elements are ``(group, key)`` pairs; outputs are ``(group, batch)``.
    """

    def __init__(
        self,
        key_fn: Callable[[Any], Any] | None,
        batch_size: int,
        max_buffered: int,
        dead_letter: bool,
        grouped: bool,
    ):
        self._key_fn = key_fn
        self._batch_size = batch_size
        self._max_buffered = max_buffered
        self._dead_letter = dead_letter
        self._grouped = grouped
        self._buffers: dict[tuple[Any, Hashable], _Buffer] = {}
        self._buffered = 0

    def start_bundle(self) -> None:
        self._buffers = {}
        self._buffered = 0

    def _reject(self, element: Any, reason: str) -> pvalue.TaggedOutput:
        if self._dead_letter:
            return pvalue.TaggedOutput(INVALID_TAG, (element, reason))
        raise TypeError(reason)

    def _wrap(self, group: Any, batch: Any) -> Any:
        return (group, batch) if self._grouped else batch

    def _flush(self, slot: tuple[Any, Hashable]) -> WindowedValue:
        window, group = slot
        buffer = self._buffers.pop(slot)
        self._buffered -= len(buffer.keys)
        return _at_window_end(self._wrap(group, buffer.to_batch()), window)

    def process(self, element: Any, window=beam.DoFn.WindowParam):
        if self._grouped:
            if not isinstance(element, tuple) or len(element) != 2:
                yield self._reject(
                    element,
                    f"expected a (group, key) pair, got an element of type "
                    f"{type(element).__name__!r}",
                )
                return
            group, value = element
            if isinstance(group, np.generic):
                # numpy scalar groups cannot be GroupByKey keys on the FnApiRunner.
                group = group.item()
            if not isinstance(group, Hashable):
                yield self._reject(
                    element, f"group of type {type(group).__name__!r} is not hashable"
                )
                return
        else:
            group, value = None, element

        if self._key_fn is not None:
            try:
                key = self._key_fn(value)
            except Exception as exc:  # noqa: BLE001 - any key_fn failure is a bad element
                if not self._dead_letter:
                    raise user_fn_error("key_fn", exc) from None
                yield pvalue.TaggedOutput(
                    INVALID_TAG, (element, f"key_fn failed: {type(exc).__name__}")
                )
                return
        else:
            key = value

        if is_key_batch(key):
            valid, invalid = validate_key_batch(key)
            for bad, reason in invalid:
                if not self._dead_letter:
                    raise TypeError(reason)
                yield pvalue.TaggedOutput(INVALID_TAG, (bad, reason))
            if len(valid):
                yield self._wrap(group, valid)
            return

        kind = type(key)
        slot = (window, group)
        buffer = self._buffers.get(slot)
        if buffer is None:
            buffer = self._buffers[slot] = _Buffer()
        # Fast paths for the common key types; canonical_key handles (and validates) the rest.
        if kind is str:
            buffer.all_int64 = False
        elif kind is int:
            if buffer.all_int64 and not _INT64_MIN <= key <= _INT64_MAX:
                buffer.all_int64 = False
        else:
            canonical = _canonical_or_invalid(key)
            if canonical is _INVALID:
                if not buffer.keys:
                    del self._buffers[slot]
                yield self._reject(element, _invalid_key_message(key))
                return
            key = canonical
            if type(key) is not int or not _INT64_MIN <= key <= _INT64_MAX:
                buffer.all_int64 = False
        buffer.keys.append(key)
        self._buffered += 1
        if len(buffer.keys) >= self._batch_size:
            yield self._flush(slot)
        elif self._buffered > self._max_buffered:
            # Many small buffers (many windows or groups): emit them all, which bounds memory
            # and keeps the cost amortised O(1) per element.
            for other in list(self._buffers):
                yield self._flush(other)

    def finish_bundle(self):
        for slot in list(self._buffers):
            yield self._flush(slot)


def _check_batch_args(batch_size: Any, max_buffered: Any, key_fn: Any) -> tuple[int, int]:
    check_batch_size(batch_size)
    if max_buffered is None:
        max_buffered = 8 * batch_size
    if isinstance(max_buffered, bool) or not isinstance(max_buffered, int) or max_buffered < 1:
        raise ValueError(f"max_buffered must be a positive int, got {max_buffered!r}")
    if key_fn is not None and not callable(key_fn):
        raise ValueError(f"key_fn must be callable, got {type(key_fn).__name__}")
    return batch_size, max_buffered


class BatchKeys(beam.PTransform):
    """Batch a PCollection of keys (or of records, with ``key_fn``) into arrays of keys.

    Parameters
    ----------
    key_fn
        Optional function from an element to its key (e.g. ``lambda r: r["route"]``). Without
        it, each element is the key.
    batch_size
        Keys per batch (at most); smaller batches are emitted at the end of each bundle.
    dead_letter
        If true, invalid elements go to the ``"invalid"`` output as ``(element, reason)``
        pairs instead of raising ``TypeError``; so do elements on which ``key_fn`` raises.
    max_buffered
        Bound on keys buffered across all windows of a bundle (default ``8 * batch_size``).

    Returns
    -------
    PCollection or DoOutputsTuple
        The batches (numpy ``int64`` arrays when every key is a 64-bit int, else lists of
        canonical keys; numpy/pyarrow array elements pass through). With ``dead_letter=True``,
        a tagged result: ``result["batches"]`` and ``result["invalid"]``.

    Raises
    ------
    TypeError
        At run time, for a key that is ``None``, a float, a list or another unsupported type
        (the message names the type), unless ``dead_letter`` is set.
    ValueError
        At run time, when ``key_fn`` raises on an element, unless ``dead_letter`` is set. The
        message names ``key_fn`` and the exception type, never the original message, which can
        quote the element (likewise the ``"invalid"`` output's reason).
    """

    def __init__(
        self,
        key_fn: Callable[[Any], Any] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        dead_letter: bool = False,
        max_buffered: int | None = None,
    ):
        super().__init__()
        self._batch_size, self._max_buffered = _check_batch_args(batch_size, max_buffered, key_fn)
        self._key_fn = key_fn
        self._dead_letter = bool(dead_letter)

    _grouped = False

    def expand(self, pcoll):
        dofn = _BatchKeysDoFn(
            self._key_fn, self._batch_size, self._max_buffered, self._dead_letter, self._grouped
        )
        out_type = tuple[Any, BATCH_TYPE] if self._grouped else BATCH_TYPE
        pardo = beam.ParDo(dofn).with_output_types(out_type)
        if self._dead_letter:
            return pcoll | pardo.with_outputs(INVALID_TAG, main=MAIN_TAG)
        return pcoll | pardo


class BatchKeysPerGroup(BatchKeys):
    """Batch ``(group, key)`` pairs into ``(group, batch)`` pairs, per group and window.

    Same parameters as :class:`BatchKeys`; ``key_fn`` applies to the value of each pair. numpy
    scalar groups are converted to Python scalars (they cannot be GroupByKey keys on the
    FnApiRunner). Elements that are not 2-tuples are invalid.
    """

    _grouped = True


class _FixedBatchesDoFn(beam.DoFn):
    """Buffers elements per window within a bundle and emits lists of ``batch_size`` of them.

    It registers no metric and logs nothing: the batch sizes it sees are exact counts of the
    bundle's elements.
    """

    def __init__(self, batch_size: int, max_buffered: int) -> None:
        self._batch_size = batch_size
        self._max_buffered = max_buffered
        self._buffers: dict[Any, list[Any]] = {}
        self._buffered = 0

    def start_bundle(self) -> None:
        self._buffers = {}
        self._buffered = 0

    def _flush(self, window: Any) -> WindowedValue:
        batch = self._buffers.pop(window)
        self._buffered -= len(batch)
        return _at_window_end(batch, window)

    def process(self, element: Any, window=beam.DoFn.WindowParam):
        batch = self._buffers.setdefault(window, [])
        batch.append(element)
        self._buffered += 1
        if len(batch) >= self._batch_size:
            yield self._flush(window)
        elif self._buffered > self._max_buffered:
            # Many small buffers (many windows): emit them all, which bounds memory and keeps
            # the cost amortised O(1) per element.
            for other in list(self._buffers):
                yield self._flush(other)

    def finish_bundle(self):
        for window in list(self._buffers):
            yield self._flush(window)


class FixedBatches(beam.PTransform):
    """Batch any elements into lists of at most ``batch_size``, per bundle and window.

    A drop-in for Beam's batching transform at a fixed batch size ``n`` inside DP
    transforms: an element only joins a batch of its own window, each batch is emitted in that
    window at its ``max_timestamp()``, a batch is emitted when it holds ``batch_size`` elements
    and the rest at the end of the bundle. Batch boundaries depend only on the bundle, never on
    timing.

    Parameters
    ----------
    batch_size
        Elements per batch (at most).
    max_buffered
        Bound on elements buffered across all windows of a bundle (default ``8 * batch_size``);
        past it every buffer is emitted.

    Returns
    -------
    PCollection
        Lists of elements.

    Notes
    -----
    **Release channels.** The step registers no Beam metric and writes no log: the number and
    sizes of its batches are exact functions of the data, so they must not leave the pipeline.
    The runner's own system metrics of its input and output (element counts, sampled byte
    sizes) remain visible to whoever operates the runner (``docs/privacy-model.md``).
    """

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, *, max_buffered: int | None = None):
        super().__init__()
        self._batch_size, self._max_buffered = _check_batch_args(batch_size, max_buffered, None)

    def expand(self, pcoll):
        dofn = _FixedBatchesDoFn(self._batch_size, self._max_buffered)
        return pcoll | beam.ParDo(dofn).with_output_types(list[Any])


def unit_weight(weight: Any) -> int:
    """A record's weight: +1 (insertion) or -1 (deletion); the sensitivities assume ``|w| <= 1``."""
    if isinstance(weight, bool) or not isinstance(weight, int | np.integer) or abs(weight) > 1:
        # The weight comes from a record: the message names the parameter, never the value.
        raise ValueError(
            "weight must be -1, 0 or 1 (one record inserts or deletes one item): weight_fn "
            "returned another value"
        )
    return int(weight)
