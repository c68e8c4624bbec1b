"""``DPQuantiles(output="tree")``: the released tree itself, the same release as the answers.

The tree a pipeline releases answers the declared quantiles exactly as the default output does
(same noise key and release id), it is the single-machine release of the same data, and two
pipelines' trees sum with ``merge_released`` into answers over the union.
"""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from collect import DumpToFile

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.linear import merge_released
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms import DPQuantiles
from beam_dpsketch.transforms.quantiles import QuantileTree

QS = [0.1, 0.5, 0.9]
TREE = QuantileTree(branching=8, width=64, depth=3, seed=5)


def _run(values, output, seed, tmp_path, name):
    dump = DumpToFile(str(tmp_path / name))
    t = DPQuantiles(
        QS,
        0,
        4095,
        PrivacyBudget.pure(1.0),
        tree=TREE,
        noise_source=NoiseSource.insecure_for_tests(seed),
        label="q",
        output=output,
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        assert_that(p | beam.Create(values.tolist()) | t, dump)
    return dump.load()


def test_tree_output_answers_as_the_records_and_merges(tmp_path):
    rng = np.random.default_rng(1)
    halves = [rng.integers(0, 3000, 4000), rng.integers(1000, 4096, 4000)]
    trees = []
    for i, values in enumerate(halves):
        records = _run(values, "quantiles", 40 + i, tmp_path, f"r{i}")
        (tree,) = _run(values, "tree", 40 + i, tmp_path, f"t{i}")
        assert isinstance(tree, PrivateDyadicCountSketch)
        assert tree.quantiles(QS).tolist() == [r.value for r in records]
        trees.append(tree)
    merged = merge_released(trees)
    union = np.sort(np.concatenate(halves))
    for q, v in zip(QS, merged.quantiles(QS), strict=True):
        assert abs(np.searchsorted(union, v, side="right") / len(union) - q) < 0.02


def test_output_must_be_named():
    with pytest.raises(ValueError, match="output"):
        DPQuantiles(QS, 0, 4095, PrivacyBudget.pure(1.0), output="sketch")
