"""Pure-Python equivalent of the compiled Misra-Gries loop :mod:`beam_dpsketch.sketches.misra_gries.kernel`.

Used (through :func:`beam_dpsketch.extensions.load_extension`) when the package was built without
a C compiler, or when ``BEAM_DPSKETCH_PURE_PYTHON=1`` forces it. It runs the same loop as
``kernel.c``, Algorithm 1 of Lebeda and Tetek (PODS 2023) in arrival order, with the same slot
layout: held keys keep their slots, a key taking a free dummy gets the next slot, a key replacing
the smallest zero-count key takes that key's slot, and zero-count keys are replaced in the fixed
key order (signed order of the int64 codes, UTF-8 byte order of ``str`` keys). So
:func:`update_unit` and :func:`update_strs` return the same values and write the same entries as
the compiled functions for the same arguments: every sketch is bit-identical, only slower.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["update_strs", "update_unit"]

_INT32_MAX = 2**31 - 1


def _int64s(obj: Any, name: str, writable: bool = False) -> np.ndarray:
    """A native int64 array over the buffer of ``obj`` (no copy, so writes reach the caller)."""
    view = memoryview(obj)
    if writable and view.readonly:
        raise TypeError(f"{name} must be a writable buffer")
    raw = view.cast("B")
    if len(raw) % 8:
        raise ValueError(f"{name} must be a contiguous int64 buffer")
    return np.frombuffer(raw, dtype=np.int64)


def _check_consistent(m: int, counts: int, out: int, most: int, k: int, free: int) -> None:
    if not (counts == m and out >= most and k >= 1 and free >= 0 and m + free == k):
        raise ValueError("inconsistent Misra-Gries kernel arguments")
    if k > _INT32_MAX:
        raise ValueError("inconsistent Misra-Gries kernel arguments")


def _zero_slots(
    skey: list[Any], sval: list[int], held: int, base: int, order: Callable[[Any], Any]
) -> list[int]:
    """The slots whose stored value is ``base``, in the fixed order of their keys."""
    zeros = [j for j in range(held) if sval[j] == base]
    zeros.sort(key=lambda j: order(skey[j]))
    return zeros


def _run(
    batch: list[Any],
    skey: list[Any],
    sval: list[int],
    slot_of: dict[Any, int],
    held: int,
    free: int,
    order: Callable[[Any], Any],
) -> tuple[int, int, int]:
    """Algorithm 1 on ``batch`` from ``held`` slots and ``free`` dummies; ``(held, free, d)``.

    Counters are stored with a lazy offset (stored = counter + base), as in the C loop; they are
    counters again on return.
    """
    base = 0
    d = 0
    zp = 0
    zeros = _zero_slots(skey, sval, held, 0, order)
    nzero = len(zeros)
    for x in batch:
        s = slot_of.get(x)
        if s is not None:
            if sval[s] == base:
                nzero -= 1
            sval[s] += 1
        elif free:
            free -= 1
            sval[held] = base + 1
            skey[held] = x
            slot_of[x] = held
            held += 1
        elif nzero:
            # The smallest key still at zero leaves (a listed key may have grown since).
            while True:
                z = zeros[zp]
                zp += 1
                if sval[z] == base:
                    break
            del slot_of[skey[z]]
            sval[z] = base + 1
            skey[z] = x
            slot_of[x] = z
            nzero -= 1
        else:
            # Every counter is positive: all fall by one, and the new zeros are listed.
            d += 1
            base += 1
            zeros = _zero_slots(skey, sval, held, base, order)
            nzero = len(zeros)
            zp = 0
    for j in range(held):
        sval[j] -= base
    return held, free, d


def _code_order(code: int) -> int:
    return code


def _utf8_order(key: str) -> bytes:
    # UTF-8 byte order is code-point order; a lone surrogate raises UnicodeEncodeError here, at
    # the same point where the C loop gives up.
    return key.encode("utf-8")


def update_unit(
    codes: Any, keys: Any, counts: Any, out_keys: Any, out_counts: Any, k: int, free: int
) -> tuple[int, int, int]:
    """Algorithm 1 of Lebeda and Tetek on ``codes`` (int64, arrival order, weight 1 each).

    Parameters
    ----------
    codes : int64 buffer
        The batch's key codes, in arrival order.
    keys, counts : int64 buffer
        The held keys (distinct) and their counters.
    out_keys, out_counts : writable int64 buffer
        Receive the new state in their first ``held`` entries; at least
        ``min(k, len(keys) + len(codes))`` entries each.
    k : int
        The number of counters.
    free : int
        The unused dummy slots; ``len(keys) + free == k``.

    Returns
    -------
    tuple of int
        ``(held, free, decrements)``: the slots held, the dummies left and the decrements done,
        equal to the compiled function's, which writes the same entries.
    """
    k, free = operator.index(k), operator.index(free)
    codes_a = _int64s(codes, "codes")
    keys_a = _int64s(keys, "keys")
    counts_a = _int64s(counts, "counts")
    out_keys_a = _int64s(out_keys, "out_keys", writable=True)
    out_counts_a = _int64s(out_counts, "out_counts", writable=True)
    n, m = len(codes_a), len(keys_a)
    room = m + min(free, n)
    if len(out_counts_a) != len(out_keys_a):
        raise ValueError("inconsistent Misra-Gries kernel arguments")
    _check_consistent(m, len(counts_a), len(out_keys_a), room, k, free)
    skey: list[Any] = [0] * room
    sval: list[int] = [0] * room
    slot_of: dict[Any, int] = {}
    for s, (key, count) in enumerate(zip(keys_a.tolist(), counts_a.tolist(), strict=True)):
        if key in slot_of:
            raise ValueError("duplicate held keys")
        skey[s], sval[s] = key, count
        slot_of[key] = s
    held, free, d = _run(codes_a.tolist(), skey, sval, slot_of, m, free, _code_order)
    out_keys_a[:held] = skey[:held]
    out_counts_a[:held] = sval[:held]
    return held, free, d


def update_strs(
    keys: list[Any], held_keys: list[Any], counts: Any, out_counts: Any, k: int, free: int
) -> tuple[list[str], int, int] | None:
    """Algorithm 1 of Lebeda and Tetek on ``keys`` (a list of ``str``, arrival order, weight 1 each).

    Parameters
    ----------
    keys : list of str
        The batch, in arrival order.
    held_keys : list of str
        The held keys (distinct).
    counts : int64 buffer
        Their counters.
    out_counts : writable int64 buffer
        Receives the new counters; at least ``min(k, len(held_keys) + len(keys))`` entries.
    k : int
        The number of counters.
    free : int
        The unused dummy slots; ``len(held_keys) + free == k``.

    Returns
    -------
    tuple or None
        ``(held keys, free, decrements)`` with the counters in the first entries of
        ``out_counts``, equal to the compiled function's; None, changing nothing the caller
        reads, when a key is not exactly a ``str`` or has no UTF-8 encoding.
    """
    if not isinstance(keys, list) or not isinstance(held_keys, list):
        raise TypeError("keys and held must be lists")
    k, free = operator.index(k), operator.index(free)
    n, m = len(keys), len(held_keys)
    counts_a = _int64s(counts, "counts")
    out_a = _int64s(out_counts, "out_counts", writable=True)
    room = m + min(free, n)
    _check_consistent(m, len(counts_a), len(out_a), room, k, free)
    if any(type(x) is not str for x in keys):
        return None
    skey: list[Any] = [None] * room
    sval: list[int] = [0] * room
    slot_of: dict[Any, int] = {}
    in_counts = counts_a.tolist()
    for s, key in enumerate(held_keys):
        if type(key) is not str:
            return None
        if key in slot_of:
            raise ValueError("duplicate held keys")
        skey[s], sval[s] = key, in_counts[s]
        slot_of[key] = s
    try:
        held, free, d = _run(list(keys), skey, sval, slot_of, m, free, _utf8_order)
    except UnicodeEncodeError:
        return None
    out_a[:held] = sval[:held]
    return skey[:held], free, d
