"""DPSW-Sketch (Wang, Wang and Chen, KDD 2024): the results R1-R15 of [WWC24, Section 5 and Appendix C].

The paper's results are plots only (Figures 2-13); [WWC24, Section 5 and Appendix C] turns each into a falsifiable claim.
This module runs them with the library's :class:`~beam_dpsketch.sketches.sliding.dpsw.DPSWSketch`
(preset ``paper_experiments``: ``B = w/10``, ``|I| = 3``, the code's 0.8 budget split, docs/algorithms.md#dpsw-e12
and docs/algorithms.md#dpsw-e12) against the private baselines of :mod:`~beam_dpsketch.sketches.sliding.baselines`
(U-Sketch and PCC-MG, [WWC24, Appendix B]; BLMZ is not built) and the non-private exact-window Count-Min
that stands in for Microscope-Sketch ([WWC24, Appendix B]; a library choice).

Protocol P-paper ([WWC24, Section 5]): a random 1% of the time steps in ``[w, n]``, subsampled to at most
``queries`` of them (seeded); at each, 50 "high" items (the window's true top 50) and 50 "low"
items (uniform among the others with window frequency ``>= 100``, all of them when fewer), MAE
and MRE over each set ([WWC24, Section 5]), and one heavy-hitter query per ``gamma`` over the public
domain, scored by precision, recall and F1 against ``{e : f_e >= gamma w}``. Ground truth is an
exact window count over the whole domain updated incrementally between sorted query times (add
the new chunk, subtract the expired one, docs/algorithms.md#dpsw-segments); nothing rescans the window.

Data ([WWC24, Table 2 and Appendix A]; AOL, MovieLens and WorldCup are not reachable here, docs/evaluation.md#real-data):
the paper's synthetic Zipf(1) and Gaussian(50, 25) mixtures over ``{1..25600}``, a stream
sampled i.i.d. from wordfreq's English table (top 50,000 words; a real long tail in place of
AOL's keywords), and the US flights 2001 routes in their true time order (count-based windows,
like the paper's time-sorted real data sets). A time-based run on the flights (windows in
minutes of the true timestamps, docs/algorithms.md#dpsw-beam) checks the same accuracy with event-time blocks.

Every number is computed; the verdicts follow from the tables. Noise comes from
``NoiseSource.insecure_for_tests`` with a distinct release id per cell (reproduction only).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.sliding.baselines import PCCMG, ExactWindowCountMin, USketch
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch, checkpoint_list
from reproduction import datasets, metrics
from reproduction.runner import (
    Experiment,
)
from reproduction.tables import param_tag

__all__ = [
    "DPSWConfig",
    "EPSILONS",
    "GAMMAS",
    "METHODS",
    "METRICS",
    "MODES",
    "build_experiments",
    "checkpoints_for",
    "stream_cell",
    "time_cell",
    "workload",
]

EXPERIMENT_VERSION = "1"
EPSILONS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
"""The paper's epsilon grid ([WWC24, Section 5], the authors' code)."""
GAMMAS: tuple[float, ...] = (0.002, 0.005, 0.01, 0.02)
"""Heavy-hitter thresholds: 0.005 and 0.01 in the eps sweep (Fig. 4), all four at eps = 1."""
METHODS: tuple[str, ...] = ("dpsw", "usketch", "pccmg", "exact_cms")
PRIVATE: tuple[str, ...] = ("dpsw", "usketch", "pccmg")
BASELINES: tuple[str, ...] = ("usketch", "pccmg")
LABELS = {
    "dpsw": "DPSW",
    "usketch": "U-Sketch",
    "pccmg": "PCC-MG",
    "exact_cms": "exact-window CMS (non-private)",
}
COLORS = {"dpsw": "C0", "usketch": "C1", "pccmg": "C2", "exact_cms": "k"}
N_HIGH = 50
N_LOW = 50
ZIPF_ITEMS = 25600
WORDS_TOP = 50_000
PER_PCMS_COUNTERS = 10_000  # a * b of one PCMS in App. C (Fig. 11: a = 2..10, b = 5000..1000)
MODES_LAMS = (0.5, 0.25, 0.125, 0.0625, 0.05, 0.0375, 0.025)  # PCC-MG size sweep: ~4-400 KB
REF_DEPTH = (
    3  # default depth of the App. C sweeps and of the eps sweep (the DPSW tests' reference shape)
)
gamma_tag = functools.partial(param_tag, "g")  # column-name fragment of a gamma: g0005


METRICS: tuple[str, ...] = (
    "mae_high",
    "mre_high",
    "mae_low",
    "mre_low",
    "mae_all",
    "mre_all",
    "n_low",
    *[f"{m}_{gamma_tag(g)}" for g in GAMMAS for m in ("f1", "precision", "recall", "f1slack")],
    "throughput",
    "size_bytes",
    "n_queries",
    "rho",
    "delta",
)
"""Cell metrics. ``f1slack`` is DPSW's F1 with threshold ``(gamma - 1/b) w`` (docs/algorithms.md#dpsw-e14; NaN for the
other methods); ``size_bytes`` is the memory of the live counters ([WWC24, Section 5], library choice); throughput is
items per second over the update calls only."""


@dataclass(frozen=True)
class DPSWConfig:
    """Scale of one run of the DPSW report.

    Parameters
    ----------
    mode
        ``smoke``, ``quick`` or ``full``.
    n
        Stream length of the synthetic and word streams (the paper's is 10**7).
    window
        Default window ``w`` (the paper's is 10**6).
    windows
        Window sizes of the R10 sweep.
    epsilons
        The eps grid of R1-R9.
    queries
        Maximum number of query times per cell (1% of ``[w, n]`` subsampled).
    datasets
        Data sets: ``zipf``, ``gaussian``, ``words``, ``flights``.
    sizes_kb
        Nominal total sizes of the R11 sweep (KB).
    levels
        ``|I|`` values of R13.
    substreams
        Blocks per window of R14.
    depths
        ``a`` values of R15 (``b = 10000 / a``).
    time_windows
        Windows in minutes of the time-based flights run.
    low_floor
        Minimum window frequency of a "low" item (the paper's 100).
    trials
        Runs per cell.
    flights
        ``"sample"`` or ``"full"``.
    flights_rows
        First rows of the flights data only (None: all).
    hh_queries
        Heavy-hitter queries per cell (every k-th query time; a domain scan is the costly part).
    width
        Count-Min width ``b`` of the eps and window sweeps (the paper's best is in [500, 5000]).
    pccmg_lam
        PCC-MG's ``lambda`` outside the size sweep.
    pccmg_lams
        PCC-MG's ``lambda`` values available to the size sweep (smaller is bigger and slower).
    pcms_counters
        ``a * b`` of one PCMS at the default layout in the App. C sweeps (the paper's 10,000).
    """

    mode: str
    n: int
    window: int
    windows: tuple[int, ...]
    epsilons: tuple[float, ...]
    queries: int
    datasets: tuple[str, ...]
    sizes_kb: tuple[int, ...]
    levels: tuple[int, ...]
    substreams: tuple[int, ...]
    depths: tuple[int, ...]
    time_windows: tuple[int, ...]
    low_floor: int
    trials: int
    flights: str
    flights_rows: int | None = None
    hh_queries: int = 40
    width: int = 5000
    pccmg_lam: float = 0.05
    pccmg_lams: tuple[float, ...] = MODES_LAMS
    pcms_counters: int = PER_PCMS_COUNTERS


MODES: dict[str, DPSWConfig] = {
    "smoke": DPSWConfig(
        mode="smoke",
        n=30_000,
        window=10_000,
        windows=(5_000, 10_000),
        epsilons=(0.5, 2.0),
        queries=6,
        datasets=("zipf", "flights"),
        sizes_kb=(8, 64, 256),
        levels=(2, 3, 5),
        substreams=(5, 10, 20),
        depths=(2, 5),
        time_windows=(1440, 4320),
        low_floor=10,
        trials=1,
        flights="sample",
        flights_rows=40_000,
        hh_queries=3,
        width=500,
        pccmg_lam=0.25,
        pccmg_lams=(0.5, 0.25),
        pcms_counters=600,
    ),
    "quick": DPSWConfig(
        mode="quick",
        n=400_000,
        window=100_000,
        windows=(25_000, 50_000, 100_000),
        epsilons=(0.1, 0.4, 1.0, 2.0),
        queries=50,
        datasets=("zipf", "gaussian", "words", "flights"),
        sizes_kb=(4, 32, 256, 2048),
        levels=(2, 3, 5, 10, 15),
        substreams=(2, 5, 10, 20, 50),
        depths=(2, 3, 5, 8, 10),
        time_windows=(10080, 40320, 80640),
        low_floor=100,
        trials=1,
        flights="sample",
        hh_queries=15,
        pccmg_lam=0.1,
    ),
    "full": DPSWConfig(
        mode="full",
        n=3_000_000,
        window=1_000_000,
        windows=(100_000, 200_000, 500_000, 1_000_000),
        epsilons=EPSILONS,
        queries=150,
        datasets=("zipf", "gaussian", "words", "flights"),
        sizes_kb=(4, 16, 64, 256, 1024, 4096),
        levels=(2, 3, 4, 5, 8, 10, 15),
        substreams=(2, 5, 10, 15, 20, 30, 50),
        depths=(2, 3, 4, 5, 6, 7, 8, 9, 10),
        time_windows=(10080, 40320, 80640),
        low_floor=100,
        trials=1,
        flights="full",
        hh_queries=25,
        pccmg_lams=(0.5, 0.25, 0.125, 0.0625, 0.05),
    ),
}
"""Presets. ``full`` has the paper's ``w = 10**6`` and eps grid on 3 M-item streams (the authors'
harness also used the first 3 M items, docs/algorithms.md#dpsw-e26; the paper's 10 M do not fit the time
box); ``quick`` scales the window down by 10 (``w = 10**5``, 400,000 items, 4 eps values)."""

DATASET_LABELS = {
    "zipf": "Zipf(1) mix, m=25,600",
    "gaussian": "Gaussian(50,25) mix, m=25,600",
    "words": "wordfreq words, m=50,000",
    "flights": "US flights 2001 routes",
}


# ------------------------------------------------------------------------------------------------
# Data and workload
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _flights(kind: str, rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Route codes in time order and the minute of each flight (1-based, from the first one)."""
    table = datasets.load_flights(sample=True) if kind == "sample" else datasets.load_flights()
    cols = datasets.flights_columns(table)
    minutes = cols.timestamp.astype("datetime64[m]").astype(np.int64)
    order = np.argsort(minutes, kind="stable")
    routes, minutes = cols.route[order], minutes[order]
    if rows is not None:
        routes, minutes = routes[:rows], minutes[:rows]
    return routes.astype(np.int64), minutes - minutes[0] + 1


@functools.lru_cache(maxsize=1)
def _words() -> datasets.WordFrequencies:
    return datasets.load_word_frequencies(datasets.fetch_wordfreq(download=False), top=WORDS_TOP)


def _stream(dataset: str, n: int, rows: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, domain)``: the stream (int64, arrival order) and its public key domain."""
    if dataset == "zipf":
        return datasets.zipf_mixture_stream(n, seed), np.arange(1, ZIPF_ITEMS + 1)
    if dataset == "gaussian":
        return datasets.gaussian_mixture_stream(n, seed), np.arange(1, ZIPF_ITEMS + 1)
    if dataset == "words":
        return datasets.word_stream(n, seed, _words()), np.arange(WORDS_TOP)
    if dataset.startswith("flights-"):
        routes, _ = _flights(dataset.removeprefix("flights-"), rows)
        # Every route code of the file: an evaluation convenience (docs/algorithms.md#dpsw-beam), not a public
        # domain fixed in advance; a deployment would declare all airport pairs.
        return routes, np.arange(int(routes.max()) + 1)
    raise ValueError(f"unknown dataset {dataset!r}")


@dataclass(frozen=True)
class Workload:
    """Query times, query sets and ground truth of one (data, window) for protocol P-paper."""

    keys: np.ndarray
    domain: np.ndarray
    times: np.ndarray  # sorted 1-based time steps t (the first t items have arrived)
    high: list[np.ndarray]
    f_high: list[np.ndarray]
    low: list[np.ndarray]
    f_low: list[np.ndarray]
    heavy: dict[float, list[np.ndarray]]


def _rng(*parts: Any) -> np.random.Generator:
    # Query times and low items: data-side sampling, seeded (np.random is fine off the release path).
    return np.random.default_rng([abs(hash_part(p)) for p in parts])


def hash_part(value: Any) -> int:
    """A stable 32-bit integer for a seed component (never Python's salted ``hash``)."""
    import hashlib

    return int(hashlib.sha256(repr(value).encode()).hexdigest()[:8], 16)


@functools.lru_cache(maxsize=2)
def workload(
    dataset: str,
    n: int,
    rows: int | None,
    window: int,
    queries: int,
    low_floor: int,
    seed: int,
) -> Workload:
    """Protocol P-paper ([WWC24, Section 5]) for one stream and window: times, query sets, truth.

    The query times are a random 1% of ``[w, n]`` subsampled to at most ``queries``; at each,
    the window's true top 50 ("high") and 50 uniform draws among the other items with frequency
    ``>= low_floor`` ("low"), and the true heavy hitters ``{e : f_e >= gamma w}`` per gamma.
    """
    keys, domain = _stream(dataset, n, rows, seed)
    n = len(keys)
    if n < window:
        raise ValueError(f"{dataset}: stream of {n} items is shorter than the window {window}")
    rng = _rng("dpsw-workload", dataset, n, window, seed)
    span = n - window + 1
    k = min(max(1, round(0.01 * span)), queries, span)
    times = np.sort(rng.choice(span, size=k, replace=False) + window)
    size = int(max(int(keys.max()), int(domain.max()))) + 1
    cnt = np.zeros(size, dtype=np.int64)
    lo = hi = 0  # the window [lo, hi) of 0-based positions currently counted
    out: dict[str, list[np.ndarray]] = {"high": [], "f_high": [], "low": [], "f_low": []}
    heavy: dict[float, list[np.ndarray]] = {g: [] for g in GAMMAS}
    for t in times.tolist():
        a, b = t - window, t
        if a >= hi:
            cnt[:] = np.bincount(keys[a:b], minlength=size)
        else:
            cnt += np.bincount(keys[hi:b], minlength=size)
            cnt -= np.bincount(keys[lo:a], minlength=size)
        lo, hi = a, b
        top = np.argpartition(-cnt, N_HIGH)[:N_HIGH]
        top = top[np.lexsort((top, -cnt[top]))]
        eligible = np.flatnonzero(cnt >= low_floor)
        eligible = np.setdiff1d(eligible, top, assume_unique=True)
        low = np.sort(rng.choice(eligible, size=min(N_LOW, len(eligible)), replace=False))
        out["high"].append(top)
        out["f_high"].append(cnt[top].copy())
        out["low"].append(low)
        out["f_low"].append(cnt[low].copy())
        for g in GAMMAS:
            heavy[g].append(np.flatnonzero(cnt >= g * window))
    return Workload(keys, domain, times, heavy=heavy, **out)


# ------------------------------------------------------------------------------------------------
# Methods
# ------------------------------------------------------------------------------------------------


def checkpoints_for(block: int, levels: int) -> list[int]:
    """A checkpoint list ``I = [B, ..., 1]`` of exactly ``levels`` entries (R13's ``|I|`` axis).

    ``|I| = 2`` is ``[B, 1]``; otherwise the smooth histogram of docs/algorithms.md#dpsw-checkpoints with the exact
    rational ``alpha`` nearest to ``1 - B^(-1/(|I|-1))`` (a geometric list) that yields
    ``levels`` entries, as the paper varies ``alpha`` from 0.99 to 0.1 to vary ``|I|`` (App. C).
    """
    if levels < 2 or levels > block:
        raise ValueError(f"levels must be in [2, block], got {levels} for block {block}")
    if levels == 2:
        return [block, 1]
    start = 1.0 - block ** (-1.0 / (levels - 1))
    grid = sorted(range(1, 1000), key=lambda k: abs(k / 1000 - start))
    for k in grid:
        cps = checkpoint_list(block, Fraction(k, 1000))
        if len(cps) == levels:
            return list(cps)
    raise ValueError(f"no alpha in (0, 1) gives {levels} checkpoints for block {block}")


def _live_pcms(substreams: int, levels: int) -> int:
    # [WWC24, Section 4.1]: (ceil(w/B) + 1) |I| + |I| - 1 live sketches with prefix freeing, plus the
    # 2|I| - 1 raw segment tables of the current block (docs/algorithms.md#dpsw-segments memory formula).
    return (substreams + 1) * levels + levels - 1 + 2 * levels - 1


def _nominal_bytes(method: str, p: Mapping[str, Any]) -> float:
    w, a, b = int(p["w"]), int(p.get("depth") or 0), int(p.get("width") or 0)
    if method == "dpsw":
        return 8.0 * a * b * _live_pcms(int(p.get("substreams") or 10), int(p.get("levels") or 3))
    if method == "usketch":
        return 8.0 * a * b * 2 * (100 + 1)  # 100 blocks, full + one suffix table each
    if method == "exact_cms":
        return 8.0 * a * b  # the counters; the ring of expiring cells is not counted
    lam = float(p["lam"])
    levels = math.ceil(math.log2(4 / lam))
    w0 = math.ceil(lam * w / 4)
    return 16.0 * sum(
        math.ceil(2 * 2**i * (levels + 1)) * (math.ceil(w / (2**i * w0)) + 1)
        for i in range(levels + 1)
    )


def size_params(
    method: str, size_kb: float, w: int, lams: Sequence[float] = MODES_LAMS
) -> dict[str, Any]:
    """Parameters giving about ``size_kb`` of live counters (R11; [WWC24, Section 5], library choice size)."""
    target = size_kb * 1024
    if method in ("dpsw", "usketch", "exact_cms"):
        per = _nominal_bytes(method, {"w": w, "depth": REF_DEPTH, "width": 1})
        return {"depth": REF_DEPTH, "width": max(1, round(target / per)), "lam": None}
    best = min(
        lams, key=lambda lam: abs(math.log(_nominal_bytes("pccmg", {"w": w, "lam": lam}) / target))
    )
    return {"depth": None, "width": None, "lam": best}


def _budget(eps: float, n: int) -> tuple[PrivacyBudget, float]:
    delta = 1.0 / n**1.5  # [WWC24, Section 5] with the actual n (docs/algorithms.md#dpsw-e13)
    return PrivacyBudget.approx(eps, delta), delta


def _build(method: str, p: Mapping[str, Any], n: int, domain: np.ndarray, seed: int) -> Any:
    w, eps = int(p["w"]), float(p["eps"])
    hseed = seed % 2**32
    noise = NoiseSource.insecure_for_tests(seed)  # reproduction only: seeded noise
    label = "/".join(f"{k}={p[k]}" for k in sorted(p))  # distinct release ids per cell
    if method == "dpsw":
        budget, _ = _budget(eps, n)
        sub, levels = int(p.get("substreams") or 10), int(p.get("levels") or 3)
        if sub == 10 and levels == 3:
            return DPSWSketch.paper_experiments(
                w,
                budget,
                width=int(p["width"]),
                depth=int(p["depth"]),
                seed=hseed,
                noise_source=noise,
                label=label,
            )
        block = -(-w // sub)
        return DPSWSketch(
            w,
            budget,
            width=int(p["width"]),
            depth=int(p["depth"]),
            block=block,
            checkpoints=checkpoints_for(block, levels),
            split="code_q",
            seed=hseed,
            noise_source=noise,
            label=label,
        )
    if method == "usketch":
        return USketch(
            w,
            eps,
            width=int(p["width"]),
            depth=int(p["depth"]),
            seed=hseed,
            domain=domain,
            noise_source=noise,
            label=label,
        )
    if method == "pccmg":
        return PCCMG(
            w,
            PrivacyBudget.pure(eps),
            lam=float(p["lam"]),
            universe=domain.tolist(),
            noise_source=noise,
            label=label,
        )
    if method == "exact_cms":
        return ExactWindowCountMin(w, width=int(p["width"]), depth=int(p["depth"]), seed=hseed)
    raise ValueError(f"unknown method {method!r}")


def _errors(est: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    err = np.abs(est - truth)
    return err, err / np.maximum(truth, 1)


def stream_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """One method over one stream with protocol P-paper (count-based windows).

    Parameters
    ----------
    params
        ``dataset``, ``n``, ``rows``, ``w``, ``queries``, ``low_floor``, ``method``, ``eps``,
        ``depth``, ``width``, ``lam``, ``substreams``, ``levels``, ``hh`` (score heavy hitters
        over the whole domain) and ``hh_queries`` (at most this many heavy-hitter query times,
        evenly spread over the query times).
    seed
        Trial seed: data, hash seed, noise, query times.

    Returns
    -------
    dict
        :data:`METRICS`.
    """
    wl = workload(
        params["dataset"],
        int(params["n"]),
        params.get("rows"),
        int(params["w"]),
        int(params["queries"]),
        int(params["low_floor"]),
        seed,
    )
    n = len(wl.keys)
    method = params["method"]
    sk = _build(method, params, n, wl.domain, seed)
    # A domain scan per query time is the costly part: score heavy hitters at every k-th time.
    every = -(-len(wl.times) // max(1, int(params["hh_queries"]))) if params["hh"] else 0
    lo = int(wl.domain[0])
    w = int(params["w"])
    errs: dict[str, list[np.ndarray]] = {"high": [], "low": [], "rhigh": [], "rlow": []}
    prf: dict[str, list[float]] = {}
    upd_s, prev, peak = 0.0, 0, 0
    for i, t in enumerate(wl.times.tolist()):
        start = time.perf_counter()
        sk.update_batch(wl.keys[prev:t])
        upd_s += time.perf_counter() - start
        prev = t
        if method == "dpsw":
            peak = max(peak, sk.memory_bytes())
        if every and i % every == 0:
            est_dom = np.asarray(sk.estimate(wl.domain), dtype=np.float64)
            est_high, est_low = est_dom[wl.high[i] - lo], est_dom[wl.low[i] - lo]
            for g in GAMMAS:
                truth = wl.heavy[g][i]
                got = wl.domain[est_dom >= g * w]
                r = metrics.precision_recall_f1(got.tolist(), truth.tolist())
                for name, v in (("f1", r.f1), ("precision", r.precision), ("recall", r.recall)):
                    prf.setdefault(f"{name}_{gamma_tag(g)}", []).append(v)
                if method == "dpsw":
                    got = wl.domain[est_dom >= (g - 1.0 / int(params["width"])) * w]
                    r = metrics.precision_recall_f1(got.tolist(), truth.tolist())
                    prf.setdefault(f"f1slack_{gamma_tag(g)}", []).append(r.f1)
        else:
            est = np.asarray(sk.estimate(np.concatenate([wl.high[i], wl.low[i]])), np.float64)
            est_high, est_low = est[: len(wl.high[i])], est[len(wl.high[i]) :]
        e, r = _errors(est_high, wl.f_high[i])
        errs["high"].append(e)
        errs["rhigh"].append(r)
        e, r = _errors(est_low, wl.f_low[i])
        errs["low"].append(e)
        errs["rlow"].append(r)
    high, low = np.concatenate(errs["high"]), np.concatenate(errs["low"])
    rhigh, rlow = np.concatenate(errs["rhigh"]), np.concatenate(errs["rlow"])
    out: dict[str, float] = {
        "mae_high": float(high.mean()),
        "mre_high": float(rhigh.mean()),
        "mae_low": float(low.mean()) if len(low) else math.nan,
        "mre_low": float(rlow.mean()) if len(low) else math.nan,
        "mae_all": float(np.concatenate([high, low]).mean()),
        "mre_all": float(np.concatenate([rhigh, rlow]).mean()),
        "n_low": float(np.mean([len(x) for x in wl.low])),
        "throughput": metrics.throughput(int(wl.times[-1]), upd_s),
        "size_bytes": float(peak) if method == "dpsw" else _nominal_bytes(method, params),
        "n_queries": float(len(wl.times)),
        "rho": float(sk.rho) if method == "dpsw" else math.nan,
        "delta": _budget(1.0, n)[1] if method == "dpsw" else math.nan,
    }
    for g in GAMMAS:
        for name in ("f1", "precision", "recall", "f1slack"):
            vals = prf.get(f"{name}_{gamma_tag(g)}")
            out[f"{name}_{gamma_tag(g)}"] = float(np.mean(vals)) if vals else math.nan
    return out


TIME_METRICS: tuple[str, ...] = (
    "mae_high",
    "mre_high",
    "mae_low",
    "mre_low",
    "mean_window_items",
    "n_queries",
    "cb_mae_high",
    "cb_mre_high",
)
"""Time-based flights cell: DPSW with windows in minutes, and (``cb_*``) count-based DPSW with
``w`` = the mean number of flights per time window, at the same query instants."""


def time_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """DPSW over the flights with true timestamps: time-based windows of ``w`` minutes.

    Positions are minutes since the first flight (docs/algorithms.md#dpsw-beam time-based mode; any number of flights
    per minute). Query instants are a random 1% of the minutes in ``[w, T]`` (at most
    ``queries``); high/low sets as in :func:`workload` over the window ``(t - w, t]`` minutes.
    The count-based twin uses ``w_count`` = the mean window occupancy, queried after the last
    flight of the same minute.
    """
    routes, minutes = _flights(params["kind"], params.get("rows"))
    w, eps = int(params["w"]), float(params["eps"])
    n, horizon = len(routes), int(minutes[-1])
    rng = _rng("dpsw-time", params["kind"], n, w, seed)
    span = horizon - w + 1
    k = min(max(1, round(0.01 * span)), int(params["queries"]), span)
    times = np.sort(rng.choice(span, size=k, replace=False) + w)
    ends = np.searchsorted(minutes, times, side="right")  # flights with minute <= t
    starts = np.searchsorted(minutes, times - w, side="right")  # minute > t - w
    mean_items = float(np.mean(ends - starts))
    w_count = max(10, int(round(mean_items / 10)) * 10)
    budget, _ = _budget(eps, n)
    noise = NoiseSource.insecure_for_tests(seed)
    depth, width = int(params["depth"]), int(params["width"])
    tb = DPSWSketch.paper_experiments(
        w,
        budget,
        width=width,
        depth=depth,
        seed=seed % 2**32,
        noise_source=noise,
        label=f"time/{w}/{eps}",
    )
    cb = DPSWSketch.paper_experiments(
        w_count,
        budget,
        width=width,
        depth=depth,
        seed=seed % 2**32,
        noise_source=noise,
        label=f"count/{w}/{eps}",
    )
    size = int(routes.max()) + 1
    errs: dict[str, list[np.ndarray]] = {k_: [] for k_ in ("h", "rh", "l", "rl", "ch", "rch")}
    prev = 0
    for t, a, b in zip(times.tolist(), starts.tolist(), ends.tolist(), strict=True):
        tb.update_at(routes[prev:b], minutes[prev:b])
        tb.advance_to(t)
        cb.update_batch(routes[prev:b])
        prev = b
        cnt = np.bincount(routes[a:b], minlength=size)
        top = np.argpartition(-cnt, N_HIGH)[:N_HIGH]
        eligible = np.setdiff1d(np.flatnonzero(cnt >= int(params["low_floor"])), top)
        low = rng.choice(eligible, size=min(N_LOW, len(eligible)), replace=False)
        for key, qs in (("h", top), ("l", low)):
            e, r = _errors(tb.estimate(qs), cnt[qs])
            errs[key].append(e)
            errs["r" + key].append(r)
        # count-based window of w_count flights ending at the same flight
        cb_cnt = np.bincount(routes[max(0, b - w_count) : b], minlength=size)
        e, r = _errors(cb.estimate(top), cb_cnt[top])
        errs["ch"].append(e)
        errs["rch"].append(r)
    cat = {k_: np.concatenate(v) if v else np.zeros(0) for k_, v in errs.items()}

    def _mean(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else math.nan

    return {
        "mae_high": _mean(cat["h"]),
        "mre_high": _mean(cat["rh"]),
        "mae_low": _mean(cat["l"]),
        "mre_low": _mean(cat["rl"]),
        "mean_window_items": mean_items,
        "n_queries": float(len(times)),
        "cb_mae_high": _mean(cat["ch"]),
        "cb_mre_high": _mean(cat["rch"]),
    }


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------


def _data_params(config: DPSWConfig, flights_kind: str | None, words: bool) -> list[dict]:
    out = []
    for ds in config.datasets:
        if ds == "flights":
            if flights_kind is None:
                continue
            n = len(_flights(flights_kind, config.flights_rows)[0])
            out.append({"dataset": f"flights-{flights_kind}", "n": n, "rows": config.flights_rows})
        elif ds == "words" and not words:
            continue
        else:
            out.append({"dataset": ds, "n": config.n, "rows": None})
    return out


_DEFAULTS = {"eps": 1.0, "depth": REF_DEPTH, "lam": None, "substreams": 10, "levels": 3, "hh": True}


def _cell(ds: dict, config: DPSWConfig, method: str, **kw: Any) -> dict[str, Any]:
    p = {
        **ds,
        "w": config.window,
        "queries": config.queries,
        "low_floor": config.low_floor,
        "hh_queries": config.hh_queries,
        "method": method,
        **_DEFAULTS,
        "width": config.width,
        **kw,
    }
    if method == "pccmg":
        p.update(depth=None, width=None, lam=p["lam"] or config.pccmg_lam)
    return p


def build_experiments(
    config: DPSWConfig, flights_kind: str | None, words: bool
) -> dict[str, Experiment]:
    """The grids: eps sweep (R1-R9, R12), window (R10), size (R11), App. C (R13-R15), time."""
    data = _data_params(config, flights_kind, words)
    eps_grid = [
        _cell(ds, config, m, eps=e) for ds in data for m in PRIVATE for e in config.epsilons
    ] + [_cell(ds, config, "exact_cms") for ds in data]
    win_grid = [
        _cell(ds, config, m, w=w, hh=m == "dpsw")
        for ds in data
        for m in METHODS
        for w in config.windows
    ]
    size_grid = [
        _cell(
            ds,
            config,
            m,
            size_kb=s,
            hh=False,
            **size_params(m, s, config.window, config.pccmg_lams),
        )
        for ds in data
        for m in METHODS
        for s in config.sizes_kb
    ]
    total = config.pcms_counters * _live_pcms(10, 3)

    def fixed_total(sub: int, lev: int) -> int:
        return max(1, round(total / (REF_DEPTH * _live_pcms(sub, lev))))

    param_grid = (
        [
            _cell(
                ds, config, "dpsw", sweep="levels", levels=lv, width=fixed_total(10, lv), hh=False
            )
            for ds in data
            for lv in config.levels
        ]
        + [
            _cell(
                ds,
                config,
                "dpsw",
                sweep="substreams",
                substreams=s,
                width=fixed_total(s, 3),
                hh=False,
            )
            for ds in data
            for s in config.substreams
        ]
        + [
            _cell(
                ds,
                config,
                "dpsw",
                sweep="depth",
                depth=a,
                width=config.pcms_counters // a,
                hh=False,
            )
            for ds in data
            for a in config.depths
        ]
    )
    time_grid = []
    if flights_kind is not None:
        time_grid = [
            {
                "kind": flights_kind,
                "rows": config.flights_rows,
                "w": w,
                "eps": 1.0,
                "depth": REF_DEPTH,
                "width": config.width,
                "queries": config.queries,
                "low_floor": config.low_floor,
            }
            for w in config.time_windows
        ]
    common = {"trials": config.trials, "version": EXPERIMENT_VERSION}
    exps = {
        "dpsw-eps": Experiment(
            "dpsw-eps",
            stream_cell,
            eps_grid,
            METRICS,
            **common,
            description="R1-R9, R12: eps sweep at the default window",
        ),
        "dpsw-window": Experiment(
            "dpsw-window",
            stream_cell,
            win_grid,
            METRICS,
            **common,
            description="R10: window sweep at eps = 1",
        ),
        "dpsw-size": Experiment(
            "dpsw-size",
            stream_cell,
            size_grid,
            METRICS,
            **common,
            description="R11: sketch size sweep at eps = 1",
        ),
        "dpsw-params": Experiment(
            "dpsw-params",
            stream_cell,
            param_grid,
            METRICS,
            **common,
            description="R13-R15: |I|, substreams, depth at eps = 1",
        ),
    }
    if time_grid:
        exps["dpsw-time"] = Experiment(
            "dpsw-time",
            time_cell,
            time_grid,
            TIME_METRICS,
            **common,
            description="flights, time-based windows (minutes)",
        )
    return exps
