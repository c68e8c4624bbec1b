"""Lazy and Punctual sketches under continual observation (Holland): [Hol25, Section 5.4] R0-R6.

The paper's Figure 4 compares the non-private Count-Min (CMS) and Count Sketch (CS) with their
continual-observation private versions, PunctualCMS/CS (every cell a GaussBM counter, updated at
every arrival) and LazyCMS/CS (one column pushed per arrival), on Zipf streams of ``T = 2**20``
arrivals with ``d = 3``, ``delta = 1e-3``:

* **R0** (Sec. 5.4): at 24 KB the widths are CMS 2000, LazyCMS 55, PunctualCMS 33;
* **R1** (Fig. 4a): update time against memory (width): CMS, CS and Lazy flat, Punctual linear,
  Lazy up to 250x the throughput of Punctual;
* **R2-R6** (Fig. 4b-f): ARE over the true top-15 against memory via width (R2), memory via depth
  (R3), skew (R4), and eps at skew 1.1 (R5) and 2.1 (R6).

Protocol ([Hol25, Sections 5.1-5.3; Section 5.4], with our resolutions):

* Data: finite-universe Zipf, ``Pr[rank r] ~ r**-s``, ``N_U = 100001``
  (:func:`~reproduction.datasets.zipf_stream`); all cells of one trial share the
  data of a skew (common random numbers) and one public hash seed for all six sketches.
* Widths: the paper's at 24 KB, scaled linearly with memory (``w_CMS = M/(3*4)``,
  ``w_Lazy = M/(3*145.45)``, ``w_Punct = M/(3*242.4)``, M in bytes, KB = 1000 B; [Hol25, Section 5.4],
  docs/algorithms.md#lazy-e24: no stated memory model yields them). CS uses the CMS width, LazyCS the Lazy width.
  The depth sweep keeps the 24 KB widths (memory grows with ``d``). R0 also reports the widths
  our own objects' state (``memory_bytes()``) gives at 24 KB.
* Privacy: the library's calibration: Algorithm 1's classical Gaussian, ``m = 2d`` for CMS and
  ``m = 4d`` for CS (docs/algorithms.md#lazy-e10; the paper used ``2d``, so our CS noise is ``sqrt 2`` larger),
  Lazy trees over ``ceil(T/w)`` pushes (docs/algorithms.md#lazy-e11). Every eps is below 1 (docs/algorithms.md#lazy-e5).
* ARE over the true top-15 of the prefix, **at the end of the stream** (``t = T``, the paper's
  implied protocol) and **averaged over 64 query times** ([Hol25, Section 5.4] note): one time drawn
  uniformly in each of 64 equal segments of ``[1, T]`` (seeded, public, data-independent). The
  plain multiples ``q T / 64 = q 2**14`` would have ``popcount(t) <= 6`` and make Punctual
  unusually quiet, the binary-digit artefact the note warns about.
* Noise: :meth:`NoiseSource.insecure_for_tests` seeded per trial, with a release prefix naming
  the experiment, the cell's parameters and the sketch (reproduction only, not a release path).
  Accuracy cells build the private sketches with ``faithful=False``: only the tree nodes that
  are still active at a query are drawn. The outputs are bit-identical to ``faithful=True``
  (keyed noise; tested by the core), so the ARE is that of the paper's mechanism at a fraction of
  Punctual's cost. Throughput cells use ``faithful=True`` for both Lazy and Punctual: one
  Gaussian value per counter update, the paper's cost model (docs/algorithms.md#lazy-vectorised and docs/evaluation.md#lazy-report).
* Throughput: arrivals per second of ``update_batch`` over batches of ``2**16`` arrivals
  (hashing included for every sketch, data generation excluded), best of ``repeats`` runs;
  Punctual over a prefix of about ``noise_budget / (d w)`` arrivals (its cost per arrival does
  not depend on how many arrivals are timed). Deterministic counts: counter updates per arrival
  (Lazy ``d``, Punctual ``d w``) and Gaussian values drawn per arrival (docs/algorithms.md#lazy-oracles).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch
from reproduction import datasets, metrics
from reproduction.runner import (
    Experiment,
    stable_hash,
)

__all__ = [
    "ACCURACY_METRICS",
    "MODES",
    "PAPER_WIDTHS_24KB",
    "SKETCHES",
    "THROUGHPUT_METRICS",
    "LazyConfig",
    "accuracy_cell",
    "build_experiments",
    "model_memory_bytes",
    "model_width",
    "paper_width",
    "query_times",
    "throughput_cell",
]

EXPERIMENT_VERSION = "1"
THROUGHPUT_VERSION = "2"
"""Throughput cells' version: "2" re-times them with the faster exact samplers of noise.py."""
TOP_K = 15  # [Hol25, Sections 5.1-5.3]: ARE over the true top-15
PAPER_MEMORY_KB = 24  # the paper's 24 KB configuration (KB = 1000 B, [Hol25, Section 5.4])
PAPER_WIDTHS_24KB: dict[str, int] = {"cms": 2000, "lazy": 55, "punctual": 33}
"""The widths the paper states at 24 KB and ``d = 3`` (Sec. 5.4; R0)."""
PAPER_RATIO = 250.0  # R1: "LazyCMS achieves up to 250x higher throughput than PunctualCMS"
PAPER_HORIZON = 1 << 20  # T of every experiment in the paper (R0 is sized for it)

SKETCHES: tuple[str, ...] = ("cms", "cs", "lazy_cms", "lazy_cs", "punctual_cms", "punctual_cs")
"""The six sketches of Figure 4, in legend order."""
PRIVATE: tuple[str, ...] = SKETCHES[2:]
LABELS = {
    "cms": "CMS",
    "cs": "CS",
    "lazy_cms": "LazyCMS",
    "lazy_cs": "LazyCS",
    "punctual_cms": "PunctualCMS",
    "punctual_cs": "PunctualCS",
    "lazy_cms_collapsed": "LazyCMS (collapsed noise)",
}
THROUGHPUT_IMPLS: tuple[str, ...] = (*SKETCHES, "lazy_cms_collapsed")
"""Timed implementations; ``lazy_cms_collapsed`` is the library's default Lazy (``faithful=False``:
noise drawn only for nodes active at the end of each batch), shown for reference."""


def memory_family(sketch: str) -> str:
    """Memory family of a sketch: its width is the CMS, Lazy or Punctual one."""
    return "cms" if sketch in ("cms", "cs") else sketch.split("_")[0]


def _kind(sketch: str) -> str:
    return "cs" if sketch.endswith("_cs") or sketch == "cs" else "cms"


ACCURACY_METRICS: tuple[str, ...] = (
    *[f"{s}_{m}" for s in SKETCHES for m in ("are_end", "are_avg", "bias_end", "bias_avg")],
    *[f"{s}_sigma" for s in PRIVATE],
    "top15_min_end",
    "model_bytes_lazy",
    "model_bytes_punct",
    "model_bytes_cms",
)
"""Accuracy cell metrics: per sketch, ARE over the true top-15 at ``t = T`` (``are_end``) and
averaged over the query times (``are_avg``), and the mean signed relative error
``(fhat - f)/f`` (``bias_*``); node noise ``sigma`` of each private sketch; the smallest true
top-15 count at the end; our objects' state bytes (``memory_bytes()``) at the cell's widths."""

THROUGHPUT_METRICS: tuple[str, ...] = (
    "arrivals_per_s",
    "seconds",
    "n_timed",
    "counter_updates_per_arrival",
    "noise_values_per_arrival",
    "model_bytes",
)
"""Throughput cell metrics: best-of-repeats arrivals per second of the batched update path, its
time, the arrivals timed, GaussBM counter updates and Gaussian values drawn per arrival (0 for
the non-private sketches), and the sketch's state bytes."""


@dataclass(frozen=True)
class LazyConfig:
    """Scale of one run of the lazy-sketch report.

    Parameters
    ----------
    mode
        ``smoke`` (seconds; the test suite), ``quick`` (a few minutes) or ``full``.
    horizon
        Stream length ``T`` (the paper's ``2**20``).
    n_items
        Zipf universe size ``N_U``.
    trials
        Independent trials per accuracy cell (the paper averages 20).
    memories_kb
        Memory grid of the width sweep (R1-R2), KB = 1000 B.
    depths
        Depth grid of R3 (widths fixed at the 24 KB ones).
    skews
        Skew grid of R4.
    eps_grid
        Epsilon grid of R5-R6.
    n_queries
        Query times of the time-averaged ARE.
    tp_widths
        Equal-width axis of the throughput measurement (added to the memory axis).
    tp_arrivals
        Arrivals timed for the non-Punctual sketches.
    tp_noise_budget
        Punctual times about ``tp_noise_budget / (d w)`` arrivals.
    tp_repeats
        Throughput: best of this many runs.
    """

    mode: str
    horizon: int
    n_items: int
    trials: int
    memories_kb: tuple[float, ...]
    depths: tuple[int, ...]
    skews: tuple[float, ...]
    eps_grid: tuple[float, ...]
    n_queries: int
    tp_widths: tuple[int, ...]
    tp_arrivals: int
    tp_noise_budget: int
    tp_repeats: int
    delta: float = 1e-3
    base_depth: int = 3
    base_skew: float = 1.3
    base_eps: float = 0.3
    base_memory_kb: float = PAPER_MEMORY_KB
    eps_skews: tuple[float, float] = (1.1, 2.1)
    tp_batch: int = 1 << 16


MODES: dict[str, LazyConfig] = {
    "smoke": LazyConfig(
        mode="smoke",
        horizon=1 << 14,
        n_items=10_001,
        trials=1,
        memories_kb=(8, 24),
        depths=(1, 3),
        skews=(1.1, 1.3, 2.1),
        eps_grid=(0.1, 0.3, 0.9),
        n_queries=4,
        tp_widths=(33, 330),
        tp_arrivals=1 << 14,
        tp_noise_budget=1 << 15,
        tp_repeats=1,
    ),
    "quick": LazyConfig(
        mode="quick",
        horizon=1 << 20,
        n_items=100_001,
        trials=1,
        memories_kb=(8, 24, 64),
        depths=(1, 3, 9),
        skews=(1.1, 1.3, 1.7, 2.1),
        eps_grid=(0.05, 0.1, 0.3, 0.9),
        n_queries=16,
        tp_widths=(33, 100, 330, 1000, 4000),
        tp_arrivals=1 << 18,
        tp_noise_budget=1 << 19,
        tp_repeats=3,
    ),
    "full": LazyConfig(
        mode="full",
        horizon=1 << 20,
        n_items=100_001,
        trials=5,
        memories_kb=(8, 16, 24, 32, 48, 64),
        depths=(1, 3, 5, 7, 9),
        skews=(1.1, 1.3, 1.5, 1.7, 1.9, 2.1),
        eps_grid=(0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9),
        n_queries=64,
        tp_widths=(11, 33, 55, 100, 330, 1000, 2000, 4000),
        tp_arrivals=1 << 19,
        tp_noise_budget=1 << 21,
        tp_repeats=3,
    ),
}
"""Presets. ``full`` is the full grid (T = 2**20, memory 8-64 KB, d in 1..9, skew 1.1..2.1, eps
0.05..0.9, 64 query times) with 5 trials instead of the paper's 20 (what fits in about 30
minutes on 2 shared cores); ``quick`` runs 1 trial of a reduced grid at the full T with 16 query
times; ``smoke`` is tiny (T = 2**14, 4 query times) and checks the plumbing only."""


# ------------------------------------------------------------------------------------------------
# Widths and memory
# ------------------------------------------------------------------------------------------------


def paper_width(family: str, memory_kb: float) -> int:
    """Width at ``memory_kb`` (``d = 3``) by linear scaling of the paper's 24 KB widths (docs/algorithms.md#lazy-e24).

    ``w = w_24KB * M / 24 KB``: 4 B per CMS/CS counter, about 145.45 B per Lazy and 242.4 B per
    Punctual counter ([Hol25, Section 5.4], docs/algorithms.md#lazy-e24).
    """
    if family not in PAPER_WIDTHS_24KB:
        raise ValueError(f"family must be one of {sorted(PAPER_WIDTHS_24KB)}, got {family!r}")
    if not memory_kb > 0:
        raise ValueError(f"memory_kb must be positive, got {memory_kb!r}")
    return max(1, round(PAPER_WIDTHS_24KB[family] * memory_kb / PAPER_MEMORY_KB))


def _new_sketch(
    sketch: str,
    width: int,
    depth: int,
    horizon: int,
    epsilon: float,
    delta: float,
    hash_seed: int,
    noise: NoiseSource | None,
    release_prefix: Any,
    *,
    faithful: bool,
) -> Any:
    if sketch in ("cms", "cs"):
        return (CountMinSketch if sketch == "cms" else CountSketch)(width, depth, hash_seed)
    cls = LazySketch if sketch.startswith("lazy") else PunctualSketch
    return cls(
        width,
        depth,
        horizon,
        PrivacyBudget.approx(epsilon, delta),
        release_prefix=release_prefix,
        kind=_kind(sketch),
        seed=hash_seed,
        noise_source=noise,
        calibration="paper",
        faithful=faithful,
    )


def model_memory_bytes(sketch: str, width: int, depth: int, horizon: int) -> int:
    """Our own memory model: ``memory_bytes()`` of the library's object (int64 counts, float64
    noise slots; Lazy: ``h_loc`` slots, exact total, update count and pending count per cell;
    Punctual: ``h`` slots, total and count; CMS/CS: the int64 table)."""
    probe = _new_sketch(
        sketch,
        width,
        depth,
        horizon,
        0.5,
        1e-3,
        0,
        NoiseSource.insecure_for_tests(0),
        ("evaluate-lazy", "memory-model"),
        faithful=False,
    )
    return int(probe.memory_bytes())


def model_width(sketch: str, memory_bytes: float, depth: int, horizon: int) -> int:
    """The largest width whose :func:`model_memory_bytes` fits ``memory_bytes`` (0 if none)."""
    lo, hi = 0, max(1, int(memory_bytes))
    while lo < hi:  # bytes grow with the width (h_loc only shrinks slowly for Lazy)
        mid = (lo + hi + 1) // 2
        if model_memory_bytes(sketch, mid, depth, horizon) <= memory_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


def query_times(horizon: int, n: int, seed: int) -> np.ndarray:
    """``n`` public query times, one uniform in each of ``n`` equal segments of ``[1, T]``.

    Segment ``q`` is ``(q T // n, (q + 1) T // n]``; the draw is seeded and independent of the
    data, so releasing at these times is allowed (docs/algorithms.md#lazy-beam). Sorted, distinct when
    ``n <= T``.
    """
    if n < 1 or n > horizon:
        raise ValueError(f"n (query times) must be in [1, T={horizon}], got {n}")
    edges = np.arange(n + 1, dtype=np.int64) * horizon // n
    rng = np.random.default_rng([int(seed), 0x1A27])
    return edges[:-1] + rng.integers(1, np.diff(edges) + 1)


def _widths(params: Mapping[str, Any]) -> dict[str, int]:
    return {s: int(params[f"w_{memory_family(s)}"]) for s in SKETCHES}


def _top_k(counts: np.ndarray, k: int) -> np.ndarray:
    """True top-k ids of a bincount (ties by the smaller id), without sorting the universe."""
    k = min(k, int(np.count_nonzero(counts)))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    threshold = np.partition(counts, len(counts) - k)[len(counts) - k]
    cand = np.flatnonzero(counts >= max(threshold, 1))
    return datasets.top_k(cand, counts[cand], k).astype(np.int64)


def accuracy_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """One Figure 4(b-f) point: the six sketches on one Zipf stream, queried over time.

    Parameters
    ----------
    params
        ``horizon`` (T), ``n_items``, ``skew``, ``eps``, ``delta``, ``depth``, ``memory_kb``
        (the budget the widths come from), ``w_cms``, ``w_lazy``, ``w_punctual`` and
        ``n_queries``.
    seed
        Trial seed: data, query times, the public hash seed shared by the six sketches, and the
        (test-only) noise source.

    Returns
    -------
    dict
        :data:`ACCURACY_METRICS`.
    """
    horizon, depth = int(params["horizon"]), int(params["depth"])
    n_items = int(params["n_items"])
    eps, delta = float(params["eps"]), float(params["delta"])
    keys = datasets.zipf_stream(horizon, float(params["skew"]), n_items, seed)
    times = query_times(horizon, int(params["n_queries"]), seed)
    stops = np.unique(np.append(times, horizon))
    hash_seed = seed % 2**32
    h1, h2 = hash_keys(keys, hash_seed)
    noise = NoiseSource.insecure_for_tests(seed)
    widths = _widths(params)
    # Release ids take no floats: the cell's parameters enter through their canonical hash.
    rid = ("evaluate-lazy", "accuracy", EXPERIMENT_VERSION, stable_hash(dict(params)), seed)
    sketches = {
        s: _new_sketch(
            s, widths[s], depth, horizon, eps, delta, hash_seed, noise, (*rid, s), faithful=False
        )
        for s in SKETCHES
    }
    counts = np.zeros(n_items + 1, dtype=np.int64)
    are = {s: {} for s in SKETCHES}
    bias = {s: {} for s in SKETCHES}
    top_min_end = 0.0
    prev = 0
    for stop in stops.tolist():
        c1, c2 = h1[prev:stop], h2[prev:stop]
        counts += np.bincount(keys[prev:stop], minlength=n_items + 1)
        prev = stop
        top = _top_k(counts, TOP_K)
        q1, q2 = hash_keys(top, hash_seed)
        f = counts[top].astype(np.float64)
        for s, sk in sketches.items():
            if s in ("cms", "cs"):
                sk.update_hashes(c1, c2)
            else:
                sk.update_batch_hashes(c1, c2)
            est = np.asarray(sk.estimate_hashes(q1, q2), dtype=np.float64)
            are[s][stop] = metrics.are(f, est)
            bias[s][stop] = float(np.mean((est - f) / f))
        top_min_end = float(f.min())
    out: dict[str, float] = {}
    for s in SKETCHES:
        out[f"{s}_are_end"] = are[s][horizon]
        out[f"{s}_are_avg"] = float(np.mean([are[s][t] for t in times.tolist()]))
        out[f"{s}_bias_end"] = bias[s][horizon]
        out[f"{s}_bias_avg"] = float(np.mean([bias[s][t] for t in times.tolist()]))
    for s in PRIVATE:
        out[f"{s}_sigma"] = sketches[s].sigma
    out["top15_min_end"] = top_min_end
    out["model_bytes_lazy"] = sketches["lazy_cms"].memory_bytes()
    out["model_bytes_punct"] = sketches["punctual_cms"].memory_bytes()
    out["model_bytes_cms"] = sketches["cms"].memory_bytes()
    return out


def throughput_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Arrivals per second of one sketch's batched update path at one width (Figure 4a).

    Parameters
    ----------
    params
        ``impl`` (one of :data:`THROUGHPUT_IMPLS`), ``width``, ``depth``, ``horizon`` (T, the
        calibration's stream length), ``eps``, ``delta``, ``skew``, ``n_items``, ``arrivals``
        (timed for non-Punctual sketches), ``noise_budget`` (Punctual times about
        ``noise_budget / (d w)`` arrivals), ``batch`` and ``repeats``.
    seed
        Trial seed (data, hash seed, test-only noise source).

    Returns
    -------
    dict
        :data:`THROUGHPUT_METRICS`. The timed region is the ``update`` calls only (hashing
        included, data generation excluded), best of ``repeats`` fresh sketches.
    """
    impl, width, depth = params["impl"], int(params["width"]), int(params["depth"])
    horizon = int(params["horizon"])
    sketch = "lazy_cms" if impl == "lazy_cms_collapsed" else impl
    n = int(params["arrivals"])
    if sketch.startswith("punctual"):
        n = max(64, int(params["noise_budget"]) // (depth * width))
    n = min(n, horizon)
    keys = datasets.zipf_stream(n, float(params["skew"]), int(params["n_items"]), seed)
    batch = int(params["batch"])
    noise = NoiseSource.insecure_for_tests(seed)
    best, sk = math.inf, None
    for r in range(int(params["repeats"])):
        sk = _new_sketch(
            sketch,
            width,
            depth,
            horizon,
            float(params["eps"]),
            float(params["delta"]),
            seed % 2**32,
            noise,
            ("evaluate-lazy", "throughput", impl, width, depth, seed, r),
            faithful=impl != "lazy_cms_collapsed",
        )
        update = sk.update if sketch in ("cms", "cs") else sk.update_batch
        start = time.perf_counter()
        for lo in range(0, n, batch):
            update(keys[lo : lo + batch])
        best = min(best, time.perf_counter() - start)
    private = sketch not in ("cms", "cs")
    return {
        "arrivals_per_s": metrics.throughput(n, best),
        "seconds": best,
        "n_timed": n,
        "counter_updates_per_arrival": sk.counter_updates / n if private else 0.0,
        "noise_values_per_arrival": sk.noise_values_drawn / n if private else 0.0,
        "model_bytes": sk.memory_bytes(),
    }


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------


def _accuracy_point(
    config: LazyConfig, *, memory_kb: float, depth: int, skew: float, eps: float
) -> dict[str, Any]:
    return {
        "horizon": config.horizon,
        "n_items": config.n_items,
        "n_queries": config.n_queries,
        "delta": config.delta,
        "memory_kb": float(memory_kb),
        "depth": int(depth),
        "skew": float(skew),
        "eps": float(eps),
        **{f"w_{f}": paper_width(f, memory_kb) for f in ("cms", "lazy", "punctual")},
    }


def accuracy_grid(config: LazyConfig) -> list[dict[str, Any]]:
    """The union of the R2-R6 sweeps, each distinct point once (they share the base point)."""
    base = {
        "memory_kb": config.base_memory_kb,
        "depth": config.base_depth,
        "skew": config.base_skew,
        "eps": config.base_eps,
    }
    points = [{**base, "memory_kb": m} for m in config.memories_kb]
    points += [{**base, "depth": d} for d in config.depths]
    points += [{**base, "skew": s} for s in config.skews]
    points += [{**base, "skew": s, "eps": e} for s in config.eps_skews for e in config.eps_grid]
    seen, out = set(), []
    for p in points:
        key = tuple(sorted(p.items()))
        if key not in seen:
            seen.add(key)
            out.append(_accuracy_point(config, **p))
    return out


def throughput_grid(config: LazyConfig) -> list[dict[str, Any]]:
    """Every implementation at its widths of the memory grid and at the equal-width axis."""
    common = {
        "depth": config.base_depth,
        "horizon": config.horizon,
        "eps": config.base_eps,
        "delta": config.delta,
        "skew": config.base_skew,
        "n_items": config.n_items,
        "arrivals": config.tp_arrivals,
        "noise_budget": config.tp_noise_budget,
        "batch": config.tp_batch,
        "repeats": config.tp_repeats,
    }
    out, seen = [], set()
    for impl in THROUGHPUT_IMPLS:
        widths = [paper_width(memory_family(impl), m) for m in config.memories_kb]
        for w in sorted({*widths, *config.tp_widths}):
            if (impl, w) not in seen:
                seen.add((impl, w))
                out.append({"impl": impl, "width": w, **common})
    return out


def build_experiments(config: LazyConfig) -> list[Experiment]:
    """The two grids: throughput (Figure 4a) and accuracy (Figure 4b-f)."""
    return [
        Experiment(
            "lazy-throughput",
            throughput_cell,
            throughput_grid(config),
            THROUGHPUT_METRICS,
            version=THROUGHPUT_VERSION,
            description="Figure 4(a): arrivals per second against width",
        ),
        Experiment(
            "lazy-accuracy",
            accuracy_cell,
            accuracy_grid(config),
            ACCURACY_METRICS,
            trials=config.trials,
            version=EXPERIMENT_VERSION,
            description="Figure 4(b-f): ARE over the top-15 at the end and over time",
        ),
    ]
