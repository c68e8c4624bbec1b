"""DP heavy hitters: our DP Misra-Gries releases next to PipelineDP, accuracy and throughput.

Goal: **better recall than PipelineDP at an equal (epsilon, delta) budget for
k <= 100 on skewed data, and at least 10x its end-to-end throughput.** :func:`run` measures both
and returns ``goal`` rows that state, from the measurements, whether each part is met.

(a) Accuracy. On each data set, every method releases once per (epsilon, trial) at
``delta = 1e-6`` and its top-k by noisy count is scored against the true top-k (precision,
recall, ARE with 0 for withheld keys; :func:`reproduction.experiments.misra_gries.runs.
score_top_k`), for epsilon in {0.1, 0.5, 1, 2} and k in {10, 50, 100}. Our methods share one
Misra-Gries sketch size, ``SKETCH_K = 2048`` counters (below the 3,399 distinct routes; memory
``O(k)`` whatever the data): PMG on one sequential sketch, Design B (APPROX_PP) and the merged
GSHM / Laplace releases on 4 contiguous segments, PURE_PP over the declared universe, and Chan
et al. (thresholded, noise ``k/eps``). PipelineDP 0.3.1 runs ``DPEngine.aggregate`` on its
``LocalBackend`` with ``Metrics.COUNT``, ``max_partitions_contributed = 1``,
``max_contributions_per_partition = 1``, Laplace noise and private partition selection
(``public_partitions=None``, the default truncated-geometric strategy); its
``NaiveBudgetAccountant`` gets the same total (epsilon, delta) and splits epsilon between the
count and the selection. Each element is its own privacy unit (element-level DP, the
neighbouring relation of our releases), so ``contribution_bounds_already_enforced=True`` is
exact and skips PipelineDP's per-unit grouping (its fastest valid configuration). PipelineDP
keeps an exact histogram in memory; our releases keep ``SKETCH_K`` counters.

Data: the 2001 US flights routes (flat head, 3,399 routes) and origin airports (228 airports,
skewed), bundled 300,000-row sample with ``quick`` and the 3 M-row file otherwise; and a
wordfreq-sampled English word stream (a real Zipf-like long tail, 10 M items; 1 M with
``quick``). "Skewed" in the goal means the airports and the words.

(b) Throughput. ``DPHeavyHitters`` (default Design B, and ``mechanism="sequential"``) reading
the route column of a Parquet file with ``ReadKeyBatches``, against PipelineDP's ``DPEngine`` on
its ``BeamBackend`` reading the same file with ``beam.io.ReadFromParquet``, both on the
in-process ``FnApiRunner``, eps = 1, top 100. The file holds the 3 M flights routes (or the
bundled sample repeated to 3 M rows; 4 copies, 1.2 M rows, with ``quick``). Times include
pipeline construction and start-up. Both outputs are scored against the true top-100.

Plots: ``benchmarks/plots/heavy_hitters_recall_k{k}.png``, recall against epsilon per method,
one panel per data set.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches.misra_gries import Universe
from reproduction import datasets
from reproduction.experiments.misra_gries import runs as mg

SKETCH_K = 2048
SHARDS = 4
DELTA = 1e-6
EPSILONS = (0.1, 0.5, 1.0, 2.0)
KS = (10, 50, 100)
THROUGHPUT_EPS = 1.0
THROUGHPUT_TOP = 100
PLOTS = Path(__file__).with_name("plots")

OURS = ("pmg", "design_b", "pure_pp", "merged_gshm", "merged_laplace", "chan")
IMPL = {
    "pmg": "beam-dpsketch PMG (sequential)",
    "design_b": "beam-dpsketch Design B (APPROX_PP)",
    "pure_pp": "beam-dpsketch PURE_PP (pure DP)",
    "merged_gshm": "beam-dpsketch merged GSHM",
    "merged_laplace": "beam-dpsketch merged Laplace",
    "chan": "Chan et al. (thresholded)",
    "pipelinedp": "PipelineDP 0.3.1 COUNT + partition selection",
}
SKEWED = ("flights airports", "wordfreq words")


# ------------------------------------------------------------------------------------------------
# PipelineDP adapter
# ------------------------------------------------------------------------------------------------


def _pipelinedp_params() -> Any:
    import pipeline_dp

    return pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT],
        max_partitions_contributed=1,
        max_contributions_per_partition=1,
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        # One element = one privacy unit: the bounds hold by construction (see module docstring).
        contribution_bounds_already_enforced=True,
    )


def pipelinedp_release(
    keys: Sequence[Any], epsilon: float, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """PipelineDP's DP count per key with private partition selection (``LocalBackend``).

    Parameters
    ----------
    keys
        The stream, one element (privacy unit) per key occurrence.
    epsilon, delta
        The total budget, given to a ``NaiveBudgetAccountant``.

    Returns
    -------
    (keys, noisy counts)
        The partitions PipelineDP keeps, as numpy arrays.
    """
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=delta)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    extractors = pipeline_dp.DataExtractors(
        partition_extractor=lambda key: key, value_extractor=lambda key: 0
    )
    result = engine.aggregate(list(keys), _pipelinedp_params(), extractors)
    accountant.compute_budgets()  # the LocalBackend is lazy: budgets first, then iterate
    pairs = list(result)
    return (
        np.array([key for key, _ in pairs]),
        np.array([float(m.count) for _, m in pairs], dtype=np.float64),
    )


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def _flights_kind(quick: bool) -> tuple[str, str]:
    if quick:
        return "sample", "bundled 300k-row sample"
    try:
        datasets.fetch_flights()
        return "full", "3 M rows"
    except datasets.DatasetUnavailableError as exc:
        print(f"  flights: 3 M-row file unavailable ({exc}); using the sample", file=sys.stderr)
        return "sample", "bundled 300k-row sample (3 M-row file unavailable)"


def _datasets(quick: bool) -> list[tuple[str, np.ndarray, Universe, str]]:
    """``(name, keys, declared universe, note)`` for each accuracy data set."""
    kind, note = _flights_kind(quick)
    out = []
    routes, universe = mg.flights_pairs(kind)
    out.append(("flights routes", routes, universe, note))
    table = datasets.load_flights(sample=True) if kind == "sample" else datasets.load_flights()
    cols = datasets.flights_columns(table)
    out.append(
        (
            "flights airports",
            cols.origin,
            Universe.from_keys(range(len(cols.airport_names))),
            note + ", origin airport of each flight",
        )
    )
    n_words = 1_000_000 if quick else 10_000_000
    try:
        freqs = datasets.load_word_frequencies()
        words = datasets.word_stream(n_words, 0, freqs)
        out.append(
            (
                "wordfreq words",
                words,
                Universe.from_keys(range(len(freqs))),
                f"{n_words:,} i.i.d. draws from wordfreq 3.1.1 large_en",
            )
        )
    except (datasets.DatasetUnavailableError, ImportError) as exc:
        print(f"  wordfreq unavailable, skipped: {exc}", file=sys.stderr)
    return out


# ------------------------------------------------------------------------------------------------
# (a) accuracy
# ------------------------------------------------------------------------------------------------


def _accuracy(quick: bool) -> tuple[list[dict], list[str]]:
    trials = 3 if quick else 2
    rows: list[dict] = []
    skipped = []
    data = _datasets(quick)
    if not any(name == "wordfreq words" for name, *_ in data):
        skipped.append("wordfreq words")
    for name, keys, universe, note in data:
        start = time.perf_counter()
        sk = mg.build_sketches(keys, SKETCH_K, SHARDS)
        key_list = keys.tolist()
        # scores[impl][(eps, k)] -> list over trials of (precision, recall, are)
        scores: dict[str, dict[tuple[float, int], list[tuple[float, float, float]]]] = {}
        pdp_seconds = 0.0
        for eps in EPSILONS:
            for trial in range(trials):
                noise = NoiseSource.insecure_for_tests(trial)
                releases = {}
                for mech in OURS:
                    stream = noise.stream(("bench-hh", name, repr(eps), mech))
                    rk, rv, _ = mg.release(mech, sk, eps, DELTA, stream, universe)
                    releases[mech] = (rk, rv)
                t0 = time.perf_counter()
                releases["pipelinedp"] = pipelinedp_release(key_list, eps, DELTA)
                pdp_seconds += time.perf_counter() - t0
                for impl, (rk, rv) in releases.items():
                    for k in KS:
                        s = mg.score_top_k(rk, rv, sk.items, sk.f, k)
                        scores.setdefault(impl, {}).setdefault((eps, k), []).append(
                            (s["precision"], s["recall"], s["are"])
                        )
        for impl, cells in scores.items():
            for (eps, k), vals in cells.items():
                p, r, a = np.mean(np.array(vals), axis=0)
                rows.append(
                    {
                        "benchmark": "accuracy",
                        "impl": IMPL[impl],
                        "dataset": name,
                        "epsilon": eps,
                        "k": k,
                        "precision": float(p),
                        "recall": float(r),
                        "are": float(a),
                        "n": len(keys),
                        "notes": f"{note}; {trials} trials; sketch k={SKETCH_K}",
                    }
                )
        print(
            f"  accuracy {name:<18} n={len(keys):>10,} {time.perf_counter() - start:7.1f} s "
            f"(PipelineDP {pdp_seconds:.1f} s)",
            file=sys.stderr,
        )
    return rows, skipped


def _recall_plots(rows: list[dict]) -> list[Path]:
    from reproduction.report import Series, line_plot

    PLOTS.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    styles = {
        "pmg": "-o",
        "design_b": "-s",
        "pure_pp": "-D",
        "merged_gshm": "-^",
        "merged_laplace": "-v",
        "chan": "-x",
        "pipelinedp": "--k",
    }
    paths = []
    for k in KS:
        panels = []
        for name in names:
            series = []
            for impl, style in styles.items():
                pts = sorted(
                    (r["epsilon"], r["recall"])
                    for r in rows
                    if r["dataset"] == name and r["k"] == k and r["impl"] == IMPL[impl]
                )
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    series.append(Series(IMPL[impl], xs, ys, style))
            panels.append((name, series))
        path = PLOTS / f"heavy_hitters_recall_k{k}.png"
        line_plot(
            path,
            panels,
            xlabel="epsilon",
            ylabel=f"recall of the true top-{k}",
            logx=True,
            ylims=[(-0.02, 1.02)] * len(panels),
            suptitle=f"Top-{k} recall vs epsilon, delta={DELTA:g}, sketch k={SKETCH_K} "
            "(PipelineDP: exact histogram)",
        )
        paths.append(path)
    return paths


def _recall_goal(rows: list[dict], skipped: list[str]) -> list[dict]:
    """Per our method: recall against PipelineDP's in every (skewed data set, eps, k) cell."""
    pdp = {
        (r["dataset"], r["epsilon"], r["k"]): r["recall"]
        for r in rows
        if r["impl"] == IMPL["pipelinedp"] and r["dataset"] in SKEWED
    }
    out = []
    for mech in ("pmg", "design_b"):
        diffs = [
            r["recall"] - pdp[(r["dataset"], r["epsilon"], r["k"])]
            for r in rows
            if r["impl"] == IMPL[mech] and (r["dataset"], r["epsilon"], r["k"]) in pdp
        ]
        if not diffs:
            continue
        d = np.array(diffs)
        better, worse = int(np.sum(d > 0.005)), int(np.sum(d < -0.005))
        met = worse == 0 and better > 0
        missing = f"; not run: {', '.join(skipped)}" if skipped else ""
        out.append(
            {
                "benchmark": "goal: recall >= PipelineDP (skewed data, k <= 100)",
                "impl": IMPL[mech],
                "dataset": ", ".join(sorted({key[0] for key in pdp})),
                "recall": float(d.mean()),
                "notes": f"{'MET' if met else 'NOT MET'}: better in {better}, equal (within "
                f"0.005) in {len(d) - better - worse}, worse in {worse} of {len(d)} cells; "
                f"mean recall difference {d.mean():+.4f} (recall column){missing}",
            }
        )
    return out


# ------------------------------------------------------------------------------------------------
# (b) throughput
# ------------------------------------------------------------------------------------------------

_SINK: dict[str, list] = {}  # outputs of the in-process pipelines, keyed by label


def _store(label: str):
    def store(values: list) -> None:
        # Beam pickles this function by value; importing the module here reaches the real
        # _SINK of this (in-process) run rather than a pickled copy of it.
        from benchmarks import bench_heavy_hitters

        bench_heavy_hitters._SINK[label] = list(values)

    return store


def _throughput_file(directory: Path, quick: bool) -> tuple[str, int, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    note = "3 M flights routes"
    table = None
    if not quick:
        try:
            datasets.fetch_flights()
            table = datasets.load_flights().select(["route"])
        except datasets.DatasetUnavailableError as exc:
            print(f"  flights: 3 M-row file unavailable ({exc})", file=sys.stderr)
    if table is None:
        sample = datasets.load_flights(sample=True).select(["route"])
        copies = 4 if quick else math.ceil(3_000_000 / sample.num_rows)
        table = pa.concat_tables([sample] * copies)
        note = f"bundled sample x{copies}"
    path = directory / "routes.parquet"
    pq.write_table(table, path, row_group_size=1 << 18)
    return str(path), table.num_rows, note


def _ours(path: str, mechanism: str, options: Sequence[str] = ()) -> None:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPHeavyHitters, ReadKeyBatches

    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(list(options))) as p:
        _ = (
            p
            | ReadKeyBatches(path, column="route")
            | DPHeavyHitters(
                SKETCH_K,
                PrivacyBudget.approx(THROUGHPUT_EPS, DELTA),
                top=THROUGHPUT_TOP,
                mechanism=mechanism,
                noise_source=NoiseSource.insecure_for_tests(0),
            )
            | beam.combiners.ToList()
            | beam.Map(_store(mechanism))
        )


def _pipelinedp_beam(path: str) -> None:
    import apache_beam as beam
    import pipeline_dp
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=THROUGHPUT_EPS, total_delta=DELTA)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | beam.io.ReadFromParquet(path, columns=["route"])
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.BeamBackend())
        extractors = pipeline_dp.DataExtractors(
            partition_extractor=lambda row: row["route"], value_extractor=lambda row: 0
        )
        counts = engine.aggregate(rows, _pipelinedp_params(), extractors)
        accountant.compute_budgets()  # before the pipeline runs, after it is built
        _ = (
            counts
            | beam.combiners.Top.Of(THROUGHPUT_TOP, key=lambda kv: kv[1].count)
            | beam.Map(lambda top: [(key, m.count) for key, m in top])
            | beam.Map(_store("pipelinedp"))
        )


def _throughput(quick: bool) -> list[dict]:
    import pyarrow.parquet as pq

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path, n, note = _throughput_file(Path(tmp), quick)
        items, f = datasets.exact_counts(pq.read_table(path)["route"])
        cases = [
            ("beam-dpsketch DPHeavyHitters design-b", "design-b", lambda: _ours(path, "design-b")),
            (
                "beam-dpsketch DPHeavyHitters sequential (PMG)",
                "sequential",
                lambda: _ours(path, "sequential"),
            ),
            (
                "PipelineDP 0.3.1 DPEngine on BeamBackend",
                "pipelinedp",
                lambda: _pipelinedp_beam(path),
            ),
        ]
        for impl, label, fn in cases:
            _SINK.pop(label, None)
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
            out = _SINK.get(label, [])
            rk, rv = mg.release_arrays(out)
            s = mg.score_top_k(rk.astype(object), rv, items, f, THROUGHPUT_TOP)
            rows.append(
                {
                    "benchmark": "throughput",
                    "impl": impl,
                    "dataset": "flights routes (Parquet)",
                    "epsilon": THROUGHPUT_EPS,
                    "k": THROUGHPUT_TOP,
                    "precision": s["precision"],
                    "recall": s["recall"],
                    "are": s["are"],
                    "n": n,
                    "seconds": seconds,
                    "items_per_s": n / seconds,
                    "notes": f"{note}; FnApiRunner in-process; sketch k={SKETCH_K}",
                }
            )
            print(
                f"  throughput {impl:<46} {seconds:7.2f} s {n / seconds / 1e6:6.3f} M rows/s "
                f"recall@{THROUGHPUT_TOP} {s['recall']:.2f}",
                file=sys.stderr,
            )
    pdp = next(r for r in rows if r["impl"].startswith("PipelineDP"))
    goals = []
    for r in rows:
        if r is pdp:
            continue
        ratio = r["items_per_s"] / pdp["items_per_s"]
        goals.append(
            {
                "benchmark": "goal: throughput >= 10x PipelineDP",
                "impl": r["impl"],
                "dataset": r["dataset"],
                "n": n,
                "items_per_s": r["items_per_s"],
                "notes": f"{'MET' if ratio >= 10 else 'NOT MET'}: {ratio:.1f}x PipelineDP's "
                f"{pdp['items_per_s'] / 1e6:.3f} M rows/s",
            }
        )
    return rows + goals


def run(quick: bool = False) -> list[dict]:
    """Both parts; rows carry ``benchmark``, ``impl``, ``dataset``, ``epsilon``, ``k``,
    ``precision``, ``recall``, ``are``, ``n``, ``seconds``, ``items_per_s`` and ``notes``."""
    acc, skipped = _accuracy(quick)
    for path in _recall_plots(acc):
        print(f"  wrote {path}", file=sys.stderr)
    thr = _throughput(quick)
    goals = _recall_goal(acc, skipped) + [r for r in thr if r["benchmark"].startswith("goal")]
    return goals + [r for r in thr if r["benchmark"] == "throughput"] + acc


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        print(row)
