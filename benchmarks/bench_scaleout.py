"""Scale-out on Dask: DP heavy hitters, frequencies and quantiles, in-process vs 1 and 2 workers.

Each configuration runs in its own Python process (so each peak memory is that configuration's):

* ``fnapi``: Beam's FnApiRunner in this process (``in_memory``, the command line's default);
* ``dask-1`` and ``dask-2``: :class:`~beam_dpsketch.pipelines.dask_runner.ScalingDaskRunner`
  (the command line's ``--runner dask``) on a local Dask cluster of 1 or 2 single-threaded
  worker processes (:func:`~beam_dpsketch.pipelines.runner.local_dask_cluster`).

The rows are Zipf(1.1) int64 keys over 10^6 items (values in [0, 255] for quantiles) generated in
the workers: each of :data:`PARTS` work items yields arrays of :data:`BATCH` keys sliced from a
pool of 2^22 keys that every worker draws once in ``setup()`` (test data, drawn with numpy), so
generating a batch costs a slice and the time measured is the DP transform's. A ``Reshuffle``
spreads the work items over the workers. The clock runs from ``pipeline.run()`` to the end of
``wait_until_finish()``, after a warm-up run of :data:`WARM_UP_ROWS` rows on the same cluster
(workers import Beam and numpy once); cluster start-up is not counted. Peak memory is the peak
resident set (``ru_maxrss``) of the driver process and, through ``client.run``, of each worker.

Run: ``python -m benchmarks.run --only Scale-out`` (10^8 rows; ``--quick``: 10^6), or one size
with ``python -m benchmarks.bench_scaleout --rows 10000000``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import apache_beam as beam
import numpy as np

#: Work items the rows are split into (a ``Reshuffle`` spreads them over the workers).
PARTS = 32
#: Keys per array element.
BATCH = 1 << 20
#: Rows of the warm-up run on each cluster.
WARM_UP_ROWS = PARTS * 1024
POOL = 1 << 22
TRANSFORMS = ("heavy-hitters", "frequencies", "quantiles")
CONFIGS = ("fnapi", "dask-1", "dask-2")
_CONFIG_NAMES = {
    "fnapi": "FnApiRunner, in-process",
    "dask-1": "Dask, 1 worker",
    "dask-2": "Dask, 2 workers",
}


def _peak_rss_mib() -> float:
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_POOLS: dict[bool, np.ndarray] = {}
_POOL_DRAWS = [0]


def pool_draws() -> int:
    """How many key pools this process has drawn (1 per kind of key once the cache works)."""
    return _POOL_DRAWS[0]


def _pool(quantiles: bool) -> np.ndarray:
    """The key pool, drawn once per process: Beam's DaskRunner calls a DoFn's ``setup`` once
    per partition, not once per worker.

    The cache holds only if the workers import this module by name: a ``ZipfBatches`` of
    ``__main__`` is shipped by value, with a copy of ``_POOLS`` per task, and every partition
    would draw the pool again (:func:`main` runs its ``--one`` configuration through the
    imported module for that reason).
    """
    if quantiles not in _POOLS:
        _POOL_DRAWS[0] += 1
        ranks = np.arange(1, 1_000_001, dtype=np.float64)
        cdf = np.cumsum(ranks**-1.1)
        cdf /= cdf[-1]
        # np.random only generates benchmark data.
        uniform = np.random.default_rng(1).random(POOL)
        keys = np.searchsorted(cdf, uniform).astype(np.int64)
        _POOLS[quantiles] = keys % 256 if quantiles else keys
    return _POOLS[quantiles]


class ZipfBatches(beam.DoFn):
    """``rows_per_part`` keys per work item, in arrays of :data:`BATCH` keys."""

    def __init__(self, rows_per_part: int, quantiles: bool) -> None:
        super().__init__()
        self.rows_per_part = rows_per_part
        self.quantiles = quantiles
        self.pool: np.ndarray | None = None

    def setup(self) -> None:
        self.pool = _pool(self.quantiles)

    def process(self, part: int) -> Any:
        assert self.pool is not None
        left = self.rows_per_part
        start = (part * 7919) % (POOL - BATCH)
        while left > 0:
            n = min(BATCH, left)
            yield self.pool[start : start + n]
            left -= n
            start = (start + 104729) % (POOL - BATCH)


def _transform(name: str) -> Any:
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPFrequencies, DPHeavyHitters, DPQuantiles
    from beam_dpsketch.transforms.quantiles import QuantileTree

    noise = NoiseSource.insecure_for_tests(1)
    if name == "heavy-hitters":
        return DPHeavyHitters(1024, PrivacyBudget.approx(1.0, 1e-6), top=100, noise_source=noise)
    if name == "frequencies":
        return DPFrequencies(2048, 5, PrivacyBudget.pure(1.0), seed=1, noise_source=noise)
    return DPQuantiles(
        [0.1, 0.5, 0.9],
        0,
        255,
        PrivacyBudget.zcdp(0.5),
        tree=QuantileTree(width=256, depth=5),
        noise_source=noise,
    )


def release(p: beam.Pipeline, name: str, rows: int) -> beam.PCollection:
    """The measured pipeline: ``rows`` Zipf keys (rounded up to whole work items) released by the
    transform ``name`` (one of :data:`TRANSFORMS`)."""
    per_part = -(-rows // PARTS)
    return (
        p
        | "Parts" >> beam.Create(list(range(PARTS)))
        | "Spread" >> beam.Reshuffle()
        | "Keys"
        >> beam.ParDo(ZipfBatches(per_part, name == "quantiles")).with_output_types(np.ndarray)
        | "Release" >> _transform(name)
    )


def _run_once(name: str, rows: int, beam_args: list[str]) -> float:
    from beam_dpsketch.pipelines.runner import pipeline_options, run_pipeline

    p = beam.Pipeline(options=pipeline_options(beam_args))
    release(p, name, rows)
    start = time.perf_counter()
    run_pipeline(p)
    return time.perf_counter() - start


def measure(name: str, config: str, rows: int) -> dict[str, Any]:
    """One configuration in this process: seconds, rows/s and peak memory (MiB)."""
    if config == "fnapi":
        _run_once(name, WARM_UP_ROWS, ["--runner=FnApiRunner"])
        seconds = _run_once(name, rows, ["--runner=FnApiRunner"])
        workers: list[float] = []
        draws = [pool_draws()]
    else:
        import distributed

        from beam_dpsketch.pipelines.runner import local_dask_cluster

        n_workers = int(config.split("-")[1])
        with local_dask_cluster(n_workers) as address:
            args = ["--runner=dask", f"--dask_client_address={address}"]
            _run_once(name, WARM_UP_ROWS, args)
            seconds = _run_once(name, rows, args)
            with distributed.Client(address) as client:
                workers = sorted(client.run(_peak_rss_mib).values())
                draws = sorted(client.run(pool_draws).values())
    return {
        "transform": name,
        "runner": _CONFIG_NAMES[config],
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_s": rows / seconds,
        "driver_peak_rss_mib": round(_peak_rss_mib()),
        "worker_peak_rss_mib": " / ".join(str(round(w)) for w in workers) or "-",
        # Not a column: a check that each process drew its key pool once.
        "key_pool_draws": draws,
    }


def run(quick: bool = False, rows: int | None = None) -> list[dict[str, Any]]:
    """Every transform on every configuration, each in a fresh process; adds ``speedup`` (rows/s
    over the 1-worker Dask rate of the same transform)."""
    rows = rows or (1_000_000 if quick else 100_000_000)
    out: list[dict[str, Any]] = []
    for name in TRANSFORMS:
        one_worker = None
        for config in CONFIGS:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_scaleout",
                    "--one",
                    name,
                    config,
                    "--rows",
                    str(rows),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{name} on {config} failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            if config == "dask-1":
                one_worker = row["rows_per_s"]
            row["speedup_vs_1_worker"] = (
                f"{row['rows_per_s'] / one_worker:.2f}x" if one_worker else ""
            )
            print(
                f"  {name:<14} {row['runner']:<24} {row['seconds']:>8} s "
                f"{row['rows_per_s'] / 1e6:7.2f} M rows/s",
                file=sys.stderr,
            )
            out.append(row)
    return out


COLUMNS = [
    "transform",
    "runner",
    "rows",
    "seconds",
    "rows_per_s",
    "speedup_vs_1_worker",
    "driver_peak_rss_mib",
    "worker_peak_rss_mib",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=None, help="rows per run (1e8)")
    parser.add_argument("--quick", action="store_true", help="10^6 rows")
    parser.add_argument("--one", nargs=2, metavar=("TRANSFORM", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = int(args.rows) if args.rows else None
    if args.one:
        # Through the module imported by name, not ``__main__``, whose classes and functions
        # cloudpickle ships by value (see _pool).
        from benchmarks import bench_scaleout

        row = bench_scaleout.measure(args.one[0], args.one[1], rows or 100_000_000)
        print(json.dumps(row))
        return 0
    from benchmarks.run import print_rows

    result = run(quick=args.quick, rows=rows)
    print_rows(result, [(c, c, "") for c in COLUMNS])
    return 0


if __name__ == "__main__":
    sys.exit(main())
