"""The Count-Median benchmark section runs on a small input and reports what it promises."""

from __future__ import annotations

from beam_dpsketch.noise import NoiseSource
from benchmarks import bench_count_median, run


def test_section_is_registered_and_rows_carry_every_column():
    (columns,) = [c for _, target, c in run.SECTIONS if target.endswith("bench_count_median:run")]
    rows = bench_count_median.bench(20_000, 1, NoiseSource.insecure_for_tests(0))
    # Two streams x two shapes x two epsilons x three sketches.
    assert len(rows) == 2 * 2 * 2 * 3
    assert {r["impl"] for r in rows} == {"count-median", "count-sketch", "count-min"}
    for r in rows:
        assert set(columns) <= set(r)
        assert 0.0 <= r["coverage"] <= 1.0 and r["mae_top"] >= 0 and r["seconds"] > 0
    # On the general turnstile stream, with collisions (5 x 2048), Count-Min's minimum is no
    # upper bound and errs far more than Count-Median.
    turn = [r for r in rows if "turnstile" in r["dataset"] and r["shape"] == "5 x 2048"]
    by = {(r["impl"], r["epsilon"]): r["mae_random"] for r in turn}
    for eps in bench_count_median.EPSILONS:
        assert by[("count-median", eps)] < by[("count-min", eps)]
