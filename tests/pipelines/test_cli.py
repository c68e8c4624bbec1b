"""The ``beam-dpsketch`` command line: ``sketch`` and ``demo`` (in-process, plus one real process)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dpsketch.pipelines.cli import SUBCOMMAND_MODULES, _one_line, build_parser, main
from beam_dpsketch.pipelines.output import NOT_PRIVATE
from beam_dpsketch.pipelines.tables import format_table
from beam_dpsketch.sketches import CountMinSketch, CountSketch, MisraGries

KEYS = ["LAX-SFO"] * 30 + ["JFK-BOS"] * 20 + [f"r{i}" for i in range(200)] + ["007"] * 5


@pytest.fixture
def flights_csv(tmp_path):
    path = tmp_path / "flights.csv"
    path.write_text("route,delay\n" + "".join(f"{k},1\n" for k in KEYS))
    return str(path)


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_sketch_count_min_json(flights_csv, capsys, tmp_path):
    saved = tmp_path / "out" / "cms.bin"
    os.makedirs(saved.parent)
    code, out, err = run_cli(
        [
            "sketch",
            "--input",
            flights_csv,
            "--column",
            "route",
            "--width",
            "64",
            "--depth",
            "3",
            "--query",
            "LAX-SFO",
            "007",
            "--query",
            "nowhere",
            "--format",
            "json",
            "--save-sketch",
            str(saved),
        ],
        capsys,
    )
    assert code == 0, err
    envelope = json.loads(out)
    records = envelope["rows"]
    direct = CountMinSketch(64, 3, 0).update(KEYS)
    expected = direct.estimate(["LAX-SFO", "007", "nowhere"]).tolist()
    assert records == [
        {"key": k, "estimate": e}
        for k, e in zip(["LAX-SFO", "007", "nowhere"], expected, strict=True)
    ]
    assert envelope["guarantee"] == NOT_PRIVATE
    assert CountMinSketch.from_bytes(saved.read_bytes()) == direct


def test_sketch_misra_gries_top_json_and_table(flights_csv, capsys):
    args = ["sketch", "--input", flights_csv, "--column", "route", "--sketch", "misra-gries"]
    code, out, err = run_cli([*args, "--k", "20", "--top", "2", "--format", "json"], capsys)
    assert code == 0, err
    top = json.loads(out)["rows"]
    assert [r["key"] for r in top] == ["LAX-SFO", "JFK-BOS"]
    mg = MisraGries(20).update(KEYS)
    bound = len(KEYS) / 21
    for record, exact in zip(top, [30, 20], strict=True):
        assert set(record) == {"key", "estimate"}
        assert exact - bound <= record["estimate"] <= exact
        assert record["estimate"] == mg.estimate([record["key"]])[0]

    code, out, err = run_cli([*args, "--k", "300", "--query", "007"], capsys)
    assert code == 0, err
    assert out.splitlines()[1] == f"# guarantee: {NOT_PRIVATE}"
    assert out.splitlines()[-1].split() == ["007", "5"]


def test_sketch_count_sketch_with_int_keys(tmp_path, capsys):
    path = tmp_path / "ids.parquet"
    ids = np.random.default_rng(0).integers(0, 50, 1000)
    pq.write_table(pa.table({"id": ids}), path)
    code, out, err = run_cli(
        [
            "sketch",
            "--input",
            str(path),
            "--column",
            "id",
            "--sketch",
            "count-sketch",
            "--depth",
            "3",
            "--query",
            "7",
            "--format",
            "json",
        ],
        capsys,
    )
    assert code == 0, err
    direct = CountSketch(2048, 3, 0).update(ids)
    assert json.loads(out)["rows"] == [{"key": 7, "estimate": int(direct.estimate([7])[0])}]
    code, _, err = run_cli(
        ["sketch", "--input", str(path), "--column", "id", "--query", "x"], capsys
    )
    assert code == 2 and "not an integer" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--k", "5", "--query", "a"], "--k only applies to misra-gries"),
        (["--top", "3"], "--top needs --sketch misra-gries"),
        ([], "pass --query KEY"),
        (["--width", "0", "--query", "a"], "width must be in"),
        (["--query", "a", "--direct_running_mode=multi_threading"], "multi_threading"),
        (["--column", "nope", "--query", "a"], "column 'nope' not found"),
    ],
)
def test_sketch_usage_errors_exit_2_with_one_line(flights_csv, capsys, extra, message):
    args = ["sketch", "--input", flights_csv]
    if "--column" not in extra:
        args += ["--column", "route"]
    code, out, err = run_cli(args + extra, capsys)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_verbose_reraises(capsys, tmp_path):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        main(
            ["-v", "sketch", "--input", str(tmp_path / "nope.csv"), "--column", "x", "--query", "a"]
        )


def _subcommands() -> list[str]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(action.choices)


def test_every_registered_module_adds_a_subcommand():
    import importlib

    for name in SUBCOMMAND_MODULES:
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers()
        importlib.import_module(name).register(subparsers)
        assert subparsers.choices, name
    assert {"demo", "heavy-hitters", "frequencies", "quantiles", "sketch", "evaluate"} <= set(
        _subcommands()
    )


@pytest.mark.parametrize("command", [[], *[[name] for name in _subcommands()]])
def test_help_of_every_subcommand_exits_0(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    assert "usage: beam-dpsketch" in capsys.readouterr().out


def test_missing_file_real_process_one_stderr_line(tmp_path):
    # A real process: Beam's import-time warnings must not reach stderr either.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_dpsketch.pipelines.cli",
            "sketch",
            "--input",
            str(tmp_path / "missing.parquet"),
            "--column",
            "route",
            "--query",
            "a",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"beam-dpsketch sketch: error: no file matches {str(tmp_path / 'missing.parquet')!r}"
    ]


def test_demo_writes_report(tmp_path, capsys):
    out_dir = tmp_path / "demo"
    code, out, err = run_cli(["demo", "--out", str(out_dir), "--top", "5"], capsys)
    assert code == 0, err
    assert "DP heavy hitters" in out and "are NOT" in out  # exact columns labelled non-private
    assert "[1/4]" in err and "[4/4]" in err
    assert "dp-misra-gries/select-then-count" in err  # the accounting is printed before the run
    results = json.loads((out_dir / "results.json").read_text())
    assert results["flights"] == 300_000
    rows = results["top_routes"]
    assert len(rows) == 5 and [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    bound = results["misra_gries"]["error_bound"]
    dp = results["dp_release"]
    assert (dp["epsilon"], dp["delta"], dp["mechanism"]) == (1.0, 1e-6, "select-then-count")
    # Select-then-count: each released count is the route's exact count plus discrete Laplace
    # noise of scale 1/eps_count, beyond scale * ln(1e9) with probability <= 1e-9 per row.
    eps_count = dp["epsilon"] * (1 - dp["selection_fraction"])
    noise = math.log(1e9) / eps_count
    # The 95% quantile of that noise: P(|Z| > t) = 2 a^(t+1) / (1 + a), a = exp(-eps_count).
    a = math.exp(-eps_count)
    t95 = next(t for t in range(1000) if 2 * a ** (t + 1) / (1 + a) <= 0.05)
    for row in rows:
        assert row["exact_count"] - bound <= row["mg_estimate"] <= row["exact_count"]
        assert row["cms_estimate"] >= row["exact_count"]
        assert row["exact_count"] - noise <= row["dp_count"] <= row["exact_count"] + noise
        assert row["dp_error_bound"] == t95  # each DP count carries its 95% error bar
    assert "+/- (95%)" in out
    report = (out_dir / "report.md").read_text()
    assert "differentially private" in report and rows[0]["route"] in report
    page = (out_dir / "report.html").read_text()
    assert "<table>" in page and rows[0]["route"] in page and "top_routes.png" in page
    assert "Privacy accounting" in page and (out_dir / "top_routes.png").stat().st_size > 1000


def test_one_line_picks_the_worker_error_from_a_traceback():
    exc = RuntimeError(
        "Traceback (most recent call last):\n  File x\nTypeError: invalid key of type 'float'\n"
    )
    assert _one_line(exc) == "TypeError: invalid key of type 'float'"
    assert _one_line(ValueError("first\nsecond")) == "first"


def test_format_table_shows_a_missing_value_as_a_dash():
    text = format_table([{"key": "a", "error_bound": None}], ["key", "error_bound"])
    assert text.splitlines()[-1].split() == ["a", "-"]


def test_format_table_aligns_numbers_right():
    text = format_table([{"key": "a", "n": 5}, {"key": "bbb", "n": 12}], ["key", "n"])
    assert text.splitlines() == ["key   n", "---  --", "a     5", "bbb  12"]


def test_heavy_hitters_json_on_csv_finds_the_heavy_key(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300 + "lynx\n" * 2)
    code, out, err = run_cli(
        [
            "heavy-hitters",
            "--input",
            str(path),
            "--column",
            "browser",
            "--k",
            "10",
            "--mechanism",
            "design-b",
            "--epsilon",
            "1",
            "--format",
            "json",
            "--insecure-test-seed",
            "3",
            "--explain",
        ],
        capsys,
    )
    assert code == 0, err
    envelope = json.loads(out)
    released = envelope["rows"]
    assert [r["key"] for r in released] == ["firefox", "chrome"]  # "lynx" is below threshold
    # Design B with k=10 > 3 distinct keys: the sketch is exact and the count correction
    # removes Algorithm 3's offset n/(k+1) = 82, so only noise remains: scale 2/0.95 per key
    # and 20/11 from N_hat (each <= scale * ln 1e9 but with probability 1e-9).
    noise = (2 / 0.95 + 20 / 11) * math.log(1e9)
    assert abs(released[0]["estimate"] - 600) <= noise
    # Every row carries its 95% error bound: at least the sketch term n/(k+1).
    assert envelope["parameters"]["error_confidence"] == 0.95
    assert all(r["error_bound"] >= 900 / 11 for r in released)
    assert "budget_split" in err and "memory" in err
    assert "(eps=1, delta=1e-06)-DP" in err and "design-b" in err  # --explain, before the run
    assert envelope["guarantee"].startswith("(eps=1, delta=1e-06)-DP in total")
    assert envelope["mechanism"].endswith("design-b")


def test_heavy_hitters_user_level_bounds_contributions(tmp_path, capsys):
    users = [f"u{i}" for i in range(400)] + ["bot"] * 5000
    keys = ["news"] * 400 + ["spam"] * 5000
    path = tmp_path / "visits.parquet"
    pq.write_table(pa.table({"user": users, "site": keys}), path)
    code, out, err = run_cli(
        [
            "heavy-hitters",
            "--input",
            str(path),
            "--column",
            "site",
            "--privacy-id",
            "user",
            "--max-contributions",
            "1",
            "--k",
            "8",
            "--epsilon",
            "1",
            "--format",
            "json",
            "--insecure-test-seed",
            "1",
        ],
        capsys,
    )
    assert code == 0, err
    envelope = json.loads(out)
    released = {r["key"]: r["estimate"] for r in envelope["rows"]}
    assert "spam" not in released and "news" in released  # one bot = one contribution
    assert "privacy unit: user" in envelope["guarantee"]
    assert envelope["mechanism"].startswith("dp-misra-gries/user-exact")  # user-level default
    assert "--mechanism user-exact" not in err  # no advice to pick what already ran
    # Fewer keys than --top (8) with a release whose noise follows k: the message points to the
    # one whose noise follows sqrt(m).
    args = ["heavy-hitters", "--input", str(path), "--column", "site", "--privacy-id", "user"]
    args += ["--k", "8", "--epsilon", "1", "--mechanism", "pamg-gshm", "--format", "json"]
    code, out, err = run_cli([*args, "--insecure-test-seed", "1"], capsys)
    assert code == 0, err
    assert "--mechanism user-exact (the default)" in err


def test_heavy_hitters_user_level_explain_states_the_contribution_bound(tmp_path, capsys):
    path = tmp_path / "visits.csv"
    path.write_text("user,site\n" + "".join(f"u{i},news\n" for i in range(50)))
    code, out, err = run_cli(
        [
            "heavy-hitters",
            "--input",
            str(path),
            "--column",
            "site",
            "--privacy-id",
            "user",
            "--max-contributions",
            "3",
            "--k",
            "8",
            "--epsilon",
            "1",
            "--explain",
            "--insecure-test-seed",
            "1",
        ],
        capsys,
    )
    assert code == 0, err
    assert "m=3" in err and "m=1" not in err


def _few_keys_csv(tmp_path):
    path = tmp_path / "names.csv"
    path.write_text("name\n" + "".join(f"n{i % 300}\n" for i in range(6000)) + "ann\n" * 500)
    return path


@pytest.mark.parametrize(
    ("mechanism", "threshold_field", "stage"),
    [
        ([], "selection_threshold", "selection estimate"),  # the default: select-then-count
        (["--mechanism", "design-b"], "threshold", "sketch count"),
    ],
)
def test_heavy_hitters_says_why_fewer_keys_than_top_were_released(
    tmp_path, capsys, mechanism, threshold_field, stage
):
    # k=10 over 301 distinct names of 20 rows each: only "ann" (500 rows) clears
    # rows/(k+1) + threshold; the command says so on stderr and still exits 0.
    args = ["heavy-hitters", "--input", str(_few_keys_csv(tmp_path)), "--column", "name"]
    args += ["--k", "10", "--top", "5", "--epsilon", "1", "--format", "json", *mechanism]
    code, out, err = run_cli([*args, "--insecure-test-seed", "2"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["key"] for r in rows] == ["ann"]
    threshold = json.loads(out)["parameters"][threshold_field]
    assert f"noisy {stage}" in err
    assert "1 of the 5 requested keys were released" in err
    assert f"threshold {threshold:.4g}" in err and "k=10" in err and "raise --k" in err
    assert "user-exact" not in err  # element level: no user-level advice


def test_heavy_hitters_sizes_k_from_an_error_target_or_memory(tmp_path, capsys):
    base = ["heavy-hitters", "--input", str(_few_keys_csv(tmp_path)), "--column", "name"]
    base += ["--epsilon", "1", "--format", "json", "--insecure-test-seed", "2"]
    code, out, err = run_cli([*base, "--max-error", "20", "--expected-rows", "6500"], capsys)
    assert code == 0, err
    params = json.loads(out)["parameters"]
    assert params["k"] == 324 and params["top"] == 100  # 6500/325 <= 20 < 6500/324
    code, out, err = run_cli([*base, "--memory", "10000000", "--max-shards", "4"], capsys)
    assert code == 0, err
    assert json.loads(out)["parameters"]["k"] == 10_000_000 // (4 * 200)
    code, out, err = run_cli([*base, "--max-error", "20"], capsys)
    assert code == 2 and "--expected-rows" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--format", "parquet"], "--format parquet needs --output"),
        (["--max-contributions", "2"], "--max-contributions applies with --privacy-id"),
        (["--delta", "0"], "delta"),
    ],
)
def test_heavy_hitters_errors_are_one_line(tmp_path, capsys, extra, message):
    path = tmp_path / "k.txt"
    path.write_text("a\nb\n")
    code, out, err = run_cli(
        ["heavy-hitters", "--input", str(path), "--epsilon", "1", *extra], capsys
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_frequencies_json_estimates_the_queried_keys(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300)
    code, out, err = run_cli(
        [
            "frequencies",
            "--input",
            str(path),
            "--column",
            "browser",
            "--width",
            "64",
            "--depth",
            "3",
            "--epsilon",
            "1",
            "--query",
            "firefox",
            "opera",
            "--format",
            "json",
            "--insecure-test-seed",
            "2",
        ],
        capsys,
    )
    assert code == 0, err
    doc = json.loads(out)
    got = {r["key"]: r["estimate"] for r in doc["rows"]}
    # Count Sketch by default: median of signed noisy counters, no public offset. Noise scale
    # depth/eps = 3; the hashing error of a 64-wide sketch is at most the other key's 300.
    assert doc["parameters"]["sketch"] == "count-sketch"
    assert abs(got["firefox"] - 600) <= 300 + 3 * math.log(1e9)
    assert abs(got["opera"]) <= 300 + 3 * math.log(1e9)
    # Every row states its error bound at the stated confidence (same for every key).
    assert doc["parameters"]["error_confidence"] == 0.95
    bounds = {r["error_bound"] for r in doc["rows"]}
    assert len(bounds) == 1 and bounds.pop() > 0


def _freq_cli(path, extra, capsys):
    return run_cli(
        ["frequencies", "--input", str(path), "--column", "browser", "--epsilon", "1"]
        + ["--format", "json", "--insecure-test-seed", "2", *extra],
        capsys,
    )


def test_frequencies_count_min_estimates_carry_no_offset(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300)
    unseen = [f"u{i}" for i in range(200)]
    code, out, err = _freq_cli(
        path,
        ["--sketch", "count-min", "--width", "4096", "--depth", "3", "--query", *unseen],
        capsys,
    )
    assert code == 0, err
    rows = json.loads(out)["rows"]
    # Keys never seen in a wide sketch read noise only: the minimum of 3 discrete Laplace
    # values of scale 3 has mean about -2.6 and standard deviation about 2.6, so the mean over
    # 200 keys is within 10 of 0 (over 13 standard errors). A public offset ceil(E) (44 here)
    # would move every estimate by 44.
    mean = sum(r["estimate"] for r in rows) / len(rows)
    assert abs(mean) <= 10, mean
    assert all(r["error_bound"] > 0 for r in rows)


def test_frequencies_query_keys_release_every_declared_key(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("browser\n" + "firefox\n" * 600 + "chrome\n" * 300)
    keys = tmp_path / "keys.txt"
    keys.write_text("firefox\nopera\nchrome\n")
    code, out, err = _freq_cli(path, ["--query-keys", str(keys)], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"] == "dp-counts/public-keys"
    rows = doc["rows"]
    # Every declared key in declared order, the unseen one included.
    assert [r["key"] for r in rows] == ["firefox", "opera", "chrome"]
    truth = {"firefox": 600, "opera": 0, "chrome": 300}
    for r in rows:
        # Discrete Laplace of scale 1 (sensitivity 1, eps 1): no sketch error.
        assert abs(r["estimate"] - truth[r["key"]]) <= math.log(1e9)
        assert r["error_bound"] == 3.0
    assert doc["parameters"]["query_keys"] == 3
    assert "sketch" not in doc["parameters"]
    # The same keys as a comma list give the same release.
    code, out2, err = _freq_cli(path, ["--query-keys", "firefox,opera,chrome"], capsys)
    assert code == 0, err
    assert json.loads(out2)["rows"] == rows
    # --top keeps the largest released counts.
    code, out3, err = _freq_cli(
        path, ["--query-keys", "firefox,opera,chrome", "--top", "1"], capsys
    )
    assert code == 0, err
    assert [r["key"] for r in json.loads(out3)["rows"]] == ["firefox"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--query-keys", "a", "--width", "64"], "--width does not apply with --query-keys"),
        (["--query-keys", "a", "--query", "b"], "pass one of --query"),
        (["--query", "a", "--top", "2"], "--top applies with --candidates or --query-keys"),
        (["--query-keys", ","], "--query-keys needs"),
    ],
)
def test_frequencies_query_keys_errors_are_one_line(tmp_path, capsys, extra, message):
    path = tmp_path / "k.txt"
    path.write_text("a\nb\n")
    code, out, err = run_cli(
        ["frequencies", "--input", str(path), "--epsilon", "1", *extra], capsys
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_quantiles_json_on_an_integer_column(tmp_path, capsys):
    path = tmp_path / "delays.parquet"
    pq.write_table(pa.table({"delay": np.arange(0, 1000, dtype=np.int64)}), path)
    code, out, err = run_cli(
        [
            "quantiles",
            "--input",
            str(path),
            "--column",
            "delay",
            "--q",
            "0.25",
            "0.5",
            "--lower",
            "0",
            "--upper",
            "1023",
            "--epsilon",
            "1",
            "--format",
            "json",
            "--insecure-test-seed",
            "4",
        ],
        capsys,
    )
    assert code == 0, err
    got = {r["quantile"]: r["value"] for r in json.loads(out)["rows"]}
    # The command is plumbing: its output must be exactly the DPQuantiles release with the same
    # arguments, noise key and label (accuracy is tested statistically in test_dyadic_private).
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.pipelines.frequencies import quantile_rows
    from beam_dpsketch.pipelines.output import run_release
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.transforms import DPQuantiles, ReadKeyBatches

    expected = run_release(
        ReadKeyBatches(str(path), "delay", key_type="int"),
        DPQuantiles(
            [0.25, 0.5],
            0,
            1023,
            PrivacyBudget.pure(1.0),
            noise_source=NoiseSource.insecure_for_tests(4),
            label="quantiles",
        ),
        quantile_rows,
        ["--runner=FnApiRunner"],
    ).rows
    assert got == {r["quantile"]: r["value"] for r in expected}
    assert 0 <= got[0.25] <= got[0.5] <= 1023


def test_frequencies_needs_queries_or_candidates(tmp_path, capsys):
    path = tmp_path / "k.txt"
    path.write_text("a\n")
    code, _, err = run_cli(["frequencies", "--input", str(path), "--epsilon", "1"], capsys)
    assert code == 2 and "--query" in err
