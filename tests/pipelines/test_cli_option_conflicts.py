"""Usage contract of ``beam-dpsketch``: options that cannot be honoured fail up front.

An option the user passed that the run would not read, and an output or plot destination that
cannot be written, are usage errors: exit status 2, exactly one stderr line naming the option,
no traceback, nothing on stdout and no file written. The checks run before the pipeline, so a
failing run never prints part of a release. The command line runs in-process on the FnApiRunner;
empty inputs are checked in every subcommand, with the behaviour each one documents.
"""

from __future__ import annotations

import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dpsketch.pipelines.arguments import (
    GIVEN_OPTIONS,
    CommandLineParser,
    given_options,
    refuse_given,
)
from beam_dpsketch.pipelines.cli import build_parser, main

RUNNER = "--runner=FnApiRunner"
# A key of the data: no usage error may quote a value of the input.
SECRET = "987654321"


@pytest.fixture
def data(tmp_path):
    """A CSV with a key, a user id and a numeric time column, a candidates file and a queries
    file; returns the paths by name."""
    csv_path = tmp_path / "data.csv"
    rows = [(SECRET if i % 5 == 0 else str(100 + i % 7), f"u{i % 11}", i) for i in range(120)]
    csv_path.write_text("k,u,t\n" + "".join(f"{k},{u},{t}\n" for k, u, t in rows))
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("101\n102\n")
    queries = tmp_path / "queries.csv"
    queries.write_text("time,key\n50,101\n")
    return {"csv": str(csv_path), "candidates": str(candidates), "queries": str(queries)}


def _base(command: str, data: dict[str, str]) -> list[str]:
    """A valid command line of ``command`` on the fixture's CSV (nothing data-dependent)."""
    extra = {
        "heavy-hitters": ["--epsilon", "1"],
        "frequencies": ["--query", "101", "--epsilon", "1"],
        "quantiles": ["--q", "0.5", "--lower", "0", "--upper", "1000", "--epsilon", "1"],
        "sketch": ["--sketch", "misra-gries"],
        "continual": ["--horizon", "200", "--query", "101", "--epsilon", "0.5"]
        + ["--delta", "1e-6"],
        "sliding-window": ["--window", "10", "--release-every", "5", "--query", "101"]
        + ["--rho", "1"],
        "intermittent": ["--queries", data["queries"], "--epsilon", "1"],
    }[command]
    return [command, "--input", data["csv"], "--column", "k", *extra, RUNNER]


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _assert_usage_error(code: int, out: str, err: str, command: str, *named: str) -> None:
    assert code == 2, err
    assert out == "", out[:200]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"beam-dpsketch {command}: error: "), lines[0]
    assert all(name in lines[0] for name in named), lines[0]
    assert "Traceback" not in err and SECRET not in err


# --------------------------------------------------------------------------------------------
# Options with no effect
# --------------------------------------------------------------------------------------------

# (command, extra arguments, option strings the message must name). Every row runs without error
# when its offending option is left out (test_each_conflict_runs_without_the_option).
NO_EFFECT = [
    ("heavy-hitters", ["--mechanism", "sequential", "--max-shards", "4"], ["--max-shards"]),
    ("heavy-hitters", ["--privacy-id", "u", "--max-shards", "256"], ["--max-shards"]),
    (
        "heavy-hitters",
        ["--mechanism", "design-b", "--selection-fraction", "0.3"],
        ["--selection-fraction"],
    ),
    ("heavy-hitters", ["--privacy-id", "u", "--key-type", "str"], ["--key-type"]),
    ("quantiles", ["--key-type", "int"], ["--key-type"]),
    ("frequencies", ["--query-keys", "101", "--width", "32768"], ["--width"]),
    ("frequencies", ["--query-keys", "101", "--sketch", "count-sketch"], ["--sketch"]),
    ("frequencies", ["--query-keys", "101", "--seed", "0"], ["--seed"]),
    ("sketch", ["--query", "101", "--top", "3"], ["--top"]),
    (
        "sketch",
        ["--sketch", "count-min", "--save-sketch", "{tmp}/s.bin", "--output", "{tmp}/o.json"],
        ["--output"],
    ),
    (
        "sketch",
        ["--sketch", "count-sketch", "--save-sketch", "{tmp}/s.bin", "--format", "json"],
        ["--format"],
    ),
    ("sketch", ["--width", "2048"], ["--width"]),
    ("sliding-window", ["--time-unit", "60"], ["--time-unit", "--time-column"]),
    ("sliding-window", ["--origin", "2001-01-01"], ["--origin", "--time-column"]),
    ("sliding-window", ["--block", "5", "--preset", "theory"], ["--preset", "--block"]),
    ("sliding-window", ["--alpha", "1/3"], ["--alpha", "paper_experiments"]),
    ("sliding-window", ["--preset", "paper_experiments", "--alpha", "1/2"], ["--alpha"]),
]


def _fill(args: list[str], tmp_path) -> list[str]:
    return [a.replace("{tmp}", str(tmp_path)) for a in args]


def _without(args: list[str], named: list[str]) -> list[str]:
    """``args`` without the first named option and its value."""
    i = args.index(named[0])
    return args[:i] + args[i + 2 :]


@pytest.mark.parametrize(("command", "extra", "named"), NO_EFFECT)
def test_an_option_with_no_effect_is_a_usage_error(data, tmp_path, capsys, command, extra, named):
    out_file = tmp_path / "release.json"
    argv = [*_base(command, data), *_fill(extra, tmp_path)]
    if "--query-keys" in extra:
        argv = _without(argv, ["--query"])  # one kind of query
    if "--output" not in extra:
        argv += ["--output", str(out_file)] if "--format" not in extra else []
    code, out, err = _run(argv, capsys)
    _assert_usage_error(code, out, err, command, *named)
    assert sorted(os.listdir(tmp_path)) == ["candidates.txt", "data.csv", "queries.csv"]


@pytest.mark.parametrize(
    ("command", "extra", "named"),
    [row for row in NO_EFFECT if row[2][0] in ("--max-shards", "--time-unit", "--alpha", "--top")],
)
def test_each_conflict_runs_without_the_option(data, tmp_path, capsys, command, extra, named):
    """The rows above fail for the option they name, not for the rest of the command line."""
    argv = [*_base(command, data), *_fill(_without(extra, named), tmp_path), "--format", "json"]
    if command != "sketch":
        argv += ["--insecure-test-seed", "1"]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert json.loads(out)["rows"] is not None


def test_options_that_take_effect_are_accepted(data, capsys):
    """An option is refused only where it is not read: --alpha with --preset theory or --block,
    --max-shards with --memory, --time-unit with --time-column."""
    for command, extra in [
        ("sliding-window", ["--preset", "theory", "--alpha", "1/3"]),
        ("sliding-window", ["--block", "5", "--alpha", "1/3"]),
        ("sliding-window", ["--time-column", "t", "--time-unit", "2", "--origin", "0"]),
        (
            "heavy-hitters",
            ["--mechanism", "sequential", "--memory", "10000000", "--max-shards", "4"],
        ),
        ("heavy-hitters", ["--mechanism", "select-then-count", "--selection-fraction", "0.3"]),
    ]:
        argv = [*_base(command, data), *extra, "--format", "json", "--insecure-test-seed", "1"]
        code, out, err = _run(argv, capsys)
        assert code == 0, (extra, err)
        json.loads(out)


def test_given_options_records_explicit_options_only():
    """Explicit options are recorded under every spelling, defaults hold their values, and an
    option passed with its default value counts as given."""
    parser = build_parser()
    args = parser.parse_args(
        ["sliding-window", "--input", "x.csv", "--wind", "10", "--release-every", "5"]
        + ["--query", "a", "--query", "b", "--preset=paper_experiments", "--rho", "1"]
    )
    assert given_options(args, "window", "preset", "query", "alpha", "origin", "width") == [
        "--window",
        "--preset",
        "--query",
    ]
    assert (args.alpha, args.origin, args.width, args.time_unit) == ("1/2", None, 16384, 1.0)
    assert args.query == ["a", "b"] and args.explain is False
    with pytest.raises(ValueError, match=r"^--preset has no effect here$"):
        refuse_given(args, ("alpha", "preset"), "here")
    # A namespace from another parser records nothing: nothing is refused.
    refuse_given(argparse.Namespace(preset="theory"), ("preset",), "here")
    # String defaults are converted with the option's type, as argparse does.
    p = CommandLineParser()
    p.add_argument("--n", type=int, default="7")
    p.add_argument("--tag", action="append")
    ns = p.parse_args([])
    assert ns.n == 7 and ns.tag is None and getattr(ns, GIVEN_OPTIONS) == {}
    ns = p.parse_args(["--tag", "a", "--n", "7"])
    assert getattr(ns, GIVEN_OPTIONS) == {"tag": "--tag", "n": "--n"}


def test_help_keeps_the_documented_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["sketch", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "counters per row (linear sketches; 2048)" in text
    assert "counters (misra-gries; default 100)" in text


# --------------------------------------------------------------------------------------------
# Output and plot destinations
# --------------------------------------------------------------------------------------------

PLOT_COMMANDS = ("continual", "sliding-window", "intermittent")


def _bad_destinations(tmp_path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (arguments, what the message must name)."""
    directory = tmp_path / "a-directory"
    directory.mkdir()
    return {
        "plot in a missing directory": (
            ["--plot", str(tmp_path / "missing" / "p.png")],
            ["--plot", "does not exist"],
        ),
        "plot is a directory": (["--plot", str(directory)], ["--plot", "directory"]),
        "plot extension matplotlib cannot write": (
            ["--plot", str(tmp_path / "p.bmp")],
            ["--plot"],
        ),
        "plot without an extension": (["--plot", str(tmp_path / "plot")], ["--plot"]),
        "output is a directory": (
            ["--format", "csv", "--output", str(directory)],
            ["--output", "directory"],
        ),
    }


@pytest.mark.parametrize("command", PLOT_COMMANDS)
def test_unwritable_plot_or_output_fails_before_the_run(data, tmp_path, capsys, command):
    for name, (extra, named) in _bad_destinations(tmp_path).items():
        before = sorted(os.listdir(tmp_path))
        code, out, err = _run([*_base(command, data), *extra], capsys)
        _assert_usage_error(code, out, err, command, *named)
        assert sorted(os.listdir(tmp_path)) == before, name
        assert os.listdir(tmp_path / "a-directory") == [], name


@pytest.mark.parametrize("command", ["heavy-hitters", "frequencies", "quantiles", "sketch"])
def test_output_that_is_a_directory_fails_before_the_run(data, tmp_path, capsys, command):
    code, out, err = _run(
        [*_base(command, data), "--format", "jsonl", "--output", str(tmp_path)], capsys
    )
    _assert_usage_error(code, out, err, command, "--output", "directory")


def test_output_in_a_missing_directory_is_created(data, tmp_path, capsys):
    """Beam's local filesystem creates the directories of --output: not an error."""
    target = tmp_path / "new" / "dir" / "out.json"
    code, _, err = _run(
        [*_base("sketch", data), "--format", "json", "--output", str(target)], capsys
    )
    assert code == 0, err
    assert json.loads(target.read_text())["rows"]


@pytest.mark.parametrize("extension", ["png", "svg", "pdf"])
def test_plot_formats_matplotlib_writes(data, tmp_path, capsys, extension):
    pytest.importorskip("matplotlib")
    plot = tmp_path / f"series.{extension}"
    argv = [*_base("continual", data), "--plot", str(plot), "--format", "json"]
    code, out, err = _run([*argv, "--insecure-test-seed", "1"], capsys)
    assert code == 0, err
    assert json.loads(out)["rows"] and plot.stat().st_size > 0


# --------------------------------------------------------------------------------------------
# Empty inputs
# --------------------------------------------------------------------------------------------


def _empty_inputs(tmp_path) -> dict[str, tuple[str, list[str]]]:
    parquet = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"k": pa.array([], pa.string())}), parquet)
    csv_path = tmp_path / "empty.csv"
    csv_path.write_text("k\n")
    text = tmp_path / "empty.txt"
    text.write_text("")
    return {
        "parquet": (str(parquet), ["--column", "k"]),
        "csv": (str(csv_path), ["--column", "k"]),
        "text": (str(text), []),
    }


SUBCOMMANDS = (
    "heavy-hitters",
    "frequencies",
    "quantiles",
    "sketch",
    "continual",
    "sliding-window",
    "intermittent",
)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_empty_input_is_a_release_or_one_line_naming_the_input(data, tmp_path, capsys, command):
    """Zero rows is a valid input: every subcommand releases, exits 0 and follows its public
    schedule (noise where its mechanism adds some; no rows where the schedule runs to the last
    row: continual and sliding-window). The same for Parquet, a CSV header and an empty text
    file."""
    results = {}
    for fmt, (path, column) in _empty_inputs(tmp_path).items():
        argv = _base(command, data)
        argv[2:5] = [path, *column]  # replace --input PATH --column k
        argv += ["--format", "json"] + (
            [] if command == "sketch" else ["--insecure-test-seed", "1"]
        )
        code, out, err = _run(argv, capsys)
        assert code == 0, (fmt, err)
        release = json.loads(out)
        assert set(release) == {"guarantee", "mechanism", "parameters", "rows"}
        if command in ("continual", "sliding-window"):
            # Their queries run up to the last row: none for an empty input.
            assert release["rows"] == [], (fmt, release["rows"])
        results[fmt] = release["rows"]
    # The three empty files are the same input.
    assert results["parquet"] == results["csv"] == results["text"], results
