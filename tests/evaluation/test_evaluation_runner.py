"""Experiment runner: cell keys, caching and resume, the tidy table, parallel workers."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from reproduction import runner
from reproduction.runner import Experiment, run_experiment

CALLS: list[tuple[int, int]] = []
FAIL_AT: set[int] = set()


def toy(params, seed):
    """Module-level (picklable) experiment function: records its calls in this process."""
    CALLS.append((params["width"], seed))
    if params["width"] in FAIL_AT:
        raise RuntimeError(f"boom at width {params['width']}")
    rng = np.random.default_rng(seed)
    return {"error": 100.0 / params["width"] + rng.random(), "ok": 1}


@pytest.fixture(autouse=True)
def _reset():
    CALLS.clear()
    FAIL_AT.clear()


def make(widths, trials=2, **kw):
    return Experiment(
        name="toy",
        func=toy,
        grid={"width": list(widths), "sketch": ["cms"]},
        metrics=["error", "ok"],
        seeds=(0,),
        trials=trials,
        **kw,
    )


def test_stable_hash_is_sha256_of_canonical_json():
    obj = {"b": 1, "a": [1.5, "x", None, True]}
    text = '{"a":[1.5,"x",null,true],"b":1}'
    assert runner.stable_hash(obj) == hashlib.sha256(text.encode()).hexdigest()
    assert runner.stable_hash({"a": [1.5, "x", None, True], "b": 1}) == runner.stable_hash(obj)
    assert runner.stable_hash({"w": np.int64(3)}) == runner.stable_hash({"w": 3})
    assert runner.stable_hash({"w": 3}) != runner.stable_hash({"w": 3.0})
    with pytest.raises(ValueError):
        runner.stable_hash({"x": float("nan")})
    with pytest.raises(TypeError):
        runner.stable_hash({"x": object()})


def test_derive_seed_is_deterministic_32_bit():
    s = runner.derive_seed(0, 1)
    assert s == runner.derive_seed(0, 1) and 0 <= s < 2**32
    assert len({runner.derive_seed(a, t) for a in range(3) for t in range(3)}) == 9


def test_cells_keys_and_seeds():
    exp = make([8, 16], trials=2)
    cells = exp.cells()
    assert len(cells) == 4 and len({c.key for c in cells}) == 4
    # Common random numbers: the same trial gets the same seed in every grid cell.
    assert cells[0].cell_seed == cells[2].cell_seed != cells[1].cell_seed
    assert [c.key for c in make([8, 16], trials=2).cells()] == [c.key for c in cells]
    assert cells[0].key != make([8, 16], version="2").cells()[0].key


def test_second_run_computes_nothing_and_new_cell_only_runs(tmp_path):
    res = run_experiment(make([8, 16]), tmp_path, progress=False)
    assert (res.computed, res.cached) == (4, 0) and len(CALLS) == 4
    first = res.table
    res = run_experiment(make([8, 16]), tmp_path, progress=False)
    assert (res.computed, res.cached) == (0, 4) and len(CALLS) == 4
    assert res.table.column("error").to_pylist() == first.column("error").to_pylist()
    res = run_experiment(make([8, 16, 32]), tmp_path, progress=False)
    assert (res.computed, res.cached) == (2, 4)
    assert [w for w, _ in CALLS[4:]] == [32, 32]
    assert res.table.num_rows == 6


def test_tidy_table_has_declared_columns(tmp_path):
    exp = make([8, 16], trials=1)
    res = run_experiment(exp, tmp_path, progress=False)
    expected = [
        "experiment",
        "experiment_version",
        "library_version",
        "cell_key",
        "width",
        "sketch",
        "seed",
        "trial",
        "cell_seed",
        "error",
        "ok",
        "elapsed_s",
        "finished_at",
    ]
    assert exp.columns == expected
    assert res.table.column_names == expected
    assert res.table.column("width").to_pylist() == [8, 16]
    assert set(res.table.column("library_version").to_pylist()) == {runner.library_version()}
    on_disk = pq.read_table(res.parquet_path)
    assert on_disk.column_names == expected and on_disk.num_rows == 2
    assert pacsv.read_csv(res.csv_path).num_rows == 2
    assert not (tmp_path / "toy.journal.jsonl").exists()


def test_crash_keeps_finished_cells_and_resume_runs_the_rest(tmp_path):
    FAIL_AT.add(16)
    with pytest.raises(RuntimeError, match="boom"):
        run_experiment(make([8, 16, 32], trials=1), tmp_path, progress=False)
    journal = tmp_path / "toy.journal.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [r["width"] for r in rows] == [8]
    journal.write_text(journal.read_text() + '{"cell_key": "trunc')  # a line cut by a crash
    FAIL_AT.clear()
    CALLS.clear()
    res = run_experiment(make([8, 16, 32], trials=1), tmp_path, progress=False)
    assert [w for w, _ in CALLS] == [16, 32]
    assert (res.computed, res.cached) == (2, 1)
    assert runner.load_results(tmp_path, "toy").num_rows == 3


def test_declaration_errors(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        Experiment("x", toy, {"seed": [1]}, ["error"])
    with pytest.raises(ValueError, match="distinct"):
        Experiment("x", toy, {"width": [1]}, ["width"])
    with pytest.raises(ValueError, match="name"):
        Experiment("bad name!", toy, {"width": [1]}, ["error"])
    with pytest.raises(ValueError, match="trials"):
        Experiment("x", toy, {"width": [1]}, ["error"], trials=0)
    undeclared = Experiment("y", toy, {"width": [8]}, ["error"])  # toy also returns "ok"
    with pytest.raises(ValueError, match="undeclared"):
        run_experiment(undeclared, tmp_path, progress=False)
    with pytest.raises(ValueError, match="workers"):
        run_experiment(make([8]), tmp_path, workers=0)


def test_explicit_grid_list(tmp_path):
    exp = Experiment(
        "lst",
        toy,
        [{"width": 8, "extra": "a"}, {"width": 16}],
        ["error", "ok"],
    )
    res = run_experiment(exp, tmp_path, progress=False)
    assert res.table.column("extra").to_pylist() == ["a", None]


def test_two_worker_processes_match_one(tmp_path):
    serial = run_experiment(make([8, 16], trials=2), tmp_path / "a", progress=False)
    parallel = run_experiment(make([8, 16], trials=2), tmp_path / "b", workers=5, progress=False)
    assert parallel.computed == 4
    key = lambda t: sorted(zip(t["cell_key"].to_pylist(), t["error"].to_pylist(), strict=True))  # noqa: E731
    assert key(serial.table) == key(parallel.table)
    assert serial.table["cell_key"].to_pylist() == parallel.table["cell_key"].to_pylist()


def test_progress_bar(tmp_path, capsys):
    pytest.importorskip("tqdm")
    run_experiment(make([8], trials=1), tmp_path, progress=True)
    assert "toy" in capsys.readouterr().err
