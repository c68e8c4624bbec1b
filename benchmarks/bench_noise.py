"""Throughput of the keyed noise stream and the exact samplers in :mod:`beam_dpsketch.noise`.

Run ``python benchmarks/bench_noise.py`` (or ``python -m benchmarks.bench_noise``; add
``--quick`` for a smoke run). Each row reports the best of a few repeats, in items per second,
single-threaded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from fractions import Fraction

from beam_dpsketch.noise import (
    NoiseSource,
    NoiseStream,
    discrete_gaussian,
    discrete_laplace,
    gaussian,
    laplace,
)


def _best_rate(fn: Callable[[NoiseStream, int], object], n: int, repeats: int) -> float:
    source = NoiseSource.insecure_for_tests(0)
    fn(source.stream("warm-up"), min(n, 1000))
    best = float("inf")
    for i in range(repeats):
        stream = source.stream(("bench", i))
        start = time.perf_counter()
        fn(stream, n)
        best = min(best, time.perf_counter() - start)
    return n / best


def _cases() -> list[tuple[str, str, Callable[[NoiseStream, int], object]]]:
    cases: list[tuple[str, str, Callable[[NoiseStream, int], object]]] = [
        ("stream.uint64", "", lambda s, n: s.uint64(n)),
        ("stream.uniform_below", "bound=1000", lambda s, n: s.uniform_below(1000, n)),
        ("stream.uniform_below", "bound=2**40+3", lambda s, n: s.uniform_below(2**40 + 3, n)),
    ]
    for scale in (0.5, 1, 3.7, Fraction(10, 3), 50, 10**6):
        cases.append(
            (
                "discrete_laplace",
                f"scale={scale}",
                lambda s, n, scale=scale: discrete_laplace(s, scale, n),
            )
        )
    for sigma in (0.8, 2, 10, 1000, 10**6):
        cases.append(
            (
                "discrete_gaussian",
                f"sigma={sigma}",
                lambda s, n, sigma=sigma: discrete_gaussian(s, sigma, n),
            )
        )
    cases.append(("gaussian", "sigma=1.0 (lattice 2**-20)", lambda s, n: gaussian(s, 1.0, n)))
    cases.append(("laplace", "scale=1.0 (lattice 2**-20)", lambda s, n: laplace(s, 1.0, n)))
    return cases


def run(quick: bool = False) -> list[dict]:
    """Measure every case; rows have keys ``benchmark``, ``params``, ``items_per_s``."""
    n, repeats = (50_000, 1) if quick else (2_000_000, 3)
    rows = []
    for name, params, fn in _cases():
        rate = _best_rate(fn, n, repeats)
        rows.append({"benchmark": name, "params": params, "items_per_s": rate})
    return rows


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    rows = run(quick="--quick" in argv)
    print(f"{'benchmark':<22} {'params':<28} {'items/s':>14}")
    for row in rows:
        print(f"{row['benchmark']:<22} {row['params']:<28} {row['items_per_s']:>14,.0f}")


if __name__ == "__main__":
    main()
