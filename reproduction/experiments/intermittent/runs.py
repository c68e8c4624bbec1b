"""DP Count Sketch for intermittent queries (Yildirim et al.): results R1-R12 of [YKAE, Section VI, Figs. 3-4].

Papers are cited by the keys of docs/algorithms.md#references ([YKAE] here). The paper tests only the
final algorithm, D3 use-and-keep cell perturbation (paper Algorithm 4; the library's
:class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch`) with Count Sketch, on one Zipf(1)
stream queried in batches at evenly spaced times ([YKAE, Section VI] and docs/algorithms.md#int-a8). Its results are qualitative
statements about Figures 1-4 (the images are missing from the text copy, docs/algorithms.md#int-a9); this module turns
each into a measurement with a computed verdict:

====  ==========================================================================================
R1    ``E[m_i]`` (max load of ``n_Q`` balls in ``w = 5000`` bins) grows sub-linearly in ``n_Q``;
      ``mhat_Q << n_Q`` for large ``n_Q`` ([YKAE, Fig. 1] table, within 4 SE).
R2    Neither S3 nor S4 is uniformly better; S3 wins when the spread ``u`` is large, for
      ``d >= 5`` ([YKAE, Fig. 2] table and crossovers, by numerical integration).
R3    MRE grows as eps falls, for every ``(n_Q, d)``.
R4    MRE does not increase with ``n_Q`` (ties within 2 SE), for every ``(eps, d)``.
R5    At the smallest eps the best ``d`` never increases as ``n_Q`` falls (paper: 15 for large
      ``n_Q``, 9 at ``1e4``, 3 below; the exact boundaries may move).
R6    The largest ``n_Q`` at which the smallest ``d`` is best does not increase with eps.
R7    MRE grows with ``u``, for every ``(eps, d)``.
R8    The best ``d`` (averaged over ``n_Q``) never increases as eps falls, per ``u``.
R9    The cumulative relative error grows sub-linearly in time: log-log slope of CSRE < 1.
R10   D3 is eps-DP: the exact log-likelihood ratio of transcripts of the core object on random
      neighbours is at most eps ([YKAE, Algorithm 4] identity).
R11   D3's noise variance is linear in the uses, D2's geometric, and D3 < D2 for every use.
R12   The Theorem 5 bound is not monotone in ``d`` ([YKAE, Theorem 5] worked example).
====  ==========================================================================================

R1, R2, R10-R12 come from the core classes and the library's oracles (docs/algorithms.md#int-oracles); R3-R9 from the runs.

Runs ([YKAE, Section VI, Figs. 3-4] compute plan; never event by event). One Zipf stream (exact rejection sampler,
:func:`~reproduction.datasets.zipf_stream`) is shared by all scenarios and repetitions
([YKAE, Section VI]). Per repetition (hash seed) :class:`StreamCells` sorts each row's arrivals by
``(column, time)`` once, so the exact value of any cell at any time is two indices into a prefix
sum. :func:`use_and_keep_answers` then answers every query of a scenario at once: the distinct
``(cell, batch)`` pairs read by the batches get one draw each, summed over the batches within a
cell (the kept noise ``N`` of D3 just after the batch's fresh draw), and each answer is the median
over rows of ``s_i(x) (C + N)``. Calibration and noise semantics are the core's: scale
``UseAndKeepSketch(...).noise_scale`` (``d/eps`` with eps rounded down), one exact discrete
Laplace draw per (cell, batch that reads it), kept, never skipped. Two noise modes:

* ``"core"``: each draw is the one :meth:`UseAndKeepSketch.batch_draws` gives, so the answers
  equal the core object's bit for bit (tested). It draws a 4096-cell block per (batch, block),
  about 1 ms each: too slow for ``10**4`` single-query batches;
* ``"pooled"`` (the runs): the same draws' distribution, i.i.d., taken in one vectorised call per
  scenario from the stream ``(sketch_id, "pooled")``, in ``(cell, batch)`` order.

Recorded variance reductions (docs/algorithms.md#int-a1, allowed): within a repetition every scenario shares
the hash functions, the ``d = 3`` and ``d = 9`` rows are the first rows of ``d = 15``, and the query
sets of one ``(n_Q, u)`` serve every ``(eps, d)``. Noise is independent per scenario.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.hashing import hash_keys, row_buckets, row_signs
from beam_dpsketch.noise import NoiseSource, discrete_laplace
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.intermittent.sketch import (
    UseAndKeepSketch,
    sensitive_query_bound,
)
from beam_dpsketch.sketches.intermittent.strategies import UseAndForgetCellSketch
from reproduction import datasets
from reproduction.runner import (
    Experiment,
    derive_seed,
)
from reproduction.tables import param_tag

__all__ = [
    "MODES",
    "SPEC_FIG1",
    "SPEC_FIG2",
    "IntermittentConfig",
    "QueryPairs",
    "StreamCells",
    "batch_times",
    "build_experiments",
    "checkpoint_times",
    "crosscheck_cell",
    "fig2_crossover",
    "fig2_s4_error",
    "fig2_s4_limit",
    "g_d",
    "lambda_for_rho",
    "maxload_cell",
    "privacy_cell",
    "query_pairs",
    "query_sets",
    "run_cell",
    "run_metrics",
    "theorem5_bound",
    "use_and_keep_answers",
    "variance_cell",
]

EXPERIMENT_VERSION = "1"
STREAM_SEED = (
    20_240_601  # the one stream shared by every scenario and repetition ([YKAE, Section VI])
)
BASE_SEED = 9
eps_tag = functools.partial(param_tag, "e", dot="p")  # column-name fragment of an eps: e0p5


@dataclass(frozen=True)
class IntermittentConfig:
    """Scale of one run of the intermittent-queries report ([YKAE, Section VI; Section VI, Figs. 3-4], library choice CI config).

    Parameters
    ----------
    mode
        ``smoke``, ``quick`` (the CI-size configuration) or ``full`` (2**24 arrivals).
    n
        Stream length ``N`` (one arrival per tick; time = arrival index).
    domain
        Zipf universe ``K`` (items ``1..K``, ``P(k) ~ 1/k``).
    t0
        First batch only after ``t0`` arrivals.
    width
        Columns ``w``.
    total_queries
        Queried items per scenario; ``B = total_queries / n_Q`` batches.
    n_qs, us, epsilons, depths
        The grids of ``n_Q``, ``u`` (queries drawn uniformly from the top-``u`` ranks), eps, ``d``.
    reps
        Repetitions (independent hash seeds, query sets and noise).
    checkpoints
        Times at which the cumulative error curves are recorded (evenly spaced after ``t0``).
    maxload_reps, privacy_trials, variance_width, variance_uses
        Sizes of the R1, R10 and R11 oracles.
    """

    mode: str
    n: int
    domain: int
    t0: int
    width: int
    total_queries: int
    n_qs: tuple[int, ...]
    us: tuple[int, ...]
    epsilons: tuple[float, ...]
    depths: tuple[int, ...]
    reps: int
    checkpoints: int
    maxload_reps: int
    privacy_trials: int
    variance_width: int
    variance_uses: int


MODES: dict[str, IntermittentConfig] = {
    "smoke": IntermittentConfig(
        mode="smoke",
        n=2**16,
        domain=2**18,
        t0=1024,
        width=5000,
        total_queries=1000,
        n_qs=(1, 100, 1000),
        us=(50, 5000),
        epsilons=(0.01, 1.0),
        depths=(3, 9),
        reps=1,
        checkpoints=10,
        maxload_reps=200,
        privacy_trials=15,
        variance_width=1000,
        variance_uses=6,
    ),
    "quick": IntermittentConfig(
        mode="quick",
        n=2**20,
        domain=2**22,
        t0=4096,
        width=5000,
        total_queries=10_000,
        n_qs=(1, 100, 10_000),
        us=(50, 5000),
        epsilons=(0.01, 0.05, 1.0),
        depths=(3, 9, 15),
        reps=2,
        checkpoints=20,
        maxload_reps=2000,
        privacy_trials=150,
        variance_width=5000,
        variance_uses=12,
    ),
    "full": IntermittentConfig(
        mode="full",
        n=2**24,
        domain=2**29,
        t0=2**16,
        width=5000,
        total_queries=1_000_000,
        n_qs=(1, 1000, 10_000, 100_000, 1_000_000),
        us=(50, 5000, 500_000),
        epsilons=(0.01, 0.05, 1.0),
        depths=(3, 9, 15),
        reps=4,
        checkpoints=20,
        maxload_reps=2000,
        privacy_trials=300,
        variance_width=5000,
        variance_uses=12,
    ),
}
"""Presets. ``quick`` is [YKAE, Section VI, Figs. 3-4]'s CI configuration (N = 2**20, domain 2**22, T0 = 4096,
10**4 queries, n_Q in {1, 100, 1e4}, u in {50, 5000}, 2 reps); ``full`` is the paper's grid
([YKAE, Section VI]: 10**6 queries, n_Q in {1, 1e3, 1e4, 1e5, 1e6}, u in {50, 5000, 5e5}, K = 2**29) on
2**24 arrivals (the paper: 2**27) with ``T0 = 2**16`` (the paper's ``T0/N`` of about 1/270) and 4
reps (the paper: 20)."""

# [YKAE, Fig. 1] (Monte Carlo, w = 5000): n_Q -> (E[m_i], one standard error).
SPEC_FIG1: dict[int, tuple[float, float]] = {
    1: (1.0, 0.0),
    10: (1.0085, 0.002),
    100: (1.659, 0.011),
    1000: (3.243, 0.011),
    10_000: (8.911, 0.018),
    100_000: (38.39, 0.04),
    1_000_000: (254.2, 0.3),
}
# [YKAE, Fig. 2]: E|fhat - 0| / b of S4 at u/b in FIG2_RATIOS, the limit, and the crossover u/b.
FIG2_RATIOS = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 50.0)
SPEC_FIG2: dict[int, dict[str, Any]] = {
    3: {
        "s4": (0.5833, 0.6155, 0.6822, 0.8180, 0.9085, 0.9809, 0.9998, 1.0000),
        "limit": 1.0,
        "crossover": None,
    },
    5: {
        "s4": (0.4396, 0.4872, 0.5902, 0.8234, 1.0005, 1.1608, 1.2077, 1.2083),
        "limit": 29 / 24,
        "crossover": 2.996,
    },
    9: {
        "s4": (0.3156, 0.3820, 0.5246, 0.8634, 1.1585, 1.4826, 1.5991, 1.6010),
        "limit": 1.601042,
        "crossover": 2.430,
    },
    15: {
        "s4": (0.2370, 0.3215, 0.4963, 0.9027, 1.2820, 1.7869, 2.0209, 2.0256),
        "limit": 2.025595,
        "crossover": 2.243,
    },
}
# [YKAE, Theorem 5]: lambda_rho (None: no solution) for d in (3, 9, 15, 31), rho in SPEC_RHOS.
SPEC_RHOS = (0.05, 0.10, 0.25, 0.50, 0.75)
SPEC_LAMBDA_RHO: dict[int, tuple[float | None, ...]] = {
    3: (None, None, None, None, 0.123364),
    9: (None, None, None, 0.168932, 0.299298),
    15: (None, None, 0.131501, 0.253186, 0.348442),
    31: (0.121638, 0.175852, 0.257725, 0.335205, 0.397383),
}
# [YKAE, Theorem 5] worked example: ||f||^2/w = 1e4, eps = 1, u_i = 1, kappa = 200.
R12_EXAMPLE = {"fnorm2_w": 1e4, "eps": 1.0, "kappa": 200.0}
R12_SPEC_MIN = {"paper": (47, 0.2409), "corrected": (33, 0.3655)}
PAPER_R5 = {1: 3, 1000: 3, 10_000: 9, 100_000: 15, 1_000_000: 15}


# ------------------------------------------------------------------------------------------------
# Oracles: [YKAE, Theorem 5] and [YKAE, Fig. 2]
# ------------------------------------------------------------------------------------------------


def g_d(lam: Any, d: int) -> Any:
    """Lemma 2's median tail ``g_d(lambda) = exp(-(d/2)(1 - 2 lambda)) (2 (1 - lambda))^(d/2)``.

    Increasing on ``[0, 1/2]`` from ``(2/e)^(d/2)`` to 1 ([YKAE, Theorem 5]).
    """
    lam = np.asarray(lam, dtype=np.float64)
    return np.exp(-(d / 2) * (1 - 2 * lam) + (d / 2) * np.log(2 * (1 - lam)))


def lambda_for_rho(d: int, rho: float) -> float | None:
    """``lambda_rho`` in ``(0, 1/2)`` with ``g_d(lambda_rho) = rho`` (bisection), or None.

    A solution exists only when ``rho > (2/e)^(d/2)`` ([YKAE, Theorem 5], docs/algorithms.md#int-e15).
    """
    if not float(g_d(0.0, d)) < rho < 1.0:
        return None
    lo, hi = 0.0, 0.5
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(g_d(mid, d)) < rho else (lo, mid)
    return (lo + hi) / 2


def theorem5_bound(
    fnorm2_w: float,
    eps: float,
    uses: Sequence[int] | np.ndarray,
    kappa: float,
    *,
    paper_constants: bool = False,
    noise_variance: float | None = None,
) -> float:
    """``P(|fhat_x - f_x| > kappa) <= g_d(lambda)`` of [YKAE, Theorem 5] (docs/algorithms.md#int-e14).

    Corrected: ``lambda = ||f||^2/(kappa^2 w) + (2 d/(kappa^2 eps^2)) sum u_i`` (the variance of
    ``Lap(d/eps)`` is ``2 d^2/eps^2``); ``paper_constants=True`` drops the factor 2 as printed.
    ``noise_variance`` replaces ``2 (d/eps)^2`` by the variance of one draw of another noise
    (e.g. the core's discrete Laplace). Returns 1 when ``lambda >= 1/2`` (no bound).
    """
    u = np.asarray(uses, dtype=np.float64)
    d = u.size
    if noise_variance is None:
        noise_variance = (1.0 if paper_constants else 2.0) * (d / eps) ** 2
    lam = fnorm2_w / kappa**2 + noise_variance * float(u.sum()) / (d * kappa**2)
    return float(g_d(lam, d)) if lam < 0.5 else 1.0


def _gauss_grid(breaks: Sequence[float], step: float = 1.0, order: int = 16):
    """Gauss-Legendre nodes and weights on ``[breaks[0], breaks[-1]]`` split at ``breaks``."""
    x0, w0 = np.polynomial.legendre.leggauss(order)
    xs, ws = [], []
    for a, b in zip(breaks[:-1], breaks[1:], strict=True):
        m = max(1, math.ceil((b - a) / step))
        edges = np.linspace(a, b, m + 1)
        half = np.diff(edges)[:, None] / 2
        mid = (edges[:-1] + edges[1:])[:, None] / 2
        xs.append((mid + half * x0).ravel())
        ws.append((half * w0).ravel())
    return np.concatenate(xs), np.concatenate(ws)


def _lap_cdf(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0)), 1 - 0.5 * np.exp(-np.maximum(x, 0)))


def _binom_pmf(n: int, p: np.ndarray) -> np.ndarray:
    """``(len(p), n + 1)`` binomial pmfs."""
    k = np.arange(n + 1)
    coef = np.array([math.comb(n, int(i)) for i in k], dtype=np.float64)
    return coef * p[:, None] ** k * (1 - p[:, None]) ** (n - k)


def _abs_expectation(cdf, breaks: Sequence[float]) -> float:
    """``E|X| = int_{-inf}^0 F + int_0^inf (1 - F)`` on the given breakpoints (tails < 1e-20)."""
    x, w = _gauss_grid(breaks)
    f = cdf(x)
    return float(np.sum(w * np.where(x < 0, f, 1 - f)))


def fig2_s4_error(d: int, ratio: float) -> float:
    """[YKAE, Fig. 2]: ``E|median|/b`` of ``(d+1)/2`` values ``Lap(b)`` and ``(d-1)/2`` values
    ``u + Lap(b)`` (``ratio = u/b``), by Gauss-Legendre integration of the median's CDF."""
    if d < 1 or d % 2 == 0:
        raise ValueError(f"d must be odd and >= 1, got {d}")
    k0, k1, m = (d + 1) // 2, (d - 1) // 2, (d + 1) // 2

    def cdf(x: np.ndarray) -> np.ndarray:
        # P(median <= x) = P(#values <= x >= m); the count is Bin(k0, F(x)) + Bin(k1, F(x - u)).
        conv = np.zeros((x.size, k0 + k1 + 1))
        a, b = _binom_pmf(k0, _lap_cdf(x)), _binom_pmf(k1, _lap_cdf(x - ratio))
        for j in range(k1 + 1):
            conv[:, j : j + k0 + 1] += a * b[:, j : j + 1]
        return conv[:, m:].sum(axis=1)

    breaks = sorted({-40.0, 0.0, float(ratio), float(ratio) + 40.0})
    return _abs_expectation(cdf, breaks)


def fig2_s4_limit(d: int) -> float:
    """``lim_{u -> inf}``: ``E|max of (d+1)/2 iid Lap(1)|`` ([YKAE, Fig. 2])."""
    m = (d + 1) // 2
    return _abs_expectation(lambda x: _lap_cdf(x) ** m, [-40.0, 0.0, 40.0])


def fig2_crossover(d: int, hi: float = 50.0) -> float | None:
    """Smallest ``u/b`` where S4's error exceeds S3's (1.0), by bisection; None if never.

    "Exceeds" means by more than 1e-9 (integration error): for ``d = 3`` S4 only ties S3 in the
    limit ([YKAE, Fig. 2]), approaching 1 from below.
    """
    grid = np.linspace(0, hi, 101)
    vals = np.array([fig2_s4_error(d, r) for r in grid])
    above = np.flatnonzero(vals > 1.0 + 1e-9)
    if above.size == 0:
        return None
    lo, up = float(grid[above[0] - 1]), float(grid[above[0]])
    for _ in range(40):
        mid = (lo + up) / 2
        lo, up = (mid, up) if fig2_s4_error(d, mid) < 1.0 else (lo, mid)
    return (lo + up) / 2


# ------------------------------------------------------------------------------------------------
# Schedule, queries, and the vectorised D3 path
# ------------------------------------------------------------------------------------------------


def batch_times(n: int, t0: int, batches: int, anchor: str = "end") -> np.ndarray:
    """docs/algorithms.md#int-a1 schedule: ``t_k = T0 + floor(k (N - T0)/B)``, ``k = 1..B`` (``t_B = N``).

    ``anchor="start"`` gives ``t_k = T0 + floor((k-1)(N - T0)/B)``. Times are arrival counts:
    batch ``k`` sees elements ``1..t_k``.
    """
    if batches < 1 or not 0 <= t0 < n:
        raise ValueError(f"need batches >= 1 and 0 <= t0 < n, got {batches}, {t0}, {n}")
    k = np.arange(1, batches + 1, dtype=np.int64)
    if anchor == "start":
        k -= 1
    elif anchor != "end":
        raise ValueError(f"anchor must be 'end' or 'start', got {anchor!r}")
    return t0 + (k * (n - t0)) // batches


def query_sets(seed: int, n_q: int, batches: int, u: int) -> np.ndarray:
    """``(B, n_Q)`` items drawn uniformly **with replacement** from ranks ``{1..u}`` (docs/algorithms.md#int-a1)."""
    rng = np.random.default_rng([seed, n_q, batches, u])
    return rng.integers(1, u + 1, size=(batches, n_q), dtype=np.int64)


class StreamCells:
    """Exact Count Sketch cell values of a fixed stream at any times ([YKAE, Section VI, Figs. 3-4] compute plan).

    Per row: arrivals sorted by ``(column, position)`` (a stable argsort of the column), composite
    keys ``column * N + position`` and the prefix sum of the signs in that order. The value of cell
    ``(i, j)`` after ``t`` arrivals is then ``cs[searchsorted(keys, j N + t)] - cs[start_j]``.
    Hashing is the library's (``hash_keys``, ``row_buckets``, ``row_signs``), so the cells are those
    of :class:`~beam_dpsketch.sketches.CountSketch` (and the private sketches) with the same
    ``(width, depth, seed)``; rows are nested (depth ``d`` uses the first ``d`` rows).
    """

    def __init__(self, stream: np.ndarray, width: int, depth: int, seed: int) -> None:
        stream = np.asarray(stream)
        if stream.ndim != 1 or stream.dtype.kind not in "iu":
            raise ValueError("stream must be a one-dimensional integer array")
        self.n, self.width, self.depth, self.seed = len(stream), int(width), int(depth), int(seed)
        items, inverse = np.unique(stream, return_inverse=True)
        h1, h2 = hash_keys(items.astype(np.int64), self.seed)
        buckets = row_buckets(h1, h2, self.depth, self.width)
        signs = row_signs(h2, self.depth).astype(np.int8)
        small = (
            np.int16 if self.width <= 2**15 else np.int32
        )  # int16: a radix argsort (docs/algorithms.md#intermittent-queries)
        self._rows = []
        for i in range(self.depth):
            col = buckets[i].astype(small)[inverse]
            order = np.argsort(col, kind="stable")
            counts = np.bincount(col, minlength=self.width)
            keys = np.repeat(np.arange(self.width, dtype=np.int64) * self.n, counts) + order
            # |prefix sums| <= N: int32 halves the memory of the 2**24-arrival runs.
            cs = np.zeros(self.n + 1, dtype=np.int32 if self.n < 2**31 else np.int64)
            np.cumsum(signs[i][inverse][order], dtype=cs.dtype, out=cs[1:])
            self._rows.append((keys, cs, np.r_[0, np.cumsum(counts)]))

    def values(self, row: int, cols: np.ndarray, times: np.ndarray) -> np.ndarray:
        """``C(row, cols[p])`` after ``times[p]`` arrivals (int64), vectorised."""
        keys, cs, starts = self._rows[row]
        cols = np.asarray(cols, dtype=np.int64)
        target = cols * self.n + np.asarray(times, dtype=np.int64)
        order = np.argsort(target, kind="stable")  # sorted needles: cache-friendly search
        idx = np.empty(target.size, dtype=np.int64)
        idx[order] = np.searchsorted(keys, target[order])
        return cs[idx].astype(np.int64) - cs[starts[cols]]


@dataclass(frozen=True)
class QueryPairs:
    """The distinct (batch, item) pairs of a query schedule and their cells in every row."""

    batch: np.ndarray  # 0-based batch index of each pair
    item: np.ndarray  # queried item
    mult: np.ndarray  # how many queries of the batch ask for it
    inverse: np.ndarray  # (B, n_Q) -> pair index
    cols: np.ndarray  # (depth, P) columns
    signs: np.ndarray  # (depth, P) +-1
    exact: np.ndarray  # (depth, P) exact cell values at the pair's batch time


def query_pairs(cells: StreamCells, times: np.ndarray, queries: np.ndarray) -> QueryPairs:
    """Distinct (batch, item) pairs of ``queries`` (``(B, n_Q)``) and their exact cell values."""
    queries = np.asarray(queries, dtype=np.int64)
    b, n_q = queries.shape
    items, qinv = np.unique(queries, return_inverse=True)
    key = np.repeat(np.arange(b, dtype=np.int64), n_q) * len(items) + qinv.reshape(-1)
    pairs, inverse, mult = np.unique(key, return_inverse=True, return_counts=True)
    batch, item_idx = pairs // len(items), pairs % len(items)
    h1, h2 = hash_keys(items, cells.seed)
    cols = row_buckets(h1, h2, cells.depth, cells.width)[:, item_idx]
    signs = row_signs(h2, cells.depth)[:, item_idx]
    t = np.asarray(times, dtype=np.int64)[batch]
    exact = np.stack([cells.values(i, cols[i], t) for i in range(cells.depth)])
    return QueryPairs(batch, items[item_idx], mult, inverse.reshape(b, n_q), cols, signs, exact)


def use_and_keep_answers(
    pairs: QueryPairs,
    width: int,
    depth: int,
    epsilon: float | str | Fraction,
    *,
    noise_source: NoiseSource,
    sketch_id: Any,
    seed: int,
    noise: str = "pooled",
) -> np.ndarray:
    """D3 ([YKAE, Algorithm 4]) answers to every distinct (batch, item) pair, vectorised.

    Each batch's cell set ``E`` is the distinct cells its queries read in the first ``depth`` rows;
    each ``(cell, batch)`` in ``E`` gets one fresh draw at the core's scale
    (:attr:`UseAndKeepSketch.noise_scale`), kept: the released value is ``C(t_k)`` plus the sum
    of the cell's draws up to and including batch ``k``. Answers are the median over rows of the
    signed released values (odd ``depth``).

    Parameters
    ----------
    pairs
        From :func:`query_pairs`, with at least ``depth`` rows.
    noise
        ``"core"``: the draws of ``UseAndKeepSketch(width, depth, PrivacyBudget.pure(epsilon),
        noise_source, sketch_id, seed).batch_draws`` (bit-identical answers; one sampler call
        per batch and block touched). ``"pooled"``: i.i.d. draws of the same distribution from the one stream
        ``(sketch_id, "pooled")`` in ``(cell, batch)`` order (one sampler call).

    Returns
    -------
    numpy.ndarray
        float64 estimates, one per pair.
    """
    if depth % 2 == 0 or depth > pairs.cols.shape[0]:
        raise ValueError(f"depth must be odd and <= {pairs.cols.shape[0]}, got {depth}")
    probe = UseAndKeepSketch(
        width,
        depth,
        PrivacyBudget.pure(float(epsilon)),
        noise_source=noise_source,
        sketch_id=sketch_id,
        seed=seed,
    )
    n_batches = int(pairs.batch.max()) + 1 if pairs.batch.size else 1
    flat = pairs.cols[:depth] + (np.arange(depth, dtype=np.int64) * width)[:, None]
    key = flat * n_batches + pairs.batch[None, :]
    uniq, inv = np.unique(key.reshape(-1), return_inverse=True)  # sorted by (cell, batch)
    cell, batch = uniq // n_batches, uniq % n_batches
    if noise == "pooled":
        stream = noise_source.stream((sketch_id, "pooled"))
        draws = discrete_laplace(stream, probe.noise_scale, uniq.size)
    elif noise == "core":
        draws = np.empty(uniq.size, dtype=np.int64)
        by_batch = np.lexsort((cell, batch))
        cuts = np.flatnonzero(np.diff(batch[by_batch])) + 1
        for seg in np.split(by_batch, cuts):
            draws[seg] = probe.batch_draws(cell[seg], int(batch[seg[0]]) + 1)
    else:
        raise ValueError(f"noise must be 'pooled' or 'core', got {noise!r}")
    # Kept noise: running sum of the draws within each cell, in batch order.
    total = np.cumsum(draws)
    first = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    offset = np.repeat(total[first] - draws[first], np.diff(np.r_[first, uniq.size]))
    kept = (total - offset)[inv].reshape(depth, -1)
    rows = pairs.signs[:depth] * (pairs.exact[:depth] + kept)
    return np.partition(rows, depth // 2, axis=0)[depth // 2].astype(np.float64)


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _stream(n: int, domain: int) -> tuple[np.ndarray, datasets.WindowCounter]:
    stream = datasets.zipf_stream(n, 1.0, domain, STREAM_SEED, method="rejection")
    return stream, datasets.WindowCounter(stream)


@functools.lru_cache(maxsize=1)
def _cells(n: int, domain: int, width: int, depth: int, seed: int) -> StreamCells:
    return StreamCells(_stream(n, domain)[0], width, depth, seed)


def run_metrics(config: IntermittentConfig) -> list[str]:
    """Metric names of :func:`run_cell` for a configuration."""
    out = ["batches", "pairs", "n_zero", *[f"np_mre_d{d}" for d in config.depths]]
    for eps in config.epsilons:
        for d in config.depths:
            out += [f"mre_{eps_tag(eps)}_d{d}", f"mae_{eps_tag(eps)}_d{d}"]
            out += [f"csre_{eps_tag(eps)}_d{d}_{g}" for g in range(1, config.checkpoints + 1)]
    return out


def checkpoint_times(n: int, t0: int, checkpoints: int) -> np.ndarray:
    """Times at which CSRE is recorded: ``T0 + floor(g (N - T0)/G)``, ``g = 1..G``."""
    return batch_times(n, t0, checkpoints)


def run_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """One repetition of one ``(n_Q, u)`` scenario, for every ``(eps, d)`` ([YKAE, Section VI; Section VI, Figs. 3-4]).

    Parameters
    ----------
    params
        ``rep``, ``n``, ``domain``, ``t0``, ``width``, ``total``, ``n_q``, ``u``, ``epsilons``
        and ``depths`` (comma-separated: CSV-friendly), ``checkpoints``.
    seed
        The runner's seed; the repetition's hash seed is ``derive_seed(seed, rep)``, the query
        sets are seeded by it and ``(n_Q, u)``, and the noise comes from
        ``NoiseSource.insecure_for_tests(hash seed)`` with stream ``(("intermittent", n_Q, u, eps,
        d), "pooled")``.

    Returns
    -------
    dict
        :func:`run_metrics`: per ``(eps, d)`` the MRE and MAE over all queries and the CSRE at
        each checkpoint; the non-private MRE per ``d``; counts of batches, pairs, zero-count queries.
    """
    n, t0, width = int(params["n"]), int(params["t0"]), int(params["width"])
    n_q, u, total = int(params["n_q"]), int(params["u"]), int(params["total"])
    depths = [int(d) for d in str(params["depths"]).split(",")]
    rep_seed = derive_seed(seed, int(params["rep"]))
    stream, counter = _stream(n, int(params["domain"]))
    cells = _cells(n, int(params["domain"]), width, max(depths), rep_seed)
    b = total // n_q
    times = batch_times(n, t0, b)
    pairs = query_pairs(cells, times, query_sets(rep_seed, n_q, b, u))
    truth = counter.prefix_counts(pairs.item, times[pairs.batch]).astype(np.float64)
    denom = np.maximum(truth, 1.0)
    weight = pairs.mult.astype(np.float64)
    checkpoints = checkpoint_times(n, t0, int(params["checkpoints"]))
    seen = np.searchsorted(times, checkpoints, side="right")  # batches with t_k <= c_g
    out: dict[str, float] = {
        "batches": b,
        "pairs": pairs.batch.size,
        "n_zero": float(np.sum(weight[truth == 0])),
    }
    for d in depths:
        est = np.partition(pairs.signs[:d] * pairs.exact[:d], d // 2, axis=0)[d // 2]
        out[f"np_mre_d{d}"] = float(np.sum(weight * np.abs(est - truth) / denom) / total)
    source = NoiseSource.insecure_for_tests(rep_seed)  # reproduction only: a public test key
    for eps in str(params["epsilons"]).split(","):
        for d in depths:
            sid = ("intermittent", n_q, u, str(eps), d)
            est = use_and_keep_answers(
                pairs, width, d, str(eps), noise_source=source, sketch_id=sid, seed=rep_seed
            )
            err = np.abs(est - truth)
            re_batch = np.bincount(pairs.batch, weights=weight * err / denom, minlength=b)
            cum = np.r_[0.0, np.cumsum(re_batch)]
            tag = f"{eps_tag(float(eps))}_d{d}"
            out[f"mre_{tag}"] = float(cum[-1] / total)
            out[f"mae_{tag}"] = float(np.sum(weight * err) / total)
            for g, k in enumerate(seen.tolist(), start=1):
                out[f"csre_{tag}_{g}"] = float(cum[k] / total)
    return out


def maxload_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """R1 ([YKAE, Fig. 1]): ``E[m_i]`` by exact multinomial sampling, and the core's ``mtilde_Q``.

    ``m_i`` is the largest of ``w`` bin counts of ``n_Q`` balls (one row of Algorithm 2);
    ``core_mtilde`` is :func:`~beam_dpsketch.sketches.intermittent.sketch.sensitive_query_bound` on
    ``n_Q`` distinct hashed keys with ``d = 15`` rows (mean over ``core_reps`` key sets).
    """
    n_q, w, reps = int(params["n_q"]), int(params["width"]), int(params["reps"])
    rng = np.random.default_rng([seed, n_q])
    loads = []
    for start in range(0, reps, 250):  # 250 x w int64 per chunk
        size = min(250, reps - start)
        loads.append(rng.multinomial(n_q, np.full(w, 1.0 / w), size=size).max(axis=1))
    m = np.concatenate(loads).astype(np.float64)
    core = []
    for r in range(int(params["core_reps"])):
        keys = np.arange(n_q, dtype=np.int64) + r * 2**40
        core.append(sensitive_query_bound(keys, w, int(params["depth"]), seed=(seed + r) % 2**32))
    return {
        "em_mean": float(m.mean()),
        "em_se": float(m.std(ddof=1) / math.sqrt(m.size)) if m.size > 1 else 0.0,
        "core_mtilde": float(np.mean(core)),
    }


def _llr(transcript: list, g_x: list, g_y: list, scale: Fraction) -> float:
    """[YKAE, Algorithm 4] identity for one transcript, from the discrete Laplace pmf (exact up to rounding).

    Per cell, the released increments between uses are the Lemma-1 draws:
    ``ln p_X - ln p_X' = sum (|Dr - Dg'| - |Dr - Dg|) / scale``.
    """
    last_r: dict[int, int] = {}
    last_x: dict[int, int] = {}
    last_y: dict[int, int] = {}
    dr, dx, dy = [], [], []
    for k, ans in enumerate(transcript):
        for c, r in zip(ans.cells.tolist(), ans.cell_values.tolist(), strict=True):
            gx, gy = int(g_x[k][c]), int(g_y[k][c])
            dr.append(r - last_r.get(c, 0))
            dx.append(gx - last_x.get(c, 0))
            dy.append(gy - last_y.get(c, 0))
            last_r[c], last_x[c], last_y[c] = r, gx, gy
    r_, x_, y_ = np.array(dr), np.array(dx), np.array(dy)
    return float(np.sum(np.abs(r_ - y_) - np.abs(r_ - x_)) / float(scale))


def privacy_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """R10 (Theorem 4; [YKAE, Algorithm 4], derived oracle) on the core object.

    Random small streams (one element per tick), random query batches at random public times
    (adaptive: each batch adds the two keys with the largest earlier *released* answers), and a
    random deleted element. The core :class:`UseAndKeepSketch` releases its cells
    (``details=True``); the exact log-likelihood ratio of that transcript between the stream and
    its neighbour must lie in ``[-eps, eps]`` (deterministic; no false failures).
    """
    kind, adaptive = str(params["kind"]), bool(params["adaptive"])
    width, depth, eps = 4, 3, Fraction(1, 2)
    exact_cls = CountSketch if kind == "count_sketch" else CountMinSketch
    rng = np.random.default_rng([seed, int(adaptive), int(kind == "count_min")])
    source = NoiseSource.insecure_for_tests(seed)
    worst, violations = 0.0, 0
    trials = int(params["n_trials"])
    for trial in range(trials):
        stream = rng.integers(0, 8, 40)
        times = np.sort(rng.choice(np.arange(1, 41), 4, replace=False))
        deleted = int(rng.integers(0, 40))
        keep = np.arange(40) != deleted
        arrival = np.arange(1, 41)
        sk = UseAndKeepSketch(
            width,
            depth,
            PrivacyBudget.pure(float(eps)),
            noise_source=source,
            kind=kind,
            seed=trial,
            sketch_id=("r10", kind, adaptive, trial),
        )
        transcript, g_x, g_y, prev, last = [], [], [], 0, None
        for t in times.tolist():
            sk.update(stream[(arrival > prev) & (arrival <= t)])
            q = rng.integers(0, 8, int(rng.integers(1, 5)))
            if adaptive and last is not None:
                q = np.r_[q, last[0][np.argsort(-last[1], kind="stable")[:2]]]
            ans = sk.answer(q, time=t, details=True)
            last, prev = (q, ans.estimates), t
            transcript.append(ans)
            for sel, acc in ((arrival <= t, g_x), (keep & (arrival <= t), g_y)):
                acc.append(exact_cls(width, depth, trial).update(stream[sel]).table.reshape(-1))
        llr = _llr(transcript, g_x, g_y, sk.noise_scale)
        worst = max(worst, abs(llr))
        violations += abs(llr) > float(eps) + 1e-9
    return {
        "max_abs_llr": worst,
        "eps": float(eps),
        "violations": violations,
        "transcripts": trials,
    }


def _excess_kurtosis(scale: Fraction) -> float:
    """Excess kurtosis ``(1 + 4a + a^2)/(2a)`` of discrete Laplace, ``a = exp(-1/scale)``.

    It is the difference of two i.i.d. geometrics (cumulants ``k2 = a/(1-a)^2``,
    ``k4 = a(1 + 4a + a^2)/(1-a)^4``), so ``k4/k2^2`` halves; tends to 3 (Laplace) for large scales.
    """
    a = math.exp(-1.0 / float(scale))
    return (1 + 4 * a + a * a) / (2 * a)


def variance_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """R11 (docs/algorithms.md#int-oracles): noise variance after ``r`` uses, on the core.

    A core object with no data answers the same key set in ``uses`` batches; each of its cells is
    then read once per batch, so its released value is pure noise: D3's kept sum of ``r`` draws,
    or D2's fresh draw at the ``r``-th use. Per ``r``: the mean square over the cells divided by
    the core's own formula (``cell_noise_variance``), and the tolerance ``z sqrt((kurt - 1)/n)``
    of that ratio at ``z = 5.6`` (two-sided alpha 2e-8 per check; Bonferroni over at most 50
    checks gives a family false-failure probability below 1e-6, normal approximation of a mean of
    ``n`` >= 2500 i.i.d. squares). Also ``min_ratio_d2_d3``: min over ``r`` of D2's variance over
    D3's (must exceed 1).
    """
    width, depth, eps, uses = int(params["width"]), 3, 1.0, int(params["uses"])
    source = NoiseSource.insecure_for_tests(seed)
    keep = UseAndKeepSketch(
        width, depth, PrivacyBudget.pure(float(eps)), noise_source=source, sketch_id=("r11", "keep")
    )
    eta = params["eta"]
    if params["strategy"] == "use_and_keep":
        sk = keep
    else:
        sk = UseAndForgetCellSketch(
            width,
            depth,
            PrivacyBudget.pure(float(eps)),
            eta=eta,
            noise_source=source,
            sketch_id=("r11", "forget", str(eta)),
        )
    keys = np.arange(4 * width, dtype=np.int64)
    out: dict[str, float] = {}
    worst = 0.0
    base_kurt = _excess_kurtosis(keep.noise_scale)
    for r in range(1, uses + 1):
        ans = sk.answer(keys, details=True)
        if not np.all(sk.use_counts().reshape(-1)[ans.cells] == r):
            raise AssertionError("every cell read must have exactly r uses")
        theory = float(sk.cell_noise_variance(r))
        ratio = float(np.mean(ans.cell_values.astype(np.float64) ** 2) / theory)
        if sk is keep:
            kurt = 3 + base_kurt / r
        else:
            kurt = 3 + _excess_kurtosis(sk.use_scale(r))
        tol = 5.6 * math.sqrt((kurt - 1) / ans.cells.size)
        out[f"ratio_r{r}"], out[f"tol_r{r}"] = ratio, tol
        out[f"var_r{r}"] = theory / float(keep.cell_noise_variance(1))
        worst = max(worst, abs(ratio - 1) / tol)
    out["worst_dev_over_tol"] = worst
    if sk is keep:
        out["min_ratio_d2_d3"] = math.nan
    else:
        rs = np.arange(1, uses + 1)
        out["min_ratio_d2_d3"] = float(
            np.min(sk.cell_noise_variance(rs) / keep.cell_noise_variance(rs))
        )
    return out


def crosscheck_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """The vectorised path against the core object on a small stream (same source, same ids).

    Feeds a :class:`UseAndKeepSketch` the stream increments between batches and answers each
    batch; :func:`use_and_keep_answers` with ``noise="core"`` must give the same estimates.
    """
    n, width, depth, eps, b = 5000, 64, 5, "0.5", 12
    stream = datasets.zipf_stream(n, 1.1, 300, seed)
    times = batch_times(n, 500, b)
    queries = query_sets(seed, 15, b, 100)
    source = NoiseSource.insecure_for_tests(seed)
    sid = ("crosscheck", seed)
    pairs = query_pairs(StreamCells(stream, width, depth, seed), times, queries)
    fast = use_and_keep_answers(
        pairs, width, depth, eps, noise_source=source, sketch_id=sid, seed=seed, noise="core"
    )[pairs.inverse]
    sk = UseAndKeepSketch(
        width, depth, PrivacyBudget.pure(float(eps)), noise_source=source, sketch_id=sid, seed=seed
    )
    prev, core = 0, []
    for k, t in enumerate(times.tolist()):
        sk.update(stream[prev:t])
        core.append(sk.answer(queries[k], time=t).estimates)
        prev = t
    return {"max_abs_diff": float(np.max(np.abs(np.stack(core) - fast))), "answers": fast.size}


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------


def build_experiments(config: IntermittentConfig) -> list[Experiment]:
    """The runs (R3-R9) and the core oracles (R1, R10, R11, cross-check)."""
    common = {"version": EXPERIMENT_VERSION, "seeds": (BASE_SEED,)}
    runs = [
        {
            "rep": r,
            "n": config.n,
            "domain": config.domain,
            "t0": config.t0,
            "width": config.width,
            "total": config.total_queries,
            "n_q": n_q,
            "u": u,
            "epsilons": ",".join(f"{e:g}" for e in config.epsilons),
            "depths": ",".join(str(d) for d in config.depths),
            "checkpoints": config.checkpoints,
        }
        for r in range(config.reps)
        for n_q in config.n_qs
        for u in config.us
    ]
    loads = [
        {
            "n_q": n_q,
            "width": 5000,
            "depth": 15,
            "reps": config.maxload_reps if n_q < 10**6 else max(30, config.maxload_reps * 3 // 20),
            "core_reps": 3 if n_q < 10**6 else 1,
        }
        for n_q in SPEC_FIG1
    ]
    priv = [
        {"kind": kind, "adaptive": adaptive, "n_trials": config.privacy_trials}
        for kind in ("count_sketch", "count_min")
        for adaptive in (False, True)
    ]
    var = [{"strategy": "use_and_keep", "eta": None}] + [
        {"strategy": "use_and_forget_cell", "eta": eta} for eta in (0.1, 0.5, 0.9)
    ]
    var = [{**v, "width": config.variance_width, "uses": config.variance_uses} for v in var]
    uses = range(1, config.variance_uses + 1)
    var_metrics = [f"{m}_r{r}" for r in uses for m in ("ratio", "tol", "var")]
    return [
        Experiment(
            "intermittent-runs",
            run_cell,
            runs,
            run_metrics(config),
            **common,
            description="D3 on the Zipf stream: MRE and CSRE per (eps, d)",
        ),
        Experiment(
            "intermittent-maxload",
            maxload_cell,
            loads,
            ["em_mean", "em_se", "core_mtilde"],
            **common,
            description="R1: expected max load and the core's mtilde_Q",
        ),
        Experiment(
            "intermittent-privacy",
            privacy_cell,
            priv,
            ["max_abs_llr", "eps", "violations", "transcripts"],
            **common,
            description="R10: exact privacy loss of the core's transcripts",
        ),
        Experiment(
            "intermittent-variance",
            variance_cell,
            var,
            [*var_metrics, "worst_dev_over_tol", "min_ratio_d2_d3"],
            **common,
            description="R11: noise variance against uses (D3, D2)",
        ),
        Experiment(
            "intermittent-crosscheck",
            crosscheck_cell,
            [{"case": "small"}],
            ["max_abs_diff", "answers"],
            **common,
            description="vectorised path = core object",
        ),
    ]
