"""``frequencies --query``: keys named before the run are counted exactly by default."""

from __future__ import annotations

import json

from tests.pipelines.test_cli import run_cli


def _freq(path, extra, capsys, seed):
    return run_cli(
        ["frequencies", "--input", str(path), "--column", "browser", "--epsilon", "1"]
        + ["--format", "json", "--insecure-test-seed", str(seed), *extra],
        capsys,
    )


def test_query_keys_on_the_command_line_are_counted_exactly(tmp_path, capsys):
    # 40 keys of 25 rows each fill a 64-wide, 3-deep sketch: a sketch estimate carries the
    # other keys' weight (hundreds), an exact count only the discrete Laplace noise of scale 1.
    path = tmp_path / "events.csv"
    keys = [f"k{i}" for i in range(40)]
    path.write_text("browser\n" + "".join(f"{k}\n" * 25 for k in keys))
    code, out, err = _freq(path, ["--query", *keys[:10], "absent"], capsys, 3)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"] == "dp-counts/public-keys"
    assert doc["parameters"]["queries"] == "keys"
    rows = doc["rows"]
    assert [r["key"] for r in rows] == [*keys[:10], "absent"]
    truth = {**dict.fromkeys(keys, 25), "absent": 0}
    # Scale-1 discrete Laplace: every error of 11 draws within 12 (failure < 1e-4).
    assert all(abs(r["estimate"] - truth[r["key"]]) <= 12 for r in rows)
    assert {r["error_bound"] for r in rows} == {3.0}
    # A sketch option asks the sketch to answer the same keys (with its collision error).
    code, out, err = _freq(
        path, ["--width", "64", "--depth", "3", "--query", *keys[:10]], capsys, 3
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["parameters"]["sketch"] == "count-sketch"
    assert doc["mechanism"].startswith("dp-linear/")


def test_a_candidates_file_is_counted_exactly_unless_a_sketch_option_is_given(tmp_path, capsys):
    # A --candidates file is known before the run like --query keys: exact counts, every
    # candidate released, largest first with --top; a sketch option brings the sketch back.
    path = tmp_path / "events.csv"
    keys = [f"k{i}" for i in range(40)]
    path.write_text("browser\n" + "".join(f"{k}\n" * (10 + i) for i, k in enumerate(keys)))
    cands = tmp_path / "candidates.txt"
    cands.write_text("\n".join([*keys[-5:], "absent"]) + "\n")
    code, out, err = _freq(path, ["--candidates", str(cands), "--top", "3"], capsys, 4)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"] == "dp-counts/public-keys"
    assert doc["parameters"]["queries"] == "candidates"
    truth = {k: 10 + i for i, k in enumerate(keys)}
    rows = doc["rows"]
    assert len(rows) == 3
    assert all(r["key"] in keys[-5:] for r in rows)
    assert all(abs(r["estimate"] - truth[r["key"]]) <= 12 for r in rows)
    code, out, err = _freq(
        path, ["--candidates", str(cands), "--width", "64", "--depth", "3"], capsys, 4
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mechanism"].startswith("dp-linear/")
