"""DP Misra-Gries (Lebeda and Tetek, PODS 2023 / TODS 2025): the paper's claims, measured.

The paper has no experiments: its results are utility theorems and
asymptotic comparisons. This module turns them into falsifiable measurements, following the
evaluation plan of docs/evaluation.md#misra-gries-report and the oracles of docs/algorithms.md#mg-oracles, and computes every verdict from the
results table:

====  ==========================================================================================
M1    Theorem 8: w.p. ``>= 1 - beta`` every key has ``f - n/(k+1) - tau - B < f~ <= f + B``; keys
      with ``f = 0`` are never released, at most ``k`` keys are, every value is ``>= tau``.
M2    PMG's error against the non-private sketch stays below ``tau + B``, which grows only like
      ``log k``; Chan et al.'s grows at least linearly in ``k``; M-GSHM lies in between (docs/evaluation.md#misra-gries-report).
M3    On a stream with a heavy head and a long uniform tail (MG error ``~ n/(k+1)``), PMG's total
      error falls with ``k``; Chan et al.'s is minimised at an interior ``k`` and does not drop
      below about ``sqrt(n ln(1/delta)/eps)`` ([LT23, Section 4] and docs/evaluation.md#misra-gries-report).
M4    The release threshold grows like ``log(1/delta)/eps``: the count released half the time
      follows ``1 + 2 ln(3/delta)/eps`` ([LT23, Algorithm 2; Section 5.2]).
M5    PMG is within a small constant (2-3x) of the exact stability histogram (docs/algorithms.md#mg-baselines and docs/evaluation.md#misra-gries-report).
M6    Design B is close to PMG; merged releases (M-GSHM, M-LAP) cost one to two orders of
      magnitude at the reference sizes (docs/algorithms.md#mg-merged and docs/evaluation.md#misra-gries-report).
M7    PURE_PP's noise grows with ``log u``; PMG does not depend on ``u`` ([LT23, Section 6] and docs/evaluation.md#misra-gries-report).
M8    User level: PAMG + GSHM beats flattened MG with group privacy once ``m`` exceeds about
      ``sqrt(k)``; the flattened error grows with ``m``, PAMG's does not ([LT23, Section 8] and docs/evaluation.md#misra-gries-report).
M9    Top-k accuracy (precision, recall, F1, ARE, AAE) against epsilon and k on the US flights
      routes and Zipf: PMG is the most accurate ``(eps, delta)`` sketch release.
====  ==========================================================================================

"Privacy error" is ``max_x |f~(x) - c(x)|`` against the release's own non-private input ``c``
(the MG counters, the Design-B sums, the merged sketch or the exact histogram; 0 for unreleased
keys): it isolates what the DP release costs. "Total error" is ``max |f~(x) - f(x)|`` over the
true top-100 and the released keys (docs/evaluation.md#misra-gries-report metrics). Every release draws its noise from
``NoiseSource.insecure_for_tests`` with a distinct release id per cell, mechanism and trial:
reproducible, and never a deployment key.

Sharded designs split the stream into ``shards`` contiguous segments (Beam bundles): Design B
post-processes each segment and sums exactly (:class:`PostProcessedSum`); the merged releases
fold the segments' sketches with ``MERGE_k``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries import (
    HeavyHitterRelease,
    PAMGSketch,
    PostProcessedSum,
    Universe,
    approx_pp,
    chan_thresholded,
    flatten_users,
    merged_gshm,
    merged_laplace,
    pamg_gshm,
    pmg,
    postprocess,
    pure_pp,
    stability_histogram,
    user_level_pmg,
)
from reproduction import datasets, metrics
from reproduction.experiments.misra_gries.sharded import SHARD_COUNTS, shard_experiment
from reproduction.experiments.misra_gries.space_saving import (
    space_saving_experiment,
    user_pure_experiment,
)
from reproduction.runner import (
    Experiment,
)

__all__ = [
    "ACCURACY_MECHANISMS",
    "MGConfig",
    "MODES",
    "SWEEP_MECHANISMS",
    "Sketches",
    "accuracy_cell",
    "build_experiments",
    "build_sketches",
    "flights_pairs",
    "ladder_cell",
    "privacy_error",
    "release",
    "release_arrays",
    "score_top_k",
    "sweep_cell",
    "total_error",
    "universe_cell",
    "user_cell",
]

EXPERIMENT_VERSION = "1"

BETA = 0.05  # utility failure probability of the Theorem 8 oracle (docs/algorithms.md#mg-oracles)
DELTA = 1e-6  # the reference example delta (docs/algorithms.md#mg-merged and docs/algorithms.md#mg-oracles)
TOP_ERR = 100  # total error over the true top-100 and the released keys (docs/evaluation.md#misra-gries-report)
TOP_F1 = 10  # F1 of the top-10 in the k sweep ([ZQR+22, Section 5.2] convention)
PLANTED_HEAVY = 10  # heavy keys of the planted stream
PLANTED_MASS = 0.2  # their total probability (2% each)

SWEEP_MECHANISMS = ("pmg", "design_b", "merged_gshm", "merged_laplace", "chan", "stability")
"""Releases compared in the k sweep (Chan et al. = the thresholded variant, [ZQR+22, Section 2.2])."""

ACCURACY_MECHANISMS = (
    "mg",
    "pmg",
    "design_b",
    "pure_pp",
    "merged_gshm",
    "merged_laplace",
    "chan",
    "stability",
)
"""Releases of the accuracy experiment; ``mg`` is the non-private sketch (no noise)."""


@dataclass(frozen=True)
class MGConfig:
    """Scale of one run of the DP Misra-Gries report.

    Parameters
    ----------
    mode
        ``smoke`` (seconds; the test suite), ``quick`` (a few minutes on 2 cores) or ``full``.
    n, n_items, skew
        k sweep (M1-M3, M6): stream length, Zipf universe size ``N_U`` (also the planted
        stream's tail size) and Zipf exponent.
    ks
        Sketch sizes of the k sweep (must contain 100, docs/algorithms.md#mg-merged example).
    shards
        Contiguous segments for Design B and the merged releases.
    sweep_trials
        Trials of the k sweep (fresh data and noise).
    ladder_eps, ladder_deltas, ladder_releases
        Threshold ladder (M4, M5): privacy parameters and releases per cell.
    universes, universe_n, universe_items, universe_k, universe_trials
        PURE_PP against the declared universe size (M7).
    user_k, user_ms, n_users, user_trials
        User level (M8): sketch size, contribution bounds ``m`` and number of users.
    acc_eps, acc_ks, acc_sketch_k, acc_n, acc_trials
        Accuracy (M9): epsilons, top-k sizes, the sketch size of every release, the Zipf
        stream length and trials.
    flights
        ``"sample"`` (bundled 300,000 rows), ``"full"`` (3 M rows, fetched with npm) or
        ``"none"``.
    flights_rows
        Use only the first rows of the flights data (None: all).
    """

    mode: str
    n: int
    n_items: int
    skew: float
    ks: tuple[int, ...]
    shards: int
    sweep_trials: int
    ladder_eps: tuple[float, ...]
    ladder_deltas: tuple[float, ...]
    ladder_releases: int
    universes: tuple[int, ...]
    universe_n: int
    universe_items: int
    universe_k: int
    universe_trials: int
    user_k: int
    user_ms: tuple[int, ...]
    n_users: int
    user_trials: int
    acc_eps: tuple[float, ...]
    acc_ks: tuple[int, ...]
    acc_sketch_k: int
    acc_n: int
    acc_trials: int
    flights: str
    flights_rows: int | None = None


MODES: dict[str, MGConfig] = {
    "smoke": MGConfig(
        mode="smoke",
        n=1 << 16,
        n_items=10_000,
        skew=1.1,
        ks=(10, 30, 100),
        shards=4,
        sweep_trials=1,
        ladder_eps=(1.0, 2.0),
        ladder_deltas=(1e-3, 1e-6),
        ladder_releases=20,
        universes=(10_000, 10**6, 10**9),
        universe_n=1 << 14,
        universe_items=10_000,
        universe_k=50,
        universe_trials=1,
        user_k=50,
        user_ms=(1, 16),
        n_users=500,
        user_trials=1,
        acc_eps=(0.5, 2.0),
        acc_ks=(10,),
        acc_sketch_k=256,
        acc_n=1 << 15,
        acc_trials=1,
        flights="sample",
        flights_rows=40_000,
    ),
    "quick": MGConfig(
        mode="quick",
        n=1 << 20,
        n_items=100_000,
        skew=1.1,
        ks=(10, 30, 100, 300, 1000),
        shards=4,
        sweep_trials=3,
        ladder_eps=(0.5, 1.0, 2.0),
        ladder_deltas=(1e-3, 1e-6, 1e-9),
        ladder_releases=100,
        universes=(10_000, 10**6, 10**9, 10**12),
        universe_n=1 << 16,
        universe_items=10_000,
        universe_k=100,
        universe_trials=5,
        user_k=100,
        user_ms=(1, 4, 16, 64),
        n_users=4000,
        user_trials=3,
        acc_eps=(0.1, 0.5, 1.0, 2.0),
        acc_ks=(10, 50, 100),
        acc_sketch_k=2048,
        acc_n=1 << 20,
        acc_trials=3,
        flights="sample",
    ),
    "full": MGConfig(
        mode="full",
        n=10_000_000,
        n_items=100_000,
        skew=1.1,
        ks=(10, 30, 100, 300, 1000, 3000),
        shards=4,
        sweep_trials=5,
        ladder_eps=(0.5, 1.0, 2.0),
        ladder_deltas=(1e-3, 1e-6, 1e-9),
        ladder_releases=400,
        universes=(10_000, 10**6, 10**9, 10**12, 10**15),
        universe_n=1 << 20,
        universe_items=10_000,
        universe_k=100,
        universe_trials=10,
        user_k=100,
        user_ms=(1, 2, 4, 8, 16, 32, 64),
        n_users=20_000,
        user_trials=5,
        acc_eps=(0.1, 0.5, 1.0, 2.0),
        acc_ks=(10, 50, 100),
        acc_sketch_k=2048,
        acc_n=10_000_000,
        acc_trials=5,
        flights="full",
    ),
}
"""Presets. ``quick`` uses the lazy-sketch stream length ``2**20`` and docs/algorithms.md#noise-sampling grid
values (``k`` 10..1000, ``eps`` 0.1..2, ``delta`` down to 1e-9, ``m`` 1..64); ``full`` uses
``n = 10^7`` (the largest reference size), ``k`` up to 3000, more trials and the 3 M-row flights file."""


# ------------------------------------------------------------------------------------------------
# Release helpers (shared with benchmarks/bench_heavy_hitters.py)
# ------------------------------------------------------------------------------------------------


def _rid(*parts: Any) -> tuple:
    """A release id: floats become their repr (release ids take str/int/bytes tuples only)."""
    return tuple(repr(p) if isinstance(p, float) else p for p in parts)


def release_arrays(release: HeavyHitterRelease | Sequence[tuple[Any, float]]) -> tuple:
    """``(keys, values)`` numpy arrays of a release (or of ``(key, value)`` pairs)."""
    items = release.items if isinstance(release, HeavyHitterRelease) else list(release)
    keys = np.array([k for k, _ in items])
    values = np.array([float(v) for _, v in items], dtype=np.float64)
    return keys, values


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``values`` of ``queries`` (0 for keys not in ``keys``); ``keys`` need not be sorted."""
    queries = np.asarray(queries)
    out = np.zeros(len(queries), dtype=np.float64)
    if len(keys) == 0 or len(queries) == 0:
        return out
    order = np.argsort(keys, kind="stable")
    sk, sv = keys[order], values[order]
    pos = np.minimum(np.searchsorted(sk, queries), len(sk) - 1)
    hit = sk[pos] == queries
    out[hit] = sv[pos[hit]]
    return out


def privacy_error(
    input_keys: np.ndarray, input_values: np.ndarray, rel_keys: np.ndarray, rel_values: np.ndarray
) -> float:
    """``max_x |f~(x) - c(x)|`` over the input's keys and the released keys (0 when absent).

    ``c`` is the release's non-private input; the value isolates the cost of privacy (docs/evaluation.md#misra-gries-report: "the same against the non-private MG").
    """
    err = 0.0
    if len(input_keys):
        est = _lookup(rel_keys, rel_values, input_keys)
        err = float(np.max(np.abs(est - input_values)))
    if len(rel_keys):
        c = _lookup(input_keys, input_values, rel_keys)
        err = max(err, float(np.max(np.abs(rel_values - c))))
    return err


def total_error(
    items: np.ndarray, f: np.ndarray, rel_keys: np.ndarray, rel_values: np.ndarray, top: int
) -> float:
    """``max |f~(x) - f(x)|`` over the true top-``top`` and the released keys (docs/evaluation.md#misra-gries-report)."""
    truth = datasets.top_k(items, f, top)
    err = float(np.max(np.abs(_lookup(rel_keys, rel_values, truth) - _lookup(items, f, truth))))
    if len(rel_keys):
        true_rel = datasets.counts_of(items, f, rel_keys.astype(items.dtype))
        err = max(err, float(np.max(np.abs(rel_values - true_rel))))
    return err


def score_top_k(
    rel_keys: np.ndarray, rel_values: np.ndarray, items: np.ndarray, f: np.ndarray, k: int
) -> dict[str, float]:
    """Precision, recall, F1, ARE and AAE of a release's top-``k`` against the true top-``k``.

    The reported set is the ``k`` released keys with the largest noisy values (ties by the
    smaller key; fewer when fewer are released). Precision is over the reported keys (1 when
    nothing is reported), recall over the true top-``k`` (:func:`metrics.precision_recall_f1`).
    ARE and AAE are over the true top-``k`` with the released value as the estimate, 0 for
    unreleased keys ([Hol25, Sections 5.1-5.3]; a withheld key costs its whole count).

    Parameters
    ----------
    rel_keys, rel_values
        The release (:func:`release_arrays`).
    items, f
        Exact counts of every distinct key (:func:`datasets.exact_counts`).
    k
        Size of the true top-k.
    """
    truth = datasets.top_k(items, f, k)
    if len(rel_keys):
        order = np.lexsort((rel_keys, -rel_values))[:k]
        reported = rel_keys[order]
    else:
        reported = rel_keys
    prf = metrics.precision_recall_f1(reported, truth)
    est = _lookup(rel_keys, rel_values, truth)
    true = _lookup(items, f.astype(np.float64), truth)
    return {
        "precision": prf.precision,
        "recall": prf.recall,
        "f1": prf.f1,
        "are": metrics.are(true, est),
        "aae": metrics.aae(true, est),
        "released": float(len(rel_keys)),
    }


@dataclass
class Sketches:
    """The non-private state every release of one stream starts from.

    Attributes
    ----------
    k
        Sketch size.
    n
        Stream length.
    sequential
        Algorithm 1 over the whole stream (PMG, PURE_PP, Chan et al.).
    design_b
        Algorithm 3 of each segment, summed exactly (APPROX_PP; docs/algorithms.md#mg-merged).
    merged
        The segments' sketches folded with ``MERGE_k`` (M-GSHM, M-LAP; docs/algorithms.md#mg-merged).
    items, f
        Exact counts (the stability histogram's input and the ground truth).
    """

    k: int
    n: int
    sequential: MisraGries
    design_b: PostProcessedSum
    merged: MisraGries
    items: np.ndarray
    f: np.ndarray


def build_sketches(keys: np.ndarray, k: int, shards: int) -> Sketches:
    """Build every non-private input once: sequential MG, Design B sums and the merged sketch."""
    sequential = MisraGries(k).update(keys)
    parts = [MisraGries(k).update(part) for part in np.array_split(keys, shards)]
    design_b = PostProcessedSum(k, max_shards=shards)
    for part in parts:
        design_b.add_sketch(part)
    merged = parts[0].copy()
    for part in parts[1:]:
        merged.merge(part)
    items, f = datasets.exact_counts(keys)
    return Sketches(k, len(keys), sequential, design_b, merged, items, f)


def release(
    mechanism: str,
    sk: Sketches,
    epsilon: float,
    delta: float,
    stream: NoiseStream,
    universe: Universe | None = None,
) -> tuple[np.ndarray, np.ndarray, HeavyHitterRelease | None]:
    """One release of ``mechanism`` from ``sk``: ``(keys, values, release object)``.

    ``mg`` returns the non-private sketch's positive counters (no release object); ``pure_pp``
    needs the declared ``universe``.
    """
    if mechanism == "mg":
        d = sk.sequential.to_dict()
        return (
            np.array(list(d), dtype=np.int64),
            np.array(list(d.values()), dtype=np.float64),
            None,
        )
    if mechanism == "pmg":
        # The paper's integer form of Algorithm 2 (the library's default reads it on a finer
        # lattice), here and in the other PMG runs of this module.
        rel = pmg(sk.sequential, PrivacyBudget.approx(epsilon, delta), stream, lattice=False)
    elif mechanism == "design_b":
        # The paper's Algorithm 3 as published (no DP count of N added back), so that the
        # figures and the privacy-error metric of :func:`_input` measure the same release.
        rel = approx_pp(sk.design_b, PrivacyBudget.approx(epsilon, delta), stream, count_fraction=0)
    elif mechanism == "pure_pp":
        if universe is None:
            raise ValueError("pure_pp needs a declared universe")
        rel = pure_pp(sk.sequential, universe, PrivacyBudget.pure(epsilon), stream)
    elif mechanism == "merged_gshm":
        rel = merged_gshm(sk.merged, PrivacyBudget.approx(epsilon, delta), stream)
    elif mechanism == "merged_laplace":
        rel = merged_laplace(sk.merged, PrivacyBudget.approx(epsilon, delta), stream)
    elif mechanism == "chan":
        rel = chan_thresholded(sk.sequential, PrivacyBudget.approx(epsilon, delta), stream)
    elif mechanism == "stability":
        rel = stability_histogram(
            dict(zip(sk.items.tolist(), sk.f.tolist(), strict=True)),
            PrivacyBudget.approx(epsilon, delta),
            stream,
        )
    else:
        raise ValueError(f"unknown mechanism {mechanism!r}")
    keys, values = release_arrays(rel)
    return keys.astype(np.int64) if len(keys) else np.zeros(0, np.int64), values, rel


def _input(mechanism: str, sk: Sketches) -> tuple[np.ndarray, np.ndarray]:
    """The non-private values a release perturbs (for :func:`privacy_error`)."""
    if mechanism in ("pmg", "chan", "mg"):
        d = sk.sequential.to_dict()
    elif mechanism in ("design_b", "pure_pp"):
        pp = sk.design_b if mechanism == "design_b" else postprocess(sk.sequential)
        k1 = pp.k + 1
        d = {x: v / k1 for x, v in pp.scaled_counts().items()}
    elif mechanism in ("merged_gshm", "merged_laplace"):
        d = sk.merged.to_dict()
    else:
        return sk.items.astype(np.int64), sk.f.astype(np.float64)
    return np.array(list(d), dtype=np.int64), np.array(list(d.values()), dtype=np.float64)


def pmg_bound_b(k: int, epsilon_effective: float, beta: float = BETA) -> float:
    """``B`` of Theorem 8 for the discrete PMG: ``2 ceil(ln(2(k+1)/((1+e^-eps) beta))/eps)``.

    docs/algorithms.md#mg-oracles (PMG-geo row): each of the ``k+1`` two-sided geometric draws exceeds ``B/2`` in
    absolute value with probability at most ``beta/(k+1)``.
    """
    e = epsilon_effective
    return 2.0 * math.ceil(math.log(2 * (k + 1) / ((1 + math.exp(-e)) * beta)) / e)


def _theorem8(
    rel: HeavyHitterRelease, sk: Sketches, rel_keys: np.ndarray, rel_values: np.ndarray
) -> dict[str, float]:
    """The Theorem 8 oracle on one PMG release ([LT23, Lemma 7 and Theorem 8] and docs/algorithms.md#mg-oracles), over every key."""
    k, n = sk.k, sk.n
    tau = float(rel.threshold)
    b = pmg_bound_b(k, float(rel.details["epsilon_effective"]))
    est = _lookup(rel_keys, rel_values, sk.items)
    f = sk.f.astype(np.float64)
    ok = (f - n / (k + 1) - tau - b < est) & (est <= f + b)
    true_rel = datasets.counts_of(sk.items, sk.f, rel_keys) if len(rel_keys) else np.zeros(0)
    return {
        "pmg_thm8_viol": float(not bool(np.all(ok))),
        "pmg_zero_released": float(np.sum(true_rel == 0)),
        "pmg_over_k": float(len(rel_keys) > k),
        "pmg_below_tau": float(np.sum(rel_values < tau)),
        "pmg_tau": tau,
        "pmg_B": b,
    }


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _flights(kind: str, rows: int | None) -> tuple[np.ndarray, int]:
    if kind == "sample":
        table = datasets.load_flights(sample=True)
    elif kind == "full":
        table = datasets.load_flights(download=False)
    else:
        raise ValueError(f"flights kind must be 'sample' or 'full', got {kind!r}")
    cols = datasets.flights_columns(table)
    a = len(cols.airport_names)
    pairs = cols.origin * a + cols.destination
    return (pairs if rows is None else pairs[:rows]), a


def flights_pairs(kind: str, rows: int | None = None) -> tuple[np.ndarray, Universe]:
    """Flights routes as ``origin * A + destination`` codes, and their declared universe.

    The universe is every ordered pair of the ``A`` airports (``A**2`` keys): public once the
    airport list is (the IATA list; here read from the data, which a deployment must not do).
    ``kind`` is ``"sample"`` (bundled) or ``"full"`` (the cached 3 M-row file).
    """
    pairs, a = _flights(kind, rows)
    return pairs, Universe.from_keys(range(a * a))


def _planted(n: int, n_items: int, seed: int) -> np.ndarray:
    """``PLANTED_HEAVY`` keys (ids 1..10) with 2% each, the rest uniform over ``n_items`` keys.

    The uniform tail makes Misra-Gries' undercount close to its worst case ``n/(k+1)``, which
    is where the trade-off of Chan et al.'s ``k/eps`` noise shows ([LT23, Section 4]).
    """
    rng = np.random.default_rng([seed, 7])
    heavy = rng.random(n) < PLANTED_MASS
    out = rng.integers(PLANTED_HEAVY + 1, PLANTED_HEAVY + 1 + n_items, size=n, dtype=np.int64)
    out[heavy] = rng.integers(1, PLANTED_HEAVY + 1, size=int(heavy.sum()), dtype=np.int64)
    return out


@functools.lru_cache(maxsize=8)
def _stream(name: str, n: int, n_items: int, s: float, seed: int) -> np.ndarray:
    if name == "zipf":
        return datasets.zipf_stream(n, s, n_items, seed).astype(np.int64)
    if name == "planted":
        return _planted(n, n_items, seed)
    raise ValueError(f"unknown stream {name!r}")


@functools.lru_cache(maxsize=16)
def _sketches(name: str, n: int, n_items: int, s: float, seed: int, k: int, shards: int):
    if name.startswith("flights-"):
        keys = flights_pairs(name.removeprefix("flights-"), None if n < 0 else n)[0]
    else:
        keys = _stream(name, n, n_items, s, seed)
    return build_sketches(keys, k, shards)


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------

SWEEP_METRICS: tuple[str, ...] = (
    "n_keys",
    "d",
    "mg_bound",
    "floor",
    "mg_err",
    "mg_f1",
    *(f"{m}_{x}" for m in SWEEP_MECHANISMS for x in ("priv", "err", "f1")),
    "pmg_thm8_viol",
    "pmg_zero_released",
    "pmg_over_k",
    "pmg_below_tau",
    "pmg_tau",
    "pmg_B",
    "design_b_tau",
    "chan_tau",
    "gshm_sigma",
    "gshm_tau",
    "mlap_tau",
)
"""Metric columns of the k sweep (one row per stream x k x trial)."""


def sweep_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """One stream, one sketch size: every release's privacy error, total error and top-10 F1.

    Parameters
    ----------
    params
        ``stream`` (``"zipf"`` or ``"planted"``), ``n``, ``n_items``, ``s``, ``k``, ``shards``,
        ``eps`` and ``delta``.
    seed
        Trial seed: the data and the noise.
    """
    k, eps, delta = int(params["k"]), float(params["eps"]), float(params["delta"])
    sk = _sketches(
        params["stream"], params["n"], params["n_items"], params["s"], seed, k, params["shards"]
    )
    noise = NoiseSource.insecure_for_tests(seed)
    out: dict[str, float] = {
        "n_keys": float(len(sk.items)),
        "d": float(sk.sequential.d),
        "mg_bound": sk.n / (k + 1),
        "floor": math.sqrt(sk.n * math.log(1 / delta) / eps),
    }
    mk, mv, _ = release("mg", sk, eps, delta, noise.stream("unused"))
    out["mg_err"] = total_error(sk.items, sk.f, mk, mv, TOP_ERR)
    out["mg_f1"] = score_top_k(mk, mv, sk.items, sk.f, TOP_F1)["f1"]
    for mech in SWEEP_MECHANISMS:
        stream = noise.stream(_rid("mg-sweep", params["stream"], k, eps, mech))
        keys, values, rel = release(mech, sk, eps, delta, stream)
        out[f"{mech}_priv"] = privacy_error(*_input(mech, sk), keys, values)
        out[f"{mech}_err"] = total_error(sk.items, sk.f, keys, values, TOP_ERR)
        out[f"{mech}_f1"] = score_top_k(keys, values, sk.items, sk.f, TOP_F1)["f1"]
        if mech == "pmg":
            out.update(_theorem8(rel, sk, keys, values))
        elif mech == "design_b":
            out["design_b_tau"] = float(rel.threshold)
        elif mech == "chan":
            out["chan_tau"] = float(rel.threshold)
        elif mech == "merged_gshm":
            out["gshm_sigma"] = float(rel.details["sigma"])
            out["gshm_tau"] = float(rel.threshold)
        elif mech == "merged_laplace":
            out["mlap_tau"] = float(rel.threshold)
    return out


LADDER_METRICS = ("pmg_tau", "pmg_c50", "pmg_min_value", "stab_tau", "stab_c50", "cmax")
"""Metric columns of the threshold ladder (one row per eps x delta)."""


def ladder_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Release frequency of a ladder of exact counts ``1..cmax``: where PMG starts releasing.

    The sketch holds one key per count ``c = 1..cmax`` exactly (``k = cmax``, so ``d = 0``). Over
    ``releases`` PMG releases the fraction that releases each key is measured; ``pmg_c50`` is
    ``1 +`` the number of counts released less than half the time (the 50% point of a
    monotone curve, robust to sampling noise). The same for the exact stability histogram.
    """
    eps, delta, r = float(params["eps"]), float(params["delta"]), int(params["releases"])
    noise = NoiseSource.insecure_for_tests(seed)
    tau = float(
        pmg(
            MisraGries(1), PrivacyBudget.approx(eps, delta), noise.stream("probe"), lattice=False
        ).threshold
    )
    cmax = int(math.ceil(1.3 * tau + 10.0 / eps + 10))
    counts = np.arange(1, cmax + 1, dtype=np.int64)
    sketch = MisraGries(cmax).update(counts, counts)
    exact = dict(zip(counts.tolist(), counts.tolist(), strict=True))
    hits_pmg = np.zeros(cmax)
    hits_stab = np.zeros(cmax)
    min_value = math.inf
    stab_tau = math.nan
    for i in range(r):
        rel = pmg(
            sketch,
            PrivacyBudget.approx(eps, delta),
            noise.stream(_rid("ladder-pmg", eps, delta, i)),
            lattice=False,
        )
        keys, values = release_arrays(rel)
        if len(keys):
            hits_pmg[keys.astype(np.int64) - 1] += 1
            min_value = min(min_value, float(values.min()))
        rel = stability_histogram(
            exact, PrivacyBudget.approx(eps, delta), noise.stream(_rid("ladder-st", eps, delta, i))
        )
        stab_tau = float(rel.threshold)
        keys, _ = release_arrays(rel)
        if len(keys):
            hits_stab[keys.astype(np.int64) - 1] += 1
    return {
        "pmg_tau": tau,
        "pmg_c50": 1.0 + float(np.sum(hits_pmg / r < 0.5)),
        "pmg_min_value": min_value if math.isfinite(min_value) else math.nan,
        "stab_tau": stab_tau,
        "stab_c50": 1.0 + float(np.sum(hits_stab / r < 0.5)),
        "cmax": float(cmax),
    }


UNIVERSE_METRICS = ("pure_noise", "pure_false", "pure_err", "pmg_noise", "pmg_err")
"""Metric columns of the universe sweep (one row per u x trial)."""


def universe_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """PURE_PP over a declared universe of ``u`` keys against PMG, on the same Zipf stream.

    ``*_noise`` is the privacy error against each release's input (Algorithm 3's ``cbar`` for
    PURE_PP, the MG counters for PMG), ``pure_false`` the number of released keys that never
    occur, ``*_err`` the total error over the true top-10 and the released keys.
    """
    u, k, eps = int(params["u"]), int(params["k"]), float(params["eps"])
    keys = _stream("zipf", params["n"], params["n_items"], params["s"], seed)
    sketch = MisraGries(k).update(keys)
    pp = postprocess(sketch)
    items, f = datasets.exact_counts(keys)
    noise = NoiseSource.insecure_for_tests(seed)
    # Zipf items are 1..n_items, all inside the declared universe 1..u.
    universe = Universe.from_keys(range(1, u + 1))
    rel = pure_pp(
        pp, universe, PrivacyBudget.pure(eps), noise.stream(_rid("mg-universe", u, "pure"))
    )
    rk, rv = release_arrays(rel)
    rk = rk.astype(np.int64)
    k1 = pp.k + 1
    cbar = {x: v / k1 for x, v in pp.scaled_counts().items()}
    ck = np.array(list(cbar), dtype=np.int64)
    cv = np.array(list(cbar.values()), dtype=np.float64)
    out = {
        "pure_noise": privacy_error(ck, cv, rk, rv),
        "pure_false": float(np.sum(datasets.counts_of(items, f, rk) == 0)),
        "pure_err": total_error(items, f, rk, rv, TOP_F1),
    }
    prel = pmg(
        sketch,
        PrivacyBudget.approx(eps, DELTA),
        noise.stream(_rid("mg-universe", u, "pmg")),
        lattice=False,
    )
    pk, pv = release_arrays(prel)
    pk = pk.astype(np.int64) if len(pk) else np.zeros(0, np.int64)
    d = sketch.to_dict()
    out["pmg_noise"] = privacy_error(
        np.array(list(d), dtype=np.int64), np.array(list(d.values()), dtype=np.float64), pk, pv
    )
    out["pmg_err"] = total_error(items, f, pk, pv, TOP_F1)
    return out


USER_METRICS = (
    "N",
    "mg_bound",
    "flat_priv",
    "pamg_priv",
    "flat_err",
    "pamg_err",
    "flat_f1",
    "pamg_f1",
    "flat_tau",
    "pamg_tau",
    "pamg_sigma",
)
"""Metric columns of the user-level sweep (one row per m x trial)."""


@functools.lru_cache(maxsize=4)
def _users(n_users: int, m: int, n_items: int, s: float, seed: int) -> tuple[np.ndarray, ...]:
    """``n_users`` sets of ``m`` distinct Zipf(s) elements over ``1..n_items`` (docs/evaluation.md#misra-gries-report).

    Each user takes the first ``m`` distinct values of ``4m`` Zipf draws, topped up with
    uniform values when the draws hold fewer than ``m`` distinct ones.
    """
    rng = np.random.default_rng([seed, m, 11])
    draws = datasets.zipf_stream(n_users * 4 * m, s, n_items, rng).reshape(n_users, 4 * m)
    users = []
    for row in draws:
        vals, first = np.unique(row, return_index=True)
        chosen = vals[np.argsort(first)][:m]
        while len(chosen) < m:
            extra = rng.integers(1, n_items + 1, size=m, dtype=np.int64)
            merged = np.concatenate([chosen, extra])
            vals, first = np.unique(merged, return_index=True)
            chosen = vals[np.argsort(first)][:m]
        users.append(chosen.astype(np.int64))
    return tuple(users)


def user_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """User level: flattened MG + group-privacy PMG against PAMG + GSHM ([LT23, Section 8, Lemmas 1-2 and Corollary 3; Theorem 12]).

    Both sketches have ``k`` counters; ``f(x)`` is the number of users holding ``x`` and ``N``
    the number of (user, element) pairs.
    """
    k, m = int(params["k"]), int(params["m"])
    eps, delta = float(params["eps"]), float(params["delta"])
    users = _users(params["n_users"], m, params["n_items"], params["s"], seed)
    flat_keys = np.asarray(flatten_users([u.tolist() for u in users]), dtype=np.int64)
    items, f = datasets.exact_counts(flat_keys)
    n_total = len(flat_keys)
    flat = MisraGries(k).update(flat_keys)
    pamg = PAMGSketch(k, m).update_users(u.tolist() for u in users)
    noise = NoiseSource.insecure_for_tests(seed)
    out: dict[str, float] = {"N": float(n_total), "mg_bound": n_total / (k + 1)}
    for name, sketch, rel in (
        (
            "flat",
            flat,
            user_level_pmg(
                flat, PrivacyBudget.approx(eps, delta), m, noise.stream(_rid("user-flat", m))
            ),
        ),
        (
            "pamg",
            pamg,
            pamg_gshm(pamg, PrivacyBudget.approx(eps, delta), noise.stream(_rid("user-pamg", m))),
        ),
    ):
        rk, rv = release_arrays(rel)
        rk = rk.astype(np.int64) if len(rk) else np.zeros(0, np.int64)
        d = sketch.to_dict()
        ik = np.array(list(d), dtype=np.int64)
        iv = np.array(list(d.values()), dtype=np.float64)
        out[f"{name}_priv"] = privacy_error(ik, iv, rk, rv)
        out[f"{name}_err"] = total_error(items, f, rk, rv, TOP_F1)
        out[f"{name}_f1"] = score_top_k(rk, rv, items, f, TOP_F1)["f1"]
        out[f"{name}_tau"] = float(rel.threshold)
        if name == "pamg":
            out["pamg_sigma"] = float(rel.details["sigma"])
    return out


SCORES = ("precision", "recall", "f1", "are", "aae", "released")
ACCURACY_METRICS: tuple[str, ...] = (
    "stream_len",
    "n_keys",
    *(f"{m}_{s}" for m in ACCURACY_MECHANISMS for s in SCORES),
    "pmg_thm8_viol",
    "pmg_zero_released",
    "pmg_over_k",
    "pmg_below_tau",
)
"""Metric columns of the accuracy experiment (one row per dataset x eps x k x trial)."""


def accuracy_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Top-k precision, recall, F1, ARE and AAE of every release on one data set.

    Parameters
    ----------
    params
        ``dataset`` (``"zipf"``, ``"flights-sample"`` or ``"flights-full"``), ``n`` (Zipf length;
        flights: a row limit, or -1 for all rows), ``n_items`` and ``s`` (Zipf), ``eps``,
        ``delta``, ``k`` (the top-k scored), ``sketch_k`` (counters of every sketch) and
        ``shards``.
    seed
        Trial seed (Zipf data and all noise).
    """
    eps, delta, k = float(params["eps"]), float(params["delta"]), int(params["k"])
    dataset = params["dataset"]
    # Flights data are fixed: every trial shares one sketch set (seed 0 in the cache key).
    data_seed = seed if dataset == "zipf" else 0
    sk = _sketches(
        dataset,
        params["n"],
        params["n_items"],
        params["s"],
        data_seed,
        params["sketch_k"],
        params["shards"],
    )
    if dataset == "zipf":
        universe = Universe.from_keys(range(1, params["n_items"] + 1))
    else:
        universe = flights_pairs(dataset.removeprefix("flights-"), None)[1]
    noise = NoiseSource.insecure_for_tests(seed)
    out: dict[str, float] = {"stream_len": float(sk.n), "n_keys": float(len(sk.items))}
    for mech in ACCURACY_MECHANISMS:
        stream = noise.stream(_rid("mg-accuracy", dataset, eps, k, mech))
        keys, values, rel = release(mech, sk, eps, delta, stream, universe)
        for name, v in score_top_k(keys, values, sk.items, sk.f, k).items():
            out[f"{mech}_{name}"] = v
        if mech == "pmg":
            th = _theorem8(rel, sk, keys, values)
            out.update({c: th[c] for c in ACCURACY_METRICS if c in th})
    return out


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------


def build_experiments(config: MGConfig, flights_kind: str | None) -> dict[str, Experiment]:
    """The experiments of a run, by short name (``sweep``, ``ladder``, ``universe``, ``user``,
    ``accuracy``, ``shards``); ``flights_kind`` is the flights data actually available."""
    if 100 not in config.ks:
        raise ValueError(
            "the k sweep must include k = 100 (docs/algorithms.md#mg-merged example sizes)"
        )
    sweep = [
        {
            "stream": stream,
            "n": config.n,
            "n_items": config.n_items,
            "s": config.skew,
            "k": k,
            "shards": config.shards,
            "eps": 1.0,
            "delta": DELTA,
        }
        for stream in ("zipf", "planted")
        for k in config.ks
    ]
    ladder = [
        {"eps": e, "delta": d, "releases": config.ladder_releases}
        for e in config.ladder_eps
        for d in config.ladder_deltas
    ]
    universe = [
        {
            "u": u,
            "n": config.universe_n,
            "n_items": config.universe_items,
            "s": config.skew,
            "k": config.universe_k,
            "eps": 1.0,
        }
        for u in config.universes
    ]
    user = [
        {
            "m": m,
            "k": config.user_k,
            "n_users": config.n_users,
            "n_items": 10_000,
            "s": config.skew,
            "eps": 1.0,
            "delta": DELTA,
        }
        for m in config.user_ms
    ]
    acc_data: list[dict[str, Any]] = [
        {"dataset": "zipf", "n": config.acc_n, "n_items": config.n_items, "s": config.skew}
    ]
    if flights_kind:
        rows = config.flights_rows if config.flights_rows else -1
        acc_data.append({"dataset": f"flights-{flights_kind}", "n": rows, "n_items": 0, "s": 0.0})
    accuracy = [
        {
            **data,
            "eps": e,
            "delta": DELTA,
            "k": k,
            "sketch_k": config.acc_sketch_k,
            "shards": config.shards,
        }
        for data in acc_data
        for e in config.acc_eps
        for k in config.acc_ks
    ]
    v = EXPERIMENT_VERSION
    return {
        "sweep": Experiment(
            "mg-sweep",
            sweep_cell,
            sweep,
            SWEEP_METRICS,
            trials=config.sweep_trials,
            version=v,
            description="privacy and total error against the sketch size k",
        ),
        "ladder": Experiment(
            "mg-ladder",
            ladder_cell,
            ladder,
            LADDER_METRICS,
            trials=1,
            version=v,
            description="release threshold against epsilon and delta",
        ),
        "universe": Experiment(
            "mg-universe",
            universe_cell,
            universe,
            UNIVERSE_METRICS,
            trials=config.universe_trials,
            version=v,
            description="PURE_PP against the declared universe size",
        ),
        "user": Experiment(
            "mg-user",
            user_cell,
            user,
            USER_METRICS,
            trials=config.user_trials,
            version=v,
            description="user level: flattened MG with group privacy vs PAMG + GSHM",
        ),
        "accuracy": Experiment(
            "mg-accuracy",
            accuracy_cell,
            accuracy,
            ACCURACY_METRICS,
            trials=config.acc_trials,
            version=v,
            description="top-k precision, recall, F1, ARE, AAE against epsilon and k",
        ),
        "shards": shard_experiment(
            config.n,
            config.n_items,
            config.skew,
            config.sweep_trials,
            v,
            (1, 2, 8) if config.mode == "smoke" else SHARD_COUNTS,
        ),
        "space_saving": space_saving_experiment(
            config.n, config.n_items, config.sweep_trials, v, config.mode == "smoke"
        ),
        "user_pure": user_pure_experiment(
            config.n_users, config.user_trials, v, config.mode == "smoke"
        ),
    }
