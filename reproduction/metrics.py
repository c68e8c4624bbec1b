"""Accuracy and speed metrics, each defined exactly as in the paper whose experiments it serves.

=====================  =====================================================================
metric                 definition and source
=====================  =====================================================================
:func:`are`            ``mean |f - fhat| / f`` over a given item set: all distinct items
                       ``Psi`` ([ZQR+22, Section 5.2], docs/algorithms.md#lin-e10: divide by ``|Psi|``),
                       the true top-k with k = 15 ([Hol25, Sections 5.1-5.3]) or the reported items
                       ([Hol-HH], experiment code)
:func:`are_top_k`      ARE over the true top-k ([Hol25, Sections 5.1-5.3])
:func:`aae`            ``mean |f - fhat|`` over the same kind of item set (the absolute
                       counterpart of ARE; = MAE of [WWC24, Section 5])
:func:`aae_top_k`      AAE over the true top-k
:func:`mae`, :func:`mre`  [WWC24, Section 5] over a query set ``Q``; ``mre(floor=1)`` is the
                       ``|fhat - f| / max(f, 1)`` of docs/algorithms.md#int-a8
:func:`max_abs_error`  ``max |f - fhat|`` (docs/evaluation.md#misra-gries-report)
:func:`precision_recall_f1`  set precision, recall and F1 with the conventions of
                       [WWC24, Section 5], library choice and [ZQR+22, Section 5.2]
:func:`top_k_f1`       F1 of the estimated vs true top-k ([ZQR+22, Section 5.2])
:func:`rank_errors`, :func:`average_rank_error`  ``|Rhat(key_i) - R(key_i)|`` at the
                       ``m`` evenly spaced quantile keys ([ZQR+22, Section 5.2])
:func:`throughput`, :func:`timed`  items per second over update calls only
                       ([WWC24, Section 5])
=====================  =====================================================================

All functions take numpy arrays aligned item by item (``true[i]`` and ``estimate[i]`` belong to
the same item) and return Python floats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "PRF",
    "aae",
    "aae_top_k",
    "are",
    "are_top_k",
    "average_rank_error",
    "mae",
    "max_abs_error",
    "mre",
    "precision_recall_f1",
    "rank_errors",
    "throughput",
    "timed",
    "top_k_f1",
    "top_k_indices",
]


def _pair(true: Any, estimate: Any) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(true, dtype=np.float64)
    e = np.asarray(estimate, dtype=np.float64)
    if t.shape != e.shape or t.ndim != 1:
        raise ValueError(
            f"true and estimate must be one-dimensional and aligned, got {t.shape} and {e.shape}"
        )
    if len(t) == 0:
        raise ValueError("the item set is empty: the metric is undefined")
    return t, e


def are(true: Any, estimate: Any) -> float:
    """Average relative error ``(1/|S|) * sum_{e in S} |f(e) - fhat(e)| / f(e)``.

    [ZQR+22, Section 5.2] (ARE over the distinct items ``Psi``, normaliser ``|Psi|`` per
    docs/algorithms.md#lin-e10) and [Hol25, Sections 5.1-5.3] (over the true top-k). Every true count must be positive.

    Parameters
    ----------
    true
        True counts ``f(e)`` of the item set ``S``.
    estimate
        Estimates ``fhat(e)``, aligned with ``true``.
    """
    t, e = _pair(true, estimate)
    if t.min() <= 0:
        raise ValueError("ARE needs positive true counts; use mre(..., floor=1) for zero counts")
    return float(np.mean(np.abs(t - e) / t))


def aae(true: Any, estimate: Any) -> float:
    """Average absolute error ``(1/|S|) * sum_{e in S} |f(e) - fhat(e)|`` (the MAE of [WWC24, Section 5])."""
    t, e = _pair(true, estimate)
    return float(np.mean(np.abs(t - e)))


def mae(true: Any, estimate: Any) -> float:
    """``MAE = (1/|Q|) * sum_{e in Q} |fhat_{e,t} - f_{e,t}|`` ([WWC24, Section 5])."""
    return aae(true, estimate)


def mre(true: Any, estimate: Any, *, floor: float | None = None) -> float:
    """``MRE = (1/|Q|) * sum_{e in Q} |fhat - f| / f`` ([WWC24, Section 5]).

    Parameters
    ----------
    true, estimate
        Aligned true and estimated counts of the query set ``Q``.
    floor
        If given, divide by ``max(f, floor)`` instead of ``f``: ``floor=1`` is the
        ``RE = |fhat - f| / max(f, 1)`` of docs/algorithms.md#int-a8, where queried items
        may have count 0. Without it every true count must be positive.
    """
    t, e = _pair(true, estimate)
    denom = t if floor is None else np.maximum(t, float(floor))
    if denom.min() <= 0:
        raise ValueError("MRE needs positive true counts (or a positive floor)")
    return float(np.mean(np.abs(t - e) / denom))


def max_abs_error(true: Any, estimate: Any) -> float:
    """``max_x |f(x) - fhat(x)|`` over the item set (docs/evaluation.md#misra-gries-report)."""
    t, e = _pair(true, estimate)
    return float(np.max(np.abs(t - e)))


def top_k_indices(true: Any, k: int) -> np.ndarray:
    """Positions of the ``k`` largest true counts, largest first; ties by smaller position."""
    t = np.asarray(true)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    order = np.lexsort((np.arange(len(t)), -t.astype(np.float64)))
    return order[:k]


def are_top_k(true: Any, estimate: Any, k: int) -> float:
    """ARE over the true top-``k`` items: ``(1/k) * sum_{i<=k} |f_i - fhat_i| / f_i``.

    [Hol25, Sections 5.1-5.3] (k = 15). ``true`` and ``estimate`` cover a candidate set that contains the
    true top-k (e.g. all distinct items); the top-k is taken by true count.
    """
    t, e = _pair(true, estimate)
    idx = top_k_indices(t, k)
    return are(t[idx], e[idx])


def aae_top_k(true: Any, estimate: Any, k: int) -> float:
    """AAE over the true top-``k`` items (absolute counterpart of :func:`are_top_k`)."""
    t, e = _pair(true, estimate)
    idx = top_k_indices(t, k)
    return aae(t[idx], e[idx])


class PRF(NamedTuple):
    """Precision, recall and F1 of a reported set against a true set."""

    precision: float
    recall: float
    f1: float


def precision_recall_f1(reported: Iterable[Any], truth: Iterable[Any]) -> PRF:
    """Precision ``|R & T| / |R|``, recall ``|R & T| / |T|`` and ``F1 = 2PR / (P + R)``.

    Conventions ([WWC24, Section 5], [Hol-HH] experiment code, [ZQR+22, Section 5.2]; the edge
    cases are a library choice): precision is 1 when nothing is reported, recall is 1 when the true set is empty, and
    F1 is 0 when ``P + R = 0``.

    Parameters
    ----------
    reported
        Reported items ``Hhat`` (duplicates are ignored).
    truth
        True items ``H``.
    """
    rep = set(_as_hashable(reported))
    tru = set(_as_hashable(truth))
    hit = len(rep & tru)
    p = hit / len(rep) if rep else 1.0
    r = hit / len(tru) if tru else 1.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return PRF(float(p), float(r), float(f1))


def _as_hashable(items: Iterable[Any]) -> list[Any]:
    # numpy arrays of ints/strings become Python scalars so 3 == np.int64(3) in a set.
    if isinstance(items, np.ndarray):
        return items.tolist()
    return [x.item() if isinstance(x, np.generic) else x for x in items]


def top_k_f1(items: Any, true: Any, estimate: Any, k: int) -> float:
    """F1 of the ``k`` items with the largest estimates vs the true top-``k``.

    [ZQR+22, Section 5.2]: ``T`` is the true top-k, ``T^`` the ``k`` items of the candidate set
    with the largest estimates; with ``|T| = |T^| = k`` this is ``|T & T^| / k``.
    """
    t, e = _pair(true, estimate)
    items = np.asarray(items)
    truth = items[top_k_indices(t, k)]
    reported = items[top_k_indices(e, k)]
    return precision_recall_f1(reported, truth).f1


def rank_errors(true_ranks: Any, estimated_ranks: Any) -> np.ndarray:
    """Per-query rank error ``|Rhat(key_i) - R(key_i)|`` ([ZQR+22, Section 5.2])."""
    t, e = _pair(true_ranks, estimated_ranks)
    return np.abs(e - t)


def average_rank_error(true_ranks: Any, estimated_ranks: Any) -> float:
    """Mean of :func:`rank_errors` over the ``m`` quantile keys ([ZQR+22, Section 5.2]).

    The keys come from :func:`reproduction.datasets.quantile_points` and the true
    ranks from :func:`~reproduction.datasets.true_ranks`.
    """
    return float(np.mean(rank_errors(true_ranks, estimated_ranks)))


def throughput(n_items: int, seconds: float) -> float:
    """Items per second, ``n_items / seconds`` ([WWC24, Section 5] reports it in Kops)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return float(n_items) / float(seconds)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``fn()`` and return ``(result, wall seconds)`` with ``time.perf_counter``.

    Time only the update calls ([WWC24, Section 5]), not data generation or queries.
    """
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
