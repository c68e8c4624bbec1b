"""Sharded sequential heavy hitters: Design D and the untrusted sum against Sequential and Design B.

One Zipf(1.1) stream over 10^5 items, ``k = 1024`` counters per sketch, ``eps = 1``,
``delta = 1e-6``; the release mechanisms of ``DPHeavyHitters`` driven without Beam (each gets the
accumulator its pipeline step builds):

* ``sequential``: one Algorithm-1 sketch of the whole stream, PMG;
* ``design-b``: Algorithm 1 per contiguous segment (``s`` of them), Algorithm 3 and an exact sum,
  APPROX_PP behind the exactness gate;
* ``design-d``: ``s`` sketches, element ``x`` in shard ``H(x) mod s``, PMG per shard, the union;
* ``untrusted-shards``: ``s`` contiguous segments as data holders, PMG per holder, released
  values summed.

Reported per mechanism and ``s``: keys released, recall of the true top 50, mean and max
absolute error over the released keys, the median stated 95 % error bound, and the seconds to
build the sketches and to release (means over seeded trials). Command:
``python -m benchmarks.run --only "Sharded"``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import MisraGries, ShardedMisraGries
from beam_dpsketch.transforms.heavy_hitters import DesignB, DesignD, Sequential, UntrustedShards

ITEMS = 100_000
K = 1024
SHARDS = (2, 8)
TOP = 50
BUDGET = PrivacyBudget.approx(1.0, 1e-6)


def zipf_keys(n: int, seed: int) -> np.ndarray:
    ranks = np.arange(1, ITEMS + 1, dtype=np.float64)
    pmf = ranks**-1.1 / np.sum(ranks**-1.1)
    return np.random.default_rng(seed).choice(ITEMS, size=n, p=pmf).astype(np.int64)


def accumulator(name: str, keys: np.ndarray, s: int) -> Any:
    """What the mechanism's pipeline step hands its release for this stream."""
    if name == "sequential":
        return MisraGries(K).update(keys)
    if name == "design-d":
        return ShardedMisraGries(K, s).update(keys)
    if name == "untrusted-shards":
        out = ShardedMisraGries(K, s, "holder")
        for j, part in enumerate(np.array_split(keys, s)):
            out.update_shard(j, part)
        return out
    fn = DesignB(K, max_shards=s).combine_fn()
    accs = []
    for part in np.array_split(keys, s):
        acc = fn.create_accumulator()
        accs.append(fn.add_input(acc, part))
    return fn.extract_output(fn.merge_accumulators(accs))


def mechanism(name: str, s: int) -> Any:
    if name == "sequential":
        return Sequential(K)
    if name == "design-b":
        return DesignB(K, max_shards=s)
    if name == "design-d":
        return DesignD(K, shards=s)
    return UntrustedShards(K, shards=s)


def measure(name: str, s: int, n: int, trials: int) -> dict[str, Any]:
    rows = []
    for trial in range(trials):
        keys = zipf_keys(n, trial)
        f = np.bincount(keys, minlength=ITEMS)
        top = set(np.argsort(-f, kind="stable")[:TOP].tolist())
        m = mechanism(name, s).bind(top=None, max_contributions=None)
        t0 = time.perf_counter()
        acc = accumulator(name, keys, s)
        t1 = time.perf_counter()
        source = NoiseSource.insecure_for_tests(trial)
        records = m.release(acc, BUDGET, source.stream(("bench-sharded", name, s)))
        t2 = time.perf_counter()
        est = {r[0]: float(r[1]) for r in records}
        errors = [abs(v - f[x]) for x, v in est.items()] or [0.0]
        bounds = [r.error_bound for r in records if getattr(r, "error_bound", None) is not None]
        rows.append(
            {
                "keys": len(est),
                "recall": len(top & set(est)) / TOP,
                "mae": float(np.mean(errors)),
                "max_err": float(np.max(errors)),
                "bound": float(np.median(bounds)) if bounds else float("nan"),
                "build_s": t1 - t0,
                "release_s": t2 - t1,
            }
        )
    out: dict[str, Any] = {"impl": name, "shards": "-" if name == "sequential" else s, "n": n}
    for key in rows[0]:
        out[key] = float(np.mean([r[key] for r in rows]))
    return out


def _row(r: dict[str, Any]) -> str:
    return (
        f"| {r['impl']} | {r['shards']} | {r['n']:,} | {r['keys']:.0f} | {r['recall']:.2f} | "
        f"{r['mae']:.1f} | {r['max_err']:.0f} | {r['bound']:.1f} | {r['build_s']:.2f} | "
        f"{r['release_s']:.3f} |"
    )


def run(quick: bool) -> str:
    n = 1 << 17 if quick else 1 << 21
    trials = 2 if quick else 5
    results = [measure("sequential", 1, n, trials)]
    for s in SHARDS:
        for name in ("design-b", "design-d", "untrusted-shards"):
            results.append(measure(name, s, n, trials))
    lines = [
        f"Zipf(1.1) over {ITEMS:,} items, k = {K} per sketch, eps = 1, delta = 1e-6, "
        f"{trials} seeded trials (means). Errors are |released - true| over the released keys; "
        "`bound` is the median stated 95 % error bound of a row.",
        "",
        "| impl | shards | n | keys | recall@50 | mean abs err | max abs err | bound | "
        "build s | release s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in results),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick=True))
