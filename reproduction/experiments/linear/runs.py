"""DP linear sketches (Zhao et al., NeurIPS 2022): the claims C1-C9 of [ZQR+22, Sections 5.3-5.4].

The paper's experiments ([ZQR+22, Section 5.1; Section 5.2]) release Count-Min (DP-CM), Count Sketch (DP-CS) and the
Dyadic Count Sketch (DP-DCS) under ``rho``-zCDP, ``rho in {0.1, 1, 10}``, and compare them with
the non-private sketches built with the same hash functions:

* **Figure 1** (frequencies): ARE over every distinct item and top-10 F1 against the space
  budget, ``N = 10**5``;
* **Figure 2** (quantiles): average rank error at ``m`` evenly spaced keys against ``m``.

The notebook behind the figures swapped the arguments of its sketches (docs/algorithms.md#lin-e5), used a buggy
Count-Min offset (docs/algorithms.md#lin-e6) and a depth-3 DCS (docs/algorithms.md#lin-e7), so docs/algorithms.md#lin-e5 distinguishes the parameters **as run**
(what produced the published numbers) from those **as described** in the text. Both presets run
here, and every claim gets a verdict per preset:

* ``as_run``: ``w = 100``, ``beta' = 2**-k``, ``d = ceil(k ln 2)``, ``sigma = sqrt(ln(2/beta')/rho)``
  (``paper_compat``), Count-Min offset ``E_code`` (docs/algorithms.md#lin-e6); DCS with ``d = 3``, ``w = 882`` (``U = 2**16``)
  or ``1308`` (``U = 2**32``), noise ``sigma_level = sqrt(L ln 16 / rho)``, no exact levels.
* ``as_described``: ``w = 2**k``, ``beta = 0.01``, ``d = ceil(ln 200) = 6``, the paper's ``sigma`` and
  correct ``E`` (``paper_compat``); DCS with the paper's ``(w, d)`` (:func:`dyadic_shape`) and
  ``sigma_level = sqrt(L d / rho)`` (the paper's ``sqrt(2d)`` sensitivity), no exact levels.

The per-level DCS noise is set through the budget handed to :class:`PrivateDyadicCountSketch`
(``add_remove``, so a sketched level has ``Delta_2 = sqrt(d)``): ``rho' = d L / (2 sigma**2)``
gives exactly the paper's ``sigma_level``. These are reproduction settings, not the library's
calibration (which the transforms use).

C10 (derived here, not in the paper) compares DP Count-Median, the Count-Min table queried with
the median (docs/algorithms.md#lin-count-median), with DP Count-Min and DP Count Sketch at equal
budget and shape, on the bounded Zipf stream and on a general turnstile stream
(:func:`count_median_cell`).

Data ([ZQR+22, Section 5.1]): bounded Zipf ``P(x) ~ 1/x`` on ``{1..2**16 - 1}``; the CAIDA trace needs a
data-use agreement, so its (extension, not in the paper) substitute runs instead: Zipf(1) over ranks ``1..2**20``
mapped to distinct pseudo-random uint32 ids (``U = 2**32``; qualitative checks only); and the US
flights 2001 data (routes for frequencies, ``delay`` in minutes for quantiles, public domain
``[-1024, 3071]``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMedianSketch, CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
)
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch, dyadic_shape
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from reproduction import datasets, metrics
from reproduction.experiments.linear.merge import MERGE_METRICS, merge_cell
from reproduction.experiments.linear.top_keys import TOPK_METRICS, top_keys_cell
from reproduction.experiments.sketches import flights_routes
from reproduction.runner import (
    Experiment,
)
from reproduction.tables import param_tag

__all__ = [
    "CMED_DATA",
    "CMED_METRICS",
    "FREQ_METRICS",
    "MODES",
    "N_METRICS",
    "PRESETS",
    "QUANT_METRICS",
    "RHOS",
    "LinearConfig",
    "count_median_cell",
    "e_code",
    "freq_cell",
    "independence_cell",
    "quantile_cell",
]

EXPERIMENT_VERSION = "1"
RHOS: tuple[float, ...] = (0.1, 1.0, 10.0)
PRESETS: tuple[str, ...] = ("as_run", "as_described")
BETA = 0.01
GAMMA_Q = 0.01  # quantile accuracy parameter of Figure 2
TOP_K = 10
FLIGHTS_DELAY_DOMAIN = (-1024, 3071)  # public bounds, U = 2**12 minutes
SUBSTITUTE_RANKS = 2**20
rho_tag = functools.partial(param_tag, "r")  # column-name fragment of a rho: r01
_SUB_A, _SUB_B = 0x9E3779B1, 0x7F4A7C15  # odd multiplier: a bijection of uint32


FREQ_METRICS: tuple[str, ...] = (
    "distinct",
    "width",
    "depth",
    "nominal_kb",
    "real_bytes",
    "cm_are",
    "cs_are",
    "cm_f1",
    "cs_f1",
    *[f"dp{s}_{m}_{rho_tag(r)}" for s in ("cm", "cs") for m in ("are", "f1") for r in RHOS],
    *[f"dpcs_c1slack_{rho_tag(r)}" for r in RHOS],
)
"""Frequency cell metrics: ARE over ``Psi`` and top-10 F1 of CM, CS, DP-CM and DP-CS per rho;
``dpcs_c1slack`` is ``ARE(CS) + max|Z| mean(1/f) - ARE(DP-CS)`` (C1's exact check, >= 0)."""

QUANT_METRICS: tuple[str, ...] = (
    "n_values",
    "levels",
    "width",
    "depth",
    "gamma_n",
    "dcs_err",
    *[f"dp_err_{rho_tag(r)}" for r in RHOS],
    *[f"sigma_{rho_tag(r)}" for r in RHOS],
)
"""Quantile cell metrics: average rank error of DCS and DP-DCS per rho at ``m`` keys."""

N_METRICS: tuple[str, ...] = (
    "cm_gap",
    "cs_gap_spec",
    "cs_extra",
    "dcs_extra",
)
"""C9 cell metrics: DP-CM ``mean(f^ - f~)``, DP-CS ``mean|f^-f| - mean|f~-f|`` (docs/algorithms.md#lin-oracles) and
``mean|f^ - f~|``, DP-DCS ``mean|R^ - R~|`` at 128 quantile keys."""

CMED_DATA: tuple[str, ...] = ("zipf", "turnstile")
"""Streams of the Count-Median comparison: the paper's bounded Zipf, and a general turnstile
stream (the same Zipf insertions, deletions of half as many Zipf draws with permuted ranks)."""
CMED_CONFIDENCE = 0.95
CMED_METRICS: tuple[str, ...] = (
    "n_items",
    "neg_fraction",
    "cmed_apriori_cover",
    *[
        f"dp{s}_{m}_{rho_tag(r)}"
        for s in ("cm", "cs", "cmed")
        for m in ("mae", "cover", "width")
        for r in RHOS
    ],
)
"""Count-Median cell metrics (derived here, not in [ZQR+22]): mean absolute error over every
distinct item, coverage and half-width of the 95 % ``error_bound`` of DP Count-Min (no offset),
DP Count Sketch and DP Count-Median per rho, and the coverage of the exact Count-Median's
a-priori bound."""


@dataclass(frozen=True)
class LinearConfig:
    """Scale of one run of the linear-sketches report.

    Parameters
    ----------
    mode
        ``smoke`` (seconds), ``quick`` (the paper's grid on the bundled flights sample) or
        ``full`` (more trials and the 3 M-row flights file).
    n
        Synthetic stream length (the paper's ``N = 10**5``).
    ks
        Exponents ``k`` of ``gamma = 2**-k`` (the space axis of Figure 1).
    ms
        Numbers of quantile keys (the x axis of Figure 2).
    trials
        Independent runs per cell (the paper averages 5).
    ns
        Stream lengths of the C9 sweep.
    n_k
        ``k`` of the C9 sweep (as described: ``w = 2**k``, ``d = 6``).
    flights
        ``"sample"``, ``"full"`` or ``"none"``.
    flights_rows
        Use only the first rows of the flights data (None: all).
    """

    mode: str
    n: int
    ks: tuple[int, ...]
    ms: tuple[int, ...]
    trials: int
    ns: tuple[int, ...]
    n_k: int
    flights: str
    flights_rows: int | None = None


MODES: dict[str, LinearConfig] = {
    "smoke": LinearConfig(
        mode="smoke",
        n=20_000,
        ks=(9, 11, 13),
        ms=(32, 128, 512),
        trials=1,
        ns=(5_000, 20_000, 80_000),
        n_k=10,
        flights="sample",
        flights_rows=40_000,
    ),
    "quick": LinearConfig(
        mode="quick",
        n=100_000,
        ks=(9, 10, 11, 12, 13),
        ms=(32, 64, 128, 256, 512, 1024),
        trials=5,
        ns=(10_000, 100_000, 1_000_000),
        n_k=10,
        flights="sample",
    ),
    "full": LinearConfig(
        mode="full",
        n=100_000,
        ks=(9, 10, 11, 12, 13),
        ms=(32, 64, 128, 256, 512, 1024),
        trials=10,
        ns=(10_000, 30_000, 100_000, 300_000, 1_000_000),
        n_k=10,
        flights="full",
    ),
}
"""Presets. ``quick`` is the paper's grid (N = 10**5, 5 runs); ``full`` doubles the runs, adds
C9 stream lengths and uses the 3 M-row flights file."""

# Notebook printouts behind the figures ([ZQR+22, Sections 5.3-5.4], as run) and a reference as-described
# re-simulation (docs/evaluation.md#linear-report), Zipf only; indexed by k = 9..13 or m = 32..1024.
PAPER_FIG1_ARE_AS_RUN = {
    "cm": (374.35, 374.38, 369.23, 364.54, 359.28),
    "cs": (50.31, 50.27, 46.64, 44.80, 40.82),
    "dpcm_r01": (942.21, 1221.09, 1626.83, 2224.65, 3100.27),
    "dpcm_r1": (553.85, 642.23, 766.96, 952.92, 1226.37),
    "dpcm_r10": (431.15, 459.06, 495.04, 550.60, 633.44),
    "dpcs_r01": (50.43, 50.56, 46.88, 44.96, 41.03),
    "dpcs_r1": (50.27, 50.29, 46.61, 44.84, 40.89),
    "dpcs_r10": (50.33, 50.26, 46.64, 44.81, 40.83),
}
SIM_FIG1_ARE_AS_DESCRIBED = {
    "cm": (53.96, 22.18, 8.55, 2.94, 0.81),
    "cs": (13.13, 6.59, 3.40, 1.80, 0.92),
    "dpcm_r01": (82.15, 50.36, 36.54, 30.41, 27.92),
    "dpcm_r1": (63.06, 31.42, 17.85, 12.21, 9.96),
    "dpcm_r10": (56.85, 25.14, 11.56, 5.98, 3.86),
    "dpcs_r01": (13.43, 7.24, 4.38, 3.12, 2.54),
    "dpcs_r1": (13.16, 6.67, 3.53, 2.01, 1.26),
    "dpcs_r10": (13.13, 6.60, 3.42, 1.83, 0.98),
}
PAPER_KS = (9, 10, 11, 12, 13)
PAPER_FIG2_AS_RUN = {
    "zipf": {
        "dcs": (30.88, 30.68, 33.86, 31.75, 33.57, 31.23),
        "dp_r01": (44.78, 41.69, 42.00, 44.70, 44.67, 43.07),
        "dp_r1": (32.50, 31.89, 35.58, 33.94, 35.18, 32.01),
        "dp_r10": (31.19, 30.76, 33.63, 31.78, 33.79, 31.40),
    },
    "u32": {
        "dcs": (70.77, 75.76, 67.24, 67.58, 66.76, 65.89),
        "dp_r01": (99.70, 112.45, 98.37, 100.46, 101.43, 101.54),
        "dp_r1": (71.79, 80.34, 70.93, 72.62, 70.87, 68.92),
        "dp_r10": (72.52, 76.41, 67.09, 68.45, 67.34, 66.27),
    },
}
PAPER_MS = (32, 64, 128, 256, 512, 1024)
SIM_FIG2_AS_DESCRIBED = {"dcs": (16, 19), "dp_r10": (17, 20), "dp_r1": (20, 23), "dp_r01": (34, 36)}

DATASET_LABELS = {
    "zipf": "Zipf(1), U=2^16",
    "u32": "CAIDA substitute: Zipf(1) on 2^20 ids in U=2^32",
    "flights": "US flights 2001",
}


# ------------------------------------------------------------------------------------------------
# Data and parameters
# ------------------------------------------------------------------------------------------------


def _flights(kind: str, rows: int | None, column: str) -> np.ndarray:
    if column == "route":
        return flights_routes(kind, rows)
    table = datasets.load_flights(sample=True) if kind == "sample" else datasets.load_flights()
    values = datasets.flights_columns(table).delay.astype(np.int64)
    return values if rows is None else values[:rows]


def _data(params: Mapping[str, Any], seed: int, column: str = "route") -> np.ndarray:
    """The cell's stream: bounded Zipf, the U = 2**32 substitute, or a flights column."""
    dataset, n = params["dataset"], int(params["n"])
    if dataset == "zipf":
        return datasets.bounded_zipf_stream(n, seed)
    if dataset == "u32":
        ranks = datasets.zipf_stream(n, 1.0, SUBSTITUTE_RANKS, seed).astype(np.uint64)
        return ((ranks * np.uint64(_SUB_A) + np.uint64(_SUB_B)) & np.uint64(0xFFFFFFFF)).astype(
            np.int64
        )
    if dataset.startswith("flights-"):
        return _flights(dataset.removeprefix("flights-"), params.get("rows"), column)
    raise ValueError(f"unknown dataset {dataset!r}")


def e_code(rho: float, beta: float, gamma: float) -> float:
    """The reference code's Count-Min offset (docs/algorithms.md#lin-e6; docs/algorithms.md#lin-strict ``reference_code_as_run``).

    ``E_code = sqrt(2 ln(2/beta)/rho) * sqrt(ln(4 ln(2/beta)/gamma) / beta)``, e.g. 750.12 at
    ``k = 9`` (``beta = 2**-9``), ``gamma = 0.01``, ``rho = 0.1``.
    """
    lb = math.log(2.0 / beta)
    return math.sqrt(2 * lb / rho) * math.sqrt(math.log(4 * lb / gamma) / beta)


def linear_params(preset: str, k: int) -> dict[str, float]:
    """``width, depth, beta, gamma`` of a Figure-1 sketch for ``gamma = 2**-k`` (docs/algorithms.md#lin-e5)."""
    if preset == "as_run":  # the notebook's swapped arguments (docs/algorithms.md#lin-e5)
        beta, gamma = 2.0**-k, 0.01
        return {"width": 100, "depth": math.ceil(k * math.log(2)), "beta": beta, "gamma": gamma}
    if preset == "as_described":
        return {"width": 2**k, "depth": math.ceil(math.log(200)), "beta": BETA, "gamma": 2.0**-k}
    raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")


def dcs_params(preset: str, dataset: str) -> tuple[int, int, int, int]:
    """``(lower, upper, width, depth)`` of the Figure-2 DCS for a data set and preset."""
    if dataset == "u32":
        lower, upper = 0, 2**32 - 1
    elif dataset.startswith("flights"):
        lower, upper = FLIGHTS_DELAY_DOMAIN
    else:
        lower, upper = 0, 2**16 - 1
    width, depth = dyadic_shape(
        lower, upper, GAMMA_Q, "reference_code_as_run" if preset == "as_run" else "paper"
    )
    return lower, upper, width, depth


def dcs_sigma(preset: str, levels: int, depth: int, rho: float) -> float:
    """Per-level noise of the DP-DCS as run (``sqrt(L ln 16 / rho)``) or described (``sqrt(L d/rho)``)."""
    if preset == "as_run":
        return math.sqrt(levels * math.log(16) / rho)
    return math.sqrt(levels * depth / rho)


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


def freq_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Figure 1 for one (dataset, preset, k): CM, CS and their DP releases for every rho.

    Parameters
    ----------
    params
        ``dataset`` (``zipf``, ``u32``, ``flights-sample``, ``flights-full``), ``n``, ``rows``,
        ``preset`` and ``k``.
    seed
        Trial seed: data, hash seed (shared by the exact and DP sketches) and noise.

    Returns
    -------
    dict
        :data:`FREQ_METRICS`.
    """
    keys = _data(params, seed)
    items, f = datasets.exact_counts(keys)
    ff = f.astype(np.float64)
    p = linear_params(params["preset"], int(params["k"]))
    w, d = int(p["width"]), int(p["depth"])
    hseed = seed % 2**32
    cm, cs = CountMinSketch(w, d, hseed), CountSketch(w, d, hseed)
    cm.update(keys)
    cs.update(keys)
    cm_est = cm.estimate(items).astype(np.float64)
    cs_est = cs.estimate(items).astype(np.float64)
    out: dict[str, float] = {
        "distinct": len(items),
        "width": w,
        "depth": d,
        # the paper's nominal axis: ln(1/beta)/gamma * 4 bytes / 1024 (docs/algorithms.md#lin-e14)
        "nominal_kb": math.log(1 / p["beta"]) / p["gamma"] * 4 / 1024,
        "real_bytes": 8 * w * d,
        "cm_are": metrics.are(ff, cm_est),
        "cs_are": metrics.are(ff, cs_est),
        "cm_f1": metrics.top_k_f1(items, ff, cm_est, TOP_K),
        "cs_f1": metrics.top_k_f1(items, ff, cs_est, TOP_K),
    }
    inv_f = float(np.mean(1.0 / ff))
    noise = NoiseSource.insecure_for_tests(seed)  # reproduction only: seeded noise
    rid = f"linear-freq/{params['dataset']}/{params['preset']}/{params['k']}"
    for rho in RHOS:
        budget = PrivacyBudget.zcdp(rho)
        kw = {"neighbouring": "replace", "beta": p["beta"], "paper_compat": True}
        dcm = PrivateCountMinSketch.release(
            cm, budget, noise.stream(f"{rid}/cm/{rho}"), gamma=p["gamma"], **kw
        )
        est = dcm.estimate(items).astype(np.float64)
        if (
            params["preset"] == "as_run"
        ):  # swap the printed offset for the code's (docs/algorithms.md#lin-e6)
            est += e_code(rho, p["beta"], p["gamma"]) - dcm.offset
        out[f"dpcm_are_{rho_tag(rho)}"] = metrics.are(ff, est)
        out[f"dpcm_f1_{rho_tag(rho)}"] = metrics.top_k_f1(items, ff, est, TOP_K)
        dcs = PrivateCountSketch.release(
            cs, budget, noise.stream(f"{rid}/cs/{rho}"), gamma=p["gamma"], **kw
        )
        est = dcs.estimate(items).astype(np.float64)
        are = metrics.are(ff, est)
        max_z = float(np.max(np.abs(dcs.table - cs.table)))
        out[f"dpcs_are_{rho_tag(rho)}"] = are
        out[f"dpcs_f1_{rho_tag(rho)}"] = metrics.top_k_f1(items, ff, est, TOP_K)
        out[f"dpcs_c1slack_{rho_tag(rho)}"] = out["cs_are"] + max_z * inv_f - are
    return out


def _release_dcs(
    sketch: DyadicCountSketch, preset: str, rho: float, stream: Any
) -> tuple[PrivateDyadicCountSketch, float]:
    sigma = dcs_sigma(preset, sketch.levels, sketch.depth, rho)
    # add_remove: a sketched level has Delta_2 = sqrt(d); rho' = d L / (2 sigma^2) gives sigma.
    rho_arg = sketch.depth * sketch.levels / (2 * sigma**2)
    rel = PrivateDyadicCountSketch.release(sketch, PrivacyBudget.zcdp(rho_arg), stream)
    return rel, sigma


def quantile_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Figure 2 for one (dataset, preset, m): DCS and DP-DCS average rank error ([ZQR+22, Section 5.2]).

    Parameters
    ----------
    params
        ``dataset``, ``n``, ``rows``, ``preset`` and ``m`` (number of quantile keys).
    seed
        Trial seed (data, hashes, noise).

    Returns
    -------
    dict
        :data:`QUANT_METRICS`.
    """
    values = _data(params, seed, column="delay")
    lower, upper, w, d = dcs_params(params["preset"], params["dataset"])
    sketch = DyadicCountSketch(lower, upper, w, d, seed % 2**32, exact_levels=False, clamp=True)
    sketch.update(values)
    keys = datasets.quantile_points(values, int(params["m"]))
    truth = datasets.true_ranks(values, keys)
    out: dict[str, float] = {
        "n_values": len(values),
        "levels": sketch.levels,
        "width": w,
        "depth": d,
        "gamma_n": GAMMA_Q * len(values),
        "dcs_err": metrics.average_rank_error(truth, sketch.rank(keys)),
    }
    noise = NoiseSource.insecure_for_tests(seed)  # reproduction only: seeded noise
    rid = f"linear-quant/{params['dataset']}/{params['preset']}/{params['m']}"
    for rho in RHOS:
        rel, sigma = _release_dcs(sketch, params["preset"], rho, noise.stream(f"{rid}/{rho}"))
        out[f"dp_err_{rho_tag(rho)}"] = metrics.average_rank_error(truth, rel.rank(keys))
        out[f"sigma_{rho_tag(rho)}"] = sigma
    return out


def independence_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """C9: the error DP adds to the same-hash sketch, at one stream length ``n`` (docs/algorithms.md#lin-oracles).

    Parameters
    ----------
    params
        ``length`` (N), ``k`` (``w = 2**k``, ``d = 6``, as described), ``rho``.
    seed
        Trial seed.

    Returns
    -------
    dict
        :data:`N_METRICS`.
    """
    keys = datasets.bounded_zipf_stream(int(params["length"]), seed)
    items, f = datasets.exact_counts(keys)
    ff = f.astype(np.float64)
    p = linear_params("as_described", int(params["k"]))
    w, d, rho = int(p["width"]), int(p["depth"]), float(params["rho"])
    budget = PrivacyBudget.zcdp(rho)
    kw = {"neighbouring": "replace", "beta": p["beta"], "paper_compat": True, "gamma": p["gamma"]}
    noise = NoiseSource.insecure_for_tests(seed)  # reproduction only: seeded noise
    rid = f"linear-n/{params['length']}/{params['k']}/{rho}"
    cm = CountMinSketch(w, d, seed % 2**32)
    cm.update(keys)
    dcm = PrivateCountMinSketch.release(cm, budget, noise.stream(f"{rid}/cm"), **kw)
    cs = CountSketch(w, d, seed % 2**32)
    cs.update(keys)
    dcs = PrivateCountSketch.release(cs, budget, noise.stream(f"{rid}/cs"), **kw)
    cs_est = cs.estimate(items).astype(np.float64)
    dcs_est = dcs.estimate(items).astype(np.float64)
    lower, upper, qw, qd = dcs_params("as_described", "zipf")
    dy = DyadicCountSketch(lower, upper, qw, qd, seed % 2**32, exact_levels=False)
    dy.update(keys)
    rel, _ = _release_dcs(dy, "as_described", rho, noise.stream(f"{rid}/dcs"))
    qkeys = datasets.quantile_points(keys, 128)
    return {
        "cm_gap": float(np.mean(dcm.estimate(items) - cm.estimate(items).astype(np.float64))),
        "cs_gap_spec": float(np.mean(np.abs(dcs_est - ff)) - np.mean(np.abs(cs_est - ff))),
        "cs_extra": float(np.mean(np.abs(dcs_est - cs_est))),
        "dcs_extra": float(np.mean(np.abs(rel.rank(qkeys) - dy.rank(qkeys)))),
    }


def count_median_cell(params: Mapping[str, Any], seed: int) -> dict[str, float]:
    """Count-Median against Count-Min and Count Sketch at equal budget and shape (derived here).

    Count-Median is not in [ZQR+22]: it is the Count-Min table queried with the median of its
    rows (Cormode and Muthukrishnan 2005), released as the paper releases Count Sketch (zero-mean
    noise) with Count-Min's sensitivity (docs/algorithms.md#lin-count-median). The three sketches
    share the shape as described (``w = 2**k``, ``d = 6``), the hash seed and the library's
    strict calibration of a ``rho``-zCDP budget under ``add_remove`` (the same noise in every
    cell), so the comparison isolates the estimator; Count-Min is released without the offset,
    as ``DPFrequencies`` does.

    Parameters
    ----------
    params
        ``data`` (one of :data:`CMED_DATA`), ``n`` (insertions) and ``k``.
    seed
        Trial seed (data, hashes, noise).

    Returns
    -------
    dict
        :data:`CMED_METRICS`.
    """
    keys = datasets.bounded_zipf_stream(int(params["n"]), seed)
    weights = np.ones(len(keys), dtype=np.int64)
    if params["data"] == "turnstile":
        high = 2**16 - 1
        # Deletions follow another ranking, so some keys end negative (general turnstile).
        dels = (datasets.bounded_zipf_stream(len(keys) // 2, seed + 1) * 7919) % high + 1
        keys = np.concatenate([keys, dels])
        weights = np.concatenate([weights, -np.ones(len(dels), dtype=np.int64)])
    items, inverse = np.unique(keys, return_inverse=True)
    f = np.bincount(inverse, weights=weights, minlength=len(items))
    p = linear_params("as_described", int(params["k"]))
    w, d, hseed = int(p["width"]), int(p["depth"]), seed % 2**32
    kinds = {
        "cm": (CountMinSketch, PrivateCountMinSketch),
        "cs": (CountSketch, PrivateCountSketch),
        "cmed": (CountMedianSketch, PrivateCountMedianSketch),
    }
    exact = {s: cls(w, d, hseed).update(keys, weights) for s, (cls, _) in kinds.items()}
    apriori = exact["cmed"].error_bound(CMED_CONFIDENCE, l1_norm=float(np.abs(f).sum()))
    out: dict[str, float] = {
        "n_items": len(items),
        "neg_fraction": float(np.mean(f < 0)),
        "cmed_apriori_cover": float(np.mean(np.abs(exact["cmed"].estimate(items) - f) <= apriori)),
    }
    noise = NoiseSource.insecure_for_tests(seed)  # reproduction only: seeded noise
    rid = f"linear-cmed/{params['data']}/{params['k']}"
    for rho in RHOS:
        budget = PrivacyBudget.zcdp(rho)
        for s, (_, private_cls) in kinds.items():
            rel = private_cls.release(
                exact[s], budget, noise.stream(f"{rid}/{s}/{rho}"), offset=False
            )
            err = np.abs(rel.estimate(items) - f)
            bound = rel.error_bound(CMED_CONFIDENCE)
            out[f"dp{s}_mae_{rho_tag(rho)}"] = float(np.mean(err))
            out[f"dp{s}_cover_{rho_tag(rho)}"] = float(np.mean(err <= bound))
            out[f"dp{s}_width_{rho_tag(rho)}"] = float(bound)
    return out


# ------------------------------------------------------------------------------------------------
# Grids
# ------------------------------------------------------------------------------------------------


def _datasets(config: LinearConfig, flights_kind: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"dataset": "zipf", "n": config.n, "rows": None},
        {"dataset": "u32", "n": config.n, "rows": None},
    ]
    if flights_kind:
        n = len(flights_routes(flights_kind, config.flights_rows))
        out.append({"dataset": f"flights-{flights_kind}", "n": n, "rows": config.flights_rows})
    return out


def build_experiments(config: LinearConfig, flights_kind: str | None) -> list[Experiment]:
    """The four grids: Figure 1 (frequencies), Figure 2 (quantiles), the C9 sweep and the
    Count-Median comparison (C10, derived here)."""
    data = _datasets(config, flights_kind)
    freq = [{**ds, "preset": pr, "k": k} for ds in data for pr in PRESETS for k in config.ks]
    quant = [{**ds, "preset": pr, "m": m} for ds in data for pr in PRESETS for m in config.ms]
    indep = [{"length": n, "k": config.n_k, "rho": rho} for n in config.ns for rho in RHOS]
    cmed = [{"data": data, "n": config.n, "k": config.n_k} for data in CMED_DATA]
    common = {"trials": config.trials, "version": EXPERIMENT_VERSION}
    return [
        Experiment(
            "linear-frequencies",
            freq_cell,
            freq,
            FREQ_METRICS,
            **common,
            description="Figure 1: ARE and top-10 F1 of CM/CS/DP-CM/DP-CS",
        ),
        Experiment(
            "linear-quantiles",
            quantile_cell,
            quant,
            QUANT_METRICS,
            **common,
            description="Figure 2: average rank error of DCS/DP-DCS",
        ),
        Experiment(
            "linear-independence",
            independence_cell,
            indep,
            N_METRICS,
            **common,
            description="C9: extra DP error against N",
        ),
        Experiment(
            "linear-count-median",
            count_median_cell,
            cmed,
            CMED_METRICS,
            **common,
            description="C10 (derived here): Count-Median against Count-Min and Count Sketch",
        ),
        Experiment(
            "linear-top-keys",
            top_keys_cell,
            [{"length": config.n}],
            TOPK_METRICS,
            **common,
            description="C11 (derived here): top keys with no candidate list",
        ),
        Experiment(
            "linear-merge",
            merge_cell,
            [{"n": config.n, "k": config.n_k}],
            MERGE_METRICS,
            **common,
            description="C12 (derived here): released sketches of k organisations summed",
        ),
    ]
