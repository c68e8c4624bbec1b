"""Pure-Python equivalent of the compiled :mod:`beam_dpsketch.murmur3`.

Used (through :func:`beam_dpsketch.extensions.load_extension`) when the package was built without
a C compiler, or when ``BEAM_DPSKETCH_PURE_PYTHON=1`` forces it. :func:`hash_tagged` takes the same
arguments, fills the same buffers with the same MurmurHash3 x64 128-bit values (``mmh3`` on the
key's bytes followed by the tag byte, which is the library's canonical encoding of ``str`` and
``bytes`` keys) and returns the same index, so every hash and every sketch built from it is
bit-identical to the compiled path; it is only slower.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import mmh3

__all__ = ["hash_tagged"]

TAG_STR = 0x03
TAG_BYTES = 0x04
_MAX_SEED = 0xFFFFFFFF


def _words(buffer: Any) -> memoryview:
    """A writable native-endian uint64 view of the whole 8-byte words of ``buffer``."""
    view = memoryview(buffer)
    if view.readonly:
        raise TypeError("h1 and h2 must be writable buffers")
    raw = view.cast("B")
    return raw[: len(raw) // 8 * 8].cast("Q")


def hash_tagged(keys: Iterable[Any], tag: int, seed: int, h1: Any, h2: Any, /) -> int:
    """Hash each key's bytes followed by the byte ``tag`` into ``h1[i]``, ``h2[i]``.

    Parameters
    ----------
    keys : iterable
        Every element must be exactly ``str`` (``tag`` 3, hashed as UTF-8) or exactly ``bytes``
        (``tag`` 4).
    tag : int
        3 for ``str`` keys, 4 for ``bytes`` keys.
    seed : int
        The MurmurHash3 seed, in ``[0, 2**32)``.
    h1, h2 : writable buffer
        Contiguous buffers of at least ``8 * len(keys)`` bytes, filled with native-endian uint64
        values (the two halves of each hash).

    Returns
    -------
    int
        -1 when every key was hashed, else the index of the first key that is not of the exact
        type or (``str``) has no UTF-8 encoding; entries before it are filled, entries from it
        on are not. The same values, in the same entries, as the compiled module.
    """
    tag = int(tag)
    if tag not in (TAG_STR, TAG_BYTES):
        raise ValueError(f"tag must be {TAG_STR} (str) or {TAG_BYTES} (bytes), got {tag}")
    if not isinstance(seed, int):
        raise TypeError("seed must be an int")
    # Checked, not wrapped: a negative or too large seed must not silently hash as another.
    if not 0 <= seed <= _MAX_SEED:
        raise ValueError("seed must be in [0, 2**32)")
    try:
        items = list(keys)
    except TypeError:
        raise TypeError("keys must be a sequence") from None
    out1, out2 = _words(h1), _words(h2)
    if len(out1) < len(items) or len(out2) < len(items):
        raise ValueError("h1 and h2 must hold 8 bytes per key")
    digest = mmh3.mmh3_x64_128_utupledigest
    exact = str if tag == TAG_STR else bytes
    suffix = bytes([tag])
    for i, key in enumerate(items):
        if type(key) is not exact:
            return i
        if exact is str:
            try:
                data = key.encode("utf-8")
            except UnicodeEncodeError:
                # Lone surrogates have no UTF-8 encoding: the caller's general path reports them.
                return i
        else:
            data = key
        out1[i], out2[i] = digest(data + suffix, seed)
    return -1
