"""Top keys with no candidate list (``DPTopKeys``) against the releases that need one.

Run ``python benchmarks/bench_top_keys.py`` (``--quick`` for a smoke run). Each method runs as a
Beam transform on the in-process FnApiRunner, over the same Zipf(1.1) stream of string keys
(``page/<rank>`` over ``10^5`` ranks), at the same ``(epsilon, delta)`` budget, ``TRIALS``
noise draws each:

* ``DPTopKeys`` (prefix tree, 2048 x 5 per level, ``max_key_bytes`` 12: 13 levels): no key list;
* ``DPFrequencies`` with ``query_keys`` = every distinct key of the input (the candidate-list
  version, told the true key set; the ``k`` largest noisy counts);
* ``DPHeavyHitters`` with its default release (select-then-count over Misra-Gries, with the
  command line's default ``k`` counters), which also needs no key list but keeps ``k`` keys of
  the raw stream.

Columns: recall@k against the exact top ``k``, mean absolute error of the released estimates of
the keys found (``mae``), the memory of the exact aggregate (``memory_kib``: the tree's counters,
one int64 per declared key, the Misra-Gries counters), and the wall time of the pipeline.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.sizing import SELECT_COUNT_K
from beam_dpsketch.sketches.prefix_tree import PrefixTreeSketch
from benchmarks.run import bench_main, zipf_keys

BUDGET = PrivacyBudget.approx(1.0, 1e-6)
WIDTH, DEPTH, MAX_KEY_BYTES = 2048, 5, 12
TRIALS = 3
COLUMNS = (
    ("impl", "impl", "<34"),
    ("n", "n", ">10,"),
    ("k", "k", ">4"),
    ("recall", "recall@k", ">9.3f"),
    ("mae", "mae", ">9.1f"),
    ("memory_kib", "memory_kib", ">11,.0f"),
    ("seconds", "seconds", ">8.2f"),
    ("notes", "notes", ""),
)


def _append_to(path: str, element: Any) -> None:
    # In-process runner: one worker appends each released element to the file.
    with open(path, "ab") as f:
        pickle.dump(element, f)


def _run_pipeline(batches: list[pa.Array], transform: Any) -> tuple[float, list[Any]]:
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.pickle")
        start = time.perf_counter()
        with beam.Pipeline(runner=FnApiRunner()) as p:
            rows = p | beam.Create(batches) | transform
            rows | beam.Map(lambda e: _append_to(path, e))
        seconds = time.perf_counter() - start
        out: list[Any] = []
        if os.path.exists(path):
            with open(path, "rb") as f:
                while True:
                    try:
                        out.append(pickle.load(f))
                    except EOFError:
                        break
    return seconds, out


def _score(rows: list[tuple[Any, float]], exact: Counter, top: list[str]) -> tuple[float, float]:
    keys = [r[0] for r in rows]
    recall = len(set(keys) & set(top)) / len(top)
    errors = [abs(float(est) - exact[key]) for key, est in rows]
    return recall, float(np.mean(errors)) if errors else float("nan")


def run(quick: bool = False) -> list[dict]:
    from beam_dpsketch.transforms import DPFrequencies, DPHeavyHitters, DPTopKeys

    n = 200_000 if quick else 2_000_000
    ranks = zipf_keys(n, 1.1, 100_000, seed=29)
    keys = np.array([f"page/{r}" for r in ranks.tolist()], dtype=object)
    batches = [pa.array(list(b), pa.string()) for b in np.array_split(keys, 16)]
    exact = Counter(keys.tolist())
    distinct = sorted(exact)
    out = []
    for k in (10, 50):
        top = [key for key, _ in exact.most_common(k)]
        methods = {
            "DPTopKeys (prefix tree, no list)": (
                lambda t, k=k: DPTopKeys(
                    k,
                    BUDGET,
                    width=WIDTH,
                    depth=DEPTH,
                    max_key_bytes=MAX_KEY_BYTES,
                    noise_source=NoiseSource.insecure_for_tests(t),
                    label=f"tk{t}",
                ),
                PrefixTreeSketch(WIDTH, DEPTH, MAX_KEY_BYTES).memory_bytes(),
                f"{MAX_KEY_BYTES + 1} levels of {DEPTH} x {WIDTH}",
            ),
            "DPFrequencies (true keys declared)": (
                lambda t: DPFrequencies(
                    budget=BUDGET,
                    query_keys=distinct,
                    noise_source=NoiseSource.insecure_for_tests(t),
                    label=f"fq{t}",
                ),
                8 * len(distinct),
                f"{len(distinct):,} declared keys",
            ),
            "DPHeavyHitters (default, MG)": (
                lambda t, k=k: DPHeavyHitters(
                    SELECT_COUNT_K,
                    BUDGET,
                    top=k,
                    noise_source=NoiseSource.insecure_for_tests(t),
                    label=f"hh{t}",
                ),
                16 * SELECT_COUNT_K,
                f"Misra-Gries k = {SELECT_COUNT_K}",
            ),
        }
        for impl, (make, memory, notes) in methods.items():
            recalls, maes, times = [], [], []
            for t in range(TRIALS):
                seconds, got = _run_pipeline(batches, make(t))
                if impl.startswith("DPFrequencies"):
                    (released,) = got
                    rows = released.heavy_hitters(distinct, top=k)
                else:
                    rows = [(r[0], r[1]) for r in got]
                recall, mae = _score(rows, exact, top)
                recalls.append(recall)
                maes.append(mae)
                times.append(seconds)
            out.append(
                {
                    "impl": impl,
                    "n": n,
                    "k": k,
                    "recall": float(np.mean(recalls)),
                    "mae": float(np.nanmean(maes)),
                    "memory_kib": memory / 1024,
                    "seconds": float(np.median(times)),
                    "notes": notes,
                }
            )
    return out


if __name__ == "__main__":
    bench_main(run, COLUMNS)
