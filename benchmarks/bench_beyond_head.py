"""Beyond the head: what a user gets past the top keys, at the defaults, against PipelineDP 0.3.1.

``python -m benchmarks.run --only "Beyond the head"`` writes the section into
``benchmarks/RESULTS.md`` and the plot ``benchmarks/plots/beyond_the_head.png``;
``python -m benchmarks.bench_beyond_head [--quick] [--trials N] [--only PART,...]`` prints it;
``--only`` measures only the named parts of :data:`PARTS` (``heavy``, ``points``, ``quantiles``,
``user``, ``scale``) and leaves the others' rows out, to rerun one part alone. Every finished
cell prints one line on stderr with the time elapsed since the section started.

Every figure is measured with the defaults committed when it runs: the heavy-hitter mechanism
and ``--k`` of ``beam-dpsketch heavy-hitters`` and the sketch, width, depth and seed of
``beam-dpsketch frequencies``, read from their parsers (see
:func:`benchmarks.bench_accuracy.cli_heavy_hitter_defaults`), and PipelineDP 0.3.1 in the same
run at the same ``(epsilon, delta = 1e-6)``, one element per privacy unit.

Data (element level):

* **words**: 1.8 M i.i.d. draws (seed 0) from wordfreq 3.1.1's English ``large_en`` frequencies
  (:func:`beam_dpsketch.evaluation.datasets.word_stream`);
* **names**: 3.8 M i.i.d. draws (seed 0) from the 1990 US census surname table of PyPI
  ``names==0.3.0`` (:func:`beam_dpsketch.evaluation.datasets.name_stream`), 88,799 names.

Measures, each with the goal the project set itself (the goal table says MET or NOT MET):

* **keys released** by the CLI's default heavy-hitter release (every key it releases, what
  ``--top all`` prints; the other element-level mechanisms of ``MECHANISMS`` at the same ``k``
  are in the table, for their error bars) against PipelineDP's COUNT with private partition selection, eps 0.1
  and 1: at least as many; **recall@1000** (share of the true top 1,000 released): >= 0.95
  wherever PipelineDP's is; **MAE on released keys** (mean ``|estimate - count|`` over every key
  released, per release, averaged): <= 1.1x PipelineDP's;
* **point-query MAE** of ``DPFrequencies`` with the keys declared (``query_keys``: the keys
  named by ``frequencies --query`` are counted exactly unless a sketch option is given), and of
  the sketch at the CLI's default kind, width, depth and seed and of the other kind (what
  answers keys not known before the run), on the true top 100 keys and 100 random keys (seeded): <= 1.5x PipelineDP's COUNT with the same keys as
  public partitions (:func:`benchmarks.bench_accuracy.pipelinedp_from_histogram`);
* **error bars**: for every mechanism above (each heavy-hitter mechanism, each point-query
  configuration), the share of released values within their stated 95 % bound (goal 93-97 %) and the median stated bound over the
  actual 95th-percentile absolute error (goal <= 3);
* **quantile rank error** on a 20 M-wide range, eps 0.1 and 1
  (:func:`benchmarks.bench_quantiles_wide.bench_wide_quantiles`): ``DPQuantiles`` default
  <= 1x PipelineDP's ``PERCENTILE``;
* **user level** on the ratings set of :mod:`benchmarks.bench_user_level` (m = 5 and 20, eps 4):
  every bounded-memory user-level mechanism releases at least half as many keys as
  ``user-exact`` (and PipelineDP's count is shown);
* **peak memory** of the default ``heavy-hitters`` command on 10^8 rows of Zipf(1.1) keys folded
  onto 10^7 values (<= 512 MiB), and its **speed** on 3 * 10^7 rows folded onto 10^4 values
  (no slower than 9 M rows/s, the figure measured before), each in a fresh process through
  :func:`benchmarks.bench_scale.run_cli`.

Our noise is seeded (``NoiseSource.insecure_for_tests(trial)``); PipelineDP draws from its own
generator. ``--quick`` runs every part on small inputs (300,000 rows per stream, 2 trials,
2 * 10^6 rows for memory and speed) to check the section's structure, not its numbers.
"""

from __future__ import annotations

import datetime as dt
import importlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from reproduction import datasets

TITLE = "Beyond the head vs PipelineDP 0.3.1: keys, point queries, error bars, quantiles, scale"
EPSILONS = (0.1, 1.0)
DELTA = 1e-6
TRIALS = 20
QUICK_TRIALS = 2
WORDS_N = 1_800_000
NAMES_N = 3_800_000
QUICK_N = 300_000
RECALL_AT = 1000
FREQ_TOP = 100
RANDOM_KEYS = 100
CONFIDENCE = 0.95
COVERAGE_GOAL = (0.93, 0.97)
WIDTH_GOAL = 3.0
KEYS_MAE_RATIO = 1.1
POINT_MAE_RATIO = 1.5
RECALL_GOAL = 0.95
USER_BOUNDS = (5, 20)
USER_EPSILON = 4.0
USER_SHARE = 0.5
MEMORY_ROWS, MEMORY_DISTINCT = 100_000_000, 10_000_000
SPEED_ROWS, SPEED_DISTINCT = 30_000_000, 10_000
QUICK_SCALE_ROWS = 2_000_000
STARTUP_ROWS = 10_000
MEMORY_GOAL_MIB = 512.0
SPEED_GOAL = 9e6  # rows/s of the default heavy-hitters command measured before this section
PLOT = Path(__file__).with_name("plots") / "beyond_the_head.png"
PDP = "PipelineDP 0.3.1"
DEFAULT_HH = "beam-dpsketch heavy-hitters default"
#: The section's parts, in the order they run; ``--only`` picks among them.
PARTS = ("heavy", "points", "quantiles", "user", "scale")


def progress(what: str, started: float) -> None:
    """One line on stderr: ``what`` has finished, and the minutes and seconds since ``started``
    (a ``time.perf_counter()`` reading): long runs show where they are."""
    minutes, seconds = divmod(time.perf_counter() - started, 60.0)
    print(f"  [{int(minutes)}:{seconds:04.1f}] {what}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def load_streams(quick: bool) -> list[Any]:
    """The words and names streams as :class:`benchmarks.bench_accuracy.Dataset`\\ s."""
    from benchmarks.bench_accuracy import Dataset

    words_n, names_n = (QUICK_N, QUICK_N) if quick else (WORDS_N, NAMES_N)
    words = datasets.word_stream(words_n, 0, datasets.load_word_frequencies())
    names = datasets.name_stream(names_n, 0, datasets.load_name_frequencies())
    return [
        Dataset("words", words.astype(np.int64), f"wordfreq 3.1.1 large_en, {words_n:,} draws"),
        Dataset("names", names.astype(np.int64), f"US census surnames, {names_n:,} draws"),
    ]


# ------------------------------------------------------------------------------------------------
# Cells
# ------------------------------------------------------------------------------------------------


@dataclass
class Cell:
    """One (data set, method, epsilon[, key set]) over its trials."""

    dataset: str
    impl: str
    epsilon: float
    queries: str = ""
    keys: list[float] = field(default_factory=list)
    recall: list[float] = field(default_factory=list)
    mae: list[float] = field(default_factory=list)
    abs_err: list[np.ndarray] = field(default_factory=list)
    bounds: list[np.ndarray] = field(default_factory=list)

    def mean(self, name: str) -> float:
        values = getattr(self, name)
        return float(np.mean(values)) if values else float("nan")

    def coverage(self) -> float:
        """Share of released values within their stated bound (NaN when none is stated)."""
        if not self.bounds:
            return float("nan")
        err, bound = np.concatenate(self.abs_err), np.concatenate(self.bounds)
        return float(np.mean(err <= bound)) if len(err) else float("nan")

    def width(self) -> float:
        """Median stated bound over the actual 95th-percentile absolute error."""
        if not self.bounds:
            return float("nan")
        err, bound = np.concatenate(self.abs_err), np.concatenate(self.bounds)
        p95 = float(np.quantile(err, CONFIDENCE)) if len(err) else float("nan")
        return float(np.median(bound)) / p95 if p95 > 0 else float("inf")


def _record_arrays(records: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Keys, values and stated error bounds (``None`` if a record states none) of a release."""
    keys = np.asarray([int(r[0]) for r in records], dtype=np.int64)
    values = np.asarray([float(r[1]) for r in records], dtype=np.float64)
    bounds = [getattr(r, "error_bound", None) for r in records]
    if not records or any(b is None for b in bounds):
        return keys, values, None
    return keys, values, np.asarray(bounds, dtype=np.float64)


def _score(cell: Cell, ds: Any, keys: np.ndarray, values: np.ndarray, bounds: Any) -> None:
    true = datasets.counts_of(ds.items, ds.f, keys).astype(np.float64)
    err = np.abs(values - true)
    top = datasets.top_k(ds.items, ds.f, RECALL_AT)
    cell.keys.append(float(len(keys)))
    cell.recall.append(float(np.isin(top, keys).sum()) / len(top))
    cell.mae.append(float(err.mean()) if len(err) else float("nan"))
    cell.abs_err.append(err)
    if bounds is not None:
        cell.bounds.append(np.broadcast_to(np.asarray(bounds, dtype=np.float64), err.shape))


#: Mechanisms whose release adds one noise draw shared by every released key (PMG's), and the
#: seeded releases each of their cells gets whatever ``--trials`` says: at 20 releases the
#: spread of per-release coverage (standard deviation about 0.12) alone moves a cell's
#: coverage by about 2.7 points.
SHARED_DRAW = ("sequential",)
SHARED_DRAW_TRIALS = 200


def heavy_hitter_cells(
    data: list[Any],
    trials: int,
    defaults: dict[str, Any],
    quick: bool = False,
    started: float | None = None,
) -> list[Cell]:
    """Every element-level heavy-hitter release at the CLI's ``k`` (all its keys; the default
    mechanism first, its label starting with :data:`DEFAULT_HH`) and PipelineDP's, per data
    set and eps. ``quick``: the default and one other mechanism (a structure check).
    ``started``: the clock :func:`progress` counts from (default: now)."""
    from benchmarks.bench_accuracy import (
        element_mechanisms,
        pipelinedp_from_histogram,
        sketch_layer_driver,
    )

    default, k, max_shards = defaults["mechanism"], defaults["k"], defaults["max_shards"]
    mechanisms = [default] + [m for m in element_mechanisms() if m != default]
    if quick:
        mechanisms = mechanisms[:2]
    started = time.perf_counter() if started is None else started
    cells: list[Cell] = []
    for ds in data:
        start = time.perf_counter()
        for eps in EPSILONS:
            pdp = Cell(ds.name, PDP, eps)
            for _ in range(trials):
                rk, rv = pipelinedp_from_histogram(ds.items, ds.f, eps, DELTA)
                _score(pdp, ds, rk, rv, None)
            cells.append(pdp)
            progress(f"heavy hitters {ds.name}, {PDP}, eps {eps:g}", started)
        design_b: dict[int, tuple[Any, float]] = {}  # shared: select-then-count selects from it
        for mechanism in mechanisms:
            if mechanism == default:
                impl = f"{DEFAULT_HH} ({mechanism}, k={k:,})"
            else:
                impl = f"beam-dpsketch {mechanism} (k={k:,})"
            driver = sketch_layer_driver(mechanism, k, ds, max_shards, design_b, raw=True)
            if driver is None:
                if mechanism == default:
                    raise RuntimeError(f"the default {mechanism!r} has no driver without Beam")
                print(f"  {mechanism}: runs on Beam only, not measured here", file=sys.stderr)
                continue
            release = driver[0]
            # One shared draw moves every value of a release together, so the coverage of its
            # bound varies from release to release far more than across keys: its cells need
            # many more seeded releases for a coverage figure that means anything.
            runs = (
                max(trials, SHARED_DRAW_TRIALS)
                if mechanism in SHARED_DRAW and not quick
                else trials
            )
            for eps in EPSILONS:
                ours = Cell(ds.name, impl, eps)
                for trial in range(runs):
                    _score(ours, ds, *_record_arrays(release(eps, trial)))
                cells.append(ours)
                progress(f"heavy hitters {ds.name}, {mechanism}, eps {eps:g}", started)
        print(f"  heavy hitters {ds.name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return cells


def point_query_cells(
    data: list[Any], trials: int, defaults: dict[str, Any], started: float | None = None
) -> list[Cell]:
    """``DPFrequencies`` at the CLI defaults, the other sketch and declared keys; PipelineDP
    with the same keys as public partitions. ``started``: as for :func:`heavy_hitter_cells`."""
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPFrequencies
    from benchmarks.bench_accuracy import drive_combine, pipelinedp_from_histogram

    width, depth, seed = defaults["width"], defaults["depth"], defaults["seed"]
    kinds = [defaults["sketch"]] + [
        s for s in ("count-min", "count-sketch") if s != defaults["sketch"]
    ]
    started = time.perf_counter() if started is None else started
    cells: list[Cell] = []
    for ds in data:
        rng = np.random.default_rng(0)
        groups = {
            f"top {FREQ_TOP}": datasets.top_k(ds.items, ds.f, FREQ_TOP),
            f"{RANDOM_KEYS} random": rng.choice(ds.items, RANDOM_KEYS, replace=False),
        }
        declared = np.concatenate(list(groups.values()))
        configs: list[tuple[str, Callable[[float], Any]]] = []
        for kind in kinds:
            cli = ", default sketch" if kind == defaults["sketch"] else ""
            configs.append(
                (
                    f"DPFrequencies {kind} {depth}x{width}{cli}",
                    lambda eps, kind=kind: DPFrequencies(
                        width, depth, PrivacyBudget.approx(eps, DELTA), sketch=kind, seed=seed
                    ),
                )
            )
        configs.append(
            (
                "DPFrequencies query_keys (declared keys, as frequencies --query runs)",
                lambda eps, declared=declared: DPFrequencies(
                    budget=PrivacyBudget.approx(eps, DELTA), query_keys=declared.tolist()
                ),
            )
        )
        parts = [
            [seg[i : i + (1 << 16)] for i in range(0, len(seg), 1 << 16)]
            for seg in np.array_split(ds.keys, 4)
        ]
        for impl, make in configs:
            aggregate = drive_combine(make(1.0).aggregate.combine_fn, parts)
            for eps in EPSILONS:
                mech = make(eps).aggregate.mechanism
                by_group = {g: Cell(ds.name, impl, eps, g) for g in groups}
                for trial in range(trials):
                    stream = NoiseSource.insecure_for_tests(trial).stream(
                        ("bench-beyond-head-freq", ds.name, impl, repr(eps))
                    )
                    out = mech.release(aggregate, PrivacyBudget.approx(eps, DELTA), stream)[0]
                    for g, q in groups.items():
                        est = np.asarray(out.estimate(q.tolist()), dtype=np.float64)
                        _score(by_group[g], ds, q, est, out.error_bound(CONFIDENCE))
                cells += by_group.values()
                progress(f"point queries {ds.name}, {impl}, eps {eps:g}", started)
        for eps in EPSILONS:
            by_group = {g: Cell(ds.name, f"{PDP} public partitions", eps, g) for g in groups}
            for _ in range(trials):
                pk, pv = pipelinedp_from_histogram(ds.items, ds.f, eps, DELTA, public=declared)
                lookup = dict(zip(pk.tolist(), pv.tolist(), strict=True))
                for g, q in groups.items():
                    est = np.asarray([lookup.get(x, 0.0) for x in q.tolist()])
                    _score(by_group[g], ds, q, est, None)
            cells += by_group.values()
            progress(f"point queries {ds.name}, {PDP} public partitions, eps {eps:g}", started)
    return cells


def quantile_rows(quick: bool, trials: int) -> list[dict]:
    """Rank error on the 20 M-wide range, ours and PipelineDP (bench_quantiles_wide)."""
    from benchmarks.bench_quantiles_wide import bench_wide_quantiles

    return bench_wide_quantiles(quick, trials, EPSILONS)


def user_level_rows(quick: bool, trials: int, started: float | None = None) -> list[dict]:
    """Keys released at user level (m in USER_BOUNDS, eps USER_EPSILON) per mechanism.
    ``started``: as for :func:`heavy_hitter_cells`."""
    from beam_dpsketch.transforms.heavy_hitters import MECHANISMS
    from benchmarks.bench_accuracy import element_mechanisms
    from benchmarks.bench_user_level import bounded, pipelinedp, ratings, release

    element = set(element_mechanisms())
    user = [m for m in MECHANISMS if m not in element or m == "select-then-count"]
    started = time.perf_counter() if started is None else started
    users = ratings()
    rows = []
    for m in USER_BOUNDS:
        units = bounded(users, m, seed=m)
        for mechanism in user:
            n = trials
            counts = []
            for trial in range(n):
                try:
                    counts.append(len(release(mechanism, m, USER_EPSILON, units, trial)))
                except (ValueError, TypeError) as exc:
                    print(f"  user level {mechanism}: {exc}", file=sys.stderr)
                    break
            if counts:
                rows.append({"m": m, "impl": mechanism, "keys": float(np.mean(counts)), "n": n})
            progress(f"user level m={m}, {mechanism}", started)
        pdp = [len(pipelinedp(users, m, USER_EPSILON)) for _ in range(min(trials, 5))]
        rows.append({"m": m, "impl": PDP, "keys": float(np.mean(pdp)), "n": len(pdp)})
    return rows


def scale_rows(quick: bool) -> list[dict]:
    """Peak memory (10^8 rows, 10^7 values) and speed (3 * 10^7 rows) of the default command.

    Each row also carries ``startup``: the wall seconds of the same command on
    :data:`STARTUP_ROWS` rows (interpreter, Beam and pipeline start-up, nearly no data), so
    that the rate can be stated with and without that fixed cost.
    """
    from benchmarks.bench_scale import COMMANDS, run_cli, write_keys

    command, args = COMMANDS["heavy-hitters"]
    memory = (QUICK_SCALE_ROWS, QUICK_SCALE_ROWS // 10) if quick else (MEMORY_ROWS, MEMORY_DISTINCT)
    speed = (QUICK_SCALE_ROWS, SPEED_DISTINCT) if quick else (SPEED_ROWS, SPEED_DISTINCT)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "startup.parquet"
        write_keys(small, STARTUP_ROWS, 1000, seed=0)
        try:
            # The shortest of two runs: start-up varies with the machine's load.
            startup = min(run_cli(command, args(STARTUP_ROWS), small)[0] for _ in range(2))
        except RuntimeError:
            startup = float("nan")
        for what, (n, distinct) in (("peak memory", memory), ("speed", speed)):
            path = Path(tmp) / f"keys_{n}_{distinct}.parquet"
            write_keys(path, n, distinct, seed=0)
            row: dict[str, Any] = {"what": what, "rows": n, "distinct": distinct}
            try:
                seconds, peak = run_cli(command, args(n), path)
                if what == "speed":  # the faster of two runs, as for start-up
                    seconds = min(seconds, run_cli(command, args(n), path)[0])
            except RuntimeError as exc:
                # A failed run is a result too: the goal row says NOT MET and why.
                seconds, peak, row["error"] = float("nan"), float("nan"), str(exc)
            path.unlink()
            rows.append({**row, "seconds": seconds, "peak": peak, "startup": startup})
            print(f"  {what}: {n:,} rows {seconds:.1f} s {peak:.0f} MiB", file=sys.stderr)
    return rows


# ------------------------------------------------------------------------------------------------
# Goals, tables, plot
# ------------------------------------------------------------------------------------------------


def _f(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and (np.isnan(x))):
        return "-"
    if isinstance(x, float) and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds / 1e6:.2f} M" if seconds > 0 else "-"


def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def goal_rows(
    hh: list[Cell],
    freq: list[Cell],
    quantiles: list[dict],
    user: list[dict],
    scale: list[dict],
) -> list[tuple[str, str, str, bool]]:
    """``(measure, goal, measured, met)`` per row of the goal table."""
    rows: list[tuple[str, str, str, bool]] = []
    pdp = {(c.dataset, c.epsilon): c for c in hh if c.impl == PDP}
    ours = [c for c in hh if c.impl.startswith(DEFAULT_HH)]
    cells = [(c, pdp[(c.dataset, c.epsilon)]) for c in ours]
    keys = [f"{c.dataset} eps {c.epsilon:g}: {_f(c.mean('keys'))} vs {_f(p.mean('keys'))}"
            for c, p in cells]  # fmt: skip
    # A measure without cells is not met (nothing was measured).
    ok = bool(cells) and all(c.mean("keys") >= p.mean("keys") for c, p in cells)
    rows.append(("keys released, heavy hitters", ">= PipelineDP", "; ".join(keys), ok))
    rec = [
        f"{c.dataset} eps {c.epsilon:g}: {_f(c.mean('recall'))} vs {_f(p.mean('recall'))}"
        for c, p in cells
    ]
    ok = bool(cells) and all(
        c.mean("recall") >= RECALL_GOAL for c, p in cells if p.mean("recall") >= RECALL_GOAL
    )
    rows.append(("recall@1000", f">= {RECALL_GOAL} where PipelineDP's is", "; ".join(rec), ok))
    ratios = [c.mean("mae") / p.mean("mae") for c, p in cells]
    ok = bool(ratios) and all(r <= KEYS_MAE_RATIO for r in ratios)
    mae = "; ".join(
        f"{c.dataset} eps {c.epsilon:g}: {_f(r)}x" for (c, _), r in zip(cells, ratios, strict=True)
    )
    rows.append(("MAE on released keys", f"<= {KEYS_MAE_RATIO}x PipelineDP", mae, ok))
    ref = {(c.dataset, c.epsilon, c.queries): c.mean("mae") for c in freq if c.impl.startswith(PDP)}
    for impl in dict.fromkeys(c.impl for c in freq if not c.impl.startswith(PDP)):
        r = [c.mean("mae") / ref[(c.dataset, c.epsilon, c.queries)] for c in freq if c.impl == impl]
        rows.append(
            (
                f"point-query MAE, {impl}",
                f"<= {POINT_MAE_RATIO}x PipelineDP public partitions",
                f"{_f(min(r))}-{_f(max(r))}x (median {_f(float(np.median(r)))}) over data sets, "
                "eps 0.1/1, top and random keys",
                max(r) <= POINT_MAE_RATIO,
            )
        )
    lo, hi = COVERAGE_GOAL
    for impl in dict.fromkeys(c.impl for c in hh + freq if c.bounds):
        group = [c for c in hh + freq if c.impl == impl and c.bounds]
        cov = [c.coverage() for c in group]
        wid = [c.width() for c in group]
        ok = all(lo <= v <= hi for v in cov) and all(w <= WIDTH_GOAL for w in wid)
        rows.append(
            (
                f"error bars, {impl}",
                f"coverage {lo:.0%}-{hi:.0%}, width <= {WIDTH_GOAL:g}x actual p95",
                f"coverage {min(cov):.1%}-{max(cov):.1%}, width {_f(min(wid))}-{_f(max(wid))}x",
                ok,
            )
        )
    # A release of no key states no bound; a mechanism silent in every cell is named as such.
    unbounded = [c.impl for c in hh if c.impl != PDP and sum(c.keys) and not c.bounds]
    for impl in dict.fromkeys(unbounded):
        rows.append((f"error bars, {impl}", "a bound on every value", "none stated", False))
    spoken = {c.impl for c in hh if sum(c.keys)}
    silent = [c.impl for c in hh if c.impl != PDP and c.keys and c.impl not in spoken]
    for impl in dict.fromkeys(silent):
        rows.append((f"error bars, {impl}", "a bound on every value", "no key released", False))
    default = [
        r for r in quantiles if "DPQuantiles (default)" in r["impl"] and "ratio_to_pipelinedp" in r
    ]
    if default:
        qr = [r["ratio_to_pipelinedp"] for r in default]
        by_kind = "; ".join(
            f"{kind} budget {_f(min(v))}-{_f(max(v))}x"
            for kind in ("pure", "approx")
            if (v := [r["ratio_to_pipelinedp"] for r in default if r["impl"].endswith(kind)])
        )
        rows.append(
            (
                "quantile rank error, 20 M-wide range, eps 0.1/1",
                "<= 1x PipelineDP",
                f"DPQuantiles default, both data sets: {by_kind}",
                max(qr) <= 1.0,
            )
        )
    exact = {r["m"]: r["keys"] for r in user if r["impl"] == "user-exact"}
    for r in user:
        if r["impl"] in ("user-exact", PDP) or r["m"] not in exact:
            continue
        rows.append(
            (
                f"user level m={r['m']}, {r['impl']}, eps {USER_EPSILON:g}",
                f">= {USER_SHARE:g}x user-exact's keys",
                f"{_f(r['keys'])} vs {_f(exact[r['m']])}",
                r["keys"] >= USER_SHARE * exact[r["m"]],
            )
        )
    for r in scale:
        if "error" in r:
            rows.append((f"{r['what']}, heavy-hitters, {r['rows']:,} rows", "", r["error"], False))
        elif r["what"] == "peak memory":
            rows.append(
                (
                    f"peak memory, heavy-hitters, {r['rows']:,} rows, {r['distinct']:,} values",
                    f"<= {MEMORY_GOAL_MIB:.0f} MiB",
                    f"{r['peak']:.0f} MiB",
                    r["peak"] <= MEMORY_GOAL_MIB,
                )
            )
        else:
            # The rate past start-up: the figure it is compared with counts rows per second of
            # reading and sketching, and start-up is a fixed cost whatever the input.
            past = r["seconds"] - r["startup"]
            rate = r["rows"] / past if past > 0 else float("nan")
            rows.append(
                (
                    f"CLI speed, default heavy-hitters, {r['rows']:,} rows",
                    f">= {SPEED_GOAL / 1e6:g} M rows/s past start-up",
                    f"{rate / 1e6:.2f} M rows/s past {r['startup']:.1f} s of start-up "
                    f"({r['rows'] / r['seconds'] / 1e6:.2f} M rows/s wall)",
                    rate >= SPEED_GOAL,
                )
            )
    return rows


def _hh_table(hh: list[Cell]) -> list[str]:
    lines = [
        "| data set | method | eps | keys released | recall@1000 | MAE on released keys | "
        "coverage | bound / p95 error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in hh:
        lines.append(
            f"| {c.dataset} | {c.impl} | {c.epsilon:g} | {_f(c.mean('keys'))} | "
            f"{_f(c.mean('recall'))} | {_f(c.mean('mae'))} | {_f(c.coverage())} | "
            f"{_f(c.width())} |"
        )
    return lines


def _freq_table(freq: list[Cell]) -> list[str]:
    lines = [
        "| data set | method | eps | keys | MAE | coverage | bound / p95 error |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in freq:
        lines.append(
            f"| {c.dataset} | {c.impl} | {c.epsilon:g} | {c.queries} | {_f(c.mean('mae'))} | "
            f"{_f(c.coverage())} | {_f(c.width())} |"
        )
    return lines


def plot(hh: list[Cell], freq: list[Cell], path: Path = PLOT) -> Path:
    """Keys released, recall@1000, point-query MAE ratio and error-bar coverage, as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    labels = [f"{c.dataset}\neps {c.epsilon:g}" for c in hh if c.impl == PDP]
    x = np.arange(len(labels))
    impls = list(
        dict.fromkeys(c.impl for c in hh if c.impl == PDP or c.impl.startswith(DEFAULT_HH))
    )
    for i, impl in enumerate(impls):
        group = [c for c in hh if c.impl == impl]
        name = "PipelineDP 0.3.1" if impl == PDP else "beam-dpsketch default"
        off = (i - (len(impls) - 1) / 2) * 0.38
        axes[0].bar(x + off, [c.mean("keys") for c in group], 0.38, label=name)
        axes[1].bar(x + off, [c.mean("recall") for c in group], 0.38, label=name)
    axes[0].set_yscale("log")
    axes[0].set_title("heavy hitters: keys released")
    axes[1].axhline(RECALL_GOAL, color="grey", ls="--", lw=1)
    axes[1].set_title("heavy hitters: recall@1000")
    for ax in axes[:2]:
        ax.set_xticks(x, labels, fontsize=8)
        ax.legend(fontsize=8)
    ref = {(c.dataset, c.epsilon, c.queries): c.mean("mae") for c in freq if c.impl.startswith(PDP)}
    ours = [c for c in freq if not c.impl.startswith(PDP)]
    cell_labels = list(dict.fromkeys((c.dataset, c.epsilon, c.queries) for c in ours))
    xf = np.arange(len(cell_labels))
    freq_impls = list(dict.fromkeys(c.impl for c in ours))
    width = 0.8 / max(len(freq_impls), 1)
    for i, impl in enumerate(freq_impls):
        by = {(c.dataset, c.epsilon, c.queries): c for c in ours if c.impl == impl}
        ys = [by[k].mean("mae") / ref[k] if k in by else np.nan for k in cell_labels]
        axes[2].bar(xf + (i - (len(freq_impls) - 1) / 2) * width, ys, width, label=impl)
    axes[2].axhline(POINT_MAE_RATIO, color="grey", ls="--", lw=1)
    axes[2].set_yscale("log")
    axes[2].set_xticks(xf, [f"{d} {e:g}\n{q}" for d, e, q in cell_labels], fontsize=6)
    axes[2].set_title("point queries: MAE / PipelineDP public partitions")
    axes[2].legend(fontsize=6)
    bounded = [c for c in hh + freq if c.bounds]
    names = list(dict.fromkeys(c.impl for c in bounded))
    for i, impl in enumerate(names):
        cov = [c.coverage() for c in bounded if c.impl == impl]
        axes[3].scatter([i] * len(cov), cov, s=18)
    axes[3].axhspan(*COVERAGE_GOAL, color="green", alpha=0.15, label="goal 93-97 %")
    axes[3].set_xticks(np.arange(len(names)), [n.replace(" ", "\n", 2) for n in names], fontsize=6)
    lowest = min((c.coverage() for c in bounded), default=0.9)
    axes[3].set_ylim(min(0.85, lowest - 0.02), 1.005)
    axes[3].set_title("error bars: coverage of the stated 95 % bound")
    axes[3].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------------
# Entry points
# ------------------------------------------------------------------------------------------------


def _commit() -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(
    quick: bool = False,
    trials: int | None = None,
    plot_path: Path = PLOT,
    only: Sequence[str] | None = None,
) -> str:
    """The whole section as Markdown (the heading is added by ``benchmarks/run.py``); the plot
    goes to ``plot_path``. ``only``: the parts of :data:`PARTS` to measure (default: all); the
    others' rows are left out of the tables and the goal table, and the plot (which shows
    both) is drawn only when heavy hitters and point queries were both measured."""
    from benchmarks.bench_accuracy import cli_frequency_defaults, cli_heavy_hitter_defaults
    from benchmarks.run import machine

    started = time.perf_counter()
    parts = PARTS if only is None else tuple(only)
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ValueError(f"only must name parts among {', '.join(PARTS)}")
    trials = trials or (QUICK_TRIALS if quick else TRIALS)
    hh_defaults = cli_heavy_hitter_defaults()
    freq_defaults = cli_frequency_defaults()
    data = load_streams(quick) if {"heavy", "points"} & set(parts) else []
    hh = heavy_hitter_cells(data, trials, hh_defaults, quick, started) if "heavy" in parts else []
    freq = point_query_cells(data, trials, freq_defaults, started) if "points" in parts else []
    quantiles = quantile_rows(quick, trials) if "quantiles" in parts else []
    if "quantiles" in parts:
        progress("quantiles", started)
    user = user_level_rows(quick, trials, started) if "user" in parts else []
    scale = scale_rows(quick) if "scale" in parts else []
    if "scale" in parts:
        progress("memory and speed", started)
    if "heavy" in parts and "points" in parts:
        path = plot(hh, freq, plot_path)
        print(f"  wrote {path}", file=sys.stderr)
    goals = goal_rows(hh, freq, quantiles, user, scale)
    measured = "" if only is None else f" Parts measured: {', '.join(parts)} (`--only`)."
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"Run on {now} at commit `{_commit()}` (with the working tree's defaults at that time); "
        f"{machine()}; {(time.perf_counter() - started) / 60:.1f} min "
        f"({'--quick: small inputs, structure only' if quick else 'full size'}); {trials} "
        f"seeded releases per cell ({', '.join(SHARED_DRAW)}: at least {SHARED_DRAW_TRIALS}, its "
        "releases share one noise draw across keys); "
        f"delta = {DELTA:g}. Setup in `benchmarks/bench_beyond_head.py`."
        f"{measured}",
        "",
        f"Defaults measured: `heavy-hitters` {hh_defaults}; `frequencies` {freq_defaults}.",
        "",
        *[
            f"- {ds.name}: {ds.note}; {len(ds.keys):,} rows, {len(ds.items):,} distinct keys"
            for ds in data
        ],  # fmt: skip
        "",
        "### Goals",
        "",
        "| measure | goal | measured | verdict |",
        "|---|---|---|---|",
        *[f"| {m} | {g} | {v} | {_verdict(ok)} |" for m, g, v, ok in goals],
        "",
        "![keys released, recall@1000, point-query MAE ratio and error-bar coverage]"
        "(plots/beyond_the_head.png)",
        "",
        "### Heavy hitters (every released key)",
        "",
        *_hh_table(hh),
        "",
        "### Point queries",
        "",
        *_freq_table(freq),
        "",
        "### Quantiles, 20 M-wide range (mean rank error, fraction of N)",
        "",
        "| data set | method | eps | rank error | / PipelineDP |",
        "|---|---|---|---|---|",
        *[
            f"| {r['dataset']} | {r['impl']} | {r['epsilon']:g} | {r['value']:.3e} | "
            f"{_f(r.get('ratio_to_pipelinedp', float('nan')))} |"
            for r in quantiles
        ],
        "",
        f"### User level (ratings set, eps {USER_EPSILON:g}, keys released)",
        "",
        "| m | method | keys released | trials |",
        "|---|---|---|---|",
        *[f"| {r['m']} | {r['impl']} | {_f(r['keys'])} | {r['n']} |" for r in user],
        "",
        "### Memory and speed of the default `heavy-hitters` command",
        "",
        f"Start-up: the same command on {STARTUP_ROWS:,} rows.",
        "",
        "| measure | rows | distinct values | seconds | start-up s | rows/s wall | "
        "rows/s past start-up | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|",
        *[
            f"| {r['what']} | {r['rows']:,} | {r['distinct']:,} | {r['seconds']:.1f} | "
            f"{r['startup']:.1f} | {r['rows'] / r['seconds'] / 1e6:.2f} M | "
            f"{_rate(r['rows'], r['seconds'] - r['startup'])} | {r['peak']:.0f} |"
            for r in scale
        ],
        "",
    ]
    return "\n".join(out)


def parse_parts(text: str) -> tuple[str, ...]:
    """``--only``'s value: comma-separated names of :data:`PARTS`."""
    import argparse

    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    if not parts or any(p not in PARTS for p in parts):
        raise argparse.ArgumentTypeError(f"parts are among {', '.join(PARTS)}")
    return parts


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, 2 trials")
    parser.add_argument("--trials", type=int, help=f"seeded releases per cell ({TRIALS})")
    parser.add_argument(
        "--only",
        type=parse_parts,
        help=f"comma-separated parts to measure, among {','.join(PARTS)} (default: all)",
    )
    args = parser.parse_args(argv)
    module = importlib.import_module("benchmarks.bench_beyond_head")
    print(f"## {TITLE}\n\n" + module.run(args.quick, args.trials, only=args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
