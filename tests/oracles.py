"""Naive reference implementations used as test oracles.

They are written from the papers (Misra and Gries; Lebeda and Tětek [LT23], Algorithm 1; the
merge of Agarwal et al.; see ``docs/algorithms.md#references``), not from the package code, and favour obviousness over speed: Algorithm 1 scans all ``k`` counters on every
update.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import mmh3


class RefDummy:
    """The dummy key ``D_i`` of Algorithm 1 (never equal to a user key)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RefDummy) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("RefDummy", self.index))

    def __repr__(self) -> str:
        return f"RefDummy({self.index})"


def ref_encode(key: Any) -> bytes:
    """The canonical encoding, re-implemented from the ``hashing`` module docstring."""
    if isinstance(key, bool):
        key = int(key)
    if isinstance(key, int):
        if -(1 << 63) <= key < (1 << 63):
            return key.to_bytes(8, "little", signed=True) + b"\x01"
        nbytes = (key.bit_length() + 8) // 8
        return key.to_bytes(nbytes, "little", signed=True) + b"\x02"
    if isinstance(key, str):
        return key.encode("utf-8") + b"\x03"
    if isinstance(key, bytes):
        return key + b"\x04"
    if isinstance(key, tuple):
        out = b""
        for item in key:
            enc = ref_encode(item)
            n = len(enc)
            length = bytearray()
            while True:
                byte, n = n & 0x7F, n >> 7
                length.append(byte | (0x80 if n else 0))
                if not n:
                    break
            out += bytes(length) + enc
        return out + b"\x05"
    raise TypeError(type(key).__name__)


def ref_hash(key: Any, seed: int) -> tuple[int, int]:
    return mmh3.mmh3_x64_128_utupledigest(ref_encode(key), seed)


def ref_order(key: Any) -> tuple:
    """Fixed order of ``misra_gries.sketch._order``: dummies by index, ints, strs, bytes, then tuples."""
    if isinstance(key, RefDummy):
        return (0, key.index)
    if type(key) is int:
        return (1, key)
    if type(key) is str:
        return (2, key)
    if type(key) is bytes:
        return (3, key)
    return (4, ref_encode(key))


def canon(key: Any) -> Any:
    """bool -> int, recursively (the package treats ``True`` as the key ``1``)."""
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, tuple):
        return tuple(canon(x) for x in key)
    return key


class NaiveMG:
    """Algorithm 1 (MG_k) of [LT23], verbatim: O(k) scan per element."""

    def __init__(self, k: int):
        self.k = k
        self.T: dict[Any, int] = {RefDummy(i): 0 for i in range(k)}
        self.n = 0
        self.d = 0

    def update(self, x: Any) -> None:
        x = canon(x)
        self.n += 1
        if x in self.T:  # Branch 1
            self.T[x] += 1
        elif min(self.T.values()) >= 1:  # Branch 2
            for y in self.T:
                self.T[y] -= 1
            self.d += 1
        else:  # Branch 3
            z = min((y for y, c in self.T.items() if c == 0), key=ref_order)
            del self.T[z]
            self.T[x] = 1

    def extend(self, xs: Iterable[Any]) -> NaiveMG:
        for x in xs:
            self.update(x)
        return self

    def slots(self) -> list[tuple[Any, int]]:
        """All k pairs sorted by the fixed order; dummies shown as ``None``."""
        items = sorted(self.T.items(), key=lambda kv: ref_order(kv[0]))
        return [(None if isinstance(x, RefDummy) else x, c) for x, c in items]

    def standard(self) -> dict[Any, int]:
        return {x: c for x, c in self.T.items() if c > 0}


def standard_mg(stream: Iterable[Any], k: int) -> tuple[dict[Any, int], int]:
    """Standard Misra-Gries (zero keys deleted); returns ``(counters, d)``."""
    c: dict[Any, int] = {}
    d = 0
    for x in stream:
        x = canon(x)
        if x in c:
            c[x] += 1
        elif len(c) < k:
            c[x] = 1
        else:
            d += 1
            for y in list(c):
                c[y] -= 1
                if c[y] == 0:
                    del c[y]
    return c, d


def ref_merge(k: int, *sketches: dict[Any, int]) -> dict[Any, int]:
    """MERGE_k of Agarwal et al. (2013) on standard sketches (positive counters)."""
    s: Counter = Counter()
    for sk in sketches:
        for x, c in sk.items():
            assert c > 0
            s[x] += c
    if len(s) <= k:
        return dict(s)
    v = sorted(s.values(), reverse=True)[k]  # (k+1)-th largest, with multiplicity
    return {x: c - v for x, c in s.items() if c > v}


def frequencies(stream: Iterable[Any]) -> Counter:
    return Counter(canon(x) for x in stream)
