"""``beam-dpsketch merge``: two separate pipeline runs publish DP sketches; a merge answers over
the union.

Two organisations hold disjoint halves of one event file. Each runs ``beam-dpsketch frequencies``
on its half (FnApiRunner, its own noise key) and publishes the released sketch with
``--sketch-output``. ``beam-dpsketch merge`` reads the two files and answers key queries over the
union: every answer must lie within the stated merged noise bound of the exact union counts (the
sketch is wide enough that no query key collides, which the test checks). Files made with another
hash seed or width are refused naming the parameter, and exact (non-private) sketches too.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_dpsketch.pipelines.cli import main
from beam_dpsketch.sketches import CountSketch

WIDTH, DEPTH, SEED = 4096, 3, 3
KEYS = [f"page-{i}" for i in range(25)]


def _halves(tmp_path):
    rng = np.random.default_rng(29)
    weights = 1.0 / np.arange(1, len(KEYS) + 1)
    events = rng.choice(KEYS, size=20_000, p=weights / weights.sum()).tolist()
    paths = []
    for i, half in enumerate((events[:12_000], events[12_000:])):
        path = tmp_path / f"org{i}.parquet"
        pq.write_table(pa.table({"page": half}), path)
        paths.append(path)
    return events, paths


def _publish(path, out, capsys, *, noise_seed, width=WIDTH, seed=SEED, extra=()):
    code = main(
        [
            "frequencies",
            "--input",
            str(path),
            "--column",
            "page",
            "--sketch",
            "count-sketch",
            "--width",
            str(width),
            "--depth",
            str(DEPTH),
            "--seed",
            str(seed),
            "--query",
            KEYS[0],
            "--epsilon",
            "1",
            "--sketch-output",
            str(out),
            "--insecure-test-seed",
            str(noise_seed),
            "--format",
            "json",
            "--runner=FnApiRunner",
            *extra,
        ]
    )
    _, err = capsys.readouterr()
    assert code == 0, err
    assert out.exists()


def _merge(capsys, *argv):
    code = main(["merge", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_two_separate_runs_merge_and_answer_over_the_union(tmp_path, capsys):
    events, (first, second) = _halves(tmp_path)
    a, b = tmp_path / "org0.dpsk", tmp_path / "org1.dpsk"
    _publish(first, a, capsys, noise_seed=1)
    _publish(second, b, capsys, noise_seed=2)
    code, out, err = _merge(
        capsys, a, b, "--data-sets", "disjoint", "--keys", *KEYS, "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    params = doc["parameters"]
    assert params["releases"] == 2 and params["kind"] == "PrivateCountSketch"
    assert "eps=1 (pure DP) for the 2 contributing data sets" in doc["guarantee"]
    exact = Counter(events)
    # No query key collides with another key in a majority of rows: the exact sketch of the
    # union answers every key exactly, so the merged noise is the only error.
    union = CountSketch(WIDTH, DEPTH, SEED)
    union.update(events)
    assert union.estimate(KEYS).tolist() == [exact[k] for k in KEYS]
    rows = {row["key"]: row for row in doc["rows"]}
    assert list(rows) == KEYS
    for key in KEYS:
        assert abs(rows[key]["estimate"] - exact[key]) <= params["noise_bound"]
        assert rows[key]["error_bound"] > 0
    # Overlapping data sets: the guarantee is the sum.
    code, out, err = _merge(
        capsys, a, b, "--data-sets", "overlapping", "--keys", KEYS[0], "--format", "json"
    )
    assert code == 0, err
    assert "eps=2 (pure DP) for the 2 contributing data sets" in json.loads(out)["guarantee"]


@pytest.mark.parametrize(("option", "value"), [("seed", SEED + 1), ("width", WIDTH // 2)])
def test_merge_refuses_another_seed_or_width(tmp_path, capsys, option, value):
    _, (first, second) = _halves(tmp_path)
    a, b = tmp_path / "a.dpsk", tmp_path / "b.dpsk"
    _publish(first, a, capsys, noise_seed=1)
    _publish(second, b, capsys, noise_seed=2, **{option: value})
    code, out, err = _merge(capsys, a, b, "--data-sets", "disjoint", "--keys", KEYS[0])
    assert code == 2 and out == ""
    assert option in err and "page-" not in err


def test_merge_refuses_exact_sketches_and_needs_a_declaration(tmp_path, capsys):
    _, (first, second) = _halves(tmp_path)
    exact = tmp_path / "exact.bin"
    code = main(
        [
            "sketch",
            "--input",
            str(first),
            "--column",
            "page",
            "--save-sketch",
            str(exact),
            "--runner=FnApiRunner",
        ]
    )
    capsys.readouterr()
    assert code == 0
    code, _, err = _merge(capsys, exact, exact, "--data-sets", "disjoint", "--keys", "x")
    assert code == 2 and "CountMinSketch, which merge cannot sum" in err
    # The declaration decides the stated guarantee: it is never assumed.
    with pytest.raises(SystemExit) as info:
        main(["merge", str(exact), str(exact), "--keys", "x"])
    assert info.value.code == 2 and "--data-sets" in capsys.readouterr().err


def test_merge_answers_quantiles_over_released_trees(tmp_path, capsys):
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.sketches import DyadicCountSketch
    from beam_dpsketch.sketches.linear import merge_released
    from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch

    rng = np.random.default_rng(4)
    parts = [rng.integers(0, 3000, 20_000), rng.integers(1000, 4096, 20_000)]
    paths = []
    for i, values in enumerate(parts):
        tree = DyadicCountSketch(0, 4095, width=64, depth=3, seed=9, branching=4)
        tree.update(values)
        source = NoiseSource.insecure_for_tests(10 + i)
        released = PrivateDyadicCountSketch.release(
            tree, PrivacyBudget.zcdp(0.5), source.stream("q")
        )
        path = tmp_path / f"tree{i}.dpsk"
        path.write_bytes(released.to_bytes())
        paths.append(path)
    code, out, err = _merge(
        capsys,
        *paths,
        "--data-sets",
        "overlapping",
        "--quantiles",
        "0.5",
        "0.9",
        "--format",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert "rho=1 (zCDP)" in doc["guarantee"]  # overlapping: 0.5 + 0.5
    # The command answers what the Python merge answers, and close to the union's quantiles.
    merged = merge_released(
        [PrivateDyadicCountSketch.from_bytes(p.read_bytes()) for p in paths], disjoint=False
    )
    assert [row["value"] for row in doc["rows"]] == merged.quantiles([0.5, 0.9]).tolist()
    union = np.sort(np.concatenate(parts))
    for row in doc["rows"]:
        rank = np.searchsorted(union, row["value"], side="right") / len(union)
        assert abs(rank - row["quantile"]) < 0.03
    code, _, err = _merge(capsys, *paths, "--data-sets", "disjoint", "--keys", "x")
    assert code == 2 and "--keys" in err


def test_merge_refuses_another_format_version(tmp_path, capsys):
    import zlib

    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.privacy import PrivacyBudget
    from beam_dpsketch.sketches.linear import PrivateCountSketch

    source = NoiseSource.insecure_for_tests(3)
    paths = []
    for i in range(2):
        sketch = CountSketch(64, 3, 1)
        sketch.update(["page-1"] * 5)
        released = PrivateCountSketch.release(sketch, PrivacyBudget.pure(1.0), source.stream(i))
        paths.append(tmp_path / f"s{i}.dpsk")
        paths[-1].write_bytes(released.to_bytes())
    data = bytearray(paths[1].read_bytes())
    data[4:6] = (2).to_bytes(2, "little")  # the format version field, then a valid checksum
    data[-4:] = zlib.crc32(bytes(data[:-4])).to_bytes(4, "little")
    paths[1].write_bytes(bytes(data))
    code, out, err = _merge(capsys, *paths, "--data-sets", "disjoint", "--keys", "page-1")
    assert code == 2 and out == ""
    assert "version" in err and str(paths[1]) in err


def _quantiles(path, capsys, *extra):
    code = main(
        [
            "quantiles",
            "--input",
            str(path),
            "--column",
            "delay",
            "--q",
            "0.25",
            "0.5",
            "0.9",
            "--lower",
            "-100",
            "--upper",
            "1000",
            "--epsilon",
            "1",
            "--format",
            "json",
            "--runner=FnApiRunner",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_quantile_trees_from_two_runs_merge(tmp_path, capsys):
    rng = np.random.default_rng(8)
    delays = [rng.integers(-50, 300, 15_000), rng.integers(0, 900, 15_000)]
    paths, trees = [], []
    for i, values in enumerate(delays):
        path = tmp_path / f"delays{i}.parquet"
        pq.write_table(pa.table({"delay": values}), path)
        paths.append(path)
        trees.append(tmp_path / f"delays{i}.dpsk")
        seed = ("--insecure-test-seed", str(20 + i))
        plain_run = _quantiles(path, capsys, *seed)
        with_tree = _quantiles(path, capsys, *seed, "--sketch-output", str(trees[-1]))
        # Writing the tree changes nothing in the release.
        assert with_tree["rows"] == plain_run["rows"]
    code, out, err = _merge(
        capsys,
        *trees,
        "--data-sets",
        "disjoint",
        "--quantiles",
        "0.25",
        "0.5",
        "0.9",
        "--format",
        "json",
    )
    assert code == 0, err
    union = np.sort(np.concatenate(delays))
    for row in json.loads(out)["rows"]:
        rank = np.searchsorted(union, row["value"], side="right") / len(union)
        assert abs(rank - row["quantile"]) < 0.01
    # A tree over fractional bins would not be read back as values: refused.
    code = main(
        [
            "quantiles",
            "--input",
            str(paths[0]),
            "--column",
            "delay",
            "--q",
            "0.5",
            "--lower",
            "-100",
            "--upper",
            "1000",
            "--epsilon",
            "1",
            "--resolution",
            "0.5",
            "--sketch-output",
            str(tmp_path / "x.dpsk"),
            "--runner=FnApiRunner",
        ]
    )
    assert code == 2 and "--resolution" in capsys.readouterr().err
