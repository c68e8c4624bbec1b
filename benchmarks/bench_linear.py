"""DP linear sketches against PipelineDP and DP Misra-Gries: accuracy and throughput.

Two parts, one results table (rows with ``benchmark, impl, dataset, epsilon, metric, value,
seconds``):

(a) **Quantiles** on the US flights 2001 ``delay`` column (minutes, public domain
    ``[-1024, 3071]``): our ``DPQuantiles`` (private dyadic Count Sketch) against PipelineDP's
    ``PERCENTILE`` metric (QuantileTree, Laplace noise), both ``epsilon``-DP with one element
    per privacy unit, at the percentiles 10, 25, 50, 75, 90 and 99. Accuracy is the normalised
    rank error ``dist(q, [R_<(v)/N, R_<=(v)/N])`` of each released value ``v`` (tie aware: a
    value whose rank interval contains ``q`` is exact), averaged over percentiles and trials, on
    the core release (ours) and on PipelineDP's ``LocalBackend``; throughput is one Beam
    pipeline each (FnApiRunner, in process) reading the same Parquet file.
(b) **Frequencies** at equal memory (``C`` counters: Count-Min/Count Sketch ``d x w = C``,
    Misra-Gries ``k = C``, which also stores ``C`` keys) and equal ``(epsilon, delta)``: DP
    Count-Min and DP Count Sketch (discrete Gaussian at ``rho = approx_to_zcdp(eps, delta)``,
    add/remove) against PMG (sequential DP Misra-Gries) and Design B (APPROX_PP over 4 shards),
    on flights routes and Zipf(1.1). Mean absolute error on the true top-100 keys and on 1,000
    random distinct keys (keys a release omits count 0).
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reproduction import datasets

DELAY_DOMAIN = (-1024, 3071)
PERCENTILES = (10, 25, 50, 75, 90, 99)
DELTA = 1e-6
COUNTERS, DEPTH = 2000, 5
TOP = 100
RANDOM_KEYS = 1000
SHARDS = 4


# ------------------------------------------------------------------------------------------------
# PipelineDP percentile adapter
# ------------------------------------------------------------------------------------------------


def _pipelinedp_percentile_params(percentiles: Sequence[float], lower: float, upper: float) -> Any:
    import pipeline_dp

    return pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.PERCENTILE(p) for p in percentiles],
        max_partitions_contributed=1,
        max_contributions_per_partition=1,
        min_value=lower,
        max_value=upper,
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        # One element = one privacy unit: the bounds hold by construction.
        contribution_bounds_already_enforced=True,
    )


def pipelinedp_percentiles(
    values: Sequence[float],
    percentiles: Sequence[float],
    epsilon: float,
    lower: float,
    upper: float,
) -> dict[float, float]:
    """PipelineDP's DP percentiles of ``values`` (one public partition, ``LocalBackend``).

    Parameters
    ----------
    values
        The data, one element (privacy unit) per value.
    percentiles
        Percentiles in ``[0, 100]``.
    epsilon
        Total budget (pure DP, Laplace noise; ``delta = 0``).
    lower, upper
        Public bounds (``min_value``, ``max_value``).

    Returns
    -------
    dict
        ``{percentile: released value}``.
    """
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=0)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    extractors = pipeline_dp.DataExtractors(
        partition_extractor=lambda _: 0, value_extractor=lambda v: v
    )
    result = engine.aggregate(
        list(values),
        _pipelinedp_percentile_params(percentiles, lower, upper),
        extractors,
        public_partitions=[0],
    )
    accountant.compute_budgets()
    ((_, metrics),) = list(result)
    names = [name for name in metrics._fields if name.startswith("percentile_")]
    return {p: float(getattr(metrics, n)) for p, n in zip(percentiles, names, strict=True)}


def rank_error(sorted_values: np.ndarray, value: float, q: float) -> float:
    """Tie-aware normalised rank error: distance of ``q`` to ``[R_<(v)/N, R_<=(v)/N]``."""
    n = len(sorted_values)
    lo = np.searchsorted(sorted_values, value, side="left") / n
    hi = np.searchsorted(sorted_values, value, side="right") / n
    return float(max(lo - q, q - hi, 0.0))


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def _flights(quick: bool) -> tuple[Any, str]:
    if not quick:
        try:
            datasets.fetch_flights()
            return datasets.flights_columns(datasets.load_flights()), "flights 3M"
        except datasets.DatasetUnavailableError as exc:
            print(f"  full flights unavailable ({exc}); using the sample", file=sys.stderr)
    return datasets.flights_columns(datasets.load_flights(sample=True)), "flights 300k sample"


# ------------------------------------------------------------------------------------------------
# (a) quantiles
# ------------------------------------------------------------------------------------------------


def _ours_quantiles(values: np.ndarray, epsilon: float, stream: Any) -> np.ndarray:
    """``DPQuantiles``' own release (its default tree) on the exact sketch of ``values``."""
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
    from beam_dpsketch.transforms import DPQuantiles

    budget = PrivacyBudget.pure(epsilon)
    mechanism = DPQuantiles([p / 100 for p in PERCENTILES], *DELAY_DOMAIN, budget).mechanism
    sketch = DyadicCountSketch(*mechanism.layout, clamp=True, **mechanism.tree).update(values)
    return np.array([r.value for r in mechanism.release(sketch, budget, stream)])


_SINK: dict[str, list] = {}


def _store(label: str):
    def store(values: list) -> None:
        from benchmarks import bench_linear

        bench_linear._SINK[label] = list(values)

    return store


def _beam_ours(path: str, epsilon: float) -> None:
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPQuantiles, ReadKeyBatches
    from beam_dpsketch.transforms.quantiles import QuantileTree

    t = DPQuantiles(
        [p / 100 for p in PERCENTILES],
        *DELAY_DOMAIN,
        PrivacyBudget.pure(epsilon),
        tree=QuantileTree(width=1024, depth=5),
        clamp=True,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | ReadKeyBatches(path, column="delay")
            | t
            | beam.combiners.ToList()
            | beam.Map(_store("ours"))
        )


def _beam_pipelinedp(path: str, epsilon: float) -> None:
    import apache_beam as beam
    import pipeline_dp
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=0)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | beam.io.ReadFromParquet(path, columns=["delay"])
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        extractors = pipeline_dp.DataExtractors(
            partition_extractor=lambda _: 0, value_extractor=lambda row: row["delay"]
        )
        out = engine.aggregate(
            rows,
            _pipelinedp_percentile_params(PERCENTILES, *DELAY_DOMAIN),
            extractors,
            public_partitions=[0],
        )
        accountant.compute_budgets()
        _ = out | beam.combiners.ToList() | beam.Map(_store("pipelinedp"))


def bench_quantiles(quick: bool) -> list[dict]:
    """Part (a): rank error and Beam throughput, ours vs PipelineDP PERCENTILE."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_dpsketch.noise import NoiseSource

    cols, label = _flights(quick)
    values = np.clip(cols.delay.astype(np.int64), *DELAY_DOMAIN)
    ordered = np.sort(values)
    trials = 3 if quick else 10
    rows: list[dict] = []
    source = NoiseSource()
    for eps in (0.1, 1.0):
        for impl in ("beam-dpsketch DPQuantiles (DP-DCS)", "PipelineDP 0.3.1 PERCENTILE"):
            errs, secs = [], 0.0
            for t in range(trials):
                start = time.perf_counter()
                if impl.startswith("beam"):
                    out = _ours_quantiles(values, eps, source.stream(f"bench-q/{eps}/{t}"))
                else:
                    res = pipelinedp_percentiles(values.tolist(), PERCENTILES, eps, *DELAY_DOMAIN)
                    out = np.array([res[p] for p in PERCENTILES])
                secs += time.perf_counter() - start
                errs.extend(
                    rank_error(ordered, v, p / 100) for v, p in zip(out, PERCENTILES, strict=True)
                )
            rows.append(
                {
                    "benchmark": "quantiles: rank error",
                    "impl": impl,
                    "dataset": label,
                    "epsilon": eps,
                    "metric": f"mean rank error (fraction of N), {trials} trials",
                    "value": float(np.mean(errs)),
                    "seconds": secs / trials,
                }
            )
            print(f"  {impl:<36} eps={eps:<4} rank err {np.mean(errs):.5f}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "delay.parquet")
        pq.write_table(pa.table({"delay": values}), path, row_group_size=1 << 18)
        for impl, fn in (
            ("beam-dpsketch DPQuantiles (DP-DCS)", _beam_ours),
            ("PipelineDP 0.3.1 PERCENTILE on BeamBackend", _beam_pipelinedp),
        ):
            start = time.perf_counter()
            fn(path, 1.0)
            secs = time.perf_counter() - start
            rows.append(
                {
                    "benchmark": "quantiles: Beam throughput (FnApiRunner)",
                    "impl": impl,
                    "dataset": label,
                    "epsilon": 1.0,
                    "metric": "items/s",
                    "value": len(values) / secs,
                    "seconds": secs,
                }
            )
            print(f"  {impl:<44} {len(values) / secs / 1e3:9.1f} k items/s", file=sys.stderr)
    return rows


# ------------------------------------------------------------------------------------------------
# (b) frequencies at equal memory
# ------------------------------------------------------------------------------------------------


def _release_keys(rel: Any) -> tuple[np.ndarray, np.ndarray]:
    if not rel.items:
        return np.zeros(0, np.int64), np.zeros(0)
    keys, vals = zip(*rel.items, strict=True)
    return np.asarray(keys, dtype=np.int64), np.asarray(vals, dtype=np.float64)


def _lookup(keys: np.ndarray, vals: np.ndarray, query: np.ndarray) -> np.ndarray:
    order = np.argsort(keys)
    k, v = keys[order], vals[order]
    pos = np.clip(np.searchsorted(k, query), 0, max(len(k) - 1, 0))
    hit = (len(k) > 0) & (k[pos] == query) if len(k) else np.zeros(len(query), bool)
    return np.where(hit, v[pos] if len(k) else 0.0, 0.0)


def _frequency_estimators(keys: np.ndarray, eps: float, source: Any, tag: Any) -> dict:
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries
    from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch
    from beam_dpsketch.sketches.misra_gries import PostProcessedSum, approx_pp, pmg

    width = COUNTERS // DEPTH
    budget = PrivacyBudget.approx(eps, DELTA)
    out: dict[str, tuple[Any, float]] = {}
    start = time.perf_counter()
    cm = CountMinSketch(width, DEPTH, 1).update(keys)
    rel = PrivateCountMinSketch.release(cm, budget, source.stream((tag, "cm")))
    out["DP Count-Min"] = (rel.estimate, time.perf_counter() - start)
    start = time.perf_counter()
    cs = CountSketch(width, DEPTH, 1).update(keys)
    rel = PrivateCountSketch.release(cs, budget, source.stream((tag, "cs")))
    out["DP Count Sketch"] = (rel.estimate, time.perf_counter() - start)
    start = time.perf_counter()
    mg = MisraGries(COUNTERS).update(keys)
    k, v = _release_keys(pmg(mg, PrivacyBudget.approx(eps, DELTA), source.stream((tag, "pmg"))))
    out["DP Misra-Gries PMG"] = (lambda q, k=k, v=v: _lookup(k, v, q), time.perf_counter() - start)
    start = time.perf_counter()
    pps = PostProcessedSum(COUNTERS, max_shards=SHARDS)
    for part in np.array_split(keys, SHARDS):
        pps.add_sketch(MisraGries(COUNTERS).update(part))
    k, v = _release_keys(
        approx_pp(pps, PrivacyBudget.approx(eps, DELTA), source.stream((tag, "design_b")))
    )
    out["DP Misra-Gries Design B (4 shards)"] = (
        lambda q, k=k, v=v: _lookup(k, v, q),
        time.perf_counter() - start,
    )
    return out


def bench_frequencies(quick: bool) -> list[dict]:
    """Part (b): MAE on the true top-100 and on random keys, equal counters and budget."""
    from beam_dpsketch.noise import NoiseSource

    cols, label = _flights(quick)
    n_zipf = 1_000_000 if quick else 10_000_000
    data = {
        label + " routes": cols.route.astype(np.int64),
        f"Zipf(1.1), N={n_zipf:,}, 10^5 items": datasets.zipf_stream(n_zipf, 1.1, 100_000, 3),
    }
    trials = 3 if quick else 10
    source = NoiseSource()
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    for ds, keys in data.items():
        items, f = datasets.exact_counts(keys)
        top = items[np.argsort(-f, kind="stable")[:TOP]]
        rand = rng.choice(items, size=min(RANDOM_KEYS, len(items)), replace=False)
        f_of = dict(zip(items.tolist(), f.tolist(), strict=True))
        truth = {
            name: np.array([f_of[x] for x in q], dtype=np.float64)
            for name, q in (("top", top), ("random", rand))
        }
        for eps in (0.1, 1.0):
            acc: dict[str, dict[str, list[float]]] = {}
            for t in range(trials):
                tag = f"bench-f/{ds}/{eps}/{t}"
                for impl, (est, secs) in _frequency_estimators(keys, eps, source, tag).items():
                    a = acc.setdefault(impl, {"top": [], "random": [], "s": []})
                    a["s"].append(secs)
                    for name, q in (("top", top), ("random", rand)):
                        e = np.asarray(est(q), dtype=np.float64)
                        a[name].append(float(np.mean(np.abs(e - truth[name]))))
            for impl, a in acc.items():
                for name, text in (
                    ("top", f"MAE true top-{TOP}"),
                    ("random", f"MAE {len(rand)} random keys"),
                ):
                    rows.append(
                        {
                            "benchmark": f"frequencies: {COUNTERS} counters, delta={DELTA:g}",
                            "impl": impl,
                            "dataset": ds,
                            "epsilon": eps,
                            "metric": text,
                            "value": float(np.mean(a[name])),
                            "seconds": float(np.mean(a["s"])),
                        }
                    )
                print(
                    f"  {impl:<36} {ds[:24]:<24} eps={eps:<4} top {np.mean(a['top']):9.1f} "
                    f"random {np.mean(a['random']):9.1f}",
                    file=sys.stderr,
                )
    return rows


def run(quick: bool) -> list[dict]:
    """Both parts; rows with ``benchmark, impl, dataset, epsilon, metric, value, seconds``."""
    return bench_quantiles(quick) + bench_frequencies(quick)
