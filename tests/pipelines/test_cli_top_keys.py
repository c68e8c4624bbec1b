"""``top-keys``: the most frequent keys of a column with no key list, whole input or per window."""

from __future__ import annotations

import json

from tests.pipelines.test_cli import run_cli


def _top(path, extra, capsys, seed=5):
    return run_cli(
        ["top-keys", "--input", str(path), "--column", "route", "--epsilon", "1"]
        + ["--delta", "1e-6", "--format", "json", "--insecure-test-seed", str(seed), *extra],
        capsys,
    )


def test_top_keys_of_a_column_with_no_key_list(tmp_path, capsys):
    path = tmp_path / "events.csv"
    heavy = {"LAX-SFO": 900, "JFK-BOS": 700, "ORD-DEN": 500}
    tail = [f"R{i:04d}" for i in range(300)]
    lines = [k for k, n in heavy.items() for _ in range(n)] + tail
    path.write_text("route\n" + "\n".join(lines) + "\n")
    code, out, err = _top(path, ["--k", "3", "--width", "256", "--max-key-bytes", "8"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"] == "dp-prefix-tree/count-sketch"
    assert doc["parameters"]["k"] == 3 and doc["parameters"]["beam"] == 96
    rows = doc["rows"]
    assert [r["key"] for r in rows] == list(heavy)
    for r in rows:
        assert 0 < r["error_bound"] < 200
        assert abs(r["estimate"] - heavy[r["key"]]) <= r["error_bound"] + 1


def test_top_keys_per_fixed_window(tmp_path, capsys):
    # Two hours of events: each hour's release names that hour's heavy keys.
    path = tmp_path / "events.csv"
    rows = [("A", 10)] * 600 + [("B", 20)] * 300 + [("B", 3700)] * 700 + [("C", 3800)] * 400
    path.write_text("route,ts\n" + "".join(f"{k},{t}\n" for k, t in rows))
    extra = ["--k", "2", "--width", "128", "--max-key-bytes", "4"]
    extra += ["--window-size", "3600", "--time-column", "ts", "--release-range", "0", "7200"]
    code, out, err = _top(path, extra, capsys)
    assert code == 0, err
    got = json.loads(out)["rows"]
    by_window: dict[float, list[str]] = {}
    for r in got:
        by_window.setdefault(r["time"], []).append(r["key"])
    assert by_window == {0.0: ["A", "B"], 3600.0: ["B", "C"]}
    code, out, err = _top(path, ["--window-size", "3600"], capsys)
    assert code != 0 and "--time-column" in err


def test_windows_are_refused_on_dask_before_anything_starts(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("route,ts\nA,1\n")
    extra = ["--window-size", "3600", "--time-column", "ts", "--runner", "dask"]
    code, _, err = _top(path, [*extra, "--dask-workers", "1"], capsys)
    assert code != 0 and "top-keys --window-size" in err
