"""Throughput of the continual-observation sketches ([Hol25, Section 5.4]; docs/algorithms.md#lazy-oracles).

Arrivals per second, single-threaded, for the non-private ``CountMinSketch``/``CountSketch``
(``update``), ``LazySketch`` and ``PunctualSketch`` (``update_batch``; one time step per arrival,
the paper's per-element model), both kinds, depth 3, widths 33..4000, on a Zipf(1.3) stream over
100,001 items ([Hol25, Section 5.4] data defaults). Every timing includes hashing the keys (the same
MurmurHash3 for all sketches, docs/algorithms.md#hashing) and excludes data generation. Private sketches are
calibrated for ``T = 2**20``, ``eps = 0.3``, ``delta = 1e-3`` (the paper's setup) with exact
lattice-Gaussian noise from :mod:`beam_dpsketch.noise` (an insecure seeded key: same cost).

* Lazy: ``update_batch`` in batches of ``2**18`` arrivals (the vectorised column push of docs/algorithms.md#lazy-vectorised, collapsed rounds: only nodes still active after a batch get noise; a Beam DoFn would
  buffer that many arrivals, docs/algorithms.md#lazy-beam), plus Count-Min rows with batches of ``2**16`` and with
  ``faithful=True`` (the noise of every push is drawn: ``d`` values per arrival).
* Punctual: ``faithful=True`` (the baseline's true cost, docs/algorithms.md#lazy-vectorised): ``d * w`` noise values per
  arrival, drawn in blocks of ``2**15`` values at the sampler's batch speed; fewer arrivals are
  timed since it is slow.

The Lazy/Punctual throughput ratio is in the notes of each Lazy row. Run
``python -m benchmarks.bench_continual`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import sys

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.continual.sketch import LazySketch, PunctualSketch
from benchmarks.run import bench_main, best_time, update_in_batches, zipf_keys

WIDTHS = (33, 100, 500, 1000, 2000, 4000)
DEPTH = 3
HORIZON = 1 << 20
EPSILON, DELTA = 0.3, 1e-3
BATCH = 1 << 18
SMALL_BATCH = 1 << 16
UNIVERSE = 100_001
COLUMNS = (
    ("impl", "impl", "<26"),
    ("width", "width", ">6"),
    ("n", "n", ">9"),
    ("items_per_s", "arrivals/s", ">14,.0f"),
    ("notes", "notes", ""),
)


def run(quick: bool = False) -> list[dict]:
    """Rows with keys ``benchmark, impl, width, depth, n, items_per_s, notes``."""
    n_lazy = 1 << 18 if quick else HORIZON
    punct_values = 1_000_000 if quick else 3_000_000  # noise values drawn per Punctual timing
    repeats = 1 if quick else 2
    keys = zipf_keys(n_lazy, 1.3, UNIVERSE)
    source = NoiseSource.insecure_for_tests(0)
    rows: list[dict] = []

    def add(impl: str, width: int, n: int, seconds: float, notes: str = "") -> float:
        rate = n / seconds
        rows.append(
            {
                "benchmark": "continual.update",
                "impl": impl,
                "width": width,
                "depth": DEPTH,
                "n": n,
                "items_per_s": rate,
                "notes": notes,
            }
        )
        print(
            f"  {impl:<26} w={width:<5} {rate / 1e6:10.4f} M arrivals/s  {notes}", file=sys.stderr
        )
        return rate

    for width in WIDTHS:
        for exact_cls in (CountMinSketch, CountSketch):
            secs, _ = best_time(lambda _, c=exact_cls, w=width: c(w, DEPTH).update(keys), repeats)
            add(exact_cls.__name__, width, n_lazy, secs, "non-private, update(keys)")
        n_punct = int(min(1 << 14, max(64, punct_values // (DEPTH * width))))
        for kind in ("cms", "cs"):

            def make(cls: type, faithful: bool | None = None, k: str = kind, w: int = width):
                return cls(
                    w,
                    DEPTH,
                    HORIZON,
                    PrivacyBudget.approx(EPSILON, DELTA),
                    kind=k,
                    release_prefix=("bench", cls.__name__, k, w),
                    noise_source=source,
                    faithful=faithful,
                )

            part = keys[:n_punct]
            secs, punct = best_time(
                lambda _, m=make, p=part: update_in_batches(m(PunctualSketch), p, BATCH), 1
            )
            p_rate = add(
                f"PunctualSketch[{kind}]",
                width,
                n_punct,
                secs,
                f"faithful; {punct.noise_values_drawn / n_punct:.0f} noise values/arrival",
            )
            variants = [("", None, BATCH, repeats)]
            if kind == "cms":
                variants += [
                    (" batch 2^16", None, SMALL_BATCH, repeats),
                    (" faithful", True, BATCH, 1),
                ]
            for label, faithful, batch, reps in variants:
                secs, lazy = best_time(
                    lambda _, m=make, f=faithful, b=batch: update_in_batches(
                        m(LazySketch, f), keys, b
                    ),
                    reps,
                )
                rate = n_lazy / secs
                add(
                    f"LazySketch[{kind}]{label}",
                    width,
                    n_lazy,
                    secs,
                    f"batch 2^{batch.bit_length() - 1}; "
                    f"{lazy.noise_values_drawn / n_lazy:.3f} noise values/arrival; "
                    f"Lazy/Punctual = {rate / p_rate:,.0f}x",
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    bench_main(run, COLUMNS, argv)


if __name__ == "__main__":
    main()
