"""Federated release: ``k`` organisations' released sketches merged, against one pooled release.

The nearest existing mechanism is one ``DPFrequencies`` release of all the data (a trusted
aggregator sees every row). In a federated release no one may see all the rows: each of ``k``
organisations releases a sketch of its disjoint share, exactly as ``DPFrequencies`` releases one
(no offset; discrete Laplace on a lattice for a pure budget), with the same public shape, hash
seed and ``epsilon``, and ``merge_released`` sums them (docs/algorithms.md#lin-merge-released).

Per (sketch, ``k``), over ``trials`` hash seeds and noise draws: mean absolute error on the true
top-100 keys and on 1,000 random distinct keys, coverage of ``error_bound(0.95)`` over both key
sets, the uniform noise bound ``E``, and the seconds the merge takes (reading the ``k`` published
byte strings back included). The pooled row has ``k = 1``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from reproduction import datasets

EPSILON = 1.0
ORGS = (1, 2, 4, 8)
TOP, RANDOM_KEYS, ITEMS = 100, 1000, 100_000
CONFIDENCE = 0.95
KINDS = ("count-sketch", "count-min")


def _release(kind: str, keys: np.ndarray, shape: tuple[int, int], seed: int, tag: Any, source):
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms.frequencies import LinearSketchReleaseMechanism

    depth, width = shape
    mech = LinearSketchReleaseMechanism(kind, width, depth, seed, "add_remove")
    exact = mech.record_type.EXACT(width, depth, seed).update(keys)
    (released,) = mech.release(
        exact, PrivacyBudget.pure(EPSILON), source.stream(("bench-merge", kind, seed, tag))
    )
    return released


def bench(n: int, shape: tuple[int, int], trials: int, source: Any = None) -> list[dict]:
    """Rows ``impl, sketch, orgs, mae_top, mae_random, coverage, noise_bound, merge_seconds``
    (means over ``trials``); ``source`` is the noise source (default: a fresh secure one)."""
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.sketches.linear import PRIVATE_LINEAR_SKETCHES, merge_released

    source = NoiseSource() if source is None else source
    keys = datasets.zipf_stream(n, 1.1, ITEMS, seed=5)
    items, counts = np.unique(keys, return_counts=True)
    rng = np.random.default_rng(0)
    top = np.argsort(-counts, kind="stable")[:TOP]
    rand = rng.choice(len(items), size=min(RANDOM_KEYS, len(items)), replace=False)
    rows = []
    for kind in KINDS:
        cls = PRIVATE_LINEAR_SKETCHES[kind]
        for k in ORGS:
            acc: dict[str, list[float]] = {}
            for t in range(trials):
                seed = 100 + t
                shares = np.array_split(keys, k)
                published = [
                    _release(kind, share, shape, seed, (k, i), source).to_bytes()
                    for i, share in enumerate(shares)
                ]
                start = time.perf_counter()
                released = [cls.from_bytes(b) for b in published]
                merged = released[0] if k == 1 else merge_released(released)
                seconds = time.perf_counter() - start
                est = merged.estimate(items)
                err = np.abs(est - counts)
                bound = merged.error_bound(CONFIDENCE)
                picked = np.concatenate([top, rand])
                for name, value in (
                    ("mae_top", float(np.mean(err[top]))),
                    ("mae_random", float(np.mean(err[rand]))),
                    ("coverage", float(np.mean(err[picked] <= bound))),
                    ("noise_bound", float(merged.noise_bound)),
                    ("merge_seconds", seconds),
                ):
                    acc.setdefault(name, []).append(value)
            rows.append(
                {
                    "impl": "pooled release (one DPFrequencies)"
                    if k == 1
                    else f"merge of {k} released shares",
                    "sketch": kind,
                    "orgs": k,
                    **{name: round(float(np.mean(v)), 4) for name, v in acc.items()},
                }
            )
            print(f"  {kind} k={k}: {rows[-1]}", file=sys.stderr)
    return rows


def run(quick: bool) -> list[dict]:
    """``benchmarks.run`` entry point: ``10^5`` rows and ``3 x 2**14`` when quick, else
    ``10^6`` rows and the ``DPFrequencies`` default shape ``3 x 2**18``."""
    if quick:
        return bench(100_000, (3, 1 << 14), trials=2)
    return bench(1_000_000, (3, 1 << 18), trials=5)
