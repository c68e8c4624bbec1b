"""Count-Median against Count Sketch and Count-Min: point error and error bars, equal budget and shape.

The three released sketches of ``DPFrequencies`` (``sketch="count-median"``, ``"count-sketch"``,
``"count-min"``), released as the transform releases them (no offset, discrete Laplace on a
lattice for a pure budget), with the same shape, hash seed and ``epsilon``, on two streams:

* insert-only Zipf(1.1) over ``10^5`` items (every frequency non-negative);
* general turnstile: the same insertions and half as many deletions drawn from a Zipf(1.1) with
  permuted ranks, so about a third of the keys end negative.

Per (stream, shape, epsilon, sketch), over ``trials`` hash seeds and noise draws: mean absolute
error on the true top-100 keys (by absolute frequency) and on 1,000 random distinct keys,
coverage of ``error_bound(0.95)`` over both key sets, the bound's width against the actual
95th-percentile error, and the seconds to build and release the sketch.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from reproduction import datasets

EPSILONS = (0.1, 1.0)
SHAPES = ((5, 2048), (3, 1 << 18))  # (depth, width): collisions dominate / the CLI default
TOP, RANDOM_KEYS, ITEMS = 100, 1000, 100_000
CONFIDENCE = 0.95
KINDS = ("count-median", "count-sketch", "count-min")


def streams(n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``name -> (keys, weights)``: insert-only Zipf and a general turnstile stream."""
    ins = datasets.zipf_stream(n, 1.1, ITEMS, seed=3)
    dels = (datasets.zipf_stream(n // 2, 1.1, ITEMS, seed=4) * 7919) % ITEMS + 1
    ones = np.ones(n, dtype=np.int64)
    return {
        f"Zipf(1.1), N={n:,}, insert-only": (ins, ones),
        f"Zipf(1.1), N={n:,} + {n // 2:,} deletions (general turnstile)": (
            np.concatenate([ins, dels]),
            np.concatenate([ones, -np.ones(len(dels), dtype=np.int64)]),
        ),
    }


def _release(
    kind: str,
    keys: np.ndarray,
    weights: np.ndarray,
    shape: tuple[int, int],
    eps: float,
    seed: int,
    source: Any,
) -> Any:
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms.frequencies import LinearSketchReleaseMechanism

    depth, width = shape
    mech = LinearSketchReleaseMechanism(kind, width, depth, seed, "add_remove", turnstile=True)
    exact_cls = mech.record_type.EXACT
    exact = exact_cls(width, depth, seed).update(keys, weights)
    (released,) = mech.release(
        exact, PrivacyBudget.pure(eps), source.stream(("bench-cmed", kind, shape, repr(eps), seed))
    )
    return released


def bench(n: int, trials: int, source: Any = None) -> list[dict]:
    """Rows ``dataset, shape, epsilon, impl, mae_top, mae_random, coverage, width_vs_p95,
    seconds`` (means over ``trials``); ``source`` is the noise source (default: a fresh secure
    one)."""
    from beam_dpsketch.noise import NoiseSource

    # Imported before the clock starts: the first release would otherwise time Beam's import.
    from beam_dpsketch.transforms.frequencies import SKETCHES

    assert set(KINDS) <= set(SKETCHES)
    source = NoiseSource() if source is None else source
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    for name, (keys, weights) in streams(n).items():
        items, inverse = np.unique(keys, return_inverse=True)
        f = np.bincount(inverse, weights=weights, minlength=len(items)).astype(np.float64)
        top = np.argsort(-np.abs(f), kind="stable")[:TOP]
        rand = rng.choice(len(items), size=min(RANDOM_KEYS, len(items)), replace=False)
        for shape in SHAPES:
            for eps in EPSILONS:
                for kind in KINDS:
                    acc: dict[str, list[float]] = {}
                    for t in range(trials):
                        start = time.perf_counter()
                        rel = _release(kind, keys, weights, shape, eps, t, source)
                        secs = time.perf_counter() - start
                        errs = {
                            part: np.abs(rel.estimate(items[idx]) - f[idx])
                            for part, idx in (("top", top), ("random", rand))
                        }
                        both = np.concatenate(list(errs.values()))
                        bound = rel.error_bound(CONFIDENCE)
                        for key, value in (
                            ("mae_top", errs["top"].mean()),
                            ("mae_random", errs["random"].mean()),
                            ("coverage", np.mean(both <= bound)),
                            ("width_vs_p95", bound / max(np.quantile(both, CONFIDENCE), 1e-9)),
                            ("seconds", secs),
                        ):
                            acc.setdefault(key, []).append(float(value))
                    row = {
                        "dataset": name,
                        "shape": f"{shape[0]} x {shape[1]}",
                        "epsilon": eps,
                        "impl": kind,
                        **{k: float(np.mean(v)) for k, v in acc.items()},
                    }
                    rows.append(row)
                    print(
                        f"  {name[:34]:<34} {row['shape']:<10} eps={eps:<4} {kind:<13} "
                        f"top {row['mae_top']:8.1f} random {row['mae_random']:7.1f} "
                        f"cover {row['coverage']:.3f} width/p95 {row['width_vs_p95']:.2f}",
                        file=sys.stderr,
                    )
    return rows


def run(quick: bool) -> list[dict]:
    """The section of ``python -m benchmarks.run``: ``N = 10^6`` (quick: ``2 * 10^5``)."""
    return bench(200_000 if quick else 1_000_000, 3 if quick else 10)


if __name__ == "__main__":
    for r in run("--quick" in sys.argv):
        print(r)
