"""Count-Min sketch (Cormode and Muthukrishnan 2005), exact and mergeable. No privacy."""

from __future__ import annotations

import math

import numpy as np

from beam_dpsketch.checks import check_probability
from beam_dpsketch.sketches.linear.base import LinearSketch, check_row_totals

__all__ = ["CountMinSketch"]


class CountMinSketch(LinearSketch):
    """Exact Count-Min sketch: ``depth`` rows of ``width`` int64 counters.

    The estimate of a key is the minimum over rows of its counters. With non-negative weights it
    never underestimates, and with probability at least ``1 - exp(-depth)`` it overestimates by at
    most ``e / width * total_weight`` (Cormode and Muthukrishnan 2005, Theorem 1;
    :meth:`error_bound`). Row hashes come from :mod:`beam_dpsketch.hashing` (double hashing of
    seeded MurmurHash3), so two sketches with the same ``(width, depth, seed)`` merge exactly.

    This object is **not** differentially private; privacy is added once, at release.

    Parameters
    ----------
    width
        Counters per row, in ``[1, 2**31]``.
    depth
        Number of rows, in ``[1, 64]``.
    seed
        Hash seed in ``[0, 2**32)``.
    """

    KIND = "CountMinSketch"
    __slots__ = ()

    @classmethod
    def from_error(cls, epsilon: float, delta: float, seed: int = 0) -> CountMinSketch:
        """Size a sketch for additive error ``epsilon * total_weight`` w.p. ``1 - delta``."""
        epsilon = check_probability(epsilon, "epsilon")
        delta = check_probability(delta, "delta")
        return cls(math.ceil(math.e / epsilon), math.ceil(math.log(1 / delta)), seed)

    def estimate_hashes(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Minimum over rows of each key's counters (int64)."""
        return self._row_values(h1, h2).min(axis=0)

    @classmethod
    def _check_invariants(cls, table: np.ndarray, total_weight: int) -> None:
        check_row_totals(table, total_weight, "Count-Min")

    def error_bound(self) -> tuple[float, float]:
        """``(additive error, failure probability)`` of a point query with non-negative weights."""
        return math.e / self.width * self.total_weight, math.exp(-self.depth)
