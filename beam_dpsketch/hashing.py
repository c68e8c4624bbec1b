"""Stable key encoding and seeded, vectorised hashing.

Every sketch in the library identifies a key by the 128-bit MurmurHash3 (x64 variant) of its
*canonical encoding* under a 32-bit seed. The canonical encoding is a deterministic, injective byte
string, so the hash of a key is the same in every process, on every machine and in every run for the
same seed. Python's built-in ``hash`` is salted per process and is never used.

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
which equals ``mmh3`` on the encoded bytes bit for bit (tested). Strings and bytes in Arrow arrays
are hashed the same way by :func:`_murmur3_var`, which runs the MurmurHash3 block loop over all
values at once, reading the Arrow buffers in place. Lists of ``str`` are hashed by the compiled loop
of :mod:`beam_dpsketch.murmur3`, which reads each string's UTF-8 in place.

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

from beam_dpsketch.checks import check_int
from beam_dpsketch.extensions import load_extension

# The compiled MurmurHash3 loop, or its bit-identical pure-Python fallback (no C compiler).
murmur3 = load_extension("beam_dpsketch.murmur3", "beam_dpsketch.murmur3_fallback")

__all__ = [
    "MAX_DEPTH",
    "MAX_SEED",
    "MAX_WIDTH",
    "canonical_key",
    "canonical_keys",
    "check_key_like",
    "check_seed",
    "decode_key",
    "derived_seed",
    "encode_key",
    "hash_bytes",
    "hash_key",
    "hash_keys",
    "is_string_or_binary",
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
_N1 = np.uint64(0x52DCE729)
_N2 = np.uint64(0x38495AB5)
_FIVE = np.uint64(5)
_SHIFT = tuple(np.uint64(r) for r in range(65))
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def check_seed(seed: int, name: str = "seed") -> int:
    """Validate a hash seed (an int in ``[0, 2**32)``) and return it as a Python int."""
    return check_int(seed, name, 0, MAX_SEED)


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

    Integer arrays, Arrow string/binary/boolean arrays (plain, chunked or dictionary-encoded) and
    homogeneous lists of ``str``/``int`` take a fast path; anything else is checked key by key
    and raises ``TypeError`` naming the first unsupported type. The result is the same list of
    values on every path; repeated Arrow strings may share one object.
    """
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        if keys.null_count:
            raise TypeError("None is not a valid key: the input array has null values")
        typed = _arrow_canonical_keys(keys)
        if typed is not None:
            return typed
        keys = keys.to_pylist()
    elif isinstance(keys, np.ndarray):
        if keys.ndim != 1:
            raise ValueError(f"keys must be one-dimensional, got shape {keys.shape}")
        if keys.dtype.kind == "f":
            raise TypeError(f"unsupported key array dtype {keys.dtype}: floats are not keys")
        if keys.dtype.kind == "b":
            return keys.astype(np.int64).tolist()
        if keys.dtype.kind in "iu":
            return keys.tolist()
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


# Dictionary-encoding a string/binary array pays when its values repeat; it costs about twice
# ``to_pylist`` when they do not, so a prefix of the array decides (the keys are the same
# either way: only the speed depends on the guess).
_SHARED_MIN_LEN = 1 << 12
_SHARED_SAMPLE = 1 << 11


def _repeats_often(arr: pa.Array) -> bool:
    """Whether a prefix of ``arr`` has at most half as many distinct values as values."""
    sample = arr.slice(0, _SHARED_SAMPLE)
    return pc.count_distinct(sample).as_py() * 2 <= len(sample)


def _arrow_canonical_keys(arr: pa.Array | pa.ChunkedArray) -> list[Any] | None:
    """:func:`canonical_keys` of a null-free Arrow array whose type fixes the key type, else None.

    Integer arrays convert through numpy (Python ints, as ``to_pylist`` gives, without its
    per-value scalar path), booleans become ints, and string/binary values are all ``str`` or
    all ``bytes``, so no per-key type check is needed. A dictionary-encoded array converts each
    dictionary entry once and gathers the entries by index (repeated keys share one object).
    Other types return None: the caller checks them key by key.
    """
    typ = arr.type
    if isinstance(arr, pa.ChunkedArray):
        if not (pa.types.is_integer(typ) or pa.types.is_boolean(typ) or _var_tag(typ) is not None):
            return None
        out: list[Any] = []
        for chunk in arr.chunks:
            out.extend(_arrow_canonical_keys(chunk))
        return out
    if pa.types.is_integer(typ):
        return arr.to_numpy(zero_copy_only=False).tolist()
    if pa.types.is_boolean(typ):
        return arr.to_numpy(zero_copy_only=False).astype(np.int64).tolist()
    if _var_tag(typ) is not None:
        if len(arr) >= _SHARED_MIN_LEN and _repeats_often(arr):
            # One Python object per distinct value: fewer conversions, and the callers' dict
            # lookups find an already hashed, identical object.
            return _arrow_canonical_keys(pc.dictionary_encode(arr))
        return arr.to_pylist()
    if pa.types.is_dictionary(typ):
        dictionary = arr.dictionary
        # A null dictionary entry is a None key only where an index uses it: the key-by-key
        # path reports that exactly.
        if dictionary.null_count:
            return None
        entries = _arrow_canonical_keys(dictionary)
        if entries is None:
            return None
        table = np.empty(len(entries), dtype=object)
        table[:] = entries
        return table[arr.indices.to_numpy(zero_copy_only=False)].tolist()
    return None


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
        except UnicodeDecodeError:
            # The codec's message quotes the offending byte: key bytes are data, never shown.
            raise ValueError("invalid UTF-8 in str key encoding") from None
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


def check_key_like(value: Any, name: str) -> Any:
    """Return ``value`` unchanged if it has a canonical encoding (usable as a release-id part).

    Accepts exactly what :func:`encode_key` accepts: ``str``, ``bytes``,
    ``int`` (including numpy integers) and (nested) tuples of these.

    Raises
    ------
    TypeError
        ``"<name>: <encode_key's message>"`` if ``value`` cannot be encoded.
    """
    try:
        encode_key(value)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    return value


def hash_bytes(data: bytes, seed: int) -> tuple[int, int]:
    """MurmurHash3_x64_128 of ``data`` under ``seed`` as two unsigned 64-bit ints ``(h1, h2)``."""
    return mmh3.mmh3_x64_128_utupledigest(data, seed)


def derived_seed(seed: int, domain: bytes, index: int) -> int:
    """A 32-bit seed for part ``index`` of a structure built with ``seed``.

    The low 32 bits of MurmurHash3 of ``domain + encode_key(index)`` under ``seed``: the parts of
    one structure (the levels of a tree of sketches) get seeds that look independent, and two
    structures with different ``domain`` tags never share one by construction.
    """
    h1, _ = hash_bytes(domain + encode_key(int(index)), check_seed(seed))
    return int(h1 & 0xFFFFFFFF)


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


# Strings and bytes: MurmurHash3_x64_128 over the values of an Arrow array, vectorised over values.
#
# Values are hashed in chunks of _VAR_CHUNK (temporaries stay in cache). A chunk's bytes are copied
# into a zero-padded uint64 buffer ``words``, so the unaligned little-endian word at byte ``s`` is
# ``words[s >> 3] >> 8 (s & 7) | words[(s >> 3) + 1] << (64 - 8 (s & 7))`` (numpy shifts by 64
# give 0).
# Values are sorted by their number of full 16-byte blocks (descending), so the rows still in the
# body loop at block ``j`` are a prefix. The type tag is never written to the buffer: it is or-ed
# into the word holding it (the tail, or the last body block when the encoded length is a multiple of
# 16). Bytes past a value's end are masked off, so zero-padded tail words reproduce the reference
# switch: zero tail words leave ``h1``/``h2`` unchanged, like the skipped cases.

_VAR_CHUNK = 1 << 14
# Values whose encoding is longer than this go to mmh3 one by one: C hashes long runs faster than the
# numpy body loop, whose per-iteration overhead would dominate for a few long values.
_VAR_MAX_VECTOR_LEN = 256
_LOW56 = np.uint64(0x00FFFFFFFFFFFFFF)


def _tail_tables(tag: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Masks and tag words for the tail ``k1``/``k2``, indexed by the tail length 0..15 (incl. tag)."""
    mask1, tag1, mask2, tag2 = (np.zeros(16, np.uint64) for _ in range(4))
    for tail in range(16):
        raw = tail - 1  # payload bytes in the tail; the tag byte follows them
        mask1[tail] = (1 << (8 * min(max(raw, 0), 8))) - 1
        mask2[tail] = (1 << (8 * min(max(raw - 8, 0), 8))) - 1
        if 0 <= raw < 8:
            tag1[tail] = tag << (8 * raw)
        elif raw >= 8:
            tag2[tail] = tag << (8 * (raw - 8))
    return mask1, tag1, mask2, tag2


_TAIL_TABLES = {_TAG_STR: _tail_tables(_TAG_STR), _TAG_BYTES: _tail_tables(_TAG_BYTES)}


def _rotl_(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    """``x = rotl64(x, r)`` in place (``tmp``: scratch of the same shape)."""
    np.right_shift(x, _SHIFT[64 - r], out=tmp)
    np.left_shift(x, _SHIFT[r], out=x)
    x |= tmp


def _fmix64_(k: np.ndarray, tmp: np.ndarray) -> None:
    for mult in (_FMIX1, _FMIX2):
        np.right_shift(k, _SHIFT[33], out=tmp)
        k ^= tmp
        k *= mult
    np.right_shift(k, _SHIFT[33], out=tmp)
    k ^= tmp


def _mix_k1_into(h1: np.ndarray, k1: np.ndarray, tmp: np.ndarray) -> None:
    k1 *= _C1
    _rotl_(k1, 31, tmp)
    k1 *= _C2
    h1 ^= k1


def _mix_k2_into(h2: np.ndarray, k2: np.ndarray, tmp: np.ndarray) -> None:
    k2 *= _C2
    _rotl_(k2, 33, tmp)
    k2 *= _C1
    h2 ^= k2


def _load_words(
    words: np.ndarray,
    index: np.ndarray,
    shift: np.ndarray,
    co_shift: np.ndarray,
    out: np.ndarray,
    tmp: np.ndarray,
) -> None:
    """``out`` = the unaligned little-endian uint64 at word ``index`` plus byte ``shift / 8``.

    Increments ``index`` by one, so a second call loads the next 8 bytes.
    """
    np.take(words, index, out=out, mode="clip")
    out >>= shift
    index += 1
    np.take(words, index, out=tmp, mode="clip")
    tmp <<= co_shift
    out |= tmp


def _murmur3_var_chunk(
    data: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    tag: int,
    seed: np.uint64,
    h1: np.ndarray,
    h2: np.ndarray,
) -> None:
    """Hash ``data[starts[i]:starts[i] + lengths[i]] + bytes([tag])`` into ``h1[i]``, ``h2[i]``.

    ``starts`` must be non-decreasing, with values not overlapping, and every encoded length
    ``lengths[i] + 1`` at most ``_VAR_MAX_VECTOR_LEN``.
    """
    n = len(starts)
    first, last = int(starts[0]), int(starts[-1] + lengths[-1])
    words = np.zeros((last - first + 7) // 8 + 3, np.uint64)
    words.view(np.uint8)[: last - first] = data[first:last]
    starts = starts - first
    enc_len = lengths + 1
    blocks = enc_len >> 4
    tail_len = enc_len & 15
    tmp = np.empty(n, np.uint64)
    k1 = np.empty(n, np.uint64)
    k2 = np.empty(n, np.uint64)
    h1.fill(seed)
    h2.fill(seed)
    max_blocks = int(blocks.max())
    order = None
    if max_blocks:
        if int(blocks.min()) != max_blocks:
            order = np.argsort(-blocks.astype(np.int8), kind="stable")
            starts, enc_len, blocks, tail_len = (
                starts[order],
                enc_len[order],
                blocks[order],
                tail_len[order],
            )
            # active[j] = number of values with more than j full blocks: a prefix after sorting.
            active = n - np.cumsum(np.bincount(blocks, minlength=max_blocks + 1))
        else:
            active = np.full(max_blocks + 1, n)
            active[-1] = 0
        tag_in_body = tail_len == 0
        shift = ((starts & 7) << 3).view(np.uint64)
        co_shift = _SHIFT[64] - shift
        word0 = starts >> 3
        tag_word = np.uint64(tag << 56)
        for j in range(max_blocks):
            c, c_next = int(active[j]), int(active[j + 1])
            index = word0[:c] + 2 * j
            a1, a2, t, g1, g2 = k1[:c], k2[:c], tmp[:c], h1[:c], h2[:c]
            _load_words(words, index, shift[:c], co_shift[:c], a1, t)
            _load_words(words, index, shift[:c], co_shift[:c], a2, t)
            # Rows c_next..c end with this block; where the encoding fills it, its last byte is
            # the tag (the data buffer holds the next value's first byte there).
            fix = tag_in_body[c_next:c]
            if fix.any():
                last_k2 = a2[c_next:c]
                last_k2[fix] = (last_k2[fix] & _LOW56) | tag_word
            _mix_k1_into(g1, a1, t)
            _rotl_(g1, 27, t)
            g1 += g2
            g1 *= _FIVE
            g1 += _N1
            _mix_k2_into(g2, a2, t)
            _rotl_(g2, 31, t)
            g2 += g1
            g2 *= _FIVE
            g2 += _N2
    mask1, tag1, mask2, tag2 = _TAIL_TABLES[tag]
    tail_start = starts + (blocks << 4)
    index = tail_start >> 3
    shift = ((tail_start & 7) << 3).view(np.uint64)
    co_shift = _SHIFT[64] - shift
    _load_words(words, index, shift, co_shift, k1, tmp)
    if (tail_len > 8).any():  # else every tail (tag included) fits k1: k2 = 0 is a no-op
        _load_words(words, index, shift, co_shift, k2, tmp)
        k2 &= mask2[tail_len]
        k2 |= tag2[tail_len]
        _mix_k2_into(h2, k2, tmp)
    k1 &= mask1[tail_len]
    k1 |= tag1[tail_len]
    _mix_k1_into(h1, k1, tmp)
    enc_len = enc_len.view(np.uint64)
    h1 ^= enc_len
    h2 ^= enc_len
    h1 += h2
    h2 += h1
    _fmix64_(h1, tmp)
    _fmix64_(h2, tmp)
    h1 += h2
    h2 += h1
    if order is not None:
        h1[order], h2[order] = h1.copy(), h2.copy()


def _murmur3_var(arr: pa.Array, tag: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 of ``value + bytes([tag])`` for each value of a string/binary array.

    Reads the Arrow offsets and data buffers in place (any array offset; nulls are not checked)
    and equals ``mmh3`` on the encoded bytes bit for bit.
    """
    n = len(arr)
    h1 = np.empty(n, np.uint64)
    h2 = np.empty(n, np.uint64)
    if n == 0:
        return h1, h2
    _, offsets_buf, data_buf = arr.buffers()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(offsets_buf, np.int64 if wide else np.int32)
    offsets = offsets[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    is_long = lengths >= _VAR_MAX_VECTOR_LEN
    rows = None
    if is_long.any():
        long_rows = np.flatnonzero(is_long)
        digest = mmh3.mmh3_x64_128_utupledigest
        tag_byte = bytes([tag])
        pairs = [
            digest(data[start : start + length].tobytes() + tag_byte, seed)
            for start, length in zip(
                starts[long_rows].tolist(), lengths[long_rows].tolist(), strict=True
            )
        ]
        table = np.array(pairs, dtype=np.uint64)
        h1[long_rows] = table[:, 0]
        h2[long_rows] = table[:, 1]
        rows = np.flatnonzero(~is_long)
        starts, lengths = starts[rows], lengths[rows]
    out1 = h1 if rows is None else np.empty(len(rows), np.uint64)
    out2 = h2 if rows is None else np.empty(len(rows), np.uint64)
    useed = np.uint64(seed)
    with np.errstate(over="ignore"):
        for lo in range(0, len(starts), _VAR_CHUNK):
            hi = lo + _VAR_CHUNK
            _murmur3_var_chunk(
                data, starts[lo:hi], lengths[lo:hi], tag, useed, out1[lo:hi], out2[lo:hi]
            )
    if rows is not None:
        h1[rows] = out1
        h2[rows] = out2
    return h1, h2


def _hash_str_sequence(keys: Sequence[Any], seed: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(h1, h2)`` of a sequence of keys that are all exactly ``str``, else None.

    Runs the compiled loop of :mod:`beam_dpsketch.murmur3`. Returns None (nothing reported) when a
    key is not exactly a ``str`` or has no UTF-8 encoding (lone surrogates), or when ``seed`` is
    not a Python int in ``[0, 2**32)``: the caller's general path then hashes or rejects the keys
    with its usual results and messages.
    """
    if not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        return None
    n = len(keys)
    h1 = np.empty(n, np.uint64)
    h2 = np.empty(n, np.uint64)
    if murmur3.hash_tagged(keys, _TAG_STR, int(seed), h1, h2) != -1:
        return None
    return h1, h2


def _hash_python_keys(keys: Iterable[Any], seed: int) -> tuple[np.ndarray, np.ndarray]:
    digest = mmh3.mmh3_x64_128_utupledigest
    pairs = [digest(encode_key(k), seed) for k in keys]
    if not pairs:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    arr = np.array(pairs, dtype=np.uint64)
    return arr[:, 0].copy(), arr[:, 1].copy()


def is_string_or_binary(typ: pa.DataType) -> bool:
    """Whether ``typ`` is a plain (not dictionary-encoded) Arrow string or binary type."""
    return _var_tag(typ) is not None


def _var_tag(typ: pa.DataType) -> int | None:
    """The canonical tag of a string/binary Arrow type (hashed by :func:`_murmur3_var`), else None."""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _TAG_STR
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return _TAG_BYTES
    return None


def _hash_arrow(arr: pa.Array, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(arr, pa.ChunkedArray):
        if _var_tag(arr.type) is not None and arr.num_chunks != 1:
            # Hash chunk by chunk: no concatenation copy (nor 32-bit offset overflow).
            if arr.null_count:
                raise TypeError("None is not a valid key: the input array has null values")
            if arr.num_chunks == 0:
                return np.empty(0, np.uint64), np.empty(0, np.uint64)
            parts = [_hash_arrow(chunk, seed) for chunk in arr.chunks]
            return (
                np.concatenate([h1 for h1, _ in parts]),
                np.concatenate([h2 for _, h2 in parts]),
            )
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
    tag = _var_tag(typ)
    if tag is not None:
        # Vectorised over all values, repeats included: dictionary-encoding first costs about as
        # much as hashing every value, so it only pays for arrays that are already encoded
        # (the dictionary branch above hashes each distinct value once).
        return _murmur3_var(arr, tag, seed)
    raise TypeError(f"unsupported key column type {typ}: keys must be integers, strings or binary")


def hash_keys(keys: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hash a batch of keys to two uint64 arrays ``(h1, h2)``.

    Parameters
    ----------
    keys
        A numpy array (integer, bool, str or bytes dtype: vectorised; object dtype: as a list), a
        pyarrow ``Array``/``ChunkedArray`` (integer, string or binary, plain or dictionary-encoded:
        vectorised), or any sequence of supported keys (see :func:`encode_key`); sequences of only
        ``str`` are hashed by a compiled loop.
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
    if keys and type(keys[0]) is str:
        hashed = _hash_str_sequence(keys, seed)
        if hashed is not None:
            return hashed
        # Arrow infers ``string`` only when every value is a str (or None): str and bytes mixed
        # infer ``binary``, other types fail. This replaces a per-key type check.
        try:
            arr = pa.array(keys)
        except pa.ArrowException:
            arr = None
        if arr is not None and not arr.null_count:
            if isinstance(arr, pa.ChunkedArray) and arr.type == pa.string():
                return _hash_arrow(arr, seed)
            if arr.type == pa.string():
                return _murmur3_var(arr, _TAG_STR, seed)
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
