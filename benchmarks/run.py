"""Throughput benchmarks: ``make bench`` (or ``python -m benchmarks.run [--quick]``).

Writes ``benchmarks/RESULTS.md`` with the machine, the command and the date. Sections:

1. batch update throughput of each sketch on Zipf(1.1) keys, int64 and string keys separately,
   next to Apache DataSketches (``count_min_sketch``, ``frequent_items_sketch``) on the same keys
   in the same run;
2. noise samplers (``benchmarks/bench_noise.py``);
3. an end-to-end Beam pipeline sketching keys read from Parquet with 2 workers, next to Beam's own
   ``Count.PerElement()`` + ``Top.Of(k)`` on the same file (``benchmarks/bench_beam.py``);
4. DP heavy hitters, linear sketches, continual, sliding-window and intermittent releases (one
   module each), and the accuracy of every element-level heavy-hitter release and point query
   against PipelineDP (``benchmarks/bench_accuracy.py``; ``--only "Accuracy vs PipelineDP"``).
5. user-level heavy hitters against PipelineDP on a ratings-shaped data set
   (``benchmarks/bench_user_level.py``; ``--only "User level"``).
   Sharded heavy hitters: Design D and the untrusted-aggregator sum against Sequential and
   Design B at 2 and 8 shards (``benchmarks/bench_sharded.py``; ``--only "Sharded"``).
   DP SpaceSaving against Sequential PMG at equal counters and budget, and user-level PURE_PP
   against user-level PMG (``benchmarks/bench_space_saving.py``; ``--only "SpaceSaving"``).
6. speed of the hot paths next to DataSketches and PipelineDP in the same run
   (``benchmarks/bench_speed.py``; ``--only Speed``).
7. beyond the head: keys released, point queries, error bars, wide-range quantiles, user
   level, memory and speed at the defaults, against PipelineDP in the same run
   (``benchmarks/bench_beyond_head.py``; ``--only "Beyond the head"``).
8. time and peak memory of every subcommand at 1 M to 100 M rows and 10^4 or 10^7 distinct
   keys, and of ``intermittent`` at 100 to 10^5 query batches (``benchmarks/bench_scale.py``;
   ``--only Scale``).
9. scale-out on Dask: DP heavy hitters, frequencies and quantiles at 10^8 rows on the
   in-process FnApiRunner, one Dask worker and two (``benchmarks/bench_scaleout.py``;
   ``--only Scale-out``).
10. release rows to Parquet, a DataFrame and JSON with no ``Map``, and the row of a released
    sketch (``benchmarks/bench_release_sinks.py``; ``--only "Release rows"``).
11. top keys with no candidate list (``DPTopKeys``) against ``DPFrequencies`` told the true key
    set and ``DPHeavyHitters``: recall@k, point error, memory (``benchmarks/bench_top_keys.py``;
    ``--only "Top keys"``).
12. federated release: ``k`` organisations' released sketches merged against one pooled
    ``DPFrequencies`` release (``benchmarks/bench_merge.py``; ``--only Federated``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).with_name("RESULTS.md")

# Sizes that match across our sketches and DataSketches: CMS 5 x 2048; MG k = 1024 counters
# against a frequent-items map of 2**11 slots (capacity 0.75 * 2048 = 1536 items).
WIDTH, DEPTH, MG_K, DS_LG_MAX_K = 2048, 5, 1024, 11


def zipf_keys(n: int, s: float = 1.1, universe: int = 1_000_000, seed: int = 1) -> np.ndarray:
    """``n`` i.i.d. draws from Zipf(s) over ``{1..universe}`` (finite universe, inverse CDF)."""
    from reproduction.datasets import zipf_stream

    return zipf_stream(n, s, universe, seed).astype(np.int64)


def _timed(fn: Callable[[], object], n: int) -> float:
    """Items per second of one call of ``fn`` that processes ``n`` items."""
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def best_time(fn: Callable[[int], object], repeats: int) -> tuple[float, Any]:
    """Best wall time in seconds of ``fn(i)`` over ``i = 0 .. repeats - 1``, and the last result."""
    best, out = float("inf"), None
    for i in range(repeats):
        start = time.perf_counter()
        out = fn(i)
        best = min(best, time.perf_counter() - start)
    return best, out


def update_in_batches(sketch: Any, keys: np.ndarray, batch: int) -> Any:
    """Feed ``keys`` to ``sketch.update_batch`` in slices of ``batch``; returns the sketch."""
    for start in range(0, len(keys), batch):
        sketch.update_batch(keys[start : start + batch])
    return sketch


def print_rows(rows: list[dict], columns: Sequence[tuple[str, str, str]]) -> None:
    """Print benchmark rows as an aligned table; ``columns`` are ``(key, header, format spec)``
    (e.g. ``("items_per_s", "items/s", ">14,.0f")``); the last column is left unpadded."""

    def cell(value: Any, spec: str, last: bool) -> str:
        return str(value) if last else format(value, spec)

    align = [spec.split(",")[0].split(".")[0] for _, _, spec in columns]
    last = len(columns) - 1
    print(
        " ".join(
            cell(h, a, i == last)
            for i, ((_, h, _), a) in enumerate(zip(columns, align, strict=True))
        )
    )
    for row in rows:
        print(" ".join(cell(row[k], spec, i == last) for i, (k, _, spec) in enumerate(columns)))


def bench_main(
    run: Callable[..., list[dict]],
    columns: Sequence[tuple[str, str, str]],
    argv: list[str] | None = None,
) -> None:
    """``main`` of a benchmark module: ``run(quick="--quick" in argv)``, printed by
    :func:`print_rows`."""
    argv = sys.argv[1:] if argv is None else argv
    print_rows(run(quick="--quick" in argv), columns)


def bench_sketches(quick: bool) -> list[dict]:
    import datasketches as ds

    from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries

    n = 1_000_000 if quick else 10_000_000
    n_ds = n if not quick else 500_000
    ints = zipf_keys(n)
    int_list = ints.tolist()
    str_list = [f"key-{v}" for v in int_list]
    rows: list[dict] = []

    def add(impl: str, sketch: str, keys: str, rate: float, items: int) -> None:
        rows.append(
            {
                "benchmark": f"{sketch} update",
                "impl": impl,
                "keys": keys,
                "n": items,
                "items_per_s": rate,
            }
        )
        print(f"  {impl:<22} {sketch:<16} {keys:<14} {rate / 1e6:8.2f} M keys/s", file=sys.stderr)

    ours = {
        "Count-Min": lambda: CountMinSketch(WIDTH, DEPTH, 1),
        "Count Sketch": lambda: CountSketch(WIDTH, DEPTH, 1),
        "Misra-Gries": lambda: MisraGries(MG_K),
    }
    for name, make in ours.items():
        for label, keys in (("int64 array", ints), ("str list", str_list)):
            add("beam-dpsketch", name, label, _timed(lambda m=make, k=keys: m().update(k), n), n)

    def ds_cms(keys: list) -> None:
        sk = ds.count_min_sketch(DEPTH, WIDTH)
        for x in keys:
            sk.update(x)

    def ds_fi(keys: list, cls) -> None:
        sk = cls(DS_LG_MAX_K)
        for x in keys:
            sk.update(x)

    add(
        "datasketches 5.2 (loop)",
        "Count-Min",
        "int",
        _timed(lambda: ds_cms(int_list[:n_ds]), n_ds),
        n_ds,
    )
    add(
        "datasketches 5.2 (loop)",
        "Count-Min",
        "str",
        _timed(lambda: ds_cms(str_list[:n_ds]), n_ds),
        n_ds,
    )
    add(
        "datasketches 5.2 (loop)",
        "frequent items",
        "int",
        _timed(lambda: ds_fi(int_list[:n_ds], ds.frequent_items_sketch), n_ds),
        n_ds,
    )
    add(
        "datasketches 5.2 (loop)",
        "frequent items",
        "str",
        _timed(lambda: ds_fi(str_list[:n_ds], ds.frequent_strings_sketch), n_ds),
        n_ds,
    )
    return rows


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def machine() -> str:
    """CPU model, cores, Python version and OS of this machine, for a results section."""
    return _machine()


def _table(rows: list[dict], columns: list[str]) -> str:
    def fmt(value: object) -> str:
        if isinstance(value, float):
            return f"{value / 1e6:.2f} M/s" if value >= 1e4 else f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


SECTIONS = (
    (
        "Sketch batch updates (Zipf(1.1) over 10^6 items)",
        "benchmarks.run:bench_sketches",
        ["benchmark", "impl", "keys", "n", "items_per_s"],
    ),
    ("Noise samplers", "benchmarks.bench_noise:run", ["benchmark", "params", "items_per_s"]),
    (
        "End-to-end Beam pipelines (Parquet, 2 workers)",
        "benchmarks.bench_beam:run",
        ["benchmark", "runner", "n", "seconds", "items_per_s", "notes"],
    ),
    (
        "DP heavy hitters vs PipelineDP (accuracy and throughput)",
        "benchmarks.bench_heavy_hitters:run",
        [
            "benchmark",
            "impl",
            "dataset",
            "epsilon",
            "k",
            "precision",
            "recall",
            "are",
            "n",
            "seconds",
            "items_per_s",
            "notes",
        ],
    ),
    (
        "DP linear sketches vs PipelineDP percentiles and DP Misra-Gries",
        "benchmarks.bench_linear:run",
        ["benchmark", "impl", "dataset", "epsilon", "metric", "value", "seconds"],
    ),
    (
        "Count-Median vs Count Sketch and Count-Min: point error and error bars",
        "benchmarks.bench_count_median:run",
        [
            "dataset",
            "shape",
            "epsilon",
            "impl",
            "mae_top",
            "mae_random",
            "coverage",
            "width_vs_p95",
            "seconds",
        ],
    ),
    (
        "Federated release: merged released sketches vs one pooled release",
        "benchmarks.bench_merge:run",
        [
            "impl",
            "sketch",
            "orgs",
            "mae_top",
            "mae_random",
            "coverage",
            "noise_bound",
            "merge_seconds",
        ],
    ),
    (
        "Continual observation: Lazy vs Punctual sketches (arrivals/s)",
        "benchmarks.bench_continual:run",
        ["benchmark", "impl", "width", "depth", "n", "items_per_s", "notes"],
    ),
    (
        "Sliding windows: DPSW-Sketch and baselines (updates/s)",
        "benchmarks.bench_sliding:run",
        ["benchmark", "impl", "window", "n", "items_per_s", "notes"],
    ),
    (
        "Intermittent queries: DP Count Sketch (arrivals/s, answers/s)",
        "benchmarks.bench_intermittent:run",
        ["benchmark", "impl", "width", "depth", "n", "items_per_s", "notes"],
    ),
    # Returns its own Markdown (goals, tables, plot); the columns are unused.
    (
        "Accuracy vs PipelineDP 0.3.1: heavy hitters and point queries",
        "benchmarks.bench_accuracy:run",
        [],
    ),
    # Returns its own Markdown table; the columns are unused.
    ("User level vs PipelineDP 0.3.1: heavy hitters", "benchmarks.bench_user_level:run", []),
    # Returns its own Markdown table; the columns are unused.
    (
        "Sharded heavy hitters: Design D and the untrusted sum vs Sequential and Design B",
        "benchmarks.bench_sharded:run",
        [],
    ),
    (
        "DP SpaceSaving vs Sequential PMG, and user-level PURE_PP",
        "benchmarks.bench_space_saving:run",
        [
            "benchmark",
            "impl",
            "epsilon",
            "counters",
            "keys",
            "recall",
            "precision",
            "are",
            "max_err_top16",
            "items_per_s",
        ],
    ),
    (
        "Speed",
        "benchmarks.bench_speed:run",
        ["benchmark", "impl", "keys", "n", "items_per_s", "notes"],
    ),
    # Returns its own Markdown (goal table, tables, plot); the columns are unused.
    (
        "Beyond the head vs PipelineDP 0.3.1: keys, point queries, error bars, quantiles, scale",
        "benchmarks.bench_beyond_head:run",
        [],
    ),
    (
        "Scale: rows and distinct keys through the command line",
        "benchmarks.bench_scale:run",
        [
            "command",
            "rows",
            "distinct_keys",
            "query_batches",
            "seconds",
            "rows_per_s",
            "peak_rss_mib",
        ],
    ),
    (
        "Top keys with no candidate list: prefix tree vs candidate-list releases",
        "benchmarks.bench_top_keys:run",
        ["impl", "n", "k", "recall", "mae", "memory_kib", "seconds", "notes"],
    ),
    (
        "Scale-out: Dask workers vs in-process",
        "benchmarks.bench_scaleout:run",
        [
            "transform",
            "runner",
            "rows",
            "seconds",
            "rows_per_s",
            "speedup_vs_1_worker",
            "driver_peak_rss_mib",
            "worker_peak_rss_mib",
        ],
    ),
    (
        "Release rows to files: Parquet, DataFrame and JSON sinks",
        "benchmarks.bench_release_sinks:run",
        ["benchmark", "n", "seconds", "items_per_s", "notes"],
    ),
)


def _existing_sections() -> dict[str, str]:
    """The ``## title`` sections of the current RESULTS.md, by title."""
    if not RESULTS.exists():
        return {}
    found: dict[str, str] = {}
    for chunk in RESULTS.read_text().split("\n## ")[1:]:
        title = chunk.split("\n", 1)[0].strip()
        found[title] = "## " + chunk.rstrip() + "\n"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, for a smoke run")
    parser.add_argument(
        "--only",
        help="re-run only the sections whose title contains this text; the others keep their "
        "earlier figures in RESULTS.md",
    )
    args = parser.parse_args(argv)
    command = "python -m benchmarks.run" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only!r}"
    parts = [
        "# Benchmark results",
        "",
        f"- date: {dt.date.today().isoformat()}",
        f"- machine: {_machine()}",
        "- `make bench` runs every section at full size; each section states its command.",
        "",
    ]
    sections = _existing_sections() if args.only else {}
    for title, target, columns in SECTIONS:
        if args.only and args.only.lower() not in title.lower():
            continue
        print(f"== {title}", file=sys.stderr)
        module, func = target.split(":")
        result = getattr(importlib.import_module(module), func)(args.quick)
        # A section returns rows for a table, or its own Markdown body.
        body = result.rstrip() if isinstance(result, str) else _table(result, columns)
        sections[title] = "\n".join(
            [
                f"## {title}",
                "",
                f"Command: `{command}`, {dt.date.today().isoformat()}.",
                "",
                body,
                "",
            ]
        )
    # Sections not re-run keep their earlier figures (each states its own command and date).
    for title, _, _ in SECTIONS:
        if title in sections:
            parts.append(sections[title])
    RESULTS.write_text("\n".join(parts))
    print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
