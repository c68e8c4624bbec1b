"""The bytes of an input file: strict decompression and UTF-8 checked text.

Every reader opens its files through :func:`open_input`. Parquet is read as it is (random
access, compression inside the format). CSV, JSON Lines and text are decompressed by extension,
strictly (a truncated or corrupt file fails, where Beam's own decompression stops silently),
then checked as UTF-8 with a leading byte order mark dropped. A failure is an
:class:`~beam_dpsketch.io.formats.InputError` naming the file, never the bytes or where they are.
"""

from __future__ import annotations

import abc
import bz2
import codecs
import io
import lzma
import zlib
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_dpsketch.io.formats import InputError, input_error

__all__ = ["NOT_UTF8", "is_empty_input", "open_input"]

#: The problem named when text input is not UTF-8 (the bytes and their place are not named).
NOT_UTF8 = "invalid UTF-8 (text input must be UTF-8)"


def _new_decompressor(kind: str) -> Any:
    """A fresh incremental decompressor (with ``eof`` and ``unused_data``) for ``kind``."""
    if kind == CompressionTypes.GZIP:
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if kind == CompressionTypes.DEFLATE:
        return zlib.decompressobj()
    if kind == CompressionTypes.BZIP2:
        return bz2.BZ2Decompressor()
    if kind == CompressionTypes.LZMA:
        return lzma.LZMADecompressor()
    if kind == CompressionTypes.ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor(max_window_size=1 << 31).decompressobj()
    raise ValueError(f"unsupported compression {kind!r}")


class _PullStream(io.RawIOBase):
    """A read-only byte stream whose subclass fills ``_pending`` from ``_source`` on demand."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        self._source = source
        self._pending = b""
        self._offset = 0
        self._done = False

    def readable(self) -> bool:
        return True

    @abc.abstractmethod
    def _fill(self) -> None:
        """Make ``_pending`` non-empty, or set ``_done`` at the end of the stream."""

    def readinto(self, buffer: Any) -> int:
        self._fill()
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = self._pending[self._offset : self._offset + n]
        self._offset += n
        if self._offset == len(self._pending):
            self._pending, self._offset = b"", 0
        return n

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


class _Decompressed(_PullStream):
    """Decompress a raw byte stream, failing on truncated or corrupt input.

    Beam's ``CompressedFile`` stops silently where a truncated file ends (a gzip file cut in the
    middle reads as a shorter file), so every compressed input goes through this stream instead:
    the end of the raw bytes must also be the end of a complete compressed stream, and a corrupt
    stream raises too, both as :class:`InputError` naming the file. Concatenated streams
    (multi-member gzip) are read one after the other.
    """

    # Raw bytes per decompression step: small, so that one step of a highly compressed file
    # (gzip expands up to about 1000x) stays small in memory.
    _CHUNK = 1 << 16

    def __init__(self, raw: Any, path: str, kind: str) -> None:
        super().__init__(raw)
        self._path, self._kind = path, kind
        self._decompressor = _new_decompressor(kind)
        self._started = False

    def _fail(self) -> InputError:
        return input_error(
            self._path, f"the {self._kind} data is truncated or corrupt (cannot decompress)"
        )

    def _fill(self) -> None:
        while not self._pending and not self._done:
            data = self._source.read(self._CHUNK)
            if not data:
                if self._started and not self._decompressor.eof:
                    raise self._fail()
                self._done = True
                return
            while data:
                if self._decompressor.eof:
                    # Another stream follows the complete one (multi-member gzip).
                    self._decompressor = _new_decompressor(self._kind)
                self._started = True
                try:
                    self._pending += self._decompressor.decompress(data)
                except Exception:  # noqa: BLE001 - zlib, bz2, lzma and zstd errors differ
                    raise self._fail() from None
                data = self._decompressor.unused_data if self._decompressor.eof else b""


_BOM = codecs.BOM_UTF8


class _CheckedText(_PullStream):
    """The bytes of a text file (CSV, JSON Lines, text), checked as UTF-8, without a BOM.

    A UTF-8 byte order mark at the start of the file is dropped (it would stay glued to the
    first key). With ``check``, bytes that are not UTF-8 raise :class:`InputError` naming the
    file, never the bytes or where they are; without it the bytes pass unchecked (the
    ``on_bad_record="drop"`` readers check each record instead).
    """

    _CHUNK = 1 << 20

    def __init__(self, stream: Any, path: str, check: bool = True) -> None:
        super().__init__(stream)
        self._path = path
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict") if check else None
        self._first = True

    def _check(self, data: bytes, final: bool) -> None:
        if self._decoder is None:
            return
        try:
            self._decoder.decode(data, final)
        except UnicodeDecodeError:
            raise input_error(self._path, NOT_UTF8) from None

    def _fill(self) -> None:
        while not self._pending and not self._done:
            data = self._source.read(self._CHUNK)
            if self._first:
                # The BOM may straddle reads of a stream that returns short reads.
                while data and len(data) < len(_BOM) and _BOM.startswith(data):
                    more = self._source.read(self._CHUNK)
                    if not more:
                        break
                    data += more
                if data.startswith(_BOM):
                    data = data[len(_BOM) :]
                self._first = False
            if not data:
                self._check(b"", True)
                self._done = True
                return
            self._check(data, False)
            self._pending = data


def open_input(path: str, fmt: str, check_utf8: bool = True) -> Any:
    """The readable bytes of ``path`` for format ``fmt``: the one way every reader opens input.

    Parquet is read as it is (random access, compression inside the format). CSV, JSON Lines and
    text are decompressed by extension (``.gz``, ``.bz2``, ``.xz``/``.lzma``, ``.zst``,
    ``.deflate``), strictly (:class:`_Decompressed`), then checked as UTF-8 without a BOM
    (:class:`_CheckedText`; unchecked without ``check_utf8``).
    """
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    if fmt == "parquet":
        return raw
    kind = CompressionTypes.detect_compression_type(path)
    if kind != CompressionTypes.UNCOMPRESSED:
        raw = _Decompressed(raw, path, kind)
    return _CheckedText(raw, path, check_utf8)


def is_empty_input(path: str, fmt: str) -> bool:
    """Whether a CSV, JSON Lines or text file holds no bytes at all (after decompression): an
    input of zero rows in every format (a zero-byte file has no header or schema to check)."""
    if fmt == "parquet":
        return False
    with open_input(path, fmt, check_utf8=False) as f:
        return not f.read(1)
