"""DP quantiles on a wide range: ``DPQuantiles`` against PipelineDP's ``PERCENTILE``, same run.

Data, integers in the public range ``[874000000, 894000000]`` (20 M values wide):

* **flights timestamps**: the ``date`` column of the US flights 2001 file (3 M rows, minute
  resolution, Jan-Jun 2001, fetched and checksummed by :mod:`reproduction.datasets`)
  as epoch seconds, shifted so that 2001-01-01 falls at ``lower + 2,000,000`` (nothing else is
  changed: the daily and weekly shape stays as it is); ``quick`` uses the bundled 300 k sample;
* **Gaussian + Zipf**: 80 % ``round(N(884e6, 2.5e6))`` and 20 % drawn with Zipf(1) weights from
  1,000 fixed random instants of the range (repeated timestamps, as batch jobs produce),
  seeded, 1 M values (200 k with ``quick``).

Accuracy is the tie-aware normalised rank error of each released value (distance of ``q`` to
``[R_<(v)/N, R_<=(v)/N]``), averaged over ``q = 0.01 .. 0.99`` and the trials. Each trial of each
implementation draws fresh noise from the same exact data:

* ``DPQuantiles`` (default): the transform's own release mechanism (``DPQuantiles(...).mechanism
  .release``) on the exact sketch, i.e. what the transform emits per window;
* the paper's binary tree (branching 2, 1024 x 5 sketches below 5,120-node levels, no
  consistency, Gaussian noise for ``(eps, delta)``), for comparison;
* PipelineDP 0.3.1 ``PERCENTILE``: PipelineDP's own accumulator (PyDP ``QuantileTree``,
  height 4, branching 16 over ``[min_value, max_value]``), built once, and the call its
  ``compute_metrics`` makes per release (``compute_quantiles(eps, delta, 1, 1, qs, "laplace")``),
  i.e. one privacy unit per element and the whole budget on the percentiles.

Budgets: ``pure(eps)`` for both, and ``approx(eps, 1e-6)`` for ours (PipelineDP's quantile tree
uses Laplace noise either way).

:func:`bench_moderate_quantiles` runs the same comparison on the moderate ranges of the flights
``delay`` and ``distance`` columns.

Run: ``python -m benchmarks.bench_quantiles_wide [--quick] [--trials N] [--moderate]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

LOWER, UPPER = 874_000_000, 894_000_000
QUANTILES = np.round(np.arange(1, 100) / 100, 2)
DELTA = 1e-6
_EPOCH_2001 = 978_307_200  # 2001-01-01T00:00:00Z


def flights_timestamps(quick: bool) -> tuple[np.ndarray, str]:
    """Flights ``date`` as epoch seconds, shifted into ``[LOWER, UPPER]`` (see module doc)."""
    import pyarrow.parquet as pq

    from reproduction import datasets

    path, label = datasets.FLIGHTS_SAMPLE_PATH, "flights 300k timestamps"
    if not quick:
        try:
            path, label = datasets.fetch_flights(), "flights 3M timestamps"
        except datasets.DatasetUnavailableError as exc:
            print(f"  full flights unavailable ({exc}); using the sample", file=sys.stderr)
    dates = pq.read_table(path, columns=["date"])["date"].to_numpy()
    seconds = dates.astype("datetime64[s]").astype(np.int64)
    return seconds - _EPOCH_2001 + LOWER + 2_000_000, label


def gaussian_zipf_timestamps(n: int, seed: int = 7) -> np.ndarray:
    """80 % Gaussian around the middle of the range, 20 % Zipf(1) over 1,000 fixed instants."""
    rng = np.random.default_rng(seed)
    n_gauss = int(n * 0.8)
    gauss = np.round(rng.normal((LOWER + UPPER) / 2, 2.5e6, n_gauss)).astype(np.int64)
    instants = rng.integers(LOWER, UPPER + 1, 1000)
    weights = 1.0 / np.arange(1, 1001)
    zipf = instants[rng.choice(1000, n - n_gauss, p=weights / weights.sum())]
    return np.clip(np.concatenate([gauss, zipf]), LOWER, UPPER)


def rank_errors(ordered: np.ndarray, values: Any, qs: np.ndarray = QUANTILES) -> np.ndarray:
    """Tie-aware normalised rank error of each released value against its quantile."""
    n = len(ordered)
    v = np.asarray(values, dtype=np.float64)
    lo = np.searchsorted(ordered, v, side="left") / n
    hi = np.searchsorted(ordered, v, side="right") / n
    return np.maximum(np.maximum(lo - qs, qs - hi), 0.0)


def _ours(values: np.ndarray, lower: int = LOWER, upper: int = UPPER) -> dict[str, Any]:
    """Release functions ``(budget, stream) -> released values`` for our two configurations."""
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
    from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
    from beam_dpsketch.transforms import DPQuantiles

    qs = QUANTILES.tolist()
    mechanism = DPQuantiles(qs, lower, upper, PrivacyBudget.pure(1.0)).mechanism
    default = DyadicCountSketch(lower, upper, 1024, 5, 0, clamp=True, **mechanism.tree)
    default.update(values)
    binary = DyadicCountSketch(lower, upper, 1024, 5, 0, clamp=True).update(values)

    def release_default(budget: Any, stream: Any) -> np.ndarray:
        return np.array([r.value for r in mechanism.release(default, budget, stream)])

    def release_binary(budget: Any, stream: Any) -> np.ndarray:
        return PrivateDyadicCountSketch.release(binary, budget, stream).quantiles(qs)

    return {
        "beam-dpsketch DPQuantiles (default)": release_default,
        "beam-dpsketch binary dyadic tree (paper layout, 1024 x 5)": release_binary,
    }


def _pipelinedp(values: np.ndarray, lower: int = LOWER, upper: int = UPPER) -> Any:
    from pipeline_dp.combiners import QuantileAccumulator
    from pydp.algorithms.quantile_tree import QuantileTree

    tree = QuantileTree(
        float(lower),
        float(upper),
        QuantileAccumulator.TREE_HEIGHT,
        QuantileAccumulator.BRANCHING_FACTOR,
    )
    for v in values.tolist():
        tree.add_entry(v)
    return lambda eps: np.array(
        tree.compute_quantiles(eps, 0.0, 1, 1, QUANTILES.tolist(), "laplace")
    )


def bench_wide_quantiles(
    quick: bool = False, trials: int = 20, epsilons: tuple[float, ...] = (0.1, 1.0)
) -> list[dict]:
    """Mean rank error on the two wide-range data sets, ours and PipelineDP in the same run.

    Parameters
    ----------
    quick
        Reduced sizes (flights sample, 200 k synthetic values).
    trials
        Noise draws per implementation, data set and epsilon.
    epsilons
        Budgets to measure.

    Returns
    -------
    list of dict
        Rows ``benchmark, impl, dataset, epsilon, metric, value, seconds`` (``value`` the mean
        rank error as a fraction of N; ``ratio_to_pipelinedp`` added to our rows).
    """
    flights, flights_label = flights_timestamps(quick)
    n_synth = 200_000 if quick else 1_000_000
    data = {
        flights_label: (flights, LOWER, UPPER),
        f"Gaussian + Zipf timestamps, N={n_synth:,}": (
            gaussian_zipf_timestamps(n_synth),
            LOWER,
            UPPER,
        ),
    }
    return _compare(data, trials, epsilons, "quantiles, 20 M-wide range: rank error")


def bench_moderate_quantiles(
    quick: bool = False, trials: int = 20, epsilons: tuple[float, ...] = (0.1, 1.0)
) -> list[dict]:
    """The same comparison on moderate ranges: flights ``delay`` in ``[-1024, 3071]`` and
    ``distance`` in ``[0, 8191]`` (3 M rows; the 300 k sample with ``quick``)."""
    from reproduction import datasets

    table, label = None, "flights 3M"
    if not quick:
        try:
            datasets.fetch_flights()
            table = datasets.load_flights()
        except datasets.DatasetUnavailableError as exc:
            print(f"  full flights unavailable ({exc}); using the sample", file=sys.stderr)
    if table is None:
        table, label = datasets.load_flights(sample=True), "flights 300k sample"
    cols = datasets.flights_columns(table)
    data = {
        f"{label} delay": (np.clip(cols.delay, -1024, 3071), -1024, 3071),
        f"{label} distance": (np.clip(cols.distance, 0, 8191), 0, 8191),
    }
    return _compare(data, trials, epsilons, "quantiles, moderate range: rank error")


def _compare(
    data: dict[str, tuple[np.ndarray, int, int]],
    trials: int,
    epsilons: tuple[float, ...],
    benchmark: str,
) -> list[dict]:
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.privacy import PrivacyBudget

    source = NoiseSource()
    rows: list[dict] = []
    for label, (values, lower, upper) in data.items():
        values = np.asarray(values, dtype=np.int64)
        ordered = np.sort(values)
        ours = _ours(values, lower, upper)
        pipelinedp = _pipelinedp(values, lower, upper)
        for eps in epsilons:
            budgets = {"pure": PrivacyBudget.pure(eps), "approx": PrivacyBudget.approx(eps, DELTA)}
            results: dict[str, tuple[list[float], float]] = {}
            start = time.perf_counter()
            errs = [rank_errors(ordered, pipelinedp(eps)).mean() for _ in range(trials)]
            results["PipelineDP 0.3.1 PERCENTILE (Laplace)"] = (errs, time.perf_counter() - start)
            for impl, release in ours.items():
                for kind, budget in budgets.items():
                    start = time.perf_counter()
                    errs = [
                        rank_errors(
                            ordered,
                            release(budget, source.stream(f"wide/{label}/{impl}/{kind}/{eps}/{t}")),
                        ).mean()
                        for t in range(trials)
                    ]
                    results[f"{impl}, {kind}"] = (errs, time.perf_counter() - start)
            reference = float(np.mean(results["PipelineDP 0.3.1 PERCENTILE (Laplace)"][0]))
            for impl, (errs, secs) in results.items():
                mean = float(np.mean(errs))
                row = {
                    "benchmark": benchmark,
                    "impl": impl,
                    "dataset": label,
                    "epsilon": eps,
                    "metric": f"mean rank error (fraction of N), q=0.01..0.99, {trials} trials",
                    "value": mean,
                    "seconds": secs / trials,
                }
                if not impl.startswith("PipelineDP"):
                    row["ratio_to_pipelinedp"] = mean / reference
                rows.append(row)
                ratio = mean / reference
                print(
                    f"  {label:<38} eps={eps:<4} {impl:<62} {mean:.3e}  x{ratio:.3g}",
                    file=sys.stderr,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes")
    parser.add_argument("--trials", type=int, default=20, help="noise draws per cell (20)")
    parser.add_argument(
        "--moderate", action="store_true", help="also the flights delay and distance columns"
    )
    args = parser.parse_args(argv)
    bench_wide_quantiles(args.quick, args.trials)
    if args.moderate:
        bench_moderate_quantiles(args.quick, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
