"""Count-Median sketch: the Count-Min table queried with the median of its rows. No privacy.

Cormode and Muthukrishnan ("An improved data stream summary: the count-min sketch and its
applications", J. Algorithms 2005, cited as [CM05]) answer point queries on general turnstile
data, where frequencies may be negative and the minimum over rows is no longer an upper bound,
with the **median** of the key's counters instead of their minimum. The table and its updates
are exactly those of :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` (no sign
hash); only the query differs. Its release adds zero-mean noise as for Count Sketch, with the
Count-Min sensitivity (:class:`~beam_dpsketch.sketches.linear.private.PrivateCountMedianSketch`,
docs/algorithms.md#lin-count-median).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from beam_dpsketch.checks import check_probability, check_real
from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.sketches.linear.base import LinearSketch, binomial_upper_tail, check_row_totals

__all__ = ["CountMedianSketch", "median_row_tail"]


def median_row_tail(depth: int, p: float) -> float:
    """``P(|median error| > t)`` bound when each of ``depth`` independent rows errs by more
    than ``t`` with probability at most ``p``.

    The median of ``d`` values is above ``t`` only if at least ``ceil(d/2)`` of them are (for an
    even ``d`` the mean of the middle two is above ``t`` only if the upper one is), and below
    ``-t`` likewise, so at least ``ceil(d/2)`` rows err by more than ``t``: the tail is
    ``P(Binomial(d, p) >= ceil(d/2))``, computed exactly (a Chernoff bound is useless at the
    usual depths of 3 to 10).
    """
    return binomial_upper_tail(depth, (depth + 1) // 2, min(1.0, max(0.0, float(p))))


class CountMedianSketch(LinearSketch):
    """Exact Count-Median sketch: ``depth`` rows of ``width`` int64 counters, median query.

    The table is a Count-Min table: each key adds its weight to one counter per row, with no
    sign. The estimate of a key is the **median** over rows of its counters ([CM05], point
    queries on general turnstile data). Weights may be negative (general turnstile model): in
    row ``r`` the key's counter holds ``f(x)`` plus the weight of the other keys hashed to it,
    whose absolute value is at most ``||f||_1 / width`` on average over a pairwise independent
    hash, so by Markov's inequality each row errs by more than ``t`` with probability at most
    ``||f||_1 / (width t)`` and the median errs by more than ``t`` with probability at most
    ``P(Binomial(depth, ||f||_1 / (width t)) >= ceil(depth / 2))`` (:meth:`error_bound`,
    assuming independent rows). On non-negative data the estimate is never below the Count-Min
    estimate of the same table; unlike Count-Min it can underestimate, and unlike Count Sketch
    its collisions do not cancel on average (it is biased up by them on non-negative data).
    For an even ``depth`` the median is the mean of the two middle rows, so estimates are
    float64.

    This object is **not** differentially private; privacy is added once, at release
    (:class:`~beam_dpsketch.sketches.linear.private.PrivateCountMedianSketch`).

    Parameters
    ----------
    width
        Counters per row, in ``[1, 2**31]``.
    depth
        Number of rows, in ``[1, 64]``.
    seed
        Hash seed in ``[0, 2**32)``. The row hashes are those of a Count-Min sketch with the
        same ``(width, depth, seed)``, so both tables of one input are identical.
    """

    KIND = "CountMedianSketch"
    __slots__ = ()

    def estimate_hashes(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Median over rows of each key's counters (float64)."""
        return np.median(self._row_values(h1, h2), axis=0)

    def row_estimates(self, keys: Any) -> np.ndarray:
        """Each key's counter in each row, int64 array of shape ``(depth, n)``."""
        return self._row_values(*hash_keys(keys, self.seed))

    @classmethod
    def _check_invariants(cls, table: np.ndarray, total_weight: int) -> None:
        check_row_totals(table, total_weight, "Count-Median")

    def error_bound(self, confidence: float = 0.95, l1_norm: float | None = None) -> float:
        """Half-width ``B`` with ``|estimate(x) - f(x)| <= B`` with probability ``>= confidence``.

        For one key fixed in advance, over the hash functions (independent rows): the smallest
        ``B`` with ``P(Binomial(depth, l1_norm / (width B)) >= ceil(depth / 2)) <=
        1 - confidence`` (see the class docstring and :func:`median_row_tail`).

        Parameters
        ----------
        confidence
            In ``(0, 1)``.
        l1_norm
            ``||f||_1``, the sum of the absolute frequencies. Default: the total weight, which
            is ``||f||_1`` when every frequency is non-negative (strict turnstile data); pass it
            for general turnstile data, where the total weight can be smaller.
        """
        beta = 1.0 - check_probability(confidence, "confidence")
        if l1_norm is None:
            l1 = abs(float(self.total_weight))
        else:
            l1 = check_real(l1_norm, "l1_norm", lower=0.0)
        if l1 == 0.0:
            return 0.0
        # The tail grows with the per-row probability p = l1 / (width B): find the largest p
        # whose median tail is at most beta (bisection), then B = l1 / (width p).
        lo, hi = 0.0, 1.0
        if median_row_tail(self.depth, hi) <= beta:
            return 0.0
        for _ in range(100):
            mid = (lo + hi) / 2.0
            if median_row_tail(self.depth, mid) <= beta:
                lo = mid
            else:
                hi = mid
        return l1 / (self.width * lo)
