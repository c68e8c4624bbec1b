"""Throughput of the intermittent-query sketches (:mod:`beam_dpsketch.sketches.intermittent.sketch`).

Run ``python benchmarks/bench_intermittent.py`` (or ``python -m benchmarks.bench_intermittent``;
add ``--quick`` for a smoke run). Rows report the best of a few repeats, single-threaded:

* ``arrivals``: stream elements per second into the exact table, batched (10 M keys of an
  i.i.d. Zipf(1) stream over ``2**29`` items, [YKAE, Section VI]), through
  ``update`` (hashing included) and ``update_hashes`` (pre-hashed);
* ``answers``: point answers per second for one batch of ``n`` int64 query keys (hashing, cell
  refresh with exact discrete Laplace draws, median/min, metadata), for each strategy;
* ``batches``: batches per second with ``n`` keys each (the per-batch cost of small batches is the
  noise sampler's per-stream overhead, one stream per touched block of 4096 cells).

Goals: >= 5 M arrivals/s batched and >= 1 M point answers/s.
"""

from __future__ import annotations

import time

import numpy as np

from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.intermittent.strategies import make_intermittent_sketch
from benchmarks.run import bench_main, best_time
from reproduction.datasets import zipf_stream

WIDTH, DEPTH = 1 << 16, 5
PAPER_WIDTH, PAPER_DEPTH = 5000, 9
COLUMNS = (
    ("benchmark", "benchmark", "<17"),
    ("impl", "impl", "<34"),
    ("width", "width", ">6"),
    ("depth", "depth", ">5"),
    ("n", "n", ">10,"),
    ("items_per_s", "items/s", ">14,.0f"),
    ("notes", "notes", ""),
)


def _sketch(strategy: str, width: int, depth: int, kind: str, sid: object):
    extra = {"eta": 0.9} if "forget" in strategy else {}
    return make_intermittent_sketch(
        strategy,
        width,
        depth,
        PrivacyBudget.pure(1.0),
        noise_source=NoiseSource.insecure_for_tests(0),
        sketch_id=sid,
        kind=kind,
        seed=1,
        **extra,
    )


def run(quick: bool = False) -> list[dict]:
    """Measure every case; rows have keys ``benchmark, impl, width, depth, n, items_per_s, notes``."""
    n_arrivals = 1_000_000 if quick else 10_000_000
    n_answers = 100_000 if quick else 1_000_000
    repeats = 1 if quick else 3
    stream = zipf_stream(n_arrivals, 1.0, 1 << 29, seed=0)
    h1, h2 = hash_keys(stream, 1)
    rows: list[dict] = []

    def row(benchmark, impl, width, depth, n, seconds, notes=""):
        rows.append(
            {
                "benchmark": benchmark,
                "impl": impl,
                "width": width,
                "depth": depth,
                "n": n,
                "items_per_s": n / seconds,
                "notes": notes,
            }
        )

    for width, depth in ((WIDTH, DEPTH), (PAPER_WIDTH, PAPER_DEPTH)):
        for kind in ("count_sketch", "count_min"):
            impl = f"use_and_keep/{kind}"
            sk = _sketch("use_and_keep", width, depth, kind, "warm")
            sk.update(stream[:1000])
            secs, _ = best_time(
                lambda i, w=width, d=depth, k=kind: _sketch("use_and_keep", w, d, k, i).update(
                    stream
                ),
                repeats,
            )
            row(
                "arrivals",
                impl,
                width,
                depth,
                n_arrivals,
                secs,
                "update(int64 keys), hashing included",
            )
            secs, _ = best_time(
                lambda i, w=width, d=depth, k=kind: _sketch(
                    "use_and_keep", w, d, k, i
                ).update_hashes(h1, h2),
                repeats,
            )
            row("arrivals", impl, width, depth, n_arrivals, secs, "update_hashes (pre-hashed)")

    # One full-size table with the whole stream, then query batches against it.
    rng = np.random.default_rng(1)
    queries = stream[rng.integers(0, stream.size, n_answers)]
    for strategy in (
        "use_and_keep",
        "static_cell",
        "use_and_forget_cell",
        "batch_m_q",
        "use_and_forget_median",
    ):
        for kind in ("count_sketch", "count_min"):
            sk = _sketch(strategy, WIDTH, DEPTH, kind, ("answers", strategy))
            sk.update_hashes(h1, h2)
            sk.answer(queries[:10])
            secs, _ = best_time(lambda i, sk=sk: sk.answer(queries), repeats)
            note = {
                "use_and_keep": "one batch; a kept draw added to every cell read",
                "static_cell": "one batch; lazy draws for every cell read",
                "use_and_forget_cell": "one batch; a fresh draw for every cell read",
            }.get(strategy, "one batch; one draw per distinct answer")
            row("answers", f"{strategy}/{kind}", WIDTH, DEPTH, n_answers, secs, note)
    qh1, qh2 = hash_keys(queries, 1)
    sk = _sketch("use_and_keep", WIDTH, DEPTH, "count_sketch", "prehashed")
    sk.update_hashes(h1, h2)
    secs, _ = best_time(lambda i: sk.answer_hashes(qh1, qh2), repeats)
    row("answers", "use_and_keep/count_sketch", WIDTH, DEPTH, n_answers, secs, "answer_hashes")

    # Small batches: cost per batch.
    for n_q, count in ((1, 20 if quick else 200), (1000, 10 if quick else 50)):
        sk = _sketch("use_and_keep", WIDTH, DEPTH, "count_sketch", ("small", n_q))
        sk.update_hashes(h1[:100_000], h2[:100_000])
        batches = [queries[i * n_q : (i + 1) * n_q] for i in range(count)]
        start = time.perf_counter()
        for q in batches:
            sk.answer(q)
        secs = time.perf_counter() - start
        row(
            "batches",
            "use_and_keep/count_sketch",
            WIDTH,
            DEPTH,
            count,
            secs,
            f"n_Q={n_q} per batch",
        )

    # State round trip (Beam checkpoint) for the full-size D3 table.
    sk = _sketch("use_and_keep", WIDTH, DEPTH, "count_sketch", "bytes")
    sk.update_hashes(h1, h2)
    sk.answer(queries)
    data = sk.to_bytes()
    secs, _ = best_time(
        lambda i: type(sk).from_bytes(sk.to_bytes(), NoiseSource.insecure_for_tests(0)), repeats
    )
    row(
        "state_round_trip", "use_and_keep/count_sketch", WIDTH, DEPTH, 1, secs, f"{len(data)} bytes"
    )
    return rows


def main(argv: list[str] | None = None) -> None:
    bench_main(run, COLUMNS, argv)


if __name__ == "__main__":
    main()
