"""Stable key encoding and seeded, vectorised hashing.

Every sketch in the library identifies a key by the 128-bit MurmurHash3 (x64 variant) of its
*canonical encoding* under a 32-bit seed. The canonical encoding is a deterministic, injective byte
string, so the hash of a key is the same in every process, on every machine and in every run for the
same seed. Python's ``hash()`` is salted per process and is never used.

Canonical encoding (the last byte is a type tag, the payload comes first)::

    int in [-2**63, 2**63)   8 bytes, little-endian two's complement, then b"\\x01"
    other int                minimal little-endian two's complement bytes, then b"\\x02"
    str                      UTF-8 bytes, then b"\\x03"
    bytes / bytearray        the bytes, then b"\\x04"
    tuple                    for each item: LEB128 length of its encoding, its encoding; then b"\\x05"

``bool`` is encoded as ``int`` (``True`` is the key ``1``), matching Python's own equality, so a dict
keyed by Python values and the sketches agree on what "the same key" means. numpy integer, string and
bytes scalars are encoded as their Python counterparts. Anything else (``None``, floats, lists, ...)
raises ``TypeError`` naming the type.

Putting the tag last lets int64 keys be hashed without leaving numpy: their encoding is one 9-byte
MurmurHash3 tail, which :func:`_murmur3_int64` computes over whole arrays with uint64 arithmetic and
which equals ``mmh3`` on the encoded bytes bit for bit (tested).

Row hashes for a depth-``d`` sketch are derived from the two 64-bit halves ``(h1, h2)`` by double
hashing, ``g_i = h1 + i * h2 (mod 2**64)``; the bucket is the high 32 bits of ``g_i`` mapped to
``[0, width)`` by multiply-shift, and the Count Sketch sign of row ``i`` is bit ``63 - i`` of
``h2 * 0x9E3779B97F4A7C15``. Because ``h1`` is uniform and independent of ``h2``, every row's bucket
is independent of its sign.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "MAX_DEPTH",
    "MAX_SEED",
    "MAX_WIDTH",
    "canonical_key",
    "canonical_keys",
    "check_seed",
    "decode_key",
    "encode_key",
    "hash_bytes",
    "hash_key",
    "hash_keys",
    "order_key",
    "row_buckets",
    "row_negative",
    "row_signs",
]

MAX_SEED = 0xFFFFFFFF
MAX_WIDTH = 1 << 31
MAX_DEPTH = 64

_TAG_INT64 = 0x01
_TAG_BIGINT = 0x02
_TAG_STR = 0x03
_TAG_BYTES = 0x04
_TAG_TUPLE = 0x05

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_FMIX1 = np.uint64(0xFF51AFD7ED558CCD)
_FMIX2 = np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def check_seed(seed: int, name: str = "seed") -> int:
    """Validate a hash seed (an int in ``[0, 2**32)``) and return it as a Python int."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"{name} must be an int in [0, 2**32), got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**32), got {seed}")
    return seed


# --------------------------------------------------------------------------------------------
# Canonical encoding
# --------------------------------------------------------------------------------------------


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_leb128(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated length in tuple key encoding")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and shift:
                raise ValueError("overlong length in tuple key encoding")
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("length too large in tuple key encoding")


def canonical_key(key: Any) -> Any:
    """Return the Python value the library treats as ``key``.

    numpy scalars become Python ``int``/``str``/``bytes``, ``bool`` becomes ``int``, ``bytearray``
    becomes ``bytes`` and tuples are canonicalised item by item. Raises ``TypeError`` naming the
    type for anything that is not a supported key.
    """
    if type(key) is str or type(key) is bytes:
        return key
    if isinstance(key, bool | np.bool_):
        return int(key)
    if isinstance(key, int | np.integer):
        return int(key)
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bytes | bytearray):
        return bytes(key)
    if isinstance(key, tuple):
        return tuple(canonical_key(item) for item in key)
    raise TypeError(
        f"unsupported key type {type(key).__name__!r}: keys must be str, bytes, int, bool "
        "or tuples of these"
    )


def canonical_keys(keys: Any) -> list[Any]:
    """Canonicalise a batch of keys (numpy array, pyarrow array or sequence) into a Python list.

    Integer arrays and homogeneous lists of ``str``/``int`` take a fast path; anything else is
    checked key by key and raises ``TypeError`` naming the first unsupported type.
    """
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        if keys.null_count:
            raise TypeError("None is not a valid key: the input array has null values")
        keys = keys.to_pylist()
    elif isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"keys must be one-dimensional, got shape {keys.shape}")
        if keys.dtype.kind == "f":
            raise TypeError(f"unsupported key array dtype {keys.dtype}: floats are not keys")
        if keys.dtype.kind in "iub":
            return keys.astype(np.int64 if keys.dtype.kind == "b" else keys.dtype).tolist()
        keys = keys.tolist()
    elif isinstance(keys, str | bytes):
        raise TypeError(
            f"keys must be a batch (sequence or array) of keys, got a single {type(keys).__name__}"
        )
    elif not isinstance(keys, list):
        keys = list(keys)
    first = type(keys[0]) if keys else str
    if (first is str or first is int) and all(type(k) is first for k in keys):
        return keys
    return [canonical_key(k) for k in keys]


def encode_key(key: Any) -> bytes:
    """Canonical, injective byte encoding of a key (see the module docstring)."""
    if isinstance(key, str):
        return key.encode("utf-8") + b"\x03"
    if isinstance(key, bool | np.bool_):
        key = int(key)
    if isinstance(key, int | np.integer):
        key = int(key)
        if _INT64_MIN <= key <= _INT64_MAX:
            return key.to_bytes(8, "little", signed=True) + b"\x01"
        nbytes = (key.bit_length() + 8) // 8
        return key.to_bytes(nbytes, "little", signed=True) + b"\x02"
    if isinstance(key, bytes | bytearray | np.bytes_):
        return bytes(key) + b"\x04"
    if isinstance(key, np.str_):
        return str(key).encode("utf-8") + b"\x03"
    if isinstance(key, tuple):
        parts = []
        for item in key:
            enc = encode_key(item)
            parts.append(_leb128(len(enc)))
            parts.append(enc)
        parts.append(b"\x05")
        return b"".join(parts)
    raise TypeError(
        f"unsupported key type {type(key).__name__!r}: keys must be str, bytes, int, bool "
        "or tuples of these"
    )


def decode_key(data: bytes) -> Any:
    """Inverse of :func:`encode_key`. Raises ``ValueError`` on bytes no key encodes to."""
    if not data:
        raise ValueError("empty key encoding")
    tag = data[-1]
    body = data[:-1]
    if tag == _TAG_INT64:
        if len(body) != 8:
            raise ValueError("int64 key encoding must have 8 payload bytes")
        return int.from_bytes(body, "little", signed=True)
    if tag == _TAG_BIGINT:
        value = int.from_bytes(body, "little", signed=True)
        if _INT64_MIN <= value <= _INT64_MAX or encode_key(value) != data:
            raise ValueError("non-canonical big-int key encoding")
        return value
    if tag == _TAG_STR:
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"invalid UTF-8 in str key encoding: {exc}") from None
    if tag == _TAG_BYTES:
        return bytes(body)
    if tag == _TAG_TUPLE:
        items = []
        pos, end = 0, len(body)
        while pos < end:
            length, pos = _read_leb128(body, pos, end)
            if pos + length > end:
                raise ValueError("truncated item in tuple key encoding")
            items.append(decode_key(body[pos : pos + length]))
            pos += length
        return tuple(items)
    raise ValueError(f"unknown key type tag {tag:#04x}")


def order_key(key: Any) -> bytes:
    """A fixed, data-independent total order on keys: their canonical encoding, bytewise."""
    return encode_key(key)


# --------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------


def hash_bytes(data: bytes, seed: int) -> tuple[int, int]:
    """MurmurHash3_x64_128 of ``data`` under ``seed`` as two unsigned 64-bit ints ``(h1, h2)``."""
    return mmh3.mmh3_x64_128_utupledigest(data, seed)


def hash_key(key: Any, seed: int) -> tuple[int, int]:
    """Hash one key (its canonical encoding) to ``(h1, h2)``."""
    return mmh3.mmh3_x64_128_utupledigest(encode_key(key), seed)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix64(k: np.ndarray) -> np.ndarray:
    k ^= k >> np.uint64(33)
    k *= _FMIX1
    k ^= k >> np.uint64(33)
    k *= _FMIX2
    k ^= k >> np.uint64(33)
    return k


def _murmur3_int64(values: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 of the 9-byte canonical encoding of each int64, over whole arrays.

    The encoding is shorter than one 16-byte block, so only MurmurHash3's tail step runs: bytes
    0..7 (the value) form ``k1`` and byte 8 (the tag) forms ``k2``.
    """
    k1 = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64).copy()
    s = np.uint64(seed)
    with np.errstate(over="ignore"):
        k2 = np.uint64(_TAG_INT64) * _C2
        k2 = np.uint64((int(k2) << 33 | int(k2) >> 31) & 0xFFFFFFFFFFFFFFFF) * _C1
        h2_0 = s ^ k2
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 = k1 ^ s
        h1 ^= np.uint64(9)
        h2 = np.full_like(h1, h2_0 ^ np.uint64(9))
        h1 += h2
        h2 += h1
        h1 = _fmix64(h1)
        h2 = _fmix64(h2)
        h1 += h2
        h2 += h1
    return h1, h2


def _hash_python_keys(keys: Iterable[Any], seed: int) -> tuple[np.ndarray, np.ndarray]:
    digest = mmh3.mmh3_x64_128_utupledigest
    pairs = [digest(encode_key(k), seed) for k in keys]
    if not pairs:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    arr = np.array(pairs, dtype=np.uint64)
    return arr[:, 0].copy(), arr[:, 1].copy()


def _hash_arrow(arr: pa.Array, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise TypeError("None is not a valid key: the input array has null values")
    typ = arr.type
    if pa.types.is_integer(typ):
        if pa.types.is_uint64(typ) and len(arr) and pc.max(arr).as_py() > _INT64_MAX:
            return _hash_python_keys(arr.to_pylist(), seed)
        return _murmur3_int64(arr.to_numpy(zero_copy_only=False).astype(np.int64), seed)
    if pa.types.is_boolean(typ):
        return _murmur3_int64(arr.to_numpy(zero_copy_only=False).astype(np.int64), seed)
    if pa.types.is_dictionary(typ):
        dict_h1, dict_h2 = _hash_arrow(arr.dictionary, seed)
        idx = arr.indices.to_numpy(zero_copy_only=False)
        return dict_h1[idx], dict_h2[idx]
    if (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or (pa.types.is_large_binary(typ))
    ):
        # Hash each distinct value once: real key streams repeat keys, so this is the fast path.
        encoded = pc.dictionary_encode(arr)
        tag = b"\x03" if pa.types.is_string(typ) or pa.types.is_large_string(typ) else b"\x04"
        digest = mmh3.mmh3_x64_128_utupledigest
        values = encoded.dictionary.to_pylist()
        if tag == b"\x03":
            pairs = [digest(v.encode("utf-8") + tag, seed) for v in values]
        else:
            pairs = [digest(v + tag, seed) for v in values]
        table = np.array(pairs, dtype=np.uint64).reshape(-1, 2)
        idx = encoded.indices.to_numpy(zero_copy_only=False)
        return table[idx, 0], table[idx, 1]
    raise TypeError(f"unsupported key column type {typ}: keys must be integers, strings or binary")


def hash_keys(keys: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash a batch of keys to two uint64 arrays ``(h1, h2)``.

    Parameters
    ----------
    keys
        A numpy array (integer or bool dtype: fully vectorised; str/bytes/object dtype: per distinct
        value), a pyarrow ``Array``/``ChunkedArray`` (integer, string or binary), or any sequence of
        supported keys (see :func:`encode_key`).
    seed
        Hash seed in ``[0, 2**32)``.

    Returns
    -------
    (h1, h2)
        The two 64-bit halves of MurmurHash3_x64_128 of each key's canonical encoding.

    Raises
    ------
    TypeError
        If a key is ``None`` or of an unsupported type (the message names the type).
    """
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        return _hash_arrow(keys, seed)
    if isinstance(keys, np.ndarray):
        if keys.ndim == 1 and keys.dtype.kind in "USO" and len(keys) == 0:
            return np.empty(0, np.uint64), np.empty(0, np.uint64)
        if keys.ndim != 1:
            raise ValueError(f"keys must be one-dimensional, got shape {keys.shape}")
        kind = keys.dtype.kind
        if kind in "ib":
            return _murmur3_int64(keys.astype(np.int64, copy=False), seed)
        if kind == "u":
            if keys.dtype.itemsize < 8 or not len(keys) or keys.max() <= _INT64_MAX:
                return _murmur3_int64(keys.astype(np.int64), seed)
            return _hash_python_keys(keys.tolist(), seed)
        if kind in "US":
            return _hash_arrow(pa.array(keys.tolist()), seed)
        if kind == "O":
            return hash_keys(keys.tolist(), seed)
        raise TypeError(f"unsupported key array dtype {keys.dtype}: floats are not keys")
    if isinstance(keys, str | bytes):
        raise TypeError(
            f"keys must be a batch (sequence or array) of keys, got a single {type(keys).__name__}"
        )
    if not isinstance(keys, Sequence):
        keys = list(keys)
    if keys and all(type(k) is str for k in keys):
        return _hash_arrow(pa.array(keys, type=pa.string()), seed)
    if keys and all(type(k) is int for k in keys):
        try:
            arr = np.array(keys, dtype=np.int64)
        except OverflowError:
            return _hash_python_keys(keys, seed)
        return _murmur3_int64(arr, seed)
    return _hash_python_keys(keys, seed)


def row_buckets(h1: np.ndarray, h2: np.ndarray, depth: int, width: int) -> np.ndarray:
    """Bucket of each key in each of ``depth`` rows: an int64 array of shape ``(depth, n)``."""
    n = len(h1)
    out = np.empty((depth, n), dtype=np.int64)
    w = np.uint64(width)
    shift = np.uint64(32)
    with np.errstate(over="ignore"):
        g = h1.copy()
        for i in range(depth):
            if i:
                g += h2
            out[i] = ((g >> shift) * w) >> shift
    return out


def row_negative(h2: np.ndarray, row: int) -> np.ndarray:
    """1 (int64) where the Count Sketch sign of ``row`` is -1, else 0: bit ``63 - row`` of ``h2 * phi``.

    Signs use ``h2`` only, which keeps them independent of the buckets (see the module docstring).
    """
    with np.errstate(over="ignore"):
        mixed = h2 * _GOLDEN
    return ((mixed >> np.uint64(63 - row)) & np.uint64(1)).view(np.int64)


def row_signs(h2: np.ndarray, depth: int) -> np.ndarray:
    """Count Sketch sign (+1/-1, int64) of each key in each of ``depth`` rows, shape ``(depth, n)``."""
    out = np.empty((depth, len(h2)), dtype=np.int64)
    for i in range(depth):
        np.subtract(1, 2 * row_negative(h2, i), out=out[i])
    return out
