"""DP SpaceSaving against Sequential PMG, and user-level PURE_PP against user-level PMG.

DP SpaceSaving (``space-saving``, both cuts) and Sequential PMG (``sequential``) get the same
counters (``2k``, ``k = 64``) and budget (``delta = 1e-3``, [Hol-HH]'s) on Zipf streams over
10^5 items, released through their heavy-hitter mechanism objects without Beam (each gets the
accumulator its pipeline step builds). Reported per skew and epsilon: keys released, recall and
precision of the true heavy hitters ``f >= n/k`` after the reporting cut ``estimate >= n/k``,
the average relative error (ARE) of the reported keys, and the seconds to build the sketch
(update throughput). Then ``user-pure-pp`` against user-level PMG (group privacy) on the same
flattened user stream: the largest absolute error over the true top 16 and the keys released.
Command: ``python -m benchmarks.run --only "SpaceSaving"``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import (
    MisraGries,
    Universe,
    flatten_users,
    user_level_pmg,
    user_level_pure_pp,
)
from beam_dpsketch.sketches.space_saving import SpaceSaving
from beam_dpsketch.transforms.heavy_hitters import Sequential, SpaceSavingDP

ITEMS = 100_000
K = 64


def zipf_keys(n: int, s: float, seed: int) -> np.ndarray:
    ranks = np.arange(1, ITEMS + 1, dtype=np.float64)
    pmf = ranks**-s / np.sum(ranks**-s)
    return np.random.default_rng(seed).choice(ITEMS, size=n, p=pmf).astype(np.int64)


def _scores(pairs: list[tuple[Any, float]], truth: Counter, n: int) -> dict[str, float]:
    heavy = {x for x, f in truth.items() if f >= n / K}
    reported = {x: v for x, v in pairs if v >= n / K}
    hits = len(heavy & set(reported))
    return {
        "recall": hits / len(heavy) if heavy else 1.0,
        "precision": hits / len(reported) if reported else 1.0,
        "are": float(np.mean([abs(v - truth[x]) / truth[x] for x, v in reported.items()]))
        if reported
        else 0.0,
        "keys": float(len(pairs)),
    }


def _heavy_rows(quick: bool) -> list[dict]:
    n = 200_000 if quick else 4_000_000
    trials = 2 if quick else 5
    mechanisms = {
        "space-saving (minimum cut)": SpaceSavingDP(2 * K),
        "space-saving (rows cut)": SpaceSavingDP(2 * K, cut="rows"),
        "sequential (PMG)": Sequential(2 * K),
    }
    rows = []
    for s in (1.1, 1.4, 1.7):
        for eps in (0.1, 1.0):
            budget = PrivacyBudget.approx(eps, 1e-3)
            acc: dict[str, list[dict[str, float]]] = {name: [] for name in mechanisms}
            for t in range(trials):
                keys = zipf_keys(n, s, seed=t)
                truth = Counter(keys.tolist())
                for name, mech in mechanisms.items():
                    start = time.perf_counter()
                    if name.startswith("space"):
                        sketch: Any = SpaceSaving(2 * K).update(keys)
                    else:
                        sketch = MisraGries(2 * K).update(keys)
                    build = time.perf_counter() - start
                    stream = NoiseSource.insecure_for_tests(t).stream(
                        ("bench", name, str(s), str(eps))
                    )
                    rel = mech.bind(top=None, max_contributions=None).release_object(
                        sketch, budget, stream
                    )
                    scores = _scores(list(rel.items), truth, n)
                    scores["items_per_s"] = n / build
                    acc[name].append(scores)
            for name, runs in acc.items():
                mean = {m: float(np.mean([r[m] for r in runs])) for m in runs[0]}
                rows.append(
                    {
                        "benchmark": f"Zipf({s}), n={n:,}",
                        "impl": name,
                        "epsilon": eps,
                        "counters": 2 * K,
                        "keys": round(mean["keys"], 1),
                        "recall": round(mean["recall"], 3),
                        "precision": round(mean["precision"], 3),
                        "are": round(mean["are"], 4),
                        "items_per_s": round(mean["items_per_s"]),
                    }
                )
    return rows


def _user_rows(quick: bool) -> list[dict]:
    n_users = 5_000 if quick else 50_000
    universe = Universe.from_keys(range(2000))
    rows = []
    for m in (1, 4):
        rng = np.random.default_rng(m)
        draws = np.minimum(rng.zipf(1.2, size=(n_users, m)), 2000) - 1
        flat = flatten_users([sorted(set(r.tolist())) for r in draws])
        truth = Counter(flat)
        top = [x for x, _ in truth.most_common(16)]
        sketch = MisraGries(K).update(flat)
        src = NoiseSource.insecure_for_tests(m)
        for name, rel in (
            (
                "user-pure-pp (pure eps=1)",
                user_level_pure_pp(sketch, universe, PrivacyBudget.pure(1.0), m, src.stream("p")),
            ),
            (
                "user-level PMG (eps=1, delta=1e-6)",
                user_level_pmg(sketch, PrivacyBudget.approx(1.0, 1e-6), m, src.stream("g")),
            ),
        ):
            est = dict(rel.items)
            rows.append(
                {
                    "benchmark": f"users={n_users:,}, m={m}, k={K}",
                    "impl": name,
                    "epsilon": 1.0,
                    "counters": K,
                    "keys": len(est),
                    "recall": round(len(set(top) & set(est)) / len(top), 3),
                    "max_err_top16": round(max(abs(est.get(x, 0.0) - truth[x]) for x in top), 1),
                }
            )
    return rows


def run(quick: bool) -> list[dict]:
    """The rows of both comparisons (see the module docstring)."""
    return _heavy_rows(quick) + _user_rows(quick)
