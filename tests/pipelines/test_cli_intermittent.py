"""``beam-dpsketch intermittent`` through ``cli.main`` on temp CSV / JSON Lines files.

Expected answers are recomputed independently: the rows are parsed with the ``csv`` module, cut
into the intervals ``(t_{k-1}, t_k]`` of the query times, and fed to the core use-and-keep sketch
with the transform's public sketch id and the same insecure test key.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pytest

from beam_dpsketch.io import ordered_batches
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.pipelines.intermittent import (
    exact_counts,
    exact_counts_of_batches,
    read_queries,
)
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch
from beam_dpsketch.transforms.intermittent import intermittent_sketch_id

W, D = 128, 5


@pytest.fixture
def data_csv(tmp_path):
    rng = np.random.default_rng(7)
    path = tmp_path / "events.csv"
    lines = ["ts,page"] + [f"{0.5 * i},p{int(rng.zipf(1.5)) % 40}" for i in range(2000)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _rows(path):
    with open(path, newline="") as f:
        return [(float(r["ts"]), r["page"]) for r in csv.DictReader(f)]


def _core_answers(times, keys, batches, kind="count_sketch", seed=3, epsilon=1.0):
    # epsilon: the core's budget, half of --epsilon for the row-position clock (replace-one).
    core = UseAndKeepSketch(
        W,
        D,
        PrivacyBudget.pure(float(epsilon)),
        # The command's transform uses the first application key of its seeded source.
        noise_source=NoiseSource.insecure_for_tests(seed).for_application(),
        release_prefix=intermittent_sketch_id("intermittent"),
        kind=kind,
    )
    times, keys = np.asarray(times, dtype=np.float64), np.asarray(keys, dtype=object)
    out, previous = [], -np.inf
    for t, q in batches:
        core.update(keys[(times > previous) & (times <= t)].tolist())
        previous = t
        est = core.answer(q, time=t).estimates
        out += [
            {"time": t, "key": k, "estimate": round(float(e), 2)}
            for k, e in zip(q, est, strict=True)
        ]
    return out


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_time_column_and_csv_queries_equal_the_core(data_csv, tmp_path, capsys):
    queries = tmp_path / "q.csv"
    queries.write_text("time,key\n300,p1\n300,p2\n100,p1\n800,p3\n800,p1\n999.5,p1\n")
    args = ["intermittent", "--input", data_csv, "--column", "page", "--time-column", "ts"]
    args += ["--queries", str(queries), "--epsilon", "1", "--width", str(W), "--depth", str(D)]
    args += ["--insecure-test-seed", "3", "--format", "json"]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    envelope = json.loads(out)
    got = envelope["rows"]
    rows = _rows(data_csv)
    batches = [(100, ["p1"]), (300, ["p1", "p2"]), (800, ["p3", "p1"]), (999.5, ["p1"])]
    expected = _core_answers([r[0] for r in rows], [r[1] for r in rows], batches)
    assert got == expected  # also in batch order, then file order within a batch
    params = envelope["parameters"]
    assert (params["sketch"], params["depth"], params["width"]) == ("count-sketch", 5, 128)
    assert envelope["mechanism"].startswith("use-and-keep")
    assert envelope["guarantee"].startswith("eps=1 (pure DP) in total")
    assert (
        "neighbouring relation: add/remove one element; every other element's time unchanged"
        in envelope["guarantee"]
    )


def test_positions_jsonl_batches_and_int_keys_count_min(tmp_path, capsys):
    data = tmp_path / "ids.jsonl"
    keys = [int(k) % 25 for k in np.random.default_rng(3).zipf(1.4, 900)]
    data.write_text("".join(json.dumps({"id": k, "x": 1}) + "\n" for k in keys))
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        '{"time": 200, "keys": [1, 2, 2]}\n\n{"time": 600, "key": 3}\n{"time": 600, "key": 1}\n'
    )
    args = ["intermittent", "--input", str(data), "--column", "id", "--queries", str(queries)]
    args += ["--epsilon", "1", "--width", str(W), "--depth", str(D), "--sketch", "count-min"]
    args += ["--insecure-test-seed", "5", "--format", "json"]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    positions = np.arange(1, len(keys) + 1)
    expected = _core_answers(
        positions, keys, [(200, [1, 2, 2]), (600, [3, 1])], kind="count_min", seed=5, epsilon=0.5
    )
    envelope = json.loads(out)
    assert envelope["rows"] == expected
    assert envelope["parameters"]["clock"] == "positions"
    assert envelope["guarantee"].startswith("eps=1 (pure DP) in total")
    assert (
        "neighbouring relation: replace one element (its key) at a fixed position"
        in envelope["guarantee"]
    )


def test_table_output_and_plot(data_csv, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    queries = tmp_path / "q.csv"
    queries.write_text("time,key\n200,p1\n900,p1\n900,p2\n")
    plot = tmp_path / "err.png"
    args = ["intermittent", "--input", data_csv, "--column", "page", "--time-column", "ts"]
    args += ["--queries", str(queries), "--epsilon", "2", "--width", str(W), "--depth", str(D)]
    args += ["--plot", str(plot)]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# DP answers of column 'page'")
    assert lines[1].startswith("# guarantee: eps=2 (pure DP) in total")
    assert lines[3].split() == ["time", "key", "estimate"] and len(lines) == 5 + 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "not private" in err


def test_exact_counts_counts_rows_at_or_before_each_time():
    keys = ["a", "b", "a", "a", "c"]
    times = np.array([1.0, 2.0, 2.0, 5.0, 0.5])
    got = exact_counts(keys, times, [(2, "a"), (4.9, "a"), (5, "a"), (0, "b"), (9, "zz")])
    np.testing.assert_array_equal(got, [2, 2, 3, 0, 0])


def test_read_queries_formats_and_errors(tmp_path):
    good = tmp_path / "q.jsonl"
    good.write_text('{"time": 1, "keys": ["a", "b"]}\n{"time": "2.5", "key": "c"}\n')
    assert read_queries(str(good)) == [(1, ["a", "b"]), (2.5, ["c"])]
    cases = {
        "nocol.csv": ("time,page\n1,a\n", "missing key"),
        "badtime.csv": ("time,key\nsoon,a\n", "badtime.csv:2: time must be a number"),
        "empty.csv": ("time,key\n", "no queries"),
        "nokey.jsonl": ('{"time": 1}\n', 'needs "key" or "keys"'),
        "notjson.jsonl": ("time=1\n", "not JSON"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_queries(str(path))


def test_errors_exit_2_with_one_line(data_csv, tmp_path, capsys):
    queries = tmp_path / "q.csv"
    queries.write_text("time,key\n10,p1\n")
    base = ["intermittent", "--input", data_csv, "--column", "page", "--queries", str(queries)]
    code, _, err = _run(base + ["--epsilon", "1", "--plot", str(tmp_path / "x.pdf")], capsys)
    assert code == 2 and ".png" in err
    code, _, err = _run(base + ["--epsilon", "0"], capsys)
    assert code == 2 and "epsilon" in err
    code, _, err = _run(base + ["--epsilon", "1", "--width", "1"], capsys)
    assert code == 2 and "width" in err
    code, _, err = _run(base + ["--epsilon", "1", "--time-column", "nope"], capsys)
    assert code == 2 and "nope" in err


@pytest.mark.parametrize("with_times", [False, True])
def test_diagnostic_exact_counts_stream_batches_like_the_whole_input(with_times):
    # The --plot diagnostic reads the input batch by batch, keeping only queried keys' rows:
    # its counts equal those of the whole input at once (positions or times, keys queried or not).
    rng = np.random.default_rng(5)
    keys = [f"k{i}" for i in rng.integers(0, 30, 2000)]
    times = np.sort(rng.uniform(0, 100, 2000)) if with_times else None
    queries = [(t, key) for t in (1, 50, 999.5, 1500, 2000) for key in ("k1", "k7", "absent")]
    expected = exact_counts(
        keys, times if with_times else np.arange(1, 2001, dtype=np.int64), queries
    )
    batches = ordered_batches(pa.array(keys), times, 333)
    assert exact_counts_of_batches(batches, queries).tolist() == expected.tolist()
    assert expected.max() > 0
