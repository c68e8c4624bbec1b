"""`beam-dpsketch evaluate lazy` end to end, its computed verdicts, and the cell functions.

The smoke run (T = 2**14) takes seconds; the cell oracles run on streams of a few thousand
arrivals with the test-only zero-noise source, where Punctual must equal the exact sketch and Lazy
must lag it by at most ``w - 1`` per cell (docs/algorithms.md#lazy-oracles S1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from evaluation_helpers import set_float_column, smoke_run

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from reproduction import cli as eval_cli
from reproduction import datasets, metrics
from reproduction.experiments.lazy import report as lazy_report
from reproduction.experiments.lazy import runs as lazy
from reproduction.report import VERDICTS
from reproduction.runner import load_results, run_experiment

pytest.importorskip("matplotlib")

CLAIMS = ("R0", "R1", "R2", "R3", "R4", "R5", "R6")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """Run ``evaluate lazy --smoke`` once through the CLI; return the report directory."""
    return smoke_run(tmp_path_factory, "lazy")


def _tables(directory):
    return {name: load_results(directory, name) for name in ("lazy-throughput", "lazy-accuracy")}


def test_lazy_is_implemented():
    assert eval_cli.PAPERS["lazy"] == "reproduction.experiments.lazy"


def test_smoke_writes_html_png_and_tables(smoke):
    html = (smoke / "index.html").read_text()
    pngs = sorted(p.name for p in smoke.glob("*.png"))
    assert {
        "r0_memory_model.png",
        "fig4a_throughput.png",
        "fig4b_are_memory.png",
        "fig4c_are_depth.png",
        "fig4d_are_skew.png",
        "fig4e_are_eps_skew1.1.png",
        "fig4f_are_eps_skew2.1.png",
        "r1_throughput_width.png",
    } <= set(pngs)
    for name in pngs:
        assert (smoke / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert name in html
    for exp in ("lazy-throughput", "lazy-accuracy"):
        assert (smoke / f"{exp}.parquet").exists() and (smoke / f"{exp}.csv").exists()
    for cid in CLAIMS:
        assert f"<td>{cid}</td>" in html
    assert "_are_avg_mean" in html and "_are_end_mean" in html  # both ARE protocols


def test_smoke_grid_and_rerun_is_cached(smoke):
    tables = _tables(smoke)
    config = lazy.MODES["smoke"]
    acc = tables["lazy-accuracy"]
    assert acc.num_rows == len(lazy.accuracy_grid(config)) * config.trials
    # The sweeps share the base point, which runs once.
    assert len(lazy.accuracy_grid(config)) < (
        len(config.memories_kb) + len(config.depths) + len(config.skews) + 2 * len(config.eps_grid)
    )
    assert set(acc["w_lazy"].to_pylist()) == {
        lazy.paper_width("lazy", m) for m in config.memories_kb
    }
    for exp in lazy.build_experiments(config):  # a second run only reads the cache
        assert run_experiment(exp, smoke, workers=1, progress=False).computed == 0
    claims = _verdicts(tables, smoke)
    assert list(claims) == list(CLAIMS)
    assert all(c.verdict in VERDICTS for c in claims.values())


def test_smoke_cells_record_the_deterministic_costs(smoke):
    tp = _tables(smoke)["lazy-throughput"].to_pylist()
    d = lazy.MODES["smoke"].base_depth
    for row in tp:
        if row["impl"] in ("lazy_cms", "lazy_cs", "lazy_cms_collapsed"):
            assert row["counter_updates_per_arrival"] == pytest.approx(d, abs=1e-12)
        elif row["impl"].startswith("punctual"):
            assert row["counter_updates_per_arrival"] == d * row["width"]
            # faithful=True: one Gaussian value per counter update (blocks may add a few more).
            assert row["noise_values_per_arrival"] >= d * row["width"]
        else:
            assert row["counter_updates_per_arrival"] == 0
        if row["impl"] in ("lazy_cms", "lazy_cs"):
            assert row["noise_values_per_arrival"] >= d
        assert row["arrivals_per_s"] > 0


# ------------------------------------------------------------------------------------------------
# Verdicts are computed from the tables
# ------------------------------------------------------------------------------------------------


def _verdicts(tables, smoke):
    report = lazy_report.build_report(tables, lazy.MODES["smoke"], smoke, plots=False)
    return {c.id: c for c in report.claims}


def test_r1_verdict_follows_the_throughput_table(smoke):
    tables = _tables(smoke)
    tp = tables["lazy-throughput"]
    impl = np.asarray(tp["impl"].to_pylist())
    width = np.asarray(tp["width"].to_pylist(), dtype=np.float64)
    # Lazy and the exact sketches flat, Punctual exactly linear: reproduced once the ratio at
    # the largest width exceeds 250x.
    speed = np.where(np.char.startswith(impl, "punctual"), 1e6 / width, 1e6)
    ok = set_float_column(tp, "arrivals_per_s", speed)
    claims = _verdicts({**tables, "lazy-throughput": ok}, smoke)
    assert claims["R1"].verdict == "reproduced", claims["R1"].reason
    assert "330x" in claims["R1"].measured.replace(",", "")
    # Lazy slowing down with the width breaks "flat".
    lazy_slows = np.where(np.char.startswith(impl, "lazy"), 1e8 / width, speed)
    bad = set_float_column(tp, "arrivals_per_s", lazy_slows)
    claims = _verdicts({**tables, "lazy-throughput": bad}, smoke)
    assert claims["R1"].verdict == "differs"
    assert "not reproduced: CMS, CS and Lazy flat" in claims["R1"].reason
    # A small ratio (Punctual only 10x slower at the largest width) fails the 250x part only.
    ratio_10x = np.where(np.char.startswith(impl, "punctual"), 3.3e5 / width, 1e5)
    small = set_float_column(tp, "arrivals_per_s", ratio_10x)
    claims = _verdicts({**tables, "lazy-throughput": small}, smoke)
    assert claims["R1"].verdict == "differs"
    assert claims["R1"].reason.startswith("partly: ")
    assert "250x" in claims["R1"].reason.split("not reproduced:")[1]


def test_r2_verdict_follows_the_accuracy_table(smoke):
    tables = _tables(smoke)
    acc = tables["lazy-accuracy"]
    mem = np.asarray(acc["memory_kb"].to_pylist(), dtype=np.float64)
    good = acc
    for s in lazy.SKETCHES:
        level = {"lazy": 1.0, "punctual": 2.0}.get(s.split("_")[0], 0.5)
        for m in ("end", "avg"):
            good = set_float_column(good, f"{s}_are_{m}", level / mem)
    claims = _verdicts({**tables, "lazy-accuracy": good}, smoke)
    assert claims["R2"].verdict == "reproduced", claims["R2"].reason
    # Lazy above Punctual at equal memory: the second part fails, for both metrics.
    bad = set_float_column(good, "lazy_cms_are_end", 3.0 / mem)
    bad = set_float_column(bad, "lazy_cms_are_avg", 3.0 / mem)
    claims = _verdicts({**tables, "lazy-accuracy": bad}, smoke)
    assert claims["R2"].verdict == "differs"
    failed = claims["R2"].reason.split("not reproduced:")[1]
    assert "LazyCMS below PunctualCMS at every memory [end]" in failed
    assert "LazyCMS below PunctualCMS at every memory [avg]" in failed
    assert (
        "LazyCS below PunctualCS at every memory [end]"
        in claims["R2"].reason.split("not reproduced:")[0]
    )


def test_r6_verdict_checks_the_inverse_eps_shape(smoke):
    tables = _tables(smoke)
    acc = tables["lazy-accuracy"]
    eps = np.asarray(acc["eps"].to_pylist(), dtype=np.float64)
    one_over = acc
    for s in lazy.PRIVATE:
        for m in ("end", "avg"):
            # 1/eps, then a floor
            one_over = set_float_column(one_over, f"{s}_are_{m}", 0.2 / eps + 0.5)
    claims = _verdicts({**tables, "lazy-accuracy": one_over}, smoke)
    assert claims["R6"].verdict == "reproduced", claims["R6"].reason
    flat = acc
    for s in lazy.PRIVATE:
        for m in ("end", "avg"):
            flat = set_float_column(flat, f"{s}_are_{m}", np.full(len(eps), 0.7))
    claims = _verdicts({**tables, "lazy-accuracy": flat}, smoke)
    assert claims["R6"].verdict == "differs"
    assert "ARE falls with eps" in claims["R6"].reason


# ------------------------------------------------------------------------------------------------
# Widths, memory model and query times
# ------------------------------------------------------------------------------------------------


def test_paper_widths_and_their_scaling():
    # [Hol25, Section 5.4]: the 24 KB widths, and w = M / (3 * bytes per counter) for the sweeps.
    assert [lazy.paper_width(f, 24) for f in ("cms", "lazy", "punctual")] == [2000, 55, 33]
    assert [lazy.paper_width(f, 64) for f in ("cms", "lazy", "punctual")] == [5333, 147, 88]
    assert [lazy.paper_width(f, 8) for f in ("cms", "lazy", "punctual")] == [667, 18, 11]
    assert lazy.paper_width("lazy", 64) == round(64_000 / (3 * 145.4545))
    with pytest.raises(ValueError, match="family"):
        lazy.paper_width("misra", 24)
    with pytest.raises(ValueError, match="memory_kb"):
        lazy.paper_width("cms", 0)


def test_our_memory_model_at_the_papers_24kb():
    t, d = 2**20, 3
    # Independent count of our state: int64 CMS table + 64 B; Lazy 8 B x (h_loc slots + total +
    # update count + pending) per cell with h_loc = bit_length(ceil(T/w)); Punctual
    # 8 B x (h slots + total + count) with h = bit_length(T) = 21.
    assert lazy.model_memory_bytes("cms", 997, d, t) == 8 * d * 997 + 64
    h_loc = math.ceil(t / 55).bit_length()
    assert lazy.model_memory_bytes("lazy_cms", 55, d, t) == 8 * d * 55 * (h_loc + 3)
    assert lazy.model_memory_bytes("punctual_cms", 33, d, t) == 8 * d * 33 * (21 + 2)
    widths = {s: lazy.model_width(s, 24_000, d, t) for s in ("cms", "lazy_cms", "punctual_cms")}
    assert widths == {"cms": 997, "lazy_cms": 55, "punctual_cms": 43}
    for s, w in widths.items():
        assert (
            lazy.model_memory_bytes(s, w, d, t) <= 24_000 < lazy.model_memory_bytes(s, w + 1, d, t)
        )


def test_query_times_one_per_segment_and_seeded():
    t, n = 2**20, 64
    times = lazy.query_times(t, n, 7)
    edges = np.arange(n + 1) * t // n
    assert len(times) == n
    assert np.all(times > edges[:-1]) and np.all(times <= edges[1:])
    np.testing.assert_array_equal(times, lazy.query_times(t, n, 7))
    assert not np.array_equal(times, lazy.query_times(t, n, 8))
    # Not the dyadic multiples q * 2**14 (popcount <= 6): the mean popcount is typical.
    pop = np.mean([bin(int(x)).count("1") for x in times])
    assert pop > 7
    assert lazy.query_times(10, 10, 0).tolist() == list(range(1, 11))
    with pytest.raises(ValueError, match="query times"):
        lazy.query_times(10, 11, 0)


# ------------------------------------------------------------------------------------------------
# Cell oracles
# ------------------------------------------------------------------------------------------------


def _params(width: int, **kw):
    base = {
        "horizon": 3000,
        "n_items": 500,
        "n_queries": 5,
        "delta": 1e-3,
        "memory_kb": 24.0,
        "depth": 3,
        "skew": 1.3,
        "eps": 0.5,
        "w_cms": width,
        "w_lazy": width,
        "w_punctual": width,
    }
    return {**base, **kw}


def test_accuracy_cell_matches_an_independent_computation():
    params, seed = _params(40), 11
    out = lazy.accuracy_cell(params, seed)
    keys = datasets.zipf_stream(3000, 1.3, 500, seed)
    times = lazy.query_times(3000, 5, seed)
    per_t = {}
    for t in [*times.tolist(), 3000]:
        items, counts = datasets.exact_counts(keys[:t])
        top = datasets.top_k(items, counts, lazy.TOP_K)
        f = datasets.counts_of(items, counts, top)
        for cls, name in ((CountMinSketch, "cms"), (CountSketch, "cs")):
            est = cls(40, 3, seed).update(keys[:t]).estimate(top)
            per_t[name, t] = metrics.are(f, est)
    for name in ("cms", "cs"):
        assert out[f"{name}_are_end"] == pytest.approx(per_t[name, 3000], rel=1e-12)
        assert out[f"{name}_are_avg"] == pytest.approx(
            np.mean([per_t[name, t] for t in times.tolist()]), rel=1e-12
        )
    # The cell is a pure function of (params, seed): the runner's cache relies on it.
    assert lazy.accuracy_cell(params, seed) == out
    assert lazy.accuracy_cell(params, seed + 1) != out


def test_accuracy_cell_without_noise_equals_the_exact_sketches(monkeypatch):
    # Zero noise (the test-only hook): Punctual equals the exact sketch at every query time and
    # Lazy lags it by at most w - 1 per cell (CMS estimate in [exact - (w-1), exact]).
    monkeypatch.setattr(
        lazy.NoiseSource,
        "insecure_for_tests",
        classmethod(lambda cls, seed=0: NoiseSource.zero_noise_for_tests()),
    )
    w, seed = 37, 5
    out = lazy.accuracy_cell(_params(w), seed)
    for m in ("are_end", "are_avg", "bias_end", "bias_avg"):
        assert out[f"punctual_cms_{m}"] == out[f"cms_{m}"]
        assert out[f"punctual_cs_{m}"] == out[f"cs_{m}"]
    lag = out["cms_bias_end"] - out["lazy_cms_bias_end"]
    assert 0 <= lag <= (w - 1) / out["top15_min_end"]
    assert out["lazy_cms_are_end"] != out["cms_are_end"]  # the delay is visible at this size


def test_accuracy_cell_noise_differs_between_cells():
    # Distinct release ids per cell: two eps values give different noise, not a rescaled copy.
    a = lazy.accuracy_cell(_params(30, eps=0.5), 3)
    b = lazy.accuracy_cell(_params(30, eps=0.25), 3)
    assert a["cms_are_end"] == b["cms_are_end"]
    assert a["lazy_cms_sigma"] == pytest.approx(b["lazy_cms_sigma"] / 2)  # sigma ~ 1/eps
    assert a["lazy_cms_are_end"] != b["lazy_cms_are_end"]


def test_throughput_cell_counts_and_prefix():
    common = {
        "depth": 3,
        "horizon": 2**20,
        "eps": 0.3,
        "delta": 1e-3,
        "skew": 1.3,
        "n_items": 1000,
        "arrivals": 4096,
        "noise_budget": 3 * 50 * 200,
        "batch": 1024,
        "repeats": 1,
    }
    p = lazy.throughput_cell({"impl": "punctual_cms", "width": 50, **common}, 1)
    assert p["n_timed"] == 200 and p["counter_updates_per_arrival"] == 150
    z = lazy.throughput_cell({"impl": "lazy_cs", "width": 50, **common}, 1)
    assert z["n_timed"] == 4096 and z["counter_updates_per_arrival"] == 3
    assert 3 <= z["noise_values_per_arrival"] < 3.5
    c = lazy.throughput_cell({"impl": "lazy_cms_collapsed", "width": 50, **common}, 1)
    assert c["noise_values_per_arrival"] < z["noise_values_per_arrival"]
    e = lazy.throughput_cell({"impl": "cs", "width": 50, **common}, 1)
    assert e["noise_values_per_arrival"] == 0 and e["model_bytes"] == 8 * 150 + 64
