"""``beam-dpsketch sliding-window`` through ``main([...])`` on temporary CSV files.

Outputs are compared with the single-machine core (:class:`DPSWSketch`) built with the CLI's
parameters, label ``"sliding-window"`` and the same insecure seeded noise source: the JSON
estimates (rounded to 2 decimals by the CLI) must match exactly.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from beam_dpsketch.hashing import hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.sliding.dpsw import DPSWSketch

SEED = 11
N = 300


@pytest.fixture
def events_csv(tmp_path):
    # np.random only generates test data. Times increase with the row index, but rows are
    # written in shuffled order (time mode must not depend on file order); "b" is a heavy
    # hitter in the second half of the time range, "a" in the first.
    rng = np.random.default_rng(3)
    keys = rng.choice(["a", "c", "d", "e", "f"], N, p=[0.4, 0.15, 0.15, 0.15, 0.15])
    keys[150:] = np.where(rng.random(N - 150) < 0.6, "b", keys[150:])
    times = np.round(np.sort(rng.uniform(0.0, 150.0, N)), 3)
    order = rng.permutation(N)
    keys, times = keys[order], times[order]
    path = tmp_path / "events.csv"
    rows = "".join(f"{t},{k},x{k}\n" for t, k in zip(times, keys, strict=True))
    path.write_text("ts,item,tag\n" + rows)
    return str(path), keys.tolist(), times


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _core(window: int, budget: PrivacyBudget, **kw) -> DPSWSketch:
    return DPSWSketch.paper_experiments(
        window,
        budget,
        width=64,
        depth=3,
        # The command's transform uses the first application key of its seeded source.
        noise_source=NoiseSource.insecure_for_tests(SEED).for_application(),
        label="sliding-window",
        **kw,
    )


COMMON = ["--width", "64", "--depth", "3", "--insecure-test-seed", str(SEED), "--format", "json"]


def test_count_mode_file_order_equals_core(events_csv, capsys):
    path, keys, _ = events_csv
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "50"]
    args += ["--release-every", "20", "--epsilon", "1", "--delta", "1e-6", "--query", "a", "b"]
    code, out, err = run_cli(args + COMMON, capsys)
    assert code == 0, err
    envelope = json.loads(out)
    got = envelope["rows"]
    ref = _core(50, PrivacyBudget.approx(1.0, 1e-6)).update_at(keys, np.arange(1, N + 1))
    expected = []
    for t in range(20, N + 1, 20):
        ref.advance_to(t)
        a, b = ref.estimate(["a", "b"]).tolist()
        expected += [
            {"time": t, "key": "a", "estimate": round(a, 2)},
            {"time": t, "key": "b", "estimate": round(b, 2)},
        ]
    assert got == expected
    params = envelope["parameters"]
    assert (params["window"], params["clock"]) == (50, "positions")
    assert envelope["guarantee"].startswith("rho=0.0174689-zCDP [= (eps=1, delta=1e-06)-DP]")


def test_time_mode_heavy_hitters_equals_core_and_plots(events_csv, capsys, tmp_path):
    path, keys, times = events_csv
    cands = tmp_path / "cands.txt"
    cands.write_text("a\nb\nzz\n")
    png = tmp_path / "plot.png"
    args = ["sliding-window", "--input", path, "--column", "item", "--time-column", "ts"]
    args += ["--origin", "0", "--time-unit", "0.5", "--window", "60", "--release-every", "30"]
    args += ["--rho", "20"]
    args += ["--heavy-hitters", "0.3", "--candidates", str(cands), "--plot", str(png)]
    code, out, err = run_cli(args + COMMON, capsys)
    assert code == 0, err
    got = json.loads(out)["rows"]
    steps = np.floor(times * 1e6).astype(np.int64) // 500_000 + 1
    ref = _core(60, PrivacyBudget.zcdp(20.0)).update_at(keys, steps)
    expected = []
    for t in range(30, int(steps.max()) + 1, 30):
        ref.advance_to(t)
        for key, est in ref.heavy_hitters(["a", "b", "zz"], 0.3):
            expected.append(
                {"time": t // 2 if t % 2 == 0 else t / 2, "key": key, "estimate": round(est, 2)}
            )
    assert got == expected
    # Not vacuous: "b" becomes a heavy hitter in the second half, "a" is one throughout.
    assert {r["key"] for r in got} == {"a", "b"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_output(events_csv, capsys):
    path, _, _ = events_csv
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "100"]
    args += ["--release-every", "100", "--rho", "1", "--query", "a", "--insecure-test-seed", "1"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# DPSW-Sketch over column 'item'")
    assert lines[1].startswith("# guarantee: rho=1-zCDP in total")
    assert lines[3].split() == ["time", "key", "estimate"]
    assert [line.split()[:2] for line in lines[5:]] == [["100", "a"], ["200", "a"], ["300", "a"]]


def test_epsilon_alone_means_the_default_delta(events_csv, capsys):
    # A Gaussian release has no pure-DP form: --epsilon alone runs at delta 1e-6, like the
    # other commands, instead of failing the first try.
    path, _, _ = events_csv
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "50"]
    args += [
        "--release-every",
        "100",
        "--query",
        "a",
        "--epsilon",
        "1",
        "--insecure-test-seed",
        "1",
    ]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "[= (eps=1, delta=1e-06)-DP]" in out.splitlines()[1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--query", "a", "--heavy-hitters", "0.1"], "either --query"),
        (["--heavy-hitters", "0.1"], "go together"),
        (["--query", "a"], "--epsilon is required"),
        (["--query", "a", "--rho", "1", "--epsilon", "1"], "either --rho"),
        (["--query", "a", "--rho", "1", "--release-every", "0"], "every must be >= 1"),
        (["--query", "a", "--rho", "1", "--time-column", "nope", "--origin", "0"], "'nope'"),
        (["--query", "a", "--rho", "1", "--time-column", "item", "--origin", "0"], "must differ"),
        (["--query", "a", "--rho", "1", "--time-column", "tag", "--origin", "0"], "column 'tag'"),
        (["--query", "a", "--rho", "1", "--time-column", "ts"], "--origin is required"),
        (["--query", "a", "--rho", "1", "--window", "5"], "window must be >= 10"),
    ],
)
def test_usage_errors_exit_2_with_one_line(events_csv, capsys, extra, message):
    path, _, _ = events_csv
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "50"]
    args += ["--release-every", "10", *extra]
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_no_row_count_is_printed_and_no_rows_releases_nothing(events_csv, capsys, tmp_path):
    path, _, _ = events_csv
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "100"]
    args += ["--release-every", "150", "--rho", "1", "--query", "a", "--insecure-test-seed", "1"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    # The output holds the release only: the number of rows read is not part of it.
    assert f"{N} rows" not in out + err and "rows;" not in out + err
    empty = tmp_path / "empty.csv"
    empty.write_text("ts,item,tag\n")
    args[2] = str(empty)
    code, out, err = run_cli([*args, "--format", "json"], capsys)
    # The schedule runs to the last step holding a row: an empty input has no query time, so
    # the release is the guarantee and no rows, like any stream that ends before its first.
    assert code == 0, err
    release = json.loads(out)
    assert release["rows"] == [] and release["guarantee"].startswith("rho=1-zCDP")
    assert "rows" not in err


def test_origin_accepts_seconds_and_iso_dates():
    from beam_dpsketch.pipelines.sliding_window import _origin

    assert _origin("978307200") == 978307200.0 == _origin("2001-01-01")
    assert _origin("2001-01-01T01:00:00+01:00") == 978307200.0
    with pytest.raises(argparse.ArgumentTypeError, match="ISO"):
        _origin("yesterday")


@pytest.mark.parametrize("clock", ["positions", "event_time"])
def test_estimates_are_unbiased_in_both_clocks(events_csv, capsys, clock):
    """Absent keys average 0 and present keys their window count, in file order and event time.

    Query windows of W = 20 steps every 20 steps are disjoint and each is covered by the ten
    whole-block sketches of its blocks (B = 2), so every (key, query) estimate is the count plus
    an independent sum of ten noise minima, each centred by the default estimator
    (docs/algorithms.md#dpsw-debiased). Keys that share no cell in any row are used, so no
    collision adds to the noise. The paper's sum as written is low by about 10 c_3 sigma_F,
    about 16 here, whatever the data.
    """
    path, keys, times = events_csv
    width, depth = 4096, 3
    present = ["a", "b", "c", "d", "e", "f"]
    buckets = row_buckets(*hash_keys(present + [f"z{i}" for i in range(60)], 0), depth, width)
    taken = [set(row[: len(present)].tolist()) for row in buckets]
    absent = []
    for i in range(60):
        cells = [int(row[len(present) + i]) for row in buckets]
        if all(c not in t for c, t in zip(cells, taken, strict=True)):
            absent.append(f"z{i}")
            for c, t in zip(cells, taken, strict=True):
                t.add(c)
    assert len(absent) >= 50
    args = ["sliding-window", "--input", path, "--column", "item", "--window", "20"]
    args += ["--release-every", "20", "--rho", "1", "--query", *present, *absent]
    args += ["--width", str(width), "--depth", str(depth), "--insecure-test-seed", "5"]
    if clock == "event_time":
        args += ["--time-column", "ts", "--origin", "0", "--time-unit", "0.5"]
        steps = np.floor(times * 1e6).astype(np.int64) // 500_000 + 1
    else:
        steps = np.arange(1, N + 1)
    code, out, err = run_cli([*args, "--format", "json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    when = "time" if clock == "positions" else None
    errors_absent, errors_present = [], []
    for row in rows:
        t = row["time"] if when else round(row["time"] * 2)
        if row["key"] in present:
            inside = (steps > t - 20) & (steps <= t)
            true = sum(1 for k, s in zip(keys, inside, strict=True) if s and k == row["key"])
            errors_present.append(row["estimate"] - true)
        else:
            errors_absent.append(row["estimate"])
    assert len(errors_absent) >= 50 * 14
    sigma_f = DPSWSketch.paper_experiments(
        20, PrivacyBudget.zcdp(1.0), width=width, depth=depth
    ).level_sigmas()[0]
    # Each estimate's error has mean 0 and standard deviation <= sqrt(10) sigma_F (a minimum
    # of normals varies less than one normal); the errors are independent across keys and
    # disjoint windows. |mean| <= 5.5 sd / sqrt(n) fails with probability < 4e-8.
    sd = math.sqrt(10) * sigma_f
    for errs in (errors_absent, errors_present):
        assert abs(np.mean(errs)) <= 5.5 * sd / math.sqrt(len(errs)), (clock, np.mean(errs))
    assert 10 * 0.846 * sigma_f > 3 * 5.5 * sd / math.sqrt(len(errors_absent))
