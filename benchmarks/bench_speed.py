"""Speed of the hot paths, each next to its baseline in the same run.

``python -m benchmarks.run --only Speed`` (or ``python -m benchmarks.bench_speed [--quick]``).

1. **Misra-Gries** on 10 M Zipf(1.1) int64 keys and on 3 M string keys (Zipf ``"key-N"``
   strings as a Python list; the 3 M flights routes as an Arrow array, as Parquet gives them):
   :meth:`MisraGries.update_multiset` (count each distinct key once, then Algorithm 1 in the
   fixed key order: exact for a whole shard, but its memory grows with the shard's distinct
   keys, so the releases keep the arrival-order :meth:`MisraGries.update`, also measured),
   and Apache DataSketches ``frequent_items_sketch`` / ``frequent_strings_sketch`` fed one key at
   a time (its Python API has no batch update) and, for reference, fed the same pre-counted
   distinct keys with weights.
2. **Count-Min / Count Sketch** (5 x 2048) on the same string and int keys, hashing included,
   next to DataSketches ``count_min_sketch`` one key at a time.
3. **DPHeavyHitters** (design-b, select-then-count and sequential, k = 2048, eps = 1, top 100) on the 3 M flights
   routes Parquet file with the in-process ``FnApiRunner``, next to PipelineDP's ``DPEngine`` on
   ``BeamBackend`` (the pipelines of :mod:`benchmarks.bench_heavy_hitters`).
4. **Allocation follows the data**: ``MisraGries(2**24)`` on 100 keys, time and peak memory.
5. **Workers**: design-b in-process and on two ``multi_processing`` workers, on the 3 M routes and
   on the same routes repeated 100 times (3 x 10^8 rows), where the workers' start-up no longer
   dominates.

Every rate is the best of a few runs (pipelines: one run each, after a warm-up pipeline that
pays Beam's import and first-use costs). Goal rows compare the figures of this run only.
Plot: ``benchmarks/plots/speed.png``.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.run import DEPTH, WIDTH, bench_main, best_time, zipf_keys

PLOTS = Path(__file__).with_name("plots")
MG_K = 1024
DS_LG_MAX_K = 11  # 2048 slots, capacity 1536 items: at least MG_K counters
BIG_K = 1 << 24

COLUMNS = [
    ("benchmark", "benchmark", "<34"),
    ("impl", "impl", "<52"),
    ("keys", "keys", "<34"),
    ("n", "n", ">10"),
    ("items_per_s", "items/s", ">14,.0f"),
    ("notes", "notes", ""),
]


def _rate(fn: Callable[[int], Any], n: int, repeats: int) -> float:
    gc.collect()
    seconds, _ = best_time(fn, repeats)
    return n / seconds


def _flights_routes(quick: bool) -> tuple[pa.Array, str]:
    from reproduction import datasets

    if not quick:
        try:
            datasets.fetch_flights()
            return datasets.load_flights()["route"].combine_chunks(), "3 M flights routes"
        except datasets.DatasetUnavailableError as exc:
            print(f"  flights: 3 M-row file unavailable ({exc}); using the sample", file=sys.stderr)
    return datasets.load_flights(sample=True)["route"].combine_chunks(), "flights sample"


def _ds_items(cls: Any, keys: list) -> Any:
    sketch = cls(DS_LG_MAX_K)
    update = sketch.update
    for x in keys:
        update(x)
    return sketch


def _ds_items_weighted(cls: Any, keys: list) -> Any:
    sketch = cls(DS_LG_MAX_K)
    update = sketch.update
    for x, w in Counter(keys).items():
        update(x, w)
    return sketch


def _ds_cms(keys: list) -> Any:
    import datasketches as ds

    sketch = ds.count_min_sketch(DEPTH, WIDTH)
    update = sketch.update
    for x in keys:
        update(x)
    return sketch


def _sketch_rows(quick: bool) -> list[dict]:
    import datasketches as ds

    from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries

    n_int = 1_000_000 if quick else 10_000_000
    n_str = 300_000 if quick else 3_000_000
    repeats = 2 if quick else 3
    ints = zipf_keys(n_int)
    int_list = ints.tolist()
    zipf_strings = [f"key-{v}" for v in int_list[:n_str]]
    routes, routes_note = _flights_routes(quick)
    route_list = routes.to_pylist()
    inputs = {
        "int64": ("Zipf(1.1) int64 (numpy)", ints, int_list),
        "zipf str": ('Zipf(1.1) "key-N" str (list)', zipf_strings, zipf_strings),
        "routes": (f"{routes_note} (Arrow)", routes, route_list),
        "routes list": (f"{routes_note} (list)", route_list, route_list),
    }
    rows: list[dict] = []

    def add(bench: str, impl: str, keys: str, n: int, rate: float, notes: str = "") -> None:
        rows.append(
            {
                "benchmark": bench,
                "impl": impl,
                "keys": keys,
                "n": n,
                "items_per_s": rate,
                "notes": notes,
            }
        )
        print(f"  {bench:<28} {impl:<50} {keys:<34} {rate / 1e6:8.2f} M/s", file=sys.stderr)

    for name, (label, batch, as_list) in inputs.items():
        n = len(as_list)
        add(
            "Misra-Gries update",
            f"beam-dpsketch update_multiset (k={MG_K})",
            label,
            n,
            _rate(lambda _i, b=batch: MisraGries(MG_K).update_multiset(b), n, repeats),
            "distinct keys counted, then Algorithm 1 in the fixed key order (a whole shard; "
            "memory grows with its distinct keys, so Design B does not use it)",
        )
        add(
            "Misra-Gries update",
            f"beam-dpsketch update, arrival order (k={MG_K})",
            label,
            n,
            _rate(lambda _i, b=batch: MisraGries(MG_K).update(b), n, 1),
            "the path of every release (Design B segments, sequential PMG): O(k) memory",
        )
        ds_cls = ds.frequent_items_sketch if name == "int64" else ds.frequent_strings_sketch
        add(
            "Misra-Gries update",
            f"datasketches frequent_items lg_max_k={DS_LG_MAX_K}, per key",
            label,
            n,
            _rate(lambda _i, k=as_list, c=ds_cls: _ds_items(c, k), n, 1),
            "Python loop: the binding has no batch update",
        )
        add(
            "Misra-Gries update",
            f"datasketches frequent_items lg_max_k={DS_LG_MAX_K}, pre-counted",
            label,
            n,
            _rate(lambda _i, k=as_list, c=ds_cls: _ds_items_weighted(c, k), n, 1),
            "collections.Counter, then one weighted update per distinct key",
        )
    for name, (label, batch, as_list) in inputs.items():
        n = len(as_list)
        for cls in (CountMinSketch, CountSketch):
            add(
                f"{cls.__name__} update",
                f"beam-dpsketch {WIDTH}x{DEPTH}, hashing included",
                label,
                n,
                _rate(lambda _i, b=batch, c=cls: c(WIDTH, DEPTH, 1).update(b), n, repeats),
            )
        if name != "routes":
            n_ds = min(n, 1_000_000)
            add(
                "CountMinSketch update",
                f"datasketches count_min_sketch {DEPTH}x{WIDTH}, per key",
                label,
                n_ds,
                _rate(lambda _i, k=as_list[:n_ds]: _ds_cms(k), n_ds, 1),
                "Python loop: the binding has no batch update",
            )
    return rows


def _big_k_row() -> dict:
    from beam_dpsketch.sketches import MisraGries

    gc.collect()
    tracemalloc.start()
    start = time.perf_counter()
    sketch = MisraGries(BIG_K).update_multiset(np.arange(100))
    sketch.update(np.arange(100, 200))
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "benchmark": "large k, small input",
        "impl": "beam-dpsketch MisraGries(k=2**24), 200 keys",
        "keys": "int64",
        "n": 200,
        "items_per_s": 200 / seconds,
        "notes": f"{seconds * 1e3:.1f} ms, peak {peak / 2**20:.2f} MiB (dummy slots are a range)",
    }


#: Beam options of the two-worker run (the DirectRunner's multi-process mode).
TWO_WORKERS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")


def _pipeline_rows(quick: bool) -> list[dict]:
    from benchmarks import bench_heavy_hitters as hh

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path, n, note = hh._throughput_file(Path(tmp), quick)
        hh._ours(path, "design-b")  # warm-up: Beam's imports and first-use costs
        cases = [
            ("beam-dpsketch DPHeavyHitters design-b", lambda: hh._ours(path, "design-b")),
            (
                "beam-dpsketch DPHeavyHitters select-then-count (CLI default)",
                lambda: hh._ours(path, "select-then-count"),
            ),
            ("beam-dpsketch DPHeavyHitters sequential (PMG)", lambda: hh._ours(path, "sequential")),
            (
                "beam-dpsketch DPHeavyHitters design-b, 2 workers",
                lambda: hh._ours(path, "design-b", TWO_WORKERS),
            ),
            ("PipelineDP 0.3.1 DPEngine on BeamBackend", lambda: hh._pipelinedp_beam(path)),
        ]
        rows += [_pipeline_row(impl, fn, n, f"{note} (Parquet)") for impl, fn in cases]
        if not quick:
            # Two worker processes start in about 2 s, longer than the whole 3 M-row run: the
            # scaling with workers shows on the same data repeated SCALE_COPIES times.
            big, big_n = _repeated(path, Path(tmp), SCALE_COPIES)
            keys = f"{note} x{SCALE_COPIES} (Parquet)"
            rows += [
                _pipeline_row(impl, fn, big_n, keys)
                for impl, fn in (
                    ("beam-dpsketch DPHeavyHitters design-b", lambda: hh._ours(big, "design-b")),
                    (
                        "beam-dpsketch DPHeavyHitters design-b, 2 workers",
                        lambda: hh._ours(big, "design-b", TWO_WORKERS),
                    ),
                )
            ]
    return rows


SCALE_COPIES = 100


def _repeated(path: str, directory: Path, copies: int) -> tuple[str, int]:
    """A Parquet file holding ``copies`` copies of the file at ``path``, and its rows."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    out = directory / f"repeated_x{copies}.parquet"
    with pq.ParquetWriter(out, table.schema) as writer:
        for _ in range(copies):
            writer.write_table(table, row_group_size=1 << 18)
    return str(out), table.num_rows * copies


def _pipeline_row(impl: str, fn: Callable[[], Any], n: int, keys: str) -> dict:
    from benchmarks import bench_heavy_hitters as hh

    gc.collect()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    mode = "multi_processing, 2 workers" if "2 workers" in impl else "in-process"
    print(f"  {impl:<50} {seconds:7.2f} s {n / seconds / 1e6:7.3f} M rows/s", file=sys.stderr)
    return {
        "benchmark": "DP heavy hitters pipeline",
        "impl": impl,
        "keys": keys,
        "n": n,
        "items_per_s": n / seconds,
        "notes": f"FnApiRunner {mode}, {seconds:.2f} s, k={hh.SKETCH_K}, "
        f"eps {hh.THROUGHPUT_EPS:g}, top {hh.THROUGHPUT_TOP}",
    }


def _find(rows: list[dict], bench: str, impl: str, keys: str) -> dict | None:
    for r in rows:
        if r["benchmark"] == bench and r["impl"].startswith(impl) and r["keys"] == keys:
            return r
    return None


def _goals(rows: list[dict]) -> list[dict]:
    goals = []

    def goal(text: str, value: float, target: float, detail: str) -> None:
        goals.append(
            {
                "benchmark": "goal",
                "impl": text,
                "keys": "",
                "n": "",
                "items_per_s": value,
                "notes": f"{'MET' if value >= target else 'NOT MET'}: {detail}",
            }
        )

    mg = "Misra-Gries update"
    for r in rows:
        if r["benchmark"] != mg or not r["impl"].startswith("beam-dpsketch update"):
            continue
        # The releases sketch in arrival order; update_multiset is the whole-shard API.
        path = "arrival order, the releases' path" if "arrival" in r["impl"] else "multiset"
        ds_row = _find(rows, mg, "datasketches frequent_items", r["keys"])
        if ds_row is not None:
            ratio = r["items_per_s"] / ds_row["items_per_s"]
            goal(
                f"MG ({path}) >= 2x DataSketches per key",
                r["items_per_s"],
                2 * ds_row["items_per_s"],
                f"{ratio:.1f}x on {r['keys']}",
            )
        target = 20e6 if "int64" in r["keys"] else 10e6
        goal(
            f"MG ({path}) >= {target / 1e6:.0f} M keys/s",
            r["items_per_s"],
            target,
            f"{r['items_per_s'] / 1e6:.1f} M/s on {r['keys']}",
        )
    for r in rows:
        linear = r["benchmark"] in ("CountMinSketch update", "CountSketch update")
        if linear and r["impl"].startswith("beam-dpsketch") and "int64" not in r["keys"]:
            goal(
                f"{r['benchmark'].split()[0]} strings >= 25 M/s",
                r["items_per_s"],
                25e6,
                f"{r['items_per_s'] / 1e6:.1f} M/s on {r['keys']}",
            )
    ours = _find_prefix(rows, "beam-dpsketch DPHeavyHitters design-b")
    pdp = _find_prefix(rows, "PipelineDP")
    design_b = [r for r in rows if r["impl"] == "beam-dpsketch DPHeavyHitters design-b"]
    for one in design_b:
        two = _find(
            rows,
            "DP heavy hitters pipeline",
            "beam-dpsketch DPHeavyHitters design-b, 2",
            one["keys"],
        )
        if two is not None:
            goal(
                "design-b on 2 workers faster than in-process",
                two["items_per_s"],
                one["items_per_s"] * 1.000001,
                f"{two['items_per_s'] / 1e6:.2f} vs {one['items_per_s'] / 1e6:.2f} M rows/s "
                f"in-process on {one['keys']}",
            )
    if ours is not None and pdp is not None:
        ratio = ours["items_per_s"] / pdp["items_per_s"]
        goal("design-b >= 6 M rows/s", ours["items_per_s"], 6e6, ours["notes"])
        goal(
            "design-b >= 30x PipelineDP",
            ours["items_per_s"],
            30 * pdp["items_per_s"],
            f"{ratio:.1f}x PipelineDP's {pdp['items_per_s'] / 1e6:.3f} M rows/s",
        )
    return goals


def _find_prefix(rows: list[dict], impl: str) -> dict | None:
    return next((r for r in rows if r["impl"].startswith(impl)), None)


def _plot(rows: list[dict]) -> Path | None:
    try:
        from beam_dpsketch.pipelines.plotting import pyplot
    except ImportError:
        return None
    plt = pyplot()
    PLOTS.mkdir(parents=True, exist_ok=True)
    groups = [
        ("Misra-Gries update", "Misra-Gries (M keys/s)"),
        ("CountMinSketch update", "Count-Min (M keys/s)"),
        ("DP heavy hitters pipeline", "DP heavy hitters on Parquet (M rows/s)"),
    ]
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 13))
    for ax, (bench, title) in zip(axes, groups, strict=True):
        sel = [r for r in rows if r["benchmark"] == bench]
        labels = [f"{r['impl']}\n{r['keys']}" for r in sel]
        values = [r["items_per_s"] / 1e6 for r in sel]
        colors = ["tab:blue" if r["impl"].startswith("beam-dpsketch") else "tab:gray" for r in sel]
        ax.barh(range(len(sel)), values, color=colors)
        ax.set_yticks(range(len(sel)), labels, fontsize=6)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path = PLOTS / "speed.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(quick: bool = False) -> list[dict]:
    """All parts; rows carry ``benchmark``, ``impl``, ``keys``, ``n``, ``items_per_s``, ``notes``;
    the goal rows come first."""
    rows = _sketch_rows(quick)
    rows.append(_big_k_row())
    rows += _pipeline_rows(quick)
    path = _plot(rows)
    if path is not None:
        print(f"  wrote {path}", file=sys.stderr)
    return _goals(rows) + rows


if __name__ == "__main__":
    bench_main(run, COLUMNS)
