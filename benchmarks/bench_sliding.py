"""Update throughput of DPSW-Sketch and its baselines ([WWC24, Section 5]).

Run ``python benchmarks/bench_sliding.py`` (``--quick`` for a smoke run under a minute). Items per
second over the update calls only (the stream is generated beforehand), batched updates of
``2**16`` items, single-threaded, int64 Zipf(1.1) keys over ``{1..25600}`` (the paper's synthetic
domain). Count-Min shape ``depth = 3``, ``width = 1000`` (paper: ``a`` in 2..5, ``b`` in
500..5000); privacy ``eps = 1``, ``delta = 1e-10.5`` (``rho = 0.0101``).

What dominates: DPSW draws ``depth * width`` exact lattice-Gaussian samples per sealed PCMS, i.e.
``(2|I| - 1) * depth * width / B`` samples per item; at a few million samples per second this
bounds small-block configurations (the ``theory`` preset, and ``paper_experiments`` at small
``w``), while hashing and counting alone run at tens of millions of items per second.
"""

from __future__ import annotations

from collections.abc import Callable

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.sliding.baselines import (
    PCCMG,
    ExactSlidingWindow,
    ExactWindowCountMin,
    USketch,
)
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch
from benchmarks.run import _timed, bench_main, update_in_batches, zipf_keys

WIDTH, DEPTH, DOMAIN = 1000, 3, 25_600
BATCH = 1 << 16
BUDGET = PrivacyBudget.approx(1.0, 10**-10.5)
COLUMNS = (
    ("impl", "impl", "<32"),
    ("window", "window", ">9,"),
    ("n", "n", ">9,"),
    ("items_per_s", "items/s", ">14,.0f"),
    ("notes", "notes", ""),
)


def _impls(window: int) -> list[tuple[str, Callable[[], object], str]]:
    src = NoiseSource.insecure_for_tests(0)

    def dpsw_paper() -> DPSWSketch:
        return DPSWSketch.paper_experiments(
            window, BUDGET, width=WIDTH, depth=DEPTH, noise_source=src
        )

    def dpsw_theory() -> DPSWSketch:
        return DPSWSketch.theory(window, BUDGET, width=WIDTH, depth=DEPTH, noise_source=src)

    pe, th = dpsw_paper(), dpsw_theory()

    def per_item(sk: DPSWSketch) -> str:
        pcms = 2 * len(sk.checkpoints) - 1
        return (
            f"B={sk.block}, |I|={len(sk.checkpoints)}, "
            f"{pcms * DEPTH * WIDTH / sk.block:.3g} noise samples/item"
        )

    return [
        ("dpsw/paper_experiments", dpsw_paper, per_item(pe)),
        ("dpsw/theory", dpsw_theory, per_item(th)),
        (
            "dpsw/paper_experiments-no-noise",
            lambda: DPSWSketch.paper_experiments(
                window,
                BUDGET,
                width=WIDTH,
                depth=DEPTH,
                noise_source=NoiseSource.zero_noise_for_tests(),
            ),
            "cost breakdown only (test-only zero-noise source): hashing, counting, sealing",
        ),
        (
            "usketch",
            lambda: USketch(window, 1.0, width=WIDTH, depth=DEPTH, noise_source=src),
            "100 blocks/window, 2 exact CMS per block; noise at query time",
        ),
        (
            "pcc-mg",
            lambda: PCCMG(
                window,
                PrivacyBudget.pure(1.0),
                lam=0.05,
                universe=range(1, DOMAIN + 1),
                noise_source=src,
            ),
            "lambda=0.05; pure-DP release of every block over the 25,600-key universe",
        ),
        (
            "exact-window-cms",
            lambda: ExactWindowCountMin(window, width=WIDTH, depth=DEPTH),
            "non-private reference (exact window Count-Min)",
        ),
        ("exact-window", lambda: ExactSlidingWindow(window), "non-private ground truth"),
    ]


def run(quick: bool = False) -> list[dict]:
    """Measure every implementation at each window; rows: benchmark, impl, window, n,
    items_per_s, notes."""
    windows = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    rows = []
    for window in windows:
        for impl, make, notes in _impls(window):
            # Enough items to cross >= 2 windows (so blocks seal and expire), capped where the
            # per-item cost is high (theory preset: noise-bound; pcc-mg: per-block releases).
            n = 2 * window if not quick else min(2 * window, 100_000)
            if impl in ("dpsw/theory", "pcc-mg"):
                n = min(n, 50_000 if quick else 300_000)
            if impl == "dpsw/paper_experiments" and window == 10_000:
                n = min(n, 100_000)
            keys = zipf_keys(n, 1.1, DOMAIN)
            sketch = make()
            rate = _timed(lambda s=sketch, k=keys: update_in_batches(s, k, BATCH), n)
            rows.append(
                {
                    "benchmark": "sliding_update",
                    "impl": impl,
                    "window": window,
                    "n": n,
                    "items_per_s": rate,
                    "notes": notes,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    bench_main(run, COLUMNS, argv)


if __name__ == "__main__":
    main()
