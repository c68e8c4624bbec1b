"""One output schema for every subcommand: each ``--format`` carries the same rows and fields.

Every subcommand that releases something runs once per format (with the same insecure test
seed, so the noise is the same in every run) on the FnApiRunner; the rows parsed back from
``json`` (the envelope), ``jsonl``, ``csv``, ``parquet`` and ``table`` must be the same, under the
same field names, and the guarantee must travel with them (in the envelope, on stderr, in the
Parquet schema metadata, or as the table's header line).
"""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest

from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.pipelines.output import (
    FORMATS,
    NOT_PRIVATE,
    PARQUET_METADATA_KEY,
    ROW_FIELDS,
    CliRelease,
    write_release,
)

RUNNER = "--runner=FnApiRunner"
SEED = ["--insecure-test-seed", "7"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-output")
    keys = ["alpha"] * 600 + ["beta"] * 300 + [f"other{i}" for i in range(100)]
    # Interleaved, so that every prefix of the file holds both heavy keys.
    order = sorted(range(len(keys)), key=lambda i: (i * 7919) % len(keys))
    data = root / "events.csv"
    data.write_text(
        "item,ts,delay\n"
        + "".join(f"{keys[i]},{n / 2},{(i * 37) % 200}\n" for n, i in enumerate(order))
    )
    queries = root / "queries.csv"
    queries.write_text("time,key\n100,alpha\n100,beta\n400,alpha\n")
    candidates = root / "candidates.txt"
    candidates.write_text("alpha\nbeta\ngamma\n")
    return {"data": str(data), "queries": str(queries), "candidates": str(candidates)}


def _commands(f):
    base = ["--input", f["data"], "--column", "item"]
    return {
        "heavy-hitters": (
            ["heavy-hitters", *base, "--k", "10", "--epsilon", "1", *SEED],
            ("key", "estimate", "error_bound"),
        ),
        "frequencies": (
            ["frequencies", *base, "--width", "64", "--depth", "3", "--epsilon", "1"]
            + ["--candidates", f["candidates"], *SEED],
            ("key", "estimate", "error_bound"),
        ),
        "quantiles": (
            ["quantiles", "--input", f["data"], "--column", "delay", "--q", "0.25", "0.5"]
            + ["--lower", "0", "--upper", "255", "--epsilon", "1", *SEED],
            ("quantile", "value"),
        ),
        "sketch": (
            ["sketch", *base, "--width", "64", "--depth", "3", "--query", "alpha", "beta"],
            ("key", "estimate"),
        ),
        "continual": (
            ["continual", *base, "--width", "64", "--horizon", "1000", "--release-every", "250"]
            + ["--epsilon", "0.5", "--delta", "1e-6", "--query", "alpha", "beta", *SEED],
            ("time", "key", "estimate"),
        ),
        "sliding-window": (
            ["sliding-window", *base, "--window", "200", "--release-every", "250", "--rho", "1"]
            + ["--width", "64", "--depth", "3", "--query", "alpha", "beta", *SEED],
            ("time", "key", "estimate"),
        ),
        "intermittent": (
            ["intermittent", *base, "--time-column", "ts", "--queries", f["queries"]]
            + ["--epsilon", "1", "--width", "64", "--depth", "3", *SEED],
            ("time", "key", "estimate"),
        ),
    }


SUBCOMMANDS = [
    "heavy-hitters",
    "frequencies",
    "quantiles",
    "sketch",
    "continual",
    "sliding-window",
    "intermittent",
]


def _run(args, capsys):
    code = main([*args, RUNNER])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def _cell(value):
    """A value as the text formats show it: numbers in ``%g``, everything else as text."""
    if isinstance(value, bool):
        return str(value)
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def _cells(rows, fields):
    return [[_cell(row[f]) for f in fields] for row in rows]


def _parse_table(text):
    lines = text.splitlines()
    header = [line for line in lines if line.startswith("# ")]
    body = lines[len(header) :]
    fields = body[0].split()
    assert set(body[1].replace(" ", "")) <= {"-"}
    return header, fields, [line.split() for line in body[2:]]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_format_carries_the_same_rows_and_fields(command, files, capsys, tmp_path):
    args, fields = _commands(files)[command]

    out, _ = _run([*args, "--format", "json"], capsys)
    envelope = json.loads(out)
    assert list(envelope) == ["guarantee", "mechanism", "parameters", "rows"]
    rows = envelope["rows"]
    assert rows, "the test data must give a non-empty release"
    assert all(list(row) == list(fields) for row in rows)
    assert set(fields) <= set(ROW_FIELDS)
    guarantee = envelope["guarantee"]
    if command == "sketch":
        assert guarantee == NOT_PRIVATE
    else:
        assert "in total; privacy unit: element; neighbouring relation: " in guarantee
        assert "INSECURE" in guarantee  # the test seed is said to void the guarantee
        assert "budget" in envelope["parameters"]
    expected = _cells(rows, fields)

    # The same envelope written to a file.
    path = tmp_path / "out.json"
    _, err = _run([*args, "--format", "json", "--output", str(path)], capsys)
    assert json.loads(path.read_text()) == envelope

    out, err = _run([*args, "--format", "jsonl"], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines == rows
    assert f"# guarantee: {guarantee}" in err.splitlines()

    out, err = _run([*args, "--format", "csv"], capsys)
    reader = csv.DictReader(io.StringIO(out))
    assert tuple(reader.fieldnames) == fields
    assert _cells(list(reader), fields) == expected
    assert f"# guarantee: {guarantee}" in err.splitlines()

    path = tmp_path / "out.parquet"
    _, err = _run([*args, "--format", "parquet", "--output", str(path)], capsys)
    table = pq.read_table(path)
    assert tuple(table.column_names) == fields
    assert table.to_pylist() == rows
    metadata = table.schema.metadata
    assert metadata[b"guarantee"].decode() == guarantee
    stored = json.loads(metadata[PARQUET_METADATA_KEY])
    assert stored == {k: envelope[k] for k in ("guarantee", "mechanism", "parameters")}
    assert f"# guarantee: {guarantee}" in err.splitlines()

    out, _ = _run([*args, "--format", "table"], capsys)
    header, table_fields, table_rows = _parse_table(out)
    assert f"# guarantee: {guarantee}" in header
    assert f"# mechanism: {envelope['mechanism']}" in header
    assert tuple(table_fields) == fields
    assert table_rows == expected


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_parquet_needs_an_output_path(command, files, capsys):
    args, _ = _commands(files)[command]
    code = main([*args, "--format", "parquet", RUNNER])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "--format parquet needs --output PATH" in err and len(err.strip().splitlines()) == 1


def test_every_format_is_offered_by_every_subcommand(files):
    from beam_dpsketch.pipelines.cli import build_parser

    parser = build_parser()
    for command in SUBCOMMANDS:
        args = parser.parse_args([*_commands(files)[command][0], "--format", "csv"])
        assert args.format == "csv" and args.output is None
    assert FORMATS == ("table", "json", "jsonl", "csv", "parquet")


def test_write_release_refuses_fields_outside_the_schema():
    with pytest.raises(ValueError, match="fields"):
        CliRelease("g", "m", {}, ("count",), [])


def test_write_release_formats_an_empty_release(capsys):
    release = CliRelease("g", "m", {"k": 1}, ("time", "key", "estimate"), [], title="t")
    write_release(release, "json")
    assert json.loads(capsys.readouterr().out) == {
        "guarantee": "g",
        "mechanism": "m",
        "parameters": {"k": 1},
        "rows": [],
    }
    write_release(release, "csv")
    out, err = capsys.readouterr()
    assert out == "time,key,estimate\n" and "# guarantee: g" in err
    write_release(release, "table")
    out, _ = capsys.readouterr()
    assert out.splitlines()[:3] == ["# t", "# guarantee: g", "# mechanism: m"]


def test_rows_are_staged_under_temp_location_and_removed(files, capsys, tmp_path):
    stage = tmp_path / "stage"
    stage.mkdir()
    args, _ = _commands(files)["heavy-hitters"]
    out, err = _run([*args, "--format", "json", f"--temp_location={stage}"], capsys)
    assert json.loads(out)["rows"]
    assert "unknown option" not in err
    assert list(stage.iterdir()) == []  # nothing is left behind
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_dpsketch.io.sinks import StagingArea

    with StagingArea(PipelineOptions([f"--temp_location={stage}"])) as staging:
        assert staging.directory.startswith(str(stage))
    with StagingArea() as staging:
        assert not staging.directory.startswith(str(stage))
