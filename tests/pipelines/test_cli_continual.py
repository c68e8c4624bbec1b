"""``beam-dpsketch continual``: the printed time series equals the core sketch fed the file's rows.

Runs in-process through ``beam_dpsketch.pipelines.cli.main``. The expected values come from the
core sketch with the command's fixed label ``"continual"`` and the same insecure noise seed, fed
the rows in file order (or stably sorted by ``--time-column``), so the tests check the order, the
schedule and the values exactly (rounded to the printed 2 decimals).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.transforms.window import GlobalWindow

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual.sketch import new_continual_sketch
from beam_dpsketch.transforms.release import release_id_for

TEST_SEED = 11


def _keys(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"k{int(x)}" for x in rng.zipf(1.4, n) % 30]


def _expected(
    keys,
    queries,
    times,
    sketch="count-min",
    algorithm="lazy",
    width=64,
    depth=3,
    horizon=None,
    eps=0.5,
):
    core = new_continual_sketch(
        width,
        depth,
        horizon,
        PrivacyBudget.approx(eps, 1e-6),
        release_prefix=release_id_for("continual", GlobalWindow(), 0),
        sketch=sketch,
        algorithm=algorithm,
        # The command's transform uses the first application key of its seeded source.
        noise_source=NoiseSource.insecure_for_tests(TEST_SEED).for_application(),
    )
    out = []
    for t in times:
        core.update_batch(keys[core.t : t])
        out.append(
            {"t": t, "estimates": dict(zip(queries, core.estimate(queries).tolist(), strict=True))}
        )
    return out


def _base(path, horizon, *extra):
    return [
        "continual",
        "--input",
        str(path),
        "--width",
        "64",
        "--horizon",
        str(horizon),
        "--epsilon",
        "0.5",
        "--delta",
        "1e-6",
        "--insecure-test-seed",
        str(TEST_SEED),
        *extra,
    ]


def _series(rows):
    """The long rows of the output (one per time and key) as one record per release time."""
    out: list[dict] = []
    for row in rows:
        assert set(row) == {"time", "key", "estimate"}
        if not out or out[-1]["t"] != row["time"]:
            out.append({"t": row["time"], "estimates": {}})
        out[-1]["estimates"][row["key"]] = row["estimate"]
    return out


def _close(got, expected):
    assert [r["t"] for r in got] == [r["t"] for r in expected]
    for g, e in zip(got, expected, strict=True):
        assert g["estimates"].keys() == e["estimates"].keys()
        for key, value in e["estimates"].items():
            assert g["estimates"][key] == pytest.approx(round(value, 2), abs=0.006)


@pytest.fixture
def csv_file(tmp_path):
    keys = _keys(1200)
    path = tmp_path / "routes.csv"
    # ts runs backwards in blocks, so sorting by it reverses the blocks (ties keep file order).
    path.write_text(
        "route,ts\n" + "".join(f"{k},{(len(keys) - i) // 100}\n" for i, k in enumerate(keys))
    )
    return path, keys


def test_csv_file_order_json_equals_core(csv_file, capsys):
    path, keys = csv_file
    code = main(
        _base(path, 1500, "--column", "route", "--release-every", "250", "--query", "k1", "k2")
        + ["--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    envelope = json.loads(out)
    got = _series(envelope["rows"])
    _close(got, _expected(keys, ["k1", "k2"], [250, 500, 750, 1000], horizon=1500))
    assert envelope["parameters"]["time_column"] is None  # file order
    # The stated guarantee is replace-one with public positions, never add/remove.
    guarantee = envelope["guarantee"]
    assert guarantee.startswith("(eps=0.5, delta=1e-06)-DP in total")
    assert "neighbouring relation: replace the key of one arrival" in guarantee
    assert "add/remove is not covered" in guarantee


def test_time_column_sorts_rows_stably(csv_file, capsys):
    path, keys = csv_file
    code = main(
        _base(path, 1200, "--column", "route", "--release-every", "400", "--query", "k1")
        + ["--time-column", "ts", "--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    times = [(len(keys) - i) // 100 for i in range(len(keys))]
    ordered = [keys[i] for i in np.argsort(times, kind="stable")]
    assert ordered != keys
    # t = T = 1200 is released too (it is also a multiple of 400 here).
    envelope = json.loads(out)
    assert envelope["parameters"]["time_column"] == "ts"
    _close(_series(envelope["rows"]), _expected(ordered, ["k1"], [400, 800, 1200], horizon=1200))


def test_parquet_int_keys_table_default_schedule_and_plot(tmp_path, capsys):
    rng = np.random.default_rng(4)
    keys = (rng.zipf(1.5, 2000) % 50).astype(np.int64)
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": keys}), path, row_group_size=300)
    plot = tmp_path / "series.png"
    code = main(
        _base(path, 2000, "--column", "id", "--sketch", "count-sketch", "--query", "1", "2")
        + ["--plot", str(plot)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("# DP continual estimates of column 'id'")
    assert lines[1].startswith("# guarantee: (eps=0.5, delta=1e-06)-DP in total")
    assert lines[3].split() == ["time", "key", "estimate"]
    rows = [line.split() for line in lines[5:]]
    # Default schedule: every ceil(T/20) = 100 rows; one row per (time, key), keys in query order.
    every = math.ceil(2000 / 20)
    times = list(range(every, 2001, every))
    expected = _expected(keys, [1, 2], times, sketch="count-sketch", horizon=2000)
    assert [int(r[0]) for r in rows] == [t for t in times for _ in (1, 2)]
    assert [r[1] for r in rows] == ["1", "2"] * len(times)
    for (row1, row2), e in zip(zip(rows[::2], rows[1::2], strict=True), expected, strict=True):
        assert float(row1[2]) == pytest.approx(round(e["estimates"][1], 2), abs=0.006)
        assert float(row2[2]) == pytest.approx(round(e["estimates"][2], 2), abs=0.006)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_input_punctual(tmp_path, capsys):
    keys = _keys(300, seed=2)
    path = tmp_path / "keys.txt"
    path.write_text("".join(k + "\n" for k in keys))
    code = main(
        _base(path, 300, "--algorithm", "punctual", "--release-every", "100", "--query", "k0")
        + ["--format", "json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    expected = _expected(keys, ["k0"], [100, 200, 300], algorithm="punctual", horizon=300)
    _close(_series(json.loads(out)["rows"]), expected)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--horizon", "1000"], "beyond the declared horizon T=1000"),
        (["--column", "nope"], "column 'nope' not found"),
        (["--epsilon", "1.5", "--calibration", "paper"], "epsilon must be < 1"),
        (["--time-column", "missing"], "column 'missing' not found"),
    ],
)
def test_errors_exit_2_with_one_line(csv_file, capsys, extra, message):
    path, _ = csv_file
    args = _base(path, 1500, "--query", "k1")
    args += ["--column", "route"] if "--column" not in extra else []
    args += extra
    code = main(args)
    _, err = capsys.readouterr()
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("beam-dpsketch continual: error:")
    assert message in last


def test_int_query_on_string_column_is_kept_as_string(csv_file, capsys):
    # CSV keys are strings, so "--query 5" queries the key "5" (absent: estimate near 0).
    path, _ = csv_file
    code = main(_base(path, 1500, "--column", "route", "--query", "5", "--format", "json"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert list(_series(json.loads(out)["rows"])[0]["estimates"]) == ["5"]
