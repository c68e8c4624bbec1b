"""User-level heavy hitters against PipelineDP 0.3.1: what each releases at equal budget.

The privacy unit is a user who rates at most ``m`` items (contribution bound), the shape of a
ratings data set: synthetic, 943 users and 1,682 items as in the 100 k-rating MovieLens release
(which is not in the package registries this project can reach), each user rating a
heavy-tailed number of distinct items (mean about 106) drawn by popularity (Zipf, exponent 0.9).

Ours (``DPHistogram`` at user level, the release mechanisms and ``CombineFn``\\ s of the transform,
driven without Beam as in :mod:`benchmarks.bench_accuracy`):

* ``select-then-count`` (memory bounded by ``k``): a selection at ``0.75 eps`` by a Gaussian
  threshold on hashed one-counter PAMG sketches (``4 k`` buckets, noise for L2 sensitivity
  ``sqrt(m)``), then exact counts of the selected items with noise scaled by ``m``;
* ``user-exact`` (the default at user level; memory grows with the distinct items): exact
  bounded counts, Gaussian sparse histogram at ``l = m``;
* ``pamg-gshm`` (memory bounded by ``k``): hashed one-counter PAMG sketches (``4 k`` buckets)
  released with GSHM at ``l = m`` (noise for L2 sensitivity ``sqrt(m)``), all of epsilon.

Each user's ``m`` items are chosen uniformly at random once per ``m`` (as the transform's keyed
hash does); PipelineDP bounds the same raw rows itself (``max_partitions_contributed = m``,
``max_contributions_per_partition = 1``, COUNT, Laplace, private partition selection).
Reported: keys released and recall of the true top 10 and top 50 (by raw counts), means over
seeded trials. Command: ``python -m benchmarks.run --only "User level"``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource

USERS, ITEMS = 943, 1682
DELTA = 1e-6
EPSILONS = (0.5, 1.0, 2.0, 4.0)
BOUNDS = (1, 5, 20)
K = 4096
TRIALS = 5
TOPS = (10, 50)
SEGMENTS = 4


def ratings(seed: int = 0) -> list[np.ndarray]:
    """One array of distinct item ids per user (synthetic benchmark data, seeded)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, ITEMS + 1) ** 0.9
    weights /= weights.sum()
    sizes = np.minimum(20 + rng.geometric(1 / 86, USERS), ITEMS)
    return [np.sort(rng.choice(ITEMS, size=int(s), replace=False, p=weights)) for s in sizes]


def bounded(users: list[np.ndarray], m: int, seed: int) -> list[list[int]]:
    """Each user's at most ``m`` items, chosen uniformly (canonical order within a unit)."""
    rng = np.random.default_rng(seed)
    out = []
    for items in users:
        keep = items if len(items) <= m else rng.choice(items, size=m, replace=False)
        out.append(sorted(int(x) for x in keep))
    return out


def _histogram(mechanism: str, m: int, epsilon: float) -> Any:
    from beam_dpsketch.privacy import PrivacyBudget, PrivacyUnit
    from beam_dpsketch.transforms import DPHistogram

    return DPHistogram(
        K,
        PrivacyBudget.approx(epsilon, DELTA),
        privacy_unit=PrivacyUnit(id=itemgetter(0), max_contributions=m),
        key_fn=itemgetter(1),
        mechanism=mechanism,
    )


def _drive(combine: Any, parts: Sequence[Sequence[Any]]) -> Any:
    from benchmarks.bench_accuracy import drive_combine

    return drive_combine(combine, parts)


def release(mechanism: str, m: int, eps: float, units: list[list[int]], trial: int) -> list[int]:
    """The keys one release of ``mechanism`` publishes (seeded, insecure test noise)."""
    from beam_dpsketch.privacy import PrivacyBudget

    budget = PrivacyBudget.approx(eps, DELTA)
    step = _histogram(mechanism, m, eps).aggregate
    source = NoiseSource.insecure_for_tests(trial)
    cell = ("bench-user-level", mechanism, m, repr(eps))
    parts = [list(p) for p in np.array_split(np.asarray(units, dtype=object), SEGMENTS)]
    if mechanism == "select-then-count":
        selection = step.mechanism.selection
        selection_input = _drive(selection.combine_fn(), parts)
        markers = selection.release(selection_input, budget, source.stream((*cell, "selection")))
        candidates = {x for mk in markers for x in mk.keys}
        exact: dict[int, int] = {}
        for unit in units:
            for x in unit:
                if x in candidates:
                    exact[x] = exact.get(x, 0) + 1
        counts = _drive(step.combine_fn, [[exact, *markers]])
        out = step.mechanism.release(counts, budget, source.stream((*cell, "count")))
    else:
        out = step.mechanism.release(_drive(step.combine_fn, parts), budget, source.stream(cell))
    return [int(r[0]) for r in out]


def pipelinedp(users: list[np.ndarray], m: int, eps: float) -> list[int]:
    """The keys PipelineDP 0.3.1 releases on the raw rows (its own bounding and selection)."""
    import pipeline_dp

    rows = [(u, int(x)) for u, items in enumerate(users) for x in items]
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=DELTA)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        metrics=[pipeline_dp.Metrics.COUNT],
        max_partitions_contributed=m,
        max_contributions_per_partition=1,
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
    )
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=itemgetter(0),
        partition_extractor=itemgetter(1),
        value_extractor=lambda r: 0,
    )
    result = engine.aggregate(rows, params, extractors)
    accountant.compute_budgets()
    return [int(key) for key, _ in result]


def run(quick: bool = False) -> str:
    """Markdown: the table of keys released and recall per method, ``m`` and epsilon."""
    start = time.perf_counter()
    users = ratings()
    raw = np.bincount(np.concatenate(users), minlength=ITEMS)
    order = np.argsort(-raw, kind="stable")
    trials = 2 if quick else TRIALS
    methods = ("select-then-count", "user-exact", "pamg-gshm")
    rows = []
    for m in BOUNDS:
        units = bounded(users, m, seed=m)
        for eps in EPSILONS:
            results: dict[str, list[list[int]]] = {"PipelineDP 0.3.1": []}
            for trial in range(trials):
                results["PipelineDP 0.3.1"].append(pipelinedp(users, m, eps))
                for method in methods:
                    results.setdefault(method, []).append(release(method, m, eps, units, trial))
            for method, runs in results.items():
                if not runs:
                    continue
                recall = {
                    t: float(np.mean([len(set(order[:t].tolist()) & set(r)) / t for r in runs]))
                    for t in TOPS
                }
                rows.append((m, eps, method, float(np.mean([len(r) for r in runs])), recall))
    seconds = time.perf_counter() - start
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Run on {when}; {seconds / 60:.1f} min. Synthetic ratings: {USERS} users, {ITEMS} "
        f"items, {int(raw.sum()):,} ratings (mean {raw.sum() / USERS:.0f} distinct items per "
        f"user, item popularity Zipf 0.9); delta = {DELTA:g}; k = {K} for ours; {trials} "
        "seeded trials per cell (means). Recall is against the true top items by raw counts.",
        "",
        "| m | eps | method | keys released | recall top 10 | recall top 50 |",
        "|---|---|---|---|---|---|",
    ]
    for m, eps, method, released, recall in rows:
        lines.append(
            f"| {m} | {eps:g} | {method} | {released:.1f} | {recall[10]:.2f} | {recall[50]:.2f} |"
        )
    return "\n".join(lines)


#: The cells of the bounded-memory goal (at m = 5 and 20, eps 4: at least half of user-exact's keys).
GOAL_BOUNDS = (1, 5, 20)
GOAL_EPSILONS = (1.0, 4.0)


#: The methods of :func:`goal`: the bounded-memory ones against user-exact and PipelineDP.
GOAL_METHODS = ("pamg-gshm", "select-then-count", "user-exact", "PipelineDP 0.3.1")


def goal(trials: int = 20) -> str:
    """Markdown rows: keys and recall of :data:`GOAL_METHODS`, ``trials`` seeds each.

    Command: ``python -m benchmarks.bench_user_level --goal [--trials N]``.
    """
    users = ratings()
    raw = np.bincount(np.concatenate(users), minlength=ITEMS)
    order = np.argsort(-raw, kind="stable")
    lines = [
        "| m | eps | method | keys released | recall top 10 | recall top 50 |",
        "|---|---|---|---|---|---|",
    ]
    for m in GOAL_BOUNDS:
        units = bounded(users, m, seed=m)
        for eps in GOAL_EPSILONS:
            for method in GOAL_METHODS:
                runs = [
                    pipelinedp(users, m, eps)
                    if method.startswith("PipelineDP")
                    else release(method, m, eps, units, t)
                    for t in range(trials)
                ]
                recall = [
                    float(np.mean([len(set(order[:t].tolist()) & set(r)) / t for r in runs]))
                    for t in TOPS
                ]
                lines.append(
                    f"| {m} | {eps:g} | {method} | {np.mean([len(r) for r in runs]):.1f} | "
                    f"{recall[0]:.2f} | {recall[1]:.2f} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    argv = sys.argv[1:]
    n = int(argv[argv.index("--trials") + 1]) if "--trials" in argv else 20
    print(goal(n) if "--goal" in argv else run(quick=True))
