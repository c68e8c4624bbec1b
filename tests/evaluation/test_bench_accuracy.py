"""Smoke tests of the accuracy benchmark's adapters (``benchmarks/bench_accuracy.py``).

The benchmark scores PipelineDP from its engine's post-aggregation steps applied to the exact
histogram, and our heavy-hitter releases from the transforms' own CombineFns and release
mechanisms driven without Beam. These tests check both shortcuts against the real thing: the
full PipelineDP engine on the stream, and ``DPHistogram`` on the in-process FnApiRunner.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from beam_dpsketch.noise import NoiseStream
from reproduction import datasets


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("pipeline_dp")
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import bench_accuracy

    return bench_accuracy


def test_pipelinedp_histogram_path_matches_its_engine(bench):
    keys = [0] * 300 + [1] * 40 + list(range(10, 60))
    items, f = datasets.exact_counts(np.array(keys, dtype=np.int64))
    trials = 60
    kept: dict[str, list[float]] = {"engine": [], "histogram": []}
    big: dict[str, list[float]] = {"engine": [], "histogram": []}
    for _ in range(trials):
        for name, (rk, rv) in (
            ("engine", bench.pipelinedp_full(np.array(keys, dtype=np.int64), 1.0)[:2]),
            ("histogram", bench.pipelinedp_from_histogram(items, f, 1.0, 1e-6)),
        ):
            got = dict(zip(rk.tolist(), rv.tolist(), strict=True))
            # Partition selection keeps the count-300 key and drops every singleton.
            assert 0 in got and not set(got) & set(range(10, 60)), name
            kept[name].append(float(1 in got))
            big[name].append(got[0] - 300)
    # Same selection and the same Laplace noise (scale 2/eps: eps/2 goes to the count, std 2.83).
    assert abs(np.mean(kept["engine"]) - np.mean(kept["histogram"])) < 0.25
    for name in big:
        assert 1.8 < float(np.std(big[name])) < 4.2, name


def test_pipelinedp_public_partitions_release_every_declared_key(bench):
    items, f = np.array([0, 1, 2], dtype=np.int64), np.array([500, 40, 1])
    rk, rv = bench.pipelinedp_from_histogram(items, f, 1.0, 1e-6, public=np.array([0, 1, 999]))
    got = dict(zip(rk.tolist(), rv.tolist(), strict=True))
    assert sorted(got) == [0, 1, 999]  # the zero-count key too; key 2 was not declared
    assert abs(got[0] - 500) < 30 and abs(got[999]) < 30


def test_score_on_a_known_release(bench):
    items, f = np.array([1, 2, 3, 4]), np.array([100, 50, 20, 5])
    rel_k, rel_v = np.array([1, 3, 9]), np.array([110.0, 15.0, 30.0])
    s = bench.score(rel_k, rel_v, items, f, 2)
    # Reported top-2 = {1, 9}; true top-2 = {1, 2}: one hit, error +10 on key 1.
    assert s["recall"] == 0.5 and s["precision"] == 0.5
    assert s["mae"] == 10.0 and s["bias"] == 10.0 and s["mre"] == pytest.approx(0.1)


@pytest.mark.parametrize("mechanism", ["sequential", "design-b", "select-then-count"])
def test_beam_free_release_equals_the_transform_on_fnapirunner(bench, mechanism, tmp_path):
    from apache_beam.transforms.window import GlobalWindow

    from beam_dpsketch.transforms.heavy_hitters import MECHANISMS
    from beam_dpsketch.transforms.release import release_id_for

    if mechanism not in MECHANISMS:
        pytest.skip(f"{mechanism} is not a mechanism of this tree")
    # 40 distinct keys and k = 64: every sketch is exact, so Beam's batch order cannot change
    # the aggregate. FnApiRunner combines this small file in one accumulator: one segment.
    keys = np.random.default_rng(3).zipf(1.5, 20_000) % 40
    ds = bench.Dataset("t", keys.astype(np.int64), "test")
    k, eps, trial = 64, 1.0, 0
    path = bench._write_parquet(ds.keys, tmp_path, "keys")
    label = "bench-accuracy-test"
    beam_out, _, sources = bench.beam_releases(mechanism, k, path, 1, label, None)

    def streams(e: float, t: int, part: str) -> NoiseStream:
        # The noise of the Beam branch: its application's source, its release ids.
        name, source = sources[(e, t)]
        name = f"{name}/{part}" if part == "selection" else name
        return source.stream(release_id_for(name, GlobalWindow(), 0))

    driver = bench.sketch_layer_driver(mechanism, k, ds, None, {}, streams, segments=1)
    assert driver is not None
    rk, rv = driver[0](eps, trial)
    bk, bv = beam_out[(eps, trial)]
    assert len(rk) > 5
    assert sorted(zip(rk.tolist(), rv.tolist(), strict=True)) == sorted(
        zip(bk.tolist(), bv.tolist(), strict=True)
    )
