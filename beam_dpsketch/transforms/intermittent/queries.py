"""The declared, data-independent query input: query batches, their times, and the interval each data time falls in.

Everything here is a function of public parameters alone (the schedule, a time), never of the
data, so both query modes of :mod:`beam_dpsketch.transforms.intermittent` check and order their
queries the same way.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from beam_dpsketch.hashing import canonical_keys
from beam_dpsketch.transforms.batching import is_key_batch

__all__ = ["QuerySchedule", "check_time", "interval_index", "query_keys"]


def check_time(value: Any, what: str) -> float | int:
    """``value`` as a Python int or float, checked finite; errors name ``what``, not the value."""
    # Data times reach this check too: the messages name the parameter and the type, never the
    # value.
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}")
    out = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(out, float) and not math.isfinite(out):
        raise ValueError(f"{what} must be finite")
    return out


def query_keys(keys: Any, what: str) -> tuple[Any, ...]:
    """A query batch's keys as canonical Python keys (a tuple is one composite key, not a batch)."""
    if isinstance(keys, tuple) or not (is_key_batch(keys) or isinstance(keys, list)):
        raise TypeError(
            f"{what} must be a list or array of keys, got {type(keys).__name__} (a tuple is one "
            "composite key: wrap it in a list)"
        )
    return tuple(canonical_keys(keys))


def interval_index(query_times: Any, times: Any) -> np.ndarray:
    """Batch index ``k(t) = 1 + #{l : t_l < t}`` of each time ``t``.

    ``query_times`` are the sorted batch times ``t_1 < t_2 < ... < t_K``; an element at time ``t``
    belongs to the interval ``(t_{k-1}, t_k]`` and enters batch ``k`` (``K + 1``: after the last
    query). A public function of the time alone, so it never depends on the data.
    """
    q = np.asarray(query_times, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if q.ndim != 1 or (q.size > 1 and not (np.diff(q) > 0).all()):
        raise ValueError("query_times must be a strictly increasing one-dimensional sequence")
    if np.isnan(t).any():
        raise ValueError("times must not be NaN")
    return np.searchsorted(q, t, side="left").astype(np.int64) + 1


@dataclass(frozen=True)
class QuerySchedule:
    """A declared, data-independent list of query batches ``(time, keys)``.

    Parameters
    ----------
    batches
        ``(time, keys)`` pairs: ``time`` a real number (event time in seconds, or a public
        position), ``keys`` a list or array of keys (duplicates allowed; they share cells and get
        the same answer). Batches are sorted by time; batches with equal times are merged into
        one (answered simultaneously, as the paper's query batches).

    Raises
    ------
    ValueError
        For no batches, or a non-finite time.
    TypeError
        For a time that is not a number, keys that are not a list/array, or an invalid key (the
        message names its type).
    """

    batches: tuple[tuple[float | int, tuple[Any, ...]], ...]

    def __init__(self, batches: Iterable[tuple[Any, Any]]) -> None:
        merged: dict[float | int, list[Any]] = {}
        for i, item in enumerate(batches):
            if not isinstance(item, tuple | list) or len(item) != 2:
                raise TypeError(
                    f"batches[{i}] must be a (time, keys) pair, got {type(item).__name__}"
                )
            t = check_time(item[0], f"batches[{i}] time")
            merged.setdefault(t, []).extend(query_keys(item[1], f"batches[{i}] keys"))
        if not merged:
            raise ValueError("batches: a schedule needs at least one query batch")
        ordered = tuple((t, tuple(merged[t])) for t in sorted(merged))
        object.__setattr__(self, "batches", ordered)

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[Any, Any]]) -> QuerySchedule:
        """A schedule from ``(time, key)`` pairs, one query each (grouped by time)."""
        return cls((t, [k]) for t, k in pairs)

    @property
    def times(self) -> np.ndarray:
        """Batch times ``t_1 < ... < t_K`` as float64."""
        return np.asarray([t for t, _ in self.batches], dtype=np.float64)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def num_queries(self) -> int:
        """Total number of (time, key) queries, duplicates included."""
        return sum(len(keys) for _, keys in self.batches)
