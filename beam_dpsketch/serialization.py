"""Versioned binary format shared by every sketch and released object.

Layout (all integers little-endian)::

    magic          4 bytes  b"DPSK"
    version        u16      FORMAT_VERSION
    kind length    u8, then the kind name in ASCII (e.g. b"CountMinSketch")
    params length  u32, then the parameters as canonical JSON (sorted keys, no spaces)
    array count    u16, then for each array:
        name length u8, name (ASCII); dtype length u8, dtype string (numpy ``dtype.str``, little
        endian or byte-order free); ndim u8; each dimension u64; data length u64; raw data
    checksum       u32      CRC-32 of every byte before it

Readers check every length against the buffer, the dtype against an allow-list, the element count
against the data length and the checksum, and raise :class:`SketchFormatError` (a ``ValueError``)
for anything malformed: truncated, corrupted, wrong kind or unknown version. They never crash with
an unrelated exception and never allocate more than the input implies.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "SketchFormatError",
    "dumps",
    "loads",
    "array_length",
    "pack_bytes_list",
    "require",
    "require_array",
    "require_size",
    "unpack_bytes_list",
]

MAGIC = b"DPSK"
FORMAT_VERSION = 1

_ALLOWED_DTYPES = frozenset({"<i8", "<u8", "<i4", "<u4", "<f8", "|u1", "|i1", "|b1"})
_MAX_NDIM = 8
_MAX_DIM = 1 << 40
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class SketchFormatError(ValueError):
    """Serialized sketch bytes are malformed, corrupted, truncated, or of another kind/version."""


def dumps(kind: str, params: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> bytes:
    """Serialize a sketch: its ``kind`` name, JSON-able ``params`` and named numpy ``arrays``."""
    kind_b = kind.encode("ascii")
    params_b = json.dumps(dict(params), sort_keys=True, separators=(",", ":")).encode("utf-8")
    out = [MAGIC, _U16.pack(FORMAT_VERSION), bytes([len(kind_b)]), kind_b]
    out += [_U32.pack(len(params_b)), params_b, _U16.pack(len(arrays))]
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr).reshape(np.shape(arr))
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        dtype_s = arr.dtype.str
        if dtype_s not in _ALLOWED_DTYPES:
            raise TypeError(f"array {name!r} has dtype {arr.dtype}, which the format cannot store")
        name_b = name.encode("ascii")
        data = arr.tobytes()
        out += [bytes([len(name_b)]), name_b, bytes([len(dtype_s)]), dtype_s.encode("ascii")]
        out += [bytes([arr.ndim])] + [_U64.pack(d) for d in arr.shape]
        out += [_U64.pack(len(data)), data]
    body = b"".join(out)
    return body + _U32.pack(zlib.crc32(body))


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: memoryview, end: int):
        self.buf = buf
        self.pos = 0
        self.end = end

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > self.end:
            raise SketchFormatError("truncated sketch bytes")
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def ascii(self, n: int) -> str:
        try:
            return bytes(self.take(n)).decode("ascii")
        except UnicodeDecodeError:
            raise SketchFormatError("non-ASCII name in sketch bytes") from None


def loads(
    data: bytes | bytearray | memoryview, expected_kind: str | None = None
) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Parse bytes written by :func:`dumps`; returns ``(kind, params, arrays)``.

    Raises
    ------
    SketchFormatError
        On any malformed input, a checksum mismatch, an unknown format version, or (when
        ``expected_kind`` is given) bytes of another kind.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise SketchFormatError(f"sketch bytes must be bytes, got {type(data).__name__}")
    buf = memoryview(bytes(data))
    if len(buf) < len(MAGIC) + 2 + 4 or bytes(buf[:4]) != MAGIC:
        raise SketchFormatError("not beam-dpsketch sketch bytes (bad magic or too short)")
    end = len(buf) - 4
    if _U32.unpack(buf[end:])[0] != zlib.crc32(buf[:end]):
        raise SketchFormatError("checksum mismatch: sketch bytes are corrupted or truncated")
    r = _Reader(buf, end)
    r.take(4)
    version = r.u16()
    if version != FORMAT_VERSION:
        raise SketchFormatError(
            f"unsupported sketch format version {version} (this library reads {FORMAT_VERSION})"
        )
    kind = r.ascii(r.u8())
    if expected_kind is not None and kind != expected_kind:
        raise SketchFormatError(f"expected a {expected_kind} but the bytes hold a {kind}")
    try:
        params = json.loads(bytes(r.take(r.u32())).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise SketchFormatError(f"malformed sketch parameters: {exc}") from None
    if not isinstance(params, dict):
        raise SketchFormatError("malformed sketch parameters: not a JSON object")
    arrays: dict[str, np.ndarray] = {}
    for _ in range(r.u16()):
        name = r.ascii(r.u8())
        dtype_s = r.ascii(r.u8())
        if dtype_s not in _ALLOWED_DTYPES:
            raise SketchFormatError(f"array {name!r} has an unsupported dtype {dtype_s!r}")
        ndim = r.u8()
        if ndim > _MAX_NDIM:
            raise SketchFormatError(f"array {name!r} has {ndim} dimensions (at most {_MAX_NDIM})")
        shape = tuple(r.u64() for _ in range(ndim))
        if any(dim >= _MAX_DIM for dim in shape):
            raise SketchFormatError(f"array {name!r} has an impossible shape {shape}")
        nbytes = r.u64()
        dtype = np.dtype(dtype_s)
        count = 1
        for dim in shape:
            count *= dim
        if count * dtype.itemsize != nbytes:
            raise SketchFormatError(f"array {name!r}: shape {shape} does not match its data length")
        raw = r.take(nbytes)
        try:
            arrays[name] = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        except ValueError as exc:
            raise SketchFormatError(f"array {name!r}: {exc}") from None
    if r.pos != end:
        raise SketchFormatError("trailing bytes after the last array")
    return kind, params, arrays


def pack_bytes_list(items: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Pack byte strings as ``(data uint8 array, offsets int64 array of len(items) + 1)``."""
    lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(items), dtype=np.uint8)
    return data, offsets


def unpack_bytes_list(data: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Inverse of :func:`pack_bytes_list`; raises :class:`SketchFormatError` on bad offsets."""
    if data.dtype != np.uint8 or data.ndim != 1 or offsets.dtype != np.int64 or offsets.ndim != 1:
        raise SketchFormatError("malformed packed byte strings")
    if (
        len(offsets) == 0
        or offsets[0] != 0
        or offsets[-1] != len(data)
        or np.any(np.diff(offsets) < 0)
    ):
        raise SketchFormatError("malformed offsets in packed byte strings")
    raw = data.tobytes()
    bounds = offsets.tolist()
    return [raw[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def require(params: Mapping[str, Any], name: str, typ: type | tuple[type, ...]) -> Any:
    """Fetch a parameter from parsed ``params``, raising :class:`SketchFormatError` if absent/mistyped."""
    value = params.get(name)
    if not isinstance(value, typ) or (isinstance(value, bool) and typ is not bool):
        raise SketchFormatError(f"sketch parameter {name!r} is missing or has the wrong type")
    return value


def require_array(
    arrays: Mapping[str, np.ndarray], name: str, dtype: str, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """Fetch a named array, checking its dtype and (optionally) its shape."""
    arr = arrays.get(name)
    if arr is None or arr.dtype != np.dtype(dtype):
        raise SketchFormatError(f"sketch array {name!r} is missing or has the wrong dtype")
    if shape is not None and arr.shape != shape:
        raise SketchFormatError(f"sketch array {name!r} has shape {arr.shape}, expected {shape}")
    return arr


def array_length(arrays: Mapping[str, np.ndarray], name: str, axis: int = 0) -> int:
    """Length along ``axis`` of a decoded array: a size the bytes actually hold.

    Decoders compare size parameters with it before allocating anything from them.
    """
    arr = arrays.get(name)
    if arr is None or arr.ndim <= axis:
        raise SketchFormatError(f"sketch array {name!r} is missing or has too few dimensions")
    return int(arr.shape[axis])


def require_size(params: Mapping[str, Any], name: str, held: int, *, factor: int = 1) -> int:
    """Fetch an int size parameter that must satisfy ``value * factor == held``.

    ``held`` is a size implied by the decoded arrays (e.g. :func:`array_length`), so a forged
    size field is refused before any allocation follows from it; ``factor`` is the product of
    the other dimensions (checked already) that the parameter multiplies.
    """
    value = require(params, name, int)
    if value < 1 or value * factor != held:
        raise SketchFormatError(f"sketch parameter {name!r} does not match the size of its arrays")
    return value
