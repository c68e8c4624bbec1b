"""Accuracy of our element-level DP releases against PipelineDP 0.3.1, at equal (epsilon, delta).

``python -m benchmarks.bench_accuracy [--quick]`` prints the Markdown section;
``python -m benchmarks.run --only "Accuracy vs PipelineDP"`` writes it into
``benchmarks/RESULTS.md`` with the plots under ``benchmarks/plots/``.

**Heavy hitters.** Every element-level mechanism of
:data:`beam_dpsketch.transforms.heavy_hitters.MECHANISMS` (read at run time: a mechanism is
element level when :class:`~beam_dpsketch.transforms.DPHeavyHitters` accepts it without a
user-level ``privacy_unit``) at two Misra-Gries sizes: the CLI's default ``--k`` (read from the
``beam-dpsketch heavy-hitters`` parser at run time) and :data:`BEST_K` counters (at least the
number of distinct keys of both data sets, so every sketch is exact and only the noise is left).
PipelineDP runs ``Metrics.COUNT`` with private partition selection (truncated geometric, its
default), Laplace noise, ``max_partitions_contributed = max_contributions_per_partition = 1``
and a ``NaiveBudgetAccountant`` holding the same total ``(epsilon, delta = 1e-6)``: one element
is one privacy unit, the neighbouring relation (add/remove one element) of our releases.

How each release is computed:

* Our mechanisms are run without Beam but with the transform's own objects: the ``CombineFn``
  and the release mechanism of a ``DPHistogram`` built with that mechanism (its public
  ``aggregate`` step), driven as Beam drives them (``create_accumulator``, ``add_input`` on
  numpy batches of :data:`BATCH` keys, ``merge_accumulators``, ``extract_output``, then
  ``release``), so whatever the transform's current code does at combine and release time is
  what is measured. The stream is cut into :data:`SEGMENTS` contiguous segments, one
  accumulator each, as a :data:`SEGMENTS`-worker run would (``sequential`` builds one
  Algorithm-1 sketch of the whole window, as its pre-step does). ``select-then-count``
  releases its selection from the Design B aggregate (its selection ``CombineFn``), sums each
  candidate's exact count (taken from the histogram: the numbers its counting pass adds up) in
  its count ``CombineFn``, then releases the counts. ``tests/evaluation/test_bench_accuracy.py``
  checks that these releases equal the transform's on the ``FnApiRunner`` with the same noise.
  An element-level mechanism not reproduced this way runs the real ``DPHistogram`` on the
  in-process ``FnApiRunner`` (keys read from Parquet with ``ReadKeyBatches``; one pipeline per
  data set and size, one branch per epsilon and trial).
* ``merged-gshm`` and ``merged-laplace`` add noise that grows with ``k`` (Lebeda and Tětek,
  Section 7): they run at the default size only.
* PipelineDP's accuracy cells use its own engine objects after the per-key count: the
  ``DPEngine``'s compound COUNT combiner and its private partition selection
  (``_select_private_partitions_internal``) applied to the exact histogram, which is what its
  ``LocalBackend`` computes once it has grouped the stream (its per-element Python grouping
  costs 8 s per million rows here). The full engine also runs once per data set on the whole
  stream at ``epsilon = 1``: that run gives PipelineDP's time and a cross-check row.

Our noise comes from ``NoiseSource.insecure_for_tests(trial)`` (seeded: the figures are
reproducible); PipelineDP draws from its own unseeded secure generator.

Metrics per (data set, method, size, epsilon, top ``t``), averaged over :data:`TRIALS` releases
(:data:`QUICK_TRIALS` with ``--quick``): the reported set is the ``t`` largest noisy counts of the release (what
``DPHeavyHitters(top=t)`` emits; PipelineDP's largest ``t`` kept partitions). Recall and
precision against the true top-``t``; MAE, mean relative error and bias (mean signed error,
noisy minus true) over the reported keys that are in the true top-``t`` ("released true-top
keys"; blank when none is). Memory is the number of counters (keys with a count) held at the
release step for one window: for us the aggregate the release reads (a Design B aggregate holds
up to ``segments x k``), for PipelineDP the number of distinct keys (its exact histogram).
Seconds: ours, building the aggregate from the whole stream plus one release, single-threaded
numpy (or the Beam pipeline's wall time per branch); PipelineDP, its full ``LocalBackend`` run.

Goals stated from the measurements: at the CLI default (default mechanism and default ``--k``),
recall >= PipelineDP's (within 0.005) and MAE <= 1.5x PipelineDP's in every cell; at the best
size, MAE <= PipelineDP's in every cell.

**Point queries.** ``DPFrequencies`` at the CLI's default width, depth and seed (Count-Min and
Count Sketch; the CLI's default sketch first), and its exact counts of declared ``query_keys``
when the transform has that parameter, against PipelineDP's COUNT on the same keys declared as
public partitions (``public_partitions``: all of epsilon on the counts) and with private
partition selection (the heavy-hitter release above; a key it drops reads 0). MAE and bias on
the true top-100 keys and on 100 keys drawn uniformly from the distinct keys (seeded).

Data: the 2001 US flights routes (3 M rows, 3,399 routes; the bundled 300,000-row sample with
``--quick``) and a stream of 10 M i.i.d. draws (seed 0) from wordfreq 3.1.1's ``large_en``
frequencies (500,000 with ``--quick``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib
import inspect
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource, NoiseStream
from reproduction import datasets

TITLE = "Accuracy vs PipelineDP 0.3.1: heavy hitters and point queries"
EPSILONS = (0.1, 0.5, 1.0, 2.0)
DELTA = 1e-6
TOPS = (10, 50, 100)
TRIALS = 20  # the top-10 recall of one cell moves by about 0.015 per standard error at 20
QUICK_TRIALS = 2
SEGMENTS = 4
BATCH = 1 << 16
BEST_K = 1 << 18
WORDS_N = 10_000_000
QUICK_WORDS_N = 500_000
RANDOM_KEYS = 100
FREQ_TOP = 100
RECALL_TOLERANCE = 0.005
DEFAULT_MAE_RATIO = 1.5
BEST_MAE_RATIO = 1.0
TIMING_EPSILON = 1.0
PLOTS = Path(__file__).with_name("plots")
PDP = "PipelineDP 0.3.1 COUNT + partition selection"
PDP_FULL = "PipelineDP 0.3.1 COUNT + partition selection, full LocalBackend run"
PDP_PUBLIC = "PipelineDP 0.3.1 COUNT, query keys as public partitions"
_SKETCH_LAYER = ("design-b", "merged-gshm", "merged-laplace")
_ONE_SKETCH = ("sequential",)
# Releases whose noise grows with k (Lebeda and Tetek, Section 7: Laplace of scale k/eps, GSHM
# at l = k): a larger sketch only adds noise, so they have no "best" size above the default
# (and calibrating GSHM at l = BEST_K alone takes minutes).
_NOISE_GROWS_WITH_K = ("merged-gshm", "merged-laplace")


# ------------------------------------------------------------------------------------------------
# Configuration read from the code at run time
# ------------------------------------------------------------------------------------------------


def _cli_args(command: str, extra: Sequence[str] = ()) -> argparse.Namespace:
    """The defaults of one ``beam-dpsketch`` subcommand, from its own parser."""
    from beam_dpsketch.pipelines import frequencies, heavy_hitters

    parser = argparse.ArgumentParser(prog="beam-dpsketch")
    sub = parser.add_subparsers(dest="command")
    heavy_hitters.register(sub)
    frequencies.register(sub)
    argv = [command, "--input", "keys.parquet", "--column", "key", "--epsilon", "1", *extra]
    args, _ = parser.parse_known_args(argv)
    return args


def cli_heavy_hitter_defaults() -> dict[str, Any]:
    """``k``, ``max_shards`` and the default mechanism of ``beam-dpsketch heavy-hitters``."""
    from beam_dpsketch.pipelines import heavy_hitters as cli

    args = _cli_args("heavy-hitters")
    # The command's own rule: the default k depends on the mechanism.
    k = cli.k_from_args(args)
    mechanism = cli.mechanism_of(args)
    return {"k": k, "max_shards": getattr(args, "max_shards", None), "mechanism": mechanism}


def cli_frequency_defaults() -> dict[str, Any]:
    """``sketch``, ``width``, ``depth`` and ``seed`` of ``beam-dpsketch frequencies``."""
    args = _cli_args("frequencies", ("--delta", repr(DELTA)))
    return {name: getattr(args, name) for name in ("sketch", "width", "depth", "seed")}


def element_mechanisms() -> list[str]:
    """The mechanisms of ``MECHANISMS`` that ``DPHeavyHitters`` accepts at element level."""
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPHeavyHitters
    from beam_dpsketch.transforms.heavy_hitters import MECHANISMS

    out = []
    for mechanism in MECHANISMS:
        try:
            DPHeavyHitters(8, PrivacyBudget.approx(1.0, DELTA), mechanism=mechanism)
        except ValueError:
            continue  # user level only (needs a user-level privacy_unit)
        out.append(mechanism)
    return out


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


@dataclass
class Dataset:
    """A key stream (``int64`` codes) and its exact histogram."""

    name: str
    keys: np.ndarray
    note: str
    items: np.ndarray = field(init=False)
    f: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.items, self.f = datasets.exact_counts(self.keys)


def load_datasets(quick: bool) -> list[Dataset]:
    """Flights routes and the wordfreq stream (smaller with ``quick``)."""
    from reproduction.experiments.misra_gries import runs as mg

    kind, note = "sample", "bundled 300,000-row sample"
    if not quick:
        try:
            datasets.fetch_flights()
            kind, note = "full", "3,000,000 rows"
        except datasets.DatasetUnavailableError as exc:
            note = f"bundled 300,000-row sample (the 3 M-row file is unavailable: {exc})"
    routes, _ = mg.flights_pairs(kind)
    out = [Dataset("flights routes", routes.astype(np.int64), note)]
    n = QUICK_WORDS_N if quick else WORDS_N
    try:
        freqs = datasets.load_word_frequencies()
        words = datasets.word_stream(n, 0, freqs).astype(np.int64)
        out.append(Dataset("wordfreq words", words, f"{n:,} i.i.d. draws, seed 0"))
    except (datasets.DatasetUnavailableError, ImportError) as exc:
        print(f"  wordfreq unavailable, skipped: {exc}", file=sys.stderr)
    return out


def _batches(keys: np.ndarray) -> Iterator[np.ndarray]:
    for start in range(0, len(keys), BATCH):
        yield keys[start : start + BATCH]


# ------------------------------------------------------------------------------------------------
# Our releases
# ------------------------------------------------------------------------------------------------


def _histogram(mechanism: str, k: int, epsilon: float, max_shards: int | None, **kw: Any) -> Any:
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPHistogram
    from beam_dpsketch.transforms.heavy_hitters import MECHANISM_CLASSES

    # max_shards is a parameter of the mechanisms that bound a Design B aggregate only.
    chosen: Any = mechanism
    if max_shards is not None and mechanism in ("design-b", "select-then-count"):
        chosen = MECHANISM_CLASSES[mechanism](k, max_shards=max_shards)
    return DPHistogram(k, PrivacyBudget.approx(epsilon, DELTA), mechanism=chosen, **kw)


def _counters(aggregate: Any) -> int | None:
    """Keys with a count in the aggregate the release step reads."""
    to_dict = getattr(aggregate, "to_dict", None)
    if callable(to_dict):
        return len(to_dict())
    try:
        return len(aggregate)
    except TypeError:
        return None


def drive_combine(combine: Any, parts: Sequence[Sequence[Any]]) -> Any:
    """Run a ``CombineFn`` as Beam does: one accumulator per part, merged, then extracted."""
    accumulators = []
    for part in parts:
        acc = combine.create_accumulator()
        for element in part:
            acc = combine.add_input(acc, element)
        accumulators.append(acc)
    return combine.extract_output(combine.merge_accumulators(accumulators))


def build_aggregate(
    mechanism: str, k: int, keys: np.ndarray, max_shards: int | None, segments: int = SEGMENTS
) -> tuple[Any, float]:
    """The release step's input for ``mechanism`` at size ``k``, and the seconds it took.

    ``segments`` contiguous parts of ``keys`` go to one accumulator each (``sequential``: one
    sketch of all of them, as its pre-step builds).
    """
    from beam_dpsketch.sketches import MisraGries

    combine = _histogram(mechanism, k, 1.0, max_shards).aggregate.combine_fn
    start = time.perf_counter()
    if mechanism in _ONE_SKETCH:
        # The transform's pre-step: every batch of the window into one Algorithm-1 sketch.
        sketch = MisraGries(k)
        for batch in _batches(keys):
            sketch.update(batch)
        parts: list[list[Any]] = [[sketch]]
    else:
        parts = [list(_batches(seg)) for seg in np.array_split(keys, segments)]
    aggregate = drive_combine(combine, parts)
    return aggregate, time.perf_counter() - start


def _pairs(records: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, values)`` of released ``(key, count, ...)`` records."""
    keys, values = [], []
    for r in records:
        key = getattr(r, "key", None)
        if key is None:
            key, value = r[0], r[1]
        else:
            value = r.count
        keys.append(key)
        values.append(float(value))
    return np.asarray(keys, dtype=np.int64), np.asarray(values, dtype=np.float64)


def release_ours(
    mechanism: str,
    k: int,
    epsilon: float,
    aggregate: Any,
    stream: NoiseStream,
    max_shards: int | None,
    raw: bool = False,
) -> Any:
    """One release of the transform's release mechanism on ``aggregate`` (global window):
    ``(keys, values)``, or with ``raw`` the released records themselves (error bounds)."""
    from beam_dpsketch.privacy import PrivacyBudget

    mech = _histogram(mechanism, k, epsilon, max_shards).aggregate.mechanism
    out = mech.release(aggregate, PrivacyBudget.approx(epsilon, DELTA), stream)
    return out if raw else _pairs(out)


#: ``streams(eps, trial, part)``: the noise stream of one release; ``part`` is ``""``, or
#: ``"selection"`` / ``"count"`` for the two releases of select-then-count.
Streams = Callable[[float, int, str], NoiseStream]


Driver = tuple[
    Callable[[float, int], tuple[np.ndarray, np.ndarray]], float, Callable[[], "int | None"]
]


def sketch_layer_driver(
    mechanism: str,
    k: int,
    ds: Dataset,
    max_shards: int | None,
    design_b: dict[int, tuple[Any, float]],
    streams: Streams | None = None,
    segments: int = SEGMENTS,
    raw: bool = False,
) -> Driver | None:
    """``(release(eps, trial), build seconds, counters)`` without Beam, or ``None``.

    ``None`` means the mechanism's Beam shape is not reproduced here: run it on Beam.
    ``design_b`` caches the Design B aggregate per ``k`` (select-then-count selects from it).
    ``streams`` gives each release's noise (default: seeded by trial, keyed by the cell).
    With ``raw``, ``release`` returns the released records (with their error bounds) instead of
    ``(keys, values)``.
    """
    if streams is None:

        def streams(eps: float, trial: int, part: str) -> NoiseStream:
            cell = ("bench-accuracy", ds.name, mechanism, k, repr(eps), part)
            return NoiseSource.insecure_for_tests(trial).stream(cell)

    if mechanism in _SKETCH_LAYER or mechanism in _ONE_SKETCH:
        aggregate, build_s = build_aggregate(mechanism, k, ds.keys, max_shards, segments)
        if mechanism == "design-b":
            design_b[k] = (aggregate, build_s)

        def release(eps: float, trial: int) -> tuple[np.ndarray, np.ndarray]:
            stream = streams(eps, trial, "")
            return release_ours(mechanism, k, eps, aggregate, stream, max_shards, raw)

        counters = _counters(aggregate)
        return release, build_s, lambda: counters
    count_mech = _histogram(mechanism, k, 1.0, max_shards).aggregate.mechanism
    if not hasattr(getattr(count_mech, "selection", None), "release"):
        return None
    # Select-then-count: the selection releases from the Design B aggregate (its CombineFn is
    # DesignBCombineFn(k, max_shards)); the count pass sums each candidate's exact count, which
    # the histogram gives directly, into the transform's count CombineFn; then its release.
    if k not in design_b:
        design_b[k] = build_aggregate("design-b", k, ds.keys, max_shards, segments)
    selection_input, build_s = design_b[k]
    held: list[int] = []

    def release_sc(eps: float, trial: int) -> tuple[np.ndarray, np.ndarray]:
        from beam_dpsketch.privacy import PrivacyBudget

        budget = PrivacyBudget.approx(eps, DELTA)
        step = _histogram(mechanism, k, eps, max_shards).aggregate
        stream = streams(eps, trial, "selection")
        markers = step.mechanism.selection.release(selection_input, budget, stream)
        candidates = np.asarray([x for m in markers for x in m.keys], dtype=np.int64)
        exact = datasets.counts_of(ds.items, ds.f, candidates)
        partial = {int(x): int(c) for x, c in zip(candidates, exact, strict=True) if c}
        counts = drive_combine(step.combine_fn, [[partial, *markers]])
        held.append(len(counts))
        stream = streams(eps, trial, "count")
        out = step.mechanism.release(counts, budget, stream)
        return out if raw else _pairs(out)

    def counters() -> int | None:
        # Memory: the selection's Design B aggregate plus the candidates' counters (at most k).
        n = _counters(selection_input)
        return None if n is None or not held else n + max(held)

    return release_sc, build_s, counters


_SINK: dict[str, list] = {}  # outputs of the in-process pipelines, keyed by branch label


def _store(label: str) -> Callable[[list], None]:
    def store(values: list) -> None:
        # Pickled by value: import the module to reach this process's sink.
        from benchmarks import bench_accuracy

        bench_accuracy._SINK[label] = list(values)

    return store


def beam_releases(
    mechanism: str,
    k: int,
    path: str,
    trials: int,
    tag: str,
    max_shards: int | None,
) -> tuple[dict[tuple[float, int], tuple[np.ndarray, np.ndarray]], float, dict[Any, Any]]:
    """Every (epsilon, trial) release of ``mechanism`` from one FnApiRunner pipeline.

    Returns the releases, the pipeline's wall time per branch, and per (epsilon, trial) the
    branch's ``(label, noise source)`` (each transform application derives its own key).
    """
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from beam_dpsketch.transforms import ReadKeyBatches

    labels: dict[tuple[float, int], str] = {}
    sources: dict[tuple[float, int], tuple[str, NoiseSource]] = {}
    importlib.import_module("benchmarks.bench_accuracy")._SINK.clear()
    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        batches = p | "Read" >> ReadKeyBatches(path, column="key")
        for eps in EPSILONS:
            for trial in range(trials):
                label = f"{tag}-{mechanism}-k{k}-eps{eps}-t{trial}"
                labels[(eps, trial)] = label
                hist = _histogram(
                    mechanism,
                    k,
                    eps,
                    max_shards,
                    noise_source=NoiseSource.insecure_for_tests(trial),
                    label=label,
                )
                sources[(eps, trial)] = (label, hist.noise_source)
                _ = (
                    batches
                    | label >> hist
                    | f"{label}/ToList" >> beam.combiners.ToList()
                    | f"{label}/Store" >> beam.Map(_store(label))
                )
    seconds = (time.perf_counter() - start) / max(len(labels), 1)
    # The pipeline's functions import this module by name: read that module's sink (this one
    # is __main__ when run with ``python -m benchmarks.bench_accuracy``).
    sink = importlib.import_module("benchmarks.bench_accuracy")._SINK
    releases = {cell: _pairs(sink.get(label, [])) for cell, label in labels.items()}
    return releases, seconds, sources


# ------------------------------------------------------------------------------------------------
# PipelineDP
# ------------------------------------------------------------------------------------------------


def _pipelinedp_params() -> Any:
    from benchmarks.bench_heavy_hitters import _pipelinedp_params as params

    return params()


def pipelinedp_from_histogram(
    items: np.ndarray,
    counts: np.ndarray,
    epsilon: float,
    delta: float,
    public: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """PipelineDP's COUNT release from the exact per-key counts, with its own engine objects.

    ``DPEngine.aggregate`` on the ``LocalBackend`` groups the stream into one accumulator
    ``(rows, (count,))`` per key and then applies its private partition selection and the COUNT
    combiner's ``compute_metrics``; this function builds those accumulators from ``counts`` and
    applies the same two steps of the same engine and accountant (same budget split). With
    ``public``, those keys are the public partitions (zero counts included) and no selection
    runs, as ``aggregate(..., public_partitions=public)`` does.
    """
    import pipeline_dp

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=epsilon, total_delta=delta)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = _pipelinedp_params()
    with accountant.scope(weight=params.budget_weight):
        engine._add_report_generator(params, "aggregate", public is not None)
        combiner = engine._create_compound_combiner(params)
        if combiner.create_accumulator([0]) != (1, (1,)):
            raise RuntimeError("unexpected PipelineDP COUNT accumulator layout")
        if public is None:
            col: Any = [
                (x, (c, (c,))) for x, c in zip(items.tolist(), counts.tolist(), strict=True)
            ]
            col = engine._select_private_partitions_internal(
                col,
                params.max_partitions_contributed,
                1,  # max_rows_per_privacy_id: one row per privacy unit
                params.partition_selection_strategy,
                params.pre_threshold,
            )
        else:
            exact = datasets.counts_of(items, counts, public).tolist()
            col = [(x, (c, (c,))) for x, c in zip(public.tolist(), exact, strict=True)]
        col = engine._backend.map_values(col, combiner.compute_metrics, "Compute DP metrics")
    accountant.compute_budgets()
    pairs = list(col)
    return (
        np.asarray([x for x, _ in pairs], dtype=np.int64),
        np.asarray([float(m.count) for _, m in pairs], dtype=np.float64),
    )


def pipelinedp_full(keys: np.ndarray, epsilon: float) -> tuple[np.ndarray, np.ndarray, float]:
    """PipelineDP's whole ``DPEngine.aggregate`` on the stream; returns its seconds too."""
    from benchmarks.bench_heavy_hitters import pipelinedp_release

    start = time.perf_counter()
    rk, rv = pipelinedp_release(keys.tolist(), epsilon, DELTA)
    seconds = time.perf_counter() - start
    return rk.astype(np.int64), rv, seconds


# ------------------------------------------------------------------------------------------------
# Scoring
# ------------------------------------------------------------------------------------------------


def score(
    rel_keys: np.ndarray, rel_values: np.ndarray, items: np.ndarray, f: np.ndarray, top: int
) -> dict[str, float]:
    """Recall, precision, MAE, MRE and bias of a release's top-``top`` (see module docstring)."""
    truth = datasets.top_k(items, f, top)
    order = np.lexsort((rel_keys, -rel_values))[:top]
    rep_k, rep_v = rel_keys[order], rel_values[order]
    hit = np.isin(rep_k, truth)
    hits = int(hit.sum())
    true = datasets.counts_of(items, f, rep_k[hit]).astype(np.float64)
    err = rep_v[hit] - true
    nan = float("nan")
    return {
        "recall": hits / top,
        "precision": hits / len(rep_k) if len(rep_k) else nan,
        "mae": float(np.mean(np.abs(err))) if hits else nan,
        "mre": float(np.mean(np.abs(err) / true)) if hits else nan,
        "bias": float(np.mean(err)) if hits else nan,
    }


def _mean(values: Sequence[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    return float(np.mean(arr[~np.isnan(arr)])) if np.any(~np.isnan(arr)) else float("nan")


@dataclass
class Cell:
    """Scores of one (data set, method, size, epsilon, top) over its trials."""

    dataset: str
    impl: str
    size: str
    epsilon: float
    top: int
    scores: list[dict[str, float]] = field(default_factory=list)
    counters: int | None = None
    seconds: float = float("nan")

    def metric(self, name: str) -> float:
        return _mean([s[name] for s in self.scores])


# ------------------------------------------------------------------------------------------------
# Heavy hitters
# ------------------------------------------------------------------------------------------------


def _cell(
    by_key: dict[tuple[str, str, float, int], Cell],
    dataset: str,
    impl: str,
    size: str,
    eps: float,
    top: int,
) -> Cell:
    key = (impl, size, eps, top)
    if key not in by_key:
        by_key[key] = Cell(dataset, impl, size, eps, top)
    return by_key[key]


def _impl(mechanism: str) -> str:
    return f"beam-dpsketch {mechanism}"


def _write_parquet(keys: np.ndarray, directory: Path, name: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = directory / f"{name.replace(' ', '_')}.parquet"
    pq.write_table(pa.table({"key": keys}), path, row_group_size=BATCH)
    return str(path)


def heavy_hitters(
    data: list[Dataset], trials: int, defaults: dict[str, Any], tmp: Path
) -> tuple[list[Cell], dict[tuple[str, float, int], tuple[np.ndarray, np.ndarray]]]:
    """Every heavy-hitter cell, and PipelineDP's releases (reused by the point queries)."""
    mechanisms = element_mechanisms()
    max_shards = defaults["max_shards"]
    cells: list[Cell] = []
    pdp_releases: dict[tuple[str, float, int], tuple[np.ndarray, np.ndarray]] = {}
    for ds in data:
        start_ds = time.perf_counter()
        by_key: dict[tuple[str, str, float, int], Cell] = {}
        cell = functools.partial(_cell, by_key, ds.name)

        # PipelineDP: the full engine once (time, cross-check), the histogram path per trial.
        rk, rv, pdp_seconds = pipelinedp_full(ds.keys, TIMING_EPSILON)
        for top in TOPS:
            c = cell(PDP_FULL, "exact histogram", TIMING_EPSILON, top)
            c.scores.append(score(rk, rv, ds.items, ds.f, top))
            c.counters, c.seconds = len(ds.items), pdp_seconds
        for eps in EPSILONS:
            for trial in range(trials):
                rk, rv = pipelinedp_from_histogram(ds.items, ds.f, eps, DELTA)
                pdp_releases[(ds.name, eps, trial)] = (rk, rv)
                for top in TOPS:
                    c = cell(PDP, "exact histogram", eps, top)
                    c.scores.append(score(rk, rv, ds.items, ds.f, top))
                    c.counters, c.seconds = len(ds.items), pdp_seconds
        path = None
        design_b: dict[int, tuple[Any, float]] = {}  # k -> (Design B aggregate, seconds)
        for mechanism in mechanisms:
            sizes = [("default", defaults["k"])]
            if mechanism not in _NOISE_GROWS_WITH_K:
                sizes.append(("best", BEST_K))
            for size, k in sizes:
                label = f"{size} k={k}"
                driver = sketch_layer_driver(mechanism, k, ds, max_shards, design_b)
                if driver is not None:
                    release, build_s, counters_of = driver
                    for eps in EPSILONS:
                        for trial in range(trials):
                            t0 = time.perf_counter()
                            rk, rv = release(eps, trial)
                            rel_s = time.perf_counter() - t0
                            for top in TOPS:
                                c = cell(_impl(mechanism), label, eps, top)
                                c.scores.append(score(rk, rv, ds.items, ds.f, top))
                                c.seconds = build_s + rel_s
                    counters = counters_of()
                    for top in TOPS:
                        for eps in EPSILONS:
                            cell(_impl(mechanism), label, eps, top).counters = counters
                    how = f"build {build_s:6.2f} s, {counters} counters"
                else:
                    if path is None:
                        path = _write_parquet(ds.keys, tmp, ds.name)
                    releases, per_branch, _ = beam_releases(
                        mechanism, k, path, trials, "acc", max_shards
                    )
                    for (eps, _trial), (rk, rv) in releases.items():
                        for top in TOPS:
                            c = cell(_impl(mechanism), label, eps, top)
                            c.scores.append(score(rk, rv, ds.items, ds.f, top))
                            c.seconds = per_branch
                    how = f"Beam {per_branch:6.2f} s per branch"
                print(f"  {ds.name:<15} {mechanism:<18} {label:<16} {how}", file=sys.stderr)
        cells.extend(by_key.values())
        print(
            f"  heavy hitters {ds.name}: {time.perf_counter() - start_ds:.1f} s "
            f"(PipelineDP full run {pdp_seconds:.1f} s)",
            file=sys.stderr,
        )
    return cells, pdp_releases


# ------------------------------------------------------------------------------------------------
# Point queries
# ------------------------------------------------------------------------------------------------


@dataclass
class FreqCell:
    """MAE and bias of one point-query method on one key set, over trials."""

    dataset: str
    impl: str
    epsilon: float
    queries: str
    abs_err: list[float] = field(default_factory=list)
    signed_err: list[float] = field(default_factory=list)
    counters: int | None = None


def _estimates(records: Sequence[Any], queries: np.ndarray) -> np.ndarray:
    """Point estimates of ``queries`` from a release: a released sketch or ``(key, count)``."""
    if len(records) == 1 and hasattr(records[0], "estimate"):
        return np.asarray(records[0].estimate(queries.tolist()), dtype=np.float64)
    keys, values = _pairs(records)
    return _lookup(keys, values, queries)


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    out = np.zeros(len(queries), dtype=np.float64)
    if len(keys) == 0:
        return out
    order = np.argsort(keys)
    sk, sv = keys[order], values[order]
    pos = np.minimum(np.searchsorted(sk, queries), len(sk) - 1)
    hit = sk[pos] == queries
    out[hit] = sv[pos[hit]]
    return out


def _frequencies(width: int, depth: int, epsilon: float, **kw: Any) -> Any:
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPFrequencies

    return DPFrequencies(width, depth, PrivacyBudget.approx(epsilon, DELTA), **kw)


def point_queries(
    data: list[Dataset],
    trials: int,
    defaults: dict[str, Any],
    pdp_releases: dict[tuple[str, float, int], tuple[np.ndarray, np.ndarray]],
) -> tuple[list[FreqCell], list[str]]:
    """MAE of point queries on the true top keys and on random keys; notes for the report."""
    from beam_dpsketch.privacy import PrivacyBudget

    width, depth, seed = defaults["width"], defaults["depth"], defaults["seed"]
    kinds = [defaults["sketch"]] + [
        s for s in ("count-min", "count-sketch") if s != defaults["sketch"]
    ]
    has_query_keys = "query_keys" in inspect.signature(_frequencies_class()).parameters
    notes = []
    if not has_query_keys:
        notes.append("`DPFrequencies` has no `query_keys` parameter in this tree: not measured.")
    cells: list[FreqCell] = []
    for ds in data:
        rng = np.random.default_rng(0)
        groups = {
            f"true top-{FREQ_TOP}": datasets.top_k(ds.items, ds.f, FREQ_TOP),
            f"{RANDOM_KEYS} random keys": rng.choice(ds.items, RANDOM_KEYS, replace=False),
        }
        declared = np.concatenate(list(groups.values()))
        by_key: dict[tuple[str, float, str], FreqCell] = {}
        add = functools.partial(_add_point_queries, by_key, ds, groups)

        configs: list[tuple[str, dict[str, Any], int]] = []
        for kind in kinds:
            cli = " (CLI default)" if kind == defaults["sketch"] else ""
            impl = f"DPFrequencies {kind} {depth}x{width}{cli}"
            configs.append((impl, {"sketch": kind, "seed": seed}, width * depth))
        if has_query_keys:
            impl = f"DPFrequencies query_keys ({len(declared)} declared keys)"
            configs.append((impl, {"query_keys": declared.tolist()}, len(declared)))
        for impl, kw, counters in configs:
            combine = _frequencies(width, depth, 1.0, **kw).aggregate.combine_fn
            parts = [list(_batches(seg)) for seg in np.array_split(ds.keys, SEGMENTS)]
            aggregate = drive_combine(combine, parts)
            for eps in EPSILONS:
                mech = _frequencies(width, depth, eps, **kw).aggregate.mechanism
                for trial in range(trials):
                    stream = NoiseSource.insecure_for_tests(trial).stream(
                        ("bench-accuracy-freq", ds.name, impl, repr(eps))
                    )
                    out = mech.release(aggregate, PrivacyBudget.approx(eps, DELTA), stream)
                    add(impl, eps, lambda q, out=out: _estimates(out, q), counters)
        for eps in EPSILONS:
            for trial in range(trials):
                pk, pv = pipelinedp_from_histogram(ds.items, ds.f, eps, DELTA, public=declared)
                add(PDP_PUBLIC, eps, lambda q, pk=pk, pv=pv: _lookup(pk, pv, q), len(declared))
                rk, rv = pdp_releases[(ds.name, eps, trial)]
                add(PDP, eps, lambda q, rk=rk, rv=rv: _lookup(rk, rv, q), len(ds.items))
        cells.extend(by_key.values())
    return cells, notes


def _add_point_queries(
    by_key: dict[tuple[str, float, str], FreqCell],
    ds: Dataset,
    groups: dict[str, np.ndarray],
    impl: str,
    eps: float,
    est_of: Callable[[np.ndarray], np.ndarray],
    counters: int | None,
) -> None:
    """Record one release's absolute and signed errors on every key set of ``groups``."""
    for g, q in groups.items():
        cell = by_key.setdefault((impl, eps, g), FreqCell(ds.name, impl, eps, g, counters=counters))
        err = est_of(q) - datasets.counts_of(ds.items, ds.f, q).astype(np.float64)
        cell.abs_err.append(float(np.mean(np.abs(err))))
        cell.signed_err.append(float(np.mean(err)))


def _frequencies_class() -> type:
    from beam_dpsketch.transforms import DPFrequencies

    return DPFrequencies


# ------------------------------------------------------------------------------------------------
# Goals, tables, plots
# ------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.{digits}g}"


def _goal(
    cells: list[Cell], impl: str, size_prefix: str, ratio: float, check_recall: bool
) -> dict[str, Any]:
    """Cells of ``impl`` at ``size_prefix`` against PipelineDP's, per (data set, eps, top)."""
    pdp = {(c.dataset, c.epsilon, c.top): c for c in cells if c.impl == PDP}
    ours = [c for c in cells if c.impl == impl and c.size.startswith(size_prefix)]
    recall_fail, mae_fail, ratios = [], [], []
    for c in ours:
        ref = pdp[(c.dataset, c.epsilon, c.top)]
        where = f"{c.dataset} eps={c.epsilon:g} top-{c.top}"
        if c.metric("recall") < ref.metric("recall") - RECALL_TOLERANCE:
            recall_fail.append(
                f"{where}: recall {c.metric('recall'):.3f} < {ref.metric('recall'):.3f}"
            )
        m, r = c.metric("mae"), ref.metric("mae")
        q = m / r if r > 0 and not math.isnan(m) else float("inf")
        ratios.append(q)
        if math.isnan(m):
            mae_fail.append(f"{where}: no true top-{c.top} key released (MAE {_fmt(r)})")
        elif not q <= ratio:
            mae_fail.append(f"{where}: MAE {_fmt(m)} vs {_fmt(r)} ({_fmt(q)}x)")
    met = not mae_fail and (not recall_fail or not check_recall)
    return {
        "impl": impl,
        "size": ours[0].size if ours else size_prefix,
        "cells": len(ours),
        "recall_fail": recall_fail,
        "mae_fail": mae_fail,
        "worst_ratio": max(ratios) if ratios else float("nan"),
        "median_ratio": float(np.median(ratios)) if ratios else float("nan"),
        "met": met and bool(ours),
    }


def _goal_lines(cells: list[Cell], defaults: dict[str, Any]) -> list[str]:
    impls = sorted({c.impl for c in cells if c.impl.startswith("beam-dpsketch")})
    default_impl = _impl(defaults["mechanism"])
    lines = [
        "| goal | method | size | cells | recall >= PipelineDP (-0.005) | MAE ratio median / "
        "worst | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    rows = [("CLI default: recall >= and MAE <= 1.5x", default_impl, "default", 1.5, True)]
    rows += [("best size: MAE <= 1x", impl, "best", BEST_MAE_RATIO, False) for impl in impls]
    rows += [
        ("default size: recall >= and MAE <= 1.5x", impl, "default", DEFAULT_MAE_RATIO, True)
        for impl in impls
        if impl != default_impl
    ]
    for name, impl, prefix, ratio, recall in rows:
        g = _goal(cells, impl, prefix, ratio, recall)
        if not g["cells"]:
            continue
        ok_recall = g["cells"] - len(g["recall_fail"])
        lines.append(
            f"| {name} | {impl} | {g['size']} | {g['cells']} | {ok_recall}/{g['cells']} | "
            f"{_fmt(g['median_ratio'])} / {_fmt(g['worst_ratio'])} | "
            f"{'MET' if g['met'] else 'NOT MET'} |"
        )
        fails = (g["recall_fail"] if recall else []) + g["mae_fail"]
        if fails and len(fails) <= 8:
            where = "CLI default" if (impl, prefix) == (default_impl, "default") else impl
            verdicts.append(f"- {where} ({g['size']}) misses in: {'; '.join(fails)}")
    return lines + [""] + verdicts


def _hh_table(cells: list[Cell], trials: int) -> list[str]:
    lines = [
        "| data set | method | size | eps | top | recall | precision | MAE | MRE | bias | "
        "counters | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = {name: i for i, name in enumerate(dict.fromkeys(c.dataset for c in cells))}
    for c in sorted(cells, key=lambda c: (order[c.dataset], c.top, c.epsilon, c.impl, c.size)):
        lines.append(
            f"| {c.dataset} | {c.impl} | {c.size} | {c.epsilon:g} | {c.top} | "
            f"{_fmt(c.metric('recall'))} | {_fmt(c.metric('precision'))} | "
            f"{_fmt(c.metric('mae'))} | {_fmt(c.metric('mre'))} | {_fmt(c.metric('bias'))} | "
            f"{_fmt(c.counters)} | {_fmt(c.seconds)} |"
        )
    return lines


def _freq_summary(cells: list[FreqCell]) -> list[str]:
    """Per method and key set: MAE relative to PipelineDP with the same keys public."""
    ref = {
        (c.dataset, c.epsilon, c.queries): _mean(c.abs_err) for c in cells if c.impl == PDP_PUBLIC
    }
    lines = [
        "| method | keys | MAE / PipelineDP public-partition MAE: median (min - max) over data "
        "sets and epsilons |",
        "|---|---|---|",
    ]
    for impl in dict.fromkeys(c.impl for c in cells if c.impl != PDP_PUBLIC):
        for queries in dict.fromkeys(c.queries for c in cells):
            r = [
                _mean(c.abs_err) / ref[(c.dataset, c.epsilon, c.queries)]
                for c in cells
                if c.impl == impl and c.queries == queries
            ]
            if r:
                lines.append(
                    f"| {impl} | {queries} | {_fmt(float(np.median(r)))} "
                    f"({_fmt(min(r))} - {_fmt(max(r))}) |"
                )
    return lines


def _freq_table(cells: list[FreqCell]) -> list[str]:
    lines = [
        "| data set | method | eps | keys | MAE | bias | counters |",
        "|---|---|---|---|---|---|---|",
    ]
    order = {name: i for i, name in enumerate(dict.fromkeys(c.dataset for c in cells))}
    for c in sorted(cells, key=lambda c: (order[c.dataset], c.queries, c.epsilon, c.impl)):
        lines.append(
            f"| {c.dataset} | {c.impl} | {c.epsilon:g} | {c.queries} | "
            f"{_fmt(_mean(c.abs_err))} | {_fmt(_mean(c.signed_err))} | {_fmt(c.counters)} |"
        )
    return lines


def plot(cells: list[Cell], freq: list[FreqCell], top: int, path: Path) -> Path:
    """Recall and MAE against epsilon (top-``top``) and point-query MAE, one column per data set.

    The last column holds the legends; one colour per method (and size), one line style per
    size (heavy hitters) or key set (point queries).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(c.dataset for c in cells))
    n = len(names)
    fig, axes = plt.subplots(
        3,
        n + 1,
        figsize=(6.2 * n + 4.6, 13),
        squeeze=False,
        gridspec_kw={"width_ratios": [1.0] * n + [0.75]},
    )
    palette = plt.get_cmap("tab20").colors
    series = sorted({(c.impl, c.size) for c in cells if c.impl != PDP_FULL})
    freq_impls = list(dict.fromkeys(c.impl for c in freq))
    mechs = list(dict.fromkeys(impl for impl, _ in series if impl != PDP))
    for j, name in enumerate(names):
        for s_i, (impl, size) in enumerate(series):
            pts = sorted(
                (c.epsilon, c.metric("recall"), c.metric("mae"))
                for c in cells
                if c.dataset == name and c.top == top and c.impl == impl and c.size == size
            )
            if not pts:
                continue
            xs, rec, mae = zip(*pts, strict=True)
            is_pdp = impl == PDP
            style = "--" if is_pdp else ("-o" if size.startswith("default") else ":s")
            # One hue per method: dark at the default size, light at the best size.
            m_i = mechs.index(impl) if impl in mechs else s_i
            shade = 0 if size.startswith("default") else 1
            color = "black" if is_pdp else palette[(2 * m_i + shade) % len(palette)]
            label = "PipelineDP 0.3.1" if is_pdp else f"{impl.split(' ', 1)[1]} ({size})"
            axes[0][j].plot(xs, rec, style, color=color, label=label)
            axes[1][j].plot(xs, mae, style, color=color, label=label)
        for f_i, impl in enumerate(freq_impls):
            for queries in dict.fromkeys(c.queries for c in freq):
                pts = sorted(
                    (c.epsilon, _mean(c.abs_err))
                    for c in freq
                    if c.dataset == name and c.impl == impl and c.queries == queries
                )
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    style = "-o" if queries.startswith("true") else ":x"
                    color = palette[(2 * f_i) % len(palette)]
                    axes[2][j].plot(xs, ys, style, color=color, label=f"{impl}, {queries}")
        axes[0][j].set_title(f"{name}: recall of the true top-{top}")
        axes[1][j].set_title(f"{name}: MAE, released true top-{top} keys")
        axes[2][j].set_title(f"{name}: point-query MAE")
        for i in range(3):
            axes[i][j].set_xscale("log")
            axes[i][j].set_xlabel("epsilon (delta = 1e-6)")
            axes[i][j].grid(True, which="both", alpha=0.3)
        axes[0][j].set_ylim(-0.02, 1.02)
        axes[1][j].set_yscale("log")
        axes[2][j].set_yscale("log")
    for i, source in ((0, 0), (1, None), (2, 2)):
        axes[i][n].axis("off")
        if source is not None:
            handles, labels = axes[source][0].get_legend_handles_labels()
            axes[i][n].legend(handles, labels, loc="center left", fontsize=7, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def _machine() -> str:
    from benchmarks.run import _machine as machine

    return machine()


def run(quick: bool = False) -> str:
    """The whole section as Markdown (the heading is added by ``benchmarks/run.py``)."""
    started = time.perf_counter()
    trials = QUICK_TRIALS if quick else TRIALS
    hh_defaults = cli_heavy_hitter_defaults()
    freq_defaults = cli_frequency_defaults()
    data = load_datasets(quick)
    with tempfile.TemporaryDirectory() as tmp:
        cells, pdp_releases = heavy_hitters(data, trials, hh_defaults, Path(tmp))
    freq, notes = point_queries(data, trials, freq_defaults, pdp_releases)
    plot_path = plot(cells, freq, max(TOPS), PLOTS / "accuracy_vs_pipelinedp.png")
    print(f"  wrote {plot_path}", file=sys.stderr)
    total = time.perf_counter() - started
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mechanisms = ", ".join(f"`{m}`" for m in element_mechanisms())
    data_lines = [
        f"- {ds.name}: {ds.note}; {len(ds.keys):,} elements, {len(ds.items):,} distinct keys"
        for ds in data
    ]
    out = [
        f"Run on {now}; {_machine()}; {total / 60:.1f} min in one process "
        f"({'--quick: small data' if quick else 'full size'}).",
        "",
        "Setup (details in `benchmarks/bench_accuracy.py`): element-level DP (add/remove one "
        f"element), delta = {DELTA:g}, epsilon in {{{', '.join(f'{e:g}' for e in EPSILONS)}}}, "
        f"top {', '.join(map(str, TOPS))}; {trials} seeded releases per cell (means). Our "
        f"mechanisms (element level, read from `MECHANISMS` at run time): {mechanisms}; sizes: "
        f"the CLI default `--k {hh_defaults['k']}` (default mechanism `{hh_defaults['mechanism']}`"
        f", `--max-shards {hh_defaults['max_shards']}`) and the best size k = {BEST_K:,} "
        f"(exact sketches on both data sets; not for {', '.join(_NOISE_GROWS_WITH_K)}, whose "
        f"noise grows with k); {SEGMENTS} segments (Beam accumulators) per window. PipelineDP 0.3.1: COUNT, Laplace, private partition selection, the same total "
        "budget, its exact histogram (counters = distinct keys); seconds of PipelineDP are one "
        f"full `LocalBackend` run at eps = {TIMING_EPSILON:g}, ours are building the aggregate "
        "single-threaded plus one release. MAE, MRE and bias are over the reported top-t keys "
        "that are in the true top-t.",
        "",
        *data_lines,
        "",
        "### Goals",
        "",
        *_goal_lines(cells, hh_defaults),
        "",
        "![recall, MAE and point-query MAE against epsilon](plots/accuracy_vs_pipelinedp.png)",
        "",
        f"### Heavy hitters ({trials} trials per cell)",
        "",
        *_hh_table(cells, trials),
        "",
        "### Point queries (MAE of the estimated counts)",
        "",
        f"`frequencies` CLI defaults: {freq_defaults}. PipelineDP with private partition "
        "selection reads 0 for the keys it does not release.",
        "",
        *notes,
        *_freq_summary(freq),
        "",
        *_freq_table(freq),
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    # Run the importable module (not __main__): Beam pickles its functions by module name.
    module = importlib.import_module("benchmarks.bench_accuracy")
    print(f"## {TITLE}\n\n" + module.run("--quick" in sys.argv[1:]))
