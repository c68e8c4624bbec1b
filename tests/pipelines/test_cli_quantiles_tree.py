"""``beam-dpsketch quantiles`` on a wide range: the default tree, its options, its accuracy."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from beam_dpsketch.pipelines.cli import main

LOWER, UPPER = 874_000_000, 894_000_000


def _run(path, capsys, *extra):
    code = main(
        [
            "quantiles",
            "--input",
            str(path),
            "--column",
            "ts",
            "--q",
            "0.1",
            "0.5",
            "0.9",
            "--lower",
            str(LOWER),
            "--upper",
            str(UPPER),
            "--epsilon",
            "1",
            "--format",
            "json",
            "--insecure-test-seed",
            "5",
            "--runner=FnApiRunner",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_wide_range_default_tree_and_its_options(tmp_path, capsys):
    rng = np.random.default_rng(2)
    values = LOWER + 2_000_000 + rng.integers(0, 15_000_000, 50_000)
    path = tmp_path / "ts.parquet"
    pq.write_table(pa.table({"ts": values}), path)
    ordered = np.sort(values)

    default = _run(path, capsys)
    params = default["parameters"]
    assert (params["branching"], params["exact_nodes"], params["leaf_bits"]) == (32, 1 << 15, 10)
    for row in default["rows"]:
        rank = np.searchsorted(ordered, row["value"], side="right") / len(values)
        # Noise of scale 3 on at most 93 nodes and leaves of about 3 items: far below 0.5 %.
        assert abs(rank - row["quantile"]) < 0.005

    paper = _run(path, capsys, "--branching", "2", "--leaf-bits", "0")
    params = paper["parameters"]
    assert (params["branching"], params["leaf_bits"]) == (2, 0)
    assert len(paper["rows"]) == 3
