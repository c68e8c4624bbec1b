"""Key order, batch counting and batch coding for :class:`~.sketch.MisraGries`.

Kept apart from the summary because these functions only reshape a batch of keys (numpy, Arrow or
Python) into what the update loops consume, and never touch the summary's state.

:func:`key_order` is the fixed, data-independent order of [LT23, Algorithm 1];
:func:`multiset_counts` and :func:`multiset` give a batch's distinct keys in that order with their
weights (for :meth:`~.sketch.MisraGries.update_multiset`); :func:`coded_batch` codes a batch and
the held keys as int64 in that order (for the C loop of :mod:`.kernel`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_dpsketch.hashing import canonical_keys, encode_key, is_string_or_binary
from beam_dpsketch.sketches.linear.base import validate_counts

__all__ = [
    "INT64_MAX",
    "Distinct",
    "as_list",
    "coded_batch",
    "gather",
    "key_order",
    "multiset",
    "multiset_counts",
    "sorted_keys",
]

# The largest int64: the bound on keys the int64 paths take, and on a sketch's totals.
INT64_MAX = (1 << 63) - 1
# float64 bincount sums are exact while every partial sum stays below 2**53.
_FLOAT_EXACT = float(1 << 53)


_TYPE_RANK = {int: 1, str: 2, bytes: 3}


def key_order(key: Any) -> tuple[int, Any]:
    """The fixed, data-independent total order on user keys used to pick the smallest zero key.

    ints (numerically), strs (by code point, which is also their UTF-8 byte order), bytes, then
    tuples (by canonical encoding); the dummy slots come before every user key. [LT23, Algorithm 1]
    allows any fixed order that does not depend on the stream; this one sorts natively for
    homogeneous keys, which docs/algorithms.md#mg-order's encoding-bytes order cannot (it was 60%
    of the update time).
    """
    rank = _TYPE_RANK.get(type(key))
    if rank is None:
        return (4, encode_key(key))
    return (rank, key)


def sorted_keys(keys: list[Any]) -> list[Any]:
    """Sort user keys by :func:`key_order`, natively when they all share one of int/str/bytes."""
    if keys and type(keys[0]) in _TYPE_RANK:
        # Native order is :func:`key_order` when all keys are ints, all strs or all bytes; a list
        # mixing types always compares two of them (a sorted output compares every adjacent
        # pair), and Python refuses that, so the fallback below runs.
        try:
            return sorted(keys)
        except TypeError:
            pass
    return sorted(keys, key=key_order)


# Key types whose Python equality and hash agree with their canonical identity, so counting them
# in a dict cannot merge two different canonical keys (a float 1.0 would merge into the int 1).
_DICT_SAFE = frozenset((int, str, bytes))


def multiset_counts(keys: Any, counts: Any = None) -> tuple[list[Any], list[int]]:
    """The distinct canonical keys of a batch in the order of :func:`key_order`, with their weights.

    Every distinct key is encoded and compared once: integer numpy/Arrow arrays and lists of
    ``int`` are counted with ``bincount`` (compact ranges) or ``np.unique``, string and binary
    Arrow arrays and lists of ``str`` with ``pyarrow.compute.value_counts`` and a bytewise sort
    (bytewise UTF-8 order is code point order), other lists of ``str``/``bytes`` with a C-level
    dict count whose keys are checked once each.

    Parameters
    ----------
    keys
        A batch of keys (numpy array, pyarrow array or sequence; see :meth:`MisraGries.update`).
    counts
        Optional positive integer weight per key.

    Returns
    -------
    (distinct, weights)
        Python lists: the distinct canonical keys in :func:`key_order` and their total weights
        (all ``>= 1``).

    Raises
    ------
    TypeError
        For unsupported keys (naming the type) or non-integer counts.
    ValueError
        For non-positive counts or a counts array of the wrong shape.
    """
    distinct, weights = multiset(keys, counts)
    return as_list(distinct), weights


# Distinct keys as returned by multiset: a list, or an int64 numpy array / Arrow array of them.
Distinct = list[Any] | np.ndarray | pa.Array


def as_list(distinct: Distinct) -> list[Any]:
    """The distinct keys of :func:`multiset` as a list of Python keys."""
    if isinstance(distinct, list):
        return distinct
    if isinstance(distinct, np.ndarray):
        return distinct.tolist()
    return distinct.to_pylist()


def gather(distinct: Distinct, ranks: list[int]) -> list[Any]:
    """The keys at ``ranks`` of ``distinct``, as Python keys."""
    if isinstance(distinct, list):
        return [distinct[j] for j in ranks]
    if isinstance(distinct, np.ndarray):
        return distinct[np.array(ranks, dtype=np.int64)].tolist()
    return distinct.take(pa.array(ranks, pa.int64())).to_pylist()


def multiset(keys: Any, counts: Any = None) -> tuple[Distinct, list[int]]:
    """:func:`multiset_counts`, with the distinct keys left in numpy or Arrow when they come
    from there (converting them all to Python objects is needless when few are kept)."""
    weights = None
    if counts is not None:
        n = len(keys) if not isinstance(keys, str | bytes) else 1
        weights = validate_counts(counts, n)
        if len(weights) and weights.min() < 1:
            raise ValueError("Misra-Gries counts must be positive integers (insert-only)")
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if isinstance(keys, pa.Array):
        if keys.null_count:
            raise TypeError("None is not a valid key: the input array has null values")
        typ = keys.type
        if pa.types.is_dictionary(typ):
            # Count the indices, then weigh the dictionary entries they use (the dictionary may
            # repeat a value: the weighted call sums those).
            idx = keys.indices.to_numpy(zero_copy_only=False)
            per_entry = np.bincount(idx, minlength=len(keys.dictionary))
            if weights is not None:
                per_entry = np.zeros(len(keys.dictionary), np.int64)
                np.add.at(per_entry, idx, weights)
            used = np.flatnonzero(per_entry)
            return multiset(keys.dictionary.take(pa.array(used)), per_entry[used])
        if is_string_or_binary(typ):
            return _arrow_var_counts(keys, weights)
    ints = _int_array(keys)
    if ints is not None:
        return _int_counts(ints, weights)
    if isinstance(keys, list) and keys and type(keys[0]) is str:
        # Arrow's hash table and sort beat a dict of str objects; Arrow infers ``string`` only
        # when every value is a str (str mixed with bytes infers binary: not these keys).
        try:
            arr = pa.array(keys)
        except (pa.ArrowException, TypeError, ValueError):
            arr = None
        if arr is not None and arr.type == pa.string() and not arr.null_count:
            return _arrow_var_counts(arr, weights)
    if isinstance(keys, list) and keys and weights is None and set(map(type, keys)) <= _DICT_SAFE:
        # Counter's C loop; only the distinct keys need sorting (ints, strs and bytes never
        # compare equal across types, so one dict holds them apart).
        tally = Counter(keys)
        distinct = sorted_keys(list(tally))
        return distinct, [tally[x] for x in distinct]
    canon = canonical_keys(keys)
    tally: dict[Any, int] = {}
    if weights is None:
        for x in canon:
            tally[x] = tally.get(x, 0) + 1
    else:
        if len(weights) != len(canon):
            raise ValueError(f"counts must have one entry per key ({len(canon)})")
        for x, w in zip(canon, weights.tolist(), strict=True):
            tally[x] = tally.get(x, 0) + w
    distinct = sorted_keys(list(tally))
    return distinct, [tally[x] for x in distinct]


def _int_counts(keys: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, list[int]]:
    """:func:`multiset_counts` of an int64 array: ascending keys, exact int64 totals."""
    if not len(keys):
        return [], []
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo <= 2 * len(keys) + (1 << 16):
        # bincount is O(n + range) and several times faster than np.unique's sort.
        shifted = keys - lo
        if weights is None:
            tally = np.bincount(shifted)
        elif int(weights.max()) * len(keys) < _FLOAT_EXACT:
            tally = np.bincount(shifted, weights=weights).astype(np.int64)
        else:
            tally = np.zeros(hi - lo + 1, np.int64)
            np.add.at(tally, shifted, weights)
        present = np.flatnonzero(tally)
        return present + lo, tally[present].tolist()
    if weights is None:
        distinct, tally = np.unique(keys, return_counts=True)
        return distinct, tally.tolist()
    distinct, inverse = np.unique(keys, return_inverse=True)
    tally = np.zeros(len(distinct), np.int64)
    np.add.at(tally, inverse, weights)
    return distinct, tally.tolist()


def _arrow_var_counts(arr: pa.Array, weights: np.ndarray | None) -> tuple[pa.Array, list[int]]:
    """:func:`multiset_counts` of a string or binary Arrow array (bytewise sorted keys)."""
    if weights is None:
        vc = pc.value_counts(arr)
        values, tally = vc.field("values"), vc.field("counts")
    else:
        grouped = (
            pa.table({"k": arr, "w": pa.array(weights, pa.int64())})
            .group_by("k", use_threads=False)
            .aggregate([("w", "sum")])
        )
        values, tally = grouped.column("k"), grouped.column("w_sum")
    order = pc.sort_indices(values)
    return values.take(order), tally.take(order).to_pylist()


def _int_array(keys: Any) -> np.ndarray | None:
    """The int64 values of an integer batch whose canonical keys are exactly those values
    (numpy or Arrow integers or booleans, a list of Python ints), else None."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if isinstance(keys, pa.Array):
        typ = keys.type
        if keys.null_count:
            return None
        if pa.types.is_dictionary(typ):
            values = _int_array(keys.dictionary)
            if values is None:
                return None
            return values[keys.indices.to_numpy(zero_copy_only=False)]
        if not (pa.types.is_integer(typ) or pa.types.is_boolean(typ)):
            return None
        keys = keys.to_numpy(zero_copy_only=False)
    elif isinstance(keys, list):
        if not keys or type(keys[0]) is not int:
            return None
        try:
            keys = np.asarray(keys)
        except (ValueError, OverflowError, TypeError):
            return None
        if keys.dtype.kind not in "ib":
            return None  # floats, big ints, mixed types: the Python path checks each key
    if not isinstance(keys, np.ndarray) or keys.ndim != 1 or keys.dtype.kind not in "iub":
        return None
    if keys.dtype.kind == "u" and keys.dtype.itemsize == 8 and len(keys) and keys.max() > INT64_MAX:
        return None
    return keys.astype(np.int64, copy=False)


def _var_array(keys: Any) -> pa.Array | None:
    """A string or binary Arrow batch (plain, chunked or dictionary-encoded) as a
    dictionary-encoded Arrow array, else None."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if not isinstance(keys, pa.Array) or keys.null_count:
        return None
    typ = keys.type
    value_type = typ.value_type if pa.types.is_dictionary(typ) else typ
    if not is_string_or_binary(value_type):
        return None
    return keys if pa.types.is_dictionary(typ) else keys.dictionary_encode()


def coded_batch(keys: Any, held: dict[Any, int]) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """``(codes, held_codes, decode)``: the batch and the held keys as int64 codes whose numeric
    order is :func:`key_order`, and the map from codes back to keys; None when the keys are not
    all ints, all strs or all bytes (the Python loop handles those, and reports bad keys).

    Ints are their own codes. Strings (or bytes) are coded by their rank among the sorted
    distinct values of the batch and the held keys: bytewise order is code-point order for
    UTF-8, which is how :func:`key_order` compares strs.
    """
    ints = _int_array(keys)
    types = set(map(type, held))
    if ints is not None:
        if not types <= {int}:
            return None
        try:
            held_codes = np.fromiter(held, dtype=np.int64, count=len(held))
        except OverflowError:
            return None  # a held int beyond int64
        return ints, held_codes, np.ndarray.tolist
    encoded = _var_array(keys)
    if encoded is None:
        return None
    values = encoded.dictionary
    is_str = pa.types.is_string(values.type) or pa.types.is_large_string(values.type)
    if not types <= {str if is_str else bytes}:
        return None
    wide = pa.large_string() if is_str else pa.large_binary()
    values = values.cast(wide)
    held_arr = pa.array(list(held), type=wide)
    universe = pc.unique(pa.concat_arrays([values, held_arr]))
    universe = universe.take(pc.sort_indices(universe))
    ranks = pc.index_in(values, value_set=universe).to_numpy(zero_copy_only=False)
    codes = ranks.astype(np.int64)[encoded.indices.to_numpy(zero_copy_only=False)]
    held_codes = pc.index_in(held_arr, value_set=universe).to_numpy(zero_copy_only=False)

    def decode(out: np.ndarray) -> list[Any]:
        return universe.take(pa.array(out, pa.int64())).to_pylist()

    return codes, held_codes.astype(np.int64), decode
