"""`beam-dpsketch evaluate intermittent`: the vectorised D3 path against the core object, the
reference oracles ([YKAE, Theorem 5; Fig. 1; Fig. 2]), the schedule, and the report's computed verdicts.

Statistical checks are seeded; each states its false-failure probability (<= 1e-6).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from evaluation_helpers import smoke_run

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches import CountSketch
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch, discrete_laplace_variance
from reproduction import cli as eval_cli
from reproduction import datasets
from reproduction.experiments.intermittent import report as it_report
from reproduction.experiments.intermittent import runs as it
from reproduction.report import VERDICTS
from reproduction.runner import load_results

pytest.importorskip("matplotlib")

EXPERIMENTS = (
    "intermittent-runs",
    "intermittent-maxload",
    "intermittent-privacy",
    "intermittent-variance",
    "intermittent-crosscheck",
)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Run ``evaluate intermittent --smoke`` once through the CLI; return the report directory."""
    return smoke_run(tmp_path_factory, "intermittent")


def _instance(seed=3, n=4000, width=50, depth=7, b=9, n_q=12):
    stream = datasets.zipf_stream(n, 1.1, 400, seed)
    times = it.batch_times(n, 300, b)
    queries = it.query_sets(seed, n_q, b, 120)
    queries[0, :3] = 10**6  # never in the stream: f = 0, cells still noised
    queries[1, 1] = queries[1, 0]  # a duplicate within a batch
    cells = it.StreamCells(stream, width, depth, seed)
    return stream, times, queries, it.query_pairs(cells, times, queries)


def _core_answers(stream, times, queries, width, depth, eps, source, sid, seed):
    sk = UseAndKeepSketch(
        width, depth, PrivacyBudget.pure(float(eps)), noise_source=source, sketch_id=sid, seed=seed
    )
    prev, out = 0, []
    for k, t in enumerate(times.tolist()):
        sk.update(stream[prev:t])
        out.append(sk.answer(queries[k], time=t).estimates)
        prev = t
    return np.stack(out)


# ------------------------------------------------------------------------------------------------
# The vectorised path
# ------------------------------------------------------------------------------------------------


def test_stream_cells_equal_the_exact_count_sketch_at_any_time():
    stream = datasets.zipf_stream(3000, 1.2, 500, 1)
    cells = it.StreamCells(stream, 40, 5, 77)
    rng = np.random.default_rng(0)
    for t in (0, 1, 17, 1500, 3000):
        table = CountSketch(40, 5, 77).update(stream[:t]).table
        cols = rng.integers(0, 40, 30)
        for row in range(5):
            got = cells.values(row, cols, np.full(30, t))
            np.testing.assert_array_equal(got, table[row, cols])


@pytest.mark.parametrize("depth", [1, 3, 7])
def test_core_noise_mode_equals_the_core_object_exactly(depth):
    # Same source, ids and seed: the vectorised D3 path reproduces UseAndKeepSketch bit for bit,
    # including never-seen items and duplicates (the oracle of the brief; report claim V1).
    stream, times, queries, pairs = _instance()
    source = NoiseSource.insecure_for_tests(5)
    sid = ("eq", depth)
    fast = it.use_and_keep_answers(
        pairs, 50, depth, "0.3", noise_source=source, sketch_id=sid, seed=3, noise="core"
    )[pairs.inverse]
    core = _core_answers(stream, times, queries, 50, depth, "0.3", source, sid, 3)
    np.testing.assert_array_equal(fast, core)
    # The noise matters (not a zero-noise coincidence), and the pooled mode differs from it.
    exact = it.use_and_keep_answers(
        pairs,
        50,
        depth,
        "0.3",
        sketch_id=sid,
        seed=3,
        noise_source=NoiseSource.zero_noise_for_tests(),
    )
    assert not np.array_equal(exact[pairs.inverse], core)
    pooled = it.use_and_keep_answers(
        pairs, 50, depth, "0.3", noise_source=source, sketch_id=sid, seed=3
    )
    assert not np.array_equal(pooled[pairs.inverse], core)


@pytest.mark.parametrize("noise", ["pooled", "core"])
def test_zero_noise_answers_equal_the_exact_sketch(noise):
    stream, times, queries, pairs = _instance(depth=5)
    zero = NoiseSource.zero_noise_for_tests()
    got = it.use_and_keep_answers(
        pairs, 50, 5, 1.0, noise_source=zero, sketch_id="z", seed=3, noise=noise
    )[pairs.inverse]
    for k, t in enumerate(times.tolist()):
        cs = CountSketch(50, 5, 3).update(stream[:t])
        np.testing.assert_array_equal(got[k], cs.estimate(queries[k]).astype(np.float64))


def test_pooled_noise_is_kept_reproducible_and_calibrated():
    # depth 1: the answer is s(x) (C + N), so the kept noise N of each (cell, batch) is readable.
    n, width, b = 2000, 400, 6
    stream = datasets.zipf_stream(n, 1.1, 300, 2)
    times = it.batch_times(n, 100, b)
    queries = np.tile(np.arange(1, 6001, dtype=np.int64), (b, 1))  # the same keys every batch
    pairs = it.query_pairs(it.StreamCells(stream, width, 1, 2), times, queries)
    source = NoiseSource.insecure_for_tests(8)
    est = it.use_and_keep_answers(
        pairs, width, 1, "0.5", noise_source=source, sketch_id="p", seed=2
    )
    again = it.use_and_keep_answers(
        pairs, width, 1, "0.5", noise_source=source, sketch_id="p", seed=2
    )
    np.testing.assert_array_equal(est, again)
    other = it.use_and_keep_answers(
        pairs, width, 1, "0.5", noise_source=source, sketch_id="q", seed=2
    )
    assert not np.array_equal(est, other)
    kept = (pairs.signs[0] * est - pairs.exact[0]).astype(np.int64)
    cell = pairs.cols[0]
    # One draw per (cell, batch): every item in a cell sees the same kept noise in a batch.
    table = np.full((b, width), np.iinfo(np.int64).min)
    table[pairs.batch, cell] = kept
    assert np.all(table[pairs.batch, cell] == kept)
    assert (table != np.iinfo(np.int64).min).all()  # 6000 keys cover all 400 cells (seeded)
    # Kept: after r batches each cell holds a sum of r draws at the core's scale d/eps = 2.
    v1 = discrete_laplace_variance(Fraction(2))
    a = math.exp(-0.5)
    kurt = 3 + (1 + 4 * a + a * a) / (2 * a)  # kurtosis of one draw (see it._excess_kurtosis)
    for r in range(1, b + 1):
        ratio = np.mean(table[r - 1].astype(np.float64) ** 2) / (r * v1)
        # Mean of 400 i.i.d. squares of a sum of r draws: relative sd sqrt((k_r - 1)/400) with
        # k_r = 3 + (kurt - 3)/r <= kurt; 6 sd (alpha < 1e-8 each, 6 checks) for ratio 1.
        assert abs(ratio - 1) <= 6 * math.sqrt((kurt - 1) / 400), (r, ratio)
    increments = np.diff(table.astype(np.float64), axis=0)
    # Fresh draws are uncorrelated across batches: |corr| of 400 pairs below 6/sqrt(400).
    c = np.corrcoef(increments[0], increments[1])[0, 1]
    assert abs(c) < 0.3


def test_use_and_keep_answers_validates():
    *_, pairs = _instance(depth=3)
    src = NoiseSource.insecure_for_tests(1)
    for depth, noise in ((2, "pooled"), (5, "pooled"), (3, "fresh")):
        with pytest.raises(ValueError):
            it.use_and_keep_answers(
                pairs, 50, depth, 1.0, noise_source=src, sketch_id="v", seed=3, noise=noise
            )


def test_prefix_counts_match_brute_force():
    stream = np.random.default_rng(4).integers(0, 30, 500)
    wc = datasets.WindowCounter(stream)
    keys = np.array([0, 5, 29, 31, 5])
    stops = np.array([0, 250, 500, 100, 1000])
    want = [int(np.sum(stream[: min(s, 500)] == k)) for k, s in zip(keys, stops, strict=True)]
    np.testing.assert_array_equal(wc.prefix_counts(keys, stops), want)
    np.testing.assert_array_equal(
        wc.prefix_counts(keys, 250), [wc.count([k], 0, 250)[0] for k in keys]
    )


def test_schedule_and_queries_follow_spec_6_2():
    t = it.batch_times(2**20, 4096, 100)
    assert t[-1] == 2**20 and t[0] == 4096 + (2**20 - 4096) // 100 and np.all(np.diff(t) > 0)
    assert it.batch_times(100, 10, 3, anchor="start").tolist() == [10, 40, 70]
    assert it.batch_times(100, 10, 3).tolist() == [40, 70, 100]
    q = it.query_sets(1, 1000, 3, 50)
    assert q.shape == (3, 1000) and q.min() == 1 and q.max() == 50
    np.testing.assert_array_equal(q, it.query_sets(1, 1000, 3, 50))
    with pytest.raises(ValueError):
        it.batch_times(100, 10, 3, anchor="middle")


# ------------------------------------------------------------------------------------------------
# Oracles
# ------------------------------------------------------------------------------------------------


def test_theorem5_floor_lambda_table_and_nonmonotone_example():
    for d, floor in ((3, 0.631107), (5, 0.464343), (9, 0.251368), (15, 0.100119)):
        assert float(it.g_d(0.0, d)) == pytest.approx(floor, abs=1e-6)
        assert float(it.g_d(0.5, d)) == pytest.approx(1.0)
    for d, row in it.SPEC_LAMBDA_RHO.items():
        for rho, ref in zip(it.SPEC_RHOS, row, strict=True):
            got = it.lambda_for_rho(d, rho)
            assert (got is None) == (ref is None)
            if ref is not None:
                assert got == pytest.approx(ref, abs=1e-6)
    ds = np.arange(1, 101, 2)
    for kw, (d_min, value) in (({"paper_constants": True}, (47, 0.2409)), ({}, (33, 0.3655))):
        b = np.array([it.theorem5_bound(1e4, 1.0, [1] * d, 200.0, **kw) for d in ds])
        assert ds[np.argmin(b)] == d_min and b.min() == pytest.approx(value, abs=5e-5)


def test_fig2_oracle_matches_spec_4_7():
    assert it.fig2_s4_error(3, 0.0) == pytest.approx(7 / 12, abs=1e-9)
    assert it.fig2_s4_limit(5) == pytest.approx(29 / 24, abs=1e-9)
    for d, ref in it.SPEC_FIG2.items():
        got = [it.fig2_s4_error(d, r) for r in it.FIG2_RATIOS]
        np.testing.assert_allclose(got, ref["s4"], atol=1e-4)
    assert it.fig2_crossover(3) is None
    assert it.fig2_crossover(5) == pytest.approx(2.996, abs=1e-3)
    assert it.fig2_crossover(15) == pytest.approx(2.243, abs=1e-3)


def test_fig2_integration_agrees_with_monte_carlo():
    # Independent check of the integrator at a point off the reference grid (d = 7, u/b = 1.7):
    # 2e5 samples, sd of |median| <= 1.5, so 6 sd = 0.02 (alpha ~ 2e-9).
    rng = np.random.default_rng(12)
    vals = rng.laplace(0, 1, (200_000, 7))
    vals[:, 4:] += 1.7
    mc = np.mean(np.abs(np.median(vals, axis=1)))
    assert it.fig2_s4_error(7, 1.7) == pytest.approx(mc, abs=0.02)


def test_maxload_cell_exact_cases():
    one = it.maxload_cell({"n_q": 1, "width": 5000, "depth": 15, "reps": 50, "core_reps": 2}, 0)
    assert one["em_mean"] == 1.0 and one["em_se"] == 0.0 and one["core_mtilde"] == 1.0
    big = it.maxload_cell(
        {"n_q": 10**4, "width": 5000, "depth": 15, "reps": 200, "core_reps": 1}, 0
    )
    # [YKAE, Fig. 1]: 8.911 +- 0.018; 200 reps give SE ~0.07: 6 SE (alpha ~ 2e-9).
    assert abs(big["em_mean"] - 8.911) <= 6 * math.hypot(big["em_se"], 0.018)
    assert 15 * 5 <= big["core_mtilde"] <= 15 * 14  # mhat_Q << n_Q


# ------------------------------------------------------------------------------------------------
# The report
# ------------------------------------------------------------------------------------------------


def test_intermittent_is_implemented():
    assert eval_cli.PAPERS["intermittent"] == "reproduction.experiments.intermittent"


def test_smoke_writes_html_png_and_tables(smoke):
    html = (smoke / "index.html").read_text()
    pngs = sorted(p.name for p in smoke.glob("*.png"))
    assert {
        "fig3_cmre_e0p01.png",
        "fig3_csre_e1.png",
        "fig4_cmre_e1.png",
        "r1_maxload.png",
        "r2_fig2.png",
        "r11_variance.png",
        "r12_bound.png",
        "summary_mre_nq.png",
    } <= set(pngs)
    for name in pngs:
        assert (smoke / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert name in html
    for exp in EXPERIMENTS:
        assert (smoke / f"{exp}.parquet").exists()
    for cid in [f"R{k}" for k in range(1, 13)] + ["V1"]:
        assert f"<td>{cid}</td>" in html


def _rebuild(smoke, **replace):
    tables = {name: load_results(smoke, name) for name in EXPERIMENTS}
    tables.update(replace)
    report = it_report.build_report(tables, it.MODES["smoke"], smoke, plots=False)
    return {c.id: c for c in report.claims}, tables


def test_smoke_verdicts_follow_the_measurements(smoke):
    claims, tables = _rebuild(smoke)
    assert list(claims) == [f"R{k}" for k in range(1, 13)] + ["V1"]
    assert all(c.verdict in VERDICTS for c in claims.values())
    # Exact oracles and the core's checks hold at any scale.
    for cid in ("R1", "R2", "R3", "R7", "R10", "R11", "R12", "V1"):
        assert claims[cid].verdict == "reproduced", (cid, claims[cid].measured)
    assert "max |difference| = 0" in claims["V1"].measured
    runs = tables["intermittent-runs"]

    def doctored(fn):
        t = runs
        for name in t.column_names:
            if name.startswith("mre_"):
                i = t.column_names.index(name)
                t = t.set_column(i, name, pa.array(fn(name, t)))
        return t

    # R3 moves: give eps = 0.01 the error of eps = 1.
    swapped = doctored(lambda name, t: t[name.replace("e0p01", "e1")].to_pylist())
    assert _rebuild(smoke, **{"intermittent-runs": swapped})[0]["R3"].verdict == "differs"
    # R7 moves: the same MRE for every u.
    flat = doctored(lambda name, t: [1.0] * t.num_rows)
    got = _rebuild(smoke, **{"intermittent-runs": flat})[0]
    assert got["R7"].verdict == "differs" and got["R3"].verdict == "differs"
    # R10 moves: a transcript beyond eps.
    pv = tables["intermittent-privacy"]
    bad = pv.set_column(
        pv.column_names.index("violations"),
        "violations",
        pa.array([0.0] * (pv.num_rows - 1) + [1.0]),
    )
    assert _rebuild(smoke, **{"intermittent-privacy": bad})[0]["R10"].verdict == "differs"


def test_quick_is_the_spec_ci_configuration_and_smoke_is_smaller():
    q, s, f = it.MODES["quick"], it.MODES["smoke"], it.MODES["full"]
    assert (q.n, q.domain, q.t0, q.width, q.total_queries) == (2**20, 2**22, 4096, 5000, 10**4)
    assert q.n_qs == (1, 100, 10**4) and q.us == (50, 5000) and q.reps == 2
    assert q.epsilons == (0.01, 0.05, 1.0) and q.depths == (3, 9, 15)
    assert s.n < q.n < f.n == 2**24 and f.total_queries == 10**6
    assert f.n_qs == (1, 1000, 10**4, 10**5, 10**6) and f.us == (50, 5000, 500_000)
