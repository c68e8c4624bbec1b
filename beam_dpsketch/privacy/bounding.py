"""Contribution bounding by keyed-hash ranks: uniform, reproducible selection (no Beam here).

User-level privacy needs each privacy unit (user, device, account) to contribute at most
``max_contributions`` elements (docs/algorithms.md#mg-partition: "keep at most m elements ...
by a keyed-hash order"; docs/algorithms.md#int-beam). This module decides *which*
elements to keep, deterministically:

* every contribution gets a 64-bit **rank** = keyed BLAKE2b (``hashlib.blake2b(key=...)``, a
  pseudo-random function) of the canonical encoding of ``(privacy_id, element, occurrence)``;
* a unit keeps its ``max_contributions`` contributions with the **smallest** ranks.

Properties:

* **Uniform.** For a secret random key the ranks of distinct contributions are independent and
  uniform, so the kept set is a uniform random subset of the unit's contributions (as a multiset:
  a value contributed 3 times is 3 contributions). The tests check this with a chi-square test.
* **Reproducible.** The rank depends only on the key and the contribution, never on arrival
  order, bundle boundaries, the process or Python's salted built-in ``hash``. A retried bundle or a
  re-run with the same key keeps exactly the same contributions.
* **Order-free duplicates.** The ``occurrence`` index of the j-th copy of the same
  ``(privacy_id, element)`` is ``j``; identical copies are interchangeable, so the multiset of
  ranks, and hence the kept multiset, does not depend on the order of the input.
* **Unit-local.** A unit's selection depends only on that unit's contributions, so removing a
  unit does not change anyone else's: the user-level neighbouring relation holds after bounding.
* **Secret key.** With a public key an adversary could craft elements that are always kept; the
  key must be secret (``os.urandom``; :func:`new_selection_key`). BLAKE2b accepts keys up to 64
  bytes; longer keys are first hashed, shorter than 16 bytes are refused.

Canonical encodings come from :func:`beam_dpsketch.hashing.encode_key` (str, bytes, int and tuples
of these), so the same key means the same value on every machine.

A Beam transform builds on this after ``GroupByKey(privacy_id)``: call
:func:`select_contributions` per unit (or :func:`bounded_mask` on columnar batches).
"""

from __future__ import annotations

import hashlib
import heapq
import numbers
import os
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from beam_dpsketch.hashing import encode_key

__all__ = [
    "MIN_KEY_BYTES",
    "bounded_mask",
    "contribution_rank",
    "contribution_ranks",
    "new_selection_key",
    "select_contributions",
]

#: Shortest accepted secret key, in bytes.
MIN_KEY_BYTES = 16
_PERSON = b"dpsk-bound-v1"  # BLAKE2b personalisation: separates this use from any other
_U64 = struct.Struct("<Q")


def new_selection_key() -> bytes:
    """A fresh 32-byte secret key from ``os.urandom``."""
    return os.urandom(32)


def _prepare_key(key: bytes) -> bytes:
    if not isinstance(key, bytes | bytearray):
        raise TypeError(f"key must be bytes, got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"key must have at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    if len(key) > 64:
        return hashlib.blake2b(bytes(key), digest_size=64, person=b"dpsk-bound-kdf").digest()
    return bytes(key)


def _message(pid_enc: bytes, el_enc: bytes, occurrence: int) -> bytes:
    # Length-prefixed so that (pid, element) pairs encode injectively.
    return b"".join(
        (_U64.pack(len(pid_enc)), pid_enc, _U64.pack(len(el_enc)), el_enc, _U64.pack(occurrence))
    )


def _rank(k: bytes, msg: bytes) -> int:
    return int.from_bytes(
        hashlib.blake2b(msg, key=k, digest_size=8, person=_PERSON).digest(), "little"
    )


def _check_occurrence(occurrence: object) -> int:
    if isinstance(occurrence, bool) or not isinstance(occurrence, numbers.Integral):
        raise TypeError(f"occurrence must be an int, got {type(occurrence).__name__}")
    if not 0 <= int(occurrence) < 2**64:
        raise ValueError(f"occurrence must be in [0, 2**64), got {occurrence}")
    return int(occurrence)


def contribution_rank(key: bytes, privacy_id: Any, element: Any, occurrence: int = 0) -> int:
    """Rank in ``[0, 2**64)`` of the ``occurrence``-th copy of ``element`` from ``privacy_id``.

    Parameters
    ----------
    key
        Secret key (at least :data:`MIN_KEY_BYTES` bytes).
    privacy_id
        The privacy unit id (str, bytes, int or tuple of these).
    element
        The contribution: its value, or a stable per-element id such as an event id or position
        if the caller has one (same types as ``privacy_id``).
    occurrence
        ``j`` for the j-th identical copy (0-based).

    Returns
    -------
    int
        The rank; smaller ranks are kept first.
    """
    k = _prepare_key(key)
    return _rank(
        k, _message(encode_key(privacy_id), encode_key(element), _check_occurrence(occurrence))
    )


def _ranked(
    k: bytes, privacy_ids: Iterable[Any], elements: Iterable[Any]
) -> list[tuple[int, bytes]]:
    seen: dict[tuple[bytes, bytes], int] = {}
    out: list[tuple[int, bytes]] = []
    for pid, el in zip(privacy_ids, elements, strict=True):
        pair = (encode_key(pid), encode_key(el))
        occ = seen.get(pair, 0)
        seen[pair] = occ + 1
        msg = _message(pair[0], pair[1], occ)
        out.append((_rank(k, msg), msg))
    return out


def contribution_ranks(
    key: bytes, privacy_ids: Sequence[Any] | np.ndarray, elements: Sequence[Any] | np.ndarray
) -> np.ndarray:
    """Ranks of many contributions at once (``uint64`` array, same order as the input).

    Identical ``(privacy_id, element)`` pairs get occurrence indices ``0, 1, ...`` in input order,
    which makes the multiset of ranks independent of that order.

    Raises
    ------
    ValueError
        If the two inputs have different lengths.
    """
    k = _prepare_key(key)
    ids = _as_list(privacy_ids)
    els = _as_list(elements)
    if len(ids) != len(els):
        # The lengths count a unit's contributions: name the problem, not the sizes.
        raise ValueError("privacy_ids and elements must have the same length")
    return np.fromiter((r for r, _ in _ranked(k, ids, els)), dtype=np.uint64, count=len(ids))


def _as_list(values: Sequence[Any] | np.ndarray) -> list[Any]:
    if isinstance(values, np.ndarray):
        return values.tolist()
    return list(values)


def _check_max(max_contributions: object) -> int:
    if isinstance(max_contributions, bool) or not isinstance(max_contributions, numbers.Integral):
        raise TypeError(f"max_contributions must be an int, got {type(max_contributions).__name__}")
    if int(max_contributions) < 1:
        raise ValueError(f"max_contributions must be >= 1, got {max_contributions}")
    return int(max_contributions)


def select_contributions(
    key: bytes, privacy_id: Any, elements: Iterable[Any], max_contributions: int
) -> list[Any]:
    """Keep at most ``max_contributions`` of one unit's ``elements``: those with the smallest ranks.

    Parameters
    ----------
    key
        Secret key.
    privacy_id
        The unit's id.
    elements
        All of the unit's contributions (e.g. the grouped values after ``GroupByKey``), in any
        order.
    max_contributions
        Bound ``>= 1``.

    Returns
    -------
    list
        The kept elements, in increasing rank order (ties, which need a 64-bit collision, are
        broken by the encoded contribution, so the result is fully deterministic).
    """
    k = _prepare_key(key)
    m = _check_max(max_contributions)
    items = list(elements)
    ranked = _ranked(k, [privacy_id] * len(items), items)
    best = heapq.nsmallest(m, range(len(items)), key=lambda i: ranked[i])
    return [items[i] for i in best]


def bounded_mask(
    key: bytes,
    privacy_ids: Sequence[Any] | np.ndarray,
    elements: Sequence[Any] | np.ndarray,
    max_contributions: int,
) -> np.ndarray:
    """Boolean mask of the contributions kept when every unit keeps its ``max_contributions`` smallest ranks.

    Works on columnar batches that hold several units (rows need not be grouped or sorted). The
    mask is the same for any permutation of the rows, up to which of several identical
    ``(privacy_id, element)`` rows carries a ``True``.
    """
    k = _prepare_key(key)
    m = _check_max(max_contributions)
    ids = _as_list(privacy_ids)
    els = _as_list(elements)
    if len(ids) != len(els):
        # The lengths count a unit's contributions: name the problem, not the sizes.
        raise ValueError("privacy_ids and elements must have the same length")
    ranked = _ranked(k, ids, els)
    by_unit: dict[bytes, list[int]] = {}
    for i, pid in enumerate(ids):
        by_unit.setdefault(encode_key(pid), []).append(i)
    mask = np.zeros(len(ids), dtype=bool)
    for rows in by_unit.values():
        if len(rows) <= m:
            mask[rows] = True
        else:
            mask[heapq.nsmallest(m, rows, key=lambda i: ranked[i])] = True
    return mask
