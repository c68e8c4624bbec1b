"""Count Sketch (Charikar, Chen and Farach-Colton 2002), exact and mergeable. No privacy."""

from __future__ import annotations

from typing import Any

import numpy as np

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.sketches.linear.base import LinearSketch

__all__ = ["CountSketch"]


class CountSketch(LinearSketch):
    """Exact Count Sketch: ``depth`` rows of ``width`` signed int64 counters.

    Each key adds ``sign_i(key) * weight`` to one counter per row; the estimate of a key is the
    median over rows of ``sign_i(key) * counter``. Each row's estimate is unbiased, with variance
    at most ``||f||_2^2 / width`` (Charikar et al. 2002, Lemma 2). Weights may be negative
    (turnstile model). For an even ``depth`` the median is the mean of the two middle rows, so
    estimates are float64.

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

    KIND = "CountSketch"
    SIGNED = True
    __slots__ = ()

    def row_estimates(self, keys: Any) -> np.ndarray:
        """Per-row unbiased estimates ``sign * counter``, int64 array of shape ``(depth, n)``."""
        return self._row_values(*hash_keys(keys, self.seed))

    def estimate_hashes(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Median over rows of ``sign * counter`` (float64)."""
        return np.median(self._row_values(h1, h2), axis=0)
